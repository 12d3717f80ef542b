//! The API server over real TLS on loopback, as its clients see it:
//!
//! - GET by name over kept-alive connections at a paced 5,000 requests/s for 10 s from 8
//!   connections, HTTP/1.1 and HTTP/2 (design target: p99 ≤ 1 ms);
//! - watch fan-out: 100 watchers, each its own connection and streaming `?watch=true`, while
//!   writers send 1,000 merge patches per second for 10 s, each changing an attribute that
//!   carries its sequence number (design target: p99 delivery ≤ 50 ms, no drops).
//!
//! The fleet (5,000 objects) is built from the exporter's 2-NUMA sysfs fixture (capacity zones)
//! with varied allocatable and available amounts. Server and clients share one 2-worker tokio
//! runtime, and so the machine's cores: client work (TLS, parsing) is inside every figure.
//!
//! `cargo bench -p numaresources-tests --bench apiserver_tls` prints the figures; nothing asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

mod support;
#[allow(dead_code)] // the agent half serves the tests
#[path = "../tests/sysfs_fixture/mod.rs"]
mod sysfs_fixture;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use numaresources_api::nrt::{AttributeInfo, NodeResourceTopology, Zone};
use numaresources_api::quantity::Quantity;
use numaresources_apiserver::Store;
use numaresources_testkit::https::{Connection, Protocol, connect};
use support::BenchServer;
use tokio::time::{Instant, MissedTickBehavior};

const BASE: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";
const FLEET: usize = 5_000;
const GIB: i64 = 1 << 30;

const GET_RATE: u32 = 5_000;
const GET_CONNECTIONS: u32 = 8;
const RUN: Duration = Duration::from_secs(10);

const WATCHERS: usize = 100;
const WRITERS: usize = 4;
const WRITES_PER_SECOND: u64 = 1_000;
/// The objects the fan-out writers patch, in turn.
const PATCHED_OBJECTS: usize = 1_000;

// ---------------------------------------------------------------------------------------------
// The fleet.

/// The capacity zones of the 2-NUMA fixture (2 zones, 4 resources each).
fn fixture_zones() -> Vec<Zone> {
    let dir = tempfile::tempdir().unwrap();
    let machine =
        numaresources_rte::sysfs::discover(sysfs_fixture::unpack_intel_2numa_24cpu(dir.path())).unwrap().machine;
    numaresources_rte::sysfs::capacity_zones(&machine)
}

/// Worker `i`: the fixture's zones with 2 CPUs and 2 GiB reserved per zone, and a varied share
/// of the rest taken by exclusive allocations.
fn worker(zones: &[Zone], i: usize) -> NodeResourceTopology {
    let mut nrt = NodeResourceTopology::new(&format!("worker-{i:05}"));
    nrt.zones = zones.to_vec();
    for (k, zone) in nrt.zones.iter_mut().enumerate() {
        for resource in &mut zone.resources {
            let capacity = resource.capacity.as_i64().unwrap_or(0);
            let (allocatable, available) = match resource.name.as_str() {
                "cpu" => {
                    let allocatable = capacity - 2;
                    (allocatable, allocatable - ((i * 3 + k) % 9) as i64)
                }
                "memory" => {
                    let allocatable = capacity - 2 * GIB;
                    (allocatable, allocatable - ((i * 7 + k) % 16) as i64 * GIB)
                }
                _ => (capacity, capacity),
            };
            resource.allocatable = Quantity::from_i64(allocatable);
            resource.available = Quantity::from_i64(available);
        }
    }
    nrt.attributes = attributes(&format!("{i:016x}"), None);
    nrt
}

fn attributes(fingerprint: &str, sequence: Option<u64>) -> Vec<AttributeInfo> {
    let mut attributes = vec![
        AttributeInfo::new("nodeTopologyPodsFingerprint", format!("pfp0v001{fingerprint}")),
        AttributeInfo::new("topologyManagerPolicy", "single-numa-node"),
        AttributeInfo::new("topologyManagerScope", "pod"),
    ];
    if let Some(sequence) = sequence {
        attributes.push(AttributeInfo::new("benchSequence", format!("seq:{sequence}")));
    }
    attributes
}

// ---------------------------------------------------------------------------------------------
// TLS clients.

fn name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Http1 => "HTTP/1.1",
        Protocol::Http2 => "HTTP/2",
    }
}

// ---------------------------------------------------------------------------------------------
// Figures.

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------------------------
// (a) GET by name, paced.

