//! What [`super::Args::resolve`] reads besides the flags: environment variables, the host name
//! and files.

use std::io;
use std::path::{Path, PathBuf};

use numaresources_api::exporter::{CONFIG_DIR, CONFIG_FILE};

/// Where the operator mounts its ConfigMap's file; a missing file there is not an error.
pub fn default_operator_config() -> PathBuf {
    Path::new(CONFIG_DIR).join(CONFIG_FILE)
}

/// What [`super::Args::resolve`] reads besides the flags.
pub trait Environment {
    /// An environment variable, `None` when unset or not UTF-8.
    fn var(&self, name: &str) -> Option<String>;
    /// The machine's host name.
    fn host_name(&self) -> Option<String>;
    /// A file's contents.
    fn read_file(&self, path: &Path) -> io::Result<String>;
}

/// The process's environment and file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn host_name(&self) -> Option<String> {
        // Linux exposes it here; HOSTNAME is what shells export elsewhere.
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
    }

    fn read_file(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// No variable, no host name, no file: the flags alone.
#[derive(Debug, Clone, Copy)]
pub(super) struct Nothing;

impl Environment for Nothing {
    fn var(&self, _: &str) -> Option<String> {
        None
    }

    fn host_name(&self) -> Option<String> {
        None
    }

    fn read_file(&self, _: &Path) -> io::Result<String> {
        Err(io::ErrorKind::NotFound.into())
    }
}

/// Reads a YAML file; `Ok(None)` for a missing file that was not asked for explicitly, and for
/// an empty one.
pub(super) fn read_yaml<T: serde::de::DeserializeOwned>(
    env: &dyn Environment,
    path: &Path,
    required: bool,
) -> Result<Option<T>, String> {
    match env.read_file(path) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => {
            serde_norway::from_str(&text).map(Some).map_err(|e| format!("{}: not valid YAML: {e}", path.display()))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && !required => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// The first non-empty value of the variable `name`.
pub(super) fn non_empty_var(env: &dyn Environment, name: &str) -> Option<String> {
    env.var(name).filter(|v| !v.is_empty())
}
