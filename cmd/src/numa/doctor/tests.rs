use std::collections::BTreeMap;

use numaresources_api::nrt::well_known::{ATTR_MEMORY_NUMA_MANAGED, ATTR_PODS_FINGERPRINT};
use numaresources_controllers::names;
use serde_json::json;

use super::*;
use crate::numa::fleet::{Age, AgeSource};

/// A node's report: its policy, whether its zones list memory, its fingerprint, its age.
fn report(name: &str, policy: &str, memory: bool, fingerprint: bool, age: u64) -> Report {
    let mut resources = vec![json!({"name": "cpu", "capacity": "8", "allocatable": "8", "available": "8"})];
    if memory {
        resources.push(json!({"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"}));
    }
    let mut attributes = vec![json!({"name": "topologyManagerPolicy", "value": policy})];
    if fingerprint {
        attributes.push(json!({"name": ATTR_PODS_FINGERPRINT, "value": "pfp0v001deadbeefdeadbeef"}));
    }
    let nrt = serde_json::from_value(json!({"metadata": {"name": name}, "attributes": attributes,
        "zones": [{"name": "node-0", "type": "Node", "resources": resources}]}))
    .unwrap();
    Report { nrt, age: Some(Age { seconds: age, source: AgeSource::Reported }) }
}

fn healthy() -> Observed {
    let api_service: DynamicObject = serde_json::from_value(json!({"apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService", "metadata": {"name": API_SERVICE},
        "status": {"conditions": [{"type": "Available", "status": "True"}]}}))
    .unwrap();
    let scheduler: Deployment = serde_json::from_value(json!({"metadata": {"name": "numaresources-scheduler"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "scheduler", "image": SCHEDULER_IMAGE}]}}},
        "status": {"conditions": [{"type": "Available", "status": "True"}]}}))
    .unwrap();
    Observed {
        api_service: Ok(Some(api_service)),
        reports: Ok(vec![report("worker-0", "single-numa-node", true, true, 20)]),
        scheduler: Ok(Some(scheduler)),
        exporters: Ok(vec![exporters("numaresourcesoperator-worker", 3, 3)]),
        exporter_pods: Ok(BTreeMap::from([("worker-0".to_owned(), "Running".to_owned())])),
        node_groups: Ok(Some(vec![GroupNodes {
            pool: "worker".into(),
            nodes: vec!["worker-0".into()],
            refresh_period: None,
        }])),
        kubelets: Ok(BTreeMap::from([("worker-0".to_owned(), Ok(aligned_kubelet()))])),
        scheduler_config: Ok(Some(SchedulerConfig {
            scheduler_name: "topo-aware-scheduler".into(),
            config: Some(rendered_scheduler_config()),
        })),
        apiserver: Ok((Some(apiserver(3)), Some(lease(Some("replica-0"), "replica-1,replica-2")))),
        pod_routing: Ok(Some((true, true))),
        certificates: vec![(names::APISERVER_TLS_SECRET, Ok(Some(certificate(Duration::from_secs(90 * 24 * 3600)))))],
        now: SystemTime::now(),
    }
}

const SCHEDULER_IMAGE: &str = "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.34.7";

/// The configuration the controllers render for a default NUMAResourcesScheduler.
pub(super) fn rendered_scheduler_config() -> String {
    use numaresources_api::operator::NUMAResourcesSchedulerSpec;
    use numaresources_api::operator::defaults::Platform;
    use numaresources_controllers::render::scheduler::{SchedulerSettings, config_yaml};
    let spec = NUMAResourcesSchedulerSpec { scheduler_image: SCHEDULER_IMAGE.into(), ..Default::default() };
    let image = numaresources_api::operator::scheduler_image::identify(SCHEDULER_IMAGE);
    let settings = SchedulerSettings {
        namespace: "numaresources".into(),
        capabilities: image.capabilities,
        guaranteed_qos: false,
        extender_image: "numaresources:test".into(),
    };
    config_yaml(&spec.normalized(Platform::Kubernetes), &settings, 1)
}

/// configz's `kubeletconfig` of a kubelet that aligns (what a real kubelet answers, trimmed).
pub(super) fn aligned_kubelet() -> serde_json::Value {
    json!({"cpuManagerPolicy": "static", "memoryManagerPolicy": "Static", "topologyManagerPolicy": "single-numa-node",
        "reservedSystemCPUs": "0-1", "kubeReserved": {"cpu": "500m"}})
}

