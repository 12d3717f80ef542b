//! Which pods the NUMA-aware scheduler's over-reserve cache holds against a node, inferred from
//! what can be read: the node's NRT (its pods fingerprint and method) and the pods bound to it.
//!
//! The cache subtracts every pod the scheduler placed on a node from every NUMA zone until an
//! NRT arrives whose fingerprint matches the pods bound to the node
//! ([`numaresources_api::fit::overreserve`]). Those pods are the scheduler's memory, not an
//! object; what a reader can tell:
//!
//! - the fingerprint is of the bound pods: the NRT accounts for all of them, and the cache, at
//!   its next resync (every `cacheResyncPeriod`, 5 s by default), reads this NRT as published;
//! - it is of the bound pods less the newest few (not started yet, or started after the
//!   exporter's last report): those are the pods the cache holds against every zone;
//! - no such set explains it (pods gone since the report, or a selection that differs): the
//!   cache holds an older copy less an unknown set of pods, which `fit` cannot reproduce.
//!
//! Only pods the NUMA-aware scheduler placed are subtracted; another scheduler's pod not yet in
//! the NRT instead makes the cache refuse the node (`invalid node topology data`) until the NRT
//! catches up, when it is watched for (`cacheResyncDetection`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use numaresources_api::fit::{PodRequests, Resources, has_exclusive_resources};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::{ANNOTATION_FINGERPRINT, ATTR_PODS_FINGERPRINT, ATTR_PODS_FINGERPRINT_METHOD};
use numaresources_rte::fingerprint::{Fingerprint, FingerprintPod, Method};
use serde::Serialize;

/// The most of a node's newest pods tried as the ones its NRT does not cover yet (a node runs at
/// most a few hundred pods; each try hashes them once).
pub const MAX_PODS_BEHIND: usize = 64;

/// How the node's NRT relates to the pods bound to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum PodSet {
    /// The NRT carries no pods fingerprint: the cache never resyncs it, so it holds every pod
    /// it placed there (taken to be every pod bound there with its name: it cannot be told which
    /// it placed before it last started).
    NoFingerprint {
        /// `namespace/name` of the pods the NUMA-aware scheduler placed (subtracted).
        assumed: Vec<String>,
    },
    /// The fingerprint is of the pods bound to the node: nothing is held against it.
    InSync,
    /// The fingerprint is of the bound pods less these, the newest: the cache holds them.
    Behind {
        /// `namespace/name` of the pods the NUMA-aware scheduler placed (subtracted).
        assumed: Vec<String>,
        /// `namespace/name (scheduler)` of pods other schedulers placed (not subtracted; the
        /// cache may refuse the node meanwhile).
        foreign: Vec<String>,
    },
    /// No set of the newest pods explains the fingerprint.
    Unexplained,
}

/// What the cache holds against a node whose NRT has no pods fingerprint: every pod it placed.
fn held_forever(pods: &[&Pod], scheduler: &str) -> Held {
    let ours: Vec<&&Pod> = pods.iter().filter(|pod| scheduler_of(pod) == scheduler).collect();
    Held {
        pod_set: PodSet::NoFingerprint {
            assumed: ours
                .iter()
                .map(|pod| {
                    let (namespace, name) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref());
                    format!("{}/{}", namespace.unwrap_or_default(), name.unwrap_or_default())
                })
                .collect(),
        },
        requests: ours.iter().map(|pod| PodRequests::from_pod(pod).effective()).collect(),
    }
}

/// The scheduler that placed `pod`.
fn scheduler_of(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler")
}

/// What the cache holds against one node: the verdict on its pod set and the effective
/// requests (thousandths) to take from every zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The pod set's state.
    pub pod_set: PodSet,
    /// Each assumed pod's effective request.
    pub requests: Vec<Resources>,
}

/// The pods bound to each node (phase neither Succeeded nor Failed).
pub fn bound_by_node(pods: &[Pod]) -> BTreeMap<&str, Vec<&Pod>> {
    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for pod in pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()) {
            by_node.entry(node).or_default().push(pod);
        }
    }
    by_node
}

/// A pod as the scheduler's fingerprint selection sees it.
struct Selected<'a> {
    pod: &'a Pod,
    exclusive: bool,
}

impl FingerprintPod for Selected<'_> {
    fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    fn has_exclusive_resources(&self) -> bool {
        self.exclusive
    }
}

