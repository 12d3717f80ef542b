//! The real binary against a hostile sysfs tree: a FIFO where the kernel has a file must neither
//! hang a scan nor keep `rte` or `local` from stopping on SIGTERM; a one-off `rte` opens no
//! listener, and a running one serves the runtime's admin router on its metrics port.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a process may take to exit after SIGTERM: far below the kubelet's 30 s grace
/// period, far above what a healthy exit takes (a fraction of a second).
const EXIT_BOUND: Duration = Duration::from_secs(10);
/// How long to wait for a log line before giving up.
const LOG_BOUND: Duration = Duration::from_secs(60);

/// Unpacks the rte crate's 2-NUMA sysfs fixture (a real machine's tree); returns its `sys`.
fn sysfs(dir: &Path) -> PathBuf {
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rte/tests/fixtures/sysfs/intel-2numa-24cpu.tar.gz");
    let file = std::fs::File::open(tarball).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir).unwrap();
    dir.join("sys")
}

/// [`sysfs`] with a FIFO at `fifo` (relative to `sys`).
fn sysfs_with_fifo(dir: &Path, fifo: &str) -> PathBuf {
    let sys = sysfs(dir);
    let path = sys.join(fifo);
    let _ = std::fs::remove_file(&path); // some files (cpu online) may be missing
    assert!(Command::new("mkfifo").arg(&path).status().unwrap().success());
    sys
}

/// A running process whose stderr lines are collected; killed when the test ends.
struct Running {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_numaresources"))
            .args(args)
            .env("NUMARESOURCES_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Self { child, log }
    }

    fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|line| line.contains(needle))
    }

    /// Waits (bounded) for a log line holding every one of `needles`.
    fn wait_for_log(&self, needles: &[&str]) {
        let deadline = Instant::now() + LOG_BOUND;
        while !self.log.lock().unwrap().iter().any(|line| needles.iter().all(|n| line.contains(n))) {
            assert!(Instant::now() < deadline, "never logged {needles:?}: {:#?}", self.log.lock().unwrap());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM and returns how long the process took to exit (failing past [`EXIT_BOUND`]).
    fn terminate(&mut self) -> Duration {
        let sent = Instant::now();
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.code().is_some(), "ended by a signal, not by itself: {status}");
                return sent.elapsed();
            }
            assert!(
                sent.elapsed() < EXIT_BOUND,
                "still running {EXIT_BOUND:?} after SIGTERM: {:#?}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn rte_reports_a_fifo_in_the_tree_and_stops_on_sigterm() {
    for fifo in
        ["devices/system/node/node0/meminfo", "devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"]
    {
        let dir = tempfile::tempdir().unwrap();
        let sys = sysfs_with_fifo(dir.path(), fifo);
        let mut rte = Running::start(&[
            "rte",
            "--no-publish",
            "--podresources-socket",
            "none",
            "--sysfs",
            sys.to_str().unwrap(),
            "--hostname",
            "worker-0",
            "--metrics-mode=disabled",
            "--podreadiness=false",
            "--sleep-interval",
            "1s",
        ]);
        // The scan fails, naming the file, instead of waiting for a writer.
        rte.wait_for_log(&["refresh failed", fifo, "is a FIFO"]);
        rte.terminate();
        assert!(rte.logged("agent stopped"), "{fifo}: {:#?}", rte.log.lock().unwrap());
    }
}

#[test]
fn local_with_a_fifo_in_the_tree_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs_with_fifo(&dir.path().join("machine"), "devices/system/cpu/cpu3/online");
    // An `online` file is optional: the FIFO is skipped and the machine published anyway.
    let state = dir.path().join("state");
    let kubeconfig = dir.path().join("kubeconfig");
    let mut local = Running::start(&[
        "local",
        "--secure-port",
        "0",
        "--hostname",
        "fixture-node",
        "--state-dir",
        state.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--sysfs",
        sys.to_str().unwrap(),
        "--podresources-socket",
        "none",
        "--kubelet-config",
        "/nonexistent/config.yaml",
    ]);
    local.wait_for_log(&["published the node topology"]);
    local.terminate();
}

#[test]
fn rte_oneshot_no_publish_opens_no_listener() {
    let dir = tempfile::tempdir().unwrap();
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rte/tests/fixtures/sysfs/intel-2numa-24cpu.tar.gz");
    tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(tarball).unwrap())).unpack(dir.path()).unwrap();
    // Hold the metrics port: an agent that binds it fails to start.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_numaresources"))
        .args(["rte", "--oneshot", "--no-publish", "--podresources-socket", "none", "--hostname", "worker-0"])
        .args(["--podreadiness=false", "--metrics-mode=http", "--metrics-address", "127.0.0.1", "--metrics-port"])
        .arg(&port)
        .arg("--sysfs")
        .arg(dir.path().join("sys"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `GET path` over plain HTTP/1.1: the status code and the body.
fn get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(LOG_BOUND)).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_default();
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

#[test]
fn rte_serves_metrics_and_probes_on_its_metrics_port() {
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path());
    // A port free a moment ago; the exporter binds it again.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut rte = Running::start(&[
        "rte",
        "--no-publish",
        "--podresources-socket=none",
        &format!("--sysfs={}", sys.display()),
        "--hostname=worker-0",
        "--podreadiness=false",
        "--metrics-address=127.0.0.1",
        &format!("--metrics-port={port}"),
    ]);
    rte.wait_for_log(&["serving /healthz, /livez, /readyz and /metrics"]);
    assert_eq!(get(port, "/livez"), (200, "ok".to_owned()));
    // Ready once the first topology is published (here: the dry run of --no-publish).
    let deadline = Instant::now() + LOG_BOUND;
    loop {
        let (status, body) = get(port, "/readyz?verbose");
        if status == 200 {
            assert!(body.contains("[+]topology-published ok"), "{body}");
            break;
        }
        assert!(body.contains("[-]topology-published failed"), "{status} {body}");
        assert!(Instant::now() < deadline, "never ready: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, metrics) = get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("numaresources_rte_publishes_total{node=\"worker-0\"} 1"), "{metrics}");
    rte.terminate();
}
