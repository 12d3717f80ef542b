//! A node's NUMA zones as the kubelet's managers see them, laid out for a filter that reads
//! thousands of nodes per pod, most of them from memory no cache holds.
//!
//! What machines of the same hardware share (their NUMA ids and sets, which resources each zone
//! lists, the distances) is one [`Layout`], kept once for all of them: it stays in the cache.
//! What is each node's own is only its amounts, one small table inside the node: a filter reads
//! a few adjacent cache lines per node, not a pointer per resource, name and table.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use compact_str::CompactString;
use smallvec::SmallVec;

use super::hints::{self, Distances, Mask};
use crate::nrt::NodeResourceTopology;
use crate::nrt::well_known::{ATTR_MEMORY_NUMA_MANAGED, ZONE_TYPE_NODE, numa_id_from_zone_name};

/// One NUMA node's amounts of one resource (thousandths).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Amounts {
    pub(super) capacity: i64,
    pub(super) allocatable: i64,
    pub(super) available: i64,
}

/// One resource's amounts per NUMA id.
#[derive(Debug, Clone, Copy)]
pub(super) struct Zones<'a> {
    ids: &'a [u32],
    amounts: &'a [Amounts],
}

impl<'a> Zones<'a> {
    pub(super) fn get(&self, id: &u32) -> Option<&'a Amounts> {
        self.ids.iter().position(|at| at == id).map(|at| &self.amounts[at])
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&'a u32, &'a Amounts)> + use<'a> {
        self.ids.iter().zip(self.amounts)
    }
}

/// One resource of a layout: its name and where its rows are in a machine's amounts.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Run {
    name: NameWords,
    start: usize,
    len: usize,
}

/// A resource name with its length and its first and last eight bytes as words: names up to 16
/// bytes (all the usual ones: `cpu`, `memory`, `hugepages-1Gi`, many devices) are told apart by
/// the three numbers alone, longer ones are compared in full when those agree. A filter looks
/// up every requested resource on every candidate.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NameWords {
    len: usize,
    head: u64,
    tail: u64,
    name: CompactString,
}

impl NameWords {
    fn of(name: &str) -> Self {
        let (len, head, tail) = words(name);
        Self { len, head, tail, name: CompactString::from(name) }
    }

    fn is(&self, name: &str) -> bool {
        (self.len, self.head, self.tail) == words(name) && (self.len <= 16 || self.name == name)
    }
}

/// A name's length, and its first and last (up to) eight bytes as words.
fn words(name: &str) -> (usize, u64, u64) {
    let bytes = name.as_bytes();
    let word = |part: &[u8]| {
        let mut word = [0u8; 8];
        word[..part.len()].copy_from_slice(part);
        u64::from_le_bytes(word)
    };
    (bytes.len(), word(&bytes[..bytes.len().min(8)]), word(&bytes[bytes.len().saturating_sub(8)..]))
}

/// What machines of the same hardware have in common.
#[derive(Debug)]
pub(super) struct Layout {
    /// The NUMA ids, ascending.
    pub(super) ids: Vec<u32>,
    pub(super) all: Mask,
    /// Every NUMA set, fewest nodes first (what the hint providers walk).
    pub(super) masks: Vec<Mask>,
    /// Each resource's rows, in the order the zones first list them.
    runs: Vec<Run>,
    /// The NUMA id of each row.
    row_ids: Vec<u32>,
    pub(super) distances: Distances,
    /// By width (number of NUMA nodes): the least average distance of a set that wide (None:
    /// a distance is unknown), for telling whether a placement is among the closest.
    least_distance: Vec<Option<f64>>,
}

impl Layout {
    /// Where `name`'s rows are.
    fn run(&self, name: &str) -> Option<&Run> {
        self.runs.iter().find(|run| run.name.is(name))
    }
}

/// What tells two layouts apart: everything a [`Layout`] is built from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LayoutKey {
    ids: Vec<u32>,
    /// Each resource with the NUMA ids of its rows, in order.
    resources: Vec<(CompactString, Vec<u32>)>,
    distances: Vec<((u32, u32), i64)>,
}

