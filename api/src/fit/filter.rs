//! The NodeResourceTopologyMatch filter: does the pod fit one NUMA node of this node, and if not,
//! which request stops it.
//!
//! The rules, as the scheduler plugin applies them:
//! - a BestEffort pod asking for no extended resource passes everywhere, unchecked;
//! - a node without an NRT passes, unchecked (the kubelet may then reject the pod with
//!   `TopologyAffinityError`);
//! - only the `single-numa-node` policy filters; `none`, `best-effort`, `restricted` pass;
//! - container scope: each init container must fit some NUMA node on its own (they run one at a
//!   time, before the app containers, so nothing accumulates); each app container must fit some
//!   NUMA node, the lowest suitable id is the one the kubelet picks, and that node's resources
//!   are reduced by the container's requests before the next container is checked;
//! - pod scope: the same check once, with the pod's effective request;
//! - before any of this, kube-scheduler's own node-level fit ([`super::node`]) when the Node is
//!   known: a resource the Node does not offer, or not enough of (less what its pods request),
//!   rejects at once, whatever the policy;
//! - per request: a NUMA node listing the resource is suitable when the pod is not Guaranteed
//!   and the resource is cpu, memory or hugepages (those are not aligned for it), or when
//!   available >= requested;
//!   a resource no NUMA node lists is ignored when it is host-level (ephemeral-storage, storage
//!   or an extended resource); the suitable sets of every resource must intersect.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::node::{NodeResources, NodeShortfall};
use super::pod::{ContainerRequests, PodRequests, Requester, Resources, format_amount};
use super::topology::{Numa, TopologyManagerConfig, numa_zones};
use crate::nrt::NodeResourceTopology;
use crate::qos::{QosClass, is_hugepages, is_native};

/// Why the filter lets a pod through without checking zones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum Unchecked {
    /// BestEffort pod with no extended resources.
    BestEffortPod,
    /// The node has no NRT: the plugin cannot see its NUMA layout.
    NoTopology,
    /// The node's topology manager policy is not `single-numa-node`.
    PolicyDoesNotFilter {
        /// The policy.
        policy: String,
    },
}

impl fmt::Display for Unchecked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BestEffortPod => f.write_str("passes unchecked: BestEffort pod"),
            Self::NoTopology => f.write_str(
                "passes blindly: no NodeResourceTopology for this node (the kubelet may reject the pod with TopologyAffinityError)",
            ),
            Self::PolicyDoesNotFilter { policy } => {
                write!(f, "passes unchecked: topology manager policy {policy} (only single-numa-node is filtered)")
            }
        }
    }
}

/// Where one requester lands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// The container, or the pod in pod scope.
    pub requester: Requester,
    /// The NUMA id the kubelet would choose (the lowest suitable one).
    pub numa: u32,
}

/// Why a node is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum Rejection {
    /// kube-scheduler's node-level fit refuses the pod, before any NUMA rule.
    Node(NodeShortfall),
    /// No NUMA node has enough of one resource.
    Insufficient {
        /// Who asked.
        requester: Requester,
        /// The resource.
        resource: String,
        /// How much was requested (thousandths).
        requested: i64,
        /// What each NUMA node listing it has left (id, thousandths), after the containers
        /// placed before.
        available: Vec<(u32, i64)>,
    },
    /// No NUMA zone of the node's topology lists the resource at all (the kubelet does not
    /// manage it per NUMA node: memory and hugepages without the Static memory manager, as the
    /// upstream exporter publishes them), so the NUMA-aware scheduler refuses it.
    InNoZone {
        /// Who asked.
        requester: Requester,
        /// The resource.
        resource: String,
    },
    /// Every resource fits some NUMA node, but no one NUMA node has them all.
    Split {
        /// Who asked.
        requester: Requester,
        /// For each resource, the NUMA ids it fits on.
        fits_on: BTreeMap<String, Vec<u32>>,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Node(shortfall) => shortfall.fmt(f),
            Self::Insufficient { requester, resource, requested, available } => {
                let zones: Vec<String> = available
                    .iter()
                    .map(|(id, amount)| format!("{} on NUMA {id}", format_amount(resource, *amount)))
                    .collect();
                let best = available.iter().map(|(_, a)| *a).max().unwrap_or(0);
                write!(
                    f,
                    "{resource} {} available < {} requested by {requester} ({})",
                    format_amount(resource, best),
                    format_amount(resource, *requested),
                    zones.join(", ")
                )
            }
            Self::InNoZone { requester, resource } if resource == "memory" || is_hugepages(resource) => write!(
                f,
                "{resource} requested by {requester} is in no NUMA zone of the node's topology: the node's kubelet \
                 does not manage {resource} per NUMA node (its memory manager is not Static) and its exporter \
                 publishes none per zone"
            ),
            Self::InNoZone { requester, resource } => {
                write!(f, "{resource} requested by {requester} is in no NUMA zone of the node's topology")
            }
            Self::Split { requester, fits_on } => {
                let parts: Vec<String> = fits_on
                    .iter()
                    .map(|(resource, ids)| {
                        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
                        format!("{resource} on NUMA {}", ids.join(","))
                    })
                    .collect();
                write!(f, "no single NUMA node has everything {requester} requests: {}", parts.join("; "))
            }
        }
    }
}

