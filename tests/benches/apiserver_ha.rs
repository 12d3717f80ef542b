//! The replicated NRT API server under failures, with real processes: 3 replicas of
//! `numaresources apiserver` (the Lease on the kube-apiserver double), 5,000 objects, 32 writers
//! at 2,000 changes/s in total, 100 watchers spread over the replicas.
//!
//! Figures, one line each:
//! - replication lag p99 (a write's acknowledgement → its event on each follower's watchers) and
//!   each follower's resident memory against the leader's, in the steady phase;
//! - kill -9 of the leader: time to a new leader, acknowledged writes lost, watchers that had to
//!   relist (a 410), watch events missed and duplicated (each watcher's stream against the
//!   acknowledged writes);
//! - rolling restart of all three (SIGTERM, restart, Ready, next): failed reads on replicas in
//!   service, acknowledged writes lost, total time writes were refused (100 ms buckets with a
//!   503);
//! - cold start of all three with 5,000 simulated agents that re-create their object when it is
//!   gone: time from the first replica up to every object back, and whether any replica was Ready
//!   with fewer objects before that.
//!
//! `NUMARESOURCES_HA_CHANGES_PER_SECOND` and `NUMARESOURCES_HA_WATCHERS` lighten the load (to
//! tell the replication's own lag from a saturated machine's). `NUMARESOURCES_HA_ONLY=memory`
//! stops after the steady phase's memory figures (≈20 s: a quick, repeatable look; each
//! replica's largest mappings go to stderr). Writers retry a 503 as client-go does (Retry-After, capped). Every phase is bounded.
//! `cargo bench -p numaresources-tests --bench apiserver_ha` builds the optimised binary and
//! prints the figures; nothing asserts a time. (`cargo test --bench apiserver_ha` runs it against
//! the debug binary: a smoke run, not figures.)

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use http::Method;
use kube::api::WatchEvent;
use numaresources_tests::replicas::{self, Cluster, NRT_PATH, ReplicaOptions, is_ready, nrt, request, write_retrying};
use tokio::time::Instant;

const REPLICAS: usize = 3;
const OBJECTS: u64 = 5_000;
const WRITERS: u64 = 32;
const CHANGES_PER_SECOND: u64 = 2_000;
const WATCHERS: u64 = 100;

/// `NUMARESOURCES_HA_<name>` when set (to see the figures at a lighter load), else `default`.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(format!("NUMARESOURCES_HA_{name}")).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
/// The steady phase before the leader is killed, and the run after it.
const STEADY: Duration = Duration::from_secs(10);
const AFTER_KILL: Duration = Duration::from_secs(10);
/// Bound for anything the cluster must do (elect, catch up, become Ready, refill).
const PATIENCE: Duration = Duration::from_secs(120);
/// Simulated agents check their object this often after a cold start.
const AGENT_PERIOD: Duration = Duration::from_secs(1);
/// Agents are run by this many tasks (each a share of the 5,000 objects).
const AGENT_TASKS: u64 = 50;
const BUCKET: Duration = Duration::from_millis(100);
/// How often the cold-start phase looks at every replica's readiness and contents.
const COLD_START_LOOK: Duration = Duration::from_millis(500);

/// One progress line on stderr as each step ends, so a slow or stuck step shows which it is.
fn progress(run_started: Instant, step: &str) {
    eprintln!("[{:7.1} s] {step}", run_started.elapsed().as_secs_f64());
}

fn name(i: u64) -> String {
    format!("worker-{i:05}")
}

fn version(answer: &numaresources_tests::replicas::Answer) -> Option<u64> {
    answer.resource_version()?.parse().ok()
}

/// One acknowledged write.
#[derive(Clone, Copy)]
struct Ack {
    object: u64,
    version: u64,
    at: Instant,
}

/// What every writer records.
#[derive(Default)]
struct WriteLog {
    acks: Vec<Ack>,
    /// 100 ms buckets (since the run's start) in which a write was refused with 503.
    refused_buckets: BTreeSet<u64>,
    failures: u64,
    /// The longest a write took, retries included.
    slowest: Duration,
}

