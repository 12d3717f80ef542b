//! `kubectl numa doctor --probe`: the conformance check after an install or an upgrade. Per
//! node group, one Guaranteed pod (1 CPU, a little memory, the pause image) for the NUMA-aware
//! scheduler, in a namespace of its own, must be bound to a node whose NRT says it fits, admitted
//! by that node's kubelet (no `TopologyAffinityError`), and shown in the node's NRT (one CPU less
//! available in one zone); once deleted, the NRT must give the CPU back. The namespace is deleted
//! at the end, whatever happened (Ctrl-C included).
//!
//! What it cannot tell apart: another pod landing on the same node at the same moment changes the
//! same numbers. A rerun settles it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use numaresources_api::fit::{Filtered, PodRequests, filter};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_controllers::names;
use serde_json::json;
use tokio::time::Instant;

use super::{Check, GroupNodes, Status};
use crate::numa::style;

/// The image when no node lists a pause image and `--probe-image` is not given.
pub const DEFAULT_PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// How often the probe looks again.
const POLL: Duration = Duration::from_millis(500);
/// The probe pod's CPU (whole: the static CPU manager pins it, so its NRT shows it).
const PROBE_CPU: i64 = 1;
/// The probe pod's memory.
const PROBE_MEMORY: &str = "64Mi";

/// What `--probe` needs.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// The scheduler name pods use.
    pub scheduler_name: String,
    /// `--probe-image`, or None for the pause image the nodes already have.
    pub image: Option<String>,
    /// How long each step may take.
    pub timeout: Duration,
}

/// Probes each node group; one check per group. The namespace is created first and deleted last.
pub async fn probe(client: &kube::Client, groups: &[GroupNodes], settings: &ProbeSettings) -> Vec<Check> {
    let namespace = format!("numaresources-doctor-{}", suffix());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let labels = json!({names::LABEL_NAME: "numaresources-doctor", names::LABEL_PART_OF: "numaresources"});
    let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}});
    let created = match serde_json::from_value::<Namespace>(object) {
        Ok(object) => namespaces.create(&PostParams::default(), &object).await.map_err(|e| e.to_string()),
        Err(error) => Err(error.to_string()),
    };
    if let Err(error) = created {
        return vec![Check::skip("probe", format!("cannot create namespace {namespace}: {error}"))];
    }
    let checks = tokio::select! {
        checks = probe_groups(client, &namespace, groups, settings) => checks,
        _ = tokio::signal::ctrl_c() => vec![Check::skip("probe", "interrupted")],
    };
    // Deleting the namespace deletes a probe pod left behind.
    if let Err(error) = namespaces.delete(&namespace, &DeleteParams::default()).await {
        eprintln!("could not delete namespace {namespace}: {error}; delete it by hand");
    }
    checks
}

async fn probe_groups(
    client: &kube::Client,
    namespace: &str,
    groups: &[GroupNodes],
    settings: &ProbeSettings,
) -> Vec<Check> {
    let mut checks = Vec::new();
    for group in groups {
        let name = format!("probe {}", group.pool);
        let check = match probe_group(client, namespace, group, settings).await {
            Ok(Passed { detail, shown_after }) => match group.refresh_period {
                // The exporter polls within its period (and the probe every POLL): later than
                // both, the scheduler decides on old numbers for that long after each change.
                Some(period) if shown_after > period + 2 * POLL => Check {
                    name: name.into(),
                    status: Status::Warn,
                    detail: format!(
                        "{detail}; the NRT took longer than the node group's refresh period ({})",
                        seconds(period)
                    ),
                    fix: Some(
                        "check the exporter on that node and its logs, and the node group's infoRefreshMode \
                         (Events or PeriodicAndEvents react to pods at once)"
                            .to_owned(),
                    ),
                },
                _ => Check { name: name.into(), status: Status::Ok, detail, fix: None },
            },
            Err(Failed { detail, fix }) => Check { name: name.into(), status: Status::Fail, detail, fix: Some(fix) },
        };
        checks.push(check);
    }
    if checks.is_empty() {
        checks.push(Check::skip("probe", "no node group with nodes to probe"));
    }
    checks
}

/// A probe that went through: what it saw, and how long the NRT took to show the pod.
#[derive(Debug)]
struct Passed {
    detail: String,
    shown_after: Duration,
}

/// Why a probe failed, and what to do.
#[derive(Debug)]
struct Failed {
    detail: String,
    fix: String,
}

fn failed(detail: impl Into<String>, fix: impl Into<String>) -> Failed {
    Failed { detail: detail.into(), fix: fix.into() }
}

