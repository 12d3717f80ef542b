//! The machine as the capacity half of an NRT: one zone per NUMA node. Pure.

use numaresources_api::nrt::well_known::{ZONE_TYPE_NODE, numa_zone_name};
use numaresources_api::nrt::{CostInfo, ResourceInfo, Zone};
use numaresources_api::quantity::Quantity;

use super::{Machine, NumaNode};

/// Resource name of logical CPUs.
pub(crate) const RESOURCE_CPU: &str = "cpu";
/// Resource name of memory, in bytes.
pub(crate) const RESOURCE_MEMORY: &str = "memory";

/// `hugepages-<size>` with the size as a binary-SI quantity: `hugepages-2Mi`, `hugepages-1Gi`,
/// `hugepages-64Ki`, `hugepages-1536Ki`.
pub(crate) fn hugepages_resource_name(page_size_bytes: u64) -> String {
    let size = i64::try_from(page_size_bytes).unwrap_or(i64::MAX);
    format!("hugepages-{}", Quantity::from_i64_binary(size))
}

/// One zone per NUMA node, ascending by id: name `node-<id>`, type `Node`, a cost to every node
/// (itself included) from its distances, ascending by destination id, and the resources `cpu`
/// (online logical CPUs), `memory` (`MemTotal` bytes) and one `hugepages-<size>` per pool that
/// has pages (bytes), sorted by name. `cpu` and `memory` are always there, 0 on CPU-less or
/// memory-less nodes; a page size the kernel offers with no page reserved on the node is not
/// listed, as upstream lists none (`hugepages-1Gi` 0/0/0 on every zone would only be noise).
///
/// Only `capacity` comes from the machine; `allocatable` and `available` are set equal to it, as
/// for a node with nothing reserved or allocated. The accounting, which knows what the kubelet
/// reports, replaces them (and decides which resources a published zone lists).
pub fn capacity_zones(machine: &Machine) -> Vec<Zone> {
    machine.nodes.iter().map(zone).collect()
}

fn zone(node: &NumaNode) -> Zone {
    let costs = node
        .distances
        .iter()
        .map(|(&to, &distance)| CostInfo { name: numa_zone_name(to).into(), value: i64::from(distance) })
        .collect();
    let mut resources =
        vec![resource(RESOURCE_CPU, node.cpus.len() as u64), resource(RESOURCE_MEMORY, node.memory_bytes)];
    let pools = node.hugepages.iter().filter(|pool| pool.pages > 0);
    resources.extend(pools.map(|pool| resource(&pool.resource_name(), pool.total_bytes)));
    resources.sort_by(|a, b| a.name.cmp(&b.name));
    Zone { name: numa_zone_name(node.id).into(), zone_type: ZONE_TYPE_NODE.into(), costs, resources, ..Zone::default() }
}

fn resource(name: &str, amount: u64) -> ResourceInfo {
    // Discovery keeps every amount within i64 (it reports an overflow otherwise).
    let quantity = Quantity::from_i64(i64::try_from(amount).unwrap_or(i64::MAX));
    ResourceInfo { name: name.into(), capacity: quantity, allocatable: quantity, available: quantity }
}
