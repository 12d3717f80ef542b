//! Fleet headroom, for the dashboard's "headroom per zone" panel: how many NUMA zones of the
//! fleet have at least N CPUs or N GiB of memory free, and what the fleet's NUMA zones have free
//! and allocatable per kind of resource.
//!
//! Every label value comes from a fixed set (the steps below, five resource kinds), so the
//! series stay bounded whatever the fleet's size or its resource names: no per-node label. The
//! figures are computed when `/metrics` is scraped, from one snapshot of the store, never on a
//! write.

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::ZONE_TYPE_NODE;

/// The CPU counts zones are counted at: "zones with at least this many CPUs free".
pub(crate) const CPU_STEPS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
/// The memory amounts, in GiB, zones are counted at.
pub(crate) const MEMORY_STEPS_GIB: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// The resource kinds the totals are given for: CPUs in CPUs, memory and hugepages in bytes,
/// `other` sums every other resource's counts (devices).
pub(crate) const RESOURCE_KINDS: [&str; 5] = ["cpu", "memory", "hugepages-2Mi", "hugepages-1Gi", "other"];

const GIB: i128 = 1 << 30;
/// Quantities are summed in thousandths (`MilliValue`), as the scheduler compares them.
const MILLI: f64 = 1000.0;

/// The fleet's NUMA zones by free CPUs and memory, and per-kind totals.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Headroom {
    /// NUMA zones (type `Node`) across every stored NRT.
    pub zones: u64,
    /// Zones with at least [`CPU_STEPS`]`[i]` CPUs available.
    pub zones_with_free_cpus: [u64; CPU_STEPS.len()],
    /// Zones with at least [`MEMORY_STEPS_GIB`]`[i]` GiB of memory available.
    pub zones_with_free_memory: [u64; MEMORY_STEPS_GIB.len()],
    /// Available amount per [`RESOURCE_KINDS`] entry, summed over the zones.
    pub available: [f64; RESOURCE_KINDS.len()],
    /// Allocatable amount per [`RESOURCE_KINDS`] entry, summed over the zones.
    pub allocatable: [f64; RESOURCE_KINDS.len()],
}

impl Headroom {
    /// Adds up the NUMA zones of `objects`.
    pub fn of<'a>(objects: impl IntoIterator<Item = &'a NodeResourceTopology>) -> Self {
        let mut headroom = Headroom::default();
        let (mut available, mut allocatable) = ([0i128; RESOURCE_KINDS.len()], [0i128; RESOURCE_KINDS.len()]);
        for zone in objects.into_iter().flat_map(|nrt| &nrt.zones).filter(|z| z.zone_type == ZONE_TYPE_NODE) {
            headroom.zones += 1;
            for resource in &zone.resources {
                let free = milli(&resource.available);
                let kind = kind_index(&resource.name);
                available[kind] += free;
                allocatable[kind] += milli(&resource.allocatable);
                match RESOURCE_KINDS[kind] {
                    "cpu" => count_at_least(&mut headroom.zones_with_free_cpus, &CPU_STEPS, free, 1000),
                    "memory" => {
                        count_at_least(&mut headroom.zones_with_free_memory, &MEMORY_STEPS_GIB, free, GIB * 1000)
                    }
                    _ => {}
                }
            }
        }
        headroom.available = available.map(|sum| sum as f64 / MILLI);
        headroom.allocatable = allocatable.map(|sum| sum as f64 / MILLI);
        headroom
    }
}

/// A quantity in thousandths, rounded up; negative and unreadable amounts count as 0.
fn milli(quantity: &numaresources_api::Quantity) -> i128 {
    i128::from(quantity.ceil_milli_i64().unwrap_or(0).max(0))
}

fn kind_index(resource: &str) -> usize {
    RESOURCE_KINDS.iter().position(|kind| *kind == resource).unwrap_or(RESOURCE_KINDS.len() - 1)
}

/// Counts a zone with `free` thousandths in every step it reaches (`unit` thousandths a step).
fn count_at_least<const N: usize>(counts: &mut [u64; N], steps: &[u32; N], free: i128, unit: i128) {
    for (count, step) in counts.iter_mut().zip(steps) {
        if free >= i128::from(*step) * unit {
            *count += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nrt(zones: serde_json::Value) -> NodeResourceTopology {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}, "zones": zones})).unwrap()
    }

    fn zone(name: &str, zone_type: &str, resources: &[(&str, &str, &str)]) -> serde_json::Value {
        let resources: Vec<_> = resources
            .iter()
            .map(|(name, allocatable, available)| {
                serde_json::json!({"name": name, "capacity": allocatable, "allocatable": allocatable, "available": available})
            })
            .collect();
        serde_json::json!({"name": name, "type": zone_type, "resources": resources})
    }

    #[test]
    fn zones_are_counted_at_every_step_they_reach_and_totals_add_up() {
        let fleet = [
            nrt(serde_json::json!([
                zone(
                    "node-0",
                    "Node",
                    &[("cpu", "30", "12"), ("memory", "250Gi", "100Gi"), ("hugepages-1Gi", "8Gi", "2Gi")]
                ),
                zone(
                    "node-1",
                    "Node",
                    &[("cpu", "30", "0"), ("memory", "250Gi", "512Mi"), ("example.com/nic", "4", "3")]
                ),
                // Not a NUMA zone: not counted.
                zone("socket-0", "Socket", &[("cpu", "60", "60")]),
            ])),
            nrt(serde_json::json!([zone("node-0", "Node", &[("cpu", "8", "1500m"), ("memory", "64Gi", "64Gi")])])),
        ];
        let headroom = Headroom::of(&fleet);
        assert_eq!(headroom.zones, 3);
        // 12 CPUs reach 1..8; 1.5 CPUs reach 1; 0 reaches none.
        assert_eq!(headroom.zones_with_free_cpus, [2, 1, 1, 1, 0, 0, 0]);
        // 100 GiB reach 1..64, 64 GiB reach 1..64, 512 MiB none.
        assert_eq!(headroom.zones_with_free_memory, [2, 2, 2, 2, 2, 2, 2, 0, 0]);
        assert_eq!(headroom.available[0], 13.5);
        assert_eq!(headroom.allocatable[0], 68.0);
        assert_eq!(headroom.available[1], (164.5 * GIB as f64));
        assert_eq!(headroom.available[3], (2 * GIB) as f64);
        assert_eq!(headroom.available[4], 3.0, "devices fold into other");
        assert_eq!(headroom.allocatable[2], 0.0);
    }

    #[test]
    fn an_empty_fleet_and_odd_amounts_count_nothing() {
        assert_eq!(Headroom::of(&[]), Headroom::default());
        let odd = [nrt(serde_json::json!([zone("node-0", "Node", &[("cpu", "4", "-2")])]))];
        let headroom = Headroom::of(&odd);
        assert_eq!(headroom.zones_with_free_cpus, [0; 7]);
        assert_eq!(headroom.available[0], 0.0);
    }
}
