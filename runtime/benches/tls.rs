//! What TLS costs our servers: handshakes, requests over kept-alive connections, the resolver's
//! per-handshake lookup, reloads and certificate generation.
//!
//! `cargo bench -p numaresources-runtime` prints one line per case. Client and server share the
//! machine (and its cores), so handshake rates include the client's half of the work. Figures go
//! to BENCHMARKS.md; nothing here asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // a benchmark prints its figures

use numaresources_testkit::median;

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use numaresources_runtime::serve;
use numaresources_runtime::tls::{
    CaBundle, CertificateAuthority, ClientCaVerifier, PemPair, ReloadingCertificate, ServerConfigBuilder,
    ServingCertificate,
};
use rustls::ClientConfig;
use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const HOUR: Duration = Duration::from_secs(3600);

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("bench-ca", 24 * HOUR).unwrap();
    let pair = ca.issue_serving(&["localhost".to_owned()], HOUR).unwrap();
    pair.write(&dir.path().join("tls.crt"), &dir.path().join("tls.key")).unwrap();
    let certificate = ReloadingCertificate::load(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap();

    println!("numaresources-runtime: ECDSA P-256 serving certificate, ring provider, loopback");
    resolver(&certificate);
    reload_and_parse(&certificate, &pair);
    generation(&ca);

    runtime.block_on(async {
        let app = Router::new().route("/healthz", get(|| async { "ok" }));
        let plain_tls = ServerConfigBuilder::new(Arc::new(certificate.clone())).build().unwrap();
        let plain = start(plain_tls, app.clone()).await;

        let client_ca = CertificateAuthority::generate("bench-client-ca", 24 * HOUR).unwrap();
        let verifier =
            Arc::new(ClientCaVerifier::new(&[CaBundle::from_pem(client_ca.cert_pem().as_bytes()).unwrap()]).unwrap());
        let mutual_tls = ServerConfigBuilder::new(Arc::new(certificate.clone())).client_cas(verifier).build().unwrap();
        let mutual = start(mutual_tls, app).await;
        let identity = client_ca.issue_client("front-proxy-client", &[], HOUR).unwrap();

        let tls13 = client(ca.cert_pem(), None, &rustls::version::TLS13, &[]);
        let tls12 = client(ca.cert_pem(), None, &rustls::version::TLS12, &[]);
        let with_cert = client(ca.cert_pem(), Some(&identity), &rustls::version::TLS13, &[]);

        handshakes("TLS 1.3 handshakes, 1 client", plain, &tls13, 1, 600).await;
        handshakes("TLS 1.3 handshakes, 8 concurrent clients", plain, &tls13, 8, 150).await;
        handshakes("TLS 1.2 handshakes, 1 client", plain, &tls12, 1, 600).await;
        handshakes("TLS 1.3 handshakes with a client certificate, 1 client", mutual, &with_cert, 1, 600).await;

        let h1 = client(ca.cert_pem(), None, &rustls::version::TLS13, &[b"http/1.1"]);
        let h2 = client(ca.cert_pem(), None, &rustls::version::TLS13, &[b"h2"]);
        new_connection_requests("new connection + GET /healthz (HTTP/1.1)", plain, &h1, 400).await;
        keep_alive_requests("GET /healthz over one kept-alive connection, HTTP/1.1", plain, &h1, 10_000).await;
        keep_alive_requests("GET /healthz over one kept-alive connection, HTTP/2", plain, &h2, 10_000).await;
    });
}

