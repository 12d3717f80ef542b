//! Discovery on synthetic trees built in temporary directories (the real machines are in
//! `tests/sysfs_fixtures.rs`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use numaresources_api::quantity::Quantity;
use proptest::prelude::*;

use super::read::{parse_cpu_list, parse_hugepages_dir_name, parse_index, parse_mem_total_kib};
use super::zones::RESOURCE_MEMORY;
use super::*;

/// A sysfs + procfs tree under a temporary directory, written the way the kernel lays it out.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }

    fn sys(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    fn write(&self, relative: &str, content: &str) {
        let path = self.dir.path().join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn mkdir(&self, relative: &str) {
        fs::create_dir_all(self.dir.path().join(relative)).unwrap();
    }

    fn remove(&self, relative: &str) {
        let path = self.dir.path().join(relative);
        if path.is_dir() { fs::remove_dir_all(path) } else { fs::remove_file(path) }.unwrap();
    }

    /// A CPU directory with `online` (unless `None`) and its SMT siblings.
    fn cpu(&self, cpu: u32, online: Option<&str>, siblings: &str) {
        let dir = format!("sys/devices/system/cpu/cpu{cpu}");
        if let Some(online) = online {
            self.write(&format!("{dir}/online"), online);
        }
        self.write(&format!("{dir}/topology/thread_siblings_list"), siblings);
        self.write(&format!("{dir}/topology/core_id"), &format!("{}\n", cpu / 2));
    }

    /// A node directory: `cpu<X>` symlinks, distance, meminfo and 2Mi/1Gi pools.
    fn node(&self, id: u32, cpus: &[u32], distance: &str, mem_kib: u64) {
        let dir = format!("sys/devices/system/node/node{id}");
        self.mkdir(&dir);
        for cpu in cpus {
            std::os::unix::fs::symlink(format!("../../cpu/cpu{cpu}"), self.dir.path().join(format!("{dir}/cpu{cpu}")))
                .unwrap();
        }
        let list: Vec<String> = cpus.iter().map(u32::to_string).collect();
        self.write(&format!("{dir}/cpulist"), &format!("{}\n", list.join(",")));
        self.write(&format!("{dir}/cpumap"), "ff\n");
        self.write(&format!("{dir}/distance"), &format!("{distance}\n"));
        self.write(
            &format!("{dir}/meminfo"),
            &format!("Node {id} MemTotal:       {mem_kib} kB\nNode {id} MemFree:        1000 kB\n"),
        );
        self.pool(id, 2048, 0);
        self.pool(id, 1_048_576, 0);
    }

    fn pool(&self, node: u32, kib: u64, pages: u64) {
        self.write(
            &format!("sys/devices/system/node/node{node}/hugepages/hugepages-{kib}kB/nr_hugepages"),
            &format!("{pages}\n"),
        );
    }

    /// Two nodes, CPUs 0-3 on node 0 and 4-7 on node 1 (SMT pairs n, n+1), 1 GiB each.
    fn two_nodes() -> Self {
        let tree = Self::new();
        for cpu in 0..8 {
            let first = cpu - cpu % 2;
            tree.cpu(cpu, (cpu != 0).then_some("1\n"), &format!("{first}-{}\n", first + 1));
        }
        tree.node(0, &[0, 1, 2, 3], "10 21", 1_048_576);
        tree.node(1, &[4, 5, 6, 7], "21 10", 1_048_576);
        tree
    }

    fn discover(&self) -> Result<Discovery, Error> {
        discover(self.sys())
    }

    fn machine(&self) -> Machine {
        let discovery = self.discover().unwrap();
        assert!(discovery.skipped.is_empty(), "{:?}", discovery.skipped);
        discovery.machine
    }
}

fn node_ids(machine: &Machine) -> Vec<u32> {
    machine.nodes.iter().map(|n| n.id).collect()
}

fn error_path(error: &Error) -> &Path {
    match error {
        Error::Read { path, .. }
        | Error::MalformedName { path, .. }
        | Error::Malformed { path, .. }
        | Error::DistanceCount { path, .. }
        | Error::Overflow { path, .. }
        | Error::NoNodes { path }
        | Error::CpuInTwoNodes { path, .. }
        | Error::OutsideTree { path, .. }
        | Error::NotRegular { path, .. }
        | Error::TooLarge { path, .. }
        | Error::TooMany { path, .. }
        | Error::NotACpu { path, .. } => path,
    }
}

#[test]
fn a_two_node_tree_is_read_completely() {
    let machine = Tree::two_nodes().machine();
    assert_eq!(machine.layout, Layout::Numa);
    assert_eq!(node_ids(&machine), [0, 1]);
    let node0 = &machine.nodes[0];
    assert_eq!(node0.cpus, [0, 1, 2, 3]);
    let cores: Vec<&[u32]> = node0.cores.iter().map(|c| c.cpus.as_slice()).collect();
    assert_eq!(cores, [&[0, 1][..], &[2, 3]]);
    assert_eq!(node0.cores[1].core_id, Some(1));
    assert_eq!(node0.distances, BTreeMap::from([(0, 10), (1, 21)]));
    assert_eq!(node0.memory_bytes, 1_073_741_824);
    assert_eq!(
        node0.hugepages,
        [
            HugepagePool { page_size_bytes: 2 << 20, pages: 0, total_bytes: 0 },
            HugepagePool { page_size_bytes: 1 << 30, pages: 0, total_bytes: 0 },
        ]
    );
    assert_eq!(machine.cpu_to_numa().into_iter().filter(|&(_, n)| n == 1).count(), 4);
    assert_eq!(machine.numa_of_cpu(5), Some(1));
    assert_eq!(machine.numa_of_cpu(8), None);
    assert_eq!(machine.numa_of_cpu(-1), None);
    assert_eq!(machine.cpu_to_numa().len(), 8);
}

#[test]
fn sparse_node_ids_come_from_the_names_and_distances_map_to_sorted_ids() {
    let tree = Tree::new();
    for cpu in 0..4 {
        tree.cpu(cpu, Some("1"), &cpu.to_string());
    }
    tree.node(0, &[0, 1], "10 32", 4096);
    tree.node(2, &[2, 3], "32 10", 8192);
    let machine = tree.machine();
    assert_eq!(node_ids(&machine), [0, 2]);
    assert_eq!(machine.node(2).unwrap().distances, BTreeMap::from([(0, 32), (2, 10)]));
    assert_eq!(machine.node(1), None);
    assert_eq!(machine.numa_of_cpu(3), Some(2));
    assert_eq!(machine.numa_id_bound(), 3);
    let zones = capacity_zones(&machine);
    let names: Vec<&str> = zones.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["node-0", "node-2"]);
    let costs: Vec<(&str, i64)> = zones[0].costs.iter().map(|c| (c.name.as_str(), c.value)).collect();
    assert_eq!(costs, [("node-0", 10), ("node-2", 32)]);
}

