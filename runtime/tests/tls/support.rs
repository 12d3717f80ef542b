//! Test servers, clients and bounded waits shared by the modules.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use numaresources_runtime::shutdown::{Shutdown, Trigger};
use numaresources_runtime::tls::{CertificateAuthority, PemPair, ReloadingCertificate};
use numaresources_runtime::{PeerInfo, ServeOptions, serve_with};
use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::task::JoinHandle;

pub use crate::shared::{bounded, client, client_with_versions, connect};

pub type TestResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Polls `check` until it returns true, failing the test after [`PATIENCE`](crate::shared::PATIENCE).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    bounded(what, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

pub fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

pub fn ca(name: &str) -> CertificateAuthority {
    CertificateAuthority::generate(name, Duration::from_secs(24 * 3600)).unwrap()
}

/// A serving pair for `localhost` issued by `ca`.
pub fn localhost_pair(ca: &CertificateAuthority) -> PemPair {
    ca.issue_serving(&names(&["localhost", "127.0.0.1"]), Duration::from_secs(3600)).unwrap()
}

pub fn der_of(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// The subject CN of a DER certificate.
pub fn common_name(der: &CertificateDer<'_>) -> String {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()).unwrap_or_default().to_owned()
}

/// A router whose `/whoami` names the client certificate's CN (or `anonymous`) and the HTTP
/// version, `/addr` the peer address, and `/slow` answers after a pause.
pub fn app() -> Router {
    Router::new()
        .route(
            "/whoami",
            get(|Extension(peer): Extension<PeerInfo>, version: http::Version| async move {
                let who = peer.client_certificate().map(common_name).unwrap_or_else(|| "anonymous".to_owned());
                format!("{who} {version:?}")
            }),
        )
        .route("/addr", get(|Extension(peer): Extension<PeerInfo>| async move { peer.remote_addr().to_string() }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "done"
            }),
        )
}

/// A running `serve_with` on 127.0.0.1:0.
pub struct TestServer {
    pub addr: SocketAddr,
    /// Fired when stopped, or when the server is dropped.
    shutdown: Trigger,
    task: JoinHandle<std::io::Result<()>>,
}

impl TestServer {
    pub async fn start(tls: Arc<rustls::ServerConfig>, app: Router) -> Self {
        Self::start_with(tls, app, ServeOptions::default()).await
    }

    pub async fn start_with(tls: Arc<rustls::ServerConfig>, app: Router, options: ServeOptions) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown, signal) = Shutdown::manual();
        let task = tokio::spawn(serve_with(listener, tls, app, signal.signaled(), options));
        Self { addr, shutdown, task }
    }

    /// Signals shutdown without waiting.
    pub fn begin_shutdown(&self) {
        self.shutdown.fire();
    }

    /// Signals shutdown and waits for `serve` to return.
    pub async fn stop(self) {
        self.begin_shutdown();
        bounded("server shutdown", self.task).await.unwrap().unwrap();
    }
}

/// The end-entity certificate a new connection is served.
pub async fn served_leaf(addr: SocketAddr, roots_pem: &str) -> TestResult<CertificateDer<'static>> {
    let tls = bounded("handshake", connect(addr, client(roots_pem, None, &[]))).await?;
    let leaf = tls.get_ref().1.peer_certificates().and_then(|chain| chain.first()).ok_or("no server certificate")?;
    Ok(leaf.clone().into_owned())
}

/// One GET over a new connection, HTTP/2 if ALPN chose it; (status, body).
pub async fn fetch(addr: SocketAddr, config: Arc<ClientConfig>, path: &str) -> TestResult<(http::StatusCode, String)> {
    bounded("request", async {
        let tls = connect(addr, config).await?;
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        let response = if h2 {
            let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(conn);
            let uri = format!("https://localhost{path}");
            sender.send_request(http::Request::get(uri).body(Empty::<Bytes>::new())?).await?
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
            tokio::spawn(conn);
            let request =
                http::Request::get(path).header(http::header::HOST, "localhost").body(Empty::<Bytes>::new())?;
            sender.send_request(request).await?
        };
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8(body.to_vec())?))
    })
    .await
}

/// Writes a pair as two plain files (rewritten in place, as `cp` or an editor would).
pub fn write_plain(dir: &Path, pair: &PemPair) {
    std::fs::write(dir.join("tls.crt"), &pair.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &pair.key_pem).unwrap();
}

/// `pair` written as `tls.crt` and `tls.key` into a new directory, and loaded from there.
pub fn loaded(pair: &PemPair) -> (tempfile::TempDir, ReloadingCertificate) {
    let dir = tempfile::tempdir().unwrap();
    write_plain(dir.path(), pair);
    let certificate = ReloadingCertificate::load(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap();
    (dir, certificate)
}
