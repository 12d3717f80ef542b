//! Configuration changes without a restart, end to end: the operator's ConfigMap mounted the way
//! the kubelet mounts it (`config.yaml` → `..data/config.yaml`, `..data` → a timestamped
//! directory, swapped by renaming a new symlink over `..data`), the agent's run loop over a real
//! sysfs tree, and the new topology manager policy published without a restart.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

mod support;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use numaresources_rte::agent::Agent;
use numaresources_rte::config::{Args, Interval, Kubelet, MetricsMode};
use numaresources_rte::podresources::PodResourcesClient;
use support::{Told, bounded};
use tokio::sync::mpsc;

/// Writes a new version of the mounted ConfigMap as the kubelet does: a new timestamped
/// directory, a new `..data` symlink renamed over the old one.
fn publish_configmap(mount: &Path, version: u32, policy: &str) {
    let dir = mount.join(format!("..2026_11_25_{version}"));
    fs::create_dir(&dir).unwrap();
    fs::write(
        dir.join("config.yaml"),
        format!("kubelet:\n  topologyManagerPolicy: {policy}\n  topologyManagerScope: pod\n"),
    )
    .unwrap();
    let staged = mount.join("..data_tmp");
    symlink(dir.file_name().unwrap(), &staged).unwrap();
    fs::rename(&staged, mount.join("..data")).unwrap();
    if !mount.join("config.yaml").exists() {
        symlink("..data/config.yaml", mount.join("config.yaml")).unwrap();
    }
}

#[tokio::test]
async fn a_changed_configmap_policy_is_published_without_a_restart() {
    let (dir, sys) = support::unpack("intel-2numa-24cpu");
    let mount = dir.path().join("rte-config");
    fs::create_dir(&mount).unwrap();
    publish_configmap(&mount, 1, "restricted");

    let args = Args {
        hostname: Some("worker-0".into()),
        sysfs: sys,
        podresources_socket: Kubelet(None),
        config: Some(mount.join("config.yaml")),
        sleep_interval: Interval(None),
        heartbeat: Interval(None),
        podresources_poll_interval: Interval(None),
        metrics_mode: MetricsMode::Disabled,
        ..Args::default()
    };
    let config = args.resolve().unwrap();
    let (tell, mut told) = mpsc::unbounded_channel();
    let agent = Agent::new(config, None::<PodResourcesClient>, Told(tell)).with_config_reload();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent.run(async move { drop(stopped.await) }));

    let first = bounded("the first publish", told.recv()).await.unwrap();
    assert_eq!(first.attribute("topologyManagerPolicy"), Some("restricted"));
    assert_eq!(first.attribute("topologyManagerScope"), Some("pod"));

    publish_configmap(&mount, 2, "single-numa-node");
    let changed = bounded("the publish after the swap", told.recv()).await.unwrap();
    assert_eq!(changed.attribute("topologyManagerPolicy"), Some("single-numa-node"));

    // A version that does not resolve keeps the running configuration, and publishes nothing.
    publish_configmap(&mount, 3, "numa-please");
    publish_configmap(&mount, 4, "best-effort");
    let last = bounded("the publish after the next valid swap", told.recv()).await.unwrap();
    assert_eq!(last.attribute("topologyManagerPolicy"), Some("best-effort"));

    stop.send(()).unwrap();
    bounded("the agent stops", running).await.unwrap().unwrap();
}