fn exporters(name: &str, desired: i32, ready: i32) -> DaemonSet {
    serde_json::from_value(json!({"metadata": {"name": name}, "status": {"desiredNumberScheduled": desired,
        "numberReady": ready, "currentNumberScheduled": desired, "numberMisscheduled": 0}}))
    .unwrap()
}

#[test]
fn exporters_not_ready_fail() {
    let mut observed = healthy();
    observed.exporters = Ok(vec![exporters("numaresourcesoperator-worker", 3, 1)]);
    let (status, detail) = status_of(&observed, "exporters");
    assert_eq!(status, Status::Fail);
    assert!(detail.starts_with("exporters not ready: numaresourcesoperator-worker (1 of 3 ready)"), "{detail}");
    observed.exporters = Ok(Vec::new());
    assert_eq!(status_of(&observed, "exporters").0, Status::Skip);
}

fn apiserver(replicas: i32) -> Deployment {
    serde_json::from_value(json!({"metadata": {"name": names::APISERVER}, "spec": {"replicas": replicas,
        "selector": {}, "template": {}}}))
    .unwrap()
}

fn lease(holder: Option<&str>, in_sync: &str) -> Lease {
    serde_json::from_value(json!({"metadata": {"name": names::APISERVER,
        "annotations": {numaresources_apiserver::replication::IN_SYNC_ANNOTATION: in_sync,
            numaresources_apiserver::replication::FOLLOWER_LAG_ANNOTATION: "replica-1=0,replica-2=3"}},
        "spec": {"holderIdentity": holder}}))
    .unwrap()
}

pub(super) fn certificate(validity: Duration) -> String {
    numaresources_runtime::tls::CertificateAuthority::generate("doctor-test", validity).unwrap().cert_pem().to_owned()
}

fn status_of(observed: &Observed, name: &str) -> (Status, String) {
    let check = checks(observed).into_iter().find(|c| c.name == name).unwrap();
    (check.status, check.detail)
}

#[test]
fn a_healthy_chain_is_all_ok() {
    let checks = checks(&healthy());
    assert!(checks.iter().all(|c| c.status == Status::Ok), "{checks:#?}");
    let text = render_text(&checks, Paint::new(false));
    assert!(text.starts_with("ok    APIService: v1alpha2.topology.node.k8s.io is Available\n"), "{text}");
}

#[test]
fn an_unavailable_or_missing_apiservice_fails_and_a_missing_right_skips() {
    let mut observed = healthy();
    observed.api_service = Ok(Some(
        serde_json::from_value(json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": API_SERVICE}, "status": {"conditions": [{"type": "Available",
            "status": "False", "reason": "MissingEndpoints", "message": "endpoints for service/numaresources-apiserver have no addresses"}]}}))
        .unwrap(),
    ));
    let (status, detail) = status_of(&observed, "APIService");
    assert_eq!(status, Status::Fail);
    assert!(detail.contains("MissingEndpoints"), "{detail}");
    observed.api_service = Ok(None);
    assert_eq!(status_of(&observed, "APIService").0, Status::Fail);
    observed.api_service = Err("forbidden".into());
    assert_eq!(status_of(&observed, "APIService").0, Status::Skip);
}

#[test]
fn stale_or_missing_nrts_fail() {
    let mut observed = healthy();
    observed.reports = Ok(vec![
        report("worker-0", "single-numa-node", true, true, 20),
        report("worker-1", "single-numa-node", true, true, 3_600),
    ]);
    let (status, detail) = status_of(&observed, "NRT freshness");
    assert_eq!(status, Status::Fail);
    assert!(detail.starts_with("1 of 2 NRTs are older than three heartbeats (3m): worker-1 (60m)"), "{detail}");
    observed.reports = Ok(Vec::new());
    assert_eq!(status_of(&observed, "NRT freshness").0, Status::Fail);
}

