//! How many more pods of one shape a node can take, each on one NUMA zone: what
//! `kubectl numa capacity` answers. A zone holds as many as its scarcest requested resource
//! allows; the node as many as its zones hold together, and no more than its Node allows
//! (kube-scheduler's node-level fit: the allocatable less what the bound pods request, and the
//! pod slots).

use serde::Serialize;

use super::filter::is_host_level;
use super::node::{NodeResources, PODS};
use super::pod::Resources;
use super::topology::{TopologyManagerConfig, numa_zones};
use crate::nrt::NodeResourceTopology;

/// How many such pods one NUMA zone can still hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneRoom {
    /// The NUMA id.
    pub numa: u32,
    /// How many pods (None: no requested resource is counted per zone: the Node's limit alone
    /// counts).
    pub pods: Option<u64>,
    /// The resource that runs out first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<String>,
}

/// How many such pods one node can still take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRoom {
    /// The topology manager policy.
    pub policy: String,
    /// The topology manager scope (`container` or `pod`).
    pub scope: String,
    /// Whether the kubelet enforces one NUMA zone per pod (`single-numa-node`); elsewhere the
    /// count is of the pods that would fit aligned, which the kubelet does not insist on.
    pub aligned: bool,
    /// Each zone's room.
    pub zones: Vec<ZoneRoom>,
    /// What the Node allows, and the resource that runs out first there (None: unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_limit: Option<(u64, String)>,
    /// The pods the node can take: the zones' sum, within the Node's limit.
    pub pods: u64,
}

/// The room on the node of `nrt` (and its Node, when known) for pods requesting `request`
/// (thousandths; a Guaranteed pod's, since only those are aligned).
pub fn room(request: &Resources, nrt: &NodeResourceTopology, node: Option<&NodeResources>) -> NodeRoom {
    let config = TopologyManagerConfig::of(nrt);
    let zones = numa_zones(nrt);
    // Each requested resource, and whether any zone lists it.
    let requested: Vec<(&String, i64, bool)> = request
        .iter()
        .filter(|(_, amount)| **amount > 0)
        .map(|(name, amount)| (name, *amount, zones.iter().any(|z| z.available.contains_key(name))))
        .collect();
    let zone_rooms: Vec<ZoneRoom> = zones
        .iter()
        .map(|zone| {
            let limits = requested.iter().filter_map(|(resource, amount, listed_anywhere)| {
                match zone.available.get(*resource) {
                    Some(available) => Some(((available / amount).max(0) as u64, (*resource).clone())),
                    // A device or storage no zone lists is the node's, not a zone's.
                    None if !listed_anywhere && is_host_level(resource) => None,
                    // A zone that does not list what others do, or what must be per zone.
                    None => Some((0, (*resource).clone())),
                }
            });
            let scarcest = limits.min_by_key(|(pods, _)| *pods);
            ZoneRoom { numa: zone.id, pods: scarcest.as_ref().map(|(p, _)| *p), limited_by: scarcest.map(|(_, r)| r) }
        })
        .collect();
    let node_limit = node.map(|node| node_limit(request, node));
    let counted_per_zone = zone_rooms.iter().any(|z| z.pods.is_some());
    let sum: u64 = zone_rooms.iter().filter_map(|z| z.pods).fold(0, u64::saturating_add);
    let pods = match (&node_limit, counted_per_zone) {
        (Some((limit, _)), true) => sum.min(*limit),
        (None, true) => sum,
        (Some((limit, _)), false) => *limit,
        (None, false) => 0,
    };
    let aligned = config.filters();
    NodeRoom { policy: config.policy, scope: config.scope, aligned, zones: zone_rooms, node_limit, pods }
}

/// What the Node allows: per requested resource (and pod slots), what is left over the request.
fn node_limit(request: &Resources, node: &NodeResources) -> (u64, String) {
    let mut limits: Vec<(u64, String)> = request
        .iter()
        .filter(|(_, amount)| **amount > 0)
        .map(|(resource, amount)| ((node.free(resource) / amount) as u64, resource.clone()))
        .collect();
    if node.offers(PODS) {
        limits.push(((node.free(PODS) / 1000) as u64, PODS.to_owned()));
    }
    limits.into_iter().min_by_key(|(pods, _)| *pods).unwrap_or((u64::MAX, String::new()))
}
