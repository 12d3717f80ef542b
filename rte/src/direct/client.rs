//! The kube client for our API server: its CA (re-read while running, so a rotated CA is
//! followed), the bearer token from [`BearerFile`] on every request, a short connect timeout, no
//! retries of its own (a failure must reach the failover at once, which then publishes through
//! kube-apiserver instead of retrying a replica that is not ready), and no connection kept open
//! between publishes ([`DIRECT_IDLE_CONNECTION_TIMEOUT`]).

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http::header::AUTHORIZATION;
use kube::client::Body;
use numaresources_runtime::tls::own_client::{Connections, own_server_client};
pub use numaresources_runtime::tls::own_client::{MAX_CA_BUNDLE_BYTES, OwnClientError as ClientError};

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
/// this one ≈130, 43 MiB less (BENCHMARKS.md, the fleet defaults, "Closing connections sooner"), for ≈80 more
/// reconnects a second (those whose next publish came within 2 s). A reconnect resumes the TLS
/// session (our server issues session tickets), so it costs a key exchange, not a certificate
/// verification.
pub const DIRECT_IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_millis(250);

/// How many idle connections to our server the client keeps at most: an agent makes one request
/// at a time, so a second idle connection is never needed.
pub(crate) const DIRECT_MAX_IDLE_CONNECTIONS: usize = 1;

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
    let mut config = kube::Config::new(server.url.clone());
    config.tls_server_name = server.tls_server_name.clone();
    let connections =
        Connections { connect_timeout: DIRECT_CONNECT_TIMEOUT, idle_timeout, max_idle: DIRECT_MAX_IDLE_CONNECTIONS };
    own_server_client(config, &server.ca_file, connections, move |mut request: Request<Body>| {
        if let Some(header) = bearer.header() {
            request.headers_mut().insert(AUTHORIZATION, header);
        }
        request
    })
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod connection_tests;
