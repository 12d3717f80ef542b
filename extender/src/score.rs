//! A node's score for a pod, over the NUMA nodes the kubelet would align it on, by the
//! NUMAResourcesScheduler's scoring strategy, on the extender's 0..=10 scale.

use numaresources_api::fit::Resources;
use numaresources_api::fit::kubelet::{Node, Placement};
use numaresources_api::operator::ScoringStrategyType;

use crate::protocol::MAX_EXTENDER_PRIORITY;

/// The score of a node that is `node` before the pod whose effective request is `requested`
/// comes, placed there as `placement`. A placement as narrow as the request allows scores
/// 1..=10 by the strategy; a wider one (a `best-effort` kubelet spreading the pod) or nothing
/// aligned (policy `none`, or a pod the managers leave alone) scores 0: any aligned node is
/// better.
///
/// - `LeastAllocated` (the default), `MostAllocated`, `BalancedAllocation`: per resource the pod
///   takes, the share of the set's allocatable still free after it (its mean, one less it, one
///   less its standard deviation), divided by the set's width: a pod over two NUMA nodes scores
///   half as much.
/// - `LeastNUMANodes`: by the width alone, as scheduler-plugins orders it: 10 for one NUMA node,
///   two less per node more, one less again when the set is not among the closest of its width.
pub fn of(placement: &Placement, node: &Node, requested: &Resources, strategy: Option<&ScoringStrategyType>) -> i64 {
    let width = placement.numa.count();
    if width == 0 || !placement.preferred {
        return 0;
    }
    if strategy == Some(&ScoringStrategyType::LeastNUMANodes) {
        let farther = i64::from(!placement.closest);
        return (MAX_EXTENDER_PRIORITY - 2 * (i64::from(placement.widest) - 1) - farther).max(1);
    }
    // Per resource the pod takes there: the share of the set's allocatable still free after it.
    let (mut shares, mut sum, mut squares) = (0_u32, 0.0_f64, 0.0_f64);
    for (taken, total, free) in node.in_set(placement.numa, requested) {
        if taken <= 0 || total <= 0 {
            continue;
        }
        let share = free.saturating_sub(taken).max(0) as f64 / total as f64;
        shares += 1;
        sum += share;
        squares += share * share;
    }
    if shares == 0 {
        return 1;
    }
    let mean = sum / f64::from(shares);
    let scale = (MAX_EXTENDER_PRIORITY - 1) as f64;
    let score = match strategy {
        Some(ScoringStrategyType::MostAllocated) => (1.0 - mean) * scale,
        Some(ScoringStrategyType::BalancedAllocation) => {
            let variance = (squares / f64::from(shares) - mean * mean).max(0.0);
            (1.0 - variance.sqrt()) * scale
        }
        // LeastAllocated, the default; an unknown strategy scores as the default does.
        _ => mean * scale,
    };
    1 + (score / f64::from(width)).round() as i64
}
