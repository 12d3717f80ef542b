//! What one pod costs the extender: filter over 5,000 nodes (and over the 500 kube-scheduler
//! actually sends at that size), then prioritize over those that pass, as kube-scheduler calls
//! them (node-cache capable), single-threaded.
//!
//! The last cases run the extender's HTTP server on loopback and play kube-scheduler's
//! scheduling cycle against it: one pod at a time (kube-scheduler decides one pod at a time and
//! binds asynchronously), a filter request then a prioritize request with the nodes that passed;
//! they print pods per second and the per-pod round trips.
//!
//! `cargo bench -p numaresources-extender --bench extender` prints p50, p99 and the largest of
//! 200 pods per case. Each pod is timed in each of [`ROUNDS`] rounds and its least time kept:
//! the VM this runs on shares its caches and cores with neighbours, which add to any one run's
//! time a third or more that is not ours; each round sweeps every node, so every round sees the
//! caches in the same state. Figures go to BENCHMARKS.md; nothing here asserts a time.

#![allow(clippy::print_stdout, clippy::unwrap_used)] // a benchmark prints its figures

use std::hint::black_box;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use numaresources_api::fit::kubelet::PolicyOptions;
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_extender::engine::Engine;
use serde_json::json;

const NODES: usize = 5_000;
const PODS: usize = 200;
/// Rounds over the pods; each pod's least time of them is reported.
const ROUNDS: usize = 10;

/// A 2-NUMA worker with 32 CPUs and 64 GiB per zone, some of it taken, a device on zone 1, and
/// a policy: most single-numa-node, some restricted and best-effort.
fn nrt(i: usize) -> NodeResourceTopology {
    let policy = match i % 10 {
        0 => "restricted",
        1 => "best-effort",
        _ => "single-numa-node",
    };
    let zone = |id: usize| {
        let cpus = 32 - ((i * 7 + id * 13) % 28) as i64;
        let memory = (64 - ((i * 5 + id * 3) % 48) as i64) << 30;
        let mut resources = vec![
            json!({"name": "cpu", "capacity": "32", "allocatable": "30", "available": cpus.to_string()}),
            json!({"name": "memory", "capacity": (64_i64 << 30).to_string(), "allocatable": (62_i64 << 30).to_string(),
                   "available": memory.to_string()}),
            json!({"name": "hugepages-1Gi", "capacity": "16Gi", "allocatable": "16Gi", "available": "8Gi"}),
        ];
        if id == 1 {
            resources.push(json!({"name": "example.com/nic", "capacity": "8", "allocatable": "8", "available": ((i % 9) as i64).to_string()}));
        }
        json!({"name": format!("node-{id}"), "type": "Node", "resources": resources,
               "costs": [{"name": "node-0", "value": if id == 0 { 10 } else { 21 }}, {"name": "node-1", "value": if id == 1 { 10 } else { 21 }}]})
    };
    serde_json::from_value(json!({"metadata": {"name": format!("worker-{i:05}"), "resourceVersion": "1"},
        "attributes": [{"name": "topologyManagerPolicy", "value": policy}, {"name": "topologyManagerScope", "value": "container"}],
        "zones": [zone(0), zone(1)]}))
    .unwrap()
}

/// Pod `i`: Guaranteed, 2 to 16 CPUs, memory, and every third a NIC.
fn pod(i: usize) -> Pod {
    let cpu = 2 + (i % 8) * 2;
    let mut limits = json!({"cpu": cpu.to_string(), "memory": format!("{}Gi", 1 + i % 16)});
    if i.is_multiple_of(3) {
        limits["example.com/nic"] = json!("1");
    }
    serde_json::from_value(
        json!({"metadata": {"name": format!("pod-{i}"), "namespace": "bench", "uid": format!("uid-{i}")},
        "spec": {"containers": [{"name": "app", "resources": {"requests": limits, "limits": limits}}]}}),
    )
    .unwrap()
}

fn report(case: &str, mut times: Vec<Duration>) {
    times.sort_unstable();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!("{case:<58} p50 {:>9.2?}  p99 {:>9.2?}  max {:>9.2?}", at(0.5), at(0.99), times[times.len() - 1]);
}

fn run(case: &str, engine: &Engine, names: &[String]) {
    let (mut both, mut filters, mut priorities) =
        (vec![Duration::MAX; PODS], vec![Duration::MAX; PODS], vec![Duration::MAX; PODS]);
    let mut passed = 0;
    for _ in 0..ROUNDS {
        passed = 0;
        for i in 0..PODS {
            let pod = pod(i);
            // The candidates as the server holds them once it has read the request.
            let candidates = names.to_vec();
            let started = Instant::now();
            let filtered = engine.filter(&pod, candidates);
            let filtered_at = Instant::now();
            let passing = filtered.node_names.unwrap_or_default();
            let count = passing.len();
            black_box(engine.prioritize(&pod, passing));
            let done = Instant::now();
            passed += count;
            both[i] = both[i].min(done - started);
            filters[i] = filters[i].min(filtered_at - started);
            priorities[i] = priorities[i].min(done - filtered_at);
        }
    }
    report(&format!("{case}: filter + prioritize"), both);
    report(&format!("{case}: filter"), filters);
    report(&format!("{case}: prioritize ({} nodes on average)", passed / PODS), priorities);
}

