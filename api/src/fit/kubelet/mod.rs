//! Would the node's kubelet admit this pod, and on which NUMA nodes: the Topology Manager's
//! admission, for every policy and scope, over what the node's NRT says is free.
//!
//! How the kubelet decides (Kubernetes 1.24 and later), as modelled here:
//!
//! - **Who aligns what.** The CPU manager (static) gives hints only for a Guaranteed pod's
//!   containers with whole CPUs; the memory manager (Static) only for Guaranteed pods, for
//!   `memory` and every `hugepages-*` together; the device manager for devices of any QoS that
//!   report a NUMA node. A resource no manager aligns has no preference. A node whose NRT lists
//!   memory in no zone, or says `memoryNUMAManaged: false`, runs no Static memory manager.
//! - **Hints.** Every NUMA set whose free amount (plus what an earlier init container leaves for
//!   reuse) holds the request is a hint. It is *preferred* when it is as narrow as the narrowest
//!   set whose *capacity* (allocatable, for memory) could hold it, so a request one node could
//!   hold when empty, but none holds now, has only non-preferred, wider hints.
//! - **Merge.** One hint per resource, ANDed; the result is preferred only when every resource
//!   gave a preferred hint and they are the same set. Among preferred results the fewest nodes
//!   win, then the lowest ids, or with `prefer-closest-numa-nodes` the lowest average distance.
//! - **Policies.** `none` aligns nothing and admits everything; `best-effort` admits
//!   whatever the merge gives; `restricted` admits only a preferred result; `single-numa-node`
//!   first keeps only preferred one-node hints, then admits only a preferred result. A refusal
//!   fails the pod with `TopologyAffinityError`.
//! - **Scopes.** `container` aligns each init container, sidecar and app container in turn,
//!   each against what the ones before left; a regular init container's CPUs are reused by the
//!   next containers (which must then include them), and its memory and devices are free again
//!   after it. `pod` aligns the pod's effective request once.
//! - **`max-allowable-numa-nodes`** (8 unless raised): a kubelet with a policy other than `none`
//!   on a machine with more NUMA nodes does not start.
//!
//! What the NRT cannot tell, and is assumed: the CPU manager runs `static` where the NRT lists
//! CPUs per zone; the memory manager's existing multi-node groups are not known (a set crossing
//! one may be refused by the kubelet and not here); the CPUs an allocation takes are taken in
//! NUMA id order within the chosen set.

mod hints;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

pub use hints::{Distances, Hint, MAX_PERMUTATIONS, Mask, Merged, ResourceHints, Tiebreak};

use super::pod::{PodRequests, Requester, Resources};
use super::topology::TopologyManagerConfig;
use crate::nrt::NodeResourceTopology;
use crate::nrt::well_known::{ATTR_MEMORY_NUMA_MANAGED, ZONE_TYPE_NODE, numa_id_from_zone_name};
use crate::qos::{QosClass, is_hugepages, is_native};

/// The NUMA nodes a kubelet runs with a policy other than `none` unless told otherwise.
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

/// The Topology Manager's policy options that change admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyOptions {
    /// `prefer-closest-numa-nodes`.
    pub prefer_closest_numa_nodes: bool,
    /// `max-allowable-numa-nodes`.
    pub max_allowable_numa_nodes: usize,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        Self { prefer_closest_numa_nodes: false, max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES }
    }
}

/// Where one requester (a container, or the pod in pod scope) is aligned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Aligned {
    /// Who.
    pub requester: Requester,
    /// Its NUMA nodes; None when nothing of it is aligned.
    pub numa: Option<Vec<u32>>,
    /// Whether the set is as narrow as the request allows.
    pub preferred: bool,
}

