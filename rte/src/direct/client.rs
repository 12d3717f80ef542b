//! The kube client for our API server: its CA (re-read while running, so a rotated CA is
//! followed), the bearer token from [`BearerFile`] on every request, a short connect timeout, no
//! retries of its own (a failure must reach the failover at once, which then publishes through
//! kube-apiserver instead of retrying a replica that is not ready), and no connection kept open
//! between publishes ([`DIRECT_IDLE_CONNECTION_TIMEOUT`]).

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http::header::AUTHORIZATION;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt as _};
use numaresources_certs::CaBundle;
use tower::ServiceBuilder;
use tower::util::MapRequestLayer;

use super::DirectServer;
use super::bearer::BearerFile;

/// How long connecting to our server may take. It is a Service address inside the cluster:
/// when it does not connect within this, it is not there, and kube-apiserver is used instead.
pub(crate) const DIRECT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a connection to our server stays open after its last request (it is closed between
/// once and twice this: the pool looks for idle connections once per this period).
///
/// The requests of one publish come milliseconds apart (a 404's create right after the patch)
/// and share a connection; the next publish is
/// seconds to a minute away (about every 10 s on a busy node, the heartbeat a minute apart on a
/// quiet one), and a kept-alive TLS connection costs the replica ≈28 KiB however idle it is
/// (hyper's read and write buffers, the connection's task, rustls' state). So a connection is
/// closed as soon as its publish is done: a replica holds connections only for the agents
/// writing right now, and after a rollout the agents spread over the new replicas with their
/// next publishes. With 5,000 agents, a 2 s bound kept ≈960 connections open on the replica and
/// this one ≈130, 43 MiB less (BENCHMARKS.md, "Closing connections sooner"), for ≈80 more
/// reconnects a second (those whose next publish came within 2 s). A reconnect resumes the TLS
/// session (our server issues session tickets), so it costs a key exchange, not a certificate
/// verification.
pub const DIRECT_IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_millis(250);

/// How many idle connections to our server the client keeps at most: an agent makes one request
/// at a time, so a second idle connection is never needed.
pub(crate) const DIRECT_MAX_IDLE_CONNECTIONS: usize = 1;

/// The largest CA bundle read (a bundle of a few certificates is a few KiB; the controllers'
/// rotation keeps two).
pub(crate) const MAX_CA_BUNDLE_BYTES: u64 = 1024 * 1024;

/// Why the client for our server could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
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

/// Reads the CA bundle's certificates (DER), bounded by [`MAX_CA_BUNDLE_BYTES`].
fn read_ca(path: &Path) -> Result<Vec<Vec<u8>>, ClientError> {
    let read = |source| ClientError::ReadCa { path: path.to_owned(), source };
    let mut pem = Vec::new();
    fs::File::open(path).map_err(read)?.take(MAX_CA_BUNDLE_BYTES + 1).read_to_end(&mut pem).map_err(read)?;
    let bad = |reason: String| ClientError::BadCa { path: path.to_owned(), reason };
    if pem.len() as u64 > MAX_CA_BUNDLE_BYTES {
        return Err(bad(format!("larger than {MAX_CA_BUNDLE_BYTES} bytes")));
    }
    let bundle = CaBundle::from_pem(&pem).map_err(|e| bad(e.to_string()))?;
    Ok(bundle.certificates().iter().map(|c| c.to_vec()).collect())
}

/// A client for `server` presenting the token `bearer` reads, closing its connections after
/// [`DIRECT_IDLE_CONNECTION_TIMEOUT`] idle.
pub fn direct_client(server: &DirectServer, bearer: Arc<BearerFile>) -> Result<kube::Client, ClientError> {
    direct_client_with_idle_timeout(server, bearer, Some(DIRECT_IDLE_CONNECTION_TIMEOUT))
}

/// [`direct_client`] closing connections after `idle_timeout` idle; with `None`, keeping them
/// until they are next used, as kube's default client does (the fleet benchmark compares both).
pub fn direct_client_with_idle_timeout(
    server: &DirectServer,
    bearer: Arc<BearerFile>,
    idle_timeout: Option<Duration>,
) -> Result<kube::Client, ClientError> {
    let roots = read_ca(&server.ca_file)?;
    let mut config = kube::Config::new(server.url.clone());
    config.root_cert = Some(roots);
    // kube re-reads this file while running and verifies with what it holds.
    config.root_cert_file = Some(server.ca_file.clone());
    let kube = |source| ClientError::Kube { url: server.url.clone(), source: Box::new(source) };

    // kube's own client stack minus what the direct path does not use (retries, kubeconfig
    // credentials, gzip, per-request tracing), with a pool of our own: kube builds its pool
    // without a timer, and without one hyper never closes an idle connection (it only notices
    // an expired one when it would reuse it).
    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    connector.set_connect_timeout(Some(DIRECT_CONNECT_TIMEOUT));
    // A reconnect's request follows the client's handshake Finished at once: with Nagle it
    // waits for the server's delayed ACK (40 ms) unless the server happens to send something
    // first (its session tickets).
    connector.set_nodelay(true);
    let connector = config.rustls_https_connector_with_connector(connector).map_err(kube)?;
    let mut pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    if let Some(idle_timeout) = idle_timeout {
        pool.pool_timer(TokioTimer::new())
            .pool_idle_timeout(idle_timeout)
            .pool_max_idle_per_host(DIRECT_MAX_IDLE_CONNECTIONS);
    }
    let http = pool.build::<_, Body>(connector);

    let bearer = MapRequestLayer::new(move |mut request: Request<Body>| {
        if let Some(header) = bearer.header() {
            request.headers_mut().insert(AUTHORIZATION, header);
        }
        request
    });
    let service = ServiceBuilder::new().layer(config.base_uri_layer()).layer(bearer).service(http);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod connection_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_bundle_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.crt");
        assert!(matches!(read_ca(&missing), Err(ClientError::ReadCa { path, .. }) if path == missing));
        let empty = dir.path().join("empty.crt");
        fs::write(&empty, "no certificate here\n").unwrap();
        let error = read_ca(&empty).unwrap_err();
        assert!(matches!(&error, ClientError::BadCa { path, .. } if *path == empty), "{error}");
        let huge = dir.path().join("huge.crt");
        fs::write(&huge, vec![b'#'; MAX_CA_BUNDLE_BYTES as usize + 1]).unwrap();
        assert!(read_ca(&huge).unwrap_err().to_string().contains("larger than"));
    }
}
