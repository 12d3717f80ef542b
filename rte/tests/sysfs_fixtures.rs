//! Discovery on real machines: the sysfs snapshots in `machines/` (see the README
//! there), and the machine the test runs on.

#![allow(clippy::unwrap_used)] // test helpers: a failed unpack is a failed test

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use numaresources_rte::sysfs::{self, Discovery, Layout, Machine, capacity_zones};
use support::unpack;

fn discover_fixture(name: &str) -> (tempfile::TempDir, Machine) {
    let (dir, sys) = unpack(name);
    let Discovery { machine, skipped } = sysfs::discover(&sys).unwrap();
    assert!(skipped.is_empty(), "{name}: {skipped:?}");
    (dir, machine)
}

fn cores(machine: &Machine, node: usize) -> Vec<(Option<i64>, Vec<u32>)> {
    machine.nodes[node].cores.iter().map(|c| (c.core_id, c.cpus.clone())).collect()
}

fn pools(machine: &Machine, node: usize) -> Vec<(String, u64)> {
    machine.nodes[node].hugepages.iter().map(|p| (p.resource_name(), p.total_bytes)).collect()
}

#[test]
fn intel_2numa_24cpu_has_two_nodes_of_twelve_cpus_split_even_and_odd() {
    let (_dir, machine) = discover_fixture("intel-2numa-24cpu");
    assert_eq!(machine.layout, Layout::Numa);
    assert_eq!(machine.nodes.iter().map(|n| n.id).collect::<Vec<_>>(), [0, 1]);
    let even: Vec<u32> = (0..24).step_by(2).collect();
    let odd: Vec<u32> = (1..24).step_by(2).collect();
    assert_eq!(machine.nodes[0].cpus, even);
    assert_eq!(machine.nodes[1].cpus, odd);
    // SMT siblings are n and n+12; core ids 0, 1, 2, 8, 9, 10 on each socket.
    let core_ids = [0, 1, 2, 8, 9, 10];
    for (node, first) in [(0, 0), (1, 1)] {
        let expected: Vec<(Option<i64>, Vec<u32>)> = core_ids
            .iter()
            .enumerate()
            .map(|(k, &id)| {
                let cpu = first + 2 * k as u32;
                (Some(id), vec![cpu, cpu + 12])
            })
            .collect();
        assert_eq!(cores(&machine, node), expected, "node {node}");
    }
    assert_eq!(machine.nodes[0].distances, BTreeMap::from([(0, 10), (1, 20)]));
    assert_eq!(machine.nodes[1].distances, BTreeMap::from([(0, 20), (1, 10)]));
    assert_eq!(machine.nodes[0].memory_bytes, 32_980_312 * 1024);
    assert_eq!(machine.nodes[1].memory_bytes, 32_940_968 * 1024);
    for node in 0..2 {
        assert_eq!(pools(&machine, node), [("hugepages-2Mi".to_owned(), 0), ("hugepages-1Gi".to_owned(), 0)]);
    }
    assert_eq!(machine.cpu_to_numa().len(), 24);
    assert_eq!(machine.numa_of_cpu(13), Some(1));
    assert_eq!(machine.numa_of_cpu(22), Some(0));
    assert_eq!(machine.numa_of_cpu(24), None);
    assert_eq!(machine.numa_id_bound(), 2);
}

#[test]
fn intel_2numa_24cpu_capacity_zones_are_what_the_exporter_publishes() {
    let (_dir, machine) = discover_fixture("intel-2numa-24cpu");
    let zones = capacity_zones(&machine);
    type ZoneSummary = (String, Vec<(String, i64)>, Vec<(String, String)>);
    let summary: Vec<ZoneSummary> = zones
        .iter()
        .map(|z| {
            (
                z.name.to_string(),
                z.costs.iter().map(|c| (c.name.to_string(), c.value)).collect(),
                z.resources.iter().map(|r| (r.name.to_string(), r.capacity.to_string())).collect(),
            )
        })
        .collect();
    let s = |v: &str| v.to_owned();
    assert_eq!(
        summary,
        [
            (
                s("node-0"),
                vec![(s("node-0"), 10), (s("node-1"), 20)],
                // Both pools are empty on this machine: no hugepages resource, as upstream.
                vec![(s("cpu"), s("12")), (s("memory"), s("33771839488"))]
            ),
            (
                s("node-1"),
                vec![(s("node-0"), 20), (s("node-1"), 10)],
                // Both pools are empty on this machine: no hugepages resource, as upstream.
                vec![(s("cpu"), s("12")), (s("memory"), s("33731551232"))]
            ),
        ]
    );
    assert!(zones.iter().all(|z| z.zone_type == "Node"));
}

