//! A node's score for a pod, over the NUMA nodes the kubelet would align it on, by the
//! NUMAResourcesScheduler's scoring strategy, on the extender's 0..=10 scale.

use numaresources_api::fit::Resources;
use numaresources_api::fit::kubelet::{Admission, Node};
use numaresources_api::operator::ScoringStrategyType;

use crate::protocol::MAX_EXTENDER_PRIORITY;

/// The score of a node that is `node` before the pod whose effective request is `requested`
/// comes (what it takes of each resource on the NUMA nodes it is aligned on). A placement
/// as narrow as the request allows scores 1..=10 by the strategy (scaled to the NUMA nodes it
/// uses); a wider one (a `best-effort` kubelet spreading the pod), nothing aligned (policy
/// `none`, or a pod the managers leave alone) scores 0: any aligned node is better.
pub fn of(admission: &Admission, node: &Node, requested: &Resources, strategy: Option<&ScoringStrategyType>) -> i64 {
    if !admission.admitted() {
        return 0;
    }
    let mut numa: Vec<u32> = admission.aligned.iter().flat_map(|a| a.numa.iter().flatten().copied()).collect();
    numa.sort_unstable();
    numa.dedup();
    if numa.is_empty() || admission.aligned.iter().any(|a| !a.preferred) {
        return 0;
    }
    // Per resource the pod takes there: the share of the set's allocatable still free after it.
    let free_shares: Vec<f64> = node
        .totals(&numa)
        .into_iter()
        .filter_map(|(resource, total, free)| {
            let taken = requested.get(resource).copied().filter(|taken| *taken > 0 && total > 0)?;
            Some(free.saturating_sub(taken).max(0) as f64 / total as f64)
        })
        .collect();
    if free_shares.is_empty() {
        return 1;
    }
    let mean = free_shares.iter().sum::<f64>() / free_shares.len() as f64;
    let scale = (MAX_EXTENDER_PRIORITY - 1) as f64;
    let score = match strategy {
        Some(ScoringStrategyType::MostAllocated) => (1.0 - mean) * scale,
        Some(ScoringStrategyType::BalancedAllocation) => {
            let variance = free_shares.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / free_shares.len() as f64;
            (1.0 - variance.sqrt()) * scale
        }
        // LeastAllocated, the default; an unknown strategy scores as the default does.
        _ => mean * scale,
    };
    // Fewer NUMA nodes is better whatever the strategy: a pod over two scores half as much.
    1 + (score / numa.len() as f64).round() as i64
}
