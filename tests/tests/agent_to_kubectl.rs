//! End to end, in one process plus the real `kubectl`: the exporter (the real `Agent` with a
//! `KubePublisher`) scans a real 2-NUMA sysfs tree and asks a real fake kubelet on a unix socket,
//! publishes through kube-rs over TLS to our API server (served by the certs crate on
//! 127.0.0.1:0), and `kubectl` reads and watches the result through a kubeconfig that trusts the
//! generated CA.
//!
//! Every wait is bounded; nothing asserts how long anything took.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

mod sysfs_fixture;

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use numaresources_api::exporter::TopologyManager;
use numaresources_apiserver::{AppState, Store, router};
use numaresources_rte::agent::Agent;
use numaresources_rte::config::Config;
use numaresources_rte::metrics::{Metrics, Stats};
use numaresources_rte::podresources::testing::{FakeKubelet, RunningKubelet};
use numaresources_rte::podresources::{PodResourcesClient, proto};
use numaresources_rte::publish::{KubePublisher, Outcome};
use numaresources_rte::trigger::Trigger;
use numaresources_tests::served::{Served, bounded, kubeconfig, serving_tls, test_ca, until};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

const NODE: &str = "worker-0";
const GIB: i64 = 1 << 30;
const VF: &str = "example.com/sriov_vf";

/// A temporary directory with the machine's /sys, the kubelet socket, the notify file, the
/// certificates and the kubeconfig.
struct Workspace {
    dir: tempfile::TempDir,
    sys: PathBuf,
    socket: PathBuf,
    notify: PathBuf,
    kubeconfig: PathBuf,
}

