//! What one agent refresh costs on the 2-NUMA fixture: the scan without the gRPC (discovery,
//! middlewares, accounting, assembly, the publish decision), and full refreshes through a real
//! (in-process, fake) kubelet on a unix socket: wall time, CPU time (user + system, all threads
//! of the process, from /proc/self/stat) and the process's resident memory afterwards.
//!
//! Then reactivity: the run loop with the default allocation poll against a fake kubelet of 250
//! pods: CPU and kubelet calls while idle, and the time from a change of the kubelet's
//! allocations to the publish that shows it (p50/p99).
//!
//! `cargo bench -p numaresources-rte --bench agent` prints the figures; nothing asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use numaresources_testkit::median;
use numaresources_testkit::proc_status;
#[path = "../tests/support/mod.rs"]
mod support;

use std::future::Future;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_rte::agent::{self, Agent};
use numaresources_rte::config::Config;
use numaresources_rte::podresources::testing::RunningKubelet;
use numaresources_rte::podresources::testing::{FakeKubelet, synthetic_list};
use numaresources_rte::podresources::{Allocatable, PodResourcesClient, model, proto};
use numaresources_rte::publish::{Outcome, PublishError, Publisher};
use numaresources_rte::sysfs;
use numaresources_rte::trigger::Trigger;
use tokio::sync::{mpsc, oneshot};

/// Runs `f` in rounds of `iterations` and reports the median time per iteration.
fn bench(name: &str, iterations: u32, f: impl FnMut()) {
    let median = median::median_per_iteration(7, iterations, f);
    println!("{name:<64} {:>10.1} µs/op", median.as_nanos() as f64 / 1000.0);
}

/// CPU time the whole process has used so far, user + system, every thread.
///
/// /proc/self/stat counts it in USER_HZ ticks, which Linux fixes at 100 a second on the
/// architectures we build for: 10 ms resolution, so measure over enough work.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The command name (field 2) is parenthesised and may hold spaces: count from after it, so
    // field 3 is at index 0 and utime, stime (fields 14, 15) at 11, 12.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Wall and CPU time per iteration of `f` over `iterations` runs.
fn per_iteration(iterations: u32, f: impl FnOnce()) -> (Duration, Duration) {
    let (wall, cpu) = (Instant::now(), process_cpu());
    f();
    ((wall.elapsed()) / iterations, process_cpu().saturating_sub(cpu) / iterations)
}

fn print_times(name: &str, (wall, cpu): (Duration, Duration)) {
    let micros = |d: Duration| d.as_nanos() as f64 / 1000.0;
    println!("{name:<64} {:>10.1} µs/op wall {:>10.1} µs/op CPU", micros(wall), micros(cpu));
}

fn rss_kib() -> u64 {
    proc_status::status_kib("self", "VmRSS").unwrap_or(0)
}

/// Accepts everything, keeps nothing.
struct Discard;

