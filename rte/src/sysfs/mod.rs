//! Machine discovery from sysfs: NUMA nodes, their online CPUs and cores, distances, memory and
//! hugepage pools. The numbers become the `capacity` of each NUMA zone of the node's NRT.
//!
//! # What is read (under the sysfs root, default `/sys`)
//!
//! | what | where |
//! |---|---|
//! | NUMA nodes | entries `node<N>` of `devices/system/node/`; **the id is `N`**, never a list position |
//! | CPUs of a node | entries `cpu<X>` of `node<N>/`, kept when `devices/system/cpu/cpu<X>/online` is not `0` (a missing file means online: `cpu0` often has none) |
//! | cores | `devices/system/cpu/cpu<X>/topology/thread_siblings_list` (CPUs with the same list are SMT siblings) and `core_id` |
//! | distances | `node<N>/distance`: position *k* is the *k*-th smallest id of the nodes present (see below) |
//! | memory | `node<N>/meminfo`, `MemTotal` in kB × 1024 (hugepage pools included, as upstream) |
//! | hugepages | `node<N>/hugepages/hugepages-<size>kB/nr_hugepages` × size, every size present |
//!
//! **Distances on sparse layouts.** The kernel prints one distance per *online* node, in
//! ascending node id order, and it registers a `node<N>` directory exactly for the online nodes.
//! So position *k* of every `distance` file is mapped to the *k*-th smallest id among the
//! `node<N>` directories found: with `node0` and `node2` present, `10 20` in `node0/distance`
//! means distance 10 to node 0 and 20 to node 2. A file whose length differs from the number of
//! nodes cannot be mapped without guessing, so it is an error ([`Error::DistanceCount`]).
//!
//! **No node directory.** A kernel built without `CONFIG_NUMA` has no `devices/system/node/`.
//! None of the fixtures is such a machine; what they show is that a single-node NUMA kernel
//! reports in `node0/meminfo` the same `MemTotal` as `/proc/meminfo` (the 1-NUMA fixture: both
//! 30601816 kB). So such a machine is described as one node 0 holding every online CPU of
//! `devices/system/cpu/`, `MemTotal` of `/proc/meminfo`, the pools of `kernel/mm/hugepages/`, and
//! a distance of 10 to itself (the kernel's local distance, what a one-node NUMA kernel reports).
//! [`Machine::layout`] says which case applies.
//!
//! # Errors: what stops discovery and what is skipped
//!
//! Anything that would make a published number wrong stops discovery with an [`Error`] naming the
//! file: an unreadable node directory, a malformed `node<N>` or `hugepages-<size>kB` name (upstream
//! fails on those too), a missing or garbled `meminfo`, `distance` or `nr_hugepages`, a CPU listed
//! under two nodes. Where upstream keeps going, discovery keeps going too and reports what it did
//! in [`Discovery::skipped`]:
//! - a `cpu…` entry of a node directory that is not `cpu<X>` (nor `cpulist`/`cpumap`) is skipped;
//! - a garbled `online` file counts the CPU as online (upstream reads it as "not 0");
//! - a garbled `thread_siblings_list` makes the CPU a core of its own, a garbled `core_id` leaves
//!   the core id unknown;
//! - a `hugepages-*` symlink that resolves outside its directory is skipped.
//!
//! Entries that are simply not ours (`memory<N>`, `vmstat`, `cpufreq`, plain files among the
//! hugepage directories, …) are ignored silently. Nothing here panics, whatever the files hold.
//!
//! # Nothing here blocks or grows without bound
//!
//! Every file is opened non-blocking and checked through the open descriptor (no window between
//! the check and the read) to be a regular file, as every file the kernel writes here is: a FIFO,
//! socket or device in the tree is an error ([`Error::NotRegular`]), never a read that waits for a
//! writer. At most [`FILE_SIZE_LIMIT`] bytes are read from a file, [`DIRECTORY_ENTRY_LIMIT`]
//! entries from a directory, and a machine has at most [`CPU_LIMIT`] CPUs. A `cpu<X>` entry of
//! a node directory counts only when `devices/system/cpu/cpu<X>` is a plain directory, so
//! entries made of symlinks (loops included) are skipped ([`Error::NotACpu`]).

pub mod machines;
mod read;
mod zones;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

pub use zones::capacity_zones;
pub(crate) use zones::{RESOURCE_CPU, hugepages_resource_name};

/// Where sysfs is on a normal host.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";

