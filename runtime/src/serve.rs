//! Serving an axum `Router` over TLS: accept loop, per-connection handshake with a timeout,
//! HTTP/1.1 and HTTP/2, the peer's identity on every request, graceful shutdown.
//!
//! What one client may hold is bounded: its connections ([`ServeOptions::max_connections_per_client`]),
//! what each connection buffers for it (HTTP/1.1 buffer, HTTP/2 flow-control windows and send
//! buffer per stream, the TLS layer's 64 KiB), how long a connection may sit with no request
//! open ([`ServeOptions::idle_timeout`], HTTP/2 included, which has no header timeout), how long
//! its writes may stay blocked by a client that stopped reading
//! ([`ServeOptions::write_stall_timeout`]), and HTTP/2 keep-alive pings find peers that are gone.

mod activity;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower::Service;

/// Who is on the other end of the connection a request arrived on; inserted into every
/// request's extensions (read it with `axum::Extension<PeerInfo>`).
#[derive(Clone, Debug)]
pub struct PeerInfo {
    remote_addr: SocketAddr,
    client_chain: Arc<[CertificateDer<'static>]>,
}

impl PeerInfo {
    /// The TCP peer address.
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote_addr
    }

    /// The client certificate chain, end entity first, as verified during the handshake by the
    /// configured client verifier; empty for an anonymous client. The handshake accepts a chain
    /// from *any* trusted bundle: use [`crate::tls::CaBundle::verifies_client`] to tell which.
    pub fn client_chain(&self) -> &[CertificateDer<'static>] {
        &self.client_chain
    }

    /// The end-entity client certificate, if the client presented one.
    pub fn client_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.client_chain.first()
    }
}

/// The default of [`ServeOptions::idle_timeout`] (kube-apiserver's `IdleTimeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// The default of [`ServeOptions::write_stall_timeout`].
pub const DEFAULT_WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The default of [`ServeOptions::http2_keep_alive_interval`].
pub const DEFAULT_HTTP2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// The default of [`ServeOptions::http2_keep_alive_timeout`].
pub const DEFAULT_HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// The default of [`ServeOptions::max_connections_per_client`].
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1024;

/// HTTP/1.1: the most a connection buffers, reading (the request line and headers: larger gets
/// 431) and writing (a response body a client does not read). hyper's default is ≈400 KiB.
pub const HTTP1_MAX_BUFFER_BYTES: usize = 256 * 1024;
/// HTTP/2: concurrent streams per connection (kube-apiserver allows 250; hyper's default is 200).
pub const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 250;
/// HTTP/2: what hyper queues per stream beyond what the client's window lets it send.
pub const HTTP2_MAX_SEND_BUFFER_BYTES: usize = 64 * 1024;
/// HTTP/2: the receive window per stream (what a client may send before we read it):
/// kube-apiserver's upload buffer per stream.
pub const HTTP2_STREAM_WINDOW_BYTES: u32 = 256 * 1024;
/// HTTP/2: the receive window per connection, shared by its streams.
pub const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 1024 * 1024;
/// HTTP/2: the largest header list accepted (Go's and kube-apiserver's header limit is 1 MiB).
pub const HTTP2_MAX_HEADER_LIST_BYTES: u32 = 1024 * 1024;

/// Limits of [`serve_with`].
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    handshake_timeout: Duration,
    header_read_timeout: Duration,
    shutdown_grace: Duration,
    idle_timeout: Duration,
    write_stall_timeout: Duration,
    http2_keep_alive_interval: Duration,
    http2_keep_alive_timeout: Duration,
    max_connections_per_client: usize,
}

impl Default for ServeOptions {
    /// Handshake 10 s, request headers 30 s, shutdown grace 30 s, and the `DEFAULT_*` bounds.
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            write_stall_timeout: DEFAULT_WRITE_STALL_TIMEOUT,
            http2_keep_alive_interval: DEFAULT_HTTP2_KEEP_ALIVE_INTERVAL,
            http2_keep_alive_timeout: DEFAULT_HTTP2_KEEP_ALIVE_TIMEOUT,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

impl ServeOptions {
    /// How long a client may take to complete the TLS handshake before it is disconnected.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How long in-flight requests (and open watches) may run after shutdown starts before their
    /// connections are closed.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// How long a connection may stay open with no request in flight (HTTP/2 gets a GOAWAY;
    /// HTTP/1.1 is closed by the header timeout first when that is shorter).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How long a connection's writes may stay blocked (a client that stopped reading) before the
    /// connection is dropped with everything buffered for it.
    pub fn write_stall_timeout(mut self, timeout: Duration) -> Self {
        self.write_stall_timeout = timeout;
        self
    }

    /// HTTP/2: how often an idle peer is pinged, and how long its answer may take before the
    /// connection is closed.
    pub fn http2_keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.http2_keep_alive_interval = interval;
        self.http2_keep_alive_timeout = timeout;
        self
    }

    /// How many connections one client address may hold at once; more are closed on accept.
    pub fn max_connections_per_client(mut self, max: usize) -> Self {
        self.max_connections_per_client = max;
        self
    }
}

