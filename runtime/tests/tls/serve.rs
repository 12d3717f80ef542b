//! `serve`: protocols, hostile clients, shutdown.

use std::sync::Arc;
use std::time::Duration;

use numaresources_runtime::ServeOptions;
use numaresources_runtime::tls::{ReloadingCertificate, ServerConfigBuilder, TlsPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    TestServer, app, bounded, ca, client, client_with_versions, fetch, localhost_pair, served_leaf, write_plain,
};

struct Fixture {
    server: TestServer,
    roots: String,
    _dir: tempfile::TempDir,
}

async fn fixture(options: ServeOptions) -> Fixture {
    fixture_with(options, app(), TlsPolicy::default()).await
}

async fn fixture_with(options: ServeOptions, app: axum::Router, policy: TlsPolicy) -> Fixture {
    let serving_ca = ca("serving-ca");
    let dir = tempfile::tempdir().unwrap();
    write_plain(dir.path(), &localhost_pair(&serving_ca));
    let certificate = ReloadingCertificate::load(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap();
    let tls = ServerConfigBuilder::new(Arc::new(certificate)).policy(policy).build().unwrap();
    Fixture {
        server: TestServer::start_with(tls, app, options).await,
        roots: serving_ca.cert_pem().to_owned(),
        _dir: dir,
    }
}

/// Reads until the server closes the connection (EOF or reset); fails the test if it never does.
async fn closed_by_server(stream: &mut TcpStream) {
    bounded("the server to close the connection", async {
        let mut buffer = [0_u8; 1024];
        while let Ok(read) = stream.read(&mut buffer).await {
            if read == 0 {
                break;
            }
        }
    })
    .await;
}

#[tokio::test]
async fn http1_and_http2_are_both_served_as_alpn_chooses() {
    let Fixture { server, roots, _dir } = fixture(ServeOptions::default()).await;
    let (status, body) = fetch(server.addr, client(&roots, None, &[b"h2", b"http/1.1"]), "/whoami").await.unwrap();
    assert_eq!((status.as_u16(), body.as_str()), (200, "anonymous HTTP/2.0"));
    let (_, body) = fetch(server.addr, client(&roots, None, &[b"http/1.1"]), "/whoami").await.unwrap();
    assert_eq!(body, "anonymous HTTP/1.1");
    // No ALPN at all (curl --no-alpn, old clients): HTTP/1.1.
    let (_, body) = fetch(server.addr, client(&roots, None, &[]), "/whoami").await.unwrap();
    assert_eq!(body, "anonymous HTTP/1.1");
    let (status, _) = fetch(server.addr, client(&roots, None, &[]), "/missing").await.unwrap();
    assert_eq!(status.as_u16(), 404);
    server.stop().await;
}

#[tokio::test]
async fn tls_1_2_clients_are_served_and_handlers_see_the_peer_address() {
    let Fixture { server, roots, _dir } = fixture(ServeOptions::default()).await;
    let tls12 = client_with_versions(&roots, None, &[b"h2"], &[&rustls::version::TLS12]);
    let (_, body) = fetch(server.addr, tls12, "/whoami").await.unwrap();
    assert_eq!(body, "anonymous HTTP/2.0");
    let (_, addr) = fetch(server.addr, client(&roots, None, &[]), "/addr").await.unwrap();
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    server.stop().await;
}

#[tokio::test]
async fn a_tls13_minimum_refuses_tls12_clients_and_serves_tls13_ones() {
    let policy = TlsPolicy::from_flags(Some("VersionTLS13"), None).unwrap();
    let Fixture { server, roots, _dir } = fixture_with(ServeOptions::default(), app(), policy).await;
    let tls12 = client_with_versions(&roots, None, &[], &[&rustls::version::TLS12]);
    assert!(fetch(server.addr, tls12, "/whoami").await.is_err(), "a TLS 1.2-only client must be refused");
    let (_, body) = fetch(server.addr, client(&roots, None, &[]), "/whoami").await.unwrap();
    assert_eq!(body, "anonymous HTTP/1.1");
    server.stop().await;
}

#[tokio::test]
async fn a_cipher_suite_list_limits_what_tls12_clients_may_negotiate() {
    // Our generated keys are ECDSA: allowing only an RSA suite leaves TLS 1.2 nothing to agree on.
    let policy = TlsPolicy::from_flags(None, Some("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")).unwrap();
    let Fixture { server, roots, _dir } = fixture_with(ServeOptions::default(), app(), policy).await;
    let tls12 = client_with_versions(&roots, None, &[], &[&rustls::version::TLS12]);
    assert!(fetch(server.addr, tls12, "/whoami").await.is_err(), "no ECDSA suite is allowed for TLS 1.2");
    let (_, body) = fetch(server.addr, client(&roots, None, &[]), "/whoami").await.unwrap();
    assert_eq!(body, "anonymous HTTP/1.1", "TLS 1.3 is not constrained by the list");
    server.stop().await;
}

#[tokio::test]
async fn garbage_and_abandoned_handshakes_do_not_disturb_the_next_client() {
    let Fixture { server, roots, _dir } = fixture(ServeOptions::default()).await;

    // Not TLS at all: a plain HTTP request, then random bytes.
    let mut plain = TcpStream::connect(server.addr).await.unwrap();
    plain.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    closed_by_server(&mut plain).await;
    let mut noise = TcpStream::connect(server.addr).await.unwrap();
    noise.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef]).await.unwrap();
    noise.write_all(&[0_u8; 4096]).await.unwrap();
    closed_by_server(&mut noise).await;

    // A real ClientHello cut short, then the client goes away.
    let mut cut = TcpStream::connect(server.addr).await.unwrap();
    cut.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]).await.unwrap();
    drop(cut);
    // Connect and leave without a byte.
    drop(TcpStream::connect(server.addr).await.unwrap());

    let (_, body) = fetch(server.addr, client(&roots, None, &[b"h2"]), "/whoami").await.unwrap();
    assert_eq!(body, "anonymous HTTP/2.0");
    served_leaf(server.addr, &roots).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_never_finishes_its_handshake_is_disconnected_while_others_are_served() {
    let options = ServeOptions::default().handshake_timeout(Duration::from_millis(200));
    let Fixture { server, roots, _dir } = fixture(options).await;
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    // Served while the silent one still holds its connection.
    fetch(server.addr, client(&roots, None, &[]), "/whoami").await.unwrap();
    closed_by_server(&mut silent).await;
    server.stop().await;
}