/// The kernel's distance of a node to itself (`LOCAL_DISTANCE`).
pub(crate) const LOCAL_DISTANCE: u32 = 10;

/// The most bytes read from one file. sysfs attributes are one page (4 KiB) at most and a
/// `/proc/meminfo` is about 1.5 KiB; a longer file is not what the kernel writes and is an error
/// ([`Error::TooLarge`]), never read in full.
pub const FILE_SIZE_LIMIT: u64 = 64 * 1024;

/// The most logical CPUs a machine may have: the kernel's largest `NR_CPUS` (x86-64 `MAXSMP`).
/// A tree listing more is not a machine ([`Error::TooMany`]).
pub const CPU_LIMIT: usize = 8192;

/// The most entries read from one directory. A node directory holds one `memory<N>` entry per
/// memory block besides its CPUs (some 100,000 on a 12 TiB machine with 128 MiB blocks), so the
/// bound is generous; it only stops a directory made to cost unbounded time.
pub const DIRECTORY_ENTRY_LIMIT: usize = 1 << 20;

/// Why discovery failed, or (in [`Discovery::skipped`]) what it stepped over. Every variant names
/// the offending path.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// A directory entry whose name does not have the expected form.
    #[error("{}: malformed name, expected {expected}", path.display())]
    MalformedName {
        /// The entry.
        path: PathBuf,
        /// The form expected, e.g. `node<N>`.
        expected: &'static str,
    },
    /// A file whose content is not what the kernel writes there.
    #[error("{}: {content:?} is not {expected}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The start of what it holds.
        content: String,
        /// What was expected, e.g. `a CPU list`.
        expected: &'static str,
    },
    /// A `distance` file whose length does not match the number of NUMA nodes.
    #[error("{}: {found} distances for {nodes} NUMA nodes", path.display())]
    DistanceCount {
        /// The `distance` file.
        path: PathBuf,
        /// How many numbers it holds.
        found: usize,
        /// How many `node<N>` directories there are.
        nodes: usize,
    },
    /// A number that does not fit (bytes beyond `i64::MAX`, the largest quantity).
    #[error("{}: {what} overflows", path.display())]
    Overflow {
        /// The file.
        path: PathBuf,
        /// What overflowed.
        what: &'static str,
    },
    /// The node directory exists but holds no `node<N>` entry.
    #[error("{}: no node<N> entries", path.display())]
    NoNodes {
        /// The node directory.
        path: PathBuf,
    },
    /// The same logical CPU appears under two NUMA nodes.
    #[error("{}: CPU {cpu} is already under NUMA node {first}", path.display())]
    CpuInTwoNodes {
        /// The second entry found.
        path: PathBuf,
        /// The CPU.
        cpu: u32,
        /// The node it was found under first.
        first: u32,
    },
    /// A symlink that resolves outside the directory it is listed in.
    #[error("{}: resolves outside {}", path.display(), dir.display())]
    OutsideTree {
        /// The symlink.
        path: PathBuf,
        /// The directory it must stay in.
        dir: PathBuf,
    },
    /// A file the kernel writes as a regular file is something else (a FIFO, a socket, a
    /// device): it is not opened for reading, which could block forever.
    #[error("{}: is a {found}, not the regular file the kernel writes there", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        found: &'static str,
    },
    /// A file longer than any the kernel writes there; it is not read further.
    #[error("{}: longer than {limit} bytes, which no sysfs or procfs file it could be is", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// [`FILE_SIZE_LIMIT`].
        limit: u64,
    },
    /// More CPUs, or more entries in one directory, than any machine has.
    #[error("{}: more than {limit} {what}", path.display())]
    TooMany {
        /// The directory.
        path: PathBuf,
        /// What was counted.
        what: &'static str,
        /// The bound ([`CPU_LIMIT`] or [`DIRECTORY_ENTRY_LIMIT`]).
        limit: usize,
    },
    /// A `cpu<X>` entry of a node directory with no CPU directory `devices/system/cpu/cpu<X>`
    /// behind it (skipped: it is not a CPU).
    #[error("{}: no CPU directory {} behind it", path.display(), cpu_dir.display())]
    NotACpu {
        /// The entry in the node directory.
        path: PathBuf,
        /// The CPU directory that does not exist (or is not a plain directory).
        cpu_dir: PathBuf,
    },
}

/// Where the sysfs and procfs trees are. Discovery reads nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    sys: PathBuf,
    proc: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::new(DEFAULT_SYSFS_ROOT)
    }
}