/// Serves `app` over TLS on `listener` until `shutdown` completes, with [`ServeOptions::default`].
///
/// TLS 1.2/1.3 only when `tls` comes from [`crate::tls::ServerConfigBuilder`]; HTTP/1.1 and HTTP/2
/// (ALPN `h2`, `http/1.1`). Every request carries a [`PeerInfo`] extension. On shutdown the
/// listener is closed at once, idle connections are closed, in-flight requests get the grace
/// period to finish, then everything left is dropped and this returns. Bad clients (garbage
/// instead of a ClientHello, a failed or abandoned handshake) cost only their own connection.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with(listener, tls, app, shutdown, ServeOptions::default()).await
}

/// The connection phases, in order; each connection task follows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Serving,
    Draining,
    Closed,
}

/// [`serve`] with explicit limits.
pub async fn serve_with(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .max_buf_size(HTTP1_MAX_BUFFER_BYTES);
    http.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(options.http2_keep_alive_interval)
        .keep_alive_timeout(options.http2_keep_alive_timeout)
        .max_concurrent_streams(HTTP2_MAX_CONCURRENT_STREAMS)
        .max_send_buf_size(HTTP2_MAX_SEND_BUFFER_BYTES)
        .initial_stream_window_size(HTTP2_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW_BYTES)
        .max_header_list_size(HTTP2_MAX_HEADER_LIST_BYTES);
    let clients = activity::Clients::new(options.max_connections_per_client);
    let (phase, phase_rx) = watch::channel(Phase::Serving);
    let local = listener.local_addr()?;
    tracing::info!(address = %local, "serving HTTPS");

    tokio::pin!(shutdown);
    loop {
        let (stream, remote_addr) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Per-connection errors (reset before accept) and resource exhaustion
                    // (EMFILE) alike: neither should end the server; back off briefly.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = clients.admit(remote_addr.ip()) else {
            tracing::debug!(%remote_addr, "refusing a connection: the client holds as many as it may");
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            stream,
            remote_addr,
            acceptor.clone(),
            http.clone(),
            app.clone(),
            options,
            phase_rx.clone(),
            slot,
        ));
    }

    drop(listener);
    drop(phase_rx);
    tracing::info!(address = %local, "shutting down: draining connections");
    let _ = phase.send(Phase::Draining);
    if tokio::time::timeout(options.shutdown_grace, phase.closed()).await.is_err() {
        tracing::warn!(address = %local, "shutdown grace period over: closing the remaining connections");
        let _ = phase.send(Phase::Closed);
        // Tasks only need to be polled once more to drop their connection.
        let _ = tokio::time::timeout(Duration::from_secs(1), phase.closed()).await;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)] // one task's whole context, passed once
async fn connection(
    stream: TcpStream,
    remote_addr: SocketAddr,
    acceptor: TlsAcceptor,
    http: auto::Builder<TokioExecutor>,
    app: Router,
    options: ServeOptions,
    mut phase: watch::Receiver<Phase>,
    _slot: activity::Slot,
) {
    let handshake = tokio::time::timeout(options.handshake_timeout, acceptor.accept(stream));
    let tls = tokio::select! {
        result = handshake => match result {
            Ok(Ok(tls)) => tls,
            Ok(Err(err)) => {
                tracing::debug!(%remote_addr, error = %err, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%remote_addr, "TLS handshake timed out");
                return;
            }
        },
        () = reached(&mut phase, Phase::Draining) => return,
    };

    let client_chain: Arc<[CertificateDer<'static>]> = tls.get_ref().1.peer_certificates().unwrap_or_default().into();
    let peer = PeerInfo { remote_addr, client_chain };
    let requests = activity::Requests::default();
    let counted = requests.clone();
    let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
        request.extensions_mut().insert(peer.clone());
        counted.track(app.clone().call(request))
    });

    let (io, writes) = activity::StallWatch::new(tls);
    let conn = http.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    // Idleness and stalls are looked at a few times per bound; the checks are two atomic loads.
    let check_every = options.idle_timeout.min(options.write_stall_timeout) / 4;
    let mut checks = tokio::time::interval(check_every.max(Duration::from_millis(10)));
    let mut going_away = false;
    let result = loop {
        tokio::select! {
            result = conn.as_mut() => break result,
            () = reached(&mut phase, if going_away { Phase::Closed } else { Phase::Draining }) => {
                if going_away {
                    break Ok(());
                }
                // Lets in-flight requests finish (HTTP/2: GOAWAY), closes idle connections.
                conn.as_mut().graceful_shutdown();
                going_away = true;
            }
            _ = checks.tick() => {
                if writes.stalled_for() >= options.write_stall_timeout {
                    tracing::debug!(%remote_addr, "closing a connection whose client stopped reading");
                    break Ok(());
                }
                if !going_away && requests.idle_for() >= options.idle_timeout {
                    tracing::debug!(%remote_addr, "closing an idle connection");
                    conn.as_mut().graceful_shutdown();
                    going_away = true;
                }
            }
        }
    };
    if let Err(err) = result {
        tracing::debug!(%remote_addr, error = %err, "connection ended with an error");
    }
}

/// Completes once the server has reached `target` (or is gone).
async fn reached(phase: &mut watch::Receiver<Phase>, target: Phase) {
    let _ = phase.wait_for(|current| *current >= target).await;
}
