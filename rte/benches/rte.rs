//! Costs of the exporter's host-facing building blocks: machine discovery, the pods fingerprint
//! and the NUMA placement encoding, i.e. what one refresh pays besides talking to the kubelet.
//!
//! `cargo bench -p numaresources-rte --bench rte` prints one line per case (median of several
//! rounds). Figures go to BENCHMARKS.md; nothing here asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use numaresources_testkit::median;
#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;

use numaresources_rte::fingerprint::Fingerprint;
use numaresources_rte::numaplacement::{self, Decoder, Metadata, Placement};
use numaresources_rte::sysfs::{self, capacity_zones};

/// Runs `f` in rounds of `iterations` and reports the median time per iteration.
fn bench(name: &str, iterations: u32, f: impl FnMut()) {
    let median = median::median_per_iteration(7, iterations, f);
    println!("{name:<56} {:>10.0} ns/op", median.as_nanos() as f64);
}

fn pods(count: usize) -> Vec<(String, String)> {
    (0..count).map(|i| (format!("namespace-{}", i % 17), format!("workload-{i:05}-7c9f8b6d5-x2k4q"))).collect()
}

fn containers(count: usize, numa_nodes: u32) -> Vec<(String, String, String, i64)> {
    (0..count)
        .map(|i| {
            let numa = i64::from(u32::try_from(i).unwrap() % numa_nodes);
            (format!("namespace-{}", i % 17), format!("workload-{:05}", i / 2), format!("c{}", i % 2), numa)
        })
        .collect()
}

fn main() {
    let (_dir, sys) = support::unpack("intel-2numa-24cpu");

    bench("sysfs: discover intel-2numa-24cpu (2 nodes, 24 CPUs)", 200, || {
        black_box(sysfs::discover(black_box(&sys)).unwrap());
    });
    let machine = sysfs::discover(&sys).unwrap().machine;
    bench("sysfs: capacity zones of it", 100_000, || {
        black_box(capacity_zones(black_box(&machine)));
    });
    bench("sysfs: cpu → NUMA map of it", 100_000, || {
        black_box(machine.cpu_to_numa());
    });

    // 10,000 pods: the figure (far beyond a node's 110-pod default, as a worst case).
    for count in [100, 1_000, 10_000] {
        let pods = pods(count);
        bench(&format!("fingerprint: add + sign {count} pods"), 20_000_000 / count as u32, || {
            let mut fingerprint = Fingerprint::with_capacity(pods.len());
            for (namespace, name) in &pods {
                fingerprint.add(namespace, name);
            }
            black_box(fingerprint.sign());
        });
    }

    for (count, numa_nodes) in [(100, 2), (1_000, 4)] {
        let containers = containers(count, numa_nodes);
        let placements = || {
            containers.iter().map(|(namespace, pod, container, numa_node)| Placement {
                namespace,
                pod,
                container,
                numa_node: *numa_node,
            })
        };
        bench(
            &format!("placement: encode {count} containers on {numa_nodes} nodes"),
            20_000_000 / count as u32,
            || {
                black_box(numaplacement::encode(numa_nodes, placements()).unwrap());
            },
        );
        let payload = numaplacement::encode(numa_nodes, placements()).unwrap();
        let metadata = payload.metadata_string();
        let vectors: std::collections::BTreeMap<i64, String> =
            payload.vectors.iter().map(|(&n, v)| (i64::from(n), v.clone())).collect();
        bench(&format!("placement: parse + decode {count} containers"), 20_000_000 / count as u32, || {
            let decoder = Decoder::new(&Metadata::parse(&metadata).unwrap(), vectors.clone()).unwrap();
            black_box(
                decoder.result(containers.iter().map(|(a, b, c, _)| (a.as_str(), b.as_str(), c.as_str()))).unwrap(),
            );
        });
    }
}
