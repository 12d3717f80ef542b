//! NUMA masks, the hints each resource manager gives, and the Topology Manager's merge.

use std::collections::BTreeMap;

/// A set of NUMA node ids (0..=63) as a bit mask, as the kubelet's `bitmask.BitMask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mask(pub u64);

impl Mask {
    /// The mask of one NUMA node.
    pub fn of(id: u32) -> Self {
        Self(1u64 << id)
    }

    /// How many NUMA nodes it holds.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// Whether `id` is in it.
    pub fn contains(self, id: u32) -> bool {
        id < 64 && self.0 & (1u64 << id) != 0
    }

    /// Its NUMA ids, lowest first.
    pub fn ids(self) -> impl Iterator<Item = u32> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let id = bits.trailing_zeros();
                bits &= bits - 1;
                id
            })
        })
    }

    /// Every non-empty subset of `ids`, fewest nodes first, then numerically (the kubelet's
    /// `IterateBitMasks`).
    pub fn every_subset(ids: &[u32]) -> Vec<Mask> {
        let count = ids.len().min(16);
        let mut masks: Vec<Mask> = (1u64..(1u64 << count))
            .map(|bits| Mask((0..count).filter(|i| bits & (1 << i) != 0).fold(0, |mask, i| mask | (1u64 << ids[i]))))
            .collect();
        masks.sort_by_key(|mask| (mask.count(), mask.0));
        masks
    }
}

impl std::fmt::Display for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<String> = self.ids().map(|id| id.to_string()).collect();
        write!(f, "{}", ids.join(","))
    }
}

/// One hint: a NUMA set that can hold the request, and whether it is as narrow as the request
/// allows on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// Where.
    pub mask: Mask,
    /// As narrow as the narrowest set whose capacity could hold the request.
    pub preferred: bool,
}

/// What one resource manager says of one resource: no preference (it does not align this
/// resource), or the hints (empty: nothing can hold it).
pub type ResourceHints = Option<Vec<Hint>>;

/// The hints for a request of `amount` over `masks` (every NUMA set, fewest nodes first), given
/// each NUMA node's `sized` amount (capacity for CPUs and devices, allocatable for memory: what
/// sets the narrowest possible width) and `free` amount. Every hint must contain the NUMA nodes
/// where `reusable` holds something (CPUs an init container leaves for reuse), and the reusable
/// amount counts as free.
pub fn hints(
    masks: &[Mask],
    amount: i64,
    sized: impl Fn(u32) -> i64,
    free: impl Fn(u32) -> i64,
    reusable: &BTreeMap<u32, i64>,
) -> Vec<Hint> {
    let sum = |of: &dyn Fn(u32) -> i64, mask: Mask| mask.ids().map(of).sum::<i64>();
    let narrowest = masks.iter().find(|mask| sum(&sized, **mask) >= amount).map(|mask| mask.count());
    let reused: i64 = reusable.values().sum();
    masks
        .iter()
        .filter(|mask| reusable.iter().all(|(id, amount)| *amount == 0 || mask.contains(*id)))
        .filter(|mask| reused + sum(&free, **mask) >= amount)
        .map(|mask| Hint { mask: *mask, preferred: Some(mask.count()) == narrowest })
        .collect()
}

/// How the Topology Manager picks among equally preferred sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiebreak {
    /// The fewest NUMA nodes, then the lowest ids.
    Narrowest,
    /// `prefer-closest-numa-nodes`: the fewest nodes, then the lowest average distance.
    Closest,
}

/// NUMA distances (`d[i][j]`, 10 local), from the NRT's zone costs.
pub type Distances = BTreeMap<(u32, u32), i64>;

/// Whether `candidate` beats `current` among sets of the same preference.
pub(super) fn fitter(candidate: Mask, current: Mask, tiebreak: Tiebreak, distances: &Distances) -> bool {
    if candidate.count() != current.count() {
        return candidate.count() < current.count();
    }
    if tiebreak == Tiebreak::Closest {
        let (a, b) = (average_distance(candidate, distances), average_distance(current, distances));
        if let (Some(a), Some(b)) = (a, b)
            && a != b
        {
            return a < b;
        }
    }
    candidate.0 < current.0
}

/// The mean distance over every ordered pair of the set's nodes (pairs of a node with itself
/// included), as the kubelet computes it; None when a distance is unknown.
pub(super) fn average_distance(mask: Mask, distances: &Distances) -> Option<f64> {
    let ids: Vec<u32> = mask.ids().collect();
    let mut total = 0i64;
    for i in &ids {
        for j in &ids {
            total += distances.get(&(*i, *j)).copied().or((i == j).then_some(10))?;
        }
    }
    Some(total as f64 / (ids.len() * ids.len()) as f64)
}