/// Three heartbeats are the exporters' own: read off their DaemonSets (`--heartbeat`, or the
/// environment), the longest of them; the exporter's default when none says.
#[test]
fn an_nrt_is_stale_after_three_of_the_exporters_own_heartbeats() {
    let with_heartbeat = |args: serde_json::Value, env: serde_json::Value| -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": "numaresourcesoperator-worker"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "rte", "args": args, "env": env}]}}},
            "status": {"desiredNumberScheduled": 1, "numberReady": 1, "currentNumberScheduled": 1,
                       "numberMisscheduled": 0}}))
        .unwrap()
    };
    let mut observed = healthy();
    observed.reports = Ok(vec![report("worker-0", "single-numa-node", true, true, 600)]);
    assert_eq!(status_of(&observed, "NRT freshness").0, Status::Fail, "10m: over 3 x 60s");
    observed.exporters = Ok(vec![with_heartbeat(json!(["rte", "--heartbeat=5m"]), json!([]))]);
    let (status, detail) = status_of(&observed, "NRT freshness");
    assert_eq!(status, Status::Ok, "{detail}");
    assert!(detail.ends_with("none older than three heartbeats (15m)"), "{detail}");
    observed.exporters = Ok(vec![with_heartbeat(json!(["--heartbeat", "2m"]), json!([]))]);
    assert_eq!(status_of(&observed, "NRT freshness").0, Status::Fail, "10m: over 3 x 2m");
    let env = json!([{"name": "NUMARESOURCES_RTE_HEARTBEAT", "value": "4m"}]);
    observed.exporters = Ok(vec![with_heartbeat(json!([]), env)]);
    assert_eq!(status_of(&observed, "NRT freshness").0, Status::Ok, "10m: within 3 x 4m");
    // Turned off: an unchanged node's NRT grows old by design, and is not judged.
    observed.exporters = Ok(vec![with_heartbeat(json!(["--heartbeat=0"]), json!([]))]);
    let (status, detail) = status_of(&observed, "NRT freshness");
    assert_eq!(status, Status::Ok, "{detail}");
    assert!(detail.contains("heartbeat is off"), "{detail}");
    // In the command rather than the arguments.
    let mut in_command = with_heartbeat(json!([]), json!([]));
    let container = &mut in_command.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0];
    container.command = Some(vec!["/bin/numaresources".into(), "rte".into(), "--heartbeat".into(), "1m".into()]);
    observed.exporters = Ok(vec![in_command]);
    assert_eq!(status_of(&observed, "NRT freshness").0, Status::Fail, "10m: over 3 x 1m");
}

#[test]
fn a_policy_the_scheduler_does_not_filter_warns_with_its_consequence() {
    let mut observed = healthy();
    observed.reports = Ok(vec![report("worker-0", "restricted", true, true, 20)]);
    let (status, detail) = status_of(&observed, "Topology Manager policies");
    assert_eq!(status, Status::Warn);
    assert!(detail.contains("worker-0 (restricted)") && detail.contains("TopologyAffinityError"), "{detail}");
}

#[test]
fn nodes_without_memory_per_zone_fail() {
    let mut observed = healthy();
    observed.reports = Ok(vec![report("worker-0", "single-numa-node", false, true, 20)]);
    let (status, detail) = status_of(&observed, "memory per NUMA zone");
    assert_eq!(status, Status::Fail);
    assert!(detail.contains("memory manager is not Static"), "{detail}");
}

#[test]
fn memory_reported_as_the_nodes_total_in_every_zone_warns() {
    let mut observed = healthy();
    let mut node_level = report("worker-0", "single-numa-node", true, true, 20);
    node_level.nrt.zones[0].attributes =
        vec![numaresources_api::nrt::AttributeInfo::new(ATTR_MEMORY_NUMA_MANAGED, "false")];
    observed.reports = Ok(vec![node_level]);
    let (status, detail) = status_of(&observed, "memory per NUMA zone");
    assert_eq!(status, Status::Warn);
    assert!(detail.contains("aligned CPUs but not aligned memory"), "{detail}");
}

#[test]
fn nrts_without_a_fingerprint_warn() {
    let mut observed = healthy();
    observed.reports = Ok(vec![report("worker-0", "single-numa-node", true, false, 20)]);
    assert_eq!(status_of(&observed, "pods fingerprint").0, Status::Warn);
}

#[test]
fn api_server_replicas_without_a_leader_fail_and_followers_out_of_sync_warn() {
    let mut observed = healthy();
    assert_eq!(
        status_of(&observed, "API server replicas"),
        (
            Status::Ok,
            "leader replica-0, 2 of 2 followers in sync (revisions not yet acknowledged: replica-1=0, replica-2=3)"
                .into()
        )
    );
    observed.apiserver = Ok((Some(apiserver(3)), Some(lease(Some("replica-0"), ""))));
    let (status, detail) = status_of(&observed, "API server replicas");
    assert_eq!(status, Status::Warn);
    assert!(detail.contains("the leader acknowledges writes alone"), "{detail}");
    observed.apiserver = Ok((Some(apiserver(3)), Some(lease(None, ""))));
    assert_eq!(status_of(&observed, "API server replicas").0, Status::Fail);
    observed.apiserver = Ok((Some(apiserver(1)), None));
    assert_eq!(status_of(&observed, "API server replicas").0, Status::Ok);
}

