//! `numaresources apiserver` with kube-apiserver out of reach: it serves health, reports itself
//! not ready, refuses API requests with a Status (never anonymously serving data), and stops on
//! SIGTERM. A `--client-ca-file` alone does not turn it into the standalone server.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::apiserver::ApiServer;
use support::{kubectl, stderr, unreachable_cluster, write_kubeconfig};

/// Starts the server delegating to an unreachable cluster, plus `flags`; returns it and a
/// kubeconfig for talking to it with a token nobody can review.
fn start_delegating(dir: &Path, flags: &[&str]) -> (ApiServer, PathBuf) {
    let cluster = unreachable_cluster(dir);
    let mut all = vec!["--authentication-config-refresh", "1s", "--kubeconfig", cluster.to_str().unwrap()];
    all.extend_from_slice(flags);
    let server = ApiServer::start(dir, &all);
    let client = dir.join("client.kubeconfig");
    write_kubeconfig(&client, &server.url, &ApiServer::cert_dir(dir).join("apiserver.crt"), "not-a-real-token");
    (server, client)
}

/// No data is served: kube-apiserver's authentication settings never load.
fn assert_no_data(client: &Path) {
    let data = kubectl(client, &["get", "--raw", "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"]);
    assert!(!data.status.success());
    let stderr = stderr(&data);
    assert!(stderr.contains("ServiceUnavailable") || stderr.contains("authentication configuration"), "{stderr}");
}

#[test]
fn without_kube_apiserver_it_serves_health_but_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, client) = start_delegating(dir.path(), &[]);

    let health = kubectl(&client, &["get", "--raw", "/healthz"]);
    assert!(health.status.success(), "{}", stderr(&health));
    let ready = kubectl(&client, &["get", "--raw", "/readyz?verbose"]);
    assert!(!ready.status.success());
    assert_no_data(&client);

    // The log says why, with the kube-apiserver address.
    server.process.wait_for(&["extension-apiserver-authentication"]);

    server.stop();
}

#[test]
fn a_client_ca_alone_keeps_delegated_authorization() {
    let dir = tempfile::tempdir().unwrap();
    let ca = numaresources_runtime::tls::CertificateAuthority::generate("clients", Duration::from_secs(3600)).unwrap();
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let (server, client) = start_delegating(dir.path(), &["--client-ca-file", ca_file.to_str().unwrap()]);

    // Delegated: nothing is served until kube-apiserver's settings load (standalone would have
    // answered 401 for the unknown token at once).
    assert_no_data(&client);
    let standalone = server.process.logged("standalone mode");
    assert!(!standalone, "the permissive standalone authorizer was not chosen: {:#?}", server.process.log());
}