/// Why the kubelet would refuse the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "refusal", rename_all = "camelCase")]
pub enum Refusal {
    /// `TopologyAffinityError`: no NUMA set the policy accepts holds what `requester` asks.
    TopologyAffinity {
        /// Who.
        requester: Requester,
        /// The policy.
        policy: String,
        /// The resources it asks of one set, and what the best set offers (for the message).
        detail: String,
    },
    /// The kubelet does not run its Topology Manager on this many NUMA nodes.
    TooManyNumaNodes {
        /// NUMA nodes on the machine.
        nodes: usize,
        /// The kubelet's limit.
        limit: usize,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TopologyAffinity { requester, policy, detail } => {
                write!(f, "the kubelet ({policy}) cannot align {requester}: {detail}")
            }
            Self::TooManyNumaNodes { nodes, limit } => write!(
                f,
                "{nodes} NUMA nodes: a kubelet with a Topology Manager policy does not run on more than {limit} \
                 (max-allowable-numa-nodes)"
            ),
        }
    }
}

/// The kubelet's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Admission {
    /// Where each requester is aligned, in the order the kubelet aligns them (up to a refusal).
    pub aligned: Vec<Aligned>,
    /// Why the pod is refused; None when admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
}

impl Admission {
    /// Whether the kubelet admits the pod.
    pub fn admitted(&self) -> bool {
        self.refusal.is_none()
    }
}

/// One NUMA node's amounts, per resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Amounts {
    capacity: i64,
    allocatable: i64,
    available: i64,
}

/// The node as its kubelet sees it.
struct Machine {
    ids: Vec<u32>,
    all: Mask,
    /// resource → NUMA id → amounts (thousandths).
    resources: BTreeMap<String, BTreeMap<u32, Amounts>>,
    distances: Distances,
    memory_managed: bool,
}

impl Machine {
    fn of(nrt: &NodeResourceTopology) -> Self {
        let mut machine = Self {
            ids: Vec::new(),
            all: Mask(0),
            resources: BTreeMap::new(),
            distances: Distances::new(),
            memory_managed: true,
        };
        for zone in nrt.zones.iter().filter(|z| z.zone_type == ZONE_TYPE_NODE) {
            let Some(id) = numa_id_from_zone_name(&zone.name).filter(|id| *id < 64) else { continue };
            machine.ids.push(id);
            machine.all.0 |= Mask::of(id).0;
            for resource in &zone.resources {
                let milli = |q: &crate::quantity::Quantity| q.ceil_milli_i64().unwrap_or(i64::MAX).max(0);
                let amounts = Amounts {
                    capacity: milli(&resource.capacity),
                    allocatable: milli(&resource.allocatable),
                    available: milli(&resource.available),
                };
                machine.resources.entry(resource.name.to_string()).or_default().insert(id, amounts);
            }
            for cost in &zone.costs {
                if let Some(other) = numa_id_from_zone_name(&cost.name) {
                    machine.distances.insert((id, other), cost.value);
                }
            }
            if zone.attributes.iter().any(|a| a.name == ATTR_MEMORY_NUMA_MANAGED && a.value == "false") {
                machine.memory_managed = false;
            }
        }
        machine.ids.sort_unstable();
        if !machine.resources.contains_key("memory") {
            machine.memory_managed = false;
        }
        machine
    }

    fn per_numa(&self, resource: &str, field: impl Fn(&Amounts) -> i64) -> BTreeMap<u32, i64> {
        self.resources
            .get(resource)
            .map(|zones| zones.iter().map(|(id, a)| (*id, field(a))).collect())
            .unwrap_or_default()
    }

    /// Takes `amount` of `resource` from the set's nodes, lowest id first; what it took where.
    fn take(&mut self, resource: &str, mask: Mask, mut amount: i64) -> BTreeMap<u32, i64> {
        let mut taken = BTreeMap::new();
        let Some(zones) = self.resources.get_mut(resource) else { return taken };
        for id in mask.ids() {
            let Some(zone) = zones.get_mut(&id) else { continue };
            let here = zone.available.min(amount).max(0);
            zone.available -= here;
            amount -= here;
            if here > 0 {
                taken.insert(id, here);
            }
        }
        taken
    }

    /// Gives back what [`Self::take`] took.
    fn give_back(&mut self, resource: &str, taken: &BTreeMap<u32, i64>) {
        let Some(zones) = self.resources.get_mut(resource) else { return };
        for (id, amount) in taken {
            if let Some(zone) = zones.get_mut(id) {
                zone.available = zone.available.saturating_add(*amount);
            }
        }
    }
}

