//! A node's score for a pod, over the NUMA nodes the kubelet would align it on, by the
//! NUMAResourcesScheduler's scoring strategy, on the extender's 0..=10 scale.

use std::collections::BTreeSet;

use numaresources_api::fit::kubelet::Admission;
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::{ZONE_TYPE_NODE, numa_id_from_zone_name};
use numaresources_api::operator::ScoringStrategyType;

use crate::protocol::MAX_EXTENDER_PRIORITY;

/// The score of a node whose NRT was `before` and, with the pod placed, `after`. A placement
/// as narrow as the request allows scores 1..=10 by the strategy (scaled to the NUMA nodes it
/// uses); a wider one (a `best-effort` kubelet spreading the pod), nothing aligned (policy
/// `none`, or a pod the managers leave alone) scores 0: any aligned node is better.
pub fn of(
    admission: &Admission,
    before: &NodeResourceTopology,
    after: &NodeResourceTopology,
    strategy: Option<&ScoringStrategyType>,
) -> i64 {
    if !admission.admitted() {
        return 0;
    }
    let numa: BTreeSet<u32> = admission.aligned.iter().flat_map(|a| a.numa.iter().flatten().copied()).collect();
    if numa.is_empty() || admission.aligned.iter().any(|a| !a.preferred) {
        return 0;
    }
    // Per resource the pod takes there: the share of the set's allocatable still free after it.
    let mut free_shares = Vec::new();
    let allocatable = totals(before, &numa, |r| r.allocatable.ceil_milli_i64());
    let free_before = totals(before, &numa, |r| r.available.ceil_milli_i64());
    let free_after = totals(after, &numa, |r| r.available.ceil_milli_i64());
    for (name, total) in &allocatable {
        let before = free_before.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
        let after = free_after.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
        if *total > 0 && after < before {
            free_shares.push(after as f64 / *total as f64);
        }
    }
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

/// Per resource, the sum of `field` over the zones in `numa`.
fn totals(
    nrt: &NodeResourceTopology,
    numa: &BTreeSet<u32>,
    field: impl Fn(&numaresources_api::nrt::ResourceInfo) -> Option<i64>,
) -> Vec<(String, i64)> {
    let mut totals: Vec<(String, i64)> = Vec::new();
    for zone in nrt.zones.iter().filter(|z| z.zone_type == ZONE_TYPE_NODE) {
        if !numa_id_from_zone_name(&zone.name).is_some_and(|id| numa.contains(&id)) {
            continue;
        }
        for resource in &zone.resources {
            let amount = field(resource).unwrap_or(0);
            match totals.iter_mut().find(|(name, _)| *name == resource.name.as_str()) {
                Some((_, total)) => *total = total.saturating_add(amount),
                None => totals.push((resource.name.to_string(), amount)),
            }
        }
    }
    totals
}
