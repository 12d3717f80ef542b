//! The I/O half of discovery: walking the trees and parsing what the kernel writes.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{
    CPU_LIMIT, Core, DIRECTORY_ENTRY_LIMIT, Discovery, Error, FILE_SIZE_LIMIT, HugepagePool, LOCAL_DISTANCE, Layout,
    Machine, NumaNode, Sysfs,
};

/// How much of a garbled file an error quotes.
const QUOTE_LIMIT: usize = 64;
/// The most CPUs a CPU list may expand to (the kernel's `NR_CPUS` tops out at 8192).
const CPU_LIST_LIMIT: usize = 1 << 16;

pub(super) fn discover(fs: &Sysfs) -> Result<Discovery, Error> {
    let mut skipped = Vec::new();
    let node_dir = fs.sys.join("devices/system/node");
    let machine = match fs::read_dir(&node_dir) {
        Ok(entries) => numa_machine(fs, &node_dir, entries, &mut skipped)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => flat_machine(fs, &mut skipped)?,
        Err(source) => return Err(Error::Read { path: node_dir, source }),
    };
    Ok(Discovery { machine, skipped })
}

fn numa_machine(fs: &Sysfs, node_dir: &Path, entries: fs::ReadDir, skipped: &mut Vec<Error>) -> Result<Machine, Error> {
    let mut ids = Vec::new();
    for entry in bounded(node_dir, entries) {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with("node") {
            continue; // online, possible, has_cpu, power, …
        }
        let id = parse_index(&name, "node")
            .ok_or_else(|| Error::MalformedName { path: entry.path(), expected: "node<N>" })?;
        ids.push(id);
    }
    if ids.is_empty() {
        return Err(Error::NoNodes { path: node_dir.to_path_buf() });
    }
    ids.sort_unstable();
    // Every node's distance row is read before any is checked against the node count, so a
    // directory that is no node (no `distance`) is reported as itself, not as a wrong count in
    // the row of a sibling read before it.
    let rows = ids
        .iter()
        .map(|id| distance_row(&node_dir.join(format!("node{id}/distance"))))
        .collect::<Result<Vec<_>, _>>()?;

    let mut owner: BTreeMap<u32, u32> = BTreeMap::new();
    let mut nodes = Vec::with_capacity(ids.len());
    for (&id, row) in ids.iter().zip(rows) {
        let dir = node_dir.join(format!("node{id}"));
        let cpus = node_cpus(fs, &dir, skipped)?;
        for &cpu in &cpus {
            if let Some(&first) = owner.get(&cpu) {
                return Err(Error::CpuInTwoNodes { path: dir.join(format!("cpu{cpu}")), cpu, first });
            }
            owner.insert(cpu, id);
        }
        if owner.len() > CPU_LIMIT {
            return Err(Error::TooMany { path: node_dir.to_path_buf(), what: "CPUs", limit: CPU_LIMIT });
        }
        let cores = cores(fs, &cpus, skipped);
        let distances = distances(&dir.join("distance"), row, &ids)?;
        let memory_bytes = mem_total_bytes(&dir.join("meminfo"))?;
        let hugepages = hugepage_pools(&dir.join("hugepages"), skipped)?;
        nodes.push(NumaNode { id, cpus, cores, distances, memory_bytes, hugepages });
    }
    Ok(Machine { layout: Layout::Numa, nodes })
}

