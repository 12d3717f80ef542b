//! Three real machines' `/sys` and `/proc` snapshots, compressed (see `rte/machines/README.md`
//! for where they come from): the exporter's tests run discovery on them, and
//! `numaresources local --simulate-nodes` builds its synthetic fleet from them, embedded so the
//! binary needs no files at run time. Each tarball unpacks to `sys/` and `proc/`.

/// A dual-socket Intel server: 2 NUMA nodes, 12 CPUs each.
pub const INTEL_2NUMA_24CPU: &[u8] = include_bytes!("../../machines/intel-2numa-24cpu.tar.gz");
/// One NUMA node, 8 CPUs, an empty 2Mi pool.
pub const AMD64_1NUMA_NVIDIA: &[u8] = include_bytes!("../../machines/amd64-1numa-nvidia.tar.gz");
/// One NUMA node listing CPUs 0-3, of which 2 and 3 are offline.
pub const AMD64_OFFLINE_CPUS: &[u8] = include_bytes!("../../machines/amd64-offline-cpus.tar.gz");

/// The directory holding the tarballs, `<name>.tar.gz` each, for tests that open them by name.
pub fn directory() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("machines")
}
