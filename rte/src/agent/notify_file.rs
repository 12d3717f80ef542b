//! The notify file: something on the node (historically a CRI-O hook) touches it when containers
//! start or stop, and each touch asks for a scan.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;

/// Why the notify file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifyFileError {
    /// The path has no parent directory or file name.
    #[error("notify file {}: not a file path", .0.display())]
    NotAFile(PathBuf),
    /// It exists but is a directory, socket, …
    #[error("notify file {}: exists and is not a regular file", .0.display())]
    NotRegular(PathBuf),
    /// It exists with content: not ours, and truncating it could destroy someone's data.
    #[error("notify file {}: exists and is not empty ({} bytes); refusing to use it", .0.display(), .1)]
    NotEmpty(PathBuf, u64),
    /// Creating or inspecting it failed.
    #[error("notify file {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The watch could not be set up.
    #[error("watching notify file {}: {source}", path.display())]
    Watch {
        /// The path.
        path: PathBuf,
        /// What notify said.
        #[source]
        source: notify::Error,
    },
}

/// Makes sure `path` is an empty regular file, creating its directory (mode 0750) and the file
/// when missing.
pub fn prepare(path: &Path) -> Result<(), NotifyFileError> {
    let io_error = |source| NotifyFileError::Io { path: path.to_path_buf(), source };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if path.file_name().is_none() {
        return Err(NotifyFileError::NotAFile(path.to_path_buf()));
    }
    if !dir.exists() {
        fs::DirBuilder::new().recursive(true).mode(0o750).create(dir).map_err(io_error)?;
        // The umask may have narrowed it; set what upstream sets.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o750)).map_err(io_error)?;
    }
    match fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Err(NotifyFileError::NotRegular(path.to_path_buf())),
        Ok(meta) if meta.len() > 0 => Err(NotifyFileError::NotEmpty(path.to_path_buf(), meta.len())),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::OpenOptions::new().write(true).create_new(true).open(path).map(drop).map_err(io_error)
        }
        Err(e) => Err(io_error(e)),
    }
}

/// True for the events that mean "touched": a write, a metadata change (touch, chmod), a
/// close after writing, or the file being created again.
fn is_touch(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Modify(_) | EventKind::Create(_) | EventKind::Access(AccessKind::Close(AccessMode::Write))
    )
}

/// Watches `path` (which [`prepare`] made); each touch wakes `wake`. Bursts coalesce in
/// `Notify`'s single permit. The watch lives as long as the returned watcher.
pub fn watch(path: &Path, wake: Arc<Notify>) -> Result<RecommendedWatcher, NotifyFileError> {
    let watch_error = |source| NotifyFileError::Watch { path: path.to_path_buf(), source };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    let file_name =
        path.file_name().map(ToOwned::to_owned).ok_or_else(|| NotifyFileError::NotAFile(path.to_path_buf()))?;
    // The directory is watched rather than the file, so a file replaced by rename still counts.
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
        Ok(event)
            if is_touch(&event.kind) && event.paths.iter().any(|p| p.file_name() == Some(file_name.as_os_str())) =>
        {
            wake.notify_one();
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "notify file watch error"),
    })
    .map_err(watch_error)?;
    watcher.watch(&dir, RecursiveMode::NonRecursive).map_err(watch_error)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_and_directory_are_created_empty_with_mode_0750() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("run/rte/notify");
        prepare(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        let mode = fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
        prepare(&path).unwrap();
    }

    #[test]
    fn a_non_empty_or_non_regular_file_is_refused() {
        let temp = tempfile::tempdir().unwrap();
        let full = temp.path().join("full");
        fs::write(&full, "data").unwrap();
        let error = prepare(&full).unwrap_err();
        assert!(matches!(error, NotifyFileError::NotEmpty(_, 4)), "{error}");
        assert!(error.to_string().contains("not empty"));
        assert!(matches!(prepare(temp.path()).unwrap_err(), NotifyFileError::NotRegular(_)));
        assert_eq!(fs::read_to_string(&full).unwrap(), "data", "left alone");
    }
}
