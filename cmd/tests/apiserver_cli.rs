//! `numaresources apiserver` with kube-apiserver out of reach: it serves health, reports itself
//! not ready, refuses API requests with a Status (never anonymously serving data), and stops on
//! SIGTERM.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn kubectl(server: &str, args: &[&str]) -> Output {
    Command::new("kubectl")
        .args(["--server", server, "--insecure-skip-tls-verify", "--token", "not-a-real-token"])
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .output()
        .expect("kubectl runs (scripts/setup.sh installs it)")
}

#[test]
fn without_kube_apiserver_it_serves_health_but_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: gone\n  context: {cluster: gone, user: gone}\ncurrent-context: gone\nusers:\n- name: gone\n  user: {token: x}\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_numaresources"))
        .args([
            "apiserver",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            "0",
            "--authentication-config-refresh",
            "1s",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--tls-cert-file")
        .arg(dir.path().join("missing.crt"))
        .arg("--tls-private-key-file")
        .arg(dir.path().join("missing.key"))
        .arg("--cert-dir")
        .arg(dir.path().join("certs"))
        .env("NUMARESOURCES_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let address = loop {
        let line =
            receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("the server started");
        if line.contains("serving HTTPS") {
            break line.split("address=").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
        }
    };
    let server = format!("https://{address}");

    let health = kubectl(&server, &["get", "--raw", "/healthz"]);
    assert!(health.status.success(), "{}", String::from_utf8_lossy(&health.stderr));
    let ready = kubectl(&server, &["get", "--raw", "/readyz?verbose"]);
    assert!(!ready.status.success());
    let data = kubectl(&server, &["get", "--raw", "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"]);
    assert!(!data.status.success());
    let stderr = String::from_utf8_lossy(&data.stderr);
    assert!(stderr.contains("ServiceUnavailable") || stderr.contains("authentication configuration"), "{stderr}");

    // The log says why, with the kube-apiserver address.
    let mut why = false;
    while let Ok(line) = receiver.recv_timeout(Duration::from_secs(5)) {
        if line.contains("extension-apiserver-authentication") {
            why = true;
            break;
        }
    }
    assert!(why, "the log names the ConfigMap it could not read");

    // SIGTERM stops it promptly and cleanly.
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    }
}
