//! What the exporter does each scan, as upstream's resource monitor does: pick the NUMA-eligible pods, find
//! each container's NUMA node, encode. Over plain inputs: the podresources side converts its
//! `List` response into [`PodAffinity`] values, and the CPU → NUMA map comes from sysfs.

use std::collections::BTreeSet;

use super::{Encoder, Error, Payload};
use crate::fingerprint::FingerprintPod;
use crate::podresources::{NumaAffinity, PodResources};

/// The only Topology Manager policy under which placement is published.
pub(crate) const SUPPORTED_POLICY: &str = "single-numa-node";

/// A pod as podresources lists it, reduced to what placement needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAffinity {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Its containers, in podresources order.
    pub containers: Vec<ContainerAffinity>,
}

/// One container's exclusive resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerAffinity {
    /// The container's name.
    pub name: String,
    /// Exclusive CPUs (`cpu_ids`), in the order received.
    pub cpu_ids: Vec<i64>,
    /// `devices` entries, in order.
    pub devices: Vec<DeviceAffinity>,
    /// `memory` blocks, in order.
    pub memory: Vec<MemoryAffinity>,
}

/// A `devices` entry: how many device ids it has and its topology's NUMA ids as reported
/// (possibly empty, with `-1` or duplicates).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceAffinity {
    /// Number of `device_ids`.
    pub device_count: usize,
    /// `topology.nodes[].ID`.
    pub numa_nodes: Vec<i64>,
}

/// A `memory` block's topology NUMA ids as reported (its size is not looked at).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryAffinity {
    /// `topology.nodes[].ID`.
    pub numa_nodes: Vec<i64>,
}

/// The NUMA ids that mean something: those ≥ 0, deduplicated (`-1` is "no locality").
fn local_ids(ids: &[i64]) -> BTreeSet<i64> {
    ids.iter().copied().filter(|&id| id >= 0).collect()
}

impl DeviceAffinity {
    fn is_local(&self) -> bool {
        self.device_count > 0 && self.numa_nodes.iter().any(|&id| id >= 0)
    }
}

impl MemoryAffinity {
    fn is_local(&self) -> bool {
        self.numa_nodes.iter().any(|&id| id >= 0)
    }
}

impl ContainerAffinity {
    /// True when the container holds exclusive CPUs, a memory block with a NUMA id, or a device
    /// with ids and a NUMA id.
    pub(crate) fn is_numa_local(&self) -> bool {
        !self.cpu_ids.is_empty()
            || self.memory.iter().any(MemoryAffinity::is_local)
            || self.devices.iter().any(DeviceAffinity::is_local)
    }

    /// The container's NUMA node, `Ok(None)` when it has none to speak of (a shared-pool sidecar).
    /// Precedence: the node of `cpu_ids[0]` (the rest is not looked at); else the first device
    /// with ids and NUMA ids; else the first memory block with NUMA ids. A device or memory block
    /// on several NUMA nodes is an error; so is a CPU the map does not know.
    pub fn numa_node(&self, cpu_to_numa: impl Fn(i64) -> Option<u32>) -> Result<Option<i64>, Error> {
        if let Some(&cpu) = self.cpu_ids.first() {
            return cpu_to_numa(cpu).map(|n| Some(i64::from(n))).ok_or(Error::UnknownCpu(cpu));
        }
        let device = self
            .devices
            .iter()
            .filter(|d| d.device_count > 0)
            .map(|d| local_ids(&d.numa_nodes))
            .find(|ids| !ids.is_empty());
        let ids = device.or_else(|| self.memory.iter().map(|m| local_ids(&m.numa_nodes)).find(|ids| !ids.is_empty()));
        match ids {
            None => Ok(None),
            Some(ids) if ids.len() == 1 => Ok(ids.first().copied()),
            Some(_) => Err(Error::MultipleNumaNodes(self.name.clone())),
        }
    }
}

impl PodAffinity {
    /// True when any container is NUMA-local: the pod takes part in placement, and counts for
    /// the `with-exclusive-resources` pods fingerprint.
    pub(crate) fn is_numa_eligible(&self) -> bool {
        self.containers.iter().any(ContainerAffinity::is_numa_local)
    }
}

impl From<&PodResources> for PodAffinity {
    /// What placement reads of a pod `List` reported (after the middlewares): CPUs in the
    /// kubelet's order, device counts, and each entry's NUMA ids.
    fn from(pod: &PodResources) -> Self {
        let ids = |affinity: &NumaAffinity| affinity.nodes().iter().map(|&id| i64::from(id)).collect();
        let containers = pod
            .containers
            .iter()
            .map(|container| ContainerAffinity {
                name: container.name.clone(),
                cpu_ids: container.cpu_ids.iter().map(|&cpu| i64::from(cpu)).collect(),
                devices: container
                    .devices
                    .iter()
                    .map(|d| DeviceAffinity { device_count: d.device_ids.len(), numa_nodes: ids(&d.affinity) })
                    .collect(),
                memory: container.memory.iter().map(|m| MemoryAffinity { numa_nodes: ids(&m.affinity) }).collect(),
            })
            .collect();
        Self { namespace: pod.namespace.clone(), name: pod.name.clone(), containers }
    }
}

impl FingerprintPod for PodAffinity {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn has_exclusive_resources(&self) -> bool {
        self.is_numa_eligible()
    }
}

/// The payload of one scan: `policy` must be `single-numa-node`; every container of every
/// NUMA-eligible pod that has a NUMA node is encoded; `numa_nodes` is the `nn` (see the module
/// documentation about sparse ids). Any error means: publish no placement this scan.
///
/// The caller calls this only with the pods fingerprint on (upstream computes placement inside
/// the fingerprint branch).
pub fn scan_payload<'a>(
    policy: &str,
    numa_nodes: u32,
    pods: impl IntoIterator<Item = &'a PodAffinity>,
    cpu_to_numa: impl Fn(i64) -> Option<u32>,
) -> Result<Payload, Error> {
    if policy != SUPPORTED_POLICY {
        return Err(Error::UnsupportedPolicy(policy.to_owned()));
    }
    let mut encoder = Encoder::new(numa_nodes)?;
    for pod in pods.into_iter().filter(|pod| pod.is_numa_eligible()) {
        for container in &pod.containers {
            if let Some(numa_node) = container.numa_node(&cpu_to_numa)? {
                encoder.add(&pod.namespace, &pod.name, &container.name, numa_node)?;
            }
        }
    }
    Ok(encoder.finish())
}
