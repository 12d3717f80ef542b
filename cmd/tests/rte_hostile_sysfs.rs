//! The real binary against a hostile sysfs tree: a FIFO where the kernel has a file must neither
//! hang a scan nor keep `rte` or `local` from stopping on SIGTERM; a one-off `rte` opens no
//! listener, and a running one serves the runtime's admin router on its metrics port.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{LOG_BOUND, Process, get, numaresources, poll, rte_alone, unpack_sysfs};

/// How long a process may take to exit after SIGTERM: far below the kubelet's 30 s grace
/// period, far above what a healthy exit takes (a fraction of a second).
const EXIT_BOUND: Duration = Duration::from_secs(10);

/// The 2-NUMA sysfs fixture with a FIFO at `fifo` (relative to `sys`).
fn sysfs_with_fifo(dir: &Path, fifo: &str) -> PathBuf {
    let sys = unpack_sysfs(dir);
    let path = sys.join(fifo);
    let _ = std::fs::remove_file(&path); // some files (cpu online) may be missing
    assert!(Command::new("mkfifo").arg(&path).status().unwrap().success());
    sys
}

/// Sends SIGTERM; the process must exit by itself within [`EXIT_BOUND`].
fn terminate(process: &mut Process) {
    let status = process.terminate(EXIT_BOUND);
    assert!(status.code().is_some(), "ended by a signal, not by itself: {status}");
}

#[test]
fn rte_reports_a_fifo_in_the_tree_and_stops_on_sigterm() {
    for fifo in
        ["devices/system/node/node0/meminfo", "devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"]
    {
        let dir = tempfile::tempdir().unwrap();
        let sys = sysfs_with_fifo(dir.path(), fifo);
        let mut rte = Process::spawn(&mut rte_alone(&sys, &["--metrics-mode=disabled", "--sleep-interval=1s"]));
        // The scan fails, naming the file, instead of waiting for a writer.
        rte.wait_for(&["refresh failed", fifo, "is a FIFO"]);
        terminate(&mut rte);
        assert!(rte.logged("agent stopped"), "{fifo}: {:#?}", rte.log());
    }
}

#[test]
fn local_with_a_fifo_in_the_tree_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs_with_fifo(&dir.path().join("machine"), "devices/system/cpu/cpu3/online");
    // An `online` file is optional: the FIFO is skipped and the machine published anyway.
    let mut local = Process::spawn(
        numaresources(&["local", "--secure-port=0", "--hostname=fixture-node", "--podresources-socket=none"])
            .args(["--kubelet-config=/nonexistent/config.yaml", "--sysfs"])
            .arg(&sys)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--kubeconfig")
            .arg(dir.path().join("kubeconfig")),
    );
    local.wait_for(&["published the node topology"]);
    terminate(&mut local);
}

#[test]
fn rte_oneshot_no_publish_opens_no_listener() {
    let dir = tempfile::tempdir().unwrap();
    let sys = unpack_sysfs(dir.path());
    // Hold the metrics port: an agent that binds it fails to start.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let flags = ["--oneshot", "--metrics-mode=http", "--metrics-address=127.0.0.1", &format!("--metrics-port={port}")];
    let out = rte_alone(&sys, &flags).output().unwrap();
    assert!(out.status.success(), "{}", support::stderr(&out));
}

#[test]
fn rte_serves_metrics_and_probes_on_its_metrics_port() {
    let dir = tempfile::tempdir().unwrap();
    let sys = unpack_sysfs(dir.path());
    // A port free a moment ago; the exporter binds it again.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let mut rte =
        Process::spawn(&mut rte_alone(&sys, &["--metrics-address=127.0.0.1", &format!("--metrics-port={port}")]));
    rte.wait_for(&["serving /healthz, /livez, /readyz and /metrics"]);
    assert_eq!(get(&address, "/livez"), (200, "ok".to_owned()));
    // Ready once the first topology is published (here: the dry run of --no-publish).
    let body = poll(LOG_BOUND, || {
        let (status, body) = get(&address, "/readyz?verbose");
        assert!(status == 200 || body.contains("[-]topology-published failed"), "{status} {body}");
        (status == 200).then_some(body.clone()).ok_or_else(|| format!("never ready: {body}"))
    });
    assert!(body.contains("[+]topology-published ok"), "{body}");
    let (status, metrics) = get(&address, "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("numaresources_rte_publishes_total{node=\"worker-0\"} 1"), "{metrics}");
    terminate(&mut rte);
}
