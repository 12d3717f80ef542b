//! Names with a meaning that producers and the scheduler plugin agree on.

/// Zone type of a NUMA node; the scheduler ignores zones of any other type.
pub const ZONE_TYPE_NODE: &str = "Node";

/// Node-wide attribute: the kubelet's topology manager policy (`none`, `best-effort`,
/// `restricted`, `single-numa-node`).
pub const ATTR_TOPOLOGY_MANAGER_POLICY: &str = "topologyManagerPolicy";
/// Node-wide attribute: the kubelet's topology manager scope (`container`, `pod`).
pub const ATTR_TOPOLOGY_MANAGER_SCOPE: &str = "topologyManagerScope";
/// Node-wide attribute: the pods fingerprint (`pfp0v001<16 hex>`).
pub const ATTR_PODS_FINGERPRINT: &str = "nodeTopologyPodsFingerprint";
/// Node-wide attribute: which pods the fingerprint covers (`all`, `with-exclusive-resources`).
pub const ATTR_PODS_FINGERPRINT_METHOD: &str = "nodeTopologyPodsFingerprintMethod";
/// Node-wide attribute: NUMA placement metadata for the scheduler's NUMA-aware preemption.
pub const ATTR_NUMA_PLACEMENT_METADATA: &str = "topology.node.k8s.io/numaplacement-metadata";
/// Zone attribute: the NUMA placement vector of that zone.
pub const ATTR_NUMA_PLACEMENT_VECTOR: &str = "topology.node.k8s.io/numaplacement-vector";

/// Zone attribute: `false` when the kubelet does not manage memory and hugepages per NUMA node
/// (its memory manager is not Static): the zone's `memory` and `hugepages-*` are then the whole
/// node's figures, published so that the scheduler's per-zone check holds nothing back that
/// the kubelet itself would admit.
pub const ATTR_MEMORY_NUMA_MANAGED: &str = "memoryNUMAManaged";

/// Annotation: legacy carrier of the pods fingerprint.
pub const ANNOTATION_FINGERPRINT: &str = "topology.node.k8s.io/fingerprint";
/// Annotation our API server sets to when the object last changed (RFC 3339, UTC, seconds).
/// Named in our own API domain; clients cannot set it: a value they send is replaced, and a stale
/// copy sent back with an otherwise unchanged object is not a change.
pub const ANNOTATION_LAST_CHANGE: &str = "nodetopology.openshift.io/last-change";
/// Annotation: what triggered the last update (`periodic` or `reactive`).
pub const ANNOTATION_RTE_UPDATE: &str = "k8stopoawareschedwg/rte-update";

/// Topology manager policies as the kubelet spells them.
pub const TOPOLOGY_MANAGER_POLICIES: &[&str] = &["none", "best-effort", "restricted", "single-numa-node"];
/// Topology manager scopes as the kubelet spells them.
pub const TOPOLOGY_MANAGER_SCOPES: &[&str] = &["container", "pod"];

/// The zone name of NUMA node `id`: `node-<id>`.
pub fn numa_zone_name(id: u32) -> String {
    format!("node-{id}")
}

/// The NUMA node id a zone name stands for, if it is `node-<id>` with a decimal id.
pub fn numa_id_from_zone_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("node-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_names_round_trip() {
        assert_eq!(numa_zone_name(3), "node-3");
        assert_eq!(numa_id_from_zone_name("node-3"), Some(3));
        for bad in ["node-", "node--1", "node-+1", "socket-0", "node-1a"] {
            assert_eq!(numa_id_from_zone_name(bad), None, "{bad}");
        }
    }
}