#[test]
fn node_ids_sort_numerically_not_by_name() {
    let tree = Tree::new();
    let ids = [0, 1, 2, 10];
    for (k, &id) in ids.iter().enumerate() {
        tree.cpu(id, None, &id.to_string());
        let distance: Vec<&str> = (0..ids.len()).map(|j| if j == k { "10" } else { "20" }).collect();
        tree.node(id, &[id], &distance.join(" "), 1024);
    }
    let machine = tree.machine();
    assert_eq!(node_ids(&machine), ids);
    assert_eq!(machine.node(10).unwrap().distances, BTreeMap::from([(0, 20), (1, 20), (2, 20), (10, 10)]));
}

#[test]
fn a_memory_less_node_has_zero_memory_and_no_pools() {
    let tree = Tree::two_nodes();
    tree.write("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:              0 kB\n");
    tree.remove("sys/devices/system/node/node1/hugepages");
    let machine = tree.machine();
    let node1 = machine.node(1).unwrap();
    assert_eq!((node1.memory_bytes, node1.hugepages.len(), node1.cpus.len()), (0, 0, 4));
    let zone = &capacity_zones(&machine)[1];
    let memory = zone.resources.iter().find(|r| r.name == RESOURCE_MEMORY).unwrap();
    assert!(memory.capacity.is_zero());
}

