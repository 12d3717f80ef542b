//! `numaresources webhook` with kube-apiserver out of reach: it generates its certificate, serves
//! the webhook over TLS and health over plain HTTP, reports itself not ready, admits pods
//! unchanged until its caches sync, and stops on SIGTERM.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use support::{Process, address_in, exchange, get, unreachable_cluster};

const POD_REVIEW: &str = include_str!("../../webhook/tests/fixtures/admission/pod-create-guaranteed-integral.json");

fn post_tls(address: &str, certificate_pem: &[u8], path: &str, body: &str) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(certificate_pem).unwrap()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connection =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap()).unwrap();
    let tcp = TcpStream::connect(address).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!(
        "POST {path}?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(rustls::StreamOwned::new(connection, tcp), &request)
}

#[test]
fn without_kube_apiserver_it_serves_but_routes_nothing_and_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_cluster(dir.path());
    let cert_dir = dir.path().join("certs");
    let mut webhook = Process::spawn(
        support::numaresources(&["webhook"])
            // Every option through its environment variable, as a Deployment may set them.
            .env("NUMARESOURCES_WEBHOOK_BIND_ADDRESS", "127.0.0.1")
            .env("NUMARESOURCES_WEBHOOK_SECURE_PORT", "0")
            .env("NUMARESOURCES_WEBHOOK_HEALTH_PORT", "0")
            .env("NUMARESOURCES_WEBHOOK_KUBECONFIG", &kubeconfig)
            .env("NUMARESOURCES_WEBHOOK_TLS_CERT_FILE", dir.path().join("missing.crt"))
            .env("NUMARESOURCES_WEBHOOK_TLS_PRIVATE_KEY_FILE", dir.path().join("missing.key"))
            .env("NUMARESOURCES_WEBHOOK_CERT_DIR", &cert_dir)
            .env("NUMARESOURCES_WEBHOOK_TLS_SNI_NAMES", "localhost")
            .env("POD_NAMESPACE", "numaresources"),
    );
    let https = address_in(&webhook.wait_for(&["serving HTTPS"]));
    let health = address_in(&webhook.wait_for(&["over plain HTTP"]));

    assert_eq!(get(&health, "/healthz"), (200, "ok".to_owned()));
    let (status, body) = get(&health, "/readyz?verbose");
    assert_eq!(status, 500, "not ready before the caches sync: {body}");
    assert!(body.contains("[-]numaresourcesscheduler-cache failed: reason withheld\n"), "kube's format: {body}");
    let (status, why) = get(&health, "/readyz/namespace-cache");
    assert_eq!((status, why.as_str()), (500, "internal server error: the namespaces have not been listed yet\n"));

    // The generated certificate is the one served; the pod passes unchanged.
    let certificate = std::fs::read_dir(&cert_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "crt"))
        .expect("a generated certificate in --cert-dir");
    let (status, body) = post_tls(&https, &std::fs::read(certificate).unwrap(), "/mutate-pods", POD_REVIEW);
    assert_eq!(status, 200, "{body}");
    let review: serde_json::Value = serde_json::from_str(body.trim_end()).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(review["response"]["uid"], "5b3f40f1-f24f-4588-9eb4-e08823b729ae");
    assert_eq!(review["response"]["allowed"], true);
    assert!(review["response"].get("patch").is_none(), "nothing is routed before the caches sync");

    let (status, metrics) = get(&health, "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("numaresources_webhook_pods_skipped_total{reason=\"not-synced\"} 1"), "{metrics}");

    // SIGTERM drains and exits cleanly.
    let status = webhook.terminate(Duration::from_secs(40));
    assert!(status.success(), "exit status {status}; log: {:#?}", webhook.log());
}