/// The merged hint: `None` affinity when no resource has a preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Merged {
    /// Where the pod (or container) is aligned; None: anywhere.
    pub mask: Option<Mask>,
    /// Whether every resource got one of its preferred sets, the same one.
    pub preferred: bool,
}

/// The most permutations of non-preferred hints walked to find the set a `best-effort` kubelet
/// picks; past it the node's whole set is assumed (admission does not depend on it).
pub const MAX_PERMUTATIONS: usize = 20_000;

/// The Topology Manager's merge of every resource's hints (`none` never merges).
/// `single_numa_node` keeps only preferred one-node hints first, as that policy does.
pub fn merge(
    all: Mask,
    lists: &[ResourceHints],
    single_numa_node: bool,
    tiebreak: Tiebreak,
    distances: &Distances,
) -> Merged {
    let lists: Vec<std::borrow::Cow<'_, [Hint]>> = lists
        .iter()
        .flatten()
        .map(|hints| {
            if single_numa_node {
                std::borrow::Cow::Owned(hints.iter().filter(|h| h.preferred && h.mask.count() == 1).copied().collect())
            } else {
                std::borrow::Cow::Borrowed(hints.as_slice())
            }
        })
        .collect();
    if lists.is_empty() {
        return Merged { mask: None, preferred: true };
    }
    let tiebreak = if single_numa_node { Tiebreak::Narrowest } else { tiebreak };
    // A preferred merge takes the same preferred set from every resource.
    let mut best: Option<Mask> = None;
    for hint in lists[0].iter().filter(|h| h.preferred) {
        let everywhere = lists[1..].iter().all(|list| list.iter().any(|h| h.preferred && h.mask == hint.mask));
        if everywhere && best.is_none_or(|current| fitter(hint.mask, current, tiebreak, distances)) {
            best = Some(hint.mask);
        }
    }
    if let Some(mask) = best {
        // single-numa-node reports a set equal to the whole machine as no affinity.
        let mask = (!(single_numa_node && mask == all)).then_some(mask);
        return Merged { mask, preferred: true };
    }
    Merged { mask: Some(non_preferred(all, &lists, tiebreak, distances)), preferred: false }
}

/// The set the Topology Manager settles on when no preferred merge exists: the AND of one hint
/// per resource, aiming at the widest of the resources' narrowest hints.
fn non_preferred(all: Mask, lists: &[std::borrow::Cow<'_, [Hint]>], tiebreak: Tiebreak, distances: &Distances) -> Mask {
    let permutations = lists.iter().try_fold(1usize, |n, list| n.checked_mul(list.len()));
    if permutations.is_none_or(|n| n == 0 || n > MAX_PERMUTATIONS) {
        return all;
    }
    let best_count = lists.iter().filter_map(|list| list.iter().map(|h| h.mask.count()).min()).max().unwrap_or(0);
    let mut current: Option<Mask> = None;
    let mut choice = vec![0usize; lists.len()];
    loop {
        let merged = choice.iter().zip(lists).fold(all.0, |mask, (i, list)| mask & list[*i].mask.0);
        let candidate = Mask(merged);
        if candidate.count() > 0 {
            current = Some(match current {
                None => candidate,
                Some(current) => pick(current, candidate, best_count, tiebreak, distances),
            });
        }
        // The next permutation, odometer style.
        let mut position = 0;
        loop {
            if position == lists.len() {
                return current.unwrap_or(all);
            }
            choice[position] += 1;
            if choice[position] < lists[position].len() {
                break;
            }
            choice[position] = 0;
            position += 1;
        }
    }
}

/// The kubelet's choice between two non-preferred merged sets.
fn pick(current: Mask, candidate: Mask, best: u32, tiebreak: Tiebreak, distances: &Distances) -> Mask {
    let better = |a: Mask, b: Mask| if fitter(a, b, tiebreak, distances) { a } else { b };
    let (now, next) = (current.count(), candidate.count());
    if now > best {
        return better(candidate, current);
    }
    if now == best {
        return if next == best { better(candidate, current) } else { current };
    }
    match next.cmp(&best) {
        std::cmp::Ordering::Greater => current,
        std::cmp::Ordering::Equal => candidate,
        std::cmp::Ordering::Less if next > now => candidate,
        std::cmp::Ordering::Less if next == now => better(candidate, current),
        std::cmp::Ordering::Less => current,
    }
}
