//! Pod admissions per second and their latency over TLS keep-alive connections, against the
//! design target (≥ 15,000/s, p99 ≤ 5 ms on a 2-core machine), plus the in-process cost of one
//! admission (router only, no sockets) for reference.
//!
//! The server is the real one: `numaresources_runtime::serve` with a reloading certificate, the
//! webhook router, synced caches with routing in mode ExclusiveResources. The body is a captured
//! kube-apiserver review (`tests/fixtures/admission/`). Client and server share the machine's two
//! cores (2 tokio workers), so the rates include the client's work.
//!
//! `cargo bench -p numaresources-webhook --bench admission_tls`. Figures go to BENCHMARKS.md;
//! nothing here asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // a benchmark prints its figures

use numaresources_testkit::tls as shared;

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use numaresources_api::operator::{
    NUMAResourcesScheduler, NUMAResourcesSchedulerSpec, PodRouting, PodRoutingMode, SCHEDULER_SINGLETON_NAME,
};
use numaresources_runtime::serve;
use numaresources_runtime::tls::{CertificateAuthority, ReloadingCertificate, ServerConfigBuilder};
use numaresources_webhook::{ClusterCache, Config, MUTATE_PODS_PATH, Webhook};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tower::ServiceExt;

/// Requests per measured case (after a warm-up of a tenth as many).
const REQUESTS: usize = 120_000;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let webhook = webhook();
        let routed = fixture("pod-create-guaranteed-integral.json");
        let left_alone = fixture("pod-create-besteffort.json");
        println!("numaresources-webhook: pod admissions, {} requests per case", REQUESTS);
        in_process(&webhook, "routed pod (Guaranteed, 2 CPUs)", &routed).await;
        in_process(&webhook, "pod left alone (BestEffort)", &left_alone).await;

        let dir = tempfile::tempdir().unwrap();
        let (addr, ca) = start(webhook, dir.path()).await;
        for (label, body, patched) in [("routed pod", &routed, true), ("pod left alone", &left_alone, false)] {
            for (connections, streams) in [(1, 8), (2, 16)] {
                let config = shared::client(ca.cert_pem(), None, &[b"h2"]);
                let what = format!("{label}, HTTP/2, {connections} connection(s) × {} streams", streams / connections);
                load(&what, addr, config, connections, streams, body, patched).await;
            }
            let config = shared::client(ca.cert_pem(), None, &[b"http/1.1"]);
            load(&format!("{label}, HTTP/1.1, 8 kept-alive connections"), addr, config, 8, 8, body, patched).await;
        }
    });
}

fn fixture(name: &str) -> Bytes {
    let path = format!("{}/tests/fixtures/admission/{name}", env!("CARGO_MANIFEST_DIR"));
    let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // Compact, as kube-apiserver sends it.
    Bytes::from(serde_json::to_vec(&value).unwrap())
}

fn webhook() -> Arc<Webhook> {
    let (cluster, mut feeds) = ClusterCache::new();
    let spec = NUMAResourcesSchedulerSpec {
        scheduler_image: "quay.io/openshift-kni/scheduler-plugins:4.18-snapshot".into(),
        pod_routing: Some(PodRouting { mode: Some(PodRoutingMode::ExclusiveResources), namespace_selector: None }),
        ..NUMAResourcesSchedulerSpec::default()
    };
    feeds.set_scheduler(Some(NUMAResourcesScheduler::new(SCHEDULER_SINGLETON_NAME, spec)));
    // A cluster-sized cache: 2,000 namespaces and 1,000 nodes.
    let names: Vec<String> = (0..2_000).map(|i| format!("ns-{i}")).collect();
    let mut namespaces: Vec<(&str, _)> = names.iter().map(|n| (n.as_str(), Default::default())).collect();
    namespaces.push(("numa-workloads", Default::default()));
    feeds.set_namespaces(namespaces);
    let nodes: Vec<String> = (0..1_000).map(|i| format!("worker-{i}")).collect();
    feeds.set_nodes(nodes.iter().map(|n| (n.as_str(), Default::default())));
    Webhook::with_cluster(Config::new("numaresources").expect("a valid namespace"), cluster)
}