/// No node directory: one node 0 with every online CPU, `/proc/meminfo` and the global pools.
fn flat_machine(fs: &Sysfs, skipped: &mut Vec<Error>) -> Result<Machine, Error> {
    let cpu_dir = fs.sys.join("devices/system/cpu");
    let entries = fs::read_dir(&cpu_dir).map_err(|source| Error::Read { path: cpu_dir.clone(), source })?;
    let mut cpus = Vec::new();
    for entry in bounded(&cpu_dir, entries) {
        let entry = entry?;
        // cpufreq, cpuidle, smt, … are not CPUs and are no error either; neither is anything
        // that is not a plain directory.
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if let Some(cpu) = parse_index(&entry.file_name().to_string_lossy(), "cpu").filter(|_| is_dir)
            && cpu_online(&cpu_dir.join(format!("cpu{cpu}")), skipped)
        {
            cpus.push(cpu);
            if cpus.len() > CPU_LIMIT {
                return Err(Error::TooMany { path: cpu_dir.clone(), what: "CPUs", limit: CPU_LIMIT });
            }
        }
    }
    cpus.sort_unstable();
    let cores = cores(fs, &cpus, skipped);
    let node = NumaNode {
        id: 0,
        cores,
        cpus,
        distances: BTreeMap::from([(0, LOCAL_DISTANCE)]),
        memory_bytes: mem_total_bytes(&fs.proc.join("meminfo"))?,
        hugepages: hugepage_pools(&fs.sys.join("kernel/mm/hugepages"), skipped)?,
    };
    Ok(Machine { layout: Layout::NoNumaDirectory, nodes: vec![node] })
}

/// The online CPUs listed in a node directory, ascending. An entry counts only when its CPU
/// directory `devices/system/cpu/cpu<X>` is a plain directory, as the kernel makes it.
fn node_cpus(fs: &Sysfs, node: &Path, skipped: &mut Vec<Error>) -> Result<Vec<u32>, Error> {
    let entries = fs::read_dir(node).map_err(|source| Error::Read { path: node.to_path_buf(), source })?;
    let cpu_dir = fs.sys.join("devices/system/cpu");
    let mut cpus = Vec::new();
    for entry in bounded(node, entries) {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with("cpu") || name == "cpulist" || name == "cpumap" {
            continue;
        }
        let Some(cpu) = parse_index(&name, "cpu") else {
            skipped.push(Error::MalformedName { path: entry.path(), expected: "cpu<X>" });
            continue;
        };
        let this_cpu = cpu_dir.join(format!("cpu{cpu}"));
        if !fs::symlink_metadata(&this_cpu).is_ok_and(|m| m.is_dir()) {
            skipped.push(Error::NotACpu { path: entry.path(), cpu_dir: this_cpu });
            continue;
        }
        if cpu_online(&this_cpu, skipped) {
            cpus.push(cpu);
            if cpus.len() > CPU_LIMIT {
                return Err(Error::TooMany { path: node.to_path_buf(), what: "CPUs", limit: CPU_LIMIT });
            }
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// A CPU is online unless its `online` file says `0`; no file means online (`cpu0` usually has
/// none), and so does a file we cannot make sense of (upstream reads it as "not 0").
fn cpu_online(cpu_dir: &Path, skipped: &mut Vec<Error>) -> bool {
    let path = cpu_dir.join("online");
    match read_optional(&path) {
        Ok(None) => true,
        Ok(Some(text)) => match text.trim().parse::<i64>() {
            Ok(value) => value != 0,
            Err(_) => {
                skipped.push(malformed(&path, &text, "0 or 1"));
                true
            }
        },
        Err(e) => {
            skipped.push(e);
            true
        }
    }
}

/// How CPUs are told apart into cores: by their sibling list, or alone when it is unknown.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum CoreKey {
    Siblings(Vec<u32>),
    Alone(u32),
}

/// Groups `cpus` (ascending) into cores, ascending by first CPU.
fn cores(fs: &Sysfs, cpus: &[u32], skipped: &mut Vec<Error>) -> Vec<Core> {
    let cpu_dir = fs.sys.join("devices/system/cpu");
    let mut groups: BTreeMap<CoreKey, Vec<u32>> = BTreeMap::new();
    for &cpu in cpus {
        let topology = cpu_dir.join(format!("cpu{cpu}/topology"));
        let path = topology.join("thread_siblings_list");
        let key = match read_optional(&path) {
            Ok(None) => CoreKey::Alone(cpu),
            Ok(Some(text)) => match parse_cpu_list(&text) {
                Some(siblings) if siblings.binary_search(&cpu).is_ok() => CoreKey::Siblings(siblings),
                _ => {
                    skipped.push(malformed(&path, &text, "a CPU list holding the CPU itself"));
                    CoreKey::Alone(cpu)
                }
            },
            Err(e) => {
                skipped.push(e);
                CoreKey::Alone(cpu)
            }
        };
        groups.entry(key).or_default().push(cpu);
    }
    let mut cores: Vec<Core> = groups
        .into_values()
        .map(|cpus| {
            let core_id = cpus.first().and_then(|&first| core_id(&cpu_dir, first, skipped));
            Core { core_id, cpus }
        })
        .collect();
    cores.sort_by_key(|core| core.cpus.first().copied());
    cores
}

fn core_id(cpu_dir: &Path, cpu: u32, skipped: &mut Vec<Error>) -> Option<i64> {
    let path = cpu_dir.join(format!("cpu{cpu}/topology/core_id"));
    match read_optional(&path) {
        Ok(None) => None,
        Ok(Some(text)) => {
            let id = text.trim().parse().ok();
            if id.is_none() {
                skipped.push(malformed(&path, &text, "a core id"));
            }
            id
        }
        Err(e) => {
            skipped.push(e);
            None
        }
    }
}

/// The numbers of a `distance` file.
fn distance_row(path: &Path) -> Result<Vec<u32>, Error> {
    let text = read_small(path)?;
    text.split_whitespace()
        .map(|word| word.parse().map_err(|_| malformed(path, &text, "a list of distances")))
        .collect()
}

/// A `distance` row (of the file at `path`): position k is the k-th smallest id of the nodes
/// present.
fn distances(path: &Path, values: Vec<u32>, ids: &[u32]) -> Result<BTreeMap<u32, u32>, Error> {
    if values.len() != ids.len() {
        return Err(Error::DistanceCount { path: path.to_path_buf(), found: values.len(), nodes: ids.len() });
    }
    Ok(ids.iter().copied().zip(values).collect())
}

/// `MemTotal` of a `meminfo` file (node or `/proc`), in bytes.
fn mem_total_bytes(path: &Path) -> Result<u64, Error> {
    let text = read_small(path)?;
    let kib = parse_mem_total_kib(&text).ok_or_else(|| malformed(path, &text, "a meminfo with a MemTotal line"))?;
    to_bytes(kib, 1024, path, "MemTotal")
}

/// Finds `MemTotal: <n> kB`, with or without the `Node <N> ` prefix of per-node files.
pub(super) fn parse_mem_total_kib(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace().skip_while(|w| *w != "MemTotal:");
        words.next()?;
        let value = words.next().and_then(|w| w.parse().ok());
        match words.next() {
            None | Some("kB") => Some(value),
            Some(_) => Some(None),
        }
    })?
}

