//! Which pods are explained, what their Events say, and how often they go out.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use numaresources_api::fit::explain::ReasonKind;
use numaresources_api::nrt::NodeResourceTopology;
use serde_json::json;

use super::*;

const SCHEDULER: &str = "topo-aware-scheduler";

fn pod(name: &str, cpu: &str, scheduler: &str, node: Option<&str>, refused: bool) -> Arc<Pod> {
    let conditions = if refused {
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/2 nodes are available: 2 cannot align container."}])
    } else {
        json!([])
    };
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"schedulerName": scheduler, "nodeName": node, "containers": [
                {"name": "app", "resources": {"limits": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "conditions": conditions}}))
        .unwrap(),
    )
}

fn nrt(name: &str, cpus: &[i64]) -> Arc<NodeResourceTopology> {
    let zones: Vec<_> = cpus
        .iter()
        .enumerate()
        .map(|(id, cpus)| json!({"name": format!("node-{id}"), "type": "Node", "resources": [
            {"name": "cpu", "capacity": cpus.to_string(), "allocatable": cpus.to_string(), "available": cpus.to_string()},
            {"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"}]}))
        .collect();
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name},
            "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}], "zones": zones}))
        .unwrap(),
    )
}

#[test]
fn only_the_numa_schedulers_refused_unbound_pods_are_explained() {
    assert!(is_unschedulable_for(&pod("a", "4", SCHEDULER, None, true), SCHEDULER));
    assert!(!is_unschedulable_for(&pod("b", "4", "default-scheduler", None, true), SCHEDULER), "another's");
    assert!(!is_unschedulable_for(&pod("c", "4", SCHEDULER, Some("worker-0"), true), SCHEDULER), "bound");
    assert!(!is_unschedulable_for(&pod("d", "4", SCHEDULER, None, false), SCHEDULER), "not tried yet");
}

#[test]
fn a_pending_pod_is_explained_from_every_nrt() {
    let nrts = [nrt("worker-0", &[2, 2]), nrt("worker-1", &[3])];
    let explanation = explain_pod(&pod("dpdk", "4", SCHEDULER, None, true), &nrts, &ScoringStrategyParams::default());
    assert_eq!(
        explanation.message,
        "0/2 nodes can take it on one NUMA zone; \
         worker-1: cpu 3 available < 4 requested by container \"app\" (3 on NUMA 0); \
         worker-0: cpu 2 available < 4 requested by container \"app\" (2 on NUMA 0, 2 on NUMA 1)"
    );
    assert_eq!(explanation.first_reason, Some(ReasonKind::Cpu));
}

#[test]
fn a_pod_gets_one_event_per_change_at_most_once_a_minute_within_the_cluster_wide_budget() {
    let start = Instant::now();
    let mut limiter = Limiter::new(Duration::from_secs(60), 1.0, 2.0);
    assert_eq!(limiter.admit("a", "cpu 2 < 4", start), Admission::Send);
    // The scheduler retries: the same explanation, no new Event, however long after.
    assert_eq!(limiter.admit("a", "cpu 2 < 4", start + Duration::from_secs(5)), Admission::Same);
    assert_eq!(limiter.admit("a", "cpu 2 < 4", start + Duration::from_secs(600)), Admission::Same);
    // An NRT changed what it says: a new Event, once the minute has passed.
    assert_eq!(limiter.admit("a", "cpu 3 < 4", start + Duration::from_secs(30)), Admission::TooSoon);
    assert_eq!(limiter.admit("a", "cpu 3 < 4", start + Duration::from_secs(61)), Admission::Send);

    // The cluster-wide bucket: 2 at once, then 1 a second.
    let mut limiter = Limiter::new(Duration::from_secs(60), 1.0, 2.0);
    let admitted: Vec<Admission> = ["p1", "p2", "p3"].iter().map(|uid| limiter.admit(uid, "x", start)).collect();
    assert_eq!(admitted, [Admission::Send, Admission::Send, Admission::RateLimited]);
    assert_eq!(limiter.admit("p3", "x", start + Duration::from_secs(1)), Admission::Send);

    // A pod gone or placed is forgotten: back again, it is explained at once.
    limiter.forget_except(&HashSet::from(["p2".to_owned()]));
    assert_eq!(limiter.admit("p1", "x", start + Duration::from_secs(3)), Admission::Send);
}