impl LayoutKey {
    fn layout(&self) -> Layout {
        let all = Mask(self.ids.iter().fold(0, |mask, id| mask | Mask::of(*id).0));
        let (mut runs, mut row_ids) = (Vec::new(), Vec::new());
        for (name, ids) in &self.resources {
            runs.push(Run { name: NameWords::of(name), start: row_ids.len(), len: ids.len() });
            row_ids.extend_from_slice(ids);
        }
        let distances: Distances = self.distances.iter().copied().collect();
        let masks = Mask::every_subset(&self.ids);
        let mut least_distance = vec![None; self.ids.len().min(16) + 1];
        for mask in &masks {
            let Some(distance) = hints::average_distance(*mask, &distances) else { continue };
            let least: &mut Option<f64> = &mut least_distance[mask.count() as usize];
            *least = Some(least.map_or(distance, |least| least.min(distance)));
        }
        Layout { ids: self.ids.clone(), all, masks, runs, row_ids, distances, least_distance }
    }
}

/// The most distinct layouts kept for sharing (a cluster has a handful of hardware kinds); a
/// machine of another gets a layout of its own.
const SHARED_LAYOUTS: usize = 64;

/// The one layout of every machine built from `key`.
fn shared_layout(key: LayoutKey) -> Arc<Layout> {
    static SHARED: OnceLock<Mutex<HashMap<LayoutKey, Arc<Layout>>>> = OnceLock::new();
    let mut shared = SHARED.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(layout) = shared.get(&key) {
        return layout.clone();
    }
    let layout = Arc::new(key.layout());
    if shared.len() >= SHARED_LAYOUTS {
        // Layouts no machine holds any more (a device plugin gone, hugepages resized) make room.
        shared.retain(|_, layout| Arc::strong_count(layout) > 1);
    }
    if shared.len() < SHARED_LAYOUTS {
        shared.insert(key, layout.clone());
    }
    layout
}

/// Rows kept inside the node: four resources on two NUMA nodes, the usual worker.
const INLINE_ROWS: usize = 8;

/// The node as its kubelet sees it.
#[derive(Debug, Clone)]
pub(super) struct Machine {
    pub(super) layout: Arc<Layout>,
    /// Each row's amounts, in the layout's row order.
    amounts: SmallVec<[Amounts; INLINE_ROWS]>,
    pub(super) memory_managed: bool,
}

