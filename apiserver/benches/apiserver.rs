//! Server-side costs of the requests that dominate a real cluster, measured in process through
//! the router (no sockets, no TLS: this is the time our code spends per request):
//! LIST of 5,000 two-zone NRTs as JSON and as a Table, GET by name, merge-patch ingest, and the
//! memory 5,000 objects take (what they add, and the whole process's VmRSS).
//!
//! `cargo bench -p numaresources-apiserver` (`BENCH_WATCH_HISTORY=n` for another history length,
//! `BENCH_WATCH_HISTORY_BYTES=n` for another byte bound). The bench runs twice: with the
//! environment's allocator settings, then again in a child process with `MALLOC_ARENA_MAX=2`, as
//! the deployment sets it (glibc's per-thread arenas otherwise hold freed memory).
//! Figures go to BENCHMARKS.md; nothing asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use numaresources_apiserver::store::{DEFAULT_HISTORY, DEFAULT_HISTORY_BYTES};
use numaresources_apiserver::{AppState, Store, router};
use serde_json::json;
use tower::ServiceExt;

use numaresources_testkit::proc_status;
#[path = "../tests/support/mod.rs"]
mod support;

use support::BASE;
use support::fleet::worker;

const NODES: usize = 5_000;

async fn send(app: &Router, request: Request<Body>) -> usize {
    let response = app.clone().oneshot(request).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.into_body().collect().await.unwrap().to_bytes().len()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn resident_kib() -> Option<u64> {
    proc_status::status_kib("self", "VmRSS")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let before = resident_kib();
    // The watch history holds replaced versions, so its length drives memory after the ingest.
    let setting = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let history = setting("BENCH_WATCH_HISTORY", DEFAULT_HISTORY);
    let history_bytes = setting("BENCH_WATCH_HISTORY_BYTES", DEFAULT_HISTORY_BYTES);
    let arenas = std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "unset".to_owned());
    println!(
        "watch history: {history} events (BENCH_WATCH_HISTORY), {:.1} MiB (BENCH_WATCH_HISTORY_BYTES); MALLOC_ARENA_MAX={arenas}",
        history_bytes as f64 / 1048576.0
    );
    let store = Store::new(history).with_history_bytes(history_bytes);
    let state = Arc::new(AppState::new(Arc::new(store), "bench", "bench"));
    let app = router(state.clone());
    for i in 0..NODES {
        let body = serde_json::to_vec(&worker(&format!("worker-{i:05}"), 22)).unwrap();
        send(&app, Request::post(BASE).header("content-type", "application/json").body(Body::from(body)).unwrap())
            .await;
    }
    let after = resident_kib();
    if let (Some(before), Some(after)) = (before, after) {
        println!(
            "memory: {NODES} objects add {:.1} MiB resident; whole process VmRSS {:.1} MiB",
            (after - before) as f64 / 1024.0,
            after as f64 / 1024.0
        );
    }

    let (mut bytes, mut samples) = (0, Vec::new());
    for _ in 0..15 {
        let start = Instant::now();
        bytes = send(&app, Request::get(BASE).body(Body::empty()).unwrap()).await;
        samples.push(start.elapsed());
    }
    println!(
        "LIST {NODES} as JSON ({:.1} MiB): median {:.1} ms",
        bytes as f64 / 1048576.0,
        median(samples).as_secs_f64() * 1e3
    );

    // The first Table renders every object's row parts; later ones reuse them.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let mut samples = Vec::new();
    for _ in 0..16 {
        let start = Instant::now();
        bytes = send(&app, Request::get(BASE).header("accept", table).body(Body::empty()).unwrap()).await;
        samples.push(start.elapsed());
    }
    let first = samples.remove(0);
    println!(
        "LIST {NODES} as Table ({:.1} MiB): first {:.1} ms, then median {:.1} ms",
        bytes as f64 / 1048576.0,
        first.as_secs_f64() * 1e3,
        median(samples).as_secs_f64() * 1e3
    );
    print_resident("after the Table lists");

    let gets = 100_000;
    let start = Instant::now();
    for i in 0..gets {
        let uri = format!("{BASE}/worker-{:05}", i % NODES);
        send(&app, Request::get(uri).body(Body::empty()).unwrap()).await;
    }
    let per_get = start.elapsed() / gets as u32;
    println!(
        "GET by name: {:.2} µs per request ({:.0} requests/s on one task)",
        per_get.as_secs_f64() * 1e6,
        1.0 / per_get.as_secs_f64()
    );

    // Ingest: 32 concurrent writers sending merge patches that change `available` (nearly) every time.
    // The bodies are encoded before the clock starts: the figure is the server's time.
    let patches: Arc<Vec<Bytes>> = Arc::new(
        (0..30)
            .map(|available| {
                Bytes::from(serde_json::to_vec(&json!({"zones": worker("x", available)["zones"]})).unwrap())
            })
            .collect(),
    );
    let patches_per_writer = 2_000;
    let revision_before = state.store.visible_revision();
    let start = Instant::now();
    let mut writers = Vec::new();
    for writer in 0..32 {
        let app = app.clone();
        let patches = patches.clone();
        writers.push(tokio::spawn(async move {
            for n in 0..patches_per_writer {
                let node = (writer * 151 + n) % NODES;
                let request = Request::patch(format!("{BASE}/worker-{node:05}"))
                    .header("content-type", "application/merge-patch+json")
                    .body(Body::from(patches[n % patches.len()].clone()))
                    .unwrap();
                send(&app, request).await;
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let total = 32 * patches_per_writer;
    let elapsed = start.elapsed();
    println!(
        "ingest: {total} merge patches from 32 writers in {:.2} s = {:.0} updates/s ({} of them changes)",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        state.store.visible_revision() - revision_before
    );
    print_resident("after ingest (the watch history holds replaced versions)");
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        again_with_two_arenas();
    }
}

/// Runs this bench again in a child process with `MALLOC_ARENA_MAX=2` (glibc reads it at start).
fn again_with_two_arenas() {
    println!("\n--- again with MALLOC_ARENA_MAX=2 ---");
    let status = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe).args(std::env::args_os().skip(1)).env("MALLOC_ARENA_MAX", "2").status()
    });
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => println!("the MALLOC_ARENA_MAX=2 run failed: {status}"),
        Err(error) => println!("the MALLOC_ARENA_MAX=2 run did not start: {error}"),
    }
}

fn print_resident(when: &str) {
    if let Some(kib) = resident_kib() {
        println!("memory: whole process VmRSS {when}: {:.1} MiB", kib as f64 / 1024.0);
    }
}