/// Explaining a pod against every NRT is the costly part: a pod is explained again only once its
/// Event could go out again, and only when what it is explained from changed since its Event
/// said it.
#[test]
fn a_pod_is_explained_again_only_after_the_interval_and_only_from_something_new() {
    let start = Instant::now();
    let minute = Duration::from_secs(60);
    let mut limiter = Limiter::new(minute, 5.0, 50.0);
    assert!(limiter.due("a", start, 1));
    limiter.explained("a", start, Some(ReasonKind::Memory));
    assert!(!limiter.due("a", start + Duration::from_secs(59), 2));
    // Not settled (its Event did not go out): explained again after the interval, whatever the basis.
    assert!(limiter.due("a", start + minute, 1));
    limiter.settled("a", 1);
    assert!(!limiter.due("a", start + minute, 1), "its Event says what basis 1 gives");
    assert!(!limiter.due("a", start + 10 * minute, 1), "nothing changed: never explained again");
    assert!(limiter.due("a", start + minute, 2), "something changed");
    assert_eq!(limiter.reasons().collect::<Vec<_>>(), [Some(ReasonKind::Memory)]);
    limiter.forget_except(&HashSet::new());
    assert!(limiter.due("a", start + Duration::from_secs(1), 1), "forgotten: explained at once when back");
    assert_eq!(limiter.reasons().count(), 0);
}

/// The basis changes with any NRT's resourceVersion, an NRT more or less, the scoring, and the
/// pod's requests; not with the order the store lists the NRTs in, nor with the pod's status.
#[test]
fn an_explanations_basis_changes_with_what_the_explanation_reads() {
    let with_version = |name: &str, version: &str| {
        let mut nrt = (*nrt(name, &[4, 4])).clone();
        nrt.metadata.resource_version = Some(version.to_owned());
        Arc::new(nrt)
    };
    let least = ScoringStrategyParams::default();
    let nrts = [with_version("worker-0", "1"), with_version("worker-1", "1")];
    let base = nrts_basis(&nrts, &least);
    let reversed = [nrts[1].clone(), nrts[0].clone()];
    assert_eq!(nrts_basis(&reversed, &least), base, "order");
    assert_ne!(nrts_basis(&[nrts[0].clone(), with_version("worker-1", "2")], &least), base, "a version");
    assert_ne!(nrts_basis(&nrts[..1], &least), base, "an NRT fewer");
    let most = ScoringStrategyParams {
        type_: Some(numaresources_api::operator::ScoringStrategyType::MostAllocated),
        ..ScoringStrategyParams::default()
    };
    assert_ne!(nrts_basis(&nrts, &most), base, "the scoring");

    let pending = pod("dpdk", "4", SCHEDULER, None, true);
    let mut retried = (*pending).clone();
    retried.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].message = Some("tried again".into());
    assert_eq!(basis(base, &pending), basis(base, &retried), "a scheduler retry");
    assert_ne!(basis(base, &pending), basis(base, &pod("dpdk", "6", SCHEDULER, None, true)), "its requests");
    assert_ne!(basis(base, &pending), basis(nrts_basis(&nrts[..1], &least), &pending));
}

