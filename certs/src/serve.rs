//! Serving an axum `Router` over TLS: accept loop, per-connection handshake with a timeout,
//! HTTP/1.1 and HTTP/2, the peer's identity on every request, graceful shutdown.

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
    /// from *any* trusted bundle: use [`crate::CaBundle::verifies_client`] to tell which.
    pub fn client_chain(&self) -> &[CertificateDer<'static>] {
        &self.client_chain
    }

    /// The end-entity client certificate, if the client presented one.
    pub fn client_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.client_chain.first()
    }
}

/// Limits of [`serve_with`].
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    handshake_timeout: Duration,
    header_read_timeout: Duration,
    shutdown_grace: Duration,
}

impl Default for ServeOptions {
    /// Handshake 10 s, request headers 30 s, shutdown grace 30 s.
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

impl ServeOptions {
    /// How long a client may take to complete the TLS handshake before it is disconnected.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How long an HTTP/1.1 client may take to send a request's headers (also the idle limit of
    /// a keep-alive connection).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long in-flight requests (and open watches) may run after shutdown starts before their
    /// connections are closed.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }
}

/// Serves `app` over TLS on `listener` until `shutdown` completes, with [`ServeOptions::default`].
///
/// TLS 1.2/1.3 only when `tls` comes from [`crate::ServerConfigBuilder`]; HTTP/1.1 and HTTP/2
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
    http.http1().timer(TokioTimer::new()).header_read_timeout(options.header_read_timeout);
    http.http2().timer(TokioTimer::new());
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
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            stream,
            remote_addr,
            acceptor.clone(),
            http.clone(),
            app.clone(),
            options.handshake_timeout,
            phase_rx.clone(),
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

async fn connection(
    stream: TcpStream,
    remote_addr: SocketAddr,
    acceptor: TlsAcceptor,
    http: auto::Builder<TokioExecutor>,
    app: Router,
    handshake_timeout: Duration,
    mut phase: watch::Receiver<Phase>,
) {
    let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(stream));
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
    let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
        request.extensions_mut().insert(peer.clone());
        app.clone().call(request)
    });

    let conn = http.serve_connection_with_upgrades(TokioIo::new(tls), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = reached(&mut phase, Phase::Draining) => {
            // Lets in-flight requests finish (HTTP/2: GOAWAY), closes idle connections.
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                result = conn.as_mut() => result,
                () = reached(&mut phase, Phase::Closed) => Ok(()),
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