impl Workspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sys = sysfs_fixture::unpack_intel_2numa_24cpu(dir.path());
        let socket = dir.path().join("kubelet/pod-resources.sock");
        fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let notify = dir.path().join("run/rte/notify");
        let kubeconfig = dir.path().join("kubeconfig");
        Self { dir, sys, socket, notify, kubeconfig }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Our API server over TLS on 127.0.0.1 with authentication disabled, and the kubeconfig
    /// that trusts it (with a placeholder token: kubectl would otherwise prompt).
    async fn serve(&self) -> Served {
        let ca = test_ca();
        let tls = serving_tls(&ca, self.dir.path(), "apiserver");
        let state = Arc::new(AppState::new(Arc::new(Store::new(1_000)), "0.1.0", "e2e"));
        let served = Served::on_loopback(tls, router(state)).await;
        fs::write(&self.kubeconfig, kubeconfig(&served.url(), ca.cert_pem(), "placeholder")).unwrap();
        served
    }

    /// The client the agent would build from KUBECONFIG.
    async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let options = kube::config::KubeConfigOptions::default();
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.unwrap()).unwrap()
    }

    /// Makes the agent scan: closing the notify file after a write open is what it watches for.
    fn touch_notify_file(&self) {
        fs::OpenOptions::new().write(true).open(&self.notify).unwrap().flush().unwrap();
    }

    /// (Re)starts the fake kubelet with `pods` on the socket, as a restarted kubelet would.
    fn serve_kubelet(&self, pods: Vec<proto::PodResources>) -> RunningKubelet {
        self.serve_kubelet_with(pods, allocatable())
    }

    fn serve_kubelet_with(
        &self,
        pods: Vec<proto::PodResources>,
        allocatable: proto::AllocatableResourcesResponse,
    ) -> RunningKubelet {
        let _ = fs::remove_file(&self.socket);
        FakeKubelet {
            list: proto::ListPodResourcesResponse { pod_resources: pods },
            allocatable: Some(allocatable),
            hang: false,
        }
        .serve(&self.socket)
        .unwrap()
    }

    /// Sets a hugepage pool of the fixture machine (its pools are all empty as captured).
    fn set_hugepages(&self, node: u32, page_kib: u64, pages: u64) {
        let path =
            self.sys.join(format!("devices/system/node/node{node}/hugepages/hugepages-{page_kib}kB/nr_hugepages"));
        fs::write(&path, format!("{pages}\n")).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

// ---------------------------------------------------------------------------------------------
// What the fake kubelet reports, and what that must become.
//
// The fixture: NUMA node 0 has the even CPUs 0-22, node 1 the odd ones 1-23 (12 each, SMT
// siblings n and n+12); MemTotal 33,771,839,488 and 33,731,551,232 bytes; empty hugepage pools.

/// Static CPU manager with CPUs 0, 1, 12, 13 reserved (10 allocatable per node), Static memory
/// manager with 30 GiB per node, and two SR-IOV VFs per node.
fn allocatable() -> proto::AllocatableResourcesResponse {
    let reserved = [0, 1, 12, 13];
    proto::AllocatableResourcesResponse {
        cpu_ids: (0..24).filter(|cpu| !reserved.contains(cpu)).collect(),
        memory: (0..2).map(|node| memory("memory", 30 * GIB, node)).collect(),
        devices: (0..2)
            .map(|node| proto::ContainerDevices {
                resource_name: VF.into(),
                device_ids: vec![
                    format!("0000:{:02x}:02.0", 0x3b + node * 0x40),
                    format!("0000:{:02x}:02.1", 0x3b + node * 0x40),
                ],
                topology: numa(node),
            })
            .collect(),
    }
}

fn numa(node: i64) -> Option<proto::TopologyInfo> {
    Some(proto::TopologyInfo { nodes: vec![proto::NumaNode { id: node }] })
}

fn memory(kind: &str, bytes: i64, node: i64) -> proto::ContainerMemory {
    proto::ContainerMemory { memory_type: kind.into(), size: bytes as u64, topology: numa(node) }
}

/// A Guaranteed pod with exclusive CPUs, memory and a VF on NUMA node 0, and a burstable pod
/// holding nothing exclusive (invisible to the accounting).
fn pods_before() -> Vec<proto::PodResources> {
    vec![
        proto::PodResources {
            namespace: "telco".into(),
            name: "dpdk-0".into(),
            containers: vec![proto::ContainerResources {
                name: "app".into(),
                cpu_ids: vec![2, 4, 14, 16],
                memory: vec![memory("memory", 4 * GIB, 0)],
                devices: vec![proto::ContainerDevices {
                    resource_name: VF.into(),
                    device_ids: vec!["0000:3b:02.0".into()],
                    topology: numa(0),
                }],
                dynamic_resources: vec![],
            }],
        },
        proto::PodResources {
            namespace: "web".into(),
            name: "frontend".into(),
            containers: vec![proto::ContainerResources { name: "nginx".into(), ..Default::default() }],
        },
    ]
}

/// The same, plus a pod with 3 exclusive CPUs on NUMA node 1.
fn pods_after() -> Vec<proto::PodResources> {
    let mut pods = pods_before();
    pods.push(proto::PodResources {
        namespace: "telco".into(),
        name: "dpdk-1".into(),
        containers: vec![proto::ContainerResources {
            name: "app".into(),
            cpu_ids: vec![3, 5, 7],
            ..Default::default()
        }],
    });
    pods
}

/// `(name, capacity, allocatable, available)` per resource, as the API returns them (strings).
type Resources = Vec<(String, String, String, String)>;

fn rows(rows: &[(&str, i64, i64, i64)]) -> Resources {
    rows.iter().map(|(n, c, a, v)| ((*n).to_owned(), c.to_string(), a.to_string(), v.to_string())).collect()
}

/// Hand-computed: capacity = max(machine, allocatable) (devices have only the kubelet's number),
/// available = allocatable − exclusive allocations; only resources the kubelet lists, sorted.
fn expected_zone0() -> Resources {
    rows(&[("cpu", 12, 10, 10 - 4), (VF, 2, 2, 2 - 1), ("memory", 33_771_839_488, 30 * GIB, 30 * GIB - 4 * GIB)])
}

fn expected_zone1(cpus_taken: i64) -> Resources {
    rows(&[("cpu", 12, 10, 10 - cpus_taken), (VF, 2, 2, 2), ("memory", 33_731_551_232, 30 * GIB, 30 * GIB)])
}

fn resources(zone: &Value) -> Resources {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    zone["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (text(&r["name"]), text(&r["capacity"]), text(&r["allocatable"]), text(&r["available"])))
        .collect()
}

fn zone<'a>(object: &'a Value, name: &str) -> &'a Value {
    object["zones"].as_array().unwrap().iter().find(|z| z["name"] == name).unwrap_or_else(|| panic!("no zone {name}"))
}