#[tokio::test]
async fn shutdown_lets_an_in_flight_request_finish_then_refuses_new_connections() {
    // A handler that reports when it starts and answers only when released.
    let (entered_tx, mut entered) = tokio::sync::mpsc::channel::<()>(1);
    let release = Arc::new(tokio::sync::Notify::new());
    let app = axum::Router::new().route(
        "/held",
        axum::routing::get({
            let release = Arc::clone(&release);
            move || async move {
                let _ = entered_tx.send(()).await;
                release.notified().await;
                "done"
            }
        }),
    );
    let Fixture { server, roots, _dir } = fixture_with(ServeOptions::default(), app, TlsPolicy::default()).await;
    let addr = server.addr;
    let in_flight = tokio::spawn({
        let config = client(&roots, None, &[b"h2"]);
        async move { fetch(addr, config, "/held").await }
    });
    bounded("the handler to start", entered.recv()).await;

    server.begin_shutdown();
    crate::support::eventually("the listener to close", || async { TcpStream::connect(addr).await.is_err() }).await;
    release.notify_one();
    let (status, body) = bounded("the in-flight request", in_flight).await.unwrap().unwrap();
    assert_eq!((status.as_u16(), body.as_str()), (200, "done"));
    server.stop().await;
}

#[tokio::test]
async fn shutdown_closes_connections_that_outlive_the_grace_period() {
    let options = ServeOptions::default().shutdown_grace(Duration::from_millis(50));
    let Fixture { server, roots, _dir } = fixture(options).await;
    // A request whose headers never complete keeps its connection busy through the grace period.
    let mut idle = crate::support::connect(server.addr, client(&roots, None, &[b"http/1.1"])).await.unwrap();
    idle.write_all(b"GET /whoami HTTP/1.1\r\nHost: local").await.unwrap();
    server.stop().await;
    closed_by_server(idle.get_mut().0).await;
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    let Fixture { server, roots, _dir } =
        fixture(ServeOptions::default().idle_timeout(Duration::from_millis(300))).await;
    let tls = crate::support::connect(server.addr, client(&roots, None, &[b"h2"])).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    let request = http::Request::get("https://localhost/whoami").body(http_body_util::Empty::<bytes::Bytes>::new());
    let response = sender.send_request(request.unwrap()).await.unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    // Nothing more is asked: the server says GOAWAY and the connection ends.
    let _ = bounded("the server to close the idle HTTP/2 connection", connection).await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected() {
    // An endless response, as a watch is: without a bound, a client that never reads would hold
    // the connection and what it buffers forever.
    let endless = axum::Router::new().route(
        "/endless",
        axum::routing::get(|| async { axum::body::Body::new(Endless(bytes::Bytes::from(vec![b'x'; 16 * 1024]))) }),
    );
    let options = ServeOptions::default().write_stall_timeout(Duration::from_millis(300));
    let Fixture { server, roots, _dir } = fixture_with(options, endless, TlsPolicy::default()).await;
    let mut stalled = crate::support::connect(server.addr, client(&roots, None, &[b"http/1.1"])).await.unwrap();
    stalled.write_all(b"GET /endless HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await; // not reading while the socket buffers fill
    closed_by_server(stalled.get_mut().0).await;
}

#[tokio::test]
async fn a_client_holds_at_most_its_share_of_connections() {
    let Fixture { server, roots, _dir } = fixture(ServeOptions::default().max_connections_per_client(2)).await;
    let config = client(&roots, None, &[b"http/1.1"]);
    let first = crate::support::connect(server.addr, config.clone()).await.unwrap();
    let second = crate::support::connect(server.addr, config.clone()).await.unwrap();
    let third = bounded("the third handshake", crate::support::connect(server.addr, config.clone())).await;
    assert!(third.is_err(), "a third connection from the same address is refused");
    drop(first);
    crate::support::eventually("a closed connection to free its place", || async {
        crate::support::connect(server.addr, config.clone()).await.is_ok()
    })
    .await;
    drop(second);
}

/// A response body that never ends.
struct Endless(bytes::Bytes);

impl hyper::body::Body for Endless {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(self.0.clone()))))
    }
}