#[test]
fn routing_pods_without_the_pod_webhook_fails() {
    let mut observed = healthy();
    observed.pod_routing = Ok(Some((true, false)));
    let (status, detail) = status_of(&observed, "pod routing");
    assert_eq!(status, Status::Fail);
    assert!(detail.contains("pods keep the default scheduler"), "{detail}");
    observed.pod_routing = Ok(Some((false, false)));
    assert_eq!(status_of(&observed, "pod routing").0, Status::Ok);
}

#[test]
fn a_certificate_near_its_expiry_warns_and_an_expired_one_fails() {
    let mut observed = healthy();
    observed.certificates =
        vec![(names::WEBHOOK_TLS_SECRET, Ok(Some(certificate(Duration::from_secs(2 * 24 * 3600)))))];
    let (status, detail) = status_of(&observed, "certificates");
    assert_eq!(status, Status::Warn);
    assert!(detail.starts_with("numaresources-webhook-tls expires in"), "{detail}");
    observed.now = SystemTime::now() + Duration::from_secs(3 * 24 * 3600);
    assert_eq!(status_of(&observed, "certificates").0, Status::Fail);
    observed.certificates = vec![(names::WEBHOOK_TLS_SECRET, Err("forbidden".into()))];
    assert_eq!(status_of(&observed, "certificates").0, Status::Skip);
}

#[test]
fn a_missing_or_unavailable_scheduler_fails() {
    let mut observed = healthy();
    observed.scheduler = Ok(None);
    assert_eq!(status_of(&observed, "scheduler").0, Status::Fail);
    observed.scheduler = Ok(Some(
        serde_json::from_value(json!({"metadata": {"name": "numaresources-scheduler"},
        "status": {"conditions": [{"type": "Available", "status": "False"}]}}))
        .unwrap(),
    ));
    assert_eq!(status_of(&observed, "scheduler").0, Status::Fail);
}

#[test]
fn nodes_of_a_node_group_without_an_exporter_or_an_nrt_fail() {
    let mut observed = healthy();
    let nodes = vec!["worker-0".to_owned(), "worker-1".to_owned(), "worker-2".to_owned()];
    observed.node_groups = Ok(Some(vec![GroupNodes { pool: "worker".into(), nodes, refresh_period: None }]));
    observed.exporter_pods = Ok(BTreeMap::from([
        ("worker-0".to_owned(), "Running".to_owned()),
        ("worker-1".to_owned(), "CrashLoopBackOff".to_owned()),
    ]));
    let (status, detail) = status_of(&observed, "nodes covered");
    assert_eq!(status, Status::Fail);
    assert!(
        detail.starts_with(
            "2 of 3 nodes of the node groups are not covered: worker-1 (exporter CrashLoopBackOff, no NRT), \
             worker-2 (no exporter, no NRT); the scheduler places pods on a node without an NRT as if"
        ),
        "{detail}"
    );
    // Exporter pods that cannot be read: the NRTs alone are checked, and the line says so.
    observed.exporter_pods = Err("pods is forbidden".into());
    let (_, detail) = status_of(&observed, "nodes covered");
    assert!(detail.starts_with("2 of 3 nodes of the node groups are not covered: worker-1 (no NRT)"), "{detail}");
    observed.node_groups =
        Ok(Some(vec![GroupNodes { pool: "worker".into(), nodes: vec!["worker-0".into()], refresh_period: None }]));
    let (status, detail) = status_of(&observed, "nodes covered");
    assert_eq!(status, Status::Ok);
    assert!(detail.ends_with("an NRT (exporter pods not read: pods is forbidden)"), "{detail}");
    observed.node_groups = Ok(None);
    assert_eq!(status_of(&observed, "nodes covered").0, Status::Skip);
    observed.node_groups =
        Ok(Some(vec![GroupNodes { pool: "worker".into(), nodes: Vec::new(), refresh_period: None }]));
    assert_eq!(status_of(&observed, "nodes covered").0, Status::Warn);
}

