//! The real sysfs tree the agent tests read (a two-NUMA, 24-CPU Intel machine, copied into
//! `rte/tests/fixtures/sysfs/`). Shared by test binaries with `mod sysfs_fixture;`.

use std::fs;
use std::path::{Path, PathBuf};

/// Unpacks the tree under `dir/machine`; returns its `sys` directory.
pub fn unpack_intel_2numa_24cpu(dir: &Path) -> PathBuf {
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rte/tests/fixtures/sysfs/intel-2numa-24cpu.tar.gz");
    let file = fs::File::open(&tarball).unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
    let machine = dir.join("machine");
    tar::Archive::new(flate2::read::GzDecoder::new(file))
        .unpack(&machine)
        .unwrap_or_else(|e| panic!("unpacking {}: {e}", tarball.display()));
    machine.join("sys")
}
