//! A pod the kubelet rejected with `TopologyAffinityError` after the NUMA-aware scheduler bound
//! it: why the scheduler let it through, from that node's NRT as it is now.

use k8s_openapi::api::core::v1::Pod;
use numaresources_api::fit::{Filtered, PodRequests, TopologyManagerConfig, evaluate};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::ANNOTATION_LAST_CHANGE;
use numaresources_api::operator::ScoringStrategyParams;

/// The kubelet's status reason for a pod its Topology Manager refused at admission.
pub const TOPOLOGY_AFFINITY_ERROR: &str = "TopologyAffinityError";

/// Whether `pod` is one of `scheduler`'s that the kubelet refused for topology affinity.
pub fn is_topology_rejected_for(pod: &Pod, scheduler: &str) -> bool {
    let ours = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler);
    let status = pod.status.as_ref();
    ours && status.and_then(|s| s.phase.as_deref()) == Some("Failed")
        && status.and_then(|s| s.reason.as_deref()) == Some(TOPOLOGY_AFFINITY_ERROR)
}

/// Why the scheduler bound `pod` to a node whose kubelet refused it; `nrt` is that node's NRT
/// (None: it has none), `now` in Unix seconds.
pub fn explain_rejection(pod: &Pod, nrt: Option<&NodeResourceTopology>, now: i64) -> String {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("its node");
    let kubelet = pod.status.as_ref().and_then(|s| s.message.as_deref()).unwrap_or("no message");
    let prefix = format!("the kubelet on {node} refused the pod ({TOPOLOGY_AFFINITY_ERROR}: {kubelet})");
    let Some(nrt) = nrt else {
        return format!(
            "{prefix}: {node} has no NodeResourceTopology, so the NUMA-aware scheduler let the pod through blindly; \
             check that an exporter runs there"
        );
    };
    let config = TopologyManagerConfig::of(nrt);
    if !config.filters() {
        return format!(
            "{prefix}: {node}'s topology manager policy is {}, which the NUMA-aware scheduler does not filter, so it \
             let the pod through unchecked; keep pods that must be aligned on single-numa-node nodes",
            config.policy
        );
    }
    let age = nrt
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LAST_CHANGE))
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| now.saturating_sub(t.as_second()));
    let requests = PodRequests::from_pod(pod);
    match evaluate(&requests, Some(nrt), None, &ScoringStrategyParams::default()).filtered {
        Filtered::Rejected(rejection) => format!(
            "{prefix}: {node}'s NRT refuses the pod now ({rejection}); it changed {} ago, so the scheduler decided \
             on older numbers",
            age.map_or_else(|| "some time".to_owned(), |seconds| format!("{seconds} s"))
        ),
        Filtered::Fits { placements } => format!(
            "{prefix}: {node}'s NRT says the pod fits on NUMA {}, and the kubelet disagrees: the NRT does not match \
             the kubelet's own accounting, a bug worth reporting with both views (kubectl get nrt {node} -o yaml)",
            placements.first().map_or(0, |p| p.numa)
        ),
        Filtered::Unchecked(unchecked) => format!("{prefix}: the NUMA-aware scheduler did not check it ({unchecked})"),
    }
}