/// One watcher's stream: (resourceVersion, arrival), its start, its relists.
#[derive(Default)]
struct WatchLog {
    replica: usize,
    start: u64,
    last: u64,
    events: Vec<(u64, Instant)>,
    relists: u64,
    resumes: u64,
}

struct Run {
    cluster: Cluster,
    clients: Vec<kube::Client>,
    /// Which replicas are up (writers and readers skip the others, as a Service would).
    up: Vec<Arc<AtomicBool>>,
    started: Instant,
    writes: Arc<Mutex<WriteLog>>,
    sequence: Arc<AtomicU64>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let began = Instant::now();
    let cluster = Cluster::start(REPLICAS, ReplicaOptions::default()).await;
    progress(began, "replicas started");
    let leader = cluster.wait_for_leader(None, PATIENCE).await.expect("a leader");
    progress(began, &format!("replica {leader} leads"));
    let mut clients = Vec::new();
    for i in 0..REPLICAS {
        clients.push(cluster.client(i).await);
    }
    let up = (0..REPLICAS).map(|_| Arc::new(AtomicBool::new(true))).collect();
    let mut run = Run {
        cluster,
        clients,
        up,
        started: Instant::now(),
        writes: Arc::default(),
        sequence: Arc::new(AtomicU64::new(1)),
    };
    wait_ready(&run, &(0..REPLICAS).collect::<Vec<_>>()).await;
    progress(began, "every replica Ready");
    run.cluster.wait_all_in_sync(PATIENCE).await;
    progress(began, "the Lease names every follower in sync");
    seed(&run).await;
    progress(began, &format!("{OBJECTS} objects created"));
    let start = current_version(&run.clients[leader]).await;

    // Steady phase, then kill -9 of the leader.
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&run, &stop);
    let watchers = spawn_watchers(&run, start, &stop);
    tokio::time::sleep(STEADY).await;
    progress(began, "steady phase over");
    report_memory(&run, leader);
    if std::env::var("NUMARESOURCES_HA_ONLY").is_ok_and(|only| only == "memory") {
        // The memory figure alone (a quick, repeatable look while changing what replicas hold).
        stop.store(true, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(3)).await;
        progress(began, "writers stopped");
        report_memory(&run, leader);
        return;
    }

    // Only what the followers the Lease names hold survives a kill: say who they were.
    println!("kill -9 of the leader: the Lease named {} of 2 followers in sync", run.cluster.in_sync().len());
    let killed_at = Instant::now();
    let election_readers = spawn_election_readers(&run, leader, killed_at, &stop);
    run.up[leader].store(false, Ordering::Relaxed);
    run.cluster.replicas[leader].kill();
    let new_leader = run.cluster.wait_for_leader(Some(leader), PATIENCE).await;
    let elected = killed_at.elapsed();
    progress(began, "leader killed, election over");
    tokio::time::sleep(AFTER_KILL).await;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        let _ = tokio::time::timeout(PATIENCE, writer).await;
    }
    progress(began, "writers stopped");
    let survivors: Vec<usize> = (0..REPLICAS).filter(|i| *i != leader).collect();
    let lost = lost_writes(&run, &survivors).await;
    match new_leader {
        Some(_) => println!("kill -9 of the leader: new leader after {:.2} s", elected.as_secs_f64()),
        None => println!("kill -9 of the leader: NO new leader within {} s", PATIENCE.as_secs()),
    }
    println!("kill -9 of the leader: {lost} acknowledged writes lost");
    for (what, reader) in election_readers {
        let answers = reader.await.unwrap_or_default();
        let failed: Vec<Duration> = answers.iter().filter(|(_, ok)| !ok).map(|(at, _)| *at).collect();
        let window = match (failed.first(), failed.last()) {
            (Some(first), Some(last)) => {
                format!(", from {:.2} s to {:.2} s after the kill", first.as_secs_f64(), last.as_secs_f64())
            }
            _ => String::new(),
        };
        println!(
            "kill -9 of the leader: {what} on the followers: {} of {} failed{window}",
            failed.len(),
            answers.len()
        );
    }
    let logs: Vec<WatchLog> = {
        let mut logs = Vec::new();
        for watcher in watchers {
            if let Ok(Ok(log)) = tokio::time::timeout(PATIENCE, watcher).await {
                logs.push(log);
            }
        }
        logs
    };
    report_watchers(&run, &logs, leader, killed_at);

    // Back to three, then the rolling restart.
    run.cluster.respawn(leader);
    run.up[leader].store(true, Ordering::Relaxed);
    wait_ready(&run, &[leader]).await;
    progress(began, &format!("replica {leader} back and Ready"));
    run.cluster.wait_all_in_sync(PATIENCE).await;
    rolling_restart(&mut run).await;
    progress(began, "rolling restart over");

    cold_start(&mut run).await;
    progress(began, "cold start over");
}