#[test]
fn amd64_offline_cpus_counts_only_the_two_online_cpus() {
    let (_dir, machine) = discover_fixture("amd64-offline-cpus");
    assert_eq!(machine.nodes.len(), 1);
    let node = &machine.nodes[0];
    assert_eq!(node.id, 0);
    assert_eq!(node.cpus, [0, 1]); // node0 lists cpu0-3; cpu2 and cpu3 are offline
    // Both CPUs report core id 0, but they are on different packages with no SMT: two cores.
    assert_eq!(cores(&machine, 0), [(Some(0), vec![0]), (Some(0), vec![1])]);
    assert_eq!(node.distances, BTreeMap::from([(0, 10)]));
    assert_eq!(node.memory_bytes, 7_881_912 * 1024);
    assert_eq!(pools(&machine, 0), [("hugepages-2Mi".to_owned(), 0), ("hugepages-1Gi".to_owned(), 0)]);
    assert_eq!(machine.numa_of_cpu(2), None);
}

#[test]
fn amd64_1numa_nvidia_has_eight_cpus_and_cpu0_without_an_online_file() {
    let (_dir, machine) = discover_fixture("amd64-1numa-nvidia");
    assert_eq!(machine.nodes.len(), 1);
    let node = &machine.nodes[0];
    assert_eq!(node.cpus, (0..8).collect::<Vec<u32>>());
    let core_ids: Vec<Option<i64>> = node.cores.iter().map(|c| c.core_id).collect();
    assert_eq!(core_ids, [Some(0), Some(57), Some(58), Some(59), Some(60), Some(61), Some(62), Some(63)]);
    assert!(node.cores.iter().all(|c| c.cpus.len() == 1));
    assert_eq!(node.distances, BTreeMap::from([(0, 10)]));
    assert_eq!(node.memory_bytes, 30_601_816 * 1024);
    assert_eq!(pools(&machine, 0), [("hugepages-2Mi".to_owned(), 0)]);
}

#[test]
fn the_1numa_machine_reads_the_same_without_its_node_directory() {
    // What a kernel without CONFIG_NUMA would show: the fallback must describe the same machine.
    let (dir, sys) = unpack("amd64-1numa-nvidia");
    let numa = sysfs::discover(&sys).unwrap().machine;
    fs::remove_dir_all(sys.join("devices/system/node")).unwrap();
    let flat = sysfs::discover(&sys).unwrap().machine;
    assert_eq!(flat.layout, Layout::NoNumaDirectory);
    assert_eq!(flat.nodes[0].cpus, numa.nodes[0].cpus);
    assert_eq!(flat.nodes[0].memory_bytes, numa.nodes[0].memory_bytes);
    assert_eq!(flat.nodes[0].cores, numa.nodes[0].cores);
    assert_eq!(flat.nodes[0].distances, numa.nodes[0].distances);
    // The fixture has no kernel/mm/hugepages: no pools.
    assert!(flat.nodes[0].hugepages.is_empty());
    drop(dir);
}

/// The kernel's CPU list format, for the host test.
fn cpu_list(text: &str) -> Vec<u32> {
    text.trim()
        .split(',')
        .filter(|item| !item.is_empty())
        .flat_map(|item| match item.split_once('-') {
            Some((a, b)) => a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap(),
            None => {
                let cpu = item.parse::<u32>().unwrap();
                cpu..=cpu
            }
        })
        .collect()
}

#[test]
fn the_host_machine_has_a_node_and_every_online_cpu_in_exactly_one() {
    let online_file = Path::new("/sys/devices/system/cpu/online");
    let Ok(online) = fs::read_to_string(online_file) else {
        eprintln!("no {} here: nothing to check", online_file.display());
        return;
    };
    let machine = sysfs::discover(sysfs::DEFAULT_SYSFS_ROOT).unwrap().machine;
    assert!(!machine.nodes.is_empty());
    for cpu in cpu_list(&online) {
        let holders = machine.nodes.iter().filter(|n| n.cpus.contains(&cpu)).count();
        assert_eq!(holders, 1, "CPU {cpu}");
    }
    for node in &machine.nodes {
        let mut in_cores: Vec<u32> = node.cores.iter().flat_map(|c| c.cpus.clone()).collect();
        in_cores.sort_unstable();
        assert_eq!(in_cores, node.cpus, "node {}", node.id);
        assert_eq!(node.distances.len(), machine.nodes.len());
    }
}