impl Publisher for Discard {
    fn publish(&self, desired: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send {
        black_box(desired);
        std::future::ready(Ok(Outcome::Patched))
    }
}

fn allocatable() -> proto::AllocatableResourcesResponse {
    proto::AllocatableResourcesResponse { cpu_ids: (0..24).collect(), ..Default::default() }
}

/// Scans per CPU measurement: ≈0.5 s of work, so the 10 ms tick is a ≈2 % error.
const SCANS: u32 = 1000;

/// How long the idle agent is watched.
const IDLE: Duration = Duration::from_secs(30);
/// Allocation changes timed.
const CHANGES: u64 = 60;

/// Tells the bench what the agent publishes.
struct Told(mpsc::UnboundedSender<(Instant, NodeResourceTopology)>);

impl Publisher for Told {
    fn publish(&self, desired: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send {
        let _ = self.0.send((Instant::now(), desired));
        std::future::ready(Ok(Outcome::Patched))
    }
}

/// The `List` of 250 pods, plus (when `pinned`) one pod holding CPU 3 (NUMA 1) exclusively.
fn list_with(pinned: bool) -> proto::ListPodResourcesResponse {
    let mut list = synthetic_list(250);
    if pinned {
        list.pod_resources.push(proto::PodResources {
            namespace: "bench".into(),
            name: "pinned".into(),
            containers: vec![proto::ContainerResources { name: "app".into(), cpu_ids: vec![3], ..Default::default() }],
        });
    }
    list
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// The run loop with the flag defaults (periodic 10 s, allocation poll 500 ms, 1 scan/s; no
/// heartbeat, so every publish is a change) against `kubelet`.
async fn reactive(config: Config, socket: PathBuf, kubelet: &RunningKubelet) {
    let client = PodResourcesClient::new(numaresources_rte::podresources::ClientConfig::new(socket.into()));
    let (tell, mut told) = mpsc::unbounded_channel();
    let agent = Agent::new(config, client, Told(tell));
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(agent.run(async move { drop(stopped.await) }));
    told.recv().await.unwrap();

    let (calls, cpu, wall) = (kubelet.calls(), process_cpu(), Instant::now());
    tokio::time::sleep(IDLE).await;
    let seconds = wall.elapsed().as_secs_f64();
    let cpu_per_minute = process_cpu().saturating_sub(cpu).as_secs_f64() * 60.0 / seconds;
    let calls_per_second = (kubelet.calls() - calls) as f64 / seconds;
    println!(
        "{:<64} {:>10.1} ms CPU/min",
        "reactive: idle agent + fake kubelet, 250 pods (whole process)",
        cpu_per_minute * 1000.0
    );
    println!("{:<64} {:>10.2} calls/s", "reactive: kubelet podresources calls while idle", calls_per_second);

    let mut latencies = Vec::new();
    for i in 0..CHANGES {
        // More than the 1 scan/s limit apart, at phases spread over the 500 ms poll period.
        tokio::time::sleep(Duration::from_millis(1100 + i * 97 % 500)).await;
        while told.try_recv().is_ok() {}
        kubelet.set_list(list_with(i % 2 == 0));
        let changed = Instant::now();
        let (published, _) = told.recv().await.unwrap();
        latencies.push(published.saturating_duration_since(changed));
    }
    latencies.sort();
    let millis = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{:<64} {:>10.1} ms p50 {:>8.1} ms p99 {:>8.1} ms max",
        format!("reactive: allocation change to publish ({CHANGES} changes)"),
        millis(percentile(&latencies, 50)),
        millis(percentile(&latencies, 99)),
        millis(latencies[latencies.len() - 1])
    );
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

fn main() {
    let (dir, sys) = support::unpack("intel-2numa-24cpu");
    let mut config = Config::for_node("worker-0");
    config.sysfs.clone_from(&sys);

    let rss_start = rss_kib();
    for pods in [10, 100] {
        let list = model::pods_from_proto(synthetic_list(pods));
        let alloc = Allocatable::from_proto(allocatable());
        let scan = || {
            let machine = sysfs::discover(black_box(&sys)).unwrap().machine;
            let mut pods = list.clone();
            black_box(agent::assemble(&config, &machine, Some((&mut pods, &alloc)), Trigger::Periodic));
        };
        bench(&format!("agent: one scan without gRPC, {pods} pods (discover + assemble)"), 200, scan);
        let times = per_iteration(SCANS, || (0..SCANS).for_each(|_| scan()));
        print_times(&format!("agent: the same, {pods} pods, over {SCANS} scans"), times);
    }

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (times, rss_after) = runtime.block_on(async {
        let socket = dir.path().join("kubelet.sock");
        let kubelet = FakeKubelet { list: synthetic_list(100), allocatable: Some(allocatable()), hang: false };
        let _running = kubelet.serve(&socket).unwrap();
        let client = PodResourcesClient::new(numaresources_rte::podresources::ClientConfig::new(socket.into()));
        let mut agent = Agent::new(config.clone(), client, Discard);
        let (wall, cpu) = (Instant::now(), process_cpu());
        for _ in 0..SCANS {
            agent.refresh(Trigger::Periodic).await.unwrap();
        }
        let times = (wall.elapsed() / SCANS, process_cpu().saturating_sub(cpu) / SCANS);
        let stats = agent.metrics().snapshot();
        assert_eq!(
            (stats.scans, stats.publishes, stats.skipped_unchanged),
            (u64::from(SCANS), 1, u64::from(SCANS) - 1)
        );
        (times, rss_kib())
    });
    print_times(&format!("agent: full refresh over the unix socket, 100 pods (mean of {SCANS})"), times);
    println!(
        "{:<64} {:>10.1} MiB",
        format!("agent: resident memory after {SCANS} refreshes (whole process)"),
        rss_after as f64 / 1024.0
    );
    println!(
        "{:<64} {:>10.1} MiB",
        "agent: resident memory at start (fixture unpacked, before scans)",
        rss_start as f64 / 1024.0
    );

    runtime.block_on(async {
        let socket = dir.path().join("reactive.sock");
        let kubelet = FakeKubelet { list: list_with(false), allocatable: Some(allocatable()), hang: false };
        let running = kubelet.serve(&socket).unwrap();
        let mut config = config.clone();
        config.heartbeat = None;
        reactive(config, socket, &running).await;
    });
}
