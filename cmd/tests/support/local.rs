//! `numaresources local` serving a real sysfs tree over TLS, for the `local_*`, `kubectl_*`,
//! `numa_*` and `monitoring_*` tests.

use std::path::PathBuf;
use std::process::Output;

use super::{LOG_BOUND, Process, numaresources, poll, unpack_sysfs};

/// A running `numaresources local`, killed when the test ends, however it ends.
pub struct Server {
    pub process: Process,
    /// The kubeconfig `local` wrote for reaching it.
    pub kubeconfig: PathBuf,
    _state: tempfile::TempDir,
}

impl Server {
    pub fn kubectl(&self, args: &[&str]) -> Output {
        super::kubectl(&self.kubeconfig, args)
    }

    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        super::kubectl_ok(&self.kubeconfig, args)
    }
}

pub fn start() -> Server {
    start_with(&[])
}

/// Starts `local` with `extra` flags and no kubelet; returns once the exporter has published the
/// first scan (the server is ready).
pub fn start_with(extra: &[&str]) -> Server {
    let server = launch(extra, "/nonexistent/kubelet.sock");
    poll(LOG_BOUND, || {
        let out = server.kubectl(&["get", "--raw", "/readyz"]);
        out.status.success().then_some(()).ok_or_else(|| format!("never ready: {}", super::stderr(&out)))
    });
    server
}

/// Starts `local` with the kubelet socket at `socket` and waits for its kubeconfig.
pub fn launch(extra: &[&str], socket: &str) -> Server {
    let state = tempfile::tempdir().unwrap();
    let sys = unpack_sysfs(&state.path().join("machine"));
    let process = Process::spawn(
        numaresources(&["local", "--secure-port", "0", "--hostname", "fixture-node", "--refresh-period", "1s"])
            .arg("--state-dir")
            .arg(state.path().join("local"))
            .arg("--sysfs")
            .arg(&sys)
            .arg("--kubeconfig")
            .arg(state.path().join("kubeconfig"))
            .args(extra)
            .args(["--podresources-socket", socket])
            .args(if extra.contains(&"--kubelet-config") {
                &[][..]
            } else {
                &["--kubelet-config", "/nonexistent/config.yaml"][..]
            }),
    );
    let line = process.wait_for(&["kubectl --kubeconfig "]);
    let kubeconfig = line.split("kubectl --kubeconfig ").nth(1).unwrap().split_whitespace().next().unwrap_or_default();
    Server { kubeconfig: PathBuf::from(kubeconfig), process, _state: state }
}
