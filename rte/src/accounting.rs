//! Per-NUMA-zone accounting: capacity from the machine, allocatable from the kubelet's
//! `GetAllocatableResources`, available = allocatable − exclusive allocations from `List`.
//! Pure: plain data in, zones out.
//!
//! The rules are upstream's (docs/exporter-accounting.md), with its quirks fixed: zones are keyed by NUMA
//! id, never by list position (sparse ids work), resources come out sorted, and a zone the kubelet
//! reports nothing for still says how many CPUs it has.
//!
//! Per zone *i* and resource *r*: the published resources are the keys of `allocatable[i]`;
//! `capacity = max(machine[i][r], allocatable[i][r])` (the kubelet wins when it knows more, and
//! devices have no other source); `available = max(0, allocatable[i][r] − used[i][r])`. A memory
//! block or device set whose affinity spans several zones counts in full in each of them, as
//! upstream does. CPUs and memory without NUMA affinity are not counted anywhere. A
//! `hugepages-<size>` resource is published in a zone only when the zone has pages of that size
//! (capacity above 0), as upstream: a kubelet listing an empty pool adds nothing.

use std::collections::BTreeMap;

use numaresources_api::nrt::well_known::ATTR_MEMORY_NUMA_MANAGED;
use numaresources_api::nrt::{AttributeInfo, ResourceInfo, Zone};
use numaresources_api::quantity::Quantity;

use crate::podresources::{Allocatable, ContainerResources, Devices, MemoryBlock, PodResources};
use crate::sysfs::Machine;
use crate::sysfs::{RESOURCE_CPU, capacity_zones};

/// The memory resource's name.
const RESOURCE_MEMORY: &str = "memory";
/// The prefix of hugepage resource names (`hugepages-2Mi`).
const HUGEPAGES_PREFIX: &str = "hugepages-";

/// Amounts per NUMA id per resource name.
type Amounts = BTreeMap<u32, BTreeMap<String, i64>>;

/// What the kubelet told us, when we could ask it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KubeletView<'a> {
    /// `GetAllocatableResources`.
    pub allocatable: &'a Allocatable,
    /// `List`, after the middlewares (shared pool, excludes, terminal pods).
    pub pods: &'a [PodResources],
}

/// The zones of the machine. Without a kubelet (`None`), every resource the machine has is
/// published with allocatable and available equal to capacity: the machine's own view, which is
/// what the `local` mode shows on a laptop.
pub fn zones(machine: &Machine, kubelet: Option<KubeletView<'_>>) -> Vec<Zone> {
    let mut zones = capacity_zones(machine);
    let Some(kubelet) = kubelet else {
        return zones;
    };
    let cpu_numa = machine.cpu_to_numa();
    let allocatable =
        amounts(&cpu_numa, &kubelet.allocatable.cpu_ids, &kubelet.allocatable.memory, &kubelet.allocatable.devices);
    let mut used: Amounts = BTreeMap::new();
    for container in kubelet.pods.iter().flat_map(|pod| &pod.containers) {
        add_container(&mut used, &cpu_numa, container);
    }
    for (zone, node) in zones.iter_mut().zip(&machine.nodes) {
        let machine_amounts: BTreeMap<&str, Quantity> =
            zone.resources.iter().map(|r| (r.name.as_str(), r.capacity)).collect();
        let resources = match allocatable.get(&node.id).filter(|a| !a.is_empty()) {
            Some(allocatable) => allocatable
                .iter()
                .map(|(name, &alloc)| {
                    let machine = machine_amounts.get(name.as_str()).and_then(Quantity::as_i64).unwrap_or(0);
                    let taken = used.get(&node.id).and_then(|u| u.get(name)).copied().unwrap_or(0);
                    (name, machine.max(alloc), alloc, (alloc - taken).max(0))
                })
                .filter(|&(name, capacity, ..)| capacity > 0 || !name.starts_with(HUGEPAGES_PREFIX))
                .map(|(name, capacity, alloc, available)| resource(name, capacity, alloc, available))
                .collect(),
            // Every CPU reserved, or a CPU-less node with the memory manager off: still say how
            // many CPUs the zone has, with none allocatable.
            None => vec![resource(RESOURCE_CPU, node.cpus.len() as i64, 0, 0)],
        };
        zone.resources = resources;
    }
    zones
}

/// Whether the kubelet manages memory per NUMA node: with the Static memory manager its
/// `GetAllocatableResources` lists memory blocks with their NUMA affinity; with `None` (the
/// default) it lists none.
pub fn memory_numa_managed(allocatable: &Allocatable) -> bool {
    allocatable.memory.iter().any(|block| block.memory_type == RESOURCE_MEMORY)
}

