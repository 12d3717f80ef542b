//! The NodeResourceTopologyMatch score of a node (0..=100), for the scoring strategies a
//! `NUMAResourcesScheduler` can choose.
//!
//! - A pod that is not Guaranteed scores 100 everywhere; a node without an NRT scores 0.
//! - Only `single-numa-node` nodes are scored (others get 0).
//! - Per NUMA node, over the requested resources (amounts in whole units, rounded up as
//!   `Quantity.Value()` does):
//!   `LeastAllocated` = weighted mean of `(available - requested) * 100 / available`,
//!   `MostAllocated` = weighted mean of `requested * 100 / available` (both 0 for a resource the
//!   zone lacks or cannot hold), `BalancedAllocation` = `(1 - variance of requested/available) * 100`
//!   (0 when any fraction exceeds 1; weights unused).
//! - The node's score is the lowest non-zero NUMA score (a zero NUMA cannot take the pod).
//! - Pod scope scores the effective request; container scope averages every container's score
//!   (init containers included), truncating.

use super::pod::{PodRequests, Resources};
use super::topology::{Numa, TopologyManagerConfig, numa_zones};
use crate::nrt::NodeResourceTopology;
use crate::operator::{ScoringStrategyParams, ScoringStrategyType};
use crate::qos::QosClass;

/// The best score a node can get.
pub const MAX_NODE_SCORE: i64 = 100;

/// The score of one node for `pod` under `strategy` (the `NUMAResourcesScheduler`'s
/// `scoringStrategy`; unset means `LeastAllocated` with cpu and memory weighing 1).
pub fn score(pod: &PodRequests, nrt: Option<&NodeResourceTopology>, strategy: &ScoringStrategyParams) -> i64 {
    if pod.qos != QosClass::Guaranteed {
        return MAX_NODE_SCORE;
    }
    let Some(nrt) = nrt else { return 0 };
    let config = TopologyManagerConfig::of(nrt);
    if !config.filters() {
        return 0;
    }
    let zones = numa_zones(nrt);
    let numa_score = |requests: &Resources| lowest_nonzero(&zones, |zone| zone_score(requests, zone, strategy));
    if config.pod_scope() {
        return numa_score(&pod.effective());
    }
    let scores: Vec<i64> = pod.init_containers.iter().chain(&pod.containers).map(|c| numa_score(&c.requests)).collect();
    if scores.is_empty() {
        return 0;
    }
    // A mean of at most 100s: no overflow for any realistic container count.
    scores.iter().sum::<i64>() / scores.len() as i64
}

/// The plugin's choice among NUMA scores: the first score while it is 0, else the lowest
/// non-zero one.
fn lowest_nonzero(zones: &[Numa], score: impl Fn(&Numa) -> i64) -> i64 {
    let mut lowest = 0;
    for zone in zones {
        let value = score(zone);
        if lowest == 0 || (value != 0 && value < lowest) {
            lowest = value;
        }
    }
    lowest
}

fn zone_score(requests: &Resources, zone: &Numa, strategy: &ScoringStrategyParams) -> i64 {
    let whole = |millis: i64| millis.div_euclid(1000) + i64::from(millis.rem_euclid(1000) != 0);
    let pairs: Vec<(&str, i64, i64)> = requests
        .iter()
        .map(|(name, requested)| {
            (name.as_str(), whole(*requested), whole(zone.available.get(name).copied().unwrap_or(0)))
        })
        .collect();
    match strategy.type_.as_ref().unwrap_or(&ScoringStrategyType::LeastAllocated) {
        ScoringStrategyType::MostAllocated => weighted_mean(&pairs, strategy, |req, avail| {
            if avail == 0 || req > avail { 0 } else { req.saturating_mul(MAX_NODE_SCORE) / avail }
        }),
        ScoringStrategyType::BalancedAllocation => balanced(&pairs),
        // LeastAllocated, and an unknown strategy (which validation refuses) read as the default.
        _ => weighted_mean(&pairs, strategy, |req, avail| {
            if avail == 0 || req > avail { 0 } else { (avail - req).saturating_mul(MAX_NODE_SCORE) / avail }
        }),
    }
}

fn weighted_mean(pairs: &[(&str, i64, i64)], strategy: &ScoringStrategyParams, score: impl Fn(i64, i64) -> i64) -> i64 {
    let weight = |name: &str| strategy.resources.iter().find(|r| r.name == name).map_or(1, |r| r.weight).max(1);
    let (mut total, mut weights) = (0_i64, 0_i64);
    for (name, requested, available) in pairs {
        let w = weight(name);
        total = total.saturating_add(score(*requested, *available).saturating_mul(w));
        weights = weights.saturating_add(w);
    }
    if weights == 0 { 0 } else { total / weights }
}

/// `(1 - variance) * 100` over the requested/available fractions, the sample variance the plugin
/// computes (gonum's `stat.Variance`); with one resource that variance is undefined in the
/// plugin, and we take it as 0 (perfectly balanced).
fn balanced(pairs: &[(&str, i64, i64)]) -> i64 {
    let mut fractions = Vec::with_capacity(pairs.len());
    for (_, requested, available) in pairs {
        let fraction = if *available == 0 { 1.0 } else { *requested as f64 / *available as f64 };
        if fraction > 1.0 {
            return 0;
        }
        fractions.push(fraction);
    }
    if fractions.len() < 2 {
        return MAX_NODE_SCORE;
    }
    let n = fractions.len() as f64;
    let mean = fractions.iter().sum::<f64>() / n;
    let variance = fractions.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / (n - 1.0);
    ((1.0 - variance) * MAX_NODE_SCORE as f64) as i64
}
