//! The node side as the NUMA filter reads it: the topology manager configuration from an NRT's
//! attributes and the NUMA zones with their available resources.

use serde::Serialize;

use super::pod::Resources;
use crate::nrt::NodeResourceTopology;
use crate::nrt::well_known::{
    ATTR_TOPOLOGY_MANAGER_POLICY, ATTR_TOPOLOGY_MANAGER_SCOPE, TOPOLOGY_MANAGER_POLICIES, TOPOLOGY_MANAGER_SCOPES,
    ZONE_TYPE_NODE, numa_id_from_zone_name,
};

/// The highest NUMA id the scheduler considers (its bitmask has 64 bits); zones above it are ignored.
pub const MAX_NUMA_ID: u32 = 63;

/// The kubelet's topology manager settings as the scheduler derives them from an NRT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopologyManagerConfig {
    /// `none`, `best-effort`, `restricted` or `single-numa-node`.
    pub policy: String,
    /// `container` or `pod`.
    pub scope: String,
}

impl TopologyManagerConfig {
    /// Whether the filter checks anything on this node: only `single-numa-node` does.
    pub fn filters(&self) -> bool {
        self.policy == "single-numa-node"
    }

    /// Whether the kubelet aligns the whole pod at once.
    pub fn pod_scope(&self) -> bool {
        self.scope == "pod"
    }

    /// The configuration of a node: the kubelet defaults (`none`, `container`), then the
    /// deprecated `topologyPolicies[0]`, then the attributes; invalid values are ignored and the
    /// last valid attribute wins.
    pub fn of(nrt: &NodeResourceTopology) -> Self {
        let mut config = Self { policy: "none".to_owned(), scope: "container".to_owned() };
        if let Some((policy, scope)) = nrt.topology_policies.first().and_then(|p| deprecated_policy(p)) {
            config.policy = policy.to_owned();
            config.scope = scope.to_owned();
        }
        for attribute in &nrt.attributes {
            if attribute.name == ATTR_TOPOLOGY_MANAGER_POLICY
                && TOPOLOGY_MANAGER_POLICIES.contains(&attribute.value.as_str())
            {
                config.policy = attribute.value.to_string();
            }
            if attribute.name == ATTR_TOPOLOGY_MANAGER_SCOPE
                && TOPOLOGY_MANAGER_SCOPES.contains(&attribute.value.as_str())
            {
                config.scope = attribute.value.to_string();
            }
        }
        config
    }
}

/// The deprecated enumerated policies that carry a scope; the others (`None`, `BestEffort`,
/// `Restricted`) say nothing the scheduler uses.
fn deprecated_policy(value: &str) -> Option<(&'static str, &'static str)> {
    Some(match value {
        "SingleNUMANodeContainerLevel" => ("single-numa-node", "container"),
        "SingleNUMANodePodLevel" => ("single-numa-node", "pod"),
        "RestrictedContainerLevel" => ("restricted", "container"),
        "RestrictedPodLevel" => ("restricted", "pod"),
        "BestEffortContainerLevel" => ("best-effort", "container"),
        "BestEffortPodLevel" => ("best-effort", "pod"),
        _ => return None,
    })
}

/// One NUMA node's available resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numa {
    /// The NUMA id (`node-<id>`).
    pub id: u32,
    /// Available amounts, in thousandths.
    pub available: Resources,
}

/// The NUMA zones of an NRT, ordered by id: zones of type `Node` named `node-<id>` with
/// `id <= MAX_NUMA_ID`; any other zone is not a NUMA node to the scheduler.
pub fn numa_zones(nrt: &NodeResourceTopology) -> Vec<Numa> {
    let mut zones: Vec<Numa> = nrt
        .zones
        .iter()
        .filter(|zone| zone.zone_type == ZONE_TYPE_NODE)
        .filter_map(|zone| {
            let id = numa_id_from_zone_name(&zone.name).filter(|id| *id <= MAX_NUMA_ID)?;
            let available = zone
                .resources
                .iter()
                .map(|r| (r.name.to_string(), r.available.ceil_milli_i64().unwrap_or(i64::MAX).max(0)))
                .collect();
            Some(Numa { id, available })
        })
        .collect();
    zones.sort_by_key(|zone| zone.id);
    zones
}
