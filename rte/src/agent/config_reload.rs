//! Configuration changes without a restart: the operator's ConfigMap (topology manager policy
//! and scope, pod and resource excludes) and the kubelet configuration file are followed on disk,
//! and a change is applied to the running agent, which rescans and publishes what changed.
//!
//! A ConfigMap volume is updated by the kubelet swapping a `..data` symlink, which a watch of the
//! file itself would miss; the certificates code already follows files that way, and this reuses
//! it ([`numaresources_runtime::tls::follow_files`]: directory events, debounced, plus a periodic poll).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use numaresources_runtime::tls::{CertificateWatcher, WatchOptions, follow_files};
use tokio::sync::Notify;

use crate::config::{Args, Config, default_operator_config};

/// The files a configuration is read from: the operator's ConfigMap file (`--config`, else the
/// default path when its directory is there: a mount appears at start, not later) and the
/// kubelet configuration file, when given.
pub(crate) fn followed_files(args: &Args) -> Vec<PathBuf> {
    let operator = match &args.config {
        Some(path) => Some(path.clone()),
        None => Some(default_operator_config()).filter(|p| p.parent().is_some_and(Path::is_dir)),
    };
    operator.into_iter().chain(args.kubelet_config_file.clone()).collect()
}

/// Follows `files`, waking `wake` after each change (or poll). `None` (with a warning) when
/// they cannot be followed; the agent then keeps the configuration it started with.
pub fn follow(files: &[PathBuf], wake: Arc<Notify>) -> Option<CertificateWatcher> {
    if files.is_empty() {
        return None;
    }
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    match follow_files(&paths, WatchOptions::default(), "the agent's configuration reload", move |_| wake.notify_one())
    {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            tracing::warn!(%error, "cannot follow the configuration files; changes need a restart");
            None
        }
    }
}

/// Applies to `running` what may change without a restart, from `fresh`; true when the
/// topology manager settings changed (logged).
pub fn apply(running: &mut Config, fresh: Config) -> bool {
    let changed = running.topology_manager != fresh.topology_manager;
    if changed {
        tracing::info!(
            policy = %fresh.topology_manager.policy,
            scope = %fresh.topology_manager.scope,
            "the topology manager configuration changed; publishing it"
        );
    }
    running.topology_manager = fresh.topology_manager;
    running.pod_excludes = fresh.pod_excludes;
    running.resource_excludes = fresh.resource_excludes;
    changed
}
