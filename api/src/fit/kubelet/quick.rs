//! The common case, quickly: a pod the kubelet aligns as one requester (one container, or the
//! pod scope) on a node whose policy looks for a preferred placement first. A preferred merge
//! takes one NUMA set that is a preferred hint of every resource, so every resource's
//! narrowest width must be the same and the set that wide: the answer comes from walking the
//! sets of that width once, each resource's zones looked up once, without building hint lists.
//! It is the general admission's answer (a property test holds the two together); what it
//! cannot settle (`best-effort` without a preferred set, several requesters) it leaves to the
//! general admission.

use smallvec::SmallVec;

use super::hints::{Mask, Tiebreak, fitter};
use super::{
    Amounts, Ask, Machine, Node, Placement, Policy, PolicyOptions, Refusal, Shortfall, Zones, aligned_zones,
    is_memory_managed,
};

/// One aligned resource of the request, its zones looked up once.
struct Asked<'a> {
    name: &'a str,
    zones: Option<Zones<'a>>,
    amount: i64,
    /// Sized by allocatable, with the other memory-manager resources (else by capacity, alone).
    memory: bool,
}

impl Asked<'_> {
    /// The sum over `mask`'s NUMA nodes of one of the amounts.
    fn sum(&self, mask: Mask, amount: impl Fn(&Amounts) -> i64) -> i64 {
        let Some(zones) = self.zones else { return 0 };
        mask.ids().map(|id| zones.get(&id).map_or(0, &amount)).sum()
    }
}

/// The kubelet's answer for `ask` on `node`, or None when the general admission must say it.
pub(super) fn place(node: &Node, ask: &Ask<'_>, options: &PolicyOptions) -> Option<Result<Placement, Refusal>> {
    let single = match node.policy {
        Policy::SingleNumaNode => true,
        Policy::Restricted | Policy::BestEffort => false,
        Policy::None => return None,
    };
    let machine = &node.machine;
    if machine.layout.ids.len() > options.max_allowable_numa_nodes {
        return None;
    }
    let mut requesters = ask.requesters(node.pod_scope);
    let (requester, requests) = requesters.next()?;
    if requesters.next().is_some() {
        return None;
    }
    // Inline: this runs once per candidate node, and a heap allocation each time showed.
    let asked: SmallVec<[Asked<'_>; 4]> = aligned_zones(requests, ask.pod.qos, machine)
        .map(|(name, amount, zones)| Asked { name, zones, amount, memory: is_memory_managed(name) })
        .collect();
    if asked.is_empty() {
        return Some(Ok(Placement::NOTHING_ALIGNED));
    }
    // single-numa-node keeps only one-node hints and breaks ties by the lowest id.
    let tiebreak = if options.prefer_closest_numa_nodes && !single { Tiebreak::Closest } else { Tiebreak::Narrowest };
    let width = common_width(&asked, machine).filter(|width| !single || *width == 1);
    match width.and_then(|width| best_fit(&asked, machine, width, tiebreak)) {
        Some(mask) => {
            // single-numa-node reports the whole machine as no affinity.
            let numa = if single && mask == machine.layout.all { Mask(0) } else { mask };
            let closest = machine.closest(numa);
            Some(Ok(Placement { numa, preferred: true, widest: numa.count(), closest }))
        }
        // best-effort admits a wider set too: which one is the general admission's to say.
        None if node.policy == Policy::BestEffort => None,
        None => Some(Err(Refusal::TopologyAffinity {
            requester: requester.clone(),
            policy: node.policy.as_str(),
            shortfall: asked.iter().map(|a| Shortfall::of(a.name, a.amount, a.zones)).collect(),
        })),
    }
}

/// The one width every resource's preferred hints share (CPUs and devices sized by capacity,
/// each alone; the memory manager's resources by allocatable, together); None when they differ
/// or a resource fits no set.
fn common_width(asked: &[Asked<'_>], machine: &Machine) -> Option<u32> {
    let narrowest =
        |holds: &dyn Fn(Mask) -> bool| machine.layout.masks.iter().find(|mask| holds(**mask)).map(|m| m.count());
    let by_capacity = asked
        .iter()
        .filter(|asked| !asked.memory)
        .map(|asked| narrowest(&|mask| asked.sum(mask, |a| a.capacity) >= asked.amount));
    let memory = asked.iter().any(|asked| asked.memory).then(|| {
        narrowest(&|mask| asked.iter().filter(|a| a.memory).all(|a| a.sum(mask, |z| z.allocatable) >= a.amount))
    });
    let mut common = None;
    for width in by_capacity.chain(memory) {
        let width = width?;
        if common.is_some_and(|common| common != width) {
            return None;
        }
        common = Some(width);
    }
    common
}

/// The set of `width` nodes the Topology Manager picks among those where every resource is
/// free: the lowest, or with `prefer-closest-numa-nodes` the closest.
fn best_fit(asked: &[Asked<'_>], machine: &Machine, width: u32, tiebreak: Tiebreak) -> Option<Mask> {
    let free = |mask: Mask| asked.iter().all(|asked| asked.sum(mask, |a| a.available) >= asked.amount);
    let mut best: Option<Mask> = None;
    for mask in machine.layout.masks.iter().copied().filter(|mask| mask.count() == width && free(*mask)) {
        if tiebreak == Tiebreak::Narrowest {
            return Some(mask);
        }
        if best.is_none_or(|best| fitter(mask, best, tiebreak, &machine.layout.distances)) {
            best = Some(mask);
        }
    }
    best
}
