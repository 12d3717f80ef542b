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
mod machine;
mod quick;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use compact_str::CompactString;
use serde::Serialize;

pub use hints::{Distances, Hint, MAX_PERMUTATIONS, Mask, Merged, ResourceHints, Tiebreak};
use machine::{Amounts, Machine, Zones};

use super::pod::{Amount, PodRequests, Requester, Resources};
use super::topology::TopologyManagerConfig;
use crate::nrt::NodeResourceTopology;
use crate::nrt::well_known::{ZONE_TYPE_NODE, numa_id_from_zone_name};
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
    pub resource: CompactString,
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
        policy: &'static str,
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
                let rule = if *policy == "single-numa-node" {
                    "no single NUMA node holds all of it"
                } else {
                    "no NUMA set as narrow as the request allows holds all of it"
                };
                write!(f, "the kubelet ({policy}) cannot align {requester}: {rule} (")?;
                for (index, s) in shortfall.iter().enumerate() {
                    let (requested, most_free) = (Amount(&s.resource, s.requested), Amount(&s.resource, s.most_free));
                    let separator = if index == 0 { "" } else { ", " };
                    write!(
                        f,
                        "{separator}{} {requested} requested, at most {most_free} free on one NUMA node",
                        s.resource
                    )?;
                }
                f.write_str(")")
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

/// A pod's requests as the Topology Manager takes them, worked out once and asked of many nodes.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pod: &'a PodRequests,
    /// The pod scope's one request.
    pod_scope: Resources,
}

/// The requester of the pod scope.
const WHOLE_POD: &Requester = &Requester::Pod;

impl<'a> Ask<'a> {
    /// `pod`'s requests, for every scope.
    pub fn of(pod: &'a PodRequests) -> Self {
        Self { pod, pod_scope: pod_scope_requests(pod) }
    }

    /// Who the kubelet aligns, in turn, and what each asks.
    fn requesters(&self, pod_scope: bool) -> impl Iterator<Item = (&Requester, &Resources)> + '_ {
        let whole = pod_scope.then_some((WHOLE_POD, &self.pod_scope));
        let containers = self.pod.init_containers.iter().chain(&self.pod.containers).filter(move |_| !pod_scope);
        whole.into_iter().chain(containers.map(|c| (&c.requester, &c.requests)))
    }
}

/// Where an admitted pod is aligned, in brief: what a score needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The NUMA nodes any requester is aligned on (empty: nothing aligned).
    pub numa: Mask,
    /// Whether every requester got a set as narrow as its request allows.
    pub preferred: bool,
    /// The most NUMA nodes one requester is aligned on.
    pub widest: u32,
    /// Whether every requester's set is among the closest sets of its width (least average
    /// distance between its nodes).
    pub closest: bool,
}

impl Placement {
    /// A pod the managers align nothing of.
    pub const NOTHING_ALIGNED: Self = Self { numa: Mask(0), preferred: true, widest: 0, closest: true };

    fn of(admission: &Admission, machine: &Machine) -> Self {
        let mut placement = Self::NOTHING_ALIGNED;
        for aligned in &admission.aligned {
            placement.preferred &= aligned.preferred;
            let Some(ids) = &aligned.numa else { continue };
            let mask = Mask(ids.iter().fold(0, |mask, id| mask | Mask::of(*id).0));
            placement.numa.0 |= mask.0;
            placement.widest = placement.widest.max(mask.count());
            placement.closest &= machine.closest(mask);
        }
        placement
    }
}

/// What the managers align of a request: whole CPUs (Guaranteed), memory and hugepages
/// (Guaranteed, Static memory manager), devices the NRT places on NUMA nodes (any QoS).
fn aligned_requests<'a>(requests: &'a Resources, qos: QosClass, machine: &Machine) -> Wanted<'a> {
    aligned(requests, qos, machine).collect()
}

/// [`aligned_requests`], one by one.
fn aligned<'a>(requests: &'a Resources, qos: QosClass, machine: &Machine) -> impl Iterator<Item = (&'a str, i64)> {
    aligned_zones(requests, qos, machine).map(|(name, amount, _)| (name, amount))
}

/// [`aligned`], each with the node's amounts of it (None: memory the node does not list).
fn aligned_zones<'a, 'm>(
    requests: &'a Resources,
    qos: QosClass,
    machine: &'m Machine,
) -> impl Iterator<Item = (&'a str, i64, Option<Zones<'m>>)> {
    requests.iter().filter_map(move |(name, amount)| {
        let guaranteed = qos == QosClass::Guaranteed;
        let zones = match name.as_str() {
            "cpu" if guaranteed && *amount % 1000 == 0 => Some(machine.resource("cpu")?),
            "memory" => (guaranteed && machine.memory_managed).then(|| machine.resource(name))?,
            name if is_hugepages(name) => (guaranteed && machine.memory_managed).then(|| machine.resource(name))?,
            name if !is_native(name) => Some(machine.resource(name)?),
            _ => return None,
        };
        Some((name.as_str(), *amount, zones))
    })
}