async fn probe_group(
    client: &kube::Client,
    namespace: &str,
    group: &GroupNodes,
    settings: &ProbeSettings,
) -> Result<Passed, Failed> {
    if group.nodes.is_empty() {
        return Err(failed("the node group has no node", "check the node group's selector against the nodes' labels"));
    }
    let nrts = Api::<NodeResourceTopology>::all(client.clone());
    let mut before = BTreeMap::new();
    for node in &group.nodes {
        if let Ok(Some(nrt)) = nrts.get_opt(node).await {
            before.insert(node.clone(), nrt);
        }
    }
    let image = match &settings.image {
        Some(image) => image.clone(),
        None => pause_image(client, &group.nodes).await,
    };
    let pod = probe_pod(&group.pool, namespace, &settings.scheduler_name, &image, &group.nodes)
        .map_err(|e| failed(format!("cannot build the probe pod: {e}"), "report this as a bug"))?;
    let requests = PodRequests::from_pod(&pod);
    let fitting: Vec<&String> = before
        .iter()
        .filter(|(_, nrt)| !matches!(filter(&requests, Some(nrt), None), Filtered::Rejected(_)))
        .map(|(node, _)| node)
        .collect();

    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    pods.create(&PostParams::default(), &pod)
        .await
        .map_err(|e| failed(format!("cannot create the probe pod: {e}"), "grant numaresources:doctor-probe"))?;
    let result = follow(&pods, &pod_name, &nrts, &before, &fitting, settings.timeout).await;
    // Deleted in any case; the namespace's deletion is the safety net.
    let _ = pods.delete(&pod_name, &DeleteParams::default().grace_period(0)).await;
    result
}

/// Follows the probe pod from creation through binding, admission and its NRT, then deletes it
/// and waits for the NRT to give its CPU back.
async fn follow(
    pods: &Api<Pod>,
    pod_name: &str,
    nrts: &Api<NodeResourceTopology>,
    before: &BTreeMap<String, NodeResourceTopology>,
    fitting: &[&String],
    timeout: Duration,
) -> Result<Passed, Failed> {
    // 1. Bound.
    let start = Instant::now();
    let node = loop {
        let pod = pods.get(pod_name).await.map_err(|e| failed(format!("the probe pod is gone: {e}"), "rerun"))?;
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            break node;
        }
        if start.elapsed() >= timeout {
            let unschedulable = condition_message(&pod, "PodScheduled");
            return Err(failed(
                format!(
                    "the probe pod was not bound within {}: {}",
                    style::age(timeout.as_secs()),
                    unschedulable.unwrap_or_else(|| "no word from the scheduler".to_owned())
                ),
                "check the NUMA-aware scheduler's pods and logs, and `kubectl numa fit` for this pod's shape",
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    if !before.is_empty() && !fitting.iter().any(|n| **n == node) {
        return Err(failed(
            format!("the probe pod was bound to {node}, whose NRT said it cannot take it"),
            "the scheduler did not filter by the NRT: check its configuration (doctor's scheduler checks) and logs",
        ));
    }
    let bound_after = start.elapsed();

    // 2. Admitted by the kubelet.
    loop {
        let pod = pods.get(pod_name).await.map_err(|e| failed(format!("the probe pod is gone: {e}"), "rerun"))?;
        let status = pod.status.clone().unwrap_or_default();
        match status.phase.as_deref() {
            Some("Running") => break,
            Some("Failed") => {
                return Err(failed(
                    format!(
                        "{node}'s kubelet refused the probe pod: {}: {}",
                        status.reason.unwrap_or_default(),
                        status.message.unwrap_or_default()
                    ),
                    "the scheduler and the kubelet disagree: run doctor's kubelets check and compare the node's NRT \
                     with its kubelet (kubectl numa fit)",
                ));
            }
            _ => {}
        }
        if start.elapsed() >= timeout + bound_after {
            return Err(failed(
                format!("the probe pod on {node} is not Running within {}", style::age(timeout.as_secs())),
                "kubectl describe the probe pod's node: an image it cannot pull (--probe-image), or a kubelet that \
                 does not start pods",
            ));
        }
        tokio::time::sleep(POLL).await;
    }

    // 3. Shown in the node's NRT: one zone offers a CPU less.
    let baseline = before.get(&node).map(zone_cpus).unwrap_or_default();
    let shown_at = Instant::now();
    let zone = wait_for_nrt(nrts, &node, timeout, |now| {
        now.iter()
            .find(|(zone, cpus)| baseline.get(*zone).is_some_and(|was| *cpus + PROBE_CPU * 1000 <= *was))
            .map(|(zone, _)| zone.clone())
    })
    .await
    .ok_or_else(|| {
        failed(
            format!("{node}'s NRT did not show the probe pod's CPU within {}", style::age(timeout.as_secs())),
            "the kubelet pins CPUs only with cpuManagerPolicy static (doctor's kubelets check); otherwise check the \
             exporter on that node and its logs",
        )
    })?;
    let shown_after = shown_at.elapsed();

    // 4. Deleted, the CPU comes back.
    pods.delete(pod_name, &DeleteParams::default().grace_period(0))
        .await
        .map_err(|e| failed(format!("cannot delete the probe pod: {e}"), "grant numaresources:doctor-probe"))?;
    let returned_at = Instant::now();
    let was = baseline.get(&zone).copied().unwrap_or_default();
    wait_for_nrt(nrts, &node, timeout, |now| now.get(&zone).is_some_and(|cpus| *cpus >= was).then_some(()))
        .await
        .ok_or_else(|| {
            failed(
                format!("{node}'s NRT did not give the probe pod's CPU back within {}", style::age(timeout.as_secs())),
                "check the exporter on that node and its logs",
            )
        })?;
    let detail = format!(
        "bound to {node} (its NRT said it fits) in {}, admitted, shown in its NRT ({zone}) after {}, given back after {}",
        seconds(bound_after),
        seconds(shown_after),
        seconds(returned_at.elapsed())
    );
    Ok(Passed { detail, shown_after })
}

/// Polls `node`'s NRT until `seen` finds what it looks for in its zones' available CPU.
async fn wait_for_nrt<T>(
    nrts: &Api<NodeResourceTopology>,
    node: &str,
    timeout: Duration,
    seen: impl Fn(&BTreeMap<String, i64>) -> Option<T>,
) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Ok(Some(nrt)) = nrts.get_opt(node).await
            && let Some(found) = seen(&zone_cpus(&nrt))
        {
            return Some(found);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Each NUMA zone's available CPU, in millicores.
fn zone_cpus(nrt: &NodeResourceTopology) -> BTreeMap<String, i64> {
    numaresources_api::fit::numa_zones(nrt)
        .into_iter()
        .map(|zone| (format!("NUMA {}", zone.id), zone.available.get("cpu").copied().unwrap_or_default()))
        .collect()
}

/// A condition's message, with its reason.
fn condition_message(pod: &Pod, type_: &str) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions.iter().find(|c| c.type_ == type_ && c.status == "False")?;
    Some(format!("{}: {}", condition.reason.clone().unwrap_or_default(), condition.message.clone().unwrap_or_default()))
}

/// The pause image one of `nodes` already holds (what the kubelet runs every pod's sandbox with),
/// else [`DEFAULT_PAUSE_IMAGE`].
async fn pause_image(client: &kube::Client, nodes: &[String]) -> String {
    let api: Api<Node> = Api::all(client.clone());
    for node in nodes.iter().take(3) {
        let Ok(node) = api.get(node).await else { continue };
        let images = node.status.and_then(|s| s.images).unwrap_or_default();
        let pause = images.iter().flat_map(|i| i.names.iter().flatten()).find(|n| n.contains("/pause:"));
        if let Some(pause) = pause {
            return pause.clone();
        }
    }
    DEFAULT_PAUSE_IMAGE.to_owned()
}

/// The probe pod: Guaranteed (requests equal limits), one whole CPU, for the NUMA-aware
/// scheduler, kept to the group's nodes.
fn probe_pod(
    pool: &str,
    namespace: &str,
    scheduler_name: &str,
    image: &str,
    nodes: &[String],
) -> serde_json::Result<Pod> {
    let resources = json!({"cpu": PROBE_CPU.to_string(), "memory": PROBE_MEMORY});
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("probe-{}", dns_label(pool)), "namespace": namespace,
                     "labels": {names::LABEL_NAME: "numaresources-doctor", names::LABEL_PART_OF: "numaresources"}},
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}]}}},
            "containers": [{"name": "probe", "image": image, "imagePullPolicy": "IfNotPresent",
                            "resources": {"requests": resources, "limits": resources}}],
        },
    }))
}