/// What the managers align of a request: whole CPUs (Guaranteed), memory and hugepages
/// (Guaranteed, Static memory manager), devices the NRT places on NUMA nodes (any QoS).
fn aligned_requests(requests: &Resources, qos: QosClass, machine: &Machine) -> Resources {
    requests
        .iter()
        .filter(|(name, amount)| match name.as_str() {
            "cpu" => qos == QosClass::Guaranteed && *amount % 1000 == 0 && machine.resources.contains_key("cpu"),
            "memory" => qos == QosClass::Guaranteed && machine.memory_managed,
            name if is_hugepages(name) => qos == QosClass::Guaranteed && machine.memory_managed,
            name => !is_native(name) && machine.resources.contains_key(name),
        })
        .map(|(name, amount)| (name.clone(), *amount))
        .collect()
}

/// Each aligned resource's hints. Memory and hugepages are one manager's: a set is a hint for all
/// of them when it holds all of them.
fn resource_hints(
    wanted: &Resources,
    machine: &Machine,
    reusable: &BTreeMap<String, BTreeMap<u32, i64>>,
) -> Vec<(String, ResourceHints)> {
    let none = BTreeMap::new();
    let mut lists = Vec::new();
    let mut memory: Option<Vec<Hint>> = None;
    for (resource, amount) in wanted {
        let sized_by_allocatable = resource == "memory" || is_hugepages(resource);
        let sized = machine.per_numa(resource, |a| if sized_by_allocatable { a.allocatable } else { a.capacity });
        let free = machine.per_numa(resource, |a| a.available);
        let reused = reusable.get(resource).unwrap_or(&none);
        let found = hints::hints(&machine.ids, *amount, &sized, &free, reused);
        if sized_by_allocatable {
            memory = Some(match memory {
                None => found,
                Some(before) => before.into_iter().filter(|h| found.iter().any(|f| f.mask == h.mask)).collect(),
            });
        } else {
            lists.push((resource.clone(), Some(found)));
        }
    }
    if let Some(memory) = memory {
        for resource in wanted.keys().filter(|r| *r == "memory" || is_hugepages(r)) {
            lists.push((resource.clone(), Some(memory.clone())));
        }
    }
    lists
}

/// Runs the kubelet's admission of `pod` on the node `nrt` describes.
pub fn admit(pod: &PodRequests, nrt: &NodeResourceTopology, options: &PolicyOptions) -> Admission {
    admit_on(pod, &TopologyManagerConfig::of(nrt), &mut Machine::of(nrt), options)
}

/// [`admit`], and the NRT as it reads once the admitted pod holds what the kubelet aligns for it
/// (its zones' `available` less the pod's aligned CPUs, memory, hugepages and devices): what a
/// scheduler that placed the pod counts until the node's exporter reports it.
pub fn reserve(
    pod: &PodRequests,
    nrt: &NodeResourceTopology,
    options: &PolicyOptions,
) -> (Admission, NodeResourceTopology) {
    let mut machine = Machine::of(nrt);
    let admission = admit_on(pod, &TopologyManagerConfig::of(nrt), &mut machine, options);
    let mut after = nrt.clone();
    if admission.admitted() {
        for zone in after.zones.iter_mut().filter(|z| z.zone_type == ZONE_TYPE_NODE) {
            let Some(id) = numa_id_from_zone_name(&zone.name) else { continue };
            for resource in &mut zone.resources {
                let left = machine.resources.get(resource.name.as_str()).and_then(|zones| zones.get(&id));
                if let Some(left) = left {
                    resource.available = crate::quantity::Quantity::from_milli(left.available);
                }
            }
        }
    }
    (admission, after)
}

