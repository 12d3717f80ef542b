//! The API server over real TLS on loopback under the attacks of the hostile-clients review,
//! while a normal client keeps reading one object by name at a paced 100 GET/s:
//!
//! - **metric series**: 80,000 pipelined requests with made-up methods (`M<random> /x`);
//! - **stalled watchers**: 200 watches whose clients never read, while 1,000 objects are patched;
//! - **stalled watchers, large objects**: 10 such watches and 70 patches of a 1 MB object;
//! - **YAML**: bodies of `a: ` and 100,000 `[` (quadratic to the old parser), 4 at a time;
//! - **JSON patch**: a 1 KB object copied into itself 18 times (doubling), and a linear
//!   variant copying an 8 KB one 2,500 times, 4 at a time;
//! - **idle HTTP/2**: 900 connections that complete the handshake and never send a request,
//!   until the server's idle timeout (90 s) closes them.
//!
//! For each: the GET latency (p50/p99/max) during the attack next to the quiet baseline, the
//! process's RSS before the attack, its peak and after it, and whether the peak stays within
//! 64 MiB above the RSS before it (server and clients share the process; the stalled clients hold
//! nothing themselves, their unread bytes sit in kernel socket buffers), and what the server
//! reports. Phases run in order in one process, so what the allocator keeps from one phase
//! shows in the next one's "above idle"; name phases on the command line to run only those in
//! a fresh process (`methods`, `watchers`, `large`, `yaml`, `patch`, `idle-http2`).
//!
//! `cargo bench -p numaresources-tests --bench apiserver_attacks` prints the figures; nothing
//! asserts a time. Traffic goes to 127.0.0.1 only and every loop is bounded.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use numaresources_apiserver::Store;
use numaresources_testkit::https::{Connection, Protocol, connect};
use numaresources_tests::replicas::rss_kib;
use rustls::pki_types::ServerName;
use support::BenchServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const BASE: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";
const FLEET: usize = 1_000;
/// The normal client's pace.
const GETS_PER_SECOND: u64 = 100;
const BASELINE: Duration = Duration::from_secs(5);
const PIPELINED_REQUESTS: usize = 80_000;
const PIPELINE_CONNECTIONS: usize = 8;
const STALLED_WATCHERS: usize = 200;
const FLEET_PATCHES: usize = 5_000;
const LARGE_WATCHERS: usize = 10;
const LARGE_PATCHES: usize = 70;
const LARGE_OBJECT_BYTES: usize = 1 << 20;
/// How long each attack's aftermath is watched (the watchers' blocked limit is 10 s).
const SETTLE: Duration = Duration::from_secs(15);
/// What an attack may add to the idle RSS (the bar every attack is held to).
const RSS_BUDGET: u64 = 64 << 20;
const YAML_BODIES: usize = 100;
const YAML_BRACKETS: usize = 100_000;
const PATCH_BODIES: usize = 200;
/// Copies in the doubling patch (2^18 KB unbounded) and in the linear one.
const DOUBLING_COPIES: usize = 18;
const LINEAR_COPIES: usize = 2_500;
/// The object the patches copy: 1 KB for the doubling one, 8 KB for the linear one (2,500
/// copies: 20 MB unbounded, under the 10,000-operation limit).
const DOUBLING_VALUE_BYTES: usize = 1024;
const LINEAR_VALUE_BYTES: usize = 8 * 1024;
/// Attack connections at once for the YAML and JSON-patch phases.
const ATTACKERS: usize = 4;
const IDLE_HTTP2_CONNECTIONS: usize = 900;
/// The server's idle timeout (`numaresources_runtime::DEFAULT_IDLE_TIMEOUT`) and a margin.
const IDLE_WAIT: Duration = Duration::from_secs(100);

fn nrt(name: &str, filler: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                       {"name": "filler", "value": filler}],
        "zones": [{"name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": 10}],
                   "resources": [{"name": "cpu", "capacity": 32, "allocatable": 30, "available": 12},
                                 {"name": "memory", "capacity": "256Gi", "allocatable": "250Gi", "available": "100Gi"}]},
                  {"name": "node-1", "type": "Node", "costs": [{"name": "node-1", "value": 10}],
                   "resources": [{"name": "cpu", "capacity": 32, "allocatable": 30, "available": 30},
                                 {"name": "memory", "capacity": "256Gi", "allocatable": "250Gi", "available": "200Gi"}]}]
    })
}