/// The aligned part of one requester's requests, by resource name (sorted, as the requests are).
type Wanted<'a> = Vec<(&'a str, i64)>;

/// Each aligned resource's hints. Memory and hugepages are one manager's: a set is a hint for all
/// of them when it holds all of them, and it is preferred when it is as narrow as the narrowest
/// set whose allocatable holds all of them together (the memory manager's minimum affinity size).
fn resource_hints(
    wanted: &Wanted<'_>,
    machine: &Machine,
    reusable: &BTreeMap<String, BTreeMap<u32, i64>>,
) -> Vec<ResourceHints> {
    let none = BTreeMap::new();
    let mut lists = Vec::with_capacity(wanted.len());
    let mut memory: Option<Vec<Hint>> = None;
    let mut memory_resources = 0;
    for (resource, amount) in wanted {
        let reused = reusable.get(*resource).unwrap_or(&none);
        let at = machine.zones(resource);
        let free = |id: u32| at(id).available;
        if is_memory_managed(resource) {
            memory_resources += 1;
            let found = hints::hints(&machine.layout.masks, *amount, |id| at(id).allocatable, free, reused);
            memory = Some(match memory {
                None => found,
                Some(before) => before.into_iter().filter(|h| found.iter().any(|f| f.mask == h.mask)).collect(),
            });
        } else {
            let sized = |id: u32| at(id).capacity;
            lists.push(Some(hints::hints(&machine.layout.masks, *amount, sized, free, reused)));
        }
    }
    if let Some(mut memory) = memory {
        let width = memory_width(wanted, machine);
        for hint in &mut memory {
            hint.preferred = Some(hint.mask.count()) == width;
        }
        for _ in 0..memory_resources {
            lists.push(Some(memory.clone()));
        }
    }
    lists
}

/// Whether the memory manager aligns `resource` (memory and hugepages, sized by allocatable).
fn is_memory_managed(resource: &str) -> bool {
    resource == "memory" || is_hugepages(resource)
}

/// The width of the narrowest NUMA set whose allocatable holds every memory resource `wanted`
/// asks, together.
fn memory_width(wanted: &Wanted<'_>, machine: &Machine) -> Option<u32> {
    let holds = |mask: Mask| {
        wanted.iter().filter(|(resource, _)| is_memory_managed(resource)).all(|(resource, amount)| {
            let at = machine.zones(resource);
            mask.ids().map(|id| at(id).allocatable).sum::<i64>() >= *amount
        })
    };
    machine.layout.masks.iter().find(|mask| holds(**mask)).map(|mask| mask.count())
}

/// A node as its kubelet decides: read once from its NRT, asked many times.
#[derive(Debug, Clone)]
pub struct Node {
    config: TopologyManagerConfig,
    /// The policy and scope, read once (the quick path asks them for every pod).
    policy: Policy,
    pod_scope: bool,
    machine: Machine,
}

/// A Topology Manager policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    None,
    BestEffort,
    Restricted,
    SingleNumaNode,
}

impl Policy {
    /// The kubelet's name of the policy.
    fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::BestEffort => "best-effort",
            Self::Restricted => "restricted",
            Self::SingleNumaNode => "single-numa-node",
        }
    }

    fn of(config: &TopologyManagerConfig) -> Self {
        match config.policy.as_str() {
            "best-effort" => Self::BestEffort,
            "restricted" => Self::Restricted,
            "single-numa-node" => Self::SingleNumaNode,
            _ => Self::None,
        }
    }
}

impl Node {
    /// The node `nrt` describes.
    pub fn of(nrt: &NodeResourceTopology) -> Self {
        let config = TopologyManagerConfig::of(nrt);
        Self { policy: Policy::of(&config), pod_scope: config.pod_scope(), config, machine: Machine::of(nrt) }
    }

    /// The kubelet's admission of `pod` here.
    pub fn admit(&self, pod: &PodRequests, options: &PolicyOptions) -> Admission {
        admit_on(&Ask::of(pod), &self.config, &mut std::borrow::Cow::Borrowed(&self.machine), options, false)
    }

    /// Reads the memory [`Self::place`] reads first, and returns it mixed into a number of no
    /// meaning. A caller about to place a pod on many nodes, most of them in memory no cache
    /// holds, touches the next few nodes first: their reads are independent, so the processor
    /// waits for them together rather than once per node.
    pub fn touch(&self) -> u64 {
        u64::from(self.pod_scope) ^ self.machine.touch() ^ self.policy as u64
    }

    /// Whether the kubelet admits the pod here, and where in brief: what a filter and a score
    /// need, without [`Self::admit`]'s per-requester detail (nor, for a pod aligned as one
    /// requester, its cost).
    pub fn place(&self, ask: &Ask<'_>, options: &PolicyOptions) -> Result<Placement, Refusal> {
        if let Some(placed) = quick::place(self, ask, options) {
            return placed;
        }
        let admission = admit_on(ask, &self.config, &mut std::borrow::Cow::Borrowed(&self.machine), options, false);
        match admission.refusal {
            Some(refusal) => Err(refusal),
            None => Ok(Placement::of(&admission, &self.machine)),
        }
    }

