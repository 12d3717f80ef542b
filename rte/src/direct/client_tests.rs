//! The direct client against a real TLS listener: its requests, and what it does with an idle
//! connection.

use std::time::{Duration, Instant};

use numaresources_runtime::tls::{
    CaBundle, CertificateAuthority, ClientCaVerifier, ReloadingCertificate, ServerConfigBuilder,
};
use rustls::HandshakeKind;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::*;

/// How long the test waits for something that should happen within seconds (a hang bound,
/// not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);

const TOKEN: &str = "agent-token";

/// What the test server saw of one connection.
#[derive(Debug)]
enum Seen {
    /// A connection was accepted, its TLS session new (`Full`) or resumed.
    Accepted(HandshakeKind),
    /// A request's head, as received.
    Request(String),
    /// The client closed the connection, this long after the last response.
    Closed { idle: Duration },
}

/// A TLS listener with our API server's rustls configuration (client CAs included, as the
/// API server always has them), answering every HTTP/1.1 request `200 {}` and reporting
/// what it sees; and the files a direct client needs.
struct TestServer {
    direct: DirectServer,
    seen: mpsc::UnboundedReceiver<Seen>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(24 * 3600);
        let ca = CertificateAuthority::generate("direct-client-test-ca", day).unwrap();
        let [cert, key, ca_file, token_file] = ["tls.crt", "tls.key", "ca.crt", "token"].map(|f| dir.path().join(f));
        ca.issue_serving(&["127.0.0.1".to_owned()], day).unwrap().write(&cert, &key).unwrap();
        std::fs::write(&ca_file, ca.cert_pem()).unwrap();
        std::fs::write(&token_file, TOKEN).unwrap();
        let client_cas = ClientCaVerifier::new(&[CaBundle::from_pem(ca.cert_pem().as_bytes()).unwrap()]).unwrap();
        let tls = ServerConfigBuilder::new(Arc::new(ReloadingCertificate::load(cert, key).unwrap()))
            .client_cas(Arc::new(client_cas))
            .build()
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap()).parse().unwrap();
        let (report, seen) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (acceptor, report) = (acceptor.clone(), report.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let kind = tls.get_ref().1.handshake_kind().unwrap();
                    let _ = report.send(Seen::Accepted(kind));
                    serve(tls, &report).await;
                });
            }
        });
        Self {
            direct: DirectServer { url, ca_file, token_file, tls_server_name: None, admin_url: None },
            seen,
            _dir: dir,
        }
    }

    async fn next(&mut self) -> Seen {
        tokio::time::timeout(PATIENCE, self.seen.recv()).await.expect("the server saw nothing more").unwrap()
    }
}

/// Answers each request on `tls` until the client closes it, then reports how long it had been
/// idle.
async fn serve(mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>, report: &mpsc::UnboundedSender<Seen>) {
    let mut last_response = Instant::now();
    let mut head = Vec::new();
    let mut buf = [0; 4096];
    loop {
        match tls.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        // The client's requests here are GETs: a head without a body.
        if !head.ends_with(b"\r\n\r\n") {
            continue;
        }
        let _ = report.send(Seen::Request(String::from_utf8_lossy(&head).into_owned()));
        head.clear();
        let response = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        if tls.write_all(response).await.is_err() || tls.flush().await.is_err() {
            break;
        }
        last_response = Instant::now();
    }
    let _ = report.send(Seen::Closed { idle: last_response.elapsed() });
}

async fn get(client: &kube::Client) {
    let request = Request::get("/healthz").body(Vec::new()).unwrap();
    assert_eq!(client.request_text(request).await.unwrap(), "{}");
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_bound_and_the_next_one_resumes_the_tls_session() {
    let mut server = TestServer::start().await;
    let bearer = Arc::new(BearerFile::new(server.direct.token_file.clone()));
    let client = direct_client(&server.direct, bearer).unwrap();

    // Requests in a row (a publish's patch then create) share one connection.
    get(&client).await;
    get(&client).await;
    assert!(matches!(server.next().await, Seen::Accepted(HandshakeKind::Full)));
    for _ in 0..2 {
        match server.next().await {
            Seen::Request(head) => {
                assert!(head.starts_with("GET /healthz HTTP/1.1\r\n"), "{head}");
                assert!(head.to_ascii_lowercase().contains(&format!("authorization: bearer {TOKEN}\r\n")), "{head}");
            }
            other => panic!("a second request on the same connection expected, the server saw {other:?}"),
        }
    }

    // Left idle, the connection is closed by the client, not before the bound.
    match server.next().await {
        Seen::Closed { idle } => {
            assert!(idle >= DIRECT_IDLE_CONNECTION_TIMEOUT, "closed after {idle:?} idle");
        }
        other => panic!("the idle connection closed expected, the server saw {other:?}"),
    }

    // The next request connects again, resuming the TLS session.
    get(&client).await;
    assert!(matches!(server.next().await, Seen::Accepted(HandshakeKind::Resumed)));
}
