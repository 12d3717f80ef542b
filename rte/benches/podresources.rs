//! Costs of the kubelet podresources client: a `List` round trip over a real unix socket to the
//! fake kubelet, and the conversion of a decoded answer into the model.
//!
//! `cargo bench -p numaresources-rte --bench podresources` prints one line per case (median of
//! 7 rounds). Figures go to BENCHMARKS.md; nothing here asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // a benchmark prints its figures

use std::hint::black_box;
use std::time::{Duration, Instant};

use numaresources_rte::podresources::testing::{FakeKubelet, synthetic_list};
use numaresources_rte::podresources::{ClientConfig, PodResourcesClient, model, proto};
use prost::Message;

const ROUNDS: usize = 7;

/// Median time per iteration of `iterations` calls of `f`, over several rounds.
fn median(iterations: u32, mut round: impl FnMut(u32) -> Duration) -> Duration {
    let mut rounds: Vec<Duration> = (0..ROUNDS).map(|_| round(iterations) / iterations).collect();
    rounds.sort();
    rounds[rounds.len() / 2]
}

fn report(name: &str, per_op: Duration) {
    println!("{name:<56} {:>10.1} µs/op", per_op.as_secs_f64() * 1e6);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();

    for pods in [10usize, 250] {
        let answer = synthetic_list(pods);
        let wire_bytes = answer.encoded_len();
        let path = dir.path().join(format!("kubelet-{pods}.sock"));

        let (kubelet, client) = runtime.block_on(async {
            let kubelet = FakeKubelet { list: answer.clone(), ..Default::default() }.serve(&path).unwrap();
            let client = PodResourcesClient::new(ClientConfig::new(path.as_path().into()));
            // Warm up: connect once and fill the caches.
            for _ in 0..20 {
                client.list().await.unwrap();
            }
            (kubelet, client)
        });

        let round_trip = median(200, |n| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..n {
                    black_box(client.list().await.unwrap());
                }
                start.elapsed()
            })
        });
        report(&format!("List round trip + conversion, {pods} pods ({wire_bytes} B)"), round_trip);

        let encoded = answer.encode_to_vec();
        let decode = median(2_000, |n| {
            let start = Instant::now();
            for _ in 0..n {
                black_box(proto::ListPodResourcesResponse::decode(black_box(encoded.as_slice())).unwrap());
            }
            start.elapsed()
        });
        report(&format!("decode only, {pods} pods"), decode);

        // Inputs are cloned ahead of the clock; keep them to a few MiB so the cache is fair.
        let convert = median((20_000 / pods as u32).max(20), |n| {
            let inputs: Vec<_> = (0..n).map(|_| answer.clone()).collect();
            let start = Instant::now();
            for input in inputs {
                black_box(model::pods_from_proto(input));
            }
            start.elapsed()
        });
        report(&format!("conversion to the model only, {pods} pods"), convert);

        runtime.block_on(kubelet.stop()).unwrap();
    }
}