/// One election reader's task: each answer's time since the kill and whether it was a 200.
type ElectionReader = tokio::task::JoinHandle<Vec<(Duration, bool)>>;

/// Readers polling the followers of `leader` every 50 ms from just before it is killed, one per
/// kind of read: each answer's time since `killed_at` and whether it was a 200. A consistent
/// LIST (no resourceVersion) needs the leader's revision; one with `resourceVersion=0` is
/// served from the replica's own state.
fn spawn_election_readers(
    run: &Run,
    leader: usize,
    killed_at: Instant,
    stop: &Arc<AtomicBool>,
) -> Vec<(&'static str, ElectionReader)> {
    let followers: Vec<usize> = (0..REPLICAS).filter(|i| *i != leader).collect();
    [
        ("consistent LISTs", format!("{NRT_PATH}?limit=1")),
        ("LISTs with resourceVersion=0", format!("{NRT_PATH}?limit=1&resourceVersion=0")),
    ]
    .into_iter()
    .map(|(what, path)| {
        let (clients, followers, stop) = (run.clients.clone(), followers.clone(), stop.clone());
        let reader = tokio::spawn(async move {
            let mut answers = Vec::new();
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let client = &clients[followers[k % followers.len()]];
                k += 1;
                let ok = request(client, Method::GET, &path, None).await.is_ok_and(|a| a.status == 200);
                answers.push((killed_at.elapsed(), ok));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answers
        });
        (what, reader)
    })
    .collect()
}

/// Waits until each of `replicas` answers /readyz 200.
async fn wait_ready(run: &Run, replicas: &[usize]) {
    for &i in replicas {
        replicas::wait_ready(&run.clients[i], PATIENCE).await;
    }
}