#[test]
fn the_gauge_counts_unschedulable_pods_by_first_reason_over_a_fixed_label_set() {
    let metrics = crate::metrics::Metrics::default();
    metrics.set_unschedulable([Some(ReasonKind::Cpu), Some(ReasonKind::Cpu), None]);
    let text = metrics.encode().unwrap();
    assert!(text.contains("numaresources_controllers_unschedulable_pods{reason=\"cpu\"} 2"), "{text}");
    assert!(text.contains("numaresources_controllers_unschedulable_pods{reason=\"none\"} 1"), "{text}");
    assert!(text.contains("numaresources_controllers_unschedulable_pods{reason=\"split\"} 0"), "{text}");
    assert_eq!(text.matches("numaresources_controllers_unschedulable_pods{").count(), reason_labels().count());
}

/// Explaining is held to its share of a core: a pass stops when the budget is spent, and the
/// budget comes back with time, up to its cap.
#[test]
fn explanations_stop_when_their_cpu_budget_is_spent_and_resume_as_it_refills() {
    let start = Instant::now();
    let mut budget = Budget::new(0.01, Duration::from_millis(50));
    assert!(budget.allows(start));
    budget.spend(Duration::from_millis(40));
    assert!(budget.allows(start), "10 ms left");
    budget.spend(Duration::from_millis(30));
    assert!(!budget.allows(start), "20 ms over");
    assert!(!budget.allows(start + Duration::from_secs(1)), "1 s at 1 % gives back 10 ms: still 10 ms over");
    assert!(budget.allows(start + Duration::from_secs(3)));
    // Never more than the cap, however long the quiet.
    budget.spend(Duration::from_millis(1));
    assert!(budget.allows(start + Duration::from_secs(3_600)));
    budget.spend(Duration::from_millis(60));
    assert!(!budget.allows(start + Duration::from_secs(3_600)), "the cap is 50 ms");
}

/// The running controller against the fake API (authorized by the checked-in RBAC): a Pending pod
/// the NUMA-aware scheduler refused gets one NUMAPlacement Event on itself, from the NRTs.
#[tokio::test]
async fn the_running_controller_puts_the_explanation_on_the_pending_pod() {
    let (fake, ctx) = refused_pod_scene();
    crate::fake::run_controller_until(|shutdown| run(ctx.clone(), shutdown), || !fake.events(REASON).is_empty()).await;
    let events = fake.events(REASON);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(events[0]["regarding"]["name"], "dpdk");
    let note = events[0]["note"].as_str().unwrap_or_default();
    assert!(note.starts_with("0/1 nodes can take it on one NUMA zone; worker-0: cpu 3 available < 4"), "{note}");
}

/// The fake API with the NUMAResourcesScheduler, worker-0's NRT (two zones of 3 CPUs) and a
/// Pending pod asking 4 the scheduler refused.
fn refused_pod_scene() -> (crate::fake::FakeApi, Arc<crate::context::Context>) {
    use crate::context::{Context, Settings};
    let (fake, client) = crate::fake::start();
    let ctx = crate::fake::recording(&Context::new(client, Settings::kubernetes("numaresources", "image"), None));
    fake.insert(
        "/apis/nodetopology.openshift.io/v1/numaresourcesschedulers/numaresourcesscheduler",
        json!({"apiVersion": "nodetopology.openshift.io/v1", "kind": "NUMAResourcesScheduler",
               "metadata": {"name": "numaresourcesscheduler"}, "spec": {"imageSpec": "scheduler:1"}}),
    );
    let mut worker = serde_json::to_value(&*nrt("worker-0", &[3, 3])).unwrap();
    worker["apiVersion"] = json!("topology.node.k8s.io/v1alpha2");
    worker["kind"] = json!("NodeResourceTopology");
    fake.insert(WORKER_0, worker);
    let mut pending = serde_json::to_value(&*pod("dpdk", "4", SCHEDULER, None, true)).unwrap();
    pending["apiVersion"] = json!("v1");
    pending["kind"] = json!("Pod");
    fake.insert("/api/v1/namespaces/ns/pods/dpdk", pending);
    (fake, ctx)
}

const WORKER_0: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-0";

