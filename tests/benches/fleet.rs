//! A fleet of exporters writing to our API server directly, as a cluster of N nodes would, with W
//! clients watching every object (schedulers, informers):
//!
//! - the server is a real `numaresources apiserver` process over TLS on 127.0.0.1, in standalone
//!   mode (one static token per agent, so each agent has its own identity), `MALLOC_ARENA_MAX=2`;
//! - each agent is the exporter's own direct-path client (`direct_client`: the CA bundle, its
//!   own token file read through `BearerFile`, its own connections) and publisher
//!   (`KubePublisher` as the direct path uses it: merge patches, a create after the first 404),
//!   with no own-object watch, as the exporter on the direct path (`--agent-watches` adds one
//!   per agent, as the exporter held before). The client closes a connection 250 ms after its
//!   last request (`DIRECT_IDLE_CONNECTION_TIMEOUT`), and a reconnect resumes its TLS session;
//!   `--idle-timeout S` closes them after S s instead, `--keep-idle-connections` keeps them open
//!   as the client did before;
//!   every `--held-every` (5 s; 0: never) it asks the server's plain admin port whether its
//!   object is held, as the exporter does (`direct::held`), and publishes again when not;
//!   it publishes a changed topology at exponentially distributed intervals (mean
//!   `--change-every`, 10 s) and resends it unchanged when nothing changed for `--heartbeat`
//!   (60 s), as the agent does. Zones are those of the real sysfs fixtures (2-NUMA Intel, 1-NUMA
//!   AMD with a GPU, AMD with offline CPUs), with available CPUs and memory changing;
//! - each watcher is its own kube client streaming `?watch=true&allowWatchBookmarks=true` over
//!   the whole collection, resuming from its last resourceVersion when a watch ends.
//!
//! Every change carries its sequence number and the time it was sent (two attributes), so a
//! watcher knows each event's delivery time (sent → received, the write's own latency included)
//! and which changes it never saw. After the run the agents stop, the watchers get a few seconds
//! to drain, and every change an agent had acknowledged that a watcher did not see is lost.
//!
//! Printed: the server's CPU (cores, from /proc/<pid>/stat), RSS (and at the end its anonymous
//! and file-backed parts) and open sockets over the measured window (after the ramp), the TCP
//! connections accepted per second on the machine (/proc/net/snmp: every process's, the
//! server's nearly all of them), this process's CPU (the clients share the machine's 2 cores
//! with the server), publish latency, watch delivery p50/p99/max, lost and duplicate events,
//! failed publishes and watch restarts.
//!
//! `--delegated` runs the server as in a cluster, against the kube-apiserver double: each agent
//! presents its exporter pod's projected token (signed by the double's ServiceAccount issuer;
//! `--reviewed-tokens`: tokens only TokenReview knows), and the TokenReviews and
//! SubjectAccessReviews the server sends per publish are printed. `--server-arg=FLAG` passes a
//! flag to the server (the review cache lifetimes, say).
//!
//! `cargo bench -p numaresources-tests --bench fleet` runs a small fleet (200 agents, 5 watchers,
//! well under a minute); `-- --agents 5000 --watchers 100 --duration 120` the large one. The
//! server binary: `NUMARESOURCES_BIN`, else `target/release/numaresources` (build it with
//! `cargo build --release -p numaresources`). Nothing asserts a figure.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kube::core::WatchEvent;
use numaresources_api::nrt::well_known::{ANNOTATION_FINGERPRINT, ANNOTATION_RTE_UPDATE};
use numaresources_api::nrt::{AttributeInfo, NodeResourceTopology, Zone};
use numaresources_api::quantity::Quantity;
use numaresources_rte::agent::own_object;
use numaresources_rte::direct::DirectServer;
use numaresources_rte::direct::bearer::BearerFile;
use numaresources_rte::direct::client::{DIRECT_IDLE_CONNECTION_TIMEOUT, direct_client_with_idle_timeout};
use numaresources_rte::direct::held::{self, HELD_INTERVAL};
use numaresources_rte::publish::{KubePublisher, Publisher};
use numaresources_runtime::tls::CertificateAuthority;
use serde::Deserialize;

use numaresources_testkit::kube_double::{EXPORTER_NAMESPACE, KubeDouble, OUR_AUDIENCE, exporter_pod_name};
use numaresources_testkit::proc_status;
use numaresources_testkit::tcp;
use numaresources_tests::replicas::plain_get;

