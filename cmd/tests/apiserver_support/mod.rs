//! What the `apiserver_*` and `standalone_*` tests share: starting `numaresources apiserver` on a
//! free loopback port, following its log, and running the real `kubectl` against it.

#![allow(dead_code)] // each test binary uses part of it

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// A running `numaresources apiserver`, killed when dropped.
pub struct ApiServer {
    pub child: Child,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// Log lines up to the "serving HTTPS" one.
    pub startup_log: Vec<String>,
    /// Later log lines.
    pub log: Receiver<String>,
}

impl ApiServer {
    /// Starts `numaresources apiserver` on 127.0.0.1 with a free port, certificates generated
    /// into `dir/certs`, and `flags`; returns once it listens.
    pub fn start(dir: &Path, flags: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_numaresources"))
            .args(["apiserver", "--bind-address", "127.0.0.1", "--secure-port", "0"])
            .arg("--tls-cert-file")
            .arg(dir.join("missing.crt"))
            .arg("--tls-private-key-file")
            .arg(dir.join("missing.key"))
            .arg("--cert-dir")
            .arg(Self::cert_dir(dir))
            .args(flags)
            .env("NUMARESOURCES_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let log = follow(child.stderr.take().expect("piped stderr"));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut startup_log = Vec::new();
        let address = loop {
            let line = log
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("the server did not start: {startup_log:#?}"));
            let address = line.split("address=").nth(1).and_then(|a| a.split_whitespace().next()).map(str::to_owned);
            let serving = line.contains("serving HTTPS");
            startup_log.push(line);
            if serving && let Some(address) = address {
                break address;
            }
        };
        Self { child, url: format!("https://{address}"), startup_log, log }
    }

    /// Where [`ApiServer::start`] has the certificates generated.
    pub fn cert_dir(dir: &Path) -> PathBuf {
        dir.join("certs")
    }

    /// Sends SIGTERM and waits (at most 30 s) for a clean exit.
    pub fn stop(&mut self) {
        Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("waitable") {
                assert!(status.success(), "{status}");
                return;
            }
            assert!(Instant::now() < deadline, "did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Forwards each line of `stream` to the returned channel.
pub fn follow(stream: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// The first line containing `needle` within `timeout`; panics otherwise.
pub fn wait_for(lines: &Receiver<String>, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no line containing {needle:?} within {timeout:?}"));
        if line.contains(needle) {
            return line;
        }
    }
}

/// `kubectl` with this kubeconfig (and a private discovery cache), nothing from the environment.
pub fn kubectl_command(kubeconfig: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("kubectl");
    command
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", kubeconfig.with_extension("cache"))
        .env_remove("KUBERNETES_SERVICE_HOST");
    command
}

/// Runs kubectl to completion.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    kubectl_command(kubeconfig, args).output().expect("kubectl runs (scripts/setup.sh installs it)")
}

/// Runs kubectl, which must succeed; returns its standard output.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs kubectl, which must fail; returns its standard error.
pub fn kubectl_fails(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(!out.status.success(), "kubectl {args:?} succeeded: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
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