/// The resolver's whole per-handshake work.
fn resolver(certificate: &ReloadingCertificate) {
    let rounds: Vec<f64> = (0..7)
        .map(|_| {
            let iterations = 2_000_000;
            let start = Instant::now();
            for _ in 0..iterations {
                black_box(certificate.certified_key());
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(iterations)
        })
        .collect();
    println!("resolver lookup (ReloadingCertificate::certified_key): {:.1} ns (median of 7)", median(rounds));
}

fn reload_and_parse(certificate: &ReloadingCertificate, pair: &PemPair) {
    let unchanged = median::median_per_iteration(7, 2_000, || {
        black_box(certificate.reload().unwrap());
    })
    .as_secs_f64();
    println!("reload with unchanged files (read both, hash, compare): {:.1} µs", unchanged * 1e6);
    let parse = median::median_per_iteration(7, 2_000, || {
        black_box(ServingCertificate::from_pem(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes()).unwrap());
    })
    .as_secs_f64();
    println!("parse and check a new pair (PEM, x509, key load, key match): {:.1} µs", parse * 1e6);
}

fn generation(ca: &CertificateAuthority) {
    let issue = median::median_per_iteration(5, 200, || {
        black_box(ca.issue_serving(&["svc.ns.svc".to_owned(), "svc.ns.svc.cluster.local".to_owned()], HOUR).unwrap());
    })
    .as_secs_f64();
    println!("CA issues a serving certificate (key generation + signing): {:.1} µs", issue * 1e6);
}

async fn start(tls: Arc<rustls::ServerConfig>, app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, tls, app, std::future::pending()));
    addr
}

fn client(
    roots_pem: &str,
    identity: Option<&PemPair>,
    version: &'static rustls::SupportedProtocolVersion,
    alpn: &[&[u8]],
) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(roots_pem.as_bytes()).unwrap()).unwrap();
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(pair) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(pair.cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    // Every handshake a full one: what a new client (or a restarted aggregator) costs.
    config.resumption = Resumption::disabled();
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Arc::new(config)
}

async fn connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    TlsConnector::from(Arc::clone(config)).connect(name, tcp).await.unwrap()
}

async fn handshakes(label: &str, addr: SocketAddr, config: &Arc<ClientConfig>, clients: usize, each: usize) {
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let config = Arc::clone(config);
            tokio::spawn(async move {
                for _ in 0..each {
                    drop(connect(addr, &config).await);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let total = clients * each;
    println!(
        "{label}: {:.0} handshakes/s ({total} in {elapsed:.2} s, {:.2} ms each on average per client)",
        total as f64 / elapsed,
        elapsed * 1e3 * clients as f64 / total as f64
    );
}

async fn new_connection_requests(label: &str, addr: SocketAddr, config: &Arc<ClientConfig>, count: usize) {
    let start = Instant::now();
    for _ in 0..count {
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(connect(addr, config).await)).await.unwrap();
        let conn = tokio::spawn(conn);
        let response = sender.send_request(request()).await.unwrap();
        black_box(response.into_body().collect().await.unwrap());
        drop(sender);
        let _ = conn.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!("{label}: {:.0} requests/s ({:.2} ms each)", count as f64 / elapsed, elapsed * 1e3 / count as f64);
}

async fn keep_alive_requests(label: &str, addr: SocketAddr, config: &Arc<ClientConfig>, count: usize) {
    let tls = connect(addr, config).await;
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let mut latencies = Vec::with_capacity(count);
    let start = Instant::now();
    if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.unwrap();
        tokio::spawn(conn);
        for _ in 0..count {
            let begin = Instant::now();
            sender.ready().await.unwrap();
            let response = sender.send_request(request_h2()).await.unwrap();
            black_box(response.into_body().collect().await.unwrap());
            latencies.push(begin.elapsed());
        }
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        for _ in 0..count {
            let begin = Instant::now();
            sender.ready().await.unwrap();
            let response = sender.send_request(request()).await.unwrap();
            black_box(response.into_body().collect().await.unwrap());
            latencies.push(begin.elapsed());
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort();
    let at = |fraction: f64| latencies[((latencies.len() as f64 * fraction) as usize).min(latencies.len() - 1)];
    println!(
        "{label}: {:.0} requests/s sequential, p50 {:.0} µs, p99 {:.0} µs",
        count as f64 / elapsed,
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    );
}

fn request() -> http::Request<Empty<Bytes>> {
    http::Request::get("/healthz").header(http::header::HOST, "localhost").body(Empty::new()).unwrap()
}

fn request_h2() -> http::Request<Empty<Bytes>> {
    http::Request::get("https://localhost/healthz").body(Empty::new()).unwrap()
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