impl Machine {
    pub(super) fn of(nrt: &NodeResourceTopology) -> Self {
        let mut ids = Vec::new();
        // Resource → its rows, in the order the zones first list the resources.
        let mut rows: Vec<(CompactString, Vec<(u32, Amounts)>)> = Vec::new();
        let mut distances = BTreeMap::new();
        let mut memory_managed = true;
        for zone in nrt.zones.iter().filter(|z| z.zone_type == ZONE_TYPE_NODE) {
            let Some(id) = numa_id_from_zone_name(&zone.name).filter(|id| *id < 64) else { continue };
            ids.push(id);
            for resource in &zone.resources {
                let milli = |q: &crate::quantity::Quantity| q.ceil_milli_i64().unwrap_or(i64::MAX).max(0);
                let amounts = Amounts {
                    capacity: milli(&resource.capacity),
                    allocatable: milli(&resource.allocatable),
                    available: milli(&resource.available),
                };
                let at = match rows.iter().position(|(name, _)| *name == resource.name) {
                    Some(at) => at,
                    None => {
                        rows.push((CompactString::from(resource.name.as_str()), Vec::new()));
                        rows.len() - 1
                    }
                };
                let zones = &mut rows[at].1;
                match zones.iter_mut().find(|(listed, _)| *listed == id) {
                    Some((_, existing)) => *existing = amounts,
                    None => zones.push((id, amounts)),
                }
            }
            for cost in &zone.costs {
                if let Some(other) = numa_id_from_zone_name(&cost.name) {
                    distances.insert((id, other), cost.value);
                }
            }
            if zone.attributes.iter().any(|a| a.name == ATTR_MEMORY_NUMA_MANAGED && a.value == "false") {
                memory_managed = false;
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let memory_managed = memory_managed && rows.iter().any(|(name, _)| name == "memory");
        let amounts = rows.iter().flat_map(|(_, zones)| zones.iter().map(|(_, amounts)| *amounts)).collect();
        let key = LayoutKey {
            ids,
            resources: rows
                .into_iter()
                .map(|(name, zones)| (name, zones.into_iter().map(|(id, _)| id).collect()))
                .collect(),
            distances: distances.into_iter().collect(),
        };
        Self { layout: shared_layout(key), amounts, memory_managed }
    }

    /// Reads a word of each cache line the machine's own amounts sit on, and returns them mixed:
    /// see [`super::Node::touch`].
    pub(super) fn touch(&self) -> u64 {
        // Rows are 24 bytes: reading every other one (48 bytes apart) touches every 64-byte line.
        let rows = self.amounts.iter().step_by(2);
        rows.fold(Arc::as_ptr(&self.layout).addr() as u64, |mixed, row| mixed ^ row.available as u64)
    }

    /// `name`'s amounts per NUMA id (None: no zone lists it).
    pub(super) fn resource(&self, name: &str) -> Option<Zones<'_>> {
        let run = self.layout.run(name)?;
        let rows = run.start..run.start + run.len;
        Some(Zones { ids: &self.layout.row_ids[rows.clone()], amounts: &self.amounts[rows] })
    }

    fn amounts_mut(&mut self, name: &str, id: u32) -> Option<&mut Amounts> {
        let run = self.layout.run(name)?;
        let at = self.layout.row_ids[run.start..run.start + run.len].iter().position(|listed| *listed == id)?;
        self.amounts.get_mut(run.start + at)
    }

    /// Takes `amount` of `resource` from the set's nodes, lowest id first; what it took where.
    pub(super) fn take(&mut self, resource: &str, mask: Mask, mut amount: i64) -> BTreeMap<u32, i64> {
        let mut taken = BTreeMap::new();
        for id in mask.ids() {
            let Some(zone) = self.amounts_mut(resource, id) else { continue };
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
    pub(super) fn give_back(&mut self, resource: &str, taken: &BTreeMap<u32, i64>) {
        for (id, amount) in taken {
            if let Some(zone) = self.amounts_mut(resource, *id) {
                zone.available = zone.available.saturating_add(*amount);
            }
        }
    }

    /// `resource`'s amounts by NUMA id (zero where the zone does not list it).
    pub(super) fn zones(&self, resource: &str) -> impl Fn(u32) -> Amounts + '_ {
        let zones = self.resource(resource);
        move |id| zones.and_then(|zones| zones.get(&id)).copied().unwrap_or_default()
    }

    /// Whether `mask` is among the closest sets of its width (one node always is); a set whose
    /// distances the NRT does not give is not.
    pub(super) fn closest(&self, mask: Mask) -> bool {
        if mask.count() <= 1 {
            return true;
        }
        let least = self.layout.least_distance.get(mask.count() as usize).copied().flatten();
        matches!((hints::average_distance(mask, &self.layout.distances), least), (Some(at), Some(least)) if at <= least)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nrt(zones: serde_json::Value) -> NodeResourceTopology {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "worker"}, "zones": zones})).unwrap()
    }

    fn zone(id: u32, resources: &[&str]) -> serde_json::Value {
        let resources: Vec<_> = resources
            .iter()
            .map(|name| serde_json::json!({"name": name, "capacity": "4", "allocatable": "4", "available": "4"}))
            .collect();
        serde_json::json!({"name": format!("node-{id}"), "type": "Node", "resources": resources})
    }

    /// Names over 16 bytes that share their length and first and last eight bytes are told apart
    /// by a full comparison; short ones by their words alone.
    #[test]
    fn resource_names_are_matched_exactly() {
        let (a, b) = ("example.com/aa-netdevice", "example.com/bb-netdevice");
        assert_eq!(words(a), words(b));
        let machine = Machine::of(&nrt(serde_json::json!([zone(0, &[a, "cpu"]), zone(1, &["cpu"])])));
        assert!(machine.resource(a).is_some());
        assert!(machine.resource(b).is_none());
        assert!(machine.resource("cpu").is_some_and(|zones| zones.iter().count() == 2));
        for other in ["cp", "cpuu", "", "memory"] {
            assert!(machine.resource(other).is_none(), "{other}");
        }
    }

    /// Machines of the same hardware share one layout; another resource list, or other NUMA ids,
    /// is another layout; a zone listed twice counts once.
    #[test]
    fn layouts_are_shared_by_the_same_hardware_only() {
        let two = || Machine::of(&nrt(serde_json::json!([zone(0, &["cpu"]), zone(1, &["cpu"])])));
        assert!(Arc::ptr_eq(&two().layout, &two().layout));
        let with_nic = Machine::of(&nrt(serde_json::json!([zone(0, &["cpu"]), zone(1, &["cpu", "example.com/nic"])])));
        assert!(!Arc::ptr_eq(&two().layout, &with_nic.layout));
        let repeated = Machine::of(&nrt(serde_json::json!([zone(0, &["cpu"]), zone(0, &["cpu"])])));
        assert_eq!(repeated.layout.ids, [0]);
        assert_eq!(repeated.resource("cpu").map(|zones| zones.iter().count()), Some(1));
    }
}
