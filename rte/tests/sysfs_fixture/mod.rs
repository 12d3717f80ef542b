//! Unpacks a sysfs snapshot of `tests/fixtures/sysfs/` (see the README there). Shared by the
//! tests and, through `#[path]`, the benches.

use std::path::{Path, PathBuf};

/// Unpacks fixture `name` into a temporary directory; returns it and its `sys/` root.
pub fn unpack(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(format!("{name}.tar.gz"));
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::open(&tarball).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir.path()).unwrap();
    let sys = dir.path().join("sys");
    (dir, sys)
}
