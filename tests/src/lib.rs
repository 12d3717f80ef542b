//! Helpers for the workspace integration tests in `tests/tests/`.

use std::path::{Path, PathBuf};

pub mod replicas;
pub mod served;
pub mod service;

/// The workspace root.
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new("."))
}

/// A file under `tests/fixtures/`.
pub fn fixture(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(relative)
}

/// The text of a file under `tests/fixtures/`.
pub fn read_fixture(relative: &str) -> String {
    let path = fixture(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
}