/// Creates the 5,000 objects, 32 at a time.
async fn seed(run: &Run) {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (client, next) = (run.clients[usize::try_from(w).unwrap() % REPLICAS].clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= OBJECTS {
                    return;
                }
                let deadline = Instant::now() + PATIENCE;
                let _ = write_retrying(&client, Method::POST, NRT_PATH, &nrt(&name(i), 0), deadline).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn current_version(client: &kube::Client) -> u64 {
    let answer = request(client, Method::GET, &format!("{NRT_PATH}?limit=1"), None).await.unwrap();
    answer.body["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// 32 writers, each replacing objects at its share of the rate through a replica that is up.
fn spawn_writers(run: &Run, stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    let period = Duration::from_micros(1_000_000 * WRITERS / setting("CHANGES_PER_SECOND", CHANGES_PER_SECOND).max(1));
    (0..WRITERS)
        .map(|w| {
            let (clients, up, log) = (run.clients.clone(), run.up.clone(), run.writes.clone());
            let (stop, sequence, started) = (stop.clone(), run.sequence.clone(), run.started);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let object = (w + k * WRITERS) % OBJECTS;
                    k += 1;
                    let replicas: Vec<usize> = (0..REPLICAS).filter(|i| up[*i].load(Ordering::Relaxed)).collect();
                    let Some(&replica) = replicas.get(usize::try_from(w + k).unwrap() % replicas.len().max(1)) else {
                        continue;
                    };
                    let seq = sequence.fetch_add(1, Ordering::Relaxed);
                    let path = format!("{NRT_PATH}/{}", name(object));
                    let deadline = Instant::now() + PATIENCE;
                    let body = nrt(&name(object), seq);
                    let sent = Instant::now();
                    let outcome = write_retrying(&clients[replica], Method::PUT, &path, &body, deadline).await;
                    let at = Instant::now();
                    let mut log = log.lock().unwrap();
                    log.slowest = log.slowest.max(at.duration_since(sent));
                    match outcome {
                        Ok((answer, refusals)) => {
                            if !refusals.is_empty() {
                                let first = at.duration_since(started).as_millis() as u64 / BUCKET.as_millis() as u64;
                                let buckets = (refusals.len() as u64).max(1);
                                log.refused_buckets.extend(first.saturating_sub(buckets)..=first);
                            }
                            match version(&answer).filter(|_| answer.ok()) {
                                Some(version) => log.acks.push(Ack { object, version, at }),
                                None => log.failures += 1,
                            }
                        }
                        Err(_) => log.failures += 1,
                    }
                }
            })
        })
        .collect()
}

/// 100 watchers from `start`, watcher i on replica i % 3; each moves to the next replica when
/// its replica goes away (resuming from its last version), and relists only on a 410.
fn spawn_watchers(run: &Run, start: u64, stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<WatchLog>> {
    (0..usize::try_from(setting("WATCHERS", WATCHERS)).unwrap())
        .map(|i| {
            let (clients, stop) = (run.clients.clone(), stop.clone());
            tokio::spawn(async move {
                let mut log = WatchLog { replica: i % REPLICAS, start, last: start, ..WatchLog::default() };
                let mut replica = log.replica;
                let deadline = Instant::now() + STEADY + AFTER_KILL + PATIENCE;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let Ok(stream) = light_watch(&clients[replica], log.last).await else {
                        replica = (replica + 1) % REPLICAS;
                        log.resumes += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let mut stream = stream.boxed();
                    loop {
                        let next = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
                        if stop.load(Ordering::Relaxed) {
                            return log;
                        }
                        let Ok(next) = next else { continue };
                        match next {
                            Some(Ok(
                                WatchEvent::Added(object) | WatchEvent::Modified(object) | WatchEvent::Deleted(object),
                            )) => {
                                let version = object.metadata.resource_version.parse().unwrap_or(0);
                                log.events.push((version, Instant::now()));
                                log.last = log.last.max(version);
                            }
                            Some(Ok(WatchEvent::Bookmark(bookmark))) => {
                                let version = bookmark.metadata.resource_version.parse().unwrap_or(0);
                                log.last = log.last.max(version);
                            }
                            Some(Ok(WatchEvent::Error(status))) if status.code == 410 => {
                                log.relists += 1;
                                log.last = current_version(&clients[replica]).await;
                                break;
                            }
                            Some(Ok(WatchEvent::Error(_)) | Err(_)) | None => {
                                replica = (replica + 1) % REPLICAS;
                                log.resumes += 1;
                                break;
                            }
                        }
                    }
                }
                log
            })
        })
        .collect()
}

/// Just what a watcher of this bench reads of an object: its resourceVersion. (Decoding whole
/// objects for 100 watchers at 2,000 events/s made the bench client the bottleneck.)
#[derive(Clone, serde::Deserialize)]
struct Versioned {
    metadata: VersionedMeta,
}

#[derive(Clone, serde::Deserialize)]
struct VersionedMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

/// A watch of every NRT on `client` after `after`, with bookmarks, for at most a minute.
async fn light_watch(
    client: &kube::Client,
    after: u64,
) -> Result<impl futures_util::Stream<Item = Result<WatchEvent<Versioned>, kube::Error>> + use<>, kube::Error> {
    let path = format!("{NRT_PATH}?watch=true&allowWatchBookmarks=true&timeoutSeconds=60&resourceVersion={after}");
    let request = http::Request::get(path).body(Vec::new()).map_err(kube::Error::HttpError)?;
    client.request_events::<Versioned>(request).await
}

/// Each follower's resident memory against the leader's (read while every replica runs).
fn report_memory(run: &Run, leader: usize) {
    let rss: Vec<Option<u64>> = run.cluster.replicas.iter().map(|r| r.rss_kib()).collect();
    let leader_rss = rss[leader].unwrap_or(0) as f64;
    for (i, follower) in rss.iter().enumerate().filter(|(i, _)| *i != leader) {
        let follower = follower.unwrap_or(0) as f64;
        println!(
            "memory: follower {i} {:.1} MiB vs leader {:.1} MiB ({:+.1} %)",
            follower / 1024.0,
            leader_rss / 1024.0,
            (follower - leader_rss) / leader_rss.max(1.0) * 100.0
        );
    }
    for (i, replica) in run.cluster.replicas.iter().enumerate() {
        if let Some(pid) = replica.pid() {
            eprintln!("memory of replica {i}{}: {}", if i == leader { " (leader)" } else { "" }, mappings(pid));
        }
    }
}

/// The resident memory of a process's largest mappings (the heap, malloc's arenas, stacks), to
/// tell where a difference lies.
fn mappings(pid: u32) -> String {
    let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else { return String::new() };
    let mut mappings: Vec<(u64, String)> = Vec::new();
    let mut current = String::new();
    for line in smaps.lines() {
        if let Some(rss) = line.strip_prefix("Rss:") {
            let kib: u64 = rss.trim().trim_end_matches(" kB").parse().unwrap_or(0);
            mappings.push((kib, current.clone()));
        } else if line.split_whitespace().next().is_some_and(|first| first.contains('-') && !first.ends_with(':')) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let size = fields[0].split_once('-').map_or(0, |(a, b)| {
                u64::from_str_radix(b, 16).unwrap_or(0).saturating_sub(u64::from_str_radix(a, 16).unwrap_or(0))
            });
            current = format!("{}({} KiB)", fields.get(5).copied().unwrap_or("anon"), size / 1024);
        }
    }
    mappings.sort_by_key(|m| std::cmp::Reverse(m.0));
    let total: u64 = mappings.iter().map(|m| m.0).sum();
    let top: Vec<String> = mappings.iter().take(6).map(|(kib, what)| format!("{what} {kib}")).collect();
    format!("{total} KiB: {}", top.join(", "))
}

/// Lag p99 (steady phase, followers only), relists, missed and duplicated events per watcher.
fn report_watchers(run: &Run, logs: &[WatchLog], leader: usize, steady_end: Instant) {
    let writes = run.writes.lock().unwrap();
    let acked: BTreeMap<u64, Instant> = writes.acks.iter().map(|a| (a.version, a.at)).collect();
    // Lag: for each (version, follower the watcher started on), the first arrival.
    let mut first: BTreeMap<(u64, usize), Instant> = BTreeMap::new();
    for log in logs.iter().filter(|log| log.replica != leader) {
        for (version, at) in &log.events {
            first.entry((*version, log.replica)).and_modify(|t| *t = (*t).min(*at)).or_insert(*at);
        }
    }
    let mut lags: Vec<Duration> = first
        .iter()
        .filter(|(_, at)| **at < steady_end)
        .filter_map(|((version, _), at)| acked.get(version).map(|ack| at.saturating_duration_since(*ack)))
        .collect();
    lags.sort();
    let p99 = lags.get(lags.len().saturating_mul(99) / 100).copied().unwrap_or_default();
    println!(
        "replication lag: p99 {:.1} ms over {} (write, follower) pairs (ack → first event on a watcher of that follower)",
        p99.as_secs_f64() * 1000.0,
        lags.len()
    );
    let relisted = logs.iter().filter(|l| l.relists > 0).count();
    let resumed = logs.iter().filter(|l| l.resumes > 0).count();
    let (mut missed, mut duplicated, mut worst_missed) = (0usize, 0usize, 0usize);
    for log in logs.iter().filter(|l| l.relists == 0) {
        let seen: BTreeSet<u64> = log.events.iter().map(|(v, _)| *v).collect();
        duplicated += log.events.len() - seen.len();
        let expected = acked.range(log.start + 1..=log.last).filter(|(v, _)| !seen.contains(v)).count();
        missed += expected;
        worst_missed = worst_missed.max(expected);
    }
    println!(
        "kill -9 of the leader: {relisted} of {} watchers relisted, {resumed} resumed on another replica; \
         {missed} acknowledged events missed (worst watcher {worst_missed}), {duplicated} duplicated",
        logs.len()
    );
    println!(
        "writers: {} writes acknowledged, {} failed after retries, slowest {:.2} s",
        writes.acks.len(),
        writes.failures,
        writes.slowest.as_secs_f64()
    );
}

/// Acknowledged writes whose object on some survivor is older than the acknowledged version.
async fn lost_writes(run: &Run, survivors: &[usize]) -> usize {
    let latest: BTreeMap<u64, u64> = {
        let writes = run.writes.lock().unwrap();
        let mut latest = BTreeMap::new();
        for ack in &writes.acks {
            let entry = latest.entry(ack.object).or_insert(0);
            *entry = (*entry).max(ack.version);
        }
        latest
    };
    let mut lost = 0;
    for &i in survivors {
        let answer = request(&run.clients[i], Method::GET, NRT_PATH, None).await;
        let Ok(answer) = answer else { continue };
        let stored: BTreeMap<String, u64> = answer.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| {
                let meta = &o["metadata"];
                Some((meta["name"].as_str()?.to_owned(), meta["resourceVersion"].as_str()?.parse().ok()?))
            })
            .collect();
        lost +=
            latest.iter().filter(|(object, version)| stored.get(&name(**object)).is_none_or(|v| v < *version)).count();
    }
    lost
}

