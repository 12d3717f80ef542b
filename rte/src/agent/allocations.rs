//! Reacting to allocations without host hooks: the agent asks the kubelet's podresources `List`
//! on a short period and rescans when the answer changed.
//!
//! # Why polling `List`
//!
//! A node's NodeResourceTopology must show an exclusive allocation (or its release) within a
//! second, on any cluster: no hook on the host, no kubelet patch, no extra privilege. Three
//! sources were weighed:
//!
//! - **The kubelet's checkpoint files** (`cpu_manager_state`, `memory_manager_state`,
//!   `device-plugins/kubelet_internal_checkpoint`), watched with inotify. They change at the
//!   moment of allocation, but the agent would need `/var/lib/kubelet` mounted from the host (a
//!   wider mount than the podresources socket directory it has), they exist only with the static
//!   CPU and memory managers, and the kubelet replaces them by rename, so a watch has to follow
//!   the directory and every kind of event (a create-only watch misses releases). Each of those
//!   is a way to miss a change on some cluster.
//! - **A watch of the node's pods** on the API server. It needs list/watch RBAC on pods and an
//!   API-server watch per node (a fleet-wide cost), and a pod's events do not coincide with the
//!   kubelet's allocation: the kubelet admits and pins a container on its own schedule, after
//!   the pod is bound and before its status changes.
//! - **Polling `List`**, the very answer a scan reads: works wherever the agent works, with the
//!   socket it already has, sees exactly what a scan would publish, and is cheap: one `List` of
//!   250 pods is ≈0.3 ms round trip. The kubelet's podresources server allows 100 calls per
//!   second with a burst of 10, shared by every client on the node; one call every 500 ms (the
//!   `--podresources-poll-interval` default) is 2 % of that, and
//!   [`MIN_ALLOCATION_POLL`](crate::config::MIN_ALLOCATION_POLL) keeps any setting at 10 % or less.
//!
//! So the agent polls. A change of the *allocation set* (the digest below: every pod and
//! container with its exclusive CPUs, memory blocks and devices, independent of the order the
//! kubelet lists pods in) offers a reactive scan; an unchanged answer costs nothing more. The
//! notify file keeps working beside it for those who have a hook. Measured figures (time from an
//! allocation change to the published object, CPU while idle, kubelet calls per second) are in
//! BENCHMARKS.md.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use crate::podresources::{ContainerResources, PodResources};

/// A digest of what `List` reports: equal for two answers holding the same pods with the same
/// exclusive resources, whatever their order. Pods without exclusive resources count too (they
/// change the `all` pods fingerprint).
pub(crate) fn allocation_digest(pods: &[PodResources]) -> u64 {
    let mut entries: Vec<u64> = Vec::with_capacity(pods.len());
    for pod in pods {
        let mut hasher = DefaultHasher::new();
        (&pod.namespace, &pod.name).hash(&mut hasher);
        let mut containers: Vec<u64> = pod.containers.iter().map(container_digest).collect();
        containers.sort_unstable();
        containers.hash(&mut hasher);
        entries.push(hasher.finish());
    }
    entries.sort_unstable();
    let mut hasher = DefaultHasher::new();
    entries.hash(&mut hasher);
    hasher.finish()
}

fn container_digest(container: &ContainerResources) -> u64 {
    let mut hasher = DefaultHasher::new();
    container.name.hash(&mut hasher);
    // In the kubelet's order: NUMA placement reads the first CPU.
    container.cpu_ids.hash(&mut hasher);
    let mut memory: Vec<(&str, u64, &[u32])> =
        container.memory.iter().map(|m| (m.memory_type.as_str(), m.size_bytes, m.affinity.nodes())).collect();
    memory.sort_unstable();
    memory.hash(&mut hasher);
    let mut devices: Vec<(&str, Vec<&str>, &[u32])> = container
        .devices
        .iter()
        .map(|d| {
            let mut ids: Vec<&str> = d.device_ids.iter().map(String::as_str).collect();
            ids.sort_unstable();
            (d.resource_name.as_str(), ids, d.affinity.nodes())
        })
        .collect();
    devices.sort_unstable();
    devices.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podresources::{Devices, MemoryBlock, NumaAffinity};

    fn pod(name: &str, cpus: &[u32]) -> PodResources {
        PodResources {
            namespace: "telco".into(),
            name: name.into(),
            containers: vec![ContainerResources {
                name: "app".into(),
                cpu_ids: cpus.to_vec(),
                memory: vec![MemoryBlock {
                    memory_type: "memory".into(),
                    size_bytes: 1 << 30,
                    affinity: NumaAffinity::Nodes(vec![0]),
                }],
                devices: vec![Devices {
                    resource_name: "example.com/vf".into(),
                    device_ids: vec!["a".into(), "b".into()],
                    affinity: NumaAffinity::Nodes(vec![0]),
                }],
            }],
        }
    }

    #[test]
    fn the_digest_ignores_listing_order_and_sees_every_allocation_change() {
        let base = allocation_digest(&[pod("a", &[1, 2]), pod("b", &[3])]);
        assert_eq!(base, allocation_digest(&[pod("b", &[3]), pod("a", &[1, 2])]), "pod order");
        let mut reordered_devices = pod("a", &[1, 2]);
        reordered_devices.containers[0].devices[0].device_ids.reverse();
        assert_eq!(base, allocation_digest(&[reordered_devices, pod("b", &[3])]), "device id order");

        let mut changes = vec![
            vec![pod("a", &[1, 2])],                                // a pod gone
            vec![pod("a", &[1, 2]), pod("b", &[3, 4])],             // a CPU more
            vec![pod("a", &[1, 2]), pod("b", &[3]), pod("c", &[])], // a pod with nothing exclusive
        ];
        let mut memory = pod("b", &[3]);
        memory.containers[0].memory[0].size_bytes *= 2;
        changes.push(vec![pod("a", &[1, 2]), memory]);
        let mut device = pod("b", &[3]);
        device.containers[0].devices[0].affinity = NumaAffinity::Nodes(vec![1]);
        changes.push(vec![pod("a", &[1, 2]), device]);
        for (i, pods) in changes.iter().enumerate() {
            assert_ne!(base, allocation_digest(pods), "change {i}");
        }
    }
}
