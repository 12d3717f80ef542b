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
use std::sync::Arc;

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

/// One aligned resource of a refused request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shortfall {
    /// The resource.
    pub resource: String,
    /// What the requester asks (thousandths).
    pub requested: i64,
    /// The most one NUMA node has free (thousandths).
    pub most_free: i64,
}

/// Why the kubelet would refuse the pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "refusal", rename_all = "camelCase")]
pub enum Refusal {
    /// `TopologyAffinityError`: no NUMA set the policy accepts holds what `requester` asks.
    TopologyAffinity {
        /// Who.
        requester: Requester,
        /// The policy.
        policy: String,
        /// Per aligned resource: what it asks, and the most one NUMA node has free.
        shortfall: Vec<Shortfall>,
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
            Self::TopologyAffinity { requester, policy, shortfall } => {
                let rule = if policy == "single-numa-node" {
                    "no single NUMA node holds all of it"
                } else {
                    "no NUMA set as narrow as the request allows holds all of it"
                };
                let parts: Vec<String> = shortfall
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {} requested, at most {} free on one NUMA node",
                            s.resource,
                            super::format_amount(&s.resource, s.requested),
                            super::format_amount(&s.resource, s.most_free)
                        )
                    })
                    .collect();
                write!(f, "the kubelet ({policy}) cannot align {requester}: {rule} ({})", parts.join(", "))
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Amounts {
    capacity: i64,
    allocatable: i64,
    available: i64,
}

/// One resource's amounts per NUMA id: a handful of entries, kept in a vector (cheaper to read
/// and to copy than a tree, on every node of every filter).
#[derive(Debug, Clone, Default)]
struct Zones(Vec<(u32, Amounts)>);

impl Zones {
    fn get(&self, id: &u32) -> Option<&Amounts> {
        self.0.iter().find(|(at, _)| at == id).map(|(_, a)| a)
    }

    fn get_mut(&mut self, id: &u32) -> Option<&mut Amounts> {
        self.0.iter_mut().find(|(at, _)| at == id).map(|(_, a)| a)
    }