async fn rolling_restart(run: &mut Run) {
    *run.writes.lock().unwrap() = WriteLog::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(run, &stop);
    let failed_reads = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (clients, up, stop) = (run.clients.clone(), run.up.clone(), stop.clone());
        let (failed, reads) = (failed_reads.clone(), reads.clone());
        tokio::spawn(async move {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                let replicas: Vec<usize> = (0..REPLICAS).filter(|i| up[*i].load(Ordering::Relaxed)).collect();
                let Some(&replica) = replicas.get(usize::try_from(k).unwrap() % replicas.len().max(1)) else {
                    continue;
                };
                let path = format!("{NRT_PATH}/{}", name(k % OBJECTS));
                reads.fetch_add(1, Ordering::Relaxed);
                if !request(&clients[replica], Method::GET, &path, None).await.is_ok_and(|a| a.status == 200) {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let began = Instant::now();
    for i in 0..REPLICAS {
        // As kube-proxy after the preStop sleep: out of service first, then SIGTERM.
        run.up[i].store(false, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::block_in_place(|| run.cluster.replicas[i].terminate(PATIENCE));
        run.cluster.respawn(i);
        wait_ready(run, &[i]).await;
        run.up[i].store(true, Ordering::Relaxed);
        progress(began, &format!("rolling restart: replica {i} restarted and Ready"));
    }
    let took = began.elapsed();
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        let _ = tokio::time::timeout(PATIENCE, writer).await;
    }
    progress(began, "rolling restart: writers stopped");
    let _ = reader.await;
    progress(began, "rolling restart: reader stopped");
    let lost = lost_writes(run, &(0..REPLICAS).collect::<Vec<_>>()).await;
    let writes = run.writes.lock().unwrap();
    println!(
        "rolling restart ({:.1} s): {} of {} reads failed, {lost} acknowledged writes lost, writes refused for {:.1} s in total; \
         {} writes acknowledged, {} failed, slowest {:.2} s",
        took.as_secs_f64(),
        failed_reads.load(Ordering::Relaxed),
        reads.load(Ordering::Relaxed),
        writes.refused_buckets.len() as f64 * BUCKET.as_secs_f64(),
        writes.acks.len(),
        writes.failures,
        writes.slowest.as_secs_f64()
    );
}

async fn cold_start(run: &mut Run) {
    for replica in &mut run.cluster.replicas {
        replica.kill();
    }
    run.cluster.options.store_warmup = "60s".to_owned();
    // Every simulated agent runs as a Running exporter pod on its node: the replicas' warm-up
    // waits for their objects (the bound above is for exporters that never report).
    run.cluster.double.set_exporter_pods((0..OBJECTS).map(name).collect());
    let first_up = Instant::now();
    let everything_back = Arc::new(Mutex::new(None::<Instant>));
    let ready_too_early = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Agents: each creates its object until a replica has it (201, or 409 when it is there).
    let agents: Vec<_> = (0..AGENT_TASKS)
        .map(|t| {
            let (clients, stop) = (run.clients.clone(), stop.clone());
            tokio::spawn(async move {
                let mut published = BTreeSet::new();
                while !stop.load(Ordering::Relaxed) && published.len() < usize::try_from(OBJECTS / AGENT_TASKS).unwrap()
                {
                    for i in (t..OBJECTS).step_by(usize::try_from(AGENT_TASKS).unwrap()) {
                        if published.contains(&i) {
                            continue;
                        }
                        // As the exporters do: write first (a cold replica refuses reads, and
                        // writes are what warm it); an object that is there already is fine.
                        let client = &clients[usize::try_from(i).unwrap() % REPLICAS];
                        let created = request(client, Method::POST, NRT_PATH, Some(&nrt(&name(i), 0))).await;
                        if created.is_ok_and(|a| a.status == 201 || a.status == 409) {
                            published.insert(i);
                        }
                    }
                    tokio::time::sleep(AGENT_PERIOD).await;
                }
            })
        })
        .collect();
    for i in 0..REPLICAS {
        run.cluster.respawn(i);
    }
    progress(first_up, "cold start: every replica started");
    // Watch readiness and contents until every object is back on every replica.
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        let mut complete = 0;
        for i in 0..REPLICAS {
            let client = &run.clients[i];
            let ready = is_ready(client).await;
            let count = request(client, Method::GET, &format!("{NRT_PATH}?resourceVersion=0"), None)
                .await
                .ok()
                .filter(|a| a.status == 200)
                .and_then(|a| a.body["items"].as_array().map(Vec::len))
                .unwrap_or(0);
            if count == usize::try_from(OBJECTS).unwrap() {
                complete += 1;
            } else if ready {
                ready_too_early.fetch_add(1, Ordering::Relaxed);
            }
        }
        if complete == REPLICAS {
            *everything_back.lock().unwrap() = Some(Instant::now());
            break;
        }
        // Three LISTs of up to 5,000 objects per look: not so often that they are the load.
        tokio::time::sleep(COLD_START_LOOK).await;
    }
    stop.store(true, Ordering::Relaxed);
    for agent in agents {
        let _ = tokio::time::timeout(PATIENCE, agent).await;
    }
    let back = *everything_back.lock().unwrap();
    match back {
        Some(at) => println!(
            "cold start with {OBJECTS} agents: every object back on every replica {:.1} s after the first replica \
             started; {} observations of a Ready replica with an incomplete store",
            at.duration_since(first_up).as_secs_f64(),
            ready_too_early.load(Ordering::Relaxed)
        ),
        None => println!("cold start with {OBJECTS} agents: NOT every object back within {} s", PATIENCE.as_secs()),
    }
}
