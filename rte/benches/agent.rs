//! What one agent refresh costs on the 2-NUMA fixture: the scan without the gRPC (discovery,
//! middlewares, accounting, assembly, the publish decision), and the process's resident memory
//! after 100 full refreshes through a real (in-process, fake) kubelet on a unix socket.
//!
//! `cargo bench -p numaresources-rte --bench agent` prints the figures; nothing asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use std::future::Future;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_rte::agent::{self, Agent, Trigger};
use numaresources_rte::config::Config;
use numaresources_rte::podresources::testing::{FakeKubelet, synthetic_list};
use numaresources_rte::podresources::{Allocatable, PodResourcesClient, model, proto};
use numaresources_rte::publish::{Outcome, PublishError, Publisher};
use numaresources_rte::sysfs;

/// Runs `f` in rounds of `iterations` and reports the median time per iteration.
fn bench(name: &str, iterations: u32, mut f: impl FnMut()) {
    let mut rounds: Vec<Duration> = (0..7)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iterations {
                f();
            }
            start.elapsed() / iterations
        })
        .collect();
    rounds.sort();
    println!("{name:<64} {:>10.1} µs/op", rounds[rounds.len() / 2].as_nanos() as f64 / 1000.0);
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
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

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/intel-2numa-24cpu.tar.gz");
    let file = std::fs::File::open(tarball).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir.path()).unwrap();
    let sys = dir.path().join("sys");
    let mut config = Config::for_node("worker-0");
    config.sysfs.clone_from(&sys);

    let rss_start = rss_kib();
    for pods in [10, 100] {
        let list = model::pods_from_proto(synthetic_list(pods));
        let alloc = Allocatable::from_proto(allocatable());
        bench(&format!("agent: one scan without gRPC, {pods} pods (discover + assemble)"), 200, || {
            let machine = sysfs::discover(black_box(&sys)).unwrap().machine;
            let mut pods = list.clone();
            black_box(agent::assemble(&config, &machine, Some((&mut pods, &alloc)), Trigger::Periodic));
        });
    }

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (per_refresh, rss_after) = runtime.block_on(async {
        let socket = dir.path().join("kubelet.sock");
        let kubelet = FakeKubelet { list: synthetic_list(100), allocatable: Some(allocatable()), hang: false };
        let _running = kubelet.serve(&socket).unwrap();
        let client = PodResourcesClient::new(numaresources_rte::podresources::ClientConfig::new(socket.into()));
        let mut agent = Agent::new(config.clone(), client, Discard);
        let start = Instant::now();
        for _ in 0..100 {
            agent.refresh(Trigger::Periodic).await.unwrap();
        }
        let per_refresh = start.elapsed() / 100;
        let stats = agent.metrics().snapshot();
        assert_eq!((stats.scans, stats.publishes, stats.skipped_unchanged), (100, 1, 99));
        (per_refresh, rss_kib())
    });
    println!(
        "{:<64} {:>10.1} µs/op",
        "agent: full refresh over the unix socket, 100 pods (mean of 100)",
        per_refresh.as_nanos() as f64 / 1000.0
    );
    println!(
        "{:<64} {:>10.1} MiB",
        "agent: resident memory after 100 refreshes (whole process)",
        rss_after as f64 / 1024.0
    );
    println!(
        "{:<64} {:>10.1} MiB",
        "agent: resident memory at start (fixture unpacked, before scans)",
        rss_start as f64 / 1024.0
    );
}
