//! What one exporter's write costs our server on the direct path, over real TLS: a merge patch
//! of its topology and a GET of its object, each presented with its own pod-bound token for our
//! audience (reviewed once, then cached), on kept-alive HTTP/1.1 and HTTP/2 connections.
//!
//! The server runs in a child process (this binary again, `DIRECT_WRITE_BENCH_SERVER=1`) with
//! 5,000 objects, in delegated mode against the kube-apiserver double, so its CPU is read from
//! `/proc/<pid>/stat` alone; the load client here is plain hyper with bodies encoded up front,
//! and its own CPU is printed too, to show it is not the bottleneck.
//!
//! `cargo bench -p numaresources-apiserver --bench direct_write` (`BENCH_REQUESTS=n` per phase;
//! `BENCH_ONLY=patch|get` and `BENCH_PROTOCOL=1|2` run one kind, e.g. to profile the child;
//! `BENCH_ONLY=memory` instead prints the server's VmRSS through 5,000 creates, 5,000 patches
//! and 3 LISTs over TLS, from an empty store; `BENCH_ONLY=connections` prints what
//! [`IDLE_CONNECTIONS`] kept-alive TLS connections, idle after one GET each, add to it;
//! `BENCH_ONLY=reconnect` measures what an exporter that closes its connection between
//! publishes costs: a connection per patch, its TLS session resumed or (`BENCH_RESUME=off`)
//! made in full, against the same patch on a kept-alive connection (`BENCH_RECONNECTS=n`);
//! `BENCH_WORKERS=n` gives the server n tokio workers instead of 2; `BENCH_IN_PROCESS_REQUESTS=n`
//! and `BENCH_IN_PROCESS=patch|get` set the comparison in process).
//! Figures go to BENCHMARKS.md; nothing asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use numaresources_testkit::kube_double::{KubeDouble, OUR_AUDIENCE};
use numaresources_testkit::proc_status;
#[path = "../tests/support/mod.rs"]
mod support;
use numaresources_testkit::tcp;

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Instant;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};
use support::BASE;
use support::fleet::worker;
use support::tls::{Connection, Protocol, client_config, connect, connect_with, start};

const FLEET: usize = 5_000;
/// Exporters writing at once, each on its own connection.
const CONNECTIONS: usize = 8;
const SERVER_ENV: &str = "DIRECT_WRITE_BENCH_SERVER";
/// Idle connections opened by `BENCH_ONLY=connections` (one client address may hold 1,024).
const IDLE_CONNECTIONS: usize = 1_000;
/// Linux's USER_HZ: the unit of utime/stime in /proc/<pid>/stat.
const TICKS_PER_SECOND: f64 = 100.0;

/// An exporter's topology, `available` CPUs free in each zone and a pods fingerprint that
/// changes with it.
fn topology(name: &str, available: usize) -> Value {
    let mut topology = worker(name, available as i64);
    topology["attributes"][2]["value"] = json!(format!("pfp0v001{available:016x}"));
    topology
}

/// Exporter `i`'s patches as it sends them: the zones and attributes, `available` changing.
fn patch_bodies(i: usize) -> Vec<Bytes> {
    (0..16)
        .map(|available| {
            let topology = topology(&node(i), available);
            let patch = json!({"attributes": topology["attributes"], "zones": topology["zones"]});
            Bytes::from(serde_json::to_vec(&patch).unwrap())
        })
        .collect()
}

fn node(i: usize) -> String {
    format!("worker-{i:05}")
}

fn main() {
    if std::env::var_os(SERVER_ENV).is_some() {
        serve();
    } else {
        measure();
    }
}