/// Our code's time per admission: the router on one task, no sockets.
async fn in_process(webhook: &Arc<Webhook>, label: &str, body: &Bytes) {
    let app = webhook.router();
    let mut rounds = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        for _ in 0..10_000 {
            let request = http::Request::post(MUTATE_PODS_PATH)
                .header("content-type", "application/json")
                .body(Body::from(body.clone()))
                .unwrap();
            let response = app.clone().oneshot(request).await.unwrap();
            black_box(response.into_body().collect().await.unwrap().to_bytes());
        }
        rounds.push(start.elapsed().as_secs_f64() / 10_000.0);
    }
    rounds.sort_by(f64::total_cmp);
    println!("in process, {label}: {:.1} µs per admission (median of 7 × 10,000)", rounds[3] * 1e6);
}

async fn start(webhook: Arc<Webhook>, dir: &std::path::Path) -> (SocketAddr, CertificateAuthority) {
    let ca = CertificateAuthority::generate("bench-ca", Duration::from_secs(3600)).unwrap();
    let pair = ca.issue_serving(&["localhost".to_owned()], Duration::from_secs(3600)).unwrap();
    pair.write(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
    let certificate = ReloadingCertificate::load(dir.join("tls.crt"), dir.join("tls.key")).unwrap();
    let tls = ServerConfigBuilder::new(Arc::new(certificate)).build().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, tls, webhook.router(), std::future::pending()));
    (addr, ca)
}

#[derive(Clone)]
enum Sender {
    H1(Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

async fn connect(addr: SocketAddr, config: Arc<ClientConfig>) -> Sender {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = TlsConnector::from(config).connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    if h2 {
        let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.unwrap();
        tokio::spawn(connection);
        Sender::H2(sender)
    } else {
        let (sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(connection);
        Sender::H1(Arc::new(tokio::sync::Mutex::new(sender)))
    }
}

/// One admission; checks the answer is a 200 review (patched when expected).
async fn admit(sender: &mut Sender, body: &Bytes, patched: bool) {
    let response = match sender {
        Sender::H1(sender) => {
            let request = http::Request::post(format!("{MUTATE_PODS_PATH}?timeout=10s"))
                .header("host", "localhost")
                .header("content-type", "application/json")
                .body(Full::new(body.clone()))
                .unwrap();
            let mut sender = sender.lock().await;
            sender.ready().await.unwrap();
            sender.send_request(request).await.unwrap()
        }
        Sender::H2(sender) => {
            let request = http::Request::post(format!("https://localhost{MUTATE_PODS_PATH}?timeout=10s"))
                .header("content-type", "application/json")
                .body(Full::new(body.clone()))
                .unwrap();
            sender.ready().await.unwrap();
            sender.send_request(request).await.unwrap()
        }
    };
    assert_eq!(response.status(), 200);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let has_patch = bytes.windows(9).any(|w| w == b"JSONPatch");
    assert_eq!(has_patch, patched, "unexpected answer: {}", String::from_utf8_lossy(&bytes));
}

/// `workers` tasks in all, spread over `connections` connections, each sending its share of
/// [`REQUESTS`] back to back.
async fn load(
    label: &str,
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    connections: usize,
    workers: usize,
    body: &Bytes,
    patched: bool,
) {
    let mut senders = Vec::new();
    for _ in 0..connections {
        senders.push(connect(addr, config.clone()).await);
    }
    let run = |count: usize| {
        let tasks: Vec<_> = (0..workers)
            .map(|i| {
                let mut sender = senders[i % connections].clone();
                let body = body.clone();
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(count / workers);
                    for _ in 0..count / workers {
                        let begin = Instant::now();
                        admit(&mut sender, &body, patched).await;
                        latencies.push(begin.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        async move {
            let mut all = Vec::new();
            for task in tasks {
                all.extend(task.await.unwrap());
            }
            all
        }
    };
    run(REQUESTS / 10).await; // warm-up
    let start = Instant::now();
    let mut latencies = run(REQUESTS).await;
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)].as_secs_f64() * 1e3;
    println!(
        "{label}: {:.0} admissions/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len() as f64 / elapsed,
        at(0.50),
        at(0.99),
        at(1.0)
    );
}