const BASE: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";
const FIXTURES: [&str; 3] = ["intel-2numa-24cpu", "amd64-1numa-nvidia", "amd64-offline-cpus"];
const GIB: i64 = 1 << 30;
const SEQUENCE: &str = "benchSequence";
const SENT: &str = "benchSentMicros";
/// How long the watchers get after the agents stop to show what they were sent.
const DRAIN: Duration = Duration::from_secs(15);
/// How long the server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the server's RSS is sampled during the window.
const RSS_EVERY: Duration = Duration::from_secs(10);
/// Linux's USER_HZ on the architectures we build for.
const TICKS_PER_SECOND: u64 = 100;

// ---------------------------------------------------------------------------------------------
// Options.

#[derive(Debug, Clone)]
struct Options {
    agents: usize,
    watchers: usize,
    /// The measured window, after the ramp and a settling period.
    duration: Duration,
    /// Agents start spread over this long.
    ramp: Duration,
    change_every: Duration,
    heartbeat: Duration,
    agent_watches: bool,
    /// The agents' clients keep idle connections open (the client before it closed them).
    keep_idle_connections: bool,
    /// How long the agents' clients keep a connection idle before closing it (the exporter's
    /// own setting unless given, to compare others).
    idle_timeout: Duration,
    /// How often each agent asks whether its object is held (None: never).
    held_every: Option<Duration>,
    /// Delegated to a kube-apiserver double (TokenReview, SubjectAccessReview, the issuer's
    /// keys, one exporter pod per agent), each agent with its pod's projected token; else
    /// standalone with static tokens.
    delegated: bool,
    /// Delegated, with tokens only TokenReview knows (not signed by the issuer).
    reviewed_tokens: bool,
    /// More flags for the server (`--server-arg=--authorization-webhook-cache-authorized-ttl=10s`).
    server_args: Vec<String>,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            agents: 200,
            watchers: 5,
            duration: Duration::from_secs(20),
            ramp: Duration::from_secs(10),
            change_every: Duration::from_secs(10),
            heartbeat: Duration::from_secs(60),
            agent_watches: false,
            keep_idle_connections: false,
            idle_timeout: DIRECT_IDLE_CONNECTION_TIMEOUT,
            held_every: Some(HELD_INTERVAL),
            delegated: false,
            reviewed_tokens: false,
            server_args: Vec::new(),
        };
        let mut args = std::env::args().skip(1);
        let secs = |value: Option<String>| Duration::from_secs_f64(value.unwrap().parse().unwrap());
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--agents" => options.agents = args.next().unwrap().parse().unwrap(),
                "--watchers" => options.watchers = args.next().unwrap().parse().unwrap(),
                "--duration" => options.duration = secs(args.next()),
                "--ramp" => options.ramp = secs(args.next()),
                "--change-every" => options.change_every = secs(args.next()),
                "--heartbeat" => options.heartbeat = secs(args.next()),
                "--agent-watches" => options.agent_watches = true,
                "--keep-idle-connections" => options.keep_idle_connections = true,
                "--idle-timeout" => options.idle_timeout = secs(args.next()),
                "--held-every" => options.held_every = Some(secs(args.next())).filter(|d| !d.is_zero()),
                "--delegated" => options.delegated = true,
                "--reviewed-tokens" => (options.delegated, options.reviewed_tokens) = (true, true),
                flag if flag.starts_with("--server-arg=") => {
                    options.server_args.push(flag["--server-arg=".len()..].to_owned());
                }
                "--bench" => {}
                other => panic!("unknown argument {other:?}"),
            }
        }
        options
    }

    /// Past the ramp, every agent has created its object and its watch is listed.
    fn settle(&self) -> Duration {
        self.ramp + Duration::from_secs(5)
    }
}

// ---------------------------------------------------------------------------------------------
// Time, randomness and a histogram shared by the tasks.

fn now_micros() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// xorshift64*: enough randomness for arrival times, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponentially distributed with mean `mean` (a Poisson process's gaps).
    fn exponential(&mut self, mean: Duration) -> Duration {
        mean.mul_f64(-(1.0 - self.unit()).ln())
    }
}

/// Latencies in 100 µs buckets up to 10 s (and one bucket above).
struct Histogram {
    buckets: Vec<AtomicU64>,
    max: AtomicU64,
}

impl Histogram {
    const BUCKET_MICROS: u64 = 100;
    const BUCKETS: usize = 100_000;

    fn new() -> Self {
        Self { buckets: (0..=Self::BUCKETS).map(|_| AtomicU64::new(0)).collect(), max: AtomicU64::new(0) }
    }

    fn record(&self, micros: u64) {
        let bucket = ((micros / Self::BUCKET_MICROS) as usize).min(Self::BUCKETS);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(micros, Ordering::Relaxed);
    }

    fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The upper bound of the bucket holding quantile `q`, in ms.
    fn quantile_ms(&self, q: f64) -> f64 {
        let total = self.count();
        let wanted = ((total as f64) * q).ceil() as u64;
        let mut seen = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            seen += bucket.load(Ordering::Relaxed);
            if seen >= wanted.max(1) {
                return ((i as u64 + 1) * Self::BUCKET_MICROS) as f64 / 1000.0;
            }
        }
        f64::NAN
    }

    fn max_ms(&self) -> f64 {
        self.max.load(Ordering::Relaxed) as f64 / 1000.0
    }
}

// ---------------------------------------------------------------------------------------------
// The server process.

struct Server {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn binary() -> PathBuf {
        std::env::var_os("NUMARESOURCES_BIN").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/numaresources"),
            PathBuf::from,
        )
    }

    /// Starts the server; `authentication` are the flags that say how it authenticates.
    fn start(dir: &Path, port: u16, admin_port: u16, authentication: &[String]) -> Self {
        let binary = Self::binary();
        assert!(
            binary.exists(),
            "{}: build it with `cargo build --release -p numaresources` or set NUMARESOURCES_BIN",
            binary.display()
        );
        let mut child = Command::new(&binary)
            .args(["apiserver", "--bind-address", "127.0.0.1", "--secure-port", &port.to_string()])
            .args(["--health-port", &admin_port.to_string()])
            .arg("--tls-cert-file")
            .arg(dir.join("serving.crt"))
            .arg("--tls-private-key-file")
            .arg(dir.join("serving.key"))
            .arg("--cert-dir")
            .arg(dir.join("cert-dir"))
            .args(authentication)
            // Every simulated node connects from 127.0.0.1; real ones each have their own address.
            .args(["--max-connections-per-client", "100000"])
            .env("MALLOC_ARENA_MAX", "2")
            .env("NUMARESOURCES_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut lines = lines.lock().unwrap();
                if lines.len() < 1_000 {
                    lines.push(line);
                }
            }
        });
        let server = Self { child, log };
        let deadline = Instant::now() + START_TIMEOUT;
        while !server.log.lock().unwrap().iter().any(|l| l.contains("serving HTTPS")) {
            assert!(Instant::now() < deadline, "the server did not start: {:?}", server.log.lock().unwrap());
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// CPU time used so far (user + system).
    fn cpu(&self) -> Duration {
        proc_cpu(&format!("/proc/{}/stat", self.child.id()))
    }

    /// The sockets the server holds open: its connections, plus its listeners.
    fn sockets(&self) -> usize {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", self.child.id())) else { return 0 };
        fds.filter_map(Result::ok)
            .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link.to_string_lossy().starts_with("socket:")))
            .count()
    }

    fn rss_mib(&self) -> f64 {
        self.status_mib("VmRSS")
    }

    /// A KiB field of the server's `/proc/<pid>/status` (`VmRSS`, `RssAnon`, `RssFile`), in MiB.
    fn status_mib(&self, field: &str) -> f64 {
        proc_status::status_kib(&self.child.id().to_string(), field).map_or(f64::NAN, |kib| kib as f64 / 1024.0)
    }
}

/// utime + stime of a /proc/<pid>/stat file.
fn proc_cpu(path: &str) -> Duration {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // The command name (field 2) is parenthesised and may hold spaces: count from after it.
    let fields: Vec<&str> = stat[stat.rfind(')').map_or(0, |i| i + 1)..].split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / TICKS_PER_SECOND)
}

/// The whole machine's busy CPU time so far (every process: other work on the machine shows as
/// the difference from the server's and this process's).
fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> =
        stat.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
    let busy: u64 = ticks.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, t)| t).sum();
    Duration::from_millis(busy * 1000 / TICKS_PER_SECOND)
}

// ---------------------------------------------------------------------------------------------
// The fleet.

/// What agents and watchers share.
struct Fleet {
    options: Options,
    url: http::Uri,
    dir: PathBuf,
    /// Changes (create included) each agent's server acknowledged.
    acked: Vec<AtomicU64>,
    publish_failures: AtomicU64,
    heartbeats: AtomicU64,
    changes: AtomicU64,
    publish_latency: Histogram,
    delivery: Histogram,
    /// Only events sent inside the window count for delivery times.
    window: Mutex<Option<(u64, u64)>>,
    stop_agents: AtomicBool,
    lost: AtomicU64,
    duplicates: AtomicU64,
    watch_restarts: AtomicU64,
    watch_errors: AtomicU64,
    /// The admin port's base URL, and the held questions asked in the window (and how many
    /// got no answer, whole run).
    admin_url: http::Uri,
    held_questions: AtomicU64,
    held_failures: AtomicU64,
}

impl Fleet {
    /// True when `micros` falls in the measured window.
    fn in_window(&self, micros: u64) -> bool {
        self.window.lock().unwrap().is_some_and(|(from, to)| (from..to).contains(&micros))
    }
}

