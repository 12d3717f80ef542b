//! What the binary's tests share: `numaresources` as a child process (its log collected, stopped
//! by SIGTERM), kubeconfigs and the real `kubectl`, plain HTTP requests, and the fixtures.

#![allow(dead_code)] // each test binary uses part of it
#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

pub mod apiserver;
pub mod local;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_numaresources");
/// How long to wait for a log line, a listener or readiness before giving up.
pub const LOG_BOUND: Duration = Duration::from_secs(60);

/// `numaresources args`, logging at info without colours.
pub fn numaresources(args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command.args(args).env("NUMARESOURCES_LOG", "info").env("NO_COLOR", "1");
    command
}

/// `numaresources rte` on the machine at `sys` with neither a kubelet nor an API server (what it
/// would publish is only logged), plus `extra`.
pub fn rte_alone(sys: &Path, extra: &[&str]) -> Command {
    let mut command = numaresources(&["rte", "--no-publish", "--podresources-socket=none", "--hostname=worker-0"]);
    command.arg("--podreadiness=false").arg("--sysfs").arg(sys).args(extra);
    command
}

/// Runs `command` with `stdin` as its standard input, to completion.
pub fn output_with_stdin(command: &mut Command, stdin: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Calls `attempt` every 50 ms until it returns `Ok`, for at most `bound`; then panics with the
/// last error.
pub fn poll<T>(bound: Duration, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + bound;
    loop {
        match attempt() {
            Ok(value) => return value,
            Err(why) => assert!(Instant::now() < deadline, "{why}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running process whose output lines are collected; killed when dropped.
pub struct Process {
    pub child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Spawns `command`, collecting its standard error (its standard output is dropped).
    pub fn spawn(command: &mut Command) -> Self {
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("the process starts");
        let stderr = child.stderr.take().unwrap();
        Self { child, log: collect(stderr) }
    }

    /// Spawns `command`, collecting its standard output (its standard error is dropped).
    pub fn spawn_stdout(command: &mut Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("the process starts");
        let stdout = child.stdout.take().unwrap();
        Self { child, log: collect(stdout) }
    }

    /// Every line so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|line| line.contains(needle))
    }

    /// Waits (at most [`LOG_BOUND`]) for a line holding every one of `needles`, and returns it.
    pub fn wait_for(&self, needles: &[&str]) -> String {
        poll(LOG_BOUND, || {
            let log = self.log.lock().unwrap();
            let found = log.iter().find(|line| needles.iter().all(|needle| line.contains(needle)));
            found.cloned().ok_or_else(|| format!("never logged {needles:?}: {log:#?}"))
        })
    }

    /// Sends SIGTERM and waits (at most `bound`) for the process to exit.
    pub fn terminate(&mut self, bound: Duration) -> ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        poll(bound, || {
            let exited = self.child.try_wait().unwrap();
            exited.ok_or_else(|| format!("still running {bound:?} after SIGTERM: {:#?}", self.log.lock().unwrap()))
        })
    }
}

/// Collects each line of `stream` as it comes.
fn collect(stream: impl Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let lines = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            lines.lock().unwrap().push(line);
        }
    });
    log
}

/// The `address=` field of a log line.
pub fn address_in(line: &str) -> String {
    let field = line.split("address=").nth(1).unwrap_or_else(|| panic!("no address in {line:?}"));
    field.split_whitespace().next().unwrap_or_default().to_owned()
}

/// `kubectl` (the binary at `program`) with this kubeconfig (and a private discovery cache),
/// nothing from the environment.
pub fn kubectl_command(program: impl AsRef<OsStr>, kubeconfig: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", kubeconfig.with_extension("cache"))
        .env_remove("KUBERNETES_SERVICE_HOST");
    command
}

/// Runs kubectl to completion.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    kubectl_command("kubectl", kubeconfig, args).output().expect("kubectl runs (scripts/setup.sh installs it)")
}

/// Runs kubectl, which must succeed; returns its standard output.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(out.status.success(), "kubectl {args:?} failed: {}", stderr(&out));
    stdout(&out)
}

/// Runs kubectl, which must fail; returns its standard error.
pub fn kubectl_fails(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(!out.status.success(), "kubectl {args:?} succeeded: {}", stdout(&out));
    stderr(&out)
}

/// A kubeconfig for `server`, trusting `ca_file`, authenticating with `token`.
pub fn write_kubeconfig(path: &Path, server: &str, ca_file: &Path, token: &str) {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: nrt\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
         contexts:\n- name: nrt\n  context: {{cluster: nrt, user: nrt}}\ncurrent-context: nrt\n\
         users:\n- name: nrt\n  user: {{token: {token}}}\n",
        ca_file.display()
    );
    std::fs::write(path, text).expect("the kubeconfig is written");
}

/// A kubeconfig in `dir` naming a kube-apiserver nobody listens for.
pub fn unreachable_cluster(dir: &Path) -> PathBuf {
    let kubeconfig = dir.join("cluster.kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: gone\n  context: {cluster: gone, user: gone}\ncurrent-context: gone\nusers:\n- name: gone\n  user: {token: x}\n",
    )
    .unwrap();
    kubeconfig
}

/// One HTTP/1.1 exchange on `stream`: (status, body).
pub fn exchange(mut stream: impl Read + Write, request: &str) -> (u16, String) {
    stream.write_all(request.as_bytes()).unwrap();
    // Until the server closes (`Connection: close`); a TLS close without close_notify still
    // leaves the whole response read.
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let response = String::from_utf8_lossy(&bytes).into_owned();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

/// `GET path` over plain HTTP/1.1 at `address` (`host:port`).
pub fn get(address: &str, path: &str) -> (u16, String) {
    let stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchange(stream, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"))
}

/// Unpacks the rte crate's 2-NUMA sysfs fixture (a real machine's tree) into `dir`; returns its
/// `sys`.
pub fn unpack_sysfs(dir: &Path) -> PathBuf {
    let tarball = numaresources_rte::sysfs::machines::directory().join("intel-2numa-24cpu.tar.gz");
    let file = std::fs::File::open(&tarball).unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
    tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir).unwrap();
    dir.join("sys")
}

/// The path of a real NRT of a 2-NUMA worker (`worker-0`), for `kubectl -f`.
pub fn nrt_fixture() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/nrt/worker-0-2numa-v1alpha2.yaml").to_owned()
}