/// The pools of a `hugepages/` directory; a missing directory has none.
fn hugepage_pools(dir: &Path, skipped: &mut Vec<Error>) -> Result<Vec<HugepagePool>, Error> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::Read { path: dir.to_path_buf(), source }),
    };
    let mut pools = Vec::new();
    for entry in bounded(dir, entries) {
        let entry = entry?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(|source| Error::Read { path: path.clone(), source })?;
        if file_type.is_symlink() {
            match stays_inside(&path, dir) {
                Ok(true) if path.is_dir() => {}
                Ok(true) => continue,
                Ok(false) => {
                    skipped.push(Error::OutsideTree { path, dir: dir.to_path_buf() });
                    continue;
                }
                Err(e) => {
                    skipped.push(e);
                    continue;
                }
            }
        } else if !file_type.is_dir() {
            continue;
        }
        let kib = parse_hugepages_dir_name(&entry.file_name().to_string_lossy())
            .ok_or_else(|| Error::MalformedName { path: path.clone(), expected: "hugepages-<size>kB" })?;
        let page_size_bytes = to_bytes(kib, 1024, &path, "the page size")?;
        let nr_path = path.join("nr_hugepages");
        let text = read_small(&nr_path)?;
        let pages: u64 = text.trim().parse().map_err(|_| malformed(&nr_path, &text, "a page count"))?;
        let total_bytes = to_bytes(pages, page_size_bytes, &nr_path, "the pool size")?;
        pools.push(HugepagePool { page_size_bytes, pages, total_bytes });
    }
    pools.sort_by_key(|pool| pool.page_size_bytes);
    Ok(pools)
}

