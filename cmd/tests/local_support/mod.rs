//! What the `local_*` and `kubectl_*` tests share: `numaresources local` serving a real sysfs
//! tree over TLS, and the real `kubectl` (installed by scripts/setup.sh where missing) against it.

#![allow(dead_code)] // each test binary uses part of it
#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Kills the server when the test ends, however it ends.
pub struct Server {
    child: Child,
    /// The kubeconfig `local` wrote for reaching it.
    pub kubeconfig: PathBuf,
    /// Every line the server logged so far.
    pub log: Arc<Mutex<Vec<String>>>,
    _state: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_from("kubectl", args)
    }

    /// Runs the kubectl binary at `program` against the server.
    pub fn kubectl_from(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
        Command::new(program)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("kubectl runs (scripts/setup.sh installs it)")
    }

    /// Waits (bounded) until the server has logged a line containing `needle`, and returns it.
    pub fn wait_for_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(line) = self.log.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            let log = self.log.lock().unwrap().clone();
            assert!(Instant::now() < deadline, "never logged {needle:?}: {log:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Unpacks a real machine's /sys (the exporter's fixtures) into `dir`.
pub fn unpack_sysfs(dir: &Path) -> PathBuf {
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rte/tests/fixtures/sysfs/intel-2numa-24cpu.tar.gz");
    let file = std::fs::File::open(&tarball).unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
    tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir).unwrap();
    dir.join("sys")
}

pub fn start() -> Server {
    start_with(&[])
}

pub fn start_with(extra: &[&str]) -> Server {
    let server = launch(extra, "/nonexistent/kubelet.sock");
    // Ready once the exporter has published the first scan.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = server.kubectl(&["get", "--raw", "/readyz"]);
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
    server
}

/// Starts `local` with the kubelet socket at `socket` and waits for its kubeconfig.
pub fn launch(extra: &[&str], socket: &str) -> Server {
    let state = tempfile::tempdir().unwrap();
    let sys = unpack_sysfs(&state.path().join("machine"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_numaresources"))
        .args(["local", "--secure-port", "0", "--hostname", "fixture-node", "--refresh-period", "1s"])
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
        })
        .env("NUMARESOURCES_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("the binary starts");
    // Wait for the log line naming the kubeconfig.
    let stderr = child.stderr.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    let log = Arc::new(Mutex::new(Vec::new()));
    let lines = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            lines.lock().unwrap().push(line.clone());
            if let Some(rest) = line.split("kubectl --kubeconfig ").nth(1) {
                let path = rest.split_whitespace().next().unwrap_or_default().to_owned();
                let _ = sender.send(path);
            }
        }
    });
    let kubeconfig = receiver.recv_timeout(Duration::from_secs(60)).expect("the server logged its kubeconfig");
    Server { child, kubeconfig: PathBuf::from(kubeconfig), log, _state: state }
}
