//! Plain-Rust view of the kubelet's answers, decoupled from the generated wire types.
//!
//! The conversion applies the API's semantics once, so the accounting never has to: CPU ids are
//! unique (in the kubelet's order: NUMA placement attributes a container to the node of its
//! first CPU, as upstream does), and a topology's NUMA ids are those ≥ 0, deduplicated (`-1` is
//! the kubelet's "no locality"); none left is [`NumaAffinity::NoAffinity`]. Dynamic (DRA)
//! resources are dropped: they are not accounted.

use super::proto;

/// Where a memory block or a set of devices sits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NumaAffinity {
    /// No NUMA affinity: the kubelet sent no topology, an empty one, or one holding only id −1
    /// (or ids that are not valid NUMA ids). Such resources count in no zone.
    NoAffinity,
    /// The NUMA node ids, sorted, unique and never empty.
    Nodes(Vec<u32>),
}

impl NumaAffinity {
    /// The NUMA ids, empty for [`NumaAffinity::NoAffinity`].
    #[must_use]
    pub fn nodes(&self) -> &[u32] {
        match self {
            NumaAffinity::NoAffinity => &[],
            NumaAffinity::Nodes(nodes) => nodes,
        }
    }

    /// Whether the resource is attached to NUMA node `id`.
    #[must_use]
    pub fn contains(&self, id: u32) -> bool {
        self.nodes().binary_search(&id).is_ok()
    }

    /// Reads a wire topology; see the type's doc for what counts as "no affinity".
    #[must_use]
    pub fn from_proto(topology: Option<&proto::TopologyInfo>) -> Self {
        let Some(topology) = topology else { return NumaAffinity::NoAffinity };
        // −1 is the kubelet's "no locality" for that entry; the other ids still say where the
        // resource is (upstream counts them, and NUMA placement reads them). An id beyond u32 is
        // no NUMA node and is left out the same way.
        let mut nodes: Vec<u32> = topology.nodes.iter().filter_map(|node| u32::try_from(node.id).ok()).collect();
        if nodes.is_empty() {
            return NumaAffinity::NoAffinity;
        }
        nodes.sort_unstable();
        nodes.dedup();
        NumaAffinity::Nodes(nodes)
    }
}

/// A block of memory or hugepages pinned to a container (or allocatable on the node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryBlock {
    /// `memory`, `hugepages-2Mi`, `hugepages-1Gi`, …
    pub memory_type: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// NUMA nodes the block spans. A block spanning several counts in full in each of them.
    pub affinity: NumaAffinity,
}

/// Devices of one extended resource (e.g. `example.com/sriov_vf`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devices {
    /// The extended resource name.
    pub resource_name: String,
    /// Device ids, in the kubelet's order.
    pub device_ids: Vec<String>,
    /// NUMA nodes the devices are attached to.
    pub affinity: NumaAffinity,
}

/// What one container holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerResources {
    /// The container name.
    pub name: String,
    /// Exclusively allocated CPU ids (List reports only those), unique, in the kubelet's order.
    pub cpu_ids: Vec<u32>,
    /// Memory and hugepages blocks.
    pub memory: Vec<MemoryBlock>,
    /// Devices, one entry per resource as the kubelet groups them.
    pub devices: Vec<Devices>,
}

/// One pod as `List` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResources {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Its containers (non-restartable init containers of non-Guaranteed pods are missing).
    pub containers: Vec<ContainerResources>,
}

/// What the kubelet may hand out (`GetAllocatableResources`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocatable {
    /// Online CPUs minus reserved ones, sorted and unique (empty unless the static CPU manager is on).
    pub cpu_ids: Vec<u32>,
    /// Memory and hugepages blocks (empty unless the Static memory manager is on).
    pub memory: Vec<MemoryBlock>,
    /// Every device the kubelet knows.
    pub devices: Vec<Devices>,
}

impl PodResources {
    /// Converts one wire pod.
    #[must_use]
    pub fn from_proto(pod: proto::PodResources) -> Self {
        PodResources {
            namespace: pod.namespace,
            name: pod.name,
            containers: pod.containers.into_iter().map(ContainerResources::from_proto).collect(),
        }
    }
}