#[test]
fn a_cpu_less_node_has_memory_and_no_cpus() {
    let tree = Tree::two_nodes();
    tree.node(2, &[], "30 30 10", 2048);
    tree.write("sys/devices/system/node/node0/distance", "10 21 30\n");
    tree.write("sys/devices/system/node/node1/distance", "21 10 30\n");
    let machine = tree.machine();
    let node2 = machine.node(2).unwrap();
    assert!(node2.cpus.is_empty() && node2.cores.is_empty());
    assert_eq!(node2.memory_bytes, 2048 * 1024);
    let zone = &capacity_zones(&machine)[2];
    let cpu = zone.resources.iter().find(|r| r.name == RESOURCE_CPU).unwrap();
    assert!(cpu.capacity.is_zero());
}

#[test]
fn offline_cpus_are_left_out_and_a_missing_online_file_means_online() {
    let tree = Tree::two_nodes();
    tree.write("sys/devices/system/cpu/cpu3/online", "0\n");
    tree.write("sys/devices/system/cpu/cpu6/online", "0\n");
    let machine = tree.machine();
    assert_eq!(machine.nodes[0].cpus, [0, 1, 2]); // cpu0 has no online file
    assert_eq!(machine.nodes[1].cpus, [4, 5, 7]);
    let cores: Vec<Vec<u32>> = machine.nodes[1].cores.iter().map(|c| c.cpus.clone()).collect();
    assert_eq!(cores, [vec![4, 5], vec![7]]);
    assert_eq!(machine.numa_of_cpu(6), None);
}

#[test]
fn hugepage_pools_of_any_size_get_binary_si_names_and_byte_totals() {
    let tree = Tree::two_nodes();
    tree.pool(0, 64, 3);
    tree.pool(0, 32 * 1024, 2);
    tree.pool(0, 1536, 1);
    tree.pool(0, 16 * 1024 * 1024, 1);
    tree.pool(0, 2048, 512);
    let machine = tree.machine();
    let pools: Vec<(String, u64, u64)> =
        machine.nodes[0].hugepages.iter().map(|p| (p.resource_name(), p.pages, p.total_bytes)).collect();
    assert_eq!(
        pools,
        [
            ("hugepages-64Ki".to_owned(), 3, 3 * 65536),
            ("hugepages-1536Ki".to_owned(), 1, 1536 * 1024),
            ("hugepages-2Mi".to_owned(), 512, 1 << 30),
            ("hugepages-32Mi".to_owned(), 2, 64 << 20),
            ("hugepages-1Gi".to_owned(), 0, 0),
            ("hugepages-16Gi".to_owned(), 1, 16 << 30),
        ]
    );
    let zone = &capacity_zones(&machine)[0];
    let names: Vec<&str> = zone.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "cpu",
            "hugepages-1536Ki",
            "hugepages-16Gi",
            // No hugepages-1Gi: the kernel offers the size, the node has no such page.
            "hugepages-2Mi",
            "hugepages-32Mi",
            "hugepages-64Ki",
            "memory"
        ]
    );
    let two_mi = zone.resources.iter().find(|r| r.name == "hugepages-2Mi").unwrap();
    assert_eq!(two_mi.capacity, Quantity::from_i64(1 << 30));
    assert_eq!(two_mi.capacity.to_string(), "1073741824");
}

#[test]
fn capacity_zones_carry_counts_bytes_and_costs() {
    let tree = Tree::two_nodes();
    tree.pool(1, 2048, 8);
    let machine = tree.machine();
    let zones = capacity_zones(&machine);
    let zone = &zones[1];
    assert_eq!((zone.name.as_str(), zone.zone_type.as_str()), ("node-1", "Node"));
    let costs: Vec<(&str, i64)> = zone.costs.iter().map(|c| (c.name.as_str(), c.value)).collect();
    assert_eq!(costs, [("node-0", 21), ("node-1", 10)]);
    let resources: Vec<(&str, String)> =
        zone.resources.iter().map(|r| (r.name.as_str(), r.capacity.to_string())).collect();
    assert_eq!(
        resources,
        [("cpu", "4".to_owned()), ("hugepages-2Mi", "16777216".to_owned()), ("memory", "1073741824".to_owned())]
    );
    // Node 0 has no page of either size the kernel offers: no hugepages resource at all.
    let names: Vec<&str> = zones[0].resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["cpu", "memory"]);
    assert!(zone.resources.iter().all(|r| r.allocatable == r.capacity && r.available == r.capacity));
}