async fn paced_gets(server: &BenchServer, protocol: Protocol) {
    let mut connections = Vec::new();
    for _ in 0..GET_CONNECTIONS {
        connections.push(connect(server.address, &server.ca_pem, protocol, None).await);
    }
    // Warm-up: a few hundred requests per connection, unpaced.
    for connection in &mut connections {
        for i in 0..200 {
            get(connection, i).await;
        }
    }

    let period = Duration::from_secs(1) * GET_CONNECTIONS / GET_RATE;
    let start = Instant::now() + Duration::from_millis(10);
    let end = start + RUN;
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(c, mut connection)| {
            tokio::spawn(async move {
                // Connections start staggered across one period; a late tick is sent at once
                // (Burst), so the offered rate holds even when the timer is coarse.
                let first = start + period * c as u32 / GET_CONNECTIONS;
                let mut ticker = tokio::time::interval_at(first, period);
                ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
                let mut service = Vec::with_capacity(RUN.as_millis() as usize);
                let mut lag = Vec::with_capacity(RUN.as_millis() as usize);
                let mut n = c * 7919;
                loop {
                    let due = ticker.tick().await;
                    if due >= end {
                        break;
                    }
                    let sent = Instant::now();
                    get(&mut connection, n).await;
                    let done = Instant::now();
                    service.push(done - sent);
                    lag.push(sent.saturating_duration_since(due));
                    n += 1;
                }
                (service, lag, Instant::now())
            })
        })
        .collect();
    let mut service = Vec::new();
    let mut lag = Vec::new();
    let mut finished = start;
    for task in tasks {
        let (s, d, at) = task.await.unwrap();
        service.extend(s);
        lag.extend(d);
        finished = finished.max(at);
    }
    service.sort_unstable();
    lag.sort_unstable();
    let rate = service.len() as f64 / (finished - start).as_secs_f64();
    println!(
        "GET by name, {}, {GET_CONNECTIONS} connections, offered {GET_RATE}/s for {}s: achieved {rate:.0}/s ({} requests); \
         latency p50 {} p99 {} max {} (sent p50 {} / p99 {} after its slot: tokio's timer ticks in whole milliseconds)",
        name(protocol),
        RUN.as_secs(),
        service.len(),
        micros(percentile(&service, 0.50)),
        micros(percentile(&service, 0.99)),
        micros(percentile(&service, 1.0)),
        micros(percentile(&lag, 0.50)),
        micros(percentile(&lag, 0.99)),
    );
}

async fn get(connection: &mut Connection, n: usize) {
    let path = format!("{BASE}/worker-{:05}", (n * 2_654_435_761) % FLEET);
    let answer = connection.send("GET", &path, &[("accept", "application/json")], Bytes::new()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.body.len() > 1_000, "a whole object");
}

// ---------------------------------------------------------------------------------------------
// (b) Watch fan-out.

/// What one watcher saw: `(sequence, nanoseconds since the bench's epoch)` per MODIFIED event,
/// plus ERROR events (410 Expired: told to relist) and whether its stream ended early.
#[derive(Default)]
struct Watched {
    received: Vec<(u64, u64)>,
    errors: u64,
    ended_early: bool,
}