fn name(i: usize) -> String {
    format!("fleet-{i:05}")
}

/// The capacity zones of each fixture machine.
fn fixture_zones() -> Vec<Vec<Zone>> {
    FIXTURES
        .iter()
        .map(|fixture| {
            let dir = tempfile::tempdir().unwrap();
            let tarball = numaresources_rte::sysfs::machines::directory().join(format!("{fixture}.tar.gz"));
            let file = std::fs::File::open(&tarball).unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
            tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir.path()).unwrap();
            let machine = numaresources_rte::sysfs::discover(dir.path().join("sys")).unwrap().machine;
            numaresources_rte::sysfs::capacity_zones(&machine)
        })
        .collect()
}

/// Agent `i`'s topology at change `sequence`: 2 CPUs and 2 GiB reserved per zone, a random share
/// of the rest taken by exclusive allocations.
fn topology(i: usize, zones: &[Zone], sequence: u64, rng: &mut Rng) -> NodeResourceTopology {
    let mut nrt = NodeResourceTopology::new(&name(i));
    nrt.zones = zones.to_vec();
    for zone in &mut nrt.zones {
        for resource in &mut zone.resources {
            let capacity = resource.capacity.as_i64().unwrap_or(0);
            let (allocatable, available) = match resource.name.as_str() {
                "cpu" => {
                    let allocatable = (capacity - 2).max(0);
                    (allocatable, allocatable - (rng.next() % (allocatable as u64 / 2 + 1)) as i64)
                }
                "memory" => {
                    let allocatable = (capacity - 2 * GIB).max(0);
                    let gib = allocatable / GIB;
                    (allocatable, allocatable - (rng.next() % (gib as u64 / 2 + 1)) as i64 * GIB)
                }
                _ => (capacity, capacity),
            };
            resource.allocatable = Quantity::from_i64(allocatable);
            resource.available = Quantity::from_i64(available);
        }
    }
    let fingerprint = format!("pfp0v001{:016x}", rng.next());
    nrt.attributes = vec![
        AttributeInfo::new("nodeTopologyPodsFingerprint", fingerprint.clone()),
        AttributeInfo::new("topologyManagerPolicy", "single-numa-node"),
        AttributeInfo::new("topologyManagerScope", "pod"),
        AttributeInfo::new(SEQUENCE, sequence.to_string()),
        AttributeInfo::new(SENT, now_micros().to_string()),
    ];
    nrt.metadata.annotations = Some(
        [(ANNOTATION_RTE_UPDATE.to_owned(), "reactive".to_owned()), (ANNOTATION_FINGERPRINT.to_owned(), fingerprint)]
            .into(),
    );
    nrt
}

async fn agent(i: usize, fleet: Arc<Fleet>, zones: Arc<Vec<Vec<Zone>>>, end: Instant) {
    let mut rng = Rng::new(i as u64 + 1);
    let options = &fleet.options;
    tokio::time::sleep(options.ramp.mul_f64(rng.unit())).await;
    let server = DirectServer {
        url: fleet.url.clone(),
        ca_file: fleet.dir.join("ca.crt"),
        token_file: fleet.dir.join(format!("tokens/{i}")),
        tls_server_name: None,
        admin_url: None,
    };
    let bearer = Arc::new(BearerFile::new(server.token_file.clone()));
    let idle_timeout = (!options.keep_idle_connections).then_some(options.idle_timeout);
    let client = direct_client_with_idle_timeout(&server, bearer, idle_timeout).unwrap();
    let lost = own_object::Lost::new();
    let watch = options.agent_watches.then(|| tokio::spawn(own_object::watch(client.clone(), name(i), lost.clone())));
    let asking = options.held_every.map(|every| tokio::spawn(ask_held(i, Arc::clone(&fleet), lost.clone(), every)));
    // As `FailoverPublisher` builds it for the direct path.
    let publisher = KubePublisher::new(client, false).patch_first();
    let zones = &zones[i % zones.len()];

    let publish = async |nrt: &NodeResourceTopology| {
        let started = now_micros();
        let result = publisher.publish(nrt.clone()).await;
        if fleet.in_window(started) {
            fleet.publish_latency.record(now_micros() - started);
        }
        result.map_err(|_| fleet.publish_failures.fetch_add(1, Ordering::Relaxed)).is_ok()
    };
    let mut sequence = 0;
    let mut current = topology(i, zones, sequence, &mut rng);
    if publish(&current).await {
        fleet.acked[i].fetch_add(1, Ordering::Relaxed);
    }
    let mut last_publish = tokio::time::Instant::now();
    let mut next_change = last_publish + rng.exponential(options.change_every);
    let end = tokio::time::Instant::from_std(end);
    while !fleet.stop_agents.load(Ordering::Relaxed) {
        let heartbeat = last_publish + options.heartbeat;
        tokio::select! {
            () = tokio::time::sleep_until(end) => break,
            () = tokio::time::sleep_until(next_change) => {
                sequence += 1;
                current = topology(i, zones, sequence, &mut rng);
                fleet.changes.fetch_add(1, Ordering::Relaxed);
                if publish(&current).await {
                    fleet.acked[i].fetch_add(1, Ordering::Relaxed);
                }
                next_change = tokio::time::Instant::now() + rng.exponential(options.change_every);
            }
            // The heartbeat (and a republish when the own-object watch finds it gone) resends
            // the last object unchanged.
            () = tokio::time::sleep_until(heartbeat) => {
                fleet.heartbeats.fetch_add(1, Ordering::Relaxed);
                publish(&current).await;
            }
            _seen_at = lost.reported() => {
                publish(&current).await;
            }
        }
        last_publish = tokio::time::Instant::now();
    }
    if let Some(watch) = watch {
        watch.abort();
    }
    if let Some(asking) = asking {
        asking.abort();
    }
}

