//! What the in-process API server benches share: the server over real TLS on loopback, the TLS
//! connector of their clients (kept-alive connections come from the testkit's `https`:
//! HTTP/1.1 and HTTP/2 connections).

#![allow(dead_code)] // each bench uses a part of it

use std::net::SocketAddr;
use std::sync::Arc;

use numaresources_apiserver::{AppState, Store, router};
use numaresources_tests::served::{Served, serving_tls, test_ca};
use tokio_rustls::TlsConnector;

use numaresources_testkit::tls as tls_client;

/// Our API server over TLS on 127.0.0.1, serving `store` until dropped.
pub struct BenchServer {
    pub address: SocketAddr,
    /// Verifies the serving certificate.
    pub ca_pem: String,
    _served: Served,
    _dir: tempfile::TempDir,
}

impl BenchServer {
    pub async fn start(store: &Arc<Store>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca();
        let tls = serving_tls(&ca, dir.path(), "tls");
        let state = Arc::new(AppState::new(Arc::clone(store), "bench", "bench"));
        let served = Served::on_loopback(tls, router(state)).await;
        Self { address: served.address, ca_pem: ca.cert_pem().to_owned(), _served: served, _dir: dir }
    }

    /// A connector that trusts the server and offers `alpn` (`h2`, `http/1.1`).
    pub fn connector(&self, alpn: &[u8]) -> TlsConnector {
        TlsConnector::from(tls_client::client(&self.ca_pem, None, &[alpn]))
    }
}