/// Finds `seq:<n>` scanning from the end of the line (the attributes come after the zones).
fn sequence_of(line: &[u8]) -> Option<u64> {
    let at = line.windows(4).rposition(|w| w == b"seq:")?;
    let digits = &line[at + 4..];
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

async fn watcher(
    connection: Connection,
    from: u64,
    expected: usize,
    epoch: Instant,
    mut stop: tokio::sync::watch::Receiver<bool>,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Watched {
    let Connection::Http1(mut sender) = connection else { unreachable!("the watchers speak HTTP/1.1") };
    let path = format!("{BASE}?watch=true&resourceVersion={from}");
    let request = Request::get(path).header("host", "localhost").body(Full::default()).unwrap();
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    ready.send(()).await.unwrap();
    let mut body = response.into_body();
    let mut buffer = BytesMut::new();
    let mut watched = Watched { received: Vec::with_capacity(expected), ..Watched::default() };
    while watched.received.len() < expected {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let Some(Ok(frame)) = frame else {
            watched.ended_early = true;
            break;
        };
        let Ok(mut data) = frame.into_data() else { continue };
        let now = epoch.elapsed().as_nanos() as u64;
        buffer.extend_from_slice(&data.copy_to_bytes(data.remaining()));
        while let Some(newline) = buffer.iter().position(|&b| b == b'\n') {
            let line = buffer.split_to(newline + 1);
            if line.starts_with(b"{\"type\":\"MODIFIED\"") {
                if let Some(sequence) = sequence_of(&line) {
                    watched.received.push((sequence, now));
                }
            } else if line.starts_with(b"{\"type\":\"ERROR\"") {
                watched.errors += 1;
            }
        }
    }
    watched
}

async fn writer(
    mut connection: Connection,
    index: usize,
    count: u64,
    start: Instant,
    epoch: Instant,
    sent_at: Arc<Vec<AtomicU64>>,
    done_at: Arc<Vec<AtomicU64>>,
) {
    let period = Duration::from_secs(1) * WRITERS as u32 / WRITES_PER_SECOND as u32;
    let mut ticker = tokio::time::interval_at(start + period * index as u32 / WRITERS as u32, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
    for k in 0..count {
        ticker.tick().await;
        let sequence = k * WRITERS as u64 + index as u64;
        let name = format!("worker-{:05}", sequence as usize % PATCHED_OBJECTS);
        let patch = serde_json::json!({ "attributes": attributes(&format!("{sequence:016x}"), Some(sequence)) });
        let (path, body) = (format!("{BASE}/{name}"), serde_json::to_vec(&patch).unwrap());
        let headers = [("content-type", "application/merge-patch+json")];
        sent_at[sequence as usize].store(epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let answer = connection.send("PATCH", &path, &headers, body).await;
        done_at[sequence as usize].store(epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        assert_eq!(answer.status, StatusCode::OK);
    }
}

async fn fan_out(server: &BenchServer, store: &Store) {
    let epoch = Instant::now();
    let total = WRITES_PER_SECOND * RUN.as_secs();
    let per_writer = total / WRITERS as u64;
    let total = per_writer * WRITERS as u64;

    let from = store.visible_revision();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let (ready, mut readies) = tokio::sync::mpsc::channel(WATCHERS);
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let connection = connect(server.address, &server.ca_pem, Protocol::Http1, None).await;
        watchers.push(tokio::spawn(watcher(connection, from, total as usize, epoch, stopping.clone(), ready.clone())));
    }
    for _ in 0..WATCHERS {
        readies.recv().await.unwrap();
    }

    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let done_at: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let start = Instant::now() + Duration::from_millis(10);
    let mut writers = Vec::new();
    for index in 0..WRITERS {
        let connection = connect(server.address, &server.ca_pem, Protocol::Http1, None).await;
        writers.push(tokio::spawn(writer(
            connection,
            index,
            per_writer,
            start,
            epoch,
            Arc::clone(&sent_at),
            Arc::clone(&done_at),
        )));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let write_rate = total as f64 / start.elapsed().as_secs_f64();

    // Let the watchers drain, bounded.
    let drain = tokio::time::sleep(Duration::from_secs(20));
    tokio::pin!(drain);
    let mut results = Vec::new();
    for handle in &mut watchers {
        tokio::select! {
            result = &mut *handle => results.push(result.unwrap()),
            () = &mut drain => break,
        }
    }
    let _ = stop.send(true);
    for handle in watchers.into_iter().skip(results.len()) {
        results.push(handle.await.unwrap());
    }

    let mut from_response = Vec::with_capacity(WATCHERS * total as usize);
    let mut from_request = Vec::with_capacity(WATCHERS * total as usize);
    let mut before_response = 0u64;
    let (mut delivered, mut errors, mut ended) = (0usize, 0u64, 0usize);
    for watched in &results {
        delivered += watched.received.len();
        errors += watched.errors;
        ended += usize::from(watched.ended_early);
        for &(sequence, at) in &watched.received {
            let done = done_at[sequence as usize].load(Ordering::Relaxed);
            let sent = sent_at[sequence as usize].load(Ordering::Relaxed);
            if at < done {
                before_response += 1;
            }
            from_response.push(Duration::from_nanos(at.saturating_sub(done)));
            from_request.push(Duration::from_nanos(at.saturating_sub(sent)));
        }
    }
    from_response.sort_unstable();
    from_request.sort_unstable();
    let expected = WATCHERS * total as usize;
    println!(
        "watch fan-out, {WATCHERS} watchers (HTTP/1.1, one connection each), {WRITERS} writers at {WRITES_PER_SECOND} merge patches/s \
         for {}s: wrote {total} at {write_rate:.0}/s; delivered {delivered} of {expected} events ({} missing), \
         {errors} ERROR (410) events, {ended} streams ended early",
        RUN.as_secs(),
        expected - delivered,
    );
    println!(
        "  delivery latency from the write's response: p50 {} p99 {} max {} ({:.1} % arrived before the writer had its response, counted as 0)",
        millis(percentile(&from_response, 0.50)),
        millis(percentile(&from_response, 0.99)),
        millis(percentile(&from_response, 1.0)),
        before_response as f64 * 100.0 / delivered.max(1) as f64,
    );
    println!(
        "  delivery latency from the write's request: p50 {} p99 {} max {}",
        millis(percentile(&from_request, 0.50)),
        millis(percentile(&from_request, 0.99)),
        millis(percentile(&from_request, 1.0)),
    );
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = Arc::new(Store::default());
        let zones = fixture_zones();
        for i in 0..FLEET {
            store.create(worker(&zones, i), false).unwrap();
        }
        let object_bytes = store.get("worker-00000").unwrap().json.len();
        let server = BenchServer::start(&store).await;
        let address = server.address;
        println!(
            "numaresources-apiserver over TLS (ring, ECDSA P-256, TLS 1.3) on {address}: {FLEET} objects from the \
             intel-2numa-24cpu fixture ({object_bytes} bytes of JSON each); server and clients on one 2-worker runtime"
        );
        paced_gets(&server, Protocol::Http1).await;
        paced_gets(&server, Protocol::Http2).await;
        fan_out(&server, &store).await;
    });
}