#[test]
fn without_a_node_directory_the_machine_is_one_node_with_everything() {
    let tree = Tree::two_nodes();
    tree.remove("sys/devices/system/node");
    tree.write("sys/devices/system/cpu/cpu5/online", "0\n");
    tree.write("sys/devices/system/cpu/online", "0-4,6-7\n");
    tree.mkdir("sys/devices/system/cpu/cpufreq");
    tree.write("proc/meminfo", "MemTotal:        7881912 kB\nMemFree:         7326032 kB\n");
    tree.write("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "4\n");
    let machine = tree.machine();
    assert_eq!(machine.layout, Layout::NoNumaDirectory);
    assert_eq!(node_ids(&machine), [0]);
    let node = &machine.nodes[0];
    assert_eq!(node.cpus, [0, 1, 2, 3, 4, 6, 7]);
    assert_eq!(node.cores.len(), 4);
    assert_eq!(node.memory_bytes, 7_881_912 * 1024);
    assert_eq!(node.distances, BTreeMap::from([(0, LOCAL_DISTANCE)]));
    assert_eq!(node.hugepages, [HugepagePool { page_size_bytes: 2 << 20, pages: 4, total_bytes: 8 << 20 }]);
}

#[test]
fn the_proc_root_is_the_sibling_of_the_sys_root() {
    assert_eq!(Sysfs::default().proc, Path::new("/proc"));
    assert_eq!(Sysfs::new("x/sys").proc, Path::new("x/proc"));
}

#[test]
fn garbage_that_would_falsify_a_number_is_an_error_naming_the_file() {
    type Spoil = fn(&Tree);
    let cases: [(&str, Spoil, &str); 12] = [
        ("distance with a word", |t| t.write("sys/devices/system/node/node0/distance", "10 x\n"), "node0/distance"),
        ("distance too short", |t| t.write("sys/devices/system/node/node1/distance", "10\n"), "node1/distance"),
        ("meminfo without MemTotal", |t| t.write("sys/devices/system/node/node0/meminfo", "hello\n"), "node0/meminfo"),
        (
            "MemTotal not a number",
            |t| t.write("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal: lots kB\n"),
            "node1/meminfo",
        ),
        (
            "MemTotal in another unit",
            |t| t.write("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal: 5 MB\n"),
            "node1/meminfo",
        ),
        ("missing meminfo", |t| t.remove("sys/devices/system/node/node1/meminfo"), "node1/meminfo"),
        (
            "nr_hugepages garbage",
            |t| t.write("sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "-1\n"),
            "hugepages-2048kB/nr_hugepages",
        ),
        (
            "hugepages name without a unit",
            |t| t.mkdir("sys/devices/system/node/node0/hugepages/hugepages-2048"),
            "hugepages/hugepages-2048",
        ),
        ("node name not a number", |t| t.mkdir("sys/devices/system/node/nodeX"), "node/nodeX"),
        ("node name with a leading zero", |t| t.mkdir("sys/devices/system/node/node01"), "node/node01"),
        ("pool overflowing i64", |t| t.pool(0, 1_048_576, u64::MAX / 2), "hugepages-1048576kB/nr_hugepages"),
        (
            "a CPU under two nodes",
            |t| std::os::unix::fs::symlink("../../cpu/cpu0", t.sys().join("devices/system/node/node1/cpu0")).unwrap(),
            "node1/cpu0",
        ),
    ];
    for (what, spoil, path) in cases {
        let tree = Tree::two_nodes();
        spoil(&tree);
        let error = tree.discover().expect_err(what);
        assert!(error_path(&error).ends_with(path), "{what}: {error}");
        assert!(error.to_string().contains(path), "{what}: {error}");
    }
}

#[test]
fn an_empty_node_directory_is_an_error() {
    let tree = Tree::two_nodes();
    tree.remove("sys/devices/system/node/node0");
    tree.remove("sys/devices/system/node/node1");
    assert!(matches!(tree.discover(), Err(Error::NoNodes { .. })));
}

#[test]
fn what_upstream_tolerates_is_skipped_and_reported() {
    let tree = Tree::two_nodes();
    tree.mkdir("sys/devices/system/node/node0/cpufoo");
    tree.write("sys/devices/system/cpu/cpu2/online", "maybe\n");
    tree.write("sys/devices/system/cpu/cpu4/topology/thread_siblings_list", "4-x\n");
    tree.write("sys/devices/system/cpu/cpu6/topology/thread_siblings_list", "0-1\n"); // not itself
    tree.write("sys/devices/system/cpu/cpu0/topology/core_id", "zero\n");
    let outside = tempfile::tempdir().unwrap();
    fs::create_dir_all(outside.path().join("hugepages-4096kB")).unwrap();
    fs::write(outside.path().join("hugepages-4096kB/nr_hugepages"), "1\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("hugepages-4096kB"),
        tree.sys().join("devices/system/node/node1/hugepages/hugepages-4096kB"),
    )
    .unwrap();
    tree.write("sys/devices/system/node/node1/hugepages/README", "not a pool\n");

    let Discovery { machine, skipped } = tree.discover().unwrap();
    let mut paths: Vec<String> = skipped
        .iter()
        .map(|e| error_path(e).strip_prefix(tree.sys()).unwrap().to_string_lossy().into_owned())
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "devices/system/cpu/cpu0/topology/core_id",
            "devices/system/cpu/cpu2/online",
            "devices/system/cpu/cpu4/topology/thread_siblings_list",
            "devices/system/cpu/cpu6/topology/thread_siblings_list",
            "devices/system/node/node0/cpufoo",
            "devices/system/node/node1/hugepages/hugepages-4096kB",
        ]
    );
    assert_eq!(machine.nodes[0].cpus, [0, 1, 2, 3]); // cpu2 still counted
    assert_eq!(machine.nodes[0].cores[0].core_id, None);
    let cores: Vec<Vec<u32>> = machine.nodes[1].cores.iter().map(|c| c.cpus.clone()).collect();
    assert_eq!(cores, [vec![4], vec![5], vec![6], vec![7]]);
    assert_eq!(machine.nodes[1].hugepages.len(), 2);
}