/// Asks every `every` whether agent `i`'s object is held, as `direct::held::follow` does,
/// counting the answers.
async fn ask_held(i: usize, fleet: Arc<Fleet>, lost: Arc<own_object::Lost>, every: Duration) {
    let client = held::client();
    let mut rng = Rng::new(i as u64 + 7);
    tokio::time::sleep(every.mul_f64(rng.unit())).await;
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        let asked = tokio::time::Instant::now();
        let answer = held::ask(&client, &fleet.admin_url, &name(i)).await;
        if fleet.in_window(now_micros()) {
            fleet.held_questions.fetch_add(1, Ordering::Relaxed);
        }
        match answer {
            held::Answer::Held => {}
            held::Answer::NotHeld => lost.report(asked),
            held::Answer::CannotTell(_) => {
                fleet.held_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The watchers.

/// The part of an event a watcher reads.
#[derive(Clone, Deserialize)]
struct Seen {
    metadata: SeenMeta,
    #[serde(default)]
    attributes: Vec<SeenAttribute>,
}

#[derive(Clone, Deserialize)]
struct SeenMeta {
    name: String,
}

#[derive(Clone, Deserialize)]
struct SeenAttribute {
    name: String,
    value: String,
}

impl Seen {
    fn attribute(&self, name: &str) -> Option<u64> {
        self.attributes.iter().find(|a| a.name == name).and_then(|a| a.value.parse().ok())
    }
}

/// What one watcher saw of each object: (the next sequence number it expects, how many it saw).
struct WatcherState {
    objects: Vec<(u64, u64)>,
}

impl WatcherState {
    fn saw(&mut self, fleet: &Fleet, object: &Seen) {
        let received = now_micros();
        let Some(index) = object.metadata.name.strip_prefix("fleet-").and_then(|n| n.parse::<usize>().ok()) else {
            return;
        };
        let (Some(sequence), Some(sent)) = (object.attribute(SEQUENCE), object.attribute(SENT)) else { return };
        let Some((next, seen)) = self.objects.get_mut(index) else { return };
        if sequence < *next {
            fleet.duplicates.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // The first event of an object is its state when the watch started: it stands for every
        // change up to it (a watcher that started late missed none of them).
        *seen = if *next == 0 { sequence + 1 } else { *seen + 1 };
        *next = sequence + 1;
        if fleet.in_window(sent) {
            fleet.delivery.record(received.saturating_sub(sent));
        }
    }
}

async fn watcher(fleet: Arc<Fleet>, client: kube::Client, state: Arc<Mutex<WatcherState>>) {
    let mut resource_version: Option<String> = None;
    loop {
        let from = resource_version.as_ref().map(|rv| format!("&resourceVersion={rv}")).unwrap_or_default();
        let request =
            http::Request::get(format!("{BASE}?watch=true&allowWatchBookmarks=true{from}")).body(Vec::new()).unwrap();
        match client.request_events::<Seen>(request).await {
            Ok(events) => {
                let mut events = std::pin::pin!(events);
                while let Some(event) = events.next().await {
                    match event {
                        Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
                            state.lock().unwrap().saw(&fleet, &object);
                        }
                        Ok(WatchEvent::Bookmark(bookmark)) => {
                            resource_version = Some(bookmark.metadata.resource_version);
                        }
                        Ok(WatchEvent::Deleted(_)) => {}
                        Ok(WatchEvent::Error(error)) => {
                            fleet.watch_errors.fetch_add(1, Ordering::Relaxed);
                            if error.code == 410 {
                                resource_version = None;
                            }
                        }
                        Err(_) => {
                            fleet.watch_errors.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                }
                fleet.watch_restarts.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                fleet.watch_errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// Writes the CA, the serving pair, the token file and each agent's token file.
fn write_files(dir: &Path, agents: usize) {
    let day = Duration::from_secs(24 * 3600);
    let ca = CertificateAuthority::generate("fleet-ca", day).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.cert_pem()).unwrap();
    let serving = ca.issue_serving(&["localhost".to_owned(), "127.0.0.1".to_owned()], day).unwrap();
    serving.write(&dir.join("serving.crt"), &dir.join("serving.key")).unwrap();
    std::fs::create_dir_all(dir.join("tokens")).unwrap();
    let mut csv = String::from("watcher-token,watcher,uid-watcher\n");
    for i in 0..agents {
        // A projected token is a ~1 KiB JWT; the length matters to parsing and hashing.
        let token = format!("agent-{i:05}-{}", "x".repeat(900));
        std::fs::write(dir.join(format!("tokens/{i}")), &token).unwrap();
        let user = format!("system:serviceaccount:numaresources:rte-{i:05}");
        csv.push_str(&format!("{token},{user},uid-{i},\"system:masters\"\n"));
    }
    std::fs::write(dir.join("tokens.csv"), csv).unwrap();
}

/// The kube-apiserver double of delegated mode: one direct-path exporter pod per agent, on the
/// node its object is named after, and each agent's token file holding its pod's projected token
/// (signed by the double's issuer, or, with `--reviewed-tokens`, one only TokenReview knows); the
/// watchers' token is an admin's.
async fn kube_double(dir: &Path, options: &Options) -> KubeDouble {
    let double = KubeDouble::start().await.unwrap();
    let nodes: Vec<String> = (0..options.agents).map(name).collect();
    double.set_direct_exporter_pods(nodes.clone());
    for (i, node) in nodes.iter().enumerate() {
        let token = if options.reviewed_tokens {
            let token = format!("reviewed-{i:05}-{}", "x".repeat(900));
            double.issue_exporter_token(&token, node);
            token
        } else {
            double.signed_exporter_token(&exporter_pod_name(node), &[OUR_AUDIENCE])
        };
        std::fs::write(dir.join(format!("tokens/{i}")), token).unwrap();
    }
    double.issue_admin_token("watcher-token", "watcher");
    double.write_kubeconfig(&dir.join("kube.kubeconfig"), EXPORTER_NAMESPACE).unwrap();
    double
}

async fn watcher_client(dir: &Path, url: &http::Uri) -> kube::Client {
    let mut config = kube::Config::new(url.clone());
    let pem = std::fs::read(dir.join("ca.crt")).unwrap();
    let bundle = numaresources_runtime::tls::CaBundle::from_pem(&pem).unwrap();
    config.root_cert = Some(bundle.certificates().iter().map(|c| c.to_vec()).collect());
    config.default_retry = false;
    config.headers = vec![(http::header::AUTHORIZATION, "Bearer watcher-token".parse().unwrap())];
    kube::Client::try_from(config).unwrap()
}

fn main() {
    let options = Options::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run(options));
    runtime.shutdown_timeout(Duration::from_secs(1));
}

async fn run(options: Options) {
    now_micros();
    println!(
        "fleet: {} agents (a change every ~{:?}, heartbeat {:?}, own-object watches: {}, idle connections \
         kept: {}, else closed after {:?}, held asked every {:?}), {} watchers, window {:?} after {:?}",
        options.agents,
        options.change_every,
        options.heartbeat,
        options.agent_watches,
        options.keep_idle_connections,
        options.idle_timeout,
        options.held_every,
        options.watchers,
        options.duration,
        options.settle()
    );
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), options.agents);
    let double = if options.delegated { Some(kube_double(dir.path(), &options).await) } else { None };
    let mut authentication =
        match &double {
            // The warm-up would hold the watchers' first lists until every agent has published.
            Some(_) => ["--kubeconfig", "kube.kubeconfig", "--store-warmup", "1s"]
                .map(|arg| {
                    if arg.ends_with(".kubeconfig") {
                        dir.path().join(arg).display().to_string()
                    } else {
                        arg.to_owned()
                    }
                })
                .to_vec(),
            None => vec!["--token-auth-file".to_owned(), dir.path().join("tokens.csv").display().to_string()],
        };
    authentication.extend(options.server_args.iter().cloned());
    let free_port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port, admin_port) = (free_port(), free_port());
    let server = Server::start(dir.path(), port, admin_port, &authentication);
    let url: http::Uri = format!("https://127.0.0.1:{port}").parse().unwrap();
    let zones = Arc::new(fixture_zones());

    let fleet = Arc::new(Fleet {
        acked: (0..options.agents).map(|_| AtomicU64::new(0)).collect(),
        options: options.clone(),
        url: url.clone(),
        dir: dir.path().to_owned(),
        publish_failures: AtomicU64::new(0),
        heartbeats: AtomicU64::new(0),
        changes: AtomicU64::new(0),
        publish_latency: Histogram::new(),
        delivery: Histogram::new(),
        window: Mutex::new(None),
        stop_agents: AtomicBool::new(false),
        lost: AtomicU64::new(0),
        duplicates: AtomicU64::new(0),
        watch_restarts: AtomicU64::new(0),
        watch_errors: AtomicU64::new(0),
        admin_url: format!("http://127.0.0.1:{admin_port}").parse().unwrap(),
        held_questions: AtomicU64::new(0),
        held_failures: AtomicU64::new(0),
    });

    let mut watchers = tokio::task::JoinSet::new();
    let mut states = Vec::new();
    let mut spawn_watchers = async || {
        for _ in 0..options.watchers {
            let state = Arc::new(Mutex::new(WatcherState { objects: vec![(0, 0); options.agents] }));
            states.push(Arc::clone(&state));
            watchers.spawn(watcher(Arc::clone(&fleet), watcher_client(dir.path(), &url).await, state));
        }
    };
    // Delegated, the store stays cold (reads refused) until the exporters that write here have
    // reported, as in a cluster: the watchers start once it serves reads.
    if double.is_none() {
        spawn_watchers().await;
    }
    let started = Instant::now();
    let end = started + options.settle() + options.duration;
    let mut agents = tokio::task::JoinSet::new();
    for i in 0..options.agents {
        agents.spawn(agent(i, Arc::clone(&fleet), Arc::clone(&zones), end));
    }
    if double.is_some() {
        let deadline = Instant::now() + START_TIMEOUT;
        while !plain_get(admin_port, "/readyz").await.is_ok_and(|(status, _)| status == 200) {
            assert!(Instant::now() < deadline, "the server never became ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        spawn_watchers().await;
    }

    tokio::time::sleep(options.settle()).await;
    let (cpu_before, own_before, busy_before, accepted_before, window_start) =
        (server.cpu(), proc_cpu("/proc/self/stat"), machine_busy(), tcp::tcp_accepted(), Instant::now());
    let reviews_before = double.as_ref().map(|double| (double.token_reviews(), double.access_reviews()));
    let window_from = now_micros();
    *fleet.window.lock().unwrap() = Some((window_from, u64::MAX));
    let (changes_before, heartbeats_before) =
        (fleet.changes.load(Ordering::Relaxed), fleet.heartbeats.load(Ordering::Relaxed));
    let mut rss = vec![server.rss_mib()];
    let mut sockets = vec![server.sockets()];
    while Instant::now() + RSS_EVERY <= end {
        tokio::time::sleep(RSS_EVERY).await;
        rss.push(server.rss_mib());
        sockets.push(server.sockets());
    }
    tokio::time::sleep(end.saturating_duration_since(Instant::now())).await;
    let window = window_start.elapsed();
    let (cpu, own) = (server.cpu() - cpu_before, proc_cpu("/proc/self/stat") - own_before);
    let busy = machine_busy().saturating_sub(busy_before);
    let accepted = tcp::tcp_accepted().saturating_sub(accepted_before);
    let reviews = double.as_ref().zip(reviews_before).map(|(double, (tokens, access))| {
        (
            double.token_reviews() - tokens,
            double.access_reviews() - access,
            double.token_reviews(),
            double.access_reviews(),
        )
    });
    *fleet.window.lock().unwrap() = Some((window_from, now_micros()));
    let changes = fleet.changes.load(Ordering::Relaxed) - changes_before;
    let heartbeats = fleet.heartbeats.load(Ordering::Relaxed) - heartbeats_before;
    // (Not the sockets: the agents close theirs at the end of the window.)
    rss.push(server.rss_mib());
    let (anon, file) = (server.status_mib("RssAnon"), server.status_mib("RssFile"));

    fleet.stop_agents.store(true, Ordering::Relaxed);
    while agents.join_next().await.is_some() {}
    // Drain: until every watcher saw every acknowledged change, or DRAIN.
    let acked: Vec<u64> = fleet.acked.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let missing = || -> u64 {
        states
            .iter()
            .map(|state| {
                let state = state.lock().unwrap();
                acked.iter().zip(&state.objects).map(|(acked, (_, seen))| acked.saturating_sub(*seen)).sum::<u64>()
            })
            .sum()
    };
    let drain_until = Instant::now() + DRAIN;
    while missing() > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fleet.lost.store(missing(), Ordering::Relaxed);
    watchers.abort_all();

    let cores = cpu.as_secs_f64() / window.as_secs_f64();
    let per_second = |n: u64| n as f64 / window.as_secs_f64();
    println!(
        "window {:.1} s: {} changes ({:.0}/s), {} heartbeats ({:.0}/s), {} failed publishes (whole run)",
        window.as_secs_f64(),
        changes,
        per_second(changes),
        heartbeats,
        per_second(heartbeats),
        fleet.publish_failures.load(Ordering::Relaxed)
    );
    println!(
        "held questions: {:.0}/s in the window, {} unanswered (whole run)",
        per_second(fleet.held_questions.load(Ordering::Relaxed)),
        fleet.held_failures.load(Ordering::Relaxed)
    );
    println!(
        "server CPU {:.3} cores ({:.0} µs per publish, watch fan-out and own-object watches included), RSS {:.1} MiB at the end (samples every {:?}: {})",
        cores,
        cpu.as_secs_f64() * 1e6 / (changes + heartbeats).max(1) as f64,
        rss.last().copied().unwrap_or(f64::NAN),
        RSS_EVERY,
        rss.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(" ")
    );
    if let Some((tokens, access, all_tokens, all_access)) = reviews {
        let writes = (changes + heartbeats).max(1) as f64;
        println!(
            "reviews at the kube-apiserver double in the window: {tokens} TokenReviews, {access} SubjectAccessReviews: \
             {:.5} per publish ({all_tokens} and {all_access} over the whole run, ramp included)",
            (tokens + access) as f64 / writes
        );
    }
    println!("server RSS at the end: RssAnon {anon:.1} MiB (heap, stacks), RssFile {file:.1} MiB (the binary's pages)");
    let half = rss.len() / 2;
    println!(
        "server RSS trend (least squares): {:+.2} MiB per 10 min over the window, {:+.2} over its second half",
        slope_per_minute(&rss, RSS_EVERY) * 10.0,
        slope_per_minute(&rss[half..], RSS_EVERY) * 10.0
    );
    println!(
        "server sockets (samples every {:?}: {}); TCP connections accepted on the machine {:.1}/s over the window",
        RSS_EVERY,
        sockets.iter().map(ToString::to_string).collect::<Vec<_>>().join(" "),
        per_second(accepted)
    );
    let cores_of = |d: Duration| d.as_secs_f64() / window.as_secs_f64();
    println!(
        "bench process (agents + watchers) CPU {:.3} cores; the machine was busy {:.3} of {} cores \
         ({:.3} by other processes)",
        cores_of(own),
        cores_of(busy),
        std::thread::available_parallelism().map_or(0, usize::from),
        cores_of(busy.saturating_sub(cpu + own))
    );
    println!(
        "publish latency (publishes started in the window) p50 {:.1} ms p99 {:.1} ms max {:.1} ms",
        fleet.publish_latency.quantile_ms(0.5),
        fleet.publish_latency.quantile_ms(0.99),
        fleet.publish_latency.max_ms()
    );
    println!(
        "watch delivery ({} events sent in the window) p50 {:.1} ms p99 {:.1} ms max {:.1} ms",
        fleet.delivery.count(),
        fleet.delivery.quantile_ms(0.5),
        fleet.delivery.quantile_ms(0.99),
        fleet.delivery.max_ms()
    );
    println!(
        "lost events {} (acknowledged changes a watcher never saw, after {:?} of drain), duplicates {}, \
         watch restarts {}, watch errors {}",
        fleet.lost.load(Ordering::Relaxed),
        DRAIN,
        fleet.duplicates.load(Ordering::Relaxed),
        fleet.watch_restarts.load(Ordering::Relaxed),
        fleet.watch_errors.load(Ordering::Relaxed)
    );
    drop(server);
}

/// The least-squares slope of `samples` taken `every` apart, per minute (how a long run tells
/// whether memory stays flat: a leak shows as a steady slope, a plateau as none).
fn slope_per_minute(samples: &[f64], every: Duration) -> f64 {
    let n = samples.len() as f64;
    if samples.len() < 2 {
        return 0.0;
    }
    let minutes = |i: usize| i as f64 * every.as_secs_f64() / 60.0;
    let (mean_t, mean_y) = ((0..samples.len()).map(minutes).sum::<f64>() / n, samples.iter().sum::<f64>() / n);
    let covariance: f64 = samples.iter().enumerate().map(|(i, y)| (minutes(i) - mean_t) * (y - mean_y)).sum();
    let variance: f64 = (0..samples.len()).map(|i| (minutes(i) - mean_t).powi(2)).sum();
    covariance / variance
}
