//! The optional fingerprint status dump: after each scan, what was computed from which pods, as
//! JSON, for people debugging a scheduler that never resyncs a node.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use numaresources_api::fingerprint::NamespacedName;
use serde::Serialize;

/// The status record: `{"fingerprintExpected"?, "fingerprintComputed", "pods", "nodeName"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The signature the other side expects; left out of the JSON when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fingerprint_expected: String,
    /// Our signature.
    pub fingerprint_computed: String,
    /// The pods it was computed from (written as `[]` when empty, where Go would write `null`).
    pub pods: Vec<NamespacedName>,
    /// The node.
    pub node_name: String,
}

/// Why the status file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The path has no file name to derive the temporary file from.
    #[error("{}: not a file path", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
    },
    /// Writing, syncing or renaming failed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
}

/// Writes `status` to `path` atomically: the JSON goes to `__<name>` in the same directory, is
/// synced, then renamed over `path`, so a reader sees the old record or the new one, never half.
pub(crate) fn write_status_file(path: &Path, status: &Status) -> Result<(), StatusError> {
    let name = path.file_name().ok_or_else(|| StatusError::NotAFile { path: path.to_path_buf() })?;
    let mut temp_name = std::ffi::OsString::from("__");
    temp_name.push(name);
    let temp = path.with_file_name(temp_name);
    // Serializing plain strings cannot fail; an error here would be a serde bug.
    let json = serde_json::to_vec(status).map_err(|e| StatusError::Write { path: temp.clone(), source: e.into() })?;
    let write = |temp: &Path| -> io::Result<()> {
        let mut file = fs::File::create(temp)?;
        file.write_all(&json)?;
        file.sync_all()
    };
    if let Err(source) = write(&temp) {
        let _ = fs::remove_file(&temp);
        return Err(StatusError::Write { path: temp, source });
    }
    fs::rename(&temp, path).map_err(|source| StatusError::Write { path: path.to_path_buf(), source })
}
