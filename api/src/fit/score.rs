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
//! - `LeastNUMANodes` scores nodes of every policy by the fewest NUMA nodes that hold each
//!   requester ([`least_numa_nodes`]).

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
    if strategy.type_ == Some(ScoringStrategyType::LeastNUMANodes) {
        return least_numa_nodes(pod, nrt, &config);
    }
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

/// The NUMA ids the plugin scores against: 100 / 8 points per NUMA node a requester needs.
const HIGHEST_NUMA_ID: i64 = 8;

/// The most NUMA zones whose sets `LeastNUMANodes` walks (every set of every width: 65,535 at
/// 16); an NRT with more scores 0 rather than take unbounded time.
pub const LEAST_NUMA_NODES_MAX_ZONES: usize = 16;

/// The distance the plugin assumes where the NRT gives none (ACPI SLIT's "unknown").
const UNKNOWN_DISTANCE: i64 = 255;

/// `LeastNUMANodes`: per requester in the kubelet's order (pod scope: the effective request),
/// the fewest NUMA nodes whose available amounts together hold what it asks (each resource
/// listed on every one of them), the closest such set first; what it takes is taken from them
/// for the next. `100 - widest * 12`, plus 6 when every set is among the closest of its width;
/// 100 when nothing is asked of a NUMA resource, 0 when a requester fits no set.
pub fn least_numa_nodes(pod: &PodRequests, nrt: &NodeResourceTopology, config: &TopologyManagerConfig) -> i64 {
    let mut zones = numa_zones(nrt);
    if zones.len() > LEAST_NUMA_NODES_MAX_ZONES {
        return 0;
    }
    let distances = distance_table(nrt, &zones);
    let requesters: Vec<Resources> = if config.pod_scope() {
        vec![pod.effective()]
    } else {
        pod.init_containers.iter().chain(&pod.containers).map(|c| c.requests.clone()).collect()
    };
    let (mut widest, mut all_closest) = (0_usize, true);
    for requests in requesters {
        let numa: Vec<(&String, i64)> = requests
            .iter()
            .filter(|(name, amount)| **amount > 0 && zones.iter().any(|z| z.available.contains_key(*name)))
            .map(|(name, amount)| (name, *amount))
            .collect();
        if numa.is_empty() {
            continue;
        }
        let Some((set, closest)) = fewest_nodes(&zones, &requests, pod.qos, &distances) else { return 0 };
        widest = widest.max(set.len());
        all_closest &= closest;
        for (name, mut amount) in numa {
            for index in &set {
                let left = zones[*index].available.entry(name.clone()).or_default();
                let here = (*left).min(amount);
                *left -= here;
                amount -= here;
            }
        }
    }
    if widest == 0 {
        return MAX_NODE_SCORE;
    }
    let per_node = MAX_NODE_SCORE / HIGHEST_NUMA_ID;
    let score = MAX_NODE_SCORE - widest as i64 * per_node;
    if all_closest { score + per_node / 2 } else { score }
}

/// The distance between every two of `zones` (by index), from the NRT's costs, read once:
/// [`UNKNOWN_DISTANCE`] where a cost is missing.
fn distance_table(nrt: &NodeResourceTopology, zones: &[Numa]) -> Vec<Vec<i64>> {
    use crate::nrt::well_known::numa_id_from_zone_name;
    zones
        .iter()
        .map(|from| {
            let costs = nrt.zones.iter().find(|z| numa_id_from_zone_name(&z.name) == Some(from.id)).map(|z| &z.costs);
            zones
                .iter()
                .map(|to| {
                    let cost = costs.and_then(|c| c.iter().find(|c| numa_id_from_zone_name(&c.name) == Some(to.id)));
                    cost.map_or(UNKNOWN_DISTANCE, |c| c.value)
                })
                .collect()
        })
        .collect()
}

/// The fewest zones (by index) that hold `requests`, the closest such set of that width, and
/// whether it is among the closest sets of that width at all.
fn fewest_nodes(
    zones: &[Numa],
    requests: &Resources,
    qos: QosClass,
    distances: &[Vec<i64>],
) -> Option<(Vec<usize>, bool)> {
    let average = |set: &[usize]| {
        let total: i64 = set.iter().flat_map(|a| set.iter().map(move |b| (a, b))).map(|(a, b)| distances[*a][*b]).sum();
        total as f64 / (set.len() * set.len()) as f64
    };
    let holds = |set: &[usize]| {
        requests.iter().filter(|(_, amount)| **amount > 0).all(|(name, amount)| {
            if !set.iter().all(|i| zones[*i].available.contains_key(name)) {
                return false;
            }
            // The plugin lets a Burstable pod's cpu and memory through.
            if qos != QosClass::Guaranteed && (name == "cpu" || name == "memory") {
                return true;
            }
            set.iter().map(|i| zones[*i].available.get(name).copied().unwrap_or(0)).sum::<i64>() >= *amount
        })
    };
    for width in 1..=zones.len() {
        let sets = combinations(zones.len(), width);
        let least = sets.iter().map(|set| average(set)).fold(f64::MAX, f64::min);
        let mut best: Option<(Vec<usize>, f64)> = None;
        for set in sets.into_iter().filter(|set| holds(set)) {
            let at = average(&set);
            if best.as_ref().is_none_or(|(_, best)| at < *best) {
                best = Some((set, at));
            }
        }
        if let Some((set, at)) = best {
            return Some((set, at <= least));
        }
    }
    None
}

/// Every `k`-subset of `0..n`, in lexicographic order.
fn combinations(n: usize, k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut set: Vec<usize> = (0..k).collect();
    loop {
        out.push(set.clone());
        let Some(i) = (0..k).rev().find(|i| set[*i] != i + n - k) else { return out };
        set[i] += 1;
        for j in i + 1..k {
            set[j] = set[j - 1] + 1;
        }
    }
}