/// `pool` as a DNS label part: lowercase alphanumerics and `-`, at most 50 characters.
fn dns_label(pool: &str) -> String {
    let label: String =
        pool.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(50).collect();
    label.trim_matches('-').to_owned()
}

/// Five hex digits from the clock: two doctors at once get two namespaces.
fn suffix() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    format!("{:05x}", nanos & 0xfffff)
}

fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use numaresources_api::qos::{QosClass, qos_class};

    use super::*;

    #[test]
    fn the_probe_pod_is_guaranteed_for_the_numa_aware_scheduler_on_the_groups_nodes() {
        let nodes = vec!["worker-0".to_owned(), "worker-1".to_owned()];
        let pod = probe_pod("Worker_Pool.A", "ns", "topo-aware-scheduler", DEFAULT_PAUSE_IMAGE, &nodes).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(qos_class(spec), QosClass::Guaranteed);
        assert_eq!(spec.scheduler_name.as_deref(), Some("topo-aware-scheduler"));
        assert_eq!(pod.metadata.name.as_deref(), Some("probe-worker-pool-a"));
        let affinity = serde_json::to_value(&spec.affinity).unwrap();
        let field = &affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
            ["matchFields"][0];
        assert_eq!(field["key"], "metadata.name");
        assert_eq!(field["values"], json!(nodes));
        // The fit rules see one whole CPU: a single-numa-node kubelet pins it.
        let requests = PodRequests::from_pod(&pod);
        assert_eq!(requests.effective().get("cpu"), Some(&1000));
    }
}