    /// [`Self::admit`], and the node once the admitted pod holds what the kubelet aligns for it.
    pub fn reserve(&self, pod: &PodRequests, options: &PolicyOptions) -> (Admission, Node) {
        let mut machine = std::borrow::Cow::Borrowed(&self.machine);
        let admission = admit_on(&Ask::of(pod), &self.config, &mut machine, options, true);
        let machine = if admission.admitted() { machine.into_owned() } else { self.machine.clone() };
        (admission, Node { config: self.config.clone(), policy: self.policy, pod_scope: self.pod_scope, machine })
    }

    /// `nrt` with its NUMA zones' `available` as this node has them (what [`Self::reserve`]
    /// left), for readers of NRTs.
    pub fn written_into(&self, nrt: &NodeResourceTopology) -> NodeResourceTopology {
        let mut written = nrt.clone();
        for zone in written.zones.iter_mut().filter(|z| z.zone_type == ZONE_TYPE_NODE) {
            let Some(id) = numa_id_from_zone_name(&zone.name) else { continue };
            for resource in &mut zone.resources {
                let left = self.machine.resource(resource.name.as_str()).and_then(|zones| zones.get(&id));
                if let Some(left) = left {
                    resource.available = crate::quantity::Quantity::from_milli(left.available);
                }
            }
        }
        written
    }

    /// For each resource of `requested` the node lists: what is requested, and the allocatable
    /// and available amounts summed over the NUMA nodes `numa` (thousandths).
    pub fn in_set<'a>(&'a self, numa: Mask, requested: &'a Resources) -> impl Iterator<Item = (i64, i64, i64)> + 'a {
        requested.iter().filter_map(move |(name, amount)| {
            let zones = self.machine.resource(name)?;
            let in_set = zones.iter().filter(|(id, _)| numa.contains(**id)).map(|(_, a)| a);
            let (allocatable, available) =
                in_set.fold((0i64, 0i64), |(t, f), a| (t.saturating_add(a.allocatable), f.saturating_add(a.available)));
            Some((*amount, allocatable, available))
        })
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
    ask: &Ask<'_>,
    config: &TopologyManagerConfig,
    machine: &mut std::borrow::Cow<'_, Machine>,
    options: &PolicyOptions,
    keep_last: bool,
) -> Admission {
    if config.policy == "none" {
        return Admission { aligned: Vec::new(), refusal: None };
    }
    if machine.layout.ids.len() > options.max_allowable_numa_nodes {
        let refusal =
            Refusal::TooManyNumaNodes { nodes: machine.layout.ids.len(), limit: options.max_allowable_numa_nodes };
        return Admission { aligned: Vec::new(), refusal: Some(refusal) };
    }
    let tiebreak = if options.prefer_closest_numa_nodes { Tiebreak::Closest } else { Tiebreak::Narrowest };
    let count = ask.requesters(config.pod_scope()).count();
    let mut aligned = Vec::with_capacity(count);
    // What regular init containers leave for the next containers to reuse (CPUs).
    let mut reusable: BTreeMap<String, BTreeMap<u32, i64>> = BTreeMap::new();
    for (index, (requester, requests)) in ask.requesters(config.pod_scope()).enumerate() {
        let wanted = aligned_requests(requests, ask.pod.qos, machine);
        let lists = resource_hints(&wanted, machine, &reusable);
        let merged = hints::merge(
            machine.layout.all,
            &lists,
            config.policy == "single-numa-node",
            tiebreak,
            &machine.layout.distances,
        );
        let refused = match config.policy.as_str() {
            "restricted" | "single-numa-node" => !merged.preferred,
            _ => false,
        };
        if refused {
            let shortfall = shortfall(&wanted, machine);
            let refusal = Refusal::TopologyAffinity {
                requester: requester.clone(),
                policy: Policy::of(config).as_str(),
                shortfall,
            };
            return Admission { aligned, refusal: Some(refusal) };
        }
        let numa = (!wanted.is_empty()).then(|| merged.mask.map(|m| m.ids().collect())).flatten();
        aligned.push(Aligned { requester: requester.clone(), numa, preferred: merged.preferred });
        if index + 1 == count && !keep_last {
            break;
        }
        let mask = merged.mask.unwrap_or(machine.layout.all);
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
    wanted.iter().map(|(resource, amount)| Shortfall::of(resource, *amount, machine.resource(resource))).collect()
}

impl Shortfall {
    /// `amount` of `resource` asked of a node with `zones` of it.
    fn of(resource: &str, amount: i64, zones: Option<Zones<'_>>) -> Self {
        let most_free = zones.into_iter().flat_map(|z| z.iter()).map(|(_, a)| a.available).max().unwrap_or(0);
        Self { resource: CompactString::from(resource), requested: amount, most_free }
    }
}