#[test]
fn a_hugepage_symlink_that_stays_inside_its_directory_is_followed() {
    let tree = Tree::two_nodes();
    tree.pool(0, 2048, 5);
    let pools = tree.sys().join("devices/system/node/node0/hugepages");
    std::os::unix::fs::symlink("hugepages-2048kB", pools.join("hugepages-4096kB")).unwrap();
    let machine = tree.machine();
    let found: Vec<(u64, u64)> =
        machine.nodes[0].hugepages.iter().map(|p| (p.page_size_bytes >> 10, p.pages)).collect();
    assert_eq!(found, [(2048, 5), (4096, 5), (1_048_576, 0)]);
}

#[test]
fn cpu_lists_parse_the_kernel_format_and_reject_garbage() {
    assert_eq!(parse_cpu_list("0,12\n"), Some(vec![0, 12]));
    assert_eq!(parse_cpu_list("0-3,8-9"), Some(vec![0, 1, 2, 3, 8, 9]));
    assert_eq!(parse_cpu_list("3,1,1"), Some(vec![1, 3]));
    assert_eq!(parse_cpu_list("\n"), Some(vec![]));
    for bad in ["a", "1-", "-1", "3-1", "1,,2", "0-4294967295", "1 2"] {
        assert_eq!(parse_cpu_list(bad), None, "{bad}");
    }
}