/// The child: the server with the fleet, until its stdin closes.
fn serve() {
    // BENCH_WORKERS: the server's tokio workers (2, as on a 2-core replica, unless set).
    let workers = std::env::var("BENCH_WORKERS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap();
    runtime.block_on(async {
        // Tokens name their pod, not their node (clusters before 1.30): the costlier path.
        let double = KubeDouble::new(false);
        for i in 0..CONNECTIONS {
            double.add_pod(&format!("rte-{i}"), &node(i));
        }
        // BENCH_AUTH=off: the same server without authentication, to see what it costs.
        let auth_off = std::env::var("BENCH_AUTH").is_ok_and(|v| v == "off");
        let server = start(&double, |state| {
            if auth_off {
                state.auth = numaresources_apiserver::auth::Auth::Disabled;
            }
        })
        .await;
        let tokens: Vec<String> =
            (0..CONNECTIONS).map(|i| double.exporter_token(&format!("rte-{i}"), &[OUR_AUDIENCE])).collect();
        // The memory run starts empty: its objects come over TLS.
        if !memory_run() {
            for i in 0..FLEET {
                let object = serde_json::from_value(topology(&node(i), 22)).unwrap();
                server.store.create(object, false).unwrap();
            }
            if !only_phase("connections") && !only_phase("reconnect") {
                in_process(&server.app, &tokens).await;
            }
        }
        let admin = double.user_token("kubernetes-admin", &[OUR_AUDIENCE]);
        let ready = json!({"address": server.address.to_string(), "ca": server.ca_pem, "tokens": tokens, "admin": admin,
                "pid": std::process::id()});
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{ready}").unwrap();
        stdout.flush().unwrap();
        tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        })
        .await
        .unwrap();
    });
}

/// `BENCH_ONLY=memory`: the server's memory after 5,000 creates and 5,000 patches over TLS.
fn memory_run() -> bool {
    only_phase("memory")
}

fn only_phase(phase: &str) -> bool {
    std::env::var("BENCH_ONLY").is_ok_and(|v| v == phase)
}

