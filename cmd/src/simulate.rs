//! `local --simulate-nodes N`: a synthetic fleet for trying the API (and the scheduler plugin's
//! view of it) without a cluster. Each node is one of the real machines of our sysfs fixtures,
//! published with its own, varied, exclusive allocations.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use numaresources_api::nrt::{AttributeInfo, NodeResourceTopology};
use numaresources_api::quantity::Quantity;
use numaresources_apiserver::Store;
use numaresources_apiserver::store::Preconditions;
use numaresources_rte::sysfs::{self, Machine, capacity_zones};

/// The real machines (jaypipes/ghw test snapshots, Apache-2.0), embedded in the exporter's
/// crate so the binary needs no files at run time.
const MACHINES: [(&str, &[u8]); 3] = [
    ("intel-2numa", sysfs::machines::INTEL_2NUMA_24CPU),
    ("amd64-1numa", sysfs::machines::AMD64_1NUMA_NVIDIA),
    ("amd64-offline", sysfs::machines::AMD64_OFFLINE_CPUS),
];

/// How often a simulated node reports, unchanged, as an exporter's heartbeat does: without it
/// the fleet would look stale to `kubectl numa top` and `doctor` three minutes after the start.
pub const SIMULATED_HEARTBEAT: Duration = Duration::from_secs(60);

/// Unpacks the machines under `<state_dir>/fixtures` and publishes `count` nodes built from them;
/// their names.
pub fn publish_fleet(store: &Store, state_dir: &Path, count: usize) -> anyhow::Result<Vec<String>> {
    let machines = MACHINES
        .iter()
        .map(|(name, tarball)| unpack(state_dir, name, tarball).map(|machine| (*name, machine)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut names = Vec::with_capacity(count);
    for i in 0..count {
        let (kind, machine) = &machines[i % machines.len()];
        let name = format!("sim-{kind}-{i:05}");
        store.create(synthetic_node(&name, machine, i), false)?;
        names.push(name);
    }
    Ok(names)
}

/// Reports each simulated node unchanged every [`SIMULATED_HEARTBEAT`] (the store counts it as a
/// report, with no new revision), until the node is gone or the task is dropped.
pub async fn heartbeat(store: std::sync::Arc<Store>, mut names: Vec<String>) {
    let mut ticks = tokio::time::interval(SIMULATED_HEARTBEAT);
    ticks.tick().await;
    while !names.is_empty() {
        ticks.tick().await;
        // A node someone deleted stops reporting, as a removed node's exporter would.
        names.retain(|name| {
            let unchanged =
                |current: &NodeResourceTopology| Ok::<_, numaresources_apiserver::store::StoreError>(current.clone());
            store.modify_within(name, &Preconditions::default(), false, usize::MAX, unchanged).is_ok()
        });
    }
}

fn unpack(state_dir: &Path, name: &str, tarball: &[u8]) -> anyhow::Result<Machine> {
    let dir = state_dir.join("fixtures").join(name);
    if !dir.join("sys").exists() {
        tar::Archive::new(flate2::read::GzDecoder::new(tarball))
            .unpack(&dir)
            .with_context(|| format!("unpacking the {name} fixture into {}", dir.display()))?;
    }
    Ok(sysfs::discover(dir.join("sys")).with_context(|| format!("reading the {name} fixture"))?.machine)
}

/// A node with a deterministic share of each zone's CPUs and memory taken by exclusive pods.
fn synthetic_node(name: &str, machine: &Machine, seed: usize) -> NodeResourceTopology {
    let mut nrt = NodeResourceTopology::new(name);
    nrt.zones = capacity_zones(machine);
    for (z, zone) in nrt.zones.iter_mut().enumerate() {
        for resource in &mut zone.resources {
            let capacity = resource.capacity.as_i64().unwrap_or(0);
            // Vary the used share between 0% and 75% by node and zone.
            let used_percent = ((seed * 37 + z * 11) % 4) as i64 * 25;
            let available = capacity - capacity * used_percent / 100;
            resource.available = Quantity::from_i64(available);
        }
    }
    let policy = if seed.is_multiple_of(3) { "best-effort" } else { "single-numa-node" };
    nrt.attributes = vec![
        AttributeInfo::new("topologyManagerScope", "container"),
        AttributeInfo::new("topologyManagerPolicy", policy),
    ];
    nrt
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    /// Paused time: the heartbeat's minute passes at once.
    #[tokio::test(start_paused = true)]
    async fn simulated_nodes_report_every_heartbeat_without_a_new_revision() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(Store::starting_at(0, 10));
        let names = publish_fleet(&store, dir.path(), 2).unwrap();
        let node = store.get(&names[0]).unwrap();
        let revision = node.revision;
        node.last_report.store(0, Ordering::Relaxed);
        let beating = tokio::spawn(heartbeat(store.clone(), names.clone()));
        tokio::time::sleep(SIMULATED_HEARTBEAT + Duration::from_secs(1)).await;
        let node = store.get(&names[0]).unwrap();
        assert!(node.last_report.load(Ordering::Relaxed) > 0, "reported again");
        assert_eq!(node.revision, revision, "unchanged: no new revision");
        beating.abort();
    }

    #[test]
    fn a_fleet_is_built_from_every_fixture_with_varied_allocations() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::starting_at(0, 10);
        assert_eq!(publish_fleet(&store, dir.path(), 6).unwrap().len(), 6);
        let snapshot = store.snapshot();
        let names: Vec<&str> = snapshot.items.iter().map(|s| s.name()).collect();
        assert!(names.contains(&"sim-intel-2numa-00000") && names.contains(&"sim-amd64-offline-00005"));
        let intel = store.get("sim-intel-2numa-00000").unwrap();
        assert_eq!(intel.object().unwrap().zones.len(), 2);
        let availables: std::collections::BTreeSet<i64> = snapshot
            .items
            .iter()
            .flat_map(|s| s.object().unwrap().into_owned().zones.into_iter().flat_map(|z| z.resources))
            .filter(|r| r.name == "cpu")
            .filter_map(|r| r.available.as_i64())
            .collect();
        assert!(availables.len() > 2, "allocations vary: {availables:?}");
    }
}