fn admit_on(
    pod: &PodRequests,
    config: &TopologyManagerConfig,
    machine: &mut Machine,
    options: &PolicyOptions,
) -> Admission {
    if config.policy == "none" {
        return Admission { aligned: Vec::new(), refusal: None };
    }
    if machine.ids.len() > options.max_allowable_numa_nodes {
        let refusal = Refusal::TooManyNumaNodes { nodes: machine.ids.len(), limit: options.max_allowable_numa_nodes };
        return Admission { aligned: Vec::new(), refusal: Some(refusal) };
    }
    let tiebreak = if options.prefer_closest_numa_nodes { Tiebreak::Closest } else { Tiebreak::Narrowest };
    let requesters: Vec<(Requester, Resources)> = if config.pod_scope() {
        vec![(Requester::Pod, pod_scope_requests(pod))]
    } else {
        pod.init_containers.iter().chain(&pod.containers).map(|c| (c.requester.clone(), c.requests.clone())).collect()
    };
    let mut aligned = Vec::new();
    // What regular init containers leave for the next containers to reuse (CPUs, memory).
    let mut reusable: BTreeMap<String, BTreeMap<u32, i64>> = BTreeMap::new();
    for (requester, requests) in requesters {
        let wanted = aligned_requests(&requests, pod.qos, machine);
        let lists = resource_hints(&wanted, machine, &reusable);
        let hint_lists: Vec<ResourceHints> = lists.iter().map(|(_, h)| h.clone()).collect();
        let merged =
            hints::merge(machine.all, &hint_lists, config.policy == "single-numa-node", tiebreak, &machine.distances);
        let refused = match config.policy.as_str() {
            "restricted" | "single-numa-node" => !merged.preferred,
            _ => false,
        };
        if refused {
            let detail = describe_shortfall(&wanted, machine, &config.policy);
            let refusal = Refusal::TopologyAffinity { requester, policy: config.policy.clone(), detail };
            return Admission { aligned, refusal: Some(refusal) };
        }
        let mask = merged.mask.unwrap_or(machine.all);
        let init = matches!(requester, Requester::InitContainer(_));
        for (resource, amount) in &wanted {
            let reused = reusable.get_mut(resource).map(|zones| take_reused(zones, *amount)).unwrap_or(0);
            let taken = machine.take(resource, mask, amount - reused);
            if init && resource == "cpu" {
                // The next containers reuse these CPUs, and must be aligned where they are.
                reusable.insert(resource.clone(), taken);
            } else if init {
                // Memory and devices an init container held are free again once it ends.
                machine.give_back(resource, &taken);
            }
        }
        let numa = (!wanted.is_empty()).then(|| merged.mask.map(|m| m.ids().collect())).flatten();
        aligned.push(Aligned { requester, numa, preferred: merged.preferred });
    }
    Admission { aligned, refusal: None }
}

/// Takes up to `amount` from the reusable amounts; how much was taken.
fn take_reused(zones: &mut BTreeMap<u32, i64>, amount: i64) -> i64 {
    let mut taken = 0;
    for left in zones.values_mut() {
        let here = (*left).min(amount - taken);
        *left -= here;
        taken += here;
    }
    zones.retain(|_, left| *left > 0);
    taken
}

/// The pod scope's request: the effective request, counting a container's CPUs only when they
/// are whole (the CPU manager pins nothing else).
fn pod_scope_requests(pod: &PodRequests) -> Resources {
    let mut whole_cpus = pod.clone();
    for container in whole_cpus.init_containers.iter_mut().chain(whole_cpus.containers.iter_mut()) {
        if container.requests.get("cpu").is_some_and(|cpu| cpu % 1000 != 0) {
            container.requests.remove("cpu");
        }
    }
    whole_cpus.overhead.clear();
    whole_cpus.effective()
}

/// One line on what no acceptable set offers: per resource, the request and the most any one
/// NUMA node has free.
fn describe_shortfall(wanted: &Resources, machine: &Machine, policy: &str) -> String {
    let parts: Vec<String> = wanted
        .iter()
        .map(|(resource, amount)| {
            let free = machine.per_numa(resource, |a| a.available);
            let most = free.values().copied().max().unwrap_or(0);
            format!(
                "{resource} {} requested, at most {} free on one NUMA node",
                super::format_amount(resource, *amount),
                super::format_amount(resource, most)
            )
        })
        .collect();
    let rule = if policy == "single-numa-node" {
        "no single NUMA node holds all of it"
    } else {
        "no NUMA set as narrow as the request allows holds all of it"
    };
    format!("{rule} ({})", parts.join(", "))
}