#[test]
fn names_and_meminfo_parse_strictly() {
    assert_eq!(parse_index("node10", "node"), Some(10));
    assert_eq!(parse_index("node0", "node"), Some(0));
    for bad in ["node", "node01", "node-1", "node+1", "node1a", "node99999999999", "nod1"] {
        assert_eq!(parse_index(bad, "node"), None, "{bad}");
    }
    assert_eq!(parse_hugepages_dir_name("hugepages-2048kB"), Some(2048));
    for bad in ["hugepages-0kB", "hugepages-kB", "hugepages-2048", "hugepages-2MB", "huge-2048kB"] {
        assert_eq!(parse_hugepages_dir_name(bad), None, "{bad}");
    }
    assert_eq!(parse_mem_total_kib("Node 3 MemTotal:  12 kB\n"), Some(12));
    assert_eq!(parse_mem_total_kib("MemFree: 1 kB\nMemTotal: 7\n"), Some(7));
    assert_eq!(parse_mem_total_kib("MemTotal:\n"), None);
    assert_eq!(parse_mem_total_kib("MemTotalx: 1 kB\n"), None);
}

/// The files discovery reads, relative to the two-node tree's root.
const GARBAGE_TARGETS: [&str; 10] = [
    "sys/devices/system/node/node0/distance",
    "sys/devices/system/node/node1/meminfo",
    "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages",
    "sys/devices/system/cpu/cpu0/online",
    "sys/devices/system/cpu/cpu1/topology/thread_siblings_list",
    "sys/devices/system/cpu/cpu1/topology/core_id",
    "sys/devices/system/node/node1/cpulist",
    "proc/meminfo",
    "sys/devices/system/node/node1/distance",
    "sys/devices/system/cpu/cpu5/online",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_garbage_in_any_file_never_panics(
        target in 0..GARBAGE_TARGETS.len(),
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
        text in "[0-9a-z :\\-,\\n]{0,40}",
        use_text in any::<bool>(),
    ) {
        let tree = Tree::two_nodes();
        let path = tree.dir.path().join(GARBAGE_TARGETS[target]);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, if use_text { text.into_bytes() } else { bytes }).unwrap();
        if let Ok(discovery) = tree.discover() {
            // Whatever was read, every online CPU is under exactly one node.
            let mut cpus: Vec<u32> = discovery.machine.nodes.iter().flat_map(|n| n.cpus.clone()).collect();
            let total = cpus.len();
            cpus.dedup();
            prop_assert_eq!(cpus.len(), total);
            let _ = capacity_zones(&discovery.machine);
        }
    }

    #[test]
    fn random_entry_names_never_panic(name in "(node|cpu|hugepages-)[0-9a-zA-Z\\-]{0,12}") {
        let tree = Tree::two_nodes();
        tree.mkdir(&format!("sys/devices/system/node/{name}"));
        tree.mkdir(&format!("sys/devices/system/node/node0/{name}"));
        tree.mkdir(&format!("sys/devices/system/node/node1/hugepages/{name}"));
        let _ = tree.discover();
    }
}