fn attribute<'a>(object: &'a Value, name: &str) -> &'a str {
    object["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .and_then(|a| a["value"].as_str())
        .unwrap_or_else(|| panic!("no attribute {name}: {object}"))
}

// ---------------------------------------------------------------------------------------------
// The server, the agent and kubectl.

/// The agent running in the background, with its counters.
struct RunningAgent {
    metrics: Arc<Metrics>,
    /// Scan failures the test caused by stopping the kubelet (see [`Self::wait_across_kubelet_restart`]).
    kubelet_restart_failures: std::sync::atomic::AtomicU64,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), numaresources_rte::agent::NotifyFileError>>,
}

/// The agent as the e2e runs it: scans only when the test says so (the notify file or a direct
/// refresh), and no heartbeat unless `adjust` turns it on, so every write the server sees is one
/// the test caused.
async fn agent_for(ws: &Workspace, adjust: impl FnOnce(&mut Config)) -> Agent<PodResourcesClient, KubePublisher> {
    let mut config = sysfs_fixture::agent_config(NODE, &ws.sys);
    config.notify_file = Some(ws.notify.clone());
    config.topology_manager = TopologyManager { policy: "single-numa-node".into(), scope: "pod".into() };
    adjust(&mut config);
    let kubelet = sysfs_fixture::kubelet_client(&ws.socket);
    Agent::new(config, kubelet, KubePublisher::new(ws.client().await, false))
}

impl RunningAgent {
    async fn start(ws: &Workspace) -> Self {
        Self::start_with(ws, |_| {}).await
    }

    async fn start_with(ws: &Workspace, adjust: impl FnOnce(&mut Config)) -> Self {
        Self::run(agent_for(ws, adjust).await)
    }

    fn run(agent: Agent<PodResourcesClient, KubePublisher>) -> Self {
        let metrics = agent.metrics();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(agent.run(async move { drop(stopped.await) }));
        Self { metrics, kubelet_restart_failures: Default::default(), stop, task }
    }

    fn stats(&self) -> Stats {
        self.metrics.snapshot()
    }

    /// Waits until the counters satisfy `done`; fails on a scan or publish failure (but those
    /// a kubelet restart of the test caused).
    async fn wait_for(&self, what: &str, done: impl Fn(&Stats) -> bool) {
        let allowed = self.kubelet_restart_failures.load(std::sync::atomic::Ordering::Relaxed);
        until(what, || {
            let stats = self.stats();
            let failures = (stats.scan_failures - allowed, stats.publish_failures);
            assert_eq!(failures, (0, 0), "{what}: the agent failed: {stats:?}");
            done(&stats)
        })
        .await;
    }

    /// [`Self::wait_for`] across a kubelet the test stopped and started again since `before`: a
    /// scan still queued from an earlier trigger may run while no kubelet listens, and fail on
    /// the kubelet alone; any other failure fails the test.
    async fn wait_across_kubelet_restart(&self, what: &str, before: &Stats, done: impl Fn(&Stats) -> bool) {
        until(what, || {
            let stats = self.stats();
            let scan_failures = stats.scan_failures - before.scan_failures;
            let kubelet_failures = stats.kubelet_failures - before.kubelet_failures;
            assert_eq!((scan_failures, stats.publish_failures), (kubelet_failures, 0), "{what}: {stats:?}");
            done(&stats)
        })
        .await;
        let failures = self.stats().scan_failures;
        self.kubelet_restart_failures.store(failures, std::sync::atomic::Ordering::Relaxed);
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        bounded("agent shutdown", self.task).await.unwrap().unwrap();
    }
}