/// The filter's verdict for one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum Filtered {
    /// Passes without any zone being checked.
    Unchecked(Unchecked),
    /// Checked and fits; where each requester lands.
    Fits {
        /// One placement per app container (container scope) or one for the pod.
        placements: Vec<Placement>,
    },
    /// Checked and refused.
    Rejected(Rejection),
}

/// Runs the filter for `pod` on a node with topology `nrt` (None: the node has none) and the
/// Node's resources (None: unknown, the node-level check is skipped).
pub fn filter(pod: &PodRequests, nrt: Option<&NodeResourceTopology>, node: Option<&NodeResources>) -> Filtered {
    if let Some(shortfall) = node.and_then(|node| node.shortfall(pod)) {
        return Filtered::Rejected(Rejection::Node(shortfall));
    }
    if pod.qos == QosClass::BestEffort && !pod.has_non_native_requests() {
        return Filtered::Unchecked(Unchecked::BestEffortPod);
    }
    let Some(nrt) = nrt else { return Filtered::Unchecked(Unchecked::NoTopology) };
    let config = TopologyManagerConfig::of(nrt);
    if !config.filters() {
        return Filtered::Unchecked(Unchecked::PolicyDoesNotFilter { policy: config.policy });
    }
    let mut zones = numa_zones(nrt);
    let check = |zones: &[Numa], requester: Requester, requests: &Resources| {
        fitting_numa(zones, &requester, requests, pod.qos).map(|numa| Placement { requester, numa })
    };
    if config.pod_scope() {
        return match check(&zones, Requester::Pod, &pod.effective()) {
            Ok(placement) => Filtered::Fits { placements: vec![placement] },
            Err(rejection) => Filtered::Rejected(rejection),
        };
    }
    for ContainerRequests { requester, requests } in &pod.init_containers {
        if let Err(rejection) = check(&zones, requester.clone(), requests) {
            return Filtered::Rejected(rejection);
        }
    }
    let mut placements = Vec::with_capacity(pod.containers.len());
    for ContainerRequests { requester, requests } in &pod.containers {
        match check(&zones, requester.clone(), requests) {
            Ok(placement) => {
                reduce(&mut zones, placement.numa, requests, pod.qos);
                placements.push(placement);
            }
            Err(rejection) => return Filtered::Rejected(rejection),
        }
    }
    Filtered::Fits { placements }
}

/// The lowest NUMA id that can hold every request, or why none can.
fn fitting_numa(zones: &[Numa], requester: &Requester, requests: &Resources, qos: QosClass) -> Result<u32, Rejection> {
    // None: no request constrains the choice yet (the plugin starts from a full bitmask).
    let mut candidates: Option<BTreeSet<u32>> = None;
    let mut fits_on = BTreeMap::new();
    let mut first_insufficient = None;
    for (resource, &requested) in requests {
        if requested == 0 {
            continue;
        }
        let listing: Vec<(u32, i64)> =
            zones.iter().filter_map(|z| z.available.get(resource).map(|a| (z.id, *a))).collect();
        if listing.is_empty() && is_host_level(resource) {
            continue;
        }
        // The plugin considers only the zones that list a resource, whatever the pod's QoS.
        if listing.is_empty() && first_insufficient.is_none() {
            first_insufficient = Some(Rejection::InNoZone { requester: requester.clone(), resource: resource.clone() });
        }
        let suitable: BTreeSet<u32> = listing
            .iter()
            .filter(|(_, available)| not_aligned_for(qos, resource) || *available >= requested)
            .map(|(id, _)| *id)
            .collect();
        if suitable.is_empty() && first_insufficient.is_none() {
            first_insufficient = Some(Rejection::Insufficient {
                requester: requester.clone(),
                resource: resource.clone(),
                requested,
                available: listing,
            });
        }
        candidates = Some(match candidates {
            None => suitable.clone(),
            Some(before) => before.intersection(&suitable).copied().collect(),
        });
        fits_on.insert(resource.clone(), suitable.into_iter().collect());
    }
    if let Some(rejection) = first_insufficient {
        return Err(rejection);
    }
    match candidates {
        // Nothing NUMA-bound requested: any NUMA node will do, the kubelet starts at the lowest.
        None => Ok(zones.first().map_or(0, |z| z.id)),
        Some(ids) => ids.first().copied().ok_or_else(|| Rejection::Split { requester: requester.clone(), fits_on }),
    }
}

/// Resources a NUMA node need not hold for a pod that is not Guaranteed: the kubelet does not
/// align its cpu, memory or hugepages.
fn not_aligned_for(qos: QosClass, resource: &str) -> bool {
    qos != QosClass::Guaranteed && (resource == "cpu" || resource == "memory" || is_hugepages(resource))
}

/// Resources that may exist only at node level: ephemeral storage and extended resources (a
/// node has them as a whole when no NUMA zone lists them).
pub(super) fn is_host_level(resource: &str) -> bool {
    resource == "ephemeral-storage" || resource == "storage" || !is_native(resource)
}

/// Takes a placed container's requests off its NUMA node (cpu, memory and hugepages only for a
/// Guaranteed pod: nothing else pins them there).
fn reduce(zones: &mut [Numa], numa: u32, requests: &Resources, qos: QosClass) {
    for zone in zones.iter_mut().filter(|z| z.id == numa) {
        for (resource, amount) in requests {
            if not_aligned_for(qos, resource) {
                continue;
            }
            if let Some(available) = zone.available.get_mut(resource) {
                *available = available.saturating_sub(*amount);
            }
        }
    }
}