/// The cluster-wide budget holds against the fake API: 60 refused pods at once get the burst's
/// 50 Events in the first pass; the other 10 wait for their pods' next minute, when the bucket
/// has refilled.
#[tokio::test(start_paused = true)]
async fn sixty_pending_pods_at_once_get_the_bursts_fifty_events_then_the_rest() {
    let (fake, ctx) = refused_pod_scene();
    for i in 1..60 {
        let name = format!("dpdk-{i}");
        let mut pending = serde_json::to_value(&*pod(&name, "4", SCHEDULER, None, true)).unwrap();
        pending["apiVersion"] = json!("v1");
        pending["kind"] = json!("Pod");
        fake.insert(&format!("/api/v1/namespaces/ns/pods/{name}"), pending);
    }
    let (stop, stopped) = numaresources_runtime::shutdown::Shutdown::manual();
    let running = tokio::spawn(run(ctx.clone(), Box::pin(stopped.signaled())));
    wait_for_events(&fake, EVENT_BURST as usize).await;
    let first = tokio::time::Instant::now();
    // Passes keep running (one at least every 10 s); none of them may publish more yet.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(fake.events(REASON).len(), EVENT_BURST as usize, "{:#?}", fake.events(REASON).len());
    wait_for_events(&fake, 60).await;
    assert!(first.elapsed() >= PER_POD_INTERVAL - Duration::from_secs(3), "after {:?}", first.elapsed());
    let mut regarding: Vec<String> =
        fake.events(REASON).iter().map(|e| e["regarding"]["name"].as_str().unwrap_or_default().to_owned()).collect();
    regarding.sort();
    regarding.dedup();
    assert_eq!(regarding.len(), 60, "one Event per pod");
    stop.fire();
    running.await.unwrap();
}