/// What the cache holds against the node of `nrt`, bound to `pods`; `scheduler` is the
/// NUMA-aware scheduler's name.
pub fn held(nrt: &NodeResourceTopology, pods: &[&Pod], scheduler: &str) -> Held {
    let nothing = |pod_set| Held { pod_set, requests: Vec::new() };
    let expected = nrt
        .attribute(ATTR_PODS_FINGERPRINT)
        .or_else(|| nrt.metadata.annotations.as_ref()?.get(ANNOTATION_FINGERPRINT).map(String::as_str));
    let Some(expected) = expected.filter(|e| !e.is_empty()) else { return held_forever(pods, scheduler) };
    // The scheduler's Autodetect: the NRT's method, `all` when it names none.
    let method = nrt.attribute(ATTR_PODS_FINGERPRINT_METHOD).and_then(|m| m.parse().ok()).unwrap_or(Method::All);
    let listed: BTreeSet<String> = nrt.zones.iter().flat_map(|z| &z.resources).map(|r| r.name.to_string()).collect();
    let mut selected: Vec<Selected<'_>> = pods
        .iter()
        .map(|pod| Selected { pod, exclusive: has_exclusive_resources(pod, PodRequests::from_pod(pod).qos, &listed) })
        .filter(|pod| method.includes(pod))
        .collect();
    // Oldest first: started pods by start time, then the ones not started yet.
    selected.sort_by_key(|s| {
        let started = s.pod.status.as_ref().and_then(|st| st.start_time.as_ref()).map(|t| t.0);
        (started.is_none(), started, s.pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    for behind in 0..=selected.len().min(MAX_PODS_BEHIND) {
        let covered = &selected[..selected.len() - behind];
        if Fingerprint::from_pods(Method::All, covered).check(expected).is_err() {
            continue;
        }
        if behind == 0 {
            return nothing(PodSet::InSync);
        }
        let (mut assumed, mut foreign, mut requests) = (Vec::new(), Vec::new(), Vec::new());
        for pod in &selected[selected.len() - behind..] {
            let name = format!("{}/{}", pod.namespace(), pod.name());
            let placed_by = scheduler_of(pod.pod);
            if placed_by == scheduler {
                assumed.push(name);
                requests.push(PodRequests::from_pod(pod.pod).effective());
            } else {
                foreign.push(format!("{name} ({placed_by})"));
            }
        }
        return Held { pod_set: PodSet::Behind { assumed, foreign }, requests };
    }
    nothing(PodSet::Unexplained)
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    pub(crate) fn pod(name: &str, cpus: &str, started: Option<&str>, scheduler: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-11-25T10:00:00Z"},
            "spec": {"nodeName": "worker-0", "schedulerName": scheduler, "containers": [
                {"name": "app", "resources": {"limits": {"cpu": cpus, "memory": "1Gi"}}}]},
            "status": {"phase": if started.is_some() { "Running" } else { "Pending" }, "startTime": started}
        }))
        .unwrap()
    }

    pub(crate) fn nrt_covering(pods: &[&str], method: Option<&str>) -> NodeResourceTopology {
        let mut fingerprint = Fingerprint::new();
        for name in pods {
            fingerprint.add("ns", name);
        }
        let mut attributes = vec![json!({"name": ATTR_PODS_FINGERPRINT, "value": fingerprint.sign()})];
        if let Some(method) = method {
            attributes.push(json!({"name": ATTR_PODS_FINGERPRINT_METHOD, "value": method}));
        }
        serde_json::from_value(json!({"metadata": {"name": "worker-0"}, "attributes": attributes, "zones": [
            {"name": "node-0", "type": "Node", "resources": [
                {"name": "cpu", "capacity": "8", "allocatable": "8", "available": "6"},
                {"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"}]}]}))
        .unwrap()
    }

    const OURS: &str = "topo-aware-scheduler";

    #[test]
    fn the_newest_pods_the_fingerprint_misses_are_the_ones_held() {
        let old = pod("old", "2", Some("2026-11-25T10:00:00Z"), OURS);
        let newer = pod("newer", "1", Some("2026-11-25T10:05:00Z"), "default-scheduler");
        let pending = pod("pending", "4", None, OURS);
        let pods = [&pending, &newer, &old];

        assert_eq!(held(&nrt_covering(&["old", "newer", "pending"], None), &pods, OURS).pod_set, PodSet::InSync);
        let behind = held(&nrt_covering(&["old"], None), &pods, OURS);
        assert_eq!(
            behind.pod_set,
            PodSet::Behind {
                assumed: vec!["ns/pending".to_owned()],
                foreign: vec!["ns/newer (default-scheduler)".to_owned()]
            }
        );
        assert_eq!(behind.requests.len(), 1);
        assert_eq!(behind.requests[0]["cpu"], 4_000);
        assert_eq!(held(&nrt_covering(&["gone"], None), &pods, OURS).pod_set, PodSet::Unexplained);
        let mut bare = nrt_covering(&[], None);
        bare.attributes.clear();
        // No fingerprint: the cache never resyncs the node and holds every pod it placed there.
        let forever = held(&bare, &pods, OURS);
        assert_eq!(forever.pod_set, PodSet::NoFingerprint { assumed: vec!["ns/pending".into(), "ns/old".into()] });
        assert_eq!(forever.requests.iter().map(|r| r["cpu"]).collect::<Vec<_>>(), [4_000, 2_000]);
    }

    #[test]
    fn with_exclusive_resources_counts_only_such_pods() {
        let exclusive = pod("exclusive", "2", Some("2026-11-25T10:00:00Z"), OURS);
        // Burstable: no exclusive resource as the scheduler reads it.
        let mut shared = pod("shared", "500m", Some("2026-11-25T10:01:00Z"), OURS);
        shared.spec.as_mut().unwrap().containers[0].resources =
            serde_json::from_value(json!({"requests": {"cpu": "500m"}})).unwrap();
        let fresh = pod("fresh", "2", None, OURS);
        let pods = [&exclusive, &shared, &fresh];
        let method = Some("with-exclusive-resources");
        assert_eq!(held(&nrt_covering(&["exclusive", "fresh"], method), &pods, OURS).pod_set, PodSet::InSync);
        let behind = held(&nrt_covering(&["exclusive"], method), &pods, OURS);
        assert_eq!(behind.pod_set, PodSet::Behind { assumed: vec!["ns/fresh".to_owned()], foreign: Vec::new() });
    }

    #[test]
    fn terminated_and_unbound_pods_are_not_on_a_node() {
        let mut done = pod("done", "1", Some("2026-11-25T10:00:00Z"), OURS);
        done.status.as_mut().unwrap().phase = Some("Succeeded".to_owned());
        let mut unbound = pod("unbound", "1", None, OURS);
        unbound.spec.as_mut().unwrap().node_name = None;
        let running = pod("running", "1", Some("2026-11-25T10:00:00Z"), OURS);
        let all = [done, unbound, running];
        let by_node = bound_by_node(&all);
        assert_eq!(by_node.len(), 1);
        assert_eq!(by_node["worker-0"].len(), 1);
    }
}