/// Replaces a file of the tree with a FIFO (no writer ever opens it).
fn make_fifo(tree: &Tree, relative: &str) {
    let path = tree.dir.path().join(relative);
    let _ = fs::remove_file(&path);
    let made = std::process::Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Discovers on another thread: a discovery that blocks fails the test instead of hanging it.
fn discover_or_hang(tree: &Tree) -> Result<Discovery, Error> {
    let sys = tree.sys();
    let (tell, told) = std::sync::mpsc::channel();
    std::thread::spawn(move || tell.send(discover(sys)));
    told.recv_timeout(std::time::Duration::from_secs(30)).expect("discovery blocked on a file")
}

#[test]
fn a_fifo_in_the_tree_is_reported_never_waited_on() {
    for file in ["node/node0/meminfo", "node/node1/distance", "node/node0/hugepages/hugepages-2048kB/nr_hugepages"] {
        let tree = Tree::two_nodes();
        make_fifo(&tree, &format!("sys/devices/system/{file}"));
        let error = discover_or_hang(&tree).expect_err(file);
        assert!(matches!(error, Error::NotRegular { found: "FIFO", .. }), "{file}: {error}");
        assert!(error_path(&error).ends_with(file), "{file}: {error}");
    }
    // An optional file (cpu online, SMT siblings): skipped and reported, as a garbled one is.
    let tree = Tree::two_nodes();
    make_fifo(&tree, "sys/devices/system/cpu/cpu2/online");
    make_fifo(&tree, "sys/devices/system/cpu/cpu5/topology/thread_siblings_list");
    let Discovery { machine, skipped } = discover_or_hang(&tree).unwrap();
    let fifos: Vec<&Path> = skipped
        .iter()
        .filter(|e| matches!(e, Error::NotRegular { found: "FIFO", .. }))
        .map(|e| error_path(e).strip_prefix(tree.sys()).unwrap())
        .collect();
    assert_eq!(
        fifos,
        [
            Path::new("devices/system/cpu/cpu2/online"),
            Path::new("devices/system/cpu/cpu5/topology/thread_siblings_list")
        ]
    );
    assert_eq!(machine.cpu_to_numa().len(), 8);
}

#[test]
fn a_file_longer_than_the_limit_says_so_instead_of_quoting_a_truncated_start() {
    let tree = Tree::two_nodes();
    let padding = "\n".repeat(usize::try_from(FILE_SIZE_LIMIT).unwrap());
    tree.write("sys/devices/system/node/node0/meminfo", &format!("{padding}Node 0 MemTotal: 1024 kB\n"));
    let error = tree.discover().unwrap_err();
    assert!(matches!(error, Error::TooLarge { limit: FILE_SIZE_LIMIT, .. }), "{error}");
    assert!(error.to_string().contains("node0/meminfo: longer than 65536 bytes"), "{error}");
    // Exactly at the limit is still read.
    let tree = Tree::two_nodes();
    let text = "Node 0 MemTotal: 1024 kB\n";
    let padding = " ".repeat(usize::try_from(FILE_SIZE_LIMIT).unwrap() - text.len());
    tree.write("sys/devices/system/node/node0/meminfo", &format!("{padding}{text}"));
    assert_eq!(tree.machine().nodes[0].memory_bytes, 1 << 20);
}

#[test]
fn a_node_directory_without_files_is_named_not_a_sibling_distance_row() {
    let tree = Tree::two_nodes();
    tree.mkdir("sys/devices/system/node/node5");
    let error = tree.discover().unwrap_err();
    assert!(error_path(&error).ends_with("node5/distance"), "{error}");
    assert!(matches!(&error, Error::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound), "{error}");
}

#[test]
fn cpu_entries_without_a_cpu_directory_are_skipped_symlink_loops_included() {
    let tree = Tree::two_nodes();
    let node0 = tree.sys().join("devices/system/node/node0");
    for cpu in 100..150 {
        std::os::unix::fs::symlink(".", node0.join(format!("cpu{cpu}"))).unwrap(); // a loop to node0
    }
    std::os::unix::fs::symlink("../../node/node0", node0.join("cpu150")).unwrap();
    // A CPU directory that is itself a symlink is not the kernel's either.
    std::os::unix::fs::symlink("cpu0", tree.sys().join("devices/system/cpu/cpu151")).unwrap();
    std::os::unix::fs::symlink("../../cpu/cpu151", node0.join("cpu151")).unwrap();
    let Discovery { machine, skipped } = discover_or_hang(&tree).unwrap();
    assert_eq!(machine.nodes[0].cpus, [0, 1, 2, 3]);
    assert_eq!(skipped.iter().filter(|e| matches!(e, Error::NotACpu { .. })).count(), 52, "{skipped:?}");
}

#[test]
fn more_cpus_than_any_machine_has_is_an_error() {
    let tree = Tree::two_nodes();
    let node0 = tree.sys().join("devices/system/node/node0");
    let cpus = tree.sys().join("devices/system/cpu");
    for cpu in 8..=u32::try_from(CPU_LIMIT).unwrap() {
        fs::create_dir(cpus.join(format!("cpu{cpu}"))).unwrap();
        std::os::unix::fs::symlink(format!("../../cpu/cpu{cpu}"), node0.join(format!("cpu{cpu}"))).unwrap();
    }
    let error = tree.discover().unwrap_err();
    assert!(matches!(error, Error::TooMany { what: "CPUs", limit: CPU_LIMIT, .. }), "{error}");
}