/// Waits (in the test's paused time) until the fake holds `count` NUMAPlacement Events; the
/// notes, oldest first.
async fn wait_for_events(fake: &crate::fake::FakeApi, count: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while fake.events(REASON).len() < count {
        assert!(tokio::time::Instant::now() < deadline, "{:#?}", fake.events(REASON));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut events = fake.events(REASON);
    events.sort_by_key(|e| e["metadata"]["resourceVersion"].as_str().unwrap_or_default().parse::<u64>().unwrap_or(0));
    events.iter().map(|e| e["note"].as_str().unwrap_or_default().to_owned()).collect()
}

/// Runs in paused time: the minute between two explanations of one pod passes without waiting.
#[tokio::test(start_paused = true)]
async fn a_changed_nrt_gives_a_new_event_at_most_once_a_minute_and_a_retry_gives_none() {
    let (fake, ctx) = refused_pod_scene();
    let (stop, stopped) = numaresources_runtime::shutdown::Shutdown::manual();
    let running = tokio::spawn(run(ctx.clone(), Box::pin(stopped.signaled())));
    let notes = wait_for_events(&fake, 1).await;
    assert!(notes[0].contains("(3 on NUMA 0, 3 on NUMA 1)"), "{notes:?}");

    // The scheduler retries (the pod's status is written again); the NRTs do not change.
    for _ in 0..3 {
        fake.edit("/api/v1/namespaces/ns/pods/dpdk", |pod| {
            pod["status"]["conditions"][0]["lastProbeTime"] = json!(null)
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    assert_eq!(fake.events(REASON).len(), 1, "{:#?}", fake.events(REASON));

    // The NRT changes (a pod took a CPU on NUMA 0): a new Event says so.
    fake.edit(WORKER_0, |nrt| nrt["zones"][0]["resources"][0]["available"] = json!("2"));
    let notes = wait_for_events(&fake, 2).await;
    assert!(notes[1].contains("(2 on NUMA 0, 3 on NUMA 1)"), "{notes:?}");
    let second = tokio::time::Instant::now();

    // It changes again at once: the next Event waits for the pod's minute.
    fake.edit(WORKER_0, |nrt| nrt["zones"][1]["resources"][0]["available"] = json!("1"));
    let notes = wait_for_events(&fake, 3).await;
    assert!(second.elapsed() >= PER_POD_INTERVAL - Duration::from_secs(1), "after {:?}", second.elapsed());
    assert!(notes[2].contains("(2 on NUMA 0, 1 on NUMA 1)"), "{notes:?}");

    stop.fire();
    running.await.unwrap();
}

fn rejected(node: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "dpdk", "namespace": "ns", "uid": "uid-dpdk"},
        "spec": {"schedulerName": SCHEDULER, "nodeName": node, "containers": [
            {"name": "app", "resources": {"limits": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Failed", "reason": "TopologyAffinityError",
                   "message": "Pod was rejected: Resources cannot be allocated with Topology locality"}}))
    .unwrap()
}

#[test]
fn a_topology_affinity_rejection_says_why_the_scheduler_let_the_pod_through() {
    use super::rejected::{explain_rejection, is_topology_rejected_for};
    let pod = rejected("worker-0", "4");
    assert!(is_topology_rejected_for(&pod, SCHEDULER));
    assert!(!is_topology_rejected_for(&pod, "default-scheduler"));
    assert!(!is_topology_rejected_for(&rejected_pending(), SCHEDULER), "not failed");

    let now = 1_800_000_000;
    let none = explain_rejection(&pod, None, now);
    assert!(
        none.contains("worker-0 has no NodeResourceTopology, so the NUMA-aware scheduler let the pod through blindly"),
        "{none}"
    );
    assert!(
        none.starts_with("the kubelet on worker-0 refused the pod (TopologyAffinityError: Pod was rejected"),
        "{none}"
    );

    let mut unfiltered = (*nrt("worker-0", &[8])).clone();
    unfiltered.attributes = vec![numaresources_api::nrt::AttributeInfo::new("topologyManagerPolicy", "restricted")];
    let text = explain_rejection(&pod, Some(&unfiltered), now);
    assert!(text.contains("policy is restricted, which the NUMA-aware scheduler does not filter"), "{text}");

    let mut busy = (*nrt("worker-0", &[2, 2])).clone();
    busy.metadata.annotations = Some(
        [(numaresources_api::nrt::well_known::ANNOTATION_LAST_CHANGE.to_owned(), "2027-01-15T07:58:30Z".to_owned())]
            .into(),
    );
    let changed_at = "2027-01-15T07:58:30Z".parse::<k8s_openapi::jiff::Timestamp>().unwrap().as_second();
    let text = explain_rejection(&pod, Some(&busy), changed_at + 90);
    assert!(text.contains("NRT refuses the pod now (cpu 2 available < 4 requested"), "{text}");
    assert!(text.contains("it changed 90 s ago, so the scheduler decided on older numbers"), "{text}");

    let roomy = nrt("worker-0", &[8]);
    let text = explain_rejection(&pod, Some(&roomy), now);
    assert!(text.contains("NRT says the pod fits on NUMA 0, and the kubelet disagrees"), "{text}");
}

fn rejected_pending() -> Pod {
    let mut pod = rejected("worker-0", "4");
    pod.status.as_mut().unwrap().phase = Some("Pending".into());
    pod
}

#[test]
fn a_rejection_is_told_once() {
    let start = Instant::now();
    let mut limiter = Limiter::new(Duration::from_secs(60), 5.0, 50.0);
    assert_eq!(limiter.admit_once("rejected/a", "why", start), Admission::Send);
    assert_eq!(limiter.admit_once("rejected/a", "why, reworded", start + Duration::from_secs(3_600)), Admission::Same);
    limiter.forget_except(&HashSet::new());
    assert_eq!(
        limiter.admit_once("rejected/a", "why", start + Duration::from_secs(7_200)),
        Admission::Same,
        "not Pending: kept"
    );
}
