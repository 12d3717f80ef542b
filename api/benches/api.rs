//! Costs of the API crate's hot paths: what the API server pays per write and per read.
//!
//! `cargo bench -p numaresources-api` prints one line per case (median of several rounds).
//! Figures go to BENCHMARKS.md; nothing here asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use numaresources_testkit::median;

use std::hint::black_box;

use numaresources_api::nrt::{AttributeInfo, CostInfo, NodeResourceTopology, ResourceInfo, Zone};
use numaresources_api::quantity::Quantity;

/// A 2-NUMA worker as the exporter publishes it (the shape of tests/fixtures/nrt/worker-0-…).
fn worker(name: &str) -> NodeResourceTopology {
    let resource = |name: &str, capacity: i64, allocatable: i64, available: i64| ResourceInfo {
        name: name.into(),
        capacity: Quantity::from_i64(capacity),
        allocatable: Quantity::from_i64(allocatable),
        available: Quantity::from_i64(available),
    };
    let zone = |id: i64| Zone {
        name: format!("node-{id}").into(),
        zone_type: "Node".into(),
        costs: (0..2)
            .map(|other| CostInfo { name: format!("node-{other}").into(), value: if other == id { 10 } else { 21 } })
            .collect(),
        resources: vec![
            resource("cpu", 32, 30, 22),
            resource("example.com/sriov_vf", 8, 8, 7),
            resource("hugepages-1Gi", 17_179_869_184, 17_179_869_184, 12_884_901_888),
            resource("memory", 202_355_617_792, 184_022_315_008, 166_842_445_824),
        ],
        ..Zone::default()
    };
    let mut nrt = NodeResourceTopology::new(name);
    nrt.attributes = vec![
        AttributeInfo::new("nodeTopologyPodsFingerprint", "pfp0v001a9cddfe43845cd3a"),
        AttributeInfo::new("nodeTopologyPodsFingerprintMethod", "with-exclusive-resources"),
        AttributeInfo::new("topologyManagerScope", "container"),
        AttributeInfo::new("topologyManagerPolicy", "single-numa-node"),
    ];
    nrt.zones = vec![zone(0), zone(1)];
    nrt
}

/// Runs `f` in rounds of `iterations` and reports the median time per iteration.
fn bench(name: &str, iterations: u32, f: impl FnMut()) {
    let median = median::median_per_iteration(7, iterations, f);
    println!("{name:<48} {:>10.0} ns/op", median.as_nanos() as f64);
}

fn main() {
    let texts = ["32", "17179869184", "1536Mi", "500m", "4G", "1.5Gi"];
    bench("quantity: parse (6 mixed forms)", 200_000, || {
        for text in texts {
            black_box(Quantity::parse(black_box(text)).ok());
        }
    });
    let quantities: Vec<Quantity> = texts.iter().map(|t| Quantity::parse(t).unwrap()).collect();
    let mut out = String::with_capacity(32);
    bench("quantity: print canonical (6 mixed forms)", 200_000, || {
        for q in &quantities {
            out.clear();
            std::fmt::Write::write_fmt(&mut out, format_args!("{q}")).unwrap();
            black_box(&out);
        }
    });

    let nrt = worker("worker-0");
    let json = serde_json::to_vec(&nrt).unwrap();
    println!("(2-NUMA worker object: {} bytes of JSON)", json.len());
    bench("nrt: serialize 2-NUMA worker to JSON", 50_000, || {
        black_box(serde_json::to_vec(black_box(&nrt)).unwrap());
    });
    bench("nrt: deserialize 2-NUMA worker from JSON", 50_000, || {
        black_box(serde_json::from_slice::<NodeResourceTopology>(black_box(&json)).unwrap());
    });
    let mut shuffled = worker("worker-0");
    shuffled.zones.reverse();
    shuffled.attributes.reverse();
    bench("nrt: same_topology, equal but reordered", 200_000, || {
        black_box(black_box(&nrt).same_topology(black_box(&shuffled)));
    });
    bench("nrt: canonicalize a clone", 100_000, || {
        black_box(black_box(&shuffled).clone().canonical());
    });
}