#[test]
fn kubelets_are_summarized_and_a_missing_right_skips() {
    let mut observed = healthy();
    assert_eq!(
        status_of(&observed, "kubelets"),
        (
            Status::Ok,
            "1 run CPU manager static, memory manager Static, Topology Manager single-numa-node per container \
             (each container on its own NUMA set), CPUs 0-1 reserved (never given to pinned containers)"
                .into()
        )
    );
    observed.kubelets = Err("nodes \"worker-0\" is forbidden: cannot get resource \"nodes/proxy\"".into());
    let (status, detail) = status_of(&observed, "kubelets");
    assert_eq!(status, Status::Skip);
    assert!(detail.contains("the policies the NRTs report are checked above"), "{detail}");
}

#[test]
fn kubelets_that_cannot_align_warn_with_the_consequence() {
    let mut observed = healthy();
    // A kubeadm kubelet's defaults: no CPU, memory or Topology Manager policy.
    let defaults = json!({"kubeReserved": {"cpu": "100m"}});
    observed.reports = Ok(vec![report("worker-0", "none", true, true, 20)]);
    observed.kubelets = Ok(BTreeMap::from([("worker-0".to_owned(), Ok(defaults))]));
    let (status, detail) = status_of(&observed, "kubelets");
    assert_eq!(status, Status::Warn);
    assert!(detail.contains("worker-0: CPU manager none: no container gets exclusive CPUs"), "{detail}");
    assert!(detail.contains("Topology Manager policy none: the kubelet admits pods it cannot align"), "{detail}");
}

/// Reserved CPUs on one zone leave it fewer CPUs to pin: the largest container that aligns there
/// is smaller, and the check says so, from the NRTs' capacity and allocatable.
#[test]
fn reserved_cpus_on_one_zone_are_spelled_out() {
    let mut observed = healthy();
    let zone = |id: u32, allocatable: u32| {
        json!({"name": format!("node-{id}"), "type": "Node", "resources": [
            {"name": "cpu", "capacity": "32", "allocatable": allocatable.to_string(), "available": "8"}]})
    };
    let reported = |policy: &str| {
        let nrt = serde_json::from_value(json!({"metadata": {"name": "worker-0"},
            "attributes": [{"name": "topologyManagerPolicy", "value": policy}],
            "zones": [zone(0, 30), zone(1, 32)]}))
        .unwrap();
        Ok(vec![Report { nrt, age: Some(Age { seconds: 5, source: AgeSource::Reported }) }])
    };
    observed.reports = reported("single-numa-node");
    let (status, detail) = status_of(&observed, "kubelets");
    assert_eq!(status, Status::Ok, "{detail}");
    assert!(
        detail.ends_with(
            "reserved CPUs: NUMA 0 offers 30 of 32 CPUs, so a container asking more than 30 aligns only on NUMA 1 \
             (worker-0)"
        ),
        "{detail}"
    );
    // The kubelets that cannot align say it too, with the settings and who did not answer.
    observed.reports = reported("none");
    let defaults = json!({"kubeReserved": {"cpu": "100m"}});
    observed.kubelets = Ok(BTreeMap::from([
        ("worker-0".to_owned(), Ok(defaults)),
        ("worker-1".to_owned(), Err("no preferred addresses found".into())),
    ]));
    let (status, detail) = status_of(&observed, "kubelets");
    assert_eq!(status, Status::Warn);
    assert!(detail.contains("; 1 run CPU manager none"), "{detail}");
    assert!(detail.contains("reserved CPUs: NUMA 0 offers 30 of 32 CPUs"), "{detail}");
    assert!(detail.ends_with("; did not answer: worker-1 (no preferred addresses found)"), "{detail}");
}

#[test]
fn an_nrt_that_reports_another_policy_than_its_kubelet_runs_fails() {
    let mut observed = healthy();
    let mut pod_scope = aligned_kubelet();
    pod_scope["topologyManagerScope"] = json!("pod");
    observed.kubelets = Ok(BTreeMap::from([("worker-0".to_owned(), Ok(pod_scope))]));
    let (status, detail) = status_of(&observed, "kubelets");
    assert_eq!(status, Status::Fail);
    assert!(
        detail.contains(
            "worker-0 (NRT single-numa-node scope container, kubelet single-numa-node scope pod); \
             the scheduler filters those nodes by the wrong rules"
        ),
        "{detail}"
    );
}