fn stays_inside(link: &Path, dir: &Path) -> Result<bool, Error> {
    let target = fs::canonicalize(link).map_err(|source| Error::Read { path: link.to_path_buf(), source })?;
    let dir = fs::canonicalize(dir).map_err(|source| Error::Read { path: dir.to_path_buf(), source })?;
    Ok(target.starts_with(dir))
}

/// `hugepages-<size>kB` → size in kB (non-zero).
pub(super) fn parse_hugepages_dir_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
    parse_decimal(digits).filter(|&kib| kib > 0)
}

/// `a × b` as bytes that fit a quantity (`i64`).
fn to_bytes(a: u64, b: u64, path: &Path, what: &'static str) -> Result<u64, Error> {
    a.checked_mul(b)
        .filter(|&bytes| i64::try_from(bytes).is_ok())
        .ok_or_else(|| Error::Overflow { path: path.to_path_buf(), what })
}

/// `<prefix><N>` with `N` in canonical decimal (no sign, no leading zero) → `N`.
pub(super) fn parse_index(name: &str, prefix: &str) -> Option<u32> {
    let value = parse_decimal(name.strip_prefix(prefix)?)?;
    u32::try_from(value).ok()
}

/// Canonical unsigned decimal: digits only, no leading zero except `0` itself.
fn parse_decimal(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}

/// The kernel's CPU list format (`0,2,4-7`), ascending and deduplicated; `None` for garbage.
pub(super) fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Some(cpus);
    }
    for item in text.split(',') {
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let cpu = item.parse::<u32>().ok()?;
                (cpu, cpu)
            }
        };
        if first > last || cpus.len() + (last - first) as usize >= CPU_LIST_LIMIT {
            return None;
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// Reads a small file as text (garbage bytes become U+FFFD and then fail to parse).
fn read_small(path: &Path) -> Result<String, Error> {
    read_optional(path)?.ok_or_else(|| Error::Read { path: path.to_path_buf(), source: io::ErrorKind::NotFound.into() })
}

/// Like [`read_small`], with `None` for a file that does not exist.
///
/// The file is opened non-blocking (opening a FIFO would otherwise wait for a writer) and its
/// type is checked on the open descriptor, so what is read is the regular file that was checked.
/// At most [`FILE_SIZE_LIMIT`] bytes are read; a longer file is [`Error::TooLarge`].
fn read_optional(path: &Path) -> Result<Option<String>, Error> {
    let read_error = |source| Error::Read { path: path.to_path_buf(), source };
    let file = match fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(read_error(source)),
    };
    let file_type = file.metadata().map_err(read_error)?.file_type();
    if !file_type.is_file() {
        return Err(Error::NotRegular { path: path.to_path_buf(), found: describe(file_type) });
    }
    let mut bytes = Vec::new();
    file.take(FILE_SIZE_LIMIT + 1).read_to_end(&mut bytes).map_err(read_error)?;
    if bytes.len() as u64 > FILE_SIZE_LIMIT {
        return Err(Error::TooLarge { path: path.to_path_buf(), limit: FILE_SIZE_LIMIT });
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// What a file that is not a regular file is, for an error message.
fn describe(file_type: fs::FileType) -> &'static str {
    if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_dir() {
        "directory"
    } else {
        "special file"
    }
}

/// The entries of a directory, at most [`DIRECTORY_ENTRY_LIMIT`] of them (then an error).
fn bounded(dir: &Path, entries: fs::ReadDir) -> impl Iterator<Item = Result<fs::DirEntry, Error>> + '_ {
    entries.enumerate().map(move |(index, entry)| {
        if index >= DIRECTORY_ENTRY_LIMIT {
            return Err(Error::TooMany {
                path: dir.to_path_buf(),
                what: "directory entries",
                limit: DIRECTORY_ENTRY_LIMIT,
            });
        }
        entry.map_err(|source| Error::Read { path: dir.to_path_buf(), source })
    })
}

fn malformed(path: &Path, text: &str, expected: &'static str) -> Error {
    let trimmed = text.trim();
    let content = match trimmed.char_indices().nth(QUOTE_LIMIT) {
        Some((end, _)) => format!("{}…", &trimmed[..end]),
        None => trimmed.to_owned(),
    };
    Error::Malformed { path: PathBuf::from(path), content, expected }
}