fn kubectl_command(ws: &Workspace, args: &[&str]) -> Command {
    let mut command = Command::new("kubectl");
    command
        .args(args)
        .arg("--cache-dir")
        .arg(ws.path("kube-cache"))
        .env("KUBECONFIG", &ws.kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT");
    command
}

/// Runs kubectl to completion (bounded; killed if it hangs) and returns its stdout.
async fn kubectl(ws: &Workspace, args: &[&str]) -> String {
    let mut command = tokio::process::Command::from(kubectl_command(ws, args));
    command.kill_on_drop(true).stdin(Stdio::null());
    let output = bounded(&format!("kubectl {args:?}"), command.output())
        .await
        .expect("kubectl runs (scripts/setup.sh installs it)");
    assert!(output.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// A running `kubectl get … -w`, its JSON documents forwarded by a reader thread; killed on drop.
struct KubectlWatch {
    child: Child,
    events: mpsc::UnboundedReceiver<Value>,
    stderr: PathBuf,
}

impl KubectlWatch {
    fn start(ws: &Workspace, args: &[&str]) -> Self {
        let stderr = ws.path("kubectl-watch.stderr");
        let mut child = kubectl_command(ws, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("kubectl runs (scripts/setup.sh installs it)");
        let stdout = child.stdout.take().unwrap();
        let (tell, events) = mpsc::unbounded_channel();
        // Ends when kubectl's stdout closes (it exits, or is killed on drop).
        std::thread::spawn(move || {
            for document in serde_json::Deserializer::from_reader(stdout).into_iter::<Value>() {
                let Ok(document) = document else { break };
                if tell.send(document).is_err() {
                    break;
                }
            }
        });
        Self { child, events, stderr }
    }

    async fn next(&mut self, what: &str) -> Value {
        let event = tokio::time::timeout(Duration::from_secs(30), self.events.recv()).await;
        match event {
            Ok(Some(event)) => event,
            Ok(None) => panic!("{what}: kubectl watch ended: {}", fs::read_to_string(&self.stderr).unwrap_or_default()),
            Err(_) => panic!(
                "{what}: no watch event in 30 s, likely deadlocked; kubectl said: {}",
                fs::read_to_string(&self.stderr).unwrap_or_default()
            ),
        }
    }
}

impl Drop for KubectlWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates another object and checks that its ADDED is the watch's next event. Watch events
/// come in write order, so nothing came for the node since the last event read.
async fn assert_no_event_before_a_barrier(ws: &Workspace, watch: &mut KubectlWatch) {
    let barrier = ws.path("barrier.yaml");
    fs::write(
        &barrier,
        "apiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\nmetadata:\n  name: zz-barrier\nzones: []\n",
    )
    .unwrap();
    kubectl(ws, &["create", "-f", barrier.to_str().unwrap()]).await;
    let next = watch.next("the barrier").await;
    assert_eq!(summary(&next), "ADDED zz-barrier", "expected no further event for {NODE} before the barrier: {next}");
}

fn summary(event: &Value) -> String {
    format!("{} {}", event["type"].as_str().unwrap_or("?"), event["object"]["metadata"]["name"].as_str().unwrap_or("?"))
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_what_the_agent_publishes_and_each_change_exactly_once() {
    let ws = Workspace::new();
    let server = ws.serve().await;
    let kubelet = ws.serve_kubelet(pods_before());
    let agent = RunningAgent::start(&ws).await;

    // The scan at start creates the object.
    agent.wait_for("the first publish", |s| s.publishes == 1).await;

    // What kubectl shows, field by field, against the hand-computed figures.
    let listed: Value =
        serde_norway::from_str(&kubectl(&ws, &["get", "noderesourcetopologies", "-o", "yaml"]).await).unwrap();
    assert_eq!(listed["kind"], "List");
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed:?}");
    let nrt = &items[0];
    assert_eq!(nrt["apiVersion"], "topology.node.k8s.io/v1alpha2");
    assert_eq!(nrt["kind"], "NodeResourceTopology");
    assert_eq!(nrt["metadata"]["name"], NODE);
    let zone_names: Vec<&str> = nrt["zones"].as_array().unwrap().iter().map(|z| z["name"].as_str().unwrap()).collect();
    assert_eq!(zone_names, ["node-0", "node-1"]);
    for (name, costs) in [("node-0", [10, 20]), ("node-1", [20, 10])] {
        let zone = zone(nrt, name);
        assert_eq!(zone["type"], "Node");
        let got: Vec<(String, i64)> = zone["costs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap().to_owned(), c["value"].as_i64().unwrap()))
            .collect();
        assert_eq!(got, [("node-0".to_owned(), costs[0]), ("node-1".to_owned(), costs[1])], "{name} costs");
    }
    assert_eq!(resources(zone(nrt, "node-0")), expected_zone0());
    assert_eq!(resources(zone(nrt, "node-1")), expected_zone1(0));
    assert_eq!(attribute(nrt, "topologyManagerPolicy"), "single-numa-node");
    assert_eq!(attribute(nrt, "topologyManagerScope"), "pod");
    let fingerprint_before = attribute(nrt, "nodeTopologyPodsFingerprint").to_owned();
    assert!(fingerprint_before.starts_with("pfp0v001"), "{fingerprint_before}");
    assert_eq!(nrt["metadata"]["annotations"]["k8stopoawareschedwg/rte-update"], "periodic");

    // The table kubectl prints by default: available/allocatable CPUs per zone.
    let table = kubectl(&ws, &["get", "nrt"]).await;
    assert!(table.contains(NODE) && table.contains("6/10") && table.contains("10/10"), "{table}");

    // A running watch: first the current object.
    let mut watch = KubectlWatch::start(&ws, &["get", "nrt", "-w", "--output-watch-events", "-o", "json"]);
    let added = watch.next("the initial event").await;
    assert_eq!(summary(&added), format!("ADDED {NODE}"));
    let rv_added: u64 = added["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();

    // An unchanged refresh sends nothing.
    let before = agent.stats();
    ws.touch_notify_file();
    agent.wait_for("an unchanged refresh", |s| s.skipped_unchanged > before.skipped_unchanged).await;
    assert_eq!(agent.stats().publishes, 1);

    // A new exclusive allocation on NUMA node 1 (the kubelet restarts with it).
    let before = agent.stats();
    bounded("fake kubelet stop", kubelet.stop()).await.unwrap();
    let kubelet = ws.serve_kubelet(pods_after());
    ws.touch_notify_file();
    agent.wait_across_kubelet_restart("the changed refresh", &before, |s| s.publishes == 2).await;
    let modified = watch.next("the change").await;
    assert_eq!(summary(&modified), format!("MODIFIED {NODE}"), "{modified}");
    let object = &modified["object"];
    assert_eq!(resources(zone(object, "node-0")), expected_zone0());
    assert_eq!(resources(zone(object, "node-1")), expected_zone1(3));
    assert_ne!(attribute(object, "nodeTopologyPodsFingerprint"), fingerprint_before);
    assert_eq!(object["metadata"]["annotations"]["k8stopoawareschedwg/rte-update"], "reactive");
    let rv_modified: u64 = object["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(rv_modified > rv_added, "{rv_modified} after {rv_added}");

    // Another unchanged refresh, then a barrier: a write of another object. Watch events come in
    // write order, so if the barrier is the next event, nothing came for the node in between:
    // the change reached the watch exactly once and the unchanged refreshes not at all.
    let before = agent.stats();
    ws.touch_notify_file();
    agent.wait_for("a second unchanged refresh", |s| s.skipped_unchanged > before.skipped_unchanged).await;
    assert_no_event_before_a_barrier(&ws, &mut watch).await;

    // The stored object still has the revision of the one real change.
    let current: Value = serde_json::from_str(&kubectl(&ws, &["get", "nrt", NODE, "-o", "json"]).await).unwrap();
    assert_eq!(current["metadata"]["resourceVersion"], rv_modified.to_string());
    let stats = agent.stats();
    assert_eq!((stats.publishes, stats.scan_failures), (2, 0), "{stats:?}");
    assert!(stats.skipped_unchanged >= 2, "{stats:?}");

    drop(watch);
    agent.stop().await;
    bounded("fake kubelet stop", kubelet.stop()).await.unwrap();
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Heartbeats: the agent resends the unchanged object, and the server emits nothing for it.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_the_server_lost_is_published_again_within_seconds() {
    let ws = Workspace::new();
    let server = ws.serve().await;
    let kubelet = ws.serve_kubelet(pods_before());
    // No timer and no heartbeat: only the watch of its own object can make the agent publish
    // again after the first time.
    let lost = numaresources_rte::agent::own_object::Lost::new();
    let agent = agent_for(&ws, |_| {}).await.with_republish(lost.clone());
    let watch = tokio::spawn(numaresources_rte::agent::own_object::watch(ws.client().await, NODE.to_owned(), lost));
    let running = RunningAgent::run(agent);
    running.wait_for("the first publish", |stats| stats.publishes >= 1).await;

    kubectl(&ws, &["delete", "nrt", NODE]).await;
    running.wait_for("the publish after the deletion", |stats| stats.publishes >= 2).await;
    let current: Value = serde_json::from_str(&kubectl(&ws, &["get", "nrt", NODE, "-o", "json"]).await).unwrap();
    assert_eq!(current["metadata"]["name"], NODE, "re-created");

    watch.abort();
    running.stop().await;
    bounded("fake kubelet stop", kubelet.stop()).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_after_a_reactive_change_reach_no_watcher() {
    let ws = Workspace::new();
    let server = ws.serve().await;
    let kubelet = ws.serve_kubelet(pods_before());
    // Every unchanged scan is a heartbeat. Driven scan by scan, so which trigger each scan has
    // is the test's choice, not the timer's.
    let mut agent = agent_for(&ws, |config| config.heartbeat = Some(Duration::ZERO)).await;
    let created = bounded("the first refresh", agent.refresh(Trigger::Periodic)).await.unwrap();
    assert_eq!(created, Some(Outcome::Created));

    let mut watch = KubectlWatch::start(&ws, &["get", "nrt", "-w", "--output-watch-events", "-o", "json"]);
    assert_eq!(summary(&watch.next("the initial event").await), format!("ADDED {NODE}"));

    // A change the notify file reported: one event, carrying the trigger.
    bounded("fake kubelet stop", kubelet.stop()).await.unwrap();
    let kubelet = ws.serve_kubelet(pods_after());
    let changed = bounded("the reactive refresh", agent.refresh(Trigger::Reactive)).await.unwrap();
    assert_eq!(changed, Some(Outcome::Patched));
    let modified = watch.next("the change").await;
    assert_eq!(summary(&modified), format!("MODIFIED {NODE}"), "{modified}");
    assert_eq!(modified["object"]["metadata"]["annotations"]["k8stopoawareschedwg/rte-update"], "reactive");
    let revision = modified["object"]["metadata"]["resourceVersion"].clone();

    // The timer's scans that follow find nothing new: each sends its heartbeat, none is an event.
    for beat in 0..3 {
        let sent = bounded("a heartbeat", agent.refresh(Trigger::Periodic)).await.unwrap();
        assert_eq!(sent, Some(Outcome::Patched), "heartbeat {beat} was sent");
    }
    assert_eq!(agent.metrics().snapshot().publishes, 5);
    assert_no_event_before_a_barrier(&ws, &mut watch).await;
    let current: Value = serde_json::from_str(&kubectl(&ws, &["get", "nrt", NODE, "-o", "json"]).await).unwrap();
    assert_eq!(current["metadata"]["resourceVersion"], revision);
    assert_eq!(current["metadata"]["annotations"]["k8stopoawareschedwg/rte-update"], "reactive");

    drop(watch);
    bounded("fake kubelet stop", kubelet.stop()).await.unwrap();
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Everything the accounting distinguishes, through gRPC, the API server and kubectl.
//
// The machine gets hugepages: node 0 a pool of four 1 GiB pages, node 1 one of 512 2 MiB pages
// (1 GiB). The kubelet reports them allocatable, plus a GPU without NUMA affinity, and a kubelet
// of the kind that lists the shared pool as `cpu_ids` of non-exclusive containers
// (kubernetes/kubernetes#102190); the agent's reference container tells which CPUs those are.

const GPU: &str = "example.com/gpu";
const MIB: i64 = 1 << 20;
const REFERENCE: &str = "numaresources/rte-x7k2p/shared-pool-container";

fn rich_allocatable() -> proto::AllocatableResourcesResponse {
    let mut allocatable = allocatable();
    allocatable.memory.push(memory("hugepages-1Gi", 4 * GIB, 0));
    allocatable.memory.push(memory("hugepages-2Mi", GIB, 1));
    allocatable.devices.push(proto::ContainerDevices {
        resource_name: GPU.into(),
        device_ids: vec!["gpu-0".into()],
        topology: None,
    });
    allocatable
}

/// CPUs 0-23 but the exclusive ones: what the shared pool is once `rich_pods` are placed.
fn shared_pool() -> Vec<i64> {
    (0..24).filter(|cpu| ![2, 3, 4, 14, 16].contains(cpu)).collect()
}

fn rich_pods() -> Vec<proto::PodResources> {
    let container =
        |name: &str, cpu_ids: Vec<i64>| proto::ContainerResources { name: name.into(), cpu_ids, ..Default::default() };
    vec![
        // Exclusive CPUs, memory, 1Gi hugepages and a VF on node 0, and the GPU (no affinity).
        proto::PodResources {
            namespace: "telco".into(),
            name: "dpdk-0".into(),
            containers: vec![proto::ContainerResources {
                memory: vec![memory("memory", 4 * GIB, 0), memory("hugepages-1Gi", 2 * GIB, 0)],
                devices: vec![
                    proto::ContainerDevices {
                        resource_name: VF.into(),
                        device_ids: vec!["0000:3b:02.0".into()],
                        topology: numa(0),
                    },
                    proto::ContainerDevices {
                        resource_name: GPU.into(),
                        device_ids: vec!["gpu-0".into()],
                        topology: None,
                    },
                ],
                ..container("app", vec![2, 4, 14, 16])
            }],
        },
        // One CPU on node 1, 2Mi hugepages there, and a memory block spanning both nodes.
        proto::PodResources {
            namespace: "db".into(),
            name: "postgres-0".into(),
            containers: vec![proto::ContainerResources {
                memory: vec![
                    proto::ContainerMemory {
                        memory_type: "memory".into(),
                        size: (6 * GIB) as u64,
                        topology: Some(proto::TopologyInfo {
                            nodes: vec![proto::NumaNode { id: 0 }, proto::NumaNode { id: 1 }],
                        }),
                    },
                    memory("hugepages-2Mi", 256 * MIB, 1),
                ],
                ..container("postgres", vec![3])
            }],
        },
        // Non-exclusive containers this kubelet lists with the shared pool: not allocations.
        proto::PodResources {
            namespace: "web".into(),
            name: "frontend".into(),
            containers: vec![container("nginx", shared_pool())],
        },
        proto::PodResources {
            namespace: "numaresources".into(),
            name: "rte-x7k2p".into(),
            containers: vec![container("shared-pool-container", shared_pool()), container("rte", shared_pool())],
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hugepages_unaffine_devices_multi_numa_memory_and_the_shared_pool_reach_kubectl_exactly() {
    let ws = Workspace::new();
    ws.set_hugepages(0, 1_048_576, 4);
    ws.set_hugepages(1, 2048, 512);
    let server = ws.serve().await;
    let kubelet = ws.serve_kubelet_with(rich_pods(), rich_allocatable());
    let agent =
        RunningAgent::start_with(&ws, |config| config.reference_container = Some(REFERENCE.parse().unwrap())).await;
    agent.wait_for("the first publish", |s| s.publishes == 1).await;

    let nrt: Value = serde_json::from_str(&kubectl(&ws, &["get", "nrt", NODE, "-o", "json"]).await).unwrap();
    // Hand-computed. Per zone, the resources the kubelet reports allocatable there, sorted;
    // capacity = max(machine, allocatable), available = allocatable − exclusive use.
    // node 0: CPUs 2, 4, 14, 16 taken (the shared pool in three containers is not); memory
    // 4 GiB + the 6 GiB block spanning both nodes; 2 of the 4 hugepages-1Gi; one VF.
    assert_eq!(
        resources(zone(&nrt, "node-0")),
        rows(&[
            ("cpu", 12, 10, 6),
            (VF, 2, 2, 1),
            ("hugepages-1Gi", 4 * GIB, 4 * GIB, 2 * GIB),
            ("memory", 33_771_839_488, 30 * GIB, 30 * GIB - 4 * GIB - 6 * GIB),
        ])
    );
    // node 1: CPU 3 taken; the 6 GiB block counts here in full too; 256 MiB of the 1 GiB of
    // 2Mi pages. The GPU has no NUMA affinity, so no zone lists it, allocatable or used.
    assert_eq!(
        resources(zone(&nrt, "node-1")),
        rows(&[
            ("cpu", 12, 10, 9),
            (VF, 2, 2, 2),
            ("hugepages-2Mi", GIB, GIB, GIB - 256 * MIB),
            ("memory", 33_731_551_232, 30 * GIB, 30 * GIB - 6 * GIB),
        ])
    );
    let table = kubectl(&ws, &["get", "nrt", NODE]).await;
    assert!(table.contains("6/10 9/10"), "{table}");

    agent.stop().await;
    bounded("fake kubelet stop", kubelet.stop()).await.unwrap();
    server.stop().await;
}