#[test]
fn a_kubelet_that_does_not_answer_warns() {
    let mut observed = healthy();
    observed.kubelets = Ok(BTreeMap::from([
        ("worker-0".to_owned(), Ok(aligned_kubelet())),
        ("worker-1".to_owned(), Err("no preferred addresses found".into())),
    ]));
    let (status, detail) = status_of(&observed, "kubelets");
    assert_eq!(status, Status::Warn);
    assert!(detail.starts_with("1 of 2 kubelets did not answer: worker-1 (no preferred addresses found)"), "{detail}");
}

#[test]
fn the_scheduler_configuration_needs_the_profile_pods_name_and_the_nrt_plugin() {
    let mut observed = healthy();
    let (status, detail) = status_of(&observed, "scheduler configuration");
    assert_eq!(status, Status::Ok, "{detail}");
    assert!(detail.contains("(scheduler-plugins v0.34)"), "{detail}");

    let with = |name: &str, config: Option<String>| Ok(Some(SchedulerConfig { scheduler_name: name.into(), config }));
    observed.scheduler_config = with("numa-scheduler", Some(rendered_scheduler_config()));
    let (status, detail) = status_of(&observed, "scheduler configuration");
    assert_eq!(status, Status::Fail);
    assert!(detail.contains("\"numa-scheduler\": pods naming it stay Pending"), "{detail}");

    // A filter list that drops every default and multiPoint plugin ("*") without naming ours.
    let mut config: serde_json::Value = serde_norway::from_str(&rendered_scheduler_config()).unwrap();
    let filters = config["profiles"][0]["plugins"]["filter"]["enabled"].as_array_mut().unwrap();
    filters.retain(|plugin| plugin["name"] != "NodeResourceTopologyMatch");
    observed.scheduler_config = with("topo-aware-scheduler", Some(serde_norway::to_string(&config).unwrap()));
    let (status, detail) = status_of(&observed, "scheduler configuration");
    assert_eq!(status, Status::Fail, "{detail}");
    assert!(detail.contains("without reading NRTs"), "{detail}");

    observed.scheduler_config = with("topo-aware-scheduler", None);
    assert_eq!(status_of(&observed, "scheduler configuration").0, Status::Fail);
}

#[test]
fn a_scheduler_image_whose_capabilities_are_not_known_warns() {
    let mut observed = healthy();
    let Ok(Some(deployment)) = &mut observed.scheduler else { unreachable!() };
    let pod = deployment.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    pod.containers[0].image = Some("example.com/my-scheduler:latest".into());
    let (status, detail) = status_of(&observed, "scheduler configuration");
    assert_eq!(status, Status::Warn);
    assert!(detail.starts_with("image example.com/my-scheduler:latest is not one whose capabilities are known"));
}

#[test]
fn the_extender_engine_needs_the_extender_beside_kube_scheduler() {
    use numaresources_api::operator::defaults::Platform;
    use numaresources_api::operator::{NUMAResourcesSchedulerSpec, SchedulerEngine};
    use numaresources_controllers::render::scheduler::{SchedulerSettings, config_yaml, deployment};
    let spec = NUMAResourcesSchedulerSpec {
        scheduler_image: "registry.k8s.io/kube-scheduler:v1.33.0".into(),
        engine: Some(SchedulerEngine::Extender),
        ..Default::default()
    }
    .normalized(Platform::Kubernetes);
    let settings = SchedulerSettings {
        namespace: "numaresources".into(),
        capabilities: Default::default(),
        guaranteed_qos: false,
        extender_image: "numaresources:test".into(),
    };
    let mut observed = healthy();
    let mut rendered = deployment(&spec, &settings, 1, "hash", "epoch").unwrap();
    rendered.status =
        Some(serde_json::from_value(json!({"conditions": [{"type": "Available", "status": "True"}]})).unwrap());
    observed.scheduler = Ok(Some(rendered.clone()));
    observed.scheduler_config = Ok(Some(SchedulerConfig {
        scheduler_name: "topo-aware-scheduler".into(),
        config: Some(config_yaml(&spec, &settings, 1)),
    }));
    let (status, detail) = status_of(&observed, "scheduler configuration");
    assert_eq!(status, Status::Ok, "{detail}");
    assert!(
        detail.contains("filtered, scored and bound by the numaresources extender (http://127.0.0.1:8888)"),
        "{detail}"
    );
    // The extender container gone: kube-scheduler calls nothing.
    rendered.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers.truncate(1);
    observed.scheduler = Ok(Some(rendered));
    assert_eq!(status_of(&observed, "scheduler configuration").0, Status::Fail);
}