/// [`run`], with each verb's JSON body decoded and its answer encoded, as the server does.
fn run_json(case: &str, engine: &Engine, names: &[String]) {
    let mut both = vec![Duration::MAX; PODS];
    for _ in 0..ROUNDS {
        for (i, least) in both.iter_mut().enumerate() {
            *least = (*least).min(one_pod_with_json(engine, names, i));
        }
    }
    report(&format!("{case}: filter + prioritize with their JSON"), both);
}

/// Pod `i`'s filter and prioritize with their JSON, as [`run_json`] times it.
fn one_pod_with_json(engine: &Engine, names: &[String], i: usize) -> Duration {
    use numaresources_extender::protocol::ExtenderArgs;
    let body =
        serde_json::to_vec(&ExtenderArgs { pod: Some(pod(i)), nodes: None, node_names: Some(names.to_vec()) }).unwrap();
    let started = Instant::now();
    let args: ExtenderArgs = serde_json::from_slice(&body).unwrap();
    let (pod, candidates) = args.into_pod_and_candidates();
    let pod = pod.unwrap();
    let filtered = engine.filter(&pod, candidates);
    let answer = serde_json::to_vec(&filtered).unwrap();
    let filtered_at = Instant::now();
    // kube-scheduler's prioritize body: the same pod and the nodes that passed.
    let body =
        serde_json::to_vec(&ExtenderArgs { pod: Some(pod), nodes: None, node_names: filtered.node_names }).unwrap();
    let resumed = Instant::now();
    let args: ExtenderArgs = serde_json::from_slice(&body).unwrap();
    let (pod, candidates) = args.into_pod_and_candidates();
    black_box(serde_json::to_vec(&engine.prioritize(&pod.unwrap(), candidates)).unwrap());
    black_box(answer);
    (filtered_at - started) + resumed.elapsed()
}

/// kube-scheduler's scheduling cycle against the extender's HTTP server on loopback: for each pod
/// a filter request, then a prioritize request with the nodes that passed, one pod after another.
fn run_http(case: &str, engine: Engine, names: &[String]) {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use numaresources_api::extender::{FILTER_VERB, PRIORITIZE_VERB};
    use numaresources_extender::protocol::ExtenderArgs;
    use numaresources_extender::server::{Shared, router};

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let shared = Shared::new(engine, None);
        shared.synced.store(true, std::sync::atomic::Ordering::Release);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router(shared)).await });
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<axum::body::Bytes>>();
        let post = |verb: &str, body: Vec<u8>| {
            let request = http::Request::post(format!("http://{address}/{verb}"))
                .header("content-type", "application/json")
                .body(Full::from(body))
                .unwrap();
            let response = client.request(request);
            async move { response.await.unwrap().into_body().collect().await.unwrap().to_bytes() }
        };
        // The filter bodies and pods ready beforehand, and only the passing names read from the
        // answer: the client does as little as it can, so the time is the server's.
        let bodies: Vec<Vec<u8>> = (0..PODS)
            .map(|i| {
                serde_json::to_vec(&ExtenderArgs { pod: Some(pod(i)), nodes: None, node_names: Some(names.to_vec()) })
                    .unwrap()
            })
            .collect();
        let pods: Vec<String> = (0..PODS).map(|i| serde_json::to_string(&pod(i)).unwrap()).collect();
        #[derive(serde::Deserialize)]
        struct Passing {
            #[serde(rename = "NodeNames")]
            node_names: Vec<String>,
        }
        let mut times = Vec::with_capacity(PODS);
        let started = Instant::now();
        for (i, body) in bodies.into_iter().enumerate() {
            let pod_started = Instant::now();
            let passing: Passing = serde_json::from_slice(&post(FILTER_VERB, body).await).unwrap();
            let names = serde_json::to_string(&passing.node_names).unwrap();
            let body = format!(r#"{{"Pod":{},"Nodes":null,"NodeNames":{names}}}"#, pods[i]).into_bytes();
            black_box(post(PRIORITIZE_VERB, body).await);
            times.push(pod_started.elapsed());
        }
        let rate = PODS as f64 / started.elapsed().as_secs_f64();
        report(&format!("{case}: {rate:.0} pods/s; a pod's filter + prioritize round trips"), times);
    });
}

fn main() {
    let names: Vec<String> = (0..NODES).map(|i| format!("worker-{i:05}")).collect();
    let mut engine = Engine::new(PolicyOptions::default(), None);
    engine.replace_nrts((0..NODES).map(nrt).collect());
    run("5,000 nodes, no holds", &engine, &names);
    run_json("5,000 nodes, no holds", &engine, &names);
    // What kube-scheduler sends at 5,000 nodes: it stops filtering once it has found
    // max(100, 10 %) feasible nodes (adaptive percentageOfNodesToScore: 50 % - 5,000 / 125).
    let feasible: Vec<String> = names.iter().step_by(10).cloned().collect();
    run("500 of 5,000 nodes (kube-scheduler's feasible set), no holds", &engine, &feasible);
    // 1,000 pods bound and not yet reported: one held on each of 1,000 nodes.
    for i in 0..1_000 {
        let mut held = pod(i);
        held.metadata.uid = Some(format!("held-{i}"));
        engine.bound(&names[i * 5], &held);
    }
    run("5,000 nodes, 1,000 holds", &engine, &names);
    drop(engine);
    let serving = || {
        let mut engine = Engine::new(PolicyOptions::default(), None);
        engine.replace_nrts((0..NODES).map(nrt).collect());
        engine
    };
    run_http("HTTP, 500 of 5,000 nodes", serving(), &feasible);
    run_http("HTTP, 5,000 nodes", serving(), &names);
}