fn rss_bytes() -> u64 {
    rss_kib("self").map_or(0, |kib| kib * 1024)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// Samples RSS every 50 ms; the peak since the last reset.
struct RssPeak(Arc<AtomicU64>);

impl RssPeak {
    fn start() -> Self {
        let peak = Arc::new(AtomicU64::new(rss_bytes()));
        let sampled = Arc::clone(&peak);
        tokio::spawn(async move {
            loop {
                sampled.fetch_max(rss_bytes(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self(peak)
    }

    fn reset(&self) {
        self.0.store(rss_bytes(), Ordering::Relaxed);
    }

    fn peak(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

struct Tls {
    connector: TlsConnector,
    connector_h2: TlsConnector,
    address: SocketAddr,
    ca_pem: String,
}

impl Tls {
    async fn connect(&self) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.address).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        self.connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap()
    }

    /// An HTTP/2 connection that completes its handshake (ALPN `h2`, the preface and SETTINGS)
    /// and then sends nothing; `closed` counts it once the server has closed it.
    async fn idle_http2(&self, closed: Arc<AtomicUsize>) -> http2::SendRequest<Full<Bytes>> {
        let tcp = TcpStream::connect(self.address).await.unwrap();
        let tls = self.connector_h2.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
        let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
        tokio::spawn(async move {
            let _ = connection.await;
            closed.fetch_add(1, Ordering::Relaxed);
        });
        sender
    }

    async fn http1(&self) -> Connection {
        connect(self.address, &self.ca_pem, Protocol::Http1, None).await
    }
}

/// An answer's status to `body` sent as `content_type`.
async fn send(connection: &mut Connection, method: &str, path: &str, content_type: &str, body: Bytes) -> StatusCode {
    connection.send(method, path, &[("content-type", content_type)], body).await.status
}

/// The normal client: paced GETs by name on a kept-alive connection, latencies collected
/// until taken.
struct Prober {
    latencies: Arc<Mutex<Vec<Duration>>>,
    failures: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Prober {
    async fn start(tls: &Tls) -> Self {
        let mut sender = tls.http1().await;
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let failures = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, failed, stopping) = (Arc::clone(&latencies), Arc::clone(&failures), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_secs(1) / GETS_PER_SECOND as u32);
            let mut n = 0usize;
            while !stopping.load(Ordering::Relaxed) {
                ticker.tick().await;
                let start = Instant::now();
                let status =
                    sender.send("GET", &format!("{BASE}/worker-{:04}", n % FLEET), &[], Bytes::new()).await.status;
                let elapsed = start.elapsed();
                if status == StatusCode::OK {
                    kept.lock().await.push(elapsed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                n += 7;
            }
        });
        Self { latencies, failures, stop }
    }

    /// The latencies since the last call, as `p50 / p99 / max (n GETs, k failed)`.
    async fn take(&self) -> String {
        let mut taken = std::mem::take(&mut *self.latencies.lock().await);
        taken.sort_unstable();
        let at = |q: f64| taken.get(((taken.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied();
        let ms = |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3));
        format!(
            "GET p50 {} / p99 {} / max {} ({} GETs, {} failed)",
            ms(at(0.5)),
            ms(at(0.99)),
            ms(at(1.0)),
            taken.len(),
            self.failures.swap(0, Ordering::Relaxed)
        )
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A watch whose client sends the request and never reads a byte of the answer.
async fn stalled_watch(tls: &Tls) -> TlsStream<TcpStream> {
    let mut stream = tls.connect().await;
    let request = format!("GET {BASE}?watch=true HTTP/1.1\r\nhost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// The text of `/metrics`.
async fn metrics(tls: &Tls) -> String {
    let answer = tls.http1().await.send("GET", "/metrics", &[], Bytes::new()).await;
    String::from_utf8_lossy(&answer.body).into_owned()
}

/// The line of `/metrics` that starts with `name`.
async fn server_metric(tls: &Tls, name: &str) -> String {
    metrics(tls).await.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_owned()
}

/// How many request series `/metrics` holds.
async fn request_series(tls: &Tls) -> usize {
    metrics(tls).await.lines().filter(|l| l.starts_with("numaresources_apiserver_requests_total{")).count()
}

/// The server, the normal client and the RSS sampler every phase reports with.
struct Bench {
    tls: Tls,
    prober: Prober,
    rss: RssPeak,
    /// RSS with the fleet loaded and no attack.
    idle: u64,
}

impl Bench {
    /// An attack begins: the RSS before it, and its peak from now on.
    fn begin(&self) -> u64 {
        let before = rss_bytes();
        self.rss.reset();
        before
    }

    /// One attack's line: the GETs during it, RSS before it (`before`), at its peak and now, and
    /// whether the peak stayed within [`RSS_BUDGET`] above `before`.
    async fn report(&self, what: &str, before: u64, extra: String) {
        let (peak, after) = (self.rss.peak(), rss_bytes());
        let added = peak.saturating_sub(before);
        println!(
            "{what}: {}; RSS before {}, peak {} (+{} over before, within 64 MiB: {}; {} above idle), after {}; {extra}",
            self.prober.take().await,
            mib(before),
            mib(peak),
            mib(added),
            if added <= RSS_BUDGET { "yes" } else { "NO" },
            mib(peak.saturating_sub(self.idle)),
            mib(after),
        );
    }
}

/// Opens `watchers` watches that never read, then sends `patches` merge patches (`patch(k)`: the
/// object's name and the patch); the seconds the patches took, and the watches.
async fn patched_while_watched(
    tls: &Tls,
    writer: &mut Connection,
    watchers: usize,
    patches: usize,
    patch: impl Fn(usize) -> (String, serde_json::Value),
) -> (f64, Vec<TlsStream<TcpStream>>) {
    let mut stalled = Vec::new();
    for _ in 0..watchers {
        stalled.push(stalled_watch(tls).await);
    }
    let start = Instant::now();
    for k in 0..patches {
        let (name, patch) = patch(k);
        let (path, body) = (format!("{BASE}/{name}"), Bytes::from(serde_json::to_vec(&patch).unwrap()));
        assert_eq!(send(writer, "PATCH", &path, "application/merge-patch+json", body).await, StatusCode::OK);
    }
    (start.elapsed().as_secs_f64(), stalled)
}

/// The server's watch figures once the stalled watchers have had [`SETTLE`] to be ended.
async fn settled_watches(tls: &Tls) -> String {
    tokio::time::sleep(SETTLE).await;
    let open = server_metric(tls, "numaresources_apiserver_watches ").await;
    let ended = server_metric(tls, "numaresources_apiserver_terminated_watches_total").await;
    format!("after {} s: {open}, {ended}", SETTLE.as_secs())
}

/// Whether the command line asks for `phase` (no phase named: every one).
fn wanted(phase: &str) -> bool {
    let named: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    named.is_empty() || named.iter().any(|n| n == phase)
}

/// A request: its method, path, content type and body.
type Call = (&'static str, String, &'static str, Bytes);

/// Sends `bodies` requests made by `request`, `ATTACKERS` connections at a time; the answers'
/// codes and how many of each.
async fn flood(
    tls: &Tls,
    bodies: usize,
    request: impl Fn(usize) -> Call + Clone + Send + 'static,
) -> std::collections::BTreeMap<u16, usize> {
    let mut tasks = Vec::new();
    for attacker in 0..ATTACKERS {
        let mut sender = tls.http1().await;
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            for k in (attacker..bodies).step_by(ATTACKERS) {
                let (method, path, content_type, body) = request(k);
                codes.push(send(&mut sender, method, &path, content_type, body).await.as_u16());
            }
            codes
        }));
    }
    let mut counts = std::collections::BTreeMap::new();
    for task in tasks {
        for code in task.await.unwrap() {
            *counts.entry(code).or_default() += 1;
        }
    }
    counts
}

/// A JSON patch that adds an object at `/zz` and then copies `/zz` `copies` times: into itself
/// (each copy doubles it) or side by side (each copy adds its size).
fn copy_patch(copies: usize, doubling: bool) -> Bytes {
    let value_bytes = if doubling { DOUBLING_VALUE_BYTES } else { LINEAR_VALUE_BYTES };
    let mut ops = vec![serde_json::json!({"op": "add", "path": "/zz", "value": {"s": "x".repeat(value_bytes)}})];
    for n in 0..copies {
        let path = if doubling { format!("/zz/c{n}") } else { format!("/zz{n}") };
        ops.push(serde_json::json!({"op": "copy", "from": "/zz", "path": path}));
    }
    Bytes::from(serde_json::to_vec(&ops).unwrap())
}

/// Creates `object`.
async fn create(writer: &mut Connection, object: &serde_json::Value) {
    let body = Bytes::from(serde_json::to_vec(object).unwrap());
    assert_eq!(send(writer, "POST", BASE, "application/json", body).await, StatusCode::CREATED);
}

/// A JSON patch of worker `k` (of the fleet) with `body`.
fn json_patch(k: usize, body: Bytes) -> Call {
    ("PATCH", format!("{BASE}/worker-{:04}", k % FLEET), "application/json-patch+json", body)
}

/// 80,000 requests with made-up methods, pipelined on a few connections.
async fn made_up_methods(tls: &Tls) {
    let per_connection = PIPELINED_REQUESTS / PIPELINE_CONNECTIONS;
    let mut tasks = Vec::new();
    for c in 0..PIPELINE_CONNECTIONS {
        let mut stream = tls.connect().await;
        tasks.push(tokio::spawn(async move {
            let (mut reader, mut writer) = tokio::io::split(&mut stream);
            let write = async {
                let mut seed = 0x9e37_79b9_u64 ^ c as u64;
                for batch in 0..per_connection / 100 {
                    let mut text = String::new();
                    for _ in 0..100 {
                        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        let method: String = (0..8).map(|k| (b'A' + ((seed >> (k * 5)) % 26) as u8) as char).collect();
                        text.push_str(&format!("M{method} /x HTTP/1.1\r\nhost: localhost\r\n\r\n"));
                    }
                    if batch + 1 == per_connection / 100 {
                        text.push_str("GET /version HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
                    }
                    writer.write_all(text.as_bytes()).await.unwrap();
                }
            };
            let read = async {
                let mut sink = vec![0u8; 64 * 1024];
                while reader.read(&mut sink).await.is_ok_and(|n| n > 0) {}
            };
            tokio::join!(write, read);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = Arc::new(Store::default());
        let server = BenchServer::start(&store).await;
        let tls = Tls {
            connector: server.connector(b"http/1.1"),
            connector_h2: server.connector(b"h2"),
            address: server.address,
            ca_pem: server.ca_pem.clone(),
        };

        let mut writer = tls.http1().await;
        for i in 0..FLEET {
            create(&mut writer, &nrt(&format!("worker-{i:04}"), "")).await;
        }
        let object_bytes = store.get("worker-0000").unwrap().json.len();

        let prober = Prober::start(&tls).await;
        tokio::time::sleep(BASELINE).await;
        let idle = rss_bytes();
        let bench = Bench { tls, prober, rss: RssPeak::start(), idle };
        println!(
            "numaresources-apiserver over TLS on {} (defaults: watch buffer 64 KiB, blocked limit 10 s, \
             write stall 60 s), {FLEET} objects of {object_bytes} bytes; one process, 2-worker runtime; idle RSS {}",
            server.address,
            mib(idle)
        );
        println!("quiet: {}", bench.prober.take().await);
        let tls = &bench.tls;

        if wanted("methods") {
            // (5) Made-up methods.
            let before = bench.begin();
            let start = Instant::now();
            made_up_methods(tls).await;
            let what = format!("{PIPELINED_REQUESTS} pipelined made-up methods ({:.1} s)", start.elapsed().as_secs_f64());
            let others = server_metric(tls, "numaresources_apiserver_requests_total{verb=\"other\"").await;
            let series = request_series(tls).await;
            bench.report(&what, before, format!("{series} request series on /metrics; {others}")).await;
        }
        if wanted("watchers") {
            // (6a) 200 watches that never read, while the fleet is patched.
            let before = bench.begin();
            let patch = |k: usize| {
                let patch = serde_json::json!({"attributes": [{"name": "filler", "value": format!("patch {k}")}]});
                (format!("worker-{:04}", k % FLEET), patch)
            };
            let (seconds, stalled) = patched_while_watched(tls, &mut writer, STALLED_WATCHERS, FLEET_PATCHES, patch).await;
            let what = format!(
                "{STALLED_WATCHERS} watches that never read (snapshot of {FLEET} objects each), {FLEET_PATCHES} patches in {seconds:.1} s"
            );
            bench.report(&what, before, settled_watches(tls).await).await;
            drop(stalled);
        }

        if wanted("large") {
            // (6b) 10 watches that never read, 70 patches of a 1 MB object; first the same patches
            // with no watcher, to tell what the writes cost from what the watchers hold.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let before = bench.begin();
            let big = "x".repeat(LARGE_OBJECT_BYTES);
            create(&mut writer, &nrt("large", &big)).await;
            let patch = |k: usize| {
                ("large".to_owned(), serde_json::json!({"attributes": [{"name": "filler", "value": format!("{k}{big}")}]}))
            };
            let (seconds, _) = patched_while_watched(tls, &mut writer, 0, LARGE_PATCHES, patch).await;
            let what = format!("no watcher, {LARGE_PATCHES} patches of a 1 MiB object in {seconds:.1} s");
            bench.report(&what, before, "the writes alone".to_owned()).await;
            let before = bench.begin();
            let (seconds, stalled) = patched_while_watched(tls, &mut writer, LARGE_WATCHERS, LARGE_PATCHES, patch).await;
            let what =
                format!("{LARGE_WATCHERS} watches that never read, {LARGE_PATCHES} patches of a 1 MiB object in {seconds:.1} s");
            bench.report(&what, before, settled_watches(tls).await).await;
            drop(stalled);
        }

        if wanted("yaml") {
            // (1) YAML bodies that cost the old parser quadratic CPU.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let before = bench.begin();
            let bomb = Bytes::from(format!("a: {}", "[".repeat(YAML_BRACKETS)));
            let start = Instant::now();
            let codes = flood(tls, YAML_BODIES, move |_| ("POST", BASE.to_owned(), "application/yaml", bomb.clone())).await;
            let what = format!(
                "{YAML_BODIES} YAML bodies of {YAML_BRACKETS} brackets, {ATTACKERS} at a time, {:.1} s",
                start.elapsed().as_secs_f64()
            );
            bench.report(&what, before, format!("answers {codes:?}")).await;
        }
        if wanted("patch") {
            // (2) JSON patches whose copies double an object, or add to it until past the body limit.
            let before = bench.begin();
            let (doubling, linear) = (copy_patch(DOUBLING_COPIES, true), copy_patch(LINEAR_COPIES, false));
            let start = Instant::now();
            let doubled = flood(tls, PATCH_BODIES, move |k| json_patch(k, doubling.clone())).await;
            let lined = flood(tls, PATCH_BODIES / 4, move |k| json_patch(k, linear.clone())).await;
            let what = format!(
                "{PATCH_BODIES} doubling JSON patches ({DOUBLING_COPIES} copies of 1 KB) and {} linear ones ({LINEAR_COPIES} copies of 8 KB), {ATTACKERS} at a time, {:.1} s",
                PATCH_BODIES / 4,
                start.elapsed().as_secs_f64()
            );
            bench.report(&what, before, format!("answers: doubling {doubled:?}, linear {lined:?}")).await;
        }
        if wanted("idle-http2") {
            // (6c) Idle HTTP/2 connections, held until the server's idle timeout closes them. Last:
            // the writer's kept-alive HTTP/1.1 connection does not outlive this wait.
            let before = bench.begin();
            let closed = Arc::new(AtomicUsize::new(0));
            let mut idle_connections = Vec::new();
            let start = Instant::now();
            for _ in 0..IDLE_HTTP2_CONNECTIONS {
                idle_connections.push(tls.idle_http2(Arc::clone(&closed)).await);
            }
            let opened = start.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs(5)).await;
            let held = rss_bytes();
            let what = format!("{IDLE_HTTP2_CONNECTIONS} idle HTTP/2 connections (opened in {opened:.1} s), held 5 s");
            let extra = format!("RSS while held {}; {} closed so far", mib(held), closed.load(Ordering::Relaxed));
            bench.report(&what, before, extra).await;
            tokio::time::sleep(IDLE_WAIT).await;
            let status = tls.http1().await.send("GET", &format!("{BASE}/worker-0001"), &[], Bytes::new()).await.status;
            let closed = closed.load(Ordering::Relaxed);
            let what = format!("the same after {} s", IDLE_WAIT.as_secs());
            let extra = format!("{closed} of {IDLE_HTTP2_CONNECTIONS} closed by the server; a new client's GET: {status}");
            bench.report(&what, held, extra).await;
            drop(idle_connections);
        }
    });
}