/// The same requests through the router in this process, without sockets or TLS: what our
/// handlers and middlewares cost, for comparison (printed to stderr, before the server is used).
async fn in_process(app: &axum::Router, tokens: &[String]) {
    use tower::ServiceExt;
    let requests = std::env::var("BENCH_IN_PROCESS_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let bodies: Vec<Vec<Bytes>> = (0..CONNECTIONS).map(patch_bodies).collect();
    let authorizations: Vec<String> = tokens.iter().map(|t| format!("Bearer {t}")).collect();
    let paths: Vec<String> = (0..CONNECTIONS).map(|i| format!("{BASE}/{}", node(i))).collect();
    // BENCH_IN_PROCESS=patch|get: only that one (e.g. to profile it).
    let only = std::env::var("BENCH_IN_PROCESS").ok();
    for (operation, name) in [(Operation::Patch, "patch"), (Operation::Get, "get")] {
        if only.as_deref().is_some_and(|only| only != name) {
            continue;
        }
        let run = async |count: usize| {
            for n in 0..count {
                let i = n % CONNECTIONS;
                let request =
                    http::Request::builder().uri(paths[i].as_str()).header("authorization", authorizations[i].as_str());
                let request = match operation {
                    Operation::Patch => request
                        .method("PATCH")
                        .header("content-type", "application/merge-patch+json")
                        .body(axum::body::Body::from(bodies[i][n % 16].clone())),
                    Operation::Get => request.method("GET").body(axum::body::Body::empty()),
                };
                let response = app.clone().oneshot(request.unwrap()).await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                let _ = http_body_util::BodyExt::collect(response.into_body()).await.unwrap();
            }
        };
        run(500).await;
        let before = cpu_seconds(std::process::id());
        run(requests).await;
        let spent = cpu_seconds(std::process::id()) - before;
        let name = match operation {
            Operation::Patch => "merge patch",
            Operation::Get => "GET",
        };
        eprintln!("in process, through the router: {name} {:.1} µs of CPU per request ", spent * 1e6 / requests as f64);
    }
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start at state (field 3).
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / TICKS_PER_SECOND
}

fn resident_mib(pid: u32) -> f64 {
    proc_status::status_kib(&pid.to_string(), "VmRSS").unwrap_or(0) as f64 / 1024.0
}

#[derive(Clone, Copy)]
enum Operation {
    Patch,
    Get,
}

#[tokio::main(flavor = "current_thread")]
async fn measure() {
    let requests: usize = std::env::var("BENCH_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(40_000);
    // BENCH_SERVER_PREFIX runs the child under a profiler, e.g. "heaptrack -o /tmp/server".
    let prefix = std::env::var("BENCH_SERVER_PREFIX").unwrap_or_default();
    let mut command = prefix.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    command.push(std::env::current_exe().unwrap().display().to_string());
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .env(SERVER_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut output = std::io::BufReader::new(child.stdout.take().unwrap());
    // A profiler's own lines come first.
    while !line.starts_with('{') {
        line.clear();
        assert!(output.read_line(&mut line).unwrap() > 0, "the server ended before it was ready");
    }
    let ready: Value = serde_json::from_str(&line).unwrap();
    // The server's own (under a profiler, not the child's).
    let pid = u32::try_from(ready["pid"].as_u64().unwrap()).unwrap();
    let address: SocketAddr = ready["address"].as_str().unwrap().parse().unwrap();
    let ca = ready["ca"].as_str().unwrap().to_owned();
    let tokens: Vec<String> =
        ready["tokens"].as_array().unwrap().iter().map(|t| format!("Bearer {}", t.as_str().unwrap())).collect();
    if memory_run() {
        let admin = format!("Bearer {}", ready["admin"].as_str().unwrap());
        memory(address, &ca, &admin, pid).await;
    } else if only_phase("connections") {
        idle_connections(address, &ca, &tokens, pid).await;
    } else if only_phase("reconnect") {
        reconnect(address, &ca, &tokens, pid).await;
    } else {
        println!(
            "numaresources-apiserver over TLS (ring, ECDSA P-256, TLS 1.3), delegated mode, {FLEET} objects, in its own \
             process (2 tokio workers; VmRSS {:.1} MiB); {CONNECTIONS} exporters, one kept-alive connection and one \
             pod-bound token each; load client on one thread; {requests} requests per phase",
            resident_mib(pid)
        );
        let only = |variable: &str, value: &str| std::env::var(variable).map_or(true, |v| v == value);
        for (protocol, protocol_name) in [(Protocol::Http1, "1"), (Protocol::Http2, "2")] {
            for (operation, operation_name) in [(Operation::Patch, "patch"), (Operation::Get, "get")] {
                if !only("BENCH_PROTOCOL", protocol_name) || !only("BENCH_ONLY", operation_name) {
                    continue;
                }
                phase(address, &ca, &tokens, protocol, operation, requests, pid).await;
            }
        }
        println!("server VmRSS at the end: {:.1} MiB", resident_mib(pid));
    }
    drop(child.stdin.take());
    let _ = child.wait();
}

/// Creates the fleet over TLS, patches every object once, lists three times, and prints the
/// server's VmRSS after each step.
async fn memory(address: SocketAddr, ca: &str, admin: &str, pid: u32) {
    let arenas = std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "unset".to_owned());
    println!("memory: server VmRSS at start (empty store) {:.1} MiB; MALLOC_ARENA_MAX={arenas}", resident_mib(pid));
    for (step, steps) in [("create", "creates"), ("patch", "patches")] {
        let mut tasks = Vec::new();
        for c in 0..CONNECTIONS {
            let mut connection = connect(address, ca, Protocol::Http1, None).await;
            let admin = admin.to_owned();
            tasks.push(tokio::spawn(async move {
                for i in (c..FLEET).step_by(CONNECTIONS) {
                    let answer = if step == "create" {
                        let body = serde_json::to_vec(&topology(&node(i), 22)).unwrap();
                        let headers = [("authorization", admin.as_str()), ("content-type", "application/json")];
                        connection.send("POST", BASE, &headers, body).await
                    } else {
                        let topology = topology(&node(i), 21);
                        let body = serde_json::to_vec(
                            &json!({"attributes": topology["attributes"], "zones": topology["zones"]}),
                        )
                        .unwrap();
                        let headers =
                            [("authorization", admin.as_str()), ("content-type", "application/merge-patch+json")];
                        connection.send("PATCH", &format!("{BASE}/{}", node(i)), &headers, body).await
                    };
                    assert!(answer.status.is_success(), "{step} {}: {:?}", node(i), answer.body);
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        println!("memory: server VmRSS after {FLEET} {steps} over TLS: {:.1} MiB", resident_mib(pid));
    }
    let mut connection = connect(address, ca, Protocol::Http1, None).await;
    for _ in 0..3 {
        let answer = connection.send("GET", BASE, &[("authorization", admin)], Bytes::new()).await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    println!("memory: server VmRSS after 3 LISTs: {:.1} MiB", resident_mib(pid));
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    println!("memory: server VmRSS 2 s later, connections closed but the last: {:.1} MiB", resident_mib(pid));
    let part = |field| proc_status::status_kib(&pid.to_string(), field).unwrap_or(0) as f64 / 1024.0;
    println!(
        "memory: of which RssAnon {:.1} MiB (heap, stacks), RssFile {:.1} MiB (the binary's pages)",
        part("RssAnon"),
        part("RssFile")
    );
}

/// Opens [`IDLE_CONNECTIONS`] TLS connections of each protocol (`BENCH_PROTOCOL` for one), a GET
/// on each, leaves them open and idle, and prints what the server's VmRSS grew by.
async fn idle_connections(address: SocketAddr, ca: &str, tokens: &[String], pid: u32) {
    let only = |value: &str| std::env::var("BENCH_PROTOCOL").map_or(true, |v| v == value);
    for (protocol, name) in [(Protocol::Http1, "1"), (Protocol::Http2, "2")] {
        if !only(name) {
            continue;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let before = resident_mib(pid);
        let mut held = Vec::with_capacity(IDLE_CONNECTIONS);
        for n in 0..IDLE_CONNECTIONS {
            let mut connection = connect(address, ca, protocol, None).await;
            let i = n % tokens.len();
            let headers = [("authorization", tokens[i].as_str()), ("accept", "application/json")];
            let answer = connection.send("GET", &format!("{BASE}/{}", node(i)), &headers, Bytes::new()).await;
            assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
            held.push(connection);
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let after = resident_mib(pid);
        println!(
            "connections HTTP/{}: server VmRSS {before:.1} MiB, with {IDLE_CONNECTIONS} idle kept-alive TLS \
             connections {after:.1} MiB: {:.1} KiB per connection",
            if name == "1" { "1.1" } else { "2" },
            (after - before) * 1024.0 / IDLE_CONNECTIONS as f64
        );
        drop(held);
    }
}

/// `BENCH_ONLY=reconnect`: the server's CPU per exporter patch when each patch comes on a new
/// HTTP/1.1 connection (as an exporter closing idle connections sends them), its TLS session
/// resumed from the last (or made in full with `BENCH_RESUME=off`), against the same patches on
/// kept-alive connections. The difference is what a connection costs: accept, handshake,
/// hyper's setup, close.
async fn reconnect(address: SocketAddr, ca: &str, tokens: &[String], pid: u32) {
    let cycles: usize = std::env::var("BENCH_RECONNECTS").ok().and_then(|v| v.parse().ok()).unwrap_or(4_000);
    let resume = !std::env::var("BENCH_RESUME").is_ok_and(|v| v == "off");
    println!(
        "reconnect: {CONNECTIONS} exporters, {cycles} patches each way, TLS sessions {}",
        if resume { "resumed" } else { "made in full" }
    );
    for kept_alive in [true, false] {
        let per_exporter = cycles / CONNECTIONS;
        let mut start = StartLine::new();
        for (i, token) in tokens.iter().enumerate() {
            let (token, path, patches, ca) =
                (token.clone(), format!("{BASE}/{}", node(i)), patch_bodies(i), ca.to_owned());
            start.spawn(async move |gate| {
                let config = client_config(&ca, Protocol::Http1, None);
                let open = async || {
                    let config = if resume { config.clone() } else { client_config(&ca, Protocol::Http1, None) };
                    connect_with(address, config, Protocol::Http1).await
                };
                let patch = async |connection: &mut Connection, n: usize| {
                    let headers = [("authorization", token.as_str()), ("content-type", "application/merge-patch+json")];
                    let answer = connection.send("PATCH", &path, &headers, patches[n % patches.len()].clone()).await;
                    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
                };
                // Warm-up: the token reviewed, a session ticket in the client's cache.
                let mut kept = open().await;
                for n in 0..50 {
                    patch(&mut kept, n).await;
                }
                gate.pass().await;
                for n in 0..per_exporter {
                    if kept_alive {
                        patch(&mut kept, n).await;
                    } else {
                        let mut connection = open().await;
                        patch(&mut connection, n).await;
                        drop(connection); // hyper closes it, as an idle pool does
                    }
                }
            });
        }
        let run = start.run(pid).await;
        let total = (per_exporter * CONNECTIONS) as f64;
        println!(
            "merge patch {:<26}: {:.1} µs of server CPU per patch ({:.0} patches/s, {} connections accepted, server \
             {:.2} cores, client {:.2} cores over {:.1} s)",
            if kept_alive { "on kept-alive connections" } else { "on a connection each" },
            run.server * 1e6 / total,
            total / run.seconds,
            run.accepted,
            run.server / run.seconds,
            run.client / run.seconds,
            run.seconds,
        );
    }
}

/// Exporter tasks that warm up, wait at the line, and run their measured part all at once.
struct StartLine {
    go: tokio::sync::broadcast::Sender<()>,
    ready: tokio::sync::mpsc::Sender<()>,
    readies: tokio::sync::mpsc::Receiver<()>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// A task's place at the [`StartLine`].
struct Gate {
    go: tokio::sync::broadcast::Receiver<()>,
    ready: tokio::sync::mpsc::Sender<()>,
}

impl Gate {
    /// Says this task is warmed up, and waits for the start.
    async fn pass(mut self) {
        self.ready.send(()).await.unwrap();
        self.go.recv().await.unwrap();
    }
}

/// What the measured part took: seconds, the server's and this process's CPU seconds, and the
/// TCP connections the machine accepted.
struct Run {
    seconds: f64,
    server: f64,
    client: f64,
    accepted: u64,
}

impl StartLine {
    fn new() -> Self {
        let (go, _) = tokio::sync::broadcast::channel(1);
        let (ready, readies) = tokio::sync::mpsc::channel(CONNECTIONS);
        Self { go, ready, readies, tasks: Vec::new() }
    }

    /// Spawns `task`, which calls [`Gate::pass`] once warmed up.
    fn spawn<F: Future<Output = ()> + Send + 'static>(&mut self, task: impl FnOnce(Gate) -> F) {
        let gate = Gate { go: self.go.subscribe(), ready: self.ready.clone() };
        self.tasks.push(tokio::spawn(task(gate)));
    }

    /// Waits until every task is warmed up, starts them, and measures until they end.
    async fn run(mut self, pid: u32) -> Run {
        for _ in 0..self.tasks.len() {
            self.readies.recv().await.unwrap();
        }
        let (server, client, accepted) = (cpu_seconds(pid), cpu_seconds(std::process::id()), tcp::tcp_accepted());
        let start = Instant::now();
        self.go.send(()).unwrap();
        for task in self.tasks {
            task.await.unwrap();
        }
        Run {
            seconds: start.elapsed().as_secs_f64(),
            server: cpu_seconds(pid) - server,
            client: cpu_seconds(std::process::id()) - client,
            accepted: tcp::tcp_accepted() - accepted,
        }
    }
}

async fn phase(
    address: SocketAddr,
    ca: &str,
    tokens: &[String],
    protocol: Protocol,
    operation: Operation,
    requests: usize,
    pid: u32,
) {
    let per_connection = requests / CONNECTIONS;
    let mut start = StartLine::new();
    for (i, token) in tokens.iter().enumerate() {
        let mut connection = connect(address, ca, protocol, None).await;
        let token = token.clone();
        let path = format!("{BASE}/{}", node(i));
        let patches = patch_bodies(i);
        start.spawn(async move |gate| {
            let mut send = async |n: usize| {
                let answer = match operation {
                    Operation::Patch => {
                        let headers =
                            [("authorization", token.as_str()), ("content-type", "application/merge-patch+json")];
                        connection.send("PATCH", &path, &headers, patches[n % patches.len()].clone()).await
                    }
                    Operation::Get => {
                        let headers = [("authorization", token.as_str()), ("accept", "application/json")];
                        connection.send("GET", &path, &headers, Bytes::new()).await
                    }
                };
                assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
            };
            for n in 0..200 {
                send(n).await; // warm-up: reviews cached, buffers grown
            }
            gate.pass().await;
            for n in 0..per_connection {
                send(n).await;
            }
        });
    }
    let run = start.run(pid).await;
    let total = (per_connection * CONNECTIONS) as f64;
    let name = match operation {
        Operation::Patch => "merge patch",
        Operation::Get => "GET",
    };
    let protocol = match protocol {
        Protocol::Http1 => "HTTP/1.1",
        Protocol::Http2 => "HTTP/2",
    };
    println!(
        "{name:<11} {protocol:<8}: {:.1} µs of server CPU per request ({:.0} requests/s, server {:.2} cores, \
         client {:.2} cores over {:.1} s)",
        run.server * 1e6 / total,
        total / run.seconds,
        run.server / run.seconds,
        run.client / run.seconds,
        run.seconds,
    );
}