    fn insert(&mut self, id: u32, amounts: Amounts) {
        match self.get_mut(&id) {
            Some(at) => *at = amounts,
            None => self.0.push((id, amounts)),
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&u32, &Amounts)> {
        self.0.iter().map(|(id, a)| (id, a))
    }
}

/// Each resource's [`Zones`], by name.
#[derive(Debug, Clone, Default)]
struct ByResource(Vec<(Arc<str>, Zones)>);

impl ByResource {
    fn get(&self, name: &str) -> Option<&Zones> {
        self.0.iter().find(|(at, _)| &**at == name).map(|(_, z)| z)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Zones> {
        self.0.iter_mut().find(|(at, _)| &**at == name).map(|(_, z)| z)
    }

    fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn slot(&mut self, name: &str) -> &mut Zones {
        let index = match self.0.iter().position(|(at, _)| &**at == name) {
            Some(index) => index,
            None => {
                self.0.push((Arc::from(name), Zones::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[index].1
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &Zones)> {
        self.0.iter().map(|(name, zones)| (&**name, zones))
    }
}

/// The node as its kubelet sees it.
#[derive(Debug, Clone)]
struct Machine {
    ids: Vec<u32>,
    all: Mask,
    /// Every NUMA set, fewest nodes first (what the hint providers walk).
    masks: Arc<[Mask]>,
    /// resource → NUMA id → amounts (thousandths).
    resources: ByResource,
    distances: Distances,
    memory_managed: bool,
}

impl Machine {
    fn of(nrt: &NodeResourceTopology) -> Self {
        let mut machine = Self {
            ids: Vec::new(),
            all: Mask(0),
            masks: Arc::from(Vec::new()),
            resources: ByResource::default(),
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
                machine.resources.slot(&resource.name).insert(id, amounts);
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
        machine.masks = Arc::from(Mask::every_subset(&machine.ids));
        if !machine.resources.contains_key("memory") {
            machine.memory_managed = false;
        }
        machine
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
fn aligned_requests<'a>(requests: &'a Resources, qos: QosClass, machine: &Machine) -> Wanted<'a> {
    requests
        .iter()
        .filter(|(name, amount)| match name.as_str() {
            "cpu" => qos == QosClass::Guaranteed && *amount % 1000 == 0 && machine.resources.contains_key("cpu"),
            "memory" => qos == QosClass::Guaranteed && machine.memory_managed,
            name if is_hugepages(name) => qos == QosClass::Guaranteed && machine.memory_managed,
            name => !is_native(name) && machine.resources.contains_key(name),
        })
        .map(|(name, amount)| (name.as_str(), *amount))
        .collect()
}

/// The aligned part of one requester's requests, by resource name (sorted, as the requests are).
type Wanted<'a> = Vec<(&'a str, i64)>;

/// Each aligned resource's hints. Memory and hugepages are one manager's: a set is a hint for all
/// of them when it holds all of them.
fn resource_hints(
    wanted: &Wanted<'_>,
    machine: &Machine,
    reusable: &BTreeMap<String, BTreeMap<u32, i64>>,
) -> Vec<ResourceHints> {
    let none = BTreeMap::new();
    let empty = Zones::default();
    let mut lists = Vec::with_capacity(wanted.len());
    let mut memory: Option<Vec<Hint>> = None;
    let mut memory_resources = 0;
    for (resource, amount) in wanted {
        let sized_by_allocatable = *resource == "memory" || is_hugepages(resource);
        let zones = machine.resources.get(resource).unwrap_or(&empty);
        let amounts = |id: u32| zones.get(&id).copied().unwrap_or_default();
        let sized = |id: u32| if sized_by_allocatable { amounts(id).allocatable } else { amounts(id).capacity };
        let reused = reusable.get(*resource).unwrap_or(&none);
        let found = hints::hints(&machine.masks, *amount, sized, |id| amounts(id).available, reused);
        if sized_by_allocatable {
            memory_resources += 1;
            memory = Some(match memory {
                None => found,
                Some(before) => before.into_iter().filter(|h| found.iter().any(|f| f.mask == h.mask)).collect(),
            });
        } else {
            lists.push(Some(found));
        }
    }
    if let Some(memory) = memory {
        for _ in 0..memory_resources {
            lists.push(Some(memory.clone()));
        }
    }
    lists
}

/// A node as its kubelet decides: read once from its NRT, asked many times.
#[derive(Debug, Clone)]
pub struct Node {
    config: TopologyManagerConfig,
    machine: Machine,
}

impl Node {
    /// The node `nrt` describes.
    pub fn of(nrt: &NodeResourceTopology) -> Self {
        Self { config: TopologyManagerConfig::of(nrt), machine: Machine::of(nrt) }
    }

    /// The kubelet's admission of `pod` here.
    pub fn admit(&self, pod: &PodRequests, options: &PolicyOptions) -> Admission {
        admit_on(pod, &self.config, &mut std::borrow::Cow::Borrowed(&self.machine), options, false)
    }

    /// [`Self::admit`], and the node once the admitted pod holds what the kubelet aligns for it.
    pub fn reserve(&self, pod: &PodRequests, options: &PolicyOptions) -> (Admission, Node) {
        let mut machine = std::borrow::Cow::Borrowed(&self.machine);
        let admission = admit_on(pod, &self.config, &mut machine, options, true);
        let machine = if admission.admitted() { machine.into_owned() } else { self.machine.clone() };
        (admission, Node { config: self.config.clone(), machine })
    }

    /// `nrt` with its NUMA zones' `available` as this node has them (what [`Self::reserve`]
    /// left), for readers of NRTs.
    pub fn written_into(&self, nrt: &NodeResourceTopology) -> NodeResourceTopology {
        let mut written = nrt.clone();
        for zone in written.zones.iter_mut().filter(|z| z.zone_type == ZONE_TYPE_NODE) {
            let Some(id) = numa_id_from_zone_name(&zone.name) else { continue };
            for resource in &mut zone.resources {
                let left = self.machine.resources.get(resource.name.as_str()).and_then(|zones| zones.get(&id));
                if let Some(left) = left {
                    resource.available = crate::quantity::Quantity::from_milli(left.available);
                }
            }
        }
        written
    }

    /// Per resource, the allocatable and available amounts (thousandths) summed over the NUMA
    /// nodes `numa`.
    pub fn totals(&self, numa: &[u32]) -> Vec<(&str, i64, i64)> {
        self.machine
            .resources
            .iter()
            .map(|(name, zones)| {
                let in_set = zones.iter().filter(|(id, _)| numa.contains(id)).map(|(_, a)| a);
                let (allocatable, available) = in_set
                    .fold((0i64, 0i64), |(t, f), a| (t.saturating_add(a.allocatable), f.saturating_add(a.available)));
                (name, allocatable, available)
            })
            .collect()
    }
}

/// Runs the kubelet's admission of `pod` on the node `nrt` describes.
pub fn admit(pod: &PodRequests, nrt: &NodeResourceTopology, options: &PolicyOptions) -> Admission {
    Node::of(nrt).admit(pod, options)
}

/// [`admit`], and the NRT as it reads once the admitted pod holds what the kubelet aligns for it
/// (its zones' `available` less the pod's aligned CPUs, memory, hugepages and devices): what a
/// scheduler that placed the pod counts until the node's exporter reports it.
pub fn reserve(
    pod: &PodRequests,
    nrt: &NodeResourceTopology,
    options: &PolicyOptions,
) -> (Admission, NodeResourceTopology) {
    let (admission, node) = Node::of(nrt).reserve(pod, options);
    (admission, node.written_into(nrt))
}

/// The admission itself. `machine` is written only where a later requester (or the caller, when
/// `keep_last`) needs what an earlier one took: a one-container pod is judged without a copy.
fn admit_on(
    pod: &PodRequests,
    config: &TopologyManagerConfig,
    machine: &mut std::borrow::Cow<'_, Machine>,
    options: &PolicyOptions,
    keep_last: bool,
) -> Admission {
    if config.policy == "none" {
        return Admission { aligned: Vec::new(), refusal: None };
    }
    if machine.ids.len() > options.max_allowable_numa_nodes {
        let refusal = Refusal::TooManyNumaNodes { nodes: machine.ids.len(), limit: options.max_allowable_numa_nodes };
        return Admission { aligned: Vec::new(), refusal: Some(refusal) };
    }
    let tiebreak = if options.prefer_closest_numa_nodes { Tiebreak::Closest } else { Tiebreak::Narrowest };
    let pod_requests;
    let requesters: Vec<(&Requester, &Resources)> = if config.pod_scope() {
        pod_requests = pod_scope_requests(pod);
        vec![(&Requester::Pod, &pod_requests)]
    } else {
        pod.init_containers.iter().chain(&pod.containers).map(|c| (&c.requester, &c.requests)).collect()
    };
    let count = requesters.len();
    let mut aligned = Vec::with_capacity(count);
    // What regular init containers leave for the next containers to reuse (CPUs).
    let mut reusable: BTreeMap<String, BTreeMap<u32, i64>> = BTreeMap::new();
    for (index, (requester, requests)) in requesters.into_iter().enumerate() {
        let wanted = aligned_requests(requests, pod.qos, machine);
        let lists = resource_hints(&wanted, machine, &reusable);
        let merged =
            hints::merge(machine.all, &lists, config.policy == "single-numa-node", tiebreak, &machine.distances);
        let refused = match config.policy.as_str() {
            "restricted" | "single-numa-node" => !merged.preferred,
            _ => false,
        };
        if refused {
            let shortfall = shortfall(&wanted, machine);
            let refusal =
                Refusal::TopologyAffinity { requester: requester.clone(), policy: config.policy.clone(), shortfall };
            return Admission { aligned, refusal: Some(refusal) };
        }
        let numa = (!wanted.is_empty()).then(|| merged.mask.map(|m| m.ids().collect())).flatten();
        aligned.push(Aligned { requester: requester.clone(), numa, preferred: merged.preferred });
        if index + 1 == count && !keep_last {
            break;
        }
        let mask = merged.mask.unwrap_or(machine.all);
        let init = matches!(requester, Requester::InitContainer(_));
        for (resource, amount) in &wanted {
            let reused = reusable.get_mut(*resource).map(|zones| take_reused(zones, *amount)).unwrap_or(0);
            let taken = machine.to_mut().take(resource, mask, amount - reused);
            if init && *resource == "cpu" {
                // The next containers reuse these CPUs, and must be aligned where they are.
                reusable.insert((*resource).to_owned(), taken);
            } else if init {
                // Memory and devices an init container held are free again once it ends.
                machine.to_mut().give_back(resource, &taken);
            }
        }
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

/// Per aligned resource, the request and the most any one NUMA node has free.
fn shortfall(wanted: &Wanted<'_>, machine: &Machine) -> Vec<Shortfall> {
    wanted
        .iter()
        .map(|(resource, amount)| {
            let zones = machine.resources.get(resource);
            let most_free = zones.into_iter().flat_map(|z| z.iter()).map(|(_, a)| a.available).max().unwrap_or(0);
            Shortfall { resource: (*resource).to_owned(), requested: *amount, most_free }
        })
        .collect()
}