/// For a kubelet that does not manage memory per NUMA node: `memory` and every `hugepages-*`
/// size the machine has, in every zone, as the whole node's figures (capacity, allocatable and
/// available all the machine's total), and the zone attribute [`ATTR_MEMORY_NUMA_MANAGED`]
/// `false`.
///
/// Without the memory manager the kubelet aligns neither, and admits a pod on the node's
/// totals alone; a zone listing no memory would make the scheduler plugin refuse every pod
/// that requests memory, and a zone listing its own share would refuse pods the kubelet would
/// admit. With the node's totals in every zone the per-zone check holds nothing back, and the
/// node-level check stays with the scheduler's NodeResourcesFit, which every profile runs
/// against the Node's allocatable and the pods bound to it.
pub fn publish_node_level_memory(zones: &mut [Zone], machine: &Machine) {
    let memory: i64 = machine.nodes.iter().map(|n| i64::try_from(n.memory_bytes).unwrap_or(i64::MAX)).sum();
    let mut hugepages: BTreeMap<String, i64> = BTreeMap::new();
    for pool in machine.nodes.iter().flat_map(|n| &n.hugepages) {
        *hugepages.entry(pool.resource_name()).or_default() += i64::try_from(pool.total_bytes).unwrap_or(i64::MAX);
    }
    let node_level = std::iter::once((RESOURCE_MEMORY.to_owned(), memory))
        .chain(hugepages.into_iter().filter(|(_, bytes)| *bytes > 0))
        .collect::<Vec<_>>();
    for zone in zones {
        zone.resources.retain(|r| r.name != RESOURCE_MEMORY && !r.name.starts_with(HUGEPAGES_PREFIX));
        zone.resources.extend(node_level.iter().map(|(name, bytes)| resource(name, *bytes, *bytes, *bytes)));
        zone.resources.sort_by(|a, b| a.name.cmp(&b.name));
        zone.attributes.retain(|a| a.name != ATTR_MEMORY_NUMA_MANAGED);
        zone.attributes.push(AttributeInfo::new(ATTR_MEMORY_NUMA_MANAGED, "false"));
    }
}

fn add_container(used: &mut Amounts, cpu_numa: &BTreeMap<u32, u32>, container: &ContainerResources) {
    for (numa, resources) in amounts(cpu_numa, &container.cpu_ids, &container.memory, &container.devices) {
        let zone = used.entry(numa).or_default();
        for (name, amount) in resources {
            *zone.entry(name).or_default() += amount;
        }
    }
}

/// CPU counts, memory bytes and device counts per NUMA id for one set of resources.
fn amounts(cpu_numa: &BTreeMap<u32, u32>, cpus: &[u32], memory: &[MemoryBlock], devices: &[Devices]) -> Amounts {
    let mut out: Amounts = BTreeMap::new();
    let mut add = |numa: u32, name: &str, amount: i64| {
        *out.entry(numa).or_default().entry(name.to_owned()).or_default() += amount;
    };
    for cpu in cpus {
        if let Some(&numa) = cpu_numa.get(cpu) {
            add(numa, RESOURCE_CPU, 1);
        }
    }
    for block in memory {
        let size = i64::try_from(block.size_bytes).unwrap_or(i64::MAX);
        for &numa in block.affinity.nodes() {
            add(numa, &block.memory_type, size);
        }
    }
    for set in devices.iter().filter(|d| !d.device_ids.is_empty()) {
        for &numa in set.affinity.nodes() {
            add(numa, &set.resource_name, set.device_ids.len() as i64);
        }
    }
    out
}

