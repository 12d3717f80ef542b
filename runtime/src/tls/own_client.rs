//! A kube client for one of our own servers: a replica's peer listener, or the API server that
//! exporters write to directly.
//!
//! Two things set it apart from the kube-apiserver client ([`crate::kube_client`]):
//!
//! - **It trusts the CA file it is given and nothing else.** kube-rs falls back to the system's
//!   trust store when a configuration names no root certificate in memory (a CA *file* alone is
//!   not enough), and our image has no trust store: a follower then failed every connection
//!   with "No CA certificates were loaded from the system". Trusting public roots for a peer
//!   or an exporter would be wrong anyway. The file is re-read by kube while running, so a
//!   rotated CA is followed.
//! - **It logs nothing per request.** kube's own stack logs every failed request at error
//!   level; a follower redialling a dead leader every few hundred milliseconds during an
//!   election wrote over a hundred such lines. Callers log failures once, at the level they
//!   deserve. It has no retries either: a failure must reach the caller at once.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt as _};
use tower::ServiceBuilder;
use tower::util::MapRequestLayer;

use crate::tls::CaBundle;

/// The largest CA bundle read (a bundle of a few certificates is a few KiB; a rotation keeps
/// two).
pub const MAX_CA_BUNDLE_BYTES: u64 = 1024 * 1024;

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OwnClientError {
    /// The CA bundle cannot be read.
    #[error("cannot read the CA bundle {path}: {source}")]
    ReadCa {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The CA bundle holds no usable certificate, or is too large.
    #[error("the CA bundle {path} is not usable: {reason}")]
    BadCa {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// kube could not build the client (TLS configuration).
    #[error("cannot build the client for {url}: {source}")]
    Kube {
        /// The server.
        url: http::Uri,
        /// Why.
        #[source]
        source: Box<kube::Error>,
    },
}

/// Reads a PEM CA bundle's certificates (DER), bounded by [`MAX_CA_BUNDLE_BYTES`].
pub fn read_ca_file(path: &Path) -> Result<Vec<Vec<u8>>, OwnClientError> {
    let read = |source| OwnClientError::ReadCa { path: path.to_owned(), source };
    let mut pem = Vec::new();
    std::fs::File::open(path).map_err(read)?.take(MAX_CA_BUNDLE_BYTES + 1).read_to_end(&mut pem).map_err(read)?;
    let bad = |reason: String| OwnClientError::BadCa { path: path.to_owned(), reason };
    if pem.len() as u64 > MAX_CA_BUNDLE_BYTES {
        return Err(bad(format!("larger than {MAX_CA_BUNDLE_BYTES} bytes")));
    }
    let bundle = CaBundle::from_pem(&pem).map_err(|e| bad(e.to_string()))?;
    Ok(bundle.certificates().iter().map(|c| c.to_vec()).collect())
}

/// How the client connects and keeps connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connections {
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// Close a connection this long after its last request (`None`: keep it until next used).
    pub idle_timeout: Option<Duration>,
    /// At most this many idle connections per server (with `idle_timeout` only).
    pub max_idle: usize,
}

/// A client for `config.cluster_url` that trusts only the certificates of `ca_file`, presents
/// `config`'s client certificate (if any) and checks `config.tls_server_name` (if set), with
/// `map` applied to every request (e.g. to add a bearer token read from a file).
pub fn own_server_client(
    mut config: kube::Config,
    ca_file: &Path,
    connections: Connections,
    map: impl Fn(Request<Body>) -> Request<Body> + Clone + Send + Sync + 'static,
) -> Result<kube::Client, OwnClientError> {
    config.root_cert = Some(read_ca_file(ca_file)?);
    // kube re-reads this file while running and verifies with what it holds.
    config.root_cert_file = Some(ca_file.to_owned());
    let kube = |source| OwnClientError::Kube { url: config.cluster_url.clone(), source: Box::new(source) };

    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    connector.set_connect_timeout(Some(connections.connect_timeout));
    // A reconnect's request follows the client's handshake Finished at once: with Nagle it
    // waits for the server's delayed ACK (40 ms) unless the server happens to send first.
    connector.set_nodelay(true);
    let connector = config.rustls_https_connector_with_connector(connector).map_err(kube)?;
    // kube builds its pool without a timer, and without one hyper never closes an idle
    // connection (it only notices an expired one when it would reuse it).
    let mut pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    if let Some(idle_timeout) = connections.idle_timeout {
        pool.pool_timer(TokioTimer::new()).pool_idle_timeout(idle_timeout).pool_max_idle_per_host(connections.max_idle);
    }
    let http = pool.build::<_, Body>(connector);
    let service = ServiceBuilder::new().layer(config.base_uri_layer()).layer(MapRequestLayer::new(map)).service(http);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_empty_or_huge_ca_bundle_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.crt");
        assert!(matches!(read_ca_file(&missing), Err(OwnClientError::ReadCa { path, .. }) if path == missing));
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let error = read_ca_file(&empty).unwrap_err();
        assert!(matches!(&error, OwnClientError::BadCa { path, .. } if *path == empty), "{error}");
        let huge = dir.path().join("huge.crt");
        std::fs::write(&huge, vec![b'#'; MAX_CA_BUNDLE_BYTES as usize + 1]).unwrap();
        assert!(read_ca_file(&huge).unwrap_err().to_string().contains("larger than"));
    }
}