impl Sysfs {
    /// Reads the `sys/` tree at `sys_root`. procfs (read only on machines without a node
    /// directory) is taken to be its sibling `proc/`: `/sys` → `/proc`, `x/sys` → `x/proc`, which is
    /// how the fixtures unpack.
    pub fn new(sys_root: impl Into<PathBuf>) -> Self {
        let sys = sys_root.into();
        let proc = sys.parent().map_or_else(|| PathBuf::from("/proc"), |parent| parent.join("proc"));
        Self { sys, proc }
    }

    /// Discovers the machine. See the module documentation for what is read and skipped.
    pub fn discover(&self) -> Result<Discovery, Error> {
        read::discover(self)
    }
}

/// Discovers the machine under `sys_root` (procfs beside it); see [`Sysfs::new`].
pub fn discover(sys_root: impl Into<PathBuf>) -> Result<Discovery, Error> {
    Sysfs::new(sys_root).discover()
}

/// The result of a successful discovery.
#[derive(Debug)]
pub struct Discovery {
    /// The machine.
    pub machine: Machine,
    /// What was stepped over on the way, worth a log line each.
    pub skipped: Vec<Error>,
}

/// How the machine's NUMA layout was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// From the `node<N>` directories.
    Numa,
    /// No node directory (kernel without `CONFIG_NUMA`): one node 0 with everything.
    NoNumaDirectory,
}

/// A machine: its NUMA nodes in ascending id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// How the layout was found.
    pub layout: Layout,
    /// The NUMA nodes, ascending by id; ids may be sparse.
    pub nodes: Vec<NumaNode>,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    /// The id from the directory name `node<id>`.
    pub id: u32,
    /// Online logical CPUs, ascending (empty on a CPU-less node).
    pub cpus: Vec<u32>,
    /// The same CPUs grouped into physical cores (SMT siblings together), ascending by first CPU.
    pub cores: Vec<Core>,
    /// Distance to every node, keyed by the destination node's id (this node included).
    pub distances: BTreeMap<u32, u32>,
    /// `MemTotal` in bytes (0 on a memory-less node); includes the hugepage pools.
    pub memory_bytes: u64,
    /// Hugepage pools, ascending by page size; a size present with no pages is listed.
    pub hugepages: Vec<HugepagePool>,
}

/// The online CPUs of one physical core on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    /// `topology/core_id` of its first CPU, if readable (platform-specific, unique only within a
    /// package).
    pub core_id: Option<i64>,
    /// Its online logical CPUs (SMT siblings), ascending.
    pub cpus: Vec<u32>,
}

/// A hugepage pool of one page size on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugepagePool {
    /// Page size in bytes.
    pub page_size_bytes: u64,
    /// `nr_hugepages`.
    pub pages: u64,
    /// `pages × page_size_bytes`, checked to fit an `i64`.
    pub total_bytes: u64,
}

impl HugepagePool {
    /// The resource name: `hugepages-` + the page size as a binary-SI quantity (`hugepages-2Mi`).
    pub fn resource_name(&self) -> String {
        hugepages_resource_name(self.page_size_bytes)
    }
}

impl Machine {
    /// The node with this id.
    pub fn node(&self, id: u32) -> Option<&NumaNode> {
        self.nodes.binary_search_by_key(&id, |n| n.id).ok().map(|i| &self.nodes[i])
    }

    /// The NUMA node of a logical CPU; `None` for CPUs that are offline, unknown or negative
    /// (podresources reports CPU ids as `int64`).
    pub fn numa_of_cpu(&self, cpu: i64) -> Option<u32> {
        let cpu = u32::try_from(cpu).ok()?;
        self.nodes.iter().find(|n| n.cpus.binary_search(&cpu).is_ok()).map(|n| n.id)
    }

    /// Every online CPU with its NUMA node, for the accounting.
    pub fn cpu_to_numa(&self) -> BTreeMap<u32, u32> {
        self.nodes.iter().flat_map(|n| n.cpus.iter().map(move |&cpu| (cpu, n.id))).collect()
    }

    /// One more than the highest NUMA id: the smallest node count under which every id is a valid
    /// index. Equal to the number of nodes when ids are contiguous from 0; use it as the `nn` of
    /// the NUMA placement encoding so sparse ids stay encodable (see `numaplacement`).
    pub fn numa_id_bound(&self) -> u32 {
        self.nodes.last().map_or(0, |n| n.id.saturating_add(1))
    }
}