impl ContainerResources {
    /// Converts one wire container, dropping its dynamic resources.
    #[must_use]
    pub fn from_proto(container: proto::ContainerResources) -> Self {
        ContainerResources {
            name: container.name,
            cpu_ids: cpu_ids(&container.cpu_ids),
            memory: container.memory.into_iter().map(MemoryBlock::from_proto).collect(),
            devices: container.devices.into_iter().map(Devices::from_proto).collect(),
        }
    }
}

impl MemoryBlock {
    /// Converts one wire memory block.
    #[must_use]
    pub fn from_proto(memory: proto::ContainerMemory) -> Self {
        MemoryBlock {
            affinity: NumaAffinity::from_proto(memory.topology.as_ref()),
            memory_type: memory.memory_type,
            size_bytes: memory.size,
        }
    }
}

impl Devices {
    /// Converts one wire device entry.
    #[must_use]
    pub fn from_proto(devices: proto::ContainerDevices) -> Self {
        Devices {
            affinity: NumaAffinity::from_proto(devices.topology.as_ref()),
            resource_name: devices.resource_name,
            device_ids: devices.device_ids,
        }
    }
}

impl Allocatable {
    /// Converts a `GetAllocatableResources` answer.
    #[must_use]
    pub fn from_proto(response: proto::AllocatableResourcesResponse) -> Self {
        Allocatable {
            cpu_ids: sorted(cpu_ids(&response.cpu_ids)),
            memory: response.memory.into_iter().map(MemoryBlock::from_proto).collect(),
            devices: response.devices.into_iter().map(Devices::from_proto).collect(),
        }
    }
}

/// Converts a `List` answer.
#[must_use]
pub fn pods_from_proto(response: proto::ListPodResourcesResponse) -> Vec<PodResources> {
    response.pod_resources.into_iter().map(PodResources::from_proto).collect()
}

fn sorted(mut cpus: Vec<u32>) -> Vec<u32> {
    cpus.sort_unstable();
    cpus
}

/// Unique CPU ids in the order received (a repeated id keeps its first place); ids that cannot
/// be CPUs (negative, huge) are dropped.
fn cpu_ids(ids: &[i64]) -> Vec<u32> {
    let mut seen = std::collections::BTreeSet::new();
    ids.iter().filter_map(|&id| u32::try_from(id).ok()).filter(|&cpu| seen.insert(cpu)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(ids: &[i64]) -> proto::TopologyInfo {
        proto::TopologyInfo { nodes: ids.iter().map(|&id| proto::NumaNode { id }).collect() }
    }

    #[test]
    fn topology_without_nodes_or_with_only_minus_one_means_no_affinity() {
        let cases: [(Option<proto::TopologyInfo>, NumaAffinity); 8] = [
            (None, NumaAffinity::NoAffinity),
            (Some(topology(&[])), NumaAffinity::NoAffinity),
            (Some(topology(&[-1])), NumaAffinity::NoAffinity),
            (Some(topology(&[0, -1])), NumaAffinity::Nodes(vec![0])),
            (Some(topology(&[-1, 1])), NumaAffinity::Nodes(vec![1])),
            (Some(topology(&[i64::MAX])), NumaAffinity::NoAffinity),
            (Some(topology(&[1])), NumaAffinity::Nodes(vec![1])),
            (Some(topology(&[3, 0, 3])), NumaAffinity::Nodes(vec![0, 3])),
        ];
        for (input, want) in cases {
            assert_eq!(NumaAffinity::from_proto(input.as_ref()), want, "{input:?}");
        }
    }

    #[test]
    fn cpu_ids_come_out_unique_in_the_kubelets_order_and_without_impossible_ids() {
        assert_eq!(cpu_ids(&[5, 1, -3, 5, i64::MAX, 0]), vec![5, 1, 0]);
    }

    #[test]
    fn affinity_contains_only_its_nodes() {
        let affinity = NumaAffinity::Nodes(vec![0, 2]);
        assert!(affinity.contains(2));
        assert!(!affinity.contains(1));
        assert!(!NumaAffinity::NoAffinity.contains(0));
    }
}