fn resource(name: &str, capacity: i64, allocatable: i64, available: i64) -> ResourceInfo {
    ResourceInfo {
        name: name.into(),
        capacity: Quantity::from_i64(capacity),
        allocatable: Quantity::from_i64(allocatable),
        available: Quantity::from_i64(available),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::podresources::NumaAffinity;
    use crate::sysfs::{Layout, NumaNode};

    const GI: u64 = 1 << 30;

    /// Two nodes with ids 0 and 2 (sparse), 4 CPUs each, 64 GiB and a 1Gi pool of 4 pages each.
    fn machine() -> Machine {
        let node = |id: u32, cpus: Vec<u32>| NumaNode {
            id,
            cores: Vec::new(),
            distances: BTreeMap::from([(0, if id == 0 { 10 } else { 21 }), (2, if id == 2 { 10 } else { 21 })]),
            memory_bytes: 64 * GI,
            hugepages: vec![crate::sysfs::HugepagePool { page_size_bytes: GI, pages: 4, total_bytes: 4 * GI }],
            cpus,
        };
        Machine { layout: Layout::Numa, nodes: vec![node(0, vec![0, 2, 4, 6]), node(2, vec![1, 3, 5, 7])] }
    }

    fn on(nodes: &[u32]) -> NumaAffinity {
        NumaAffinity::Nodes(nodes.to_vec())
    }

    fn find<'a>(zone: &'a Zone, name: &str) -> &'a ResourceInfo {
        zone.resources.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("{} has no {name}", zone.name))
    }

    fn numbers(r: &ResourceInfo) -> (i64, i64, i64) {
        (r.capacity.as_i64().unwrap(), r.allocatable.as_i64().unwrap(), r.available.as_i64().unwrap())
    }

    fn allocatable() -> Allocatable {
        Allocatable {
            // CPU 0 and 1 are reserved by the kubelet.
            cpu_ids: vec![2, 3, 4, 5, 6, 7],
            memory: vec![
                MemoryBlock { memory_type: "memory".into(), size_bytes: 60 * GI, affinity: on(&[0]) },
                MemoryBlock { memory_type: "memory".into(), size_bytes: 62 * GI, affinity: on(&[2]) },
                MemoryBlock { memory_type: "hugepages-1Gi".into(), size_bytes: 4 * GI, affinity: on(&[0]) },
                MemoryBlock { memory_type: "hugepages-1Gi".into(), size_bytes: 4 * GI, affinity: on(&[2]) },
            ],
            devices: vec![
                Devices {
                    resource_name: "example.com/vf".into(),
                    device_ids: vec!["a".into(), "b".into()],
                    affinity: on(&[0]),
                },
                Devices { resource_name: "example.com/vf".into(), device_ids: vec!["c".into()], affinity: on(&[2]) },
                Devices {
                    resource_name: "example.com/gpu".into(),
                    device_ids: vec!["g".into()],
                    affinity: NumaAffinity::NoAffinity,
                },
            ],
        }
    }

    fn guaranteed_pod() -> PodResources {
        PodResources {
            namespace: "telco".into(),
            name: "dpdk".into(),
            containers: vec![ContainerResources {
                name: "app".into(),
                cpu_ids: vec![2, 4],
                memory: vec![
                    MemoryBlock { memory_type: "memory".into(), size_bytes: 8 * GI, affinity: on(&[0]) },
                    MemoryBlock { memory_type: "hugepages-1Gi".into(), size_bytes: GI, affinity: on(&[0]) },
                ],
                devices: vec![Devices {
                    resource_name: "example.com/vf".into(),
                    device_ids: vec!["a".into()],
                    affinity: on(&[0]),
                }],
            }],
        }
    }

    #[test]
    fn without_a_kubelet_the_machine_view_is_published() {
        let zones = zones(&machine(), None);
        assert_eq!(zones.iter().map(|z| z.name.as_str()).collect::<Vec<_>>(), ["node-0", "node-2"]);
        assert_eq!(numbers(find(&zones[1], "cpu")), (4, 4, 4));
        assert_eq!(
            zones[1].costs.iter().map(|c| (c.name.as_str(), c.value)).collect::<Vec<_>>(),
            [("node-0", 21), ("node-2", 10)]
        );
    }

    #[test]
    fn exclusive_allocations_reduce_available_in_their_zone_only() {
        let allocatable = allocatable();
        let pods = [guaranteed_pod()];
        let zones = zones(&machine(), Some(KubeletView { allocatable: &allocatable, pods: &pods }));
        let (node0, node2) = (&zones[0], &zones[1]);
        // cpu: 4 online, 3 allocatable (CPU 0 reserved), 2 pinned to the pod.
        assert_eq!(numbers(find(node0, "cpu")), (4, 3, 1));
        assert_eq!(numbers(find(node2, "cpu")), (4, 3, 3));
        let (gi, gi64, gi60) = ((GI) as i64, (64 * GI) as i64, (60 * GI) as i64);
        assert_eq!(numbers(find(node0, "memory")), (gi64, gi60, gi60 - 8 * gi));
        assert_eq!(numbers(find(node0, "hugepages-1Gi")), (4 * gi, 4 * gi, 3 * gi));
        // Devices have no machine-side capacity: capacity is the kubelet's allocatable.
        assert_eq!(numbers(find(node0, "example.com/vf")), (2, 2, 1));
        assert_eq!(numbers(find(node2, "example.com/vf")), (1, 1, 1));
        // A device without NUMA affinity is not counted anywhere.
        assert!(node0.resources.iter().all(|r| r.name != "example.com/gpu"));
        // Resources are sorted.
        let names: Vec<&str> = node0.resources.iter().map(|r| r.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn a_block_spanning_two_zones_counts_in_both() {
        let allocatable = allocatable();
        let pod = PodResources {
            containers: vec![ContainerResources {
                memory: vec![MemoryBlock { memory_type: "memory".into(), size_bytes: 2 * GI, affinity: on(&[0, 2]) }],
                ..ContainerResources::default()
            }],
            ..PodResources::default()
        };
        let zones = zones(&machine(), Some(KubeletView { allocatable: &allocatable, pods: &[pod] }));
        assert_eq!(find(&zones[0], "memory").available.as_i64(), Some((58 * GI) as i64));
        assert_eq!(find(&zones[1], "memory").available.as_i64(), Some((60 * GI) as i64));
    }

    #[test]
    fn over_allocation_never_goes_negative_and_the_kubelet_wins_on_capacity() {
        let mut allocatable = allocatable();
        allocatable.cpu_ids = vec![2, 4];
        allocatable.memory.push(MemoryBlock { memory_type: "memory".into(), size_bytes: 10 * GI, affinity: on(&[0]) });
        let mut pod = guaranteed_pod();
        pod.containers[0].cpu_ids = vec![2, 4, 6];
        let zones = zones(&machine(), Some(KubeletView { allocatable: &allocatable, pods: &[pod] }));
        assert_eq!(numbers(find(&zones[0], "cpu")), (4, 2, 0));
        // 60 + 10 GiB allocatable exceeds the 64 GiB the machine reports: trust the kubelet.
        assert_eq!(find(&zones[0], "memory").capacity.as_i64(), Some((70 * GI) as i64));
    }

    #[test]
    fn a_zone_with_nothing_allocatable_still_reports_its_cpus() {
        let allocatable = Allocatable { cpu_ids: vec![0, 2, 4, 6], ..Allocatable::default() };
        let zones = zones(&machine(), Some(KubeletView { allocatable: &allocatable, pods: &[] }));
        assert_eq!(zones[1].resources.len(), 1);
        assert_eq!(numbers(find(&zones[1], "cpu")), (4, 0, 0));
        assert_eq!(numbers(find(&zones[0], "cpu")), (4, 4, 4));
    }

    #[test]
    fn without_the_memory_manager_every_zone_gets_the_nodes_memory_and_hugepages_and_says_so() {
        // What a kubelet with memoryManagerPolicy None answers: CPUs and devices, no memory.
        let mut allocatable = allocatable();
        allocatable.memory.clear();
        assert!(!memory_numa_managed(&allocatable));
        assert!(memory_numa_managed(&super::tests::allocatable()));
        let pods = [guaranteed_pod()];
        let mut zones = zones(&machine(), Some(KubeletView { allocatable: &allocatable, pods: &pods }));
        assert!(zones.iter().all(|z| z.resources.iter().all(|r| r.name != "memory")), "nothing per zone");
        publish_node_level_memory(&mut zones, &machine());
        let (gi128, gi8) = ((128 * GI) as i64, (8 * GI) as i64);
        for zone in &zones {
            assert_eq!(numbers(find(zone, "memory")), (gi128, gi128, gi128), "{}", zone.name);
            assert_eq!(numbers(find(zone, "hugepages-1Gi")), (gi8, gi8, gi8), "{}", zone.name);
            assert_eq!(
                zone.attributes.iter().map(|a| (a.name.as_str(), a.value.as_str())).collect::<Vec<_>>(),
                [("memoryNUMAManaged", "false")]
            );
            let names: Vec<&str> = zone.resources.iter().map(|r| r.name.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort();
            assert_eq!(names, sorted);
        }
        // CPUs and devices are still per zone.
        assert_eq!(numbers(find(&zones[0], "cpu")), (4, 3, 1));
        assert_eq!(numbers(find(&zones[0], "example.com/vf")), (2, 2, 1));
    }

    #[test]
    fn an_empty_hugepage_pool_is_not_published_even_when_the_kubelet_lists_it() {
        let mut allocatable = allocatable();
        // The kubelet lists 2Mi pages on both nodes but has none; node 2 has no 1Gi page either
        // on the machine side below.
        allocatable.memory.push(MemoryBlock {
            memory_type: "hugepages-2Mi".into(),
            size_bytes: 0,
            affinity: on(&[0, 2]),
        });
        let mut machine = machine();
        machine.nodes[1].hugepages.clear();
        allocatable.memory.retain(|b| !(b.memory_type == "hugepages-1Gi" && b.affinity == on(&[2])));
        let zones = zones(&machine, Some(KubeletView { allocatable: &allocatable, pods: &[] }));
        let names = |zone: &Zone| zone.resources.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&zones[0]), ["cpu", "example.com/vf", "hugepages-1Gi", "memory"]);
        assert_eq!(names(&zones[1]), ["cpu", "example.com/vf", "memory"]);
    }
}
