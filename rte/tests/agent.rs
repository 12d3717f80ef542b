//! The agent end to end (a real fake kubelet on a unix socket, a real sysfs fixture, a recording
//! publisher) and the Kubernetes publisher against a mock API server.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

mod support;
use numaresources_testkit::tls;

use std::fs;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_rte::agent::{Agent, ScanError};
use numaresources_rte::config::{Args, Config, Kubelet, MetricsEndpoint, MetricsMode, MetricsTls};
use numaresources_rte::exporter::{self, Exporter};
use numaresources_rte::metrics::Metrics;
use numaresources_rte::metrics_endpoint::MetricsServer;
use numaresources_rte::podreadiness::{OwnPod, PodConditions};
use numaresources_rte::podresources::proto;
use numaresources_rte::podresources::testing::{FakeKubelet, RunningKubelet};
use numaresources_rte::podresources::{Backoff, ClientConfig, KubeletIfPresent, PodResourcesClient};
use numaresources_rte::publish::{self, KubePublisher, Outcome, PublishError, Publisher};
use numaresources_rte::terminal::TerminalPods;
use numaresources_rte::trigger::Trigger;
use serde_json::{Value, json};
use support::{available_cpus, bounded, exclusive_pods};
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------------------------
// The agent with a real fake kubelet and a real sysfs tree.

/// Records what it is asked to publish, and tells the test.
#[derive(Clone)]
struct Recorder {
    published: Arc<Mutex<Vec<NodeResourceTopology>>>,
    tell: mpsc::UnboundedSender<NodeResourceTopology>,
}

impl Recorder {
    fn new() -> (Self, mpsc::UnboundedReceiver<NodeResourceTopology>) {
        let (tell, told) = mpsc::unbounded_channel();
        (Self { published: Arc::default(), tell }, told)
    }

    fn count(&self) -> usize {
        self.published.lock().unwrap().len()
    }
}

impl Publisher for Recorder {
    fn publish(&self, desired: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send {
        self.published.lock().unwrap().push(desired.clone());
        let _ = self.tell.send(desired);
        std::future::ready(Ok(Outcome::Patched))
    }
}

struct Node {
    dir: tempfile::TempDir,
    sys: PathBuf,
    socket: PathBuf,
}

impl Node {
    fn new() -> Self {
        let (dir, sys) = support::unpack("intel-2numa-24cpu");
        let socket = dir.path().join("kubelet.sock");
        Self { dir, sys, socket }
    }

    fn config(&self) -> Config {
        let mut config = Config::for_node("worker-0");
        config.sysfs.clone_from(&self.sys);
        config.sleep_interval = None;
        config.heartbeat = None;
        config.fingerprint_status_file = Some(self.dir.path().join("status.json"));
        config
    }

    /// Serves a kubelet whose pods hold `exclusive` CPUs each (NUMA 0 is even, NUMA 1 odd).
    fn kubelet(&self, exclusive: &[(&str, &[i64])]) -> RunningKubelet {
        let _ = fs::remove_file(&self.socket);
        let kubelet = FakeKubelet {
            list: exclusive_pods(exclusive),
            allocatable: Some(proto::AllocatableResourcesResponse { cpu_ids: (0..24).collect(), ..Default::default() }),
            hang: false,
        };
        kubelet.serve(&self.socket).unwrap()
    }

    fn client(&self) -> PodResourcesClient {
        let mut config = ClientConfig::new(self.socket.clone().into());
        config.backoff = Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(20), jitter: 0.0 };
        config.call_timeout = Duration::from_secs(5);
        PodResourcesClient::new(config)
    }
}

fn annotation<'a>(nrt: &'a NodeResourceTopology, key: &str) -> &'a str {
    nrt.metadata.annotations.as_ref().and_then(|a| a.get(key)).map_or("", String::as_str)
}

#[tokio::test]
async fn the_agent_publishes_changes_only_and_never_a_topology_without_the_kubelet() {
    let node = Node::new();
    let kubelet = node.kubelet(&[("dpdk", &[2, 4])]);
    let (recorder, _told) = Recorder::new();
    let mut agent = Agent::new(node.config(), node.client(), recorder.clone());
    let metrics = agent.metrics();

    // The first scan publishes.
    let outcome = bounded("first refresh", agent.refresh(Trigger::Periodic)).await.unwrap();
    assert_eq!(outcome, Some(Outcome::Patched));
    let first = recorder.published.lock().unwrap()[0].clone();
    assert_eq!(first.metadata.name.as_deref(), Some("worker-0"));
    assert_eq!((available_cpus(&first, "node-0"), available_cpus(&first, "node-1")), (10, 12));
    assert_eq!(annotation(&first, "k8stopoawareschedwg/rte-update"), "periodic");
    assert_eq!(first.attribute("topologyManagerPolicy"), Some("none"));
    let status: Value =
        serde_json::from_str(&fs::read_to_string(node.dir.path().join("status.json")).unwrap()).unwrap();
    assert_eq!(status["nodeName"], "worker-0");
    assert_eq!(status["pods"], json!([{"Namespace": "telco", "Name": "dpdk"}]));
    assert_eq!(status["fingerprintComputed"], first.attribute("nodeTopologyPodsFingerprint").unwrap());

    // The same machine and pods: nothing to send, even when the trigger differs.
    let outcome = bounded("unchanged refresh", agent.refresh(Trigger::Reactive)).await.unwrap();
    assert_eq!(outcome, None);
    assert_eq!(recorder.count(), 1);

    // A new allocation on NUMA 1 is published.
    bounded("kubelet stop", kubelet.stop()).await.unwrap();
    let kubelet = node.kubelet(&[("dpdk", &[2, 4]), ("dpdk-2", &[3, 5, 7])]);
    let outcome = bounded("changed refresh", agent.refresh(Trigger::Reactive)).await.unwrap();
    assert_eq!(outcome, Some(Outcome::Patched));
    let second = recorder.published.lock().unwrap()[1].clone();
    assert_eq!((available_cpus(&second, "node-0"), available_cpus(&second, "node-1")), (10, 9));
    assert_eq!(annotation(&second, "k8stopoawareschedwg/rte-update"), "reactive");

    // The kubelet goes away: the scan fails and nothing (least of all an empty machine) is sent.
    bounded("kubelet stop", kubelet.stop()).await.unwrap();
    let _ = fs::remove_file(&node.socket);
    let error = bounded("refresh without kubelet", agent.refresh(Trigger::Periodic)).await.unwrap_err();
    assert!(matches!(error, ScanError::Kubelet(_)), "{error}");
    assert!(error.to_string().contains("not publishing"), "{error}");
    assert_eq!(recorder.count(), 2);

    let stats = metrics.snapshot();
    assert_eq!((stats.scans, stats.publishes, stats.skipped_unchanged), (4, 2, 1));
    assert_eq!((stats.scan_failures, stats.kubelet_failures, stats.publish_failures), (1, 1, 0));
}

/// The common kubelet setup: the static CPU manager with the memory manager left at `None`,
/// whose podresources answer lists CPUs but no memory. By default every zone carries the
/// node's memory and hugepages, marked as not NUMA-managed; with `--unmanaged-memory=omit`
/// none, as upstream publishes.
#[tokio::test]
async fn a_kubelet_without_the_memory_manager_gets_node_level_memory_in_every_zone_unless_omitted() {
    use numaresources_rte::config::UnmanagedMemory;

    let node = Node::new();
    let kubelet = node.kubelet(&[]);
    let scan = |mode: UnmanagedMemory| {
        let mut config = node.config();
        config.flags.unmanaged_memory = mode;
        let (recorder, _told) = Recorder::new();
        let agent = Agent::new(config, node.client(), recorder);
        async move { agent.scan(Trigger::Periodic).await.unwrap() }
    };
    let published = bounded("a node-level scan", scan(UnmanagedMemory::NodeLevel)).await;
    assert_eq!(published.zones.len(), 2);
    let memory: Vec<i64> = published
        .zones
        .iter()
        .map(|zone| zone.resources.iter().find(|r| r.name == "memory").unwrap().available.as_i64().unwrap())
        .collect();
    assert!(memory[0] > 0 && memory[0] == memory[1], "the node's total in each zone: {memory:?}");
    for zone in &published.zones {
        let flag = zone.attributes.iter().find(|a| a.name == "memoryNUMAManaged").map(|a| a.value.as_str());
        assert_eq!(flag, Some("false"), "{}", zone.name);
    }

    let omitted = bounded("an upstream-like scan", scan(UnmanagedMemory::Omit)).await;
    assert!(omitted.zones.iter().all(|z| z.resources.iter().all(|r| r.name != "memory")));
    assert!(omitted.zones.iter().all(|z| z.attributes.iter().all(|a| a.name != "memoryNUMAManaged")));
    bounded("kubelet stop", kubelet.stop()).await.unwrap();
}

#[tokio::test]
async fn an_unchanged_topology_is_republished_when_the_heartbeat_is_due() {
    let node = Node::new();
    let _kubelet = node.kubelet(&[]);
    let (recorder, _told) = Recorder::new();
    let mut config = node.config();
    config.heartbeat = Some(Duration::from_millis(1));
    let mut agent = Agent::new(config, node.client(), recorder.clone());
    bounded("first", agent.refresh(Trigger::Periodic)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let outcome = bounded("heartbeat", agent.refresh(Trigger::Periodic)).await.unwrap();
    assert_eq!(outcome, Some(Outcome::Patched));
    assert_eq!(recorder.count(), 2);
}

#[tokio::test]
async fn a_heartbeat_resends_the_last_object_as_it_was_trigger_annotation_included() {
    let node = Node::new();
    let kubelet = node.kubelet(&[]);
    let (recorder, _told) = Recorder::new();
    let mut config = node.config();
    // Every unchanged scan is a heartbeat.
    config.heartbeat = Some(Duration::ZERO);
    let mut agent = Agent::new(config, node.client(), recorder.clone());
    bounded("first", agent.refresh(Trigger::Periodic)).await.unwrap();
    bounded("kubelet stop", kubelet.stop()).await.unwrap();
    let _kubelet = node.kubelet(&[("dpdk", &[3])]);
    bounded("reactive change", agent.refresh(Trigger::Reactive)).await.unwrap();

    // The timer's scans find nothing new: they send the reactive object again, untouched, so an
    // API server that suppresses no-op writes emits no watch event for them.
    for _ in 0..2 {
        let outcome = bounded("heartbeat", agent.refresh(Trigger::Periodic)).await.unwrap();
        assert_eq!(outcome, Some(Outcome::Patched));
    }
    let published = recorder.published.lock().unwrap().clone();
    assert_eq!(published.len(), 4);
    assert_eq!(annotation(&published[1], "k8stopoawareschedwg/rte-update"), "reactive");
    assert_eq!(published[2], published[1]);
    assert_eq!(published[3], published[1]);
}

#[tokio::test]
async fn a_kubelet_whose_socket_appears_later_is_accounted_from_then_on_and_never_dropped() {
    let node = Node::new();
    let (recorder, _told) = Recorder::new();
    let source = KubeletIfPresent::new(node.client());
    let mut agent = Agent::new(node.config(), source, recorder.clone());

    // No socket: the machine's own view, every CPU free.
    bounded("no kubelet", agent.refresh(Trigger::Periodic)).await.unwrap();
    let own_view = recorder.published.lock().unwrap()[0].clone();
    assert_eq!((available_cpus(&own_view, "node-0"), available_cpus(&own_view, "node-1")), (12, 12));

    // The kubelet starts: its allocations count from the next scan.
    let kubelet = node.kubelet(&[("dpdk", &[2, 4, 6])]);
    bounded("kubelet up", agent.refresh(Trigger::Periodic)).await.unwrap();
    let accounted = recorder.published.lock().unwrap()[1].clone();
    assert_eq!((available_cpus(&accounted, "node-0"), available_cpus(&accounted, "node-1")), (9, 12));

    // It goes away again (a restart, or a crash): no scan turns it back into an empty machine.
    bounded("kubelet stop", kubelet.stop()).await.unwrap();
    fs::remove_file(&node.socket).unwrap();
    let error = bounded("kubelet gone", agent.refresh(Trigger::Periodic)).await.unwrap_err();
    assert!(matches!(error, ScanError::Kubelet(_)), "{error}");
    assert_eq!(recorder.count(), 2);
}

#[tokio::test]
async fn the_run_loop_scans_at_start_and_when_the_notify_file_is_touched_and_stops_on_shutdown() {
    let node = Node::new();
    let kubelet = node.kubelet(&[("dpdk", &[2])]);
    let notify = node.dir.path().join("run/rte/notify");
    let mut config = node.config();
    config.notify_file = Some(notify.clone());
    config.max_events_per_second = std::num::NonZeroU32::new(50).unwrap();
    let (recorder, mut told) = Recorder::new();
    let agent = Agent::new(config, node.client(), recorder);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent.run(async move {
        let _ = stopped.await;
    }));

    let first = bounded("initial publish", told.recv()).await.unwrap();
    assert_eq!(annotation(&first, "k8stopoawareschedwg/rte-update"), "periodic");
    assert_eq!(fs::metadata(&notify).unwrap().len(), 0, "the notify file was created empty");

    // Change the pods, then touch the file the way a hook would (metadata only).
    bounded("kubelet stop", kubelet.stop()).await.unwrap();
    let _kubelet = node.kubelet(&[("dpdk", &[2]), ("new", &[1])]);
    fs::File::options().write(true).open(&notify).unwrap().set_modified(std::time::SystemTime::now()).unwrap();
    let second = bounded("reactive publish", told.recv()).await.unwrap();
    assert_eq!(annotation(&second, "k8stopoawareschedwg/rte-update"), "reactive");
    assert_eq!(available_cpus(&second, "node-1"), 11);

    stop.send(()).unwrap();
    bounded("agent shutdown", running).await.unwrap().unwrap();
}

#[tokio::test]
async fn an_agent_started_before_the_kubelet_retries_on_its_own_and_publishes_once_it_is_up() {
    let node = Node::new();
    // No timer, no notify file: only the failure retry can bring the next scan.
    let (recorder, mut told) = Recorder::new();
    let agent = Agent::new(node.config(), node.client(), recorder.clone());
    let metrics = agent.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent.run(async move {
        let _ = stopped.await;
    }));
    bounded("first scan fails", async {
        while metrics.snapshot().kubelet_failures == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(recorder.count(), 0, "nothing published without the kubelet");
    let _kubelet = node.kubelet(&[("dpdk", &[2])]);
    let published = bounded("publish after the kubelet came up", told.recv()).await.unwrap();
    assert_eq!(available_cpus(&published, "node-0"), 11);
    stop.send(()).unwrap();
    bounded("agent shutdown", running).await.unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_interrupts_a_scan_stuck_on_a_hung_kubelet() {
    let node = Node::new();
    let kubelet = FakeKubelet { hang: true, ..FakeKubelet::default() };
    let _running_kubelet = kubelet.serve(&node.socket).unwrap();
    let (recorder, _told) = Recorder::new();
    let mut config = node.config();
    config.notify_file = None;
    let agent = Agent::new(config, node.client(), recorder.clone());
    let metrics = agent.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent.run(async move {
        let _ = stopped.await;
    }));
    // Wait until the start-up scan is in flight.
    bounded("scan started", async {
        while metrics.snapshot().scans == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    stop.send(()).unwrap();
    bounded("agent shutdown during a hung scan", running).await.unwrap().unwrap();
    assert_eq!(recorder.count(), 0);
}

#[tokio::test]
async fn a_non_empty_notify_file_stops_the_agent_with_a_clear_error() {
    let node = Node::new();
    let notify = node.dir.path().join("notify");
    fs::write(&notify, "someone's data").unwrap();
    let mut config = node.config();
    config.notify_file = Some(notify);
    let (recorder, _told) = Recorder::new();
    let error =
        bounded("run", Agent::new(config, node.client(), recorder).run(std::future::pending())).await.unwrap_err();
    assert!(error.to_string().contains("is not empty"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// The Kubernetes publisher against a mock API server.

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const NRT_PATH: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";

/// Answers the requests the publisher sends, asserting each.
struct ApiServerVerifier(Handle);

/// One request as seen by the API server.
struct Seen {
    method: http::Method,
    path: String,
    content_type: String,
    body: Value,
}

impl ApiServerVerifier {
    /// At the end of a scenario: the publisher sends nothing more.
    async fn assert_no_more_requests(mut self) {
        let next = tokio::time::timeout(Duration::from_millis(50), self.0.next_request()).await;
        assert!(next.is_err(), "no extra request");
    }

    /// Takes the next request, checks its method and path, answers `status` with `reply`.
    async fn expect(&mut self, method: &str, path: &str, status: u16, reply: Value) -> Seen {
        let (request, respond) = bounded("next request", self.0.next_request()).await.expect("a request");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        let seen = Seen {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default(),
            body: if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() },
        };
        assert_eq!((seen.method.as_str(), seen.path.as_str()), (method, path));
        let response = Response::builder()
            .status(StatusCode::from_u16(status).unwrap())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&reply).unwrap()))
            .unwrap();
        respond.send_response(response);
        seen
    }
}

fn mock_publisher(add_owner: bool) -> (KubePublisher, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    (KubePublisher::new(client, add_owner), ApiServerVerifier(handle))
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn desired() -> NodeResourceTopology {
    let mut nrt = NodeResourceTopology::new("worker-0");
    nrt.zones =
        vec![numaresources_api::nrt::Zone { name: "node-0".into(), zone_type: "Node".into(), ..Default::default() }];
    nrt.attributes = vec![numaresources_api::nrt::AttributeInfo::new("topologyManagerPolicy", "single-numa-node")];
    nrt.metadata.annotations = Some([("k8stopoawareschedwg/rte-update".to_owned(), "periodic".to_owned())].into());
    nrt
}

fn existing(resource_version: &str) -> Value {
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": "worker-0", "resourceVersion": resource_version,
                     "annotations": {"someone.else/note": "keep me"}},
        "zones": [],
    })
}

#[tokio::test]
async fn a_missing_object_is_created_with_the_node_as_owner() {
    let (publisher, mut server) = mock_publisher(true);
    let api = tokio::spawn(async move {
        server.expect("GET", &format!("{NRT_PATH}/worker-0"), 404, status(404, "NotFound", "not found")).await;
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0", "uid": "6c1f0b1e-uid"}});
        server.expect("GET", "/api/v1/nodes/worker-0", 200, node).await;
        let created = server.expect("POST", NRT_PATH, 201, existing("1")).await;
        assert_eq!(created.body["metadata"]["name"], "worker-0");
        assert_eq!(
            created.body["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "worker-0", "uid": "6c1f0b1e-uid"}])
        );
        assert_eq!(created.body["zones"][0]["name"], "node-0");
        assert_eq!(created.body["attributes"][0]["value"], "single-numa-node");
        server
    });
    let outcome = bounded("publish", publisher.publish(desired())).await.unwrap();
    assert_eq!(outcome, Outcome::Created);
    bounded("api server scenario", api).await.unwrap();
}

#[tokio::test]
async fn an_existing_object_is_merge_patched_with_only_what_the_agent_owns() {
    let (publisher, mut server) = mock_publisher(false);
    let api = tokio::spawn(async move {
        server.expect("GET", &format!("{NRT_PATH}/worker-0"), 200, existing("5")).await;
        for _ in 0..2 {
            let patch = server.expect("PATCH", &format!("{NRT_PATH}/worker-0"), 200, existing("6")).await;
            assert_eq!(patch.content_type, "application/merge-patch+json");
            assert_eq!(
                patch.body,
                json!({
                    "metadata": {"annotations": {
                        "k8stopoawareschedwg/rte-update": "periodic",
                        "topology.node.k8s.io/fingerprint": null,
                    }},
                    "zones": [{"name": "node-0", "type": "Node"}],
                    "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
                })
            );
        }
        server
    });
    assert_eq!(bounded("publish", publisher.publish(desired())).await.unwrap(), Outcome::Patched);
    // Known to exist now: straight to the patch.
    assert_eq!(bounded("publish again", publisher.publish(desired())).await.unwrap(), Outcome::Patched);
    bounded("api server scenario", api).await.unwrap().assert_no_more_requests().await;
}

#[tokio::test]
async fn an_object_lost_by_the_server_is_created_again_by_the_same_publish() {
    let (publisher, mut server) = mock_publisher(false);
    let api = tokio::spawn(async move {
        let path = format!("{NRT_PATH}/worker-0");
        server.expect("GET", &path, 200, existing("5")).await;
        server.expect("PATCH", &path, 200, existing("6")).await;
        // Deleted behind the agent's back: the next patch is a 404, and the create follows.
        server.expect("PATCH", &path, 404, status(404, "NotFound", "not found")).await;
        let created = server.expect("POST", NRT_PATH, 201, existing("1")).await;
        assert_eq!(created.body["zones"][0]["name"], "node-0");
        assert_eq!(created.body["metadata"]["resourceVersion"], Value::Null);
        server.expect("PATCH", &path, 200, existing("2")).await;
        server
    });
    assert_eq!(bounded("publish", publisher.publish(desired())).await.unwrap(), Outcome::Patched);
    assert_eq!(bounded("publish after the loss", publisher.publish(desired())).await.unwrap(), Outcome::Created);
    assert_eq!(bounded("publish once more", publisher.publish(desired())).await.unwrap(), Outcome::Patched);
    bounded("api server scenario", api).await.unwrap().assert_no_more_requests().await;
}

#[tokio::test]
async fn patching_first_never_reads_so_a_replica_that_refuses_reads_while_warming_up_is_written() {
    let (publisher, mut server) = mock_publisher(false);
    let publisher = publisher.patch_first();
    let api = tokio::spawn(async move {
        let path = format!("{NRT_PATH}/worker-0");
        server.expect("PATCH", &path, 404, status(404, "NotFound", "not found")).await;
        server.expect("POST", NRT_PATH, 201, existing("1")).await;
        server.expect("PATCH", &path, 200, existing("2")).await;
        server
    });
    assert_eq!(bounded("publish", publisher.publish(desired())).await.unwrap(), Outcome::Created);
    assert_eq!(bounded("publish again", publisher.publish(desired())).await.unwrap(), Outcome::Patched);
    bounded("api server scenario", api).await.unwrap().assert_no_more_requests().await;
}

#[tokio::test]
async fn a_conflicting_patch_falls_back_to_get_and_put_with_the_fresh_resource_version() {
    let (publisher, mut server) = mock_publisher(true);
    let api = tokio::spawn(async move {
        let path = format!("{NRT_PATH}/worker-0");
        server.expect("GET", &path, 200, existing("5")).await;
        server.expect("PATCH", &path, 409, status(409, "Conflict", "the object has been modified")).await;
        server.expect("GET", &path, 200, existing("7")).await;
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0", "uid": "uid-2"}});
        server.expect("GET", "/api/v1/nodes/worker-0", 200, node).await;
        let put = server.expect("PUT", &path, 200, existing("8")).await;
        assert_eq!(put.body["metadata"]["resourceVersion"], "7");
        assert_eq!(put.body["metadata"]["annotations"]["someone.else/note"], "keep me");
        assert_eq!(put.body["metadata"]["annotations"]["k8stopoawareschedwg/rte-update"], "periodic");
        assert_eq!(put.body["metadata"]["ownerReferences"][0]["uid"], "uid-2");
        assert_eq!(put.body["zones"][0]["name"], "node-0");
        server
    });
    assert_eq!(bounded("publish", publisher.publish(desired())).await.unwrap(), Outcome::Replaced);
    bounded("api server scenario", api).await.unwrap();
}

/// A server that cannot serve now (an election under way, overloaded) would refuse a get and
/// an update as well: the refusal is returned, so the publish is retried (or goes another way)
/// instead of costing the same server two more requests.
#[tokio::test]
async fn a_patch_refused_as_unavailable_is_returned_without_get_and_put() {
    let (publisher, mut server) = mock_publisher(false);
    let publisher = publisher.patch_first();
    let api = tokio::spawn(async move {
        let path = format!("{NRT_PATH}/worker-0");
        for code in [503, 429, 504] {
            server.expect("PATCH", &path, code, status(code, "ServiceUnavailable", "no leader right now")).await;
        }
        server
    });
    for code in [503, 429, 504] {
        let error = bounded("publish", publisher.publish(desired())).await.unwrap_err();
        assert!(matches!(error, PublishError::Api { code: c, .. } if c == code), "{error}");
    }
    bounded("api server scenario", api).await.unwrap().assert_no_more_requests().await;
}

#[tokio::test]
async fn a_forbidden_answer_names_the_rbac_the_agent_needs() {
    let (publisher, mut server) = mock_publisher(false);
    let api = tokio::spawn(async move {
        let message = "noderesourcetopologies.topology.node.k8s.io \"worker-0\" is forbidden: User \"system:serviceaccount:numaresources:rte\" cannot get resource";
        server.expect("GET", &format!("{NRT_PATH}/worker-0"), 403, status(403, "Forbidden", message)).await;
        server
    });
    let error = bounded("publish", publisher.publish(desired())).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, PublishError::Forbidden { verb: "get", .. }), "{text}");
    assert!(text.contains(publish::NRT_RBAC) && text.contains("create, update, patch"), "{text}");
    assert!(text.contains("system:serviceaccount:numaresources:rte"), "{text}");
    bounded("api server scenario", api).await.unwrap();
}

#[tokio::test]
async fn an_invalid_object_and_an_unreachable_server_are_told_apart() {
    let (publisher, mut server) = mock_publisher(false);
    let api = tokio::spawn(async move {
        server.expect("GET", &format!("{NRT_PATH}/worker-0"), 404, status(404, "NotFound", "not found")).await;
        server.expect("POST", NRT_PATH, 422, status(422, "Invalid", "zones[0].type: Required value")).await;
        server
    });
    let error = bounded("publish", publisher.publish(desired())).await.unwrap_err();
    assert!(matches!(error, PublishError::Invalid { .. }), "{error}");
    assert!(error.to_string().contains("zones[0].type: Required value"), "{error}");
    drop(bounded("api server scenario", api).await.unwrap());

    // With the server gone, the error says so.
    let error = bounded("publish", publisher.publish(desired())).await.unwrap_err();
    assert!(error.is_unreachable(), "{error}");
    assert!(error.to_string().starts_with("cannot reach the API server to get"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// Own-pod conditions against a mock API server.

const POD_STATUS_PATH: &str = "/api/v1/namespaces/numaresources/pods/rte-worker-0-x7k2p/status";

fn mock_conditions() -> (PodConditions, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let pod = OwnPod { namespace: "numaresources".into(), name: "rte-worker-0-x7k2p".into() };
    (PodConditions::new(client, pod), ApiServerVerifier(handle))
}

fn pod_reply() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rte-worker-0-x7k2p", "namespace": "numaresources"}})
}

/// Takes the next status patch and returns its one condition, checking the request's shape.
async fn expect_condition(server: &mut ApiServerVerifier) -> Value {
    let seen = server.expect("PATCH", POD_STATUS_PATH, 200, pod_reply()).await;
    assert_eq!(seen.content_type, "application/strategic-merge-patch+json");
    let conditions = seen.body["status"]["conditions"].as_array().unwrap().clone();
    assert_eq!(conditions.len(), 1, "one condition per patch: {}", seen.body);
    let mut condition = conditions[0].clone();
    assert!(condition["lastTransitionTime"].as_str().unwrap().ends_with('Z'), "{condition}");
    condition.as_object_mut().unwrap().remove("lastTransitionTime");
    condition
}

/// Fails every publish.
#[derive(Clone)]
struct Refusing;

impl Publisher for Refusing {
    fn publish(&self, _: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send {
        std::future::ready(Err(PublishError::NodeNotFound("worker-0".into())))
    }
}

#[tokio::test]
async fn pod_conditions_are_patched_through_pods_status_only_when_they_change() {
    let node = Node::new();
    let kubelet = node.kubelet(&[("dpdk", &[2])]);
    let (recorder, _told) = Recorder::new();
    let (conditions, mut server) = mock_conditions();
    let mut agent = Agent::new(node.config(), node.client(), recorder.clone()).with_pod_conditions(conditions);
    let metrics = agent.metrics();

    let api = tokio::spawn(async move {
        // First refresh: both conditions become True.
        let fetched = expect_condition(&mut server).await;
        assert_eq!(fetched, json!({"type": "PodresourcesFetched", "status": "True", "reason": null, "message": null}));
        let updated = expect_condition(&mut server).await;
        assert_eq!(updated, json!({"type": "NodeTopologyUpdated", "status": "True", "reason": null, "message": null}));
        // The unchanged refresh writes nothing; the next request is the failed scan's.
        let failed = expect_condition(&mut server).await;
        assert_eq!(
            (&failed["type"], &failed["status"], &failed["reason"]),
            (&json!("PodresourcesFetched"), &json!("False"), &json!("ScanFailed"))
        );
        assert!(failed["message"].as_str().unwrap().contains("not publishing"), "{failed}");
        // A second failed scan writes nothing either; recovery is next.
        let recovered = expect_condition(&mut server).await;
        assert_eq!((&recovered["type"], &recovered["status"]), (&json!("PodresourcesFetched"), &json!("True")));
        server
    });

    bounded("first refresh", agent.refresh(Trigger::Periodic)).await.unwrap();
    assert_eq!(bounded("unchanged refresh", agent.refresh(Trigger::Periodic)).await.unwrap(), None);
    bounded("kubelet stop", kubelet.stop()).await.unwrap();
    let _ = fs::remove_file(&node.socket);
    for _ in 0..2 {
        bounded("refresh without kubelet", agent.refresh(Trigger::Periodic)).await.unwrap_err();
    }
    let _kubelet = node.kubelet(&[("dpdk", &[2])]);
    // The client waits out its dial backoff first; failed scans in between write nothing.
    bounded("recovered refresh", async {
        while agent.refresh(Trigger::Periodic).await.is_err() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    bounded("api server scenario", api).await.unwrap();
    let stats = metrics.snapshot();
    assert_eq!((stats.condition_writes, stats.condition_failures), (4, 0));
    assert_eq!(recorder.count(), 1);
}

#[tokio::test]
async fn a_failed_publish_sets_update_failed_and_a_refused_status_write_is_retried() {
    let node = Node::new();
    let _kubelet = node.kubelet(&[]);
    let (conditions, mut server) = mock_conditions();
    let mut agent = Agent::new(node.config(), node.client(), Refusing).with_pod_conditions(conditions);
    let metrics = agent.metrics();
    let api = tokio::spawn(async move {
        // First refresh: the API server refuses PodresourcesFetched…
        let forbidden = status(403, "Forbidden", "pods \"rte-worker-0-x7k2p\" is forbidden");
        let refused = server.expect("PATCH", POD_STATUS_PATH, 403, forbidden).await;
        assert_eq!(refused.body["status"]["conditions"][0]["type"], "PodresourcesFetched");
        let updated = expect_condition(&mut server).await;
        assert_eq!((&updated["status"], &updated["reason"]), (&json!("False"), &json!("UpdateFailed")));
        assert!(updated["message"].as_str().unwrap().contains("node \"worker-0\" not found"), "{updated}");
        // …so the second refresh writes it again although it did not change, and nothing else.
        let retried = expect_condition(&mut server).await;
        assert_eq!((&retried["type"], &retried["status"]), (&json!("PodresourcesFetched"), &json!("True")));
        server
    });
    for _ in 0..2 {
        bounded("refresh", agent.refresh(Trigger::Periodic)).await.unwrap_err();
    }
    bounded("api server scenario", api).await.unwrap();
    let stats = metrics.snapshot();
    assert_eq!((stats.condition_writes, stats.condition_failures, stats.publish_failures), (2, 1, 2));
}

// ---------------------------------------------------------------------------------------------
// Metrics over loopback.

async fn http_get(address: std::net::SocketAddr, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

/// A `GET` over HTTPS trusting only `ca_pem`; `Err` when the handshake or the request fails.
async fn https_get(address: std::net::SocketAddr, ca_pem: &str, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tls::connect(address, tls::client(ca_pem, None, &[])).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    // A server closing without close_notify still gave us the whole response.
    let _ = stream.read_to_string(&mut response).await;
    Ok(response)
}

/// The runtime's admin router over `metrics`, as `numaresources rte` serves it.
fn admin_router(metrics: &Metrics) -> axum::Router {
    let mut registry = numaresources_runtime::admin::Registry::default();
    metrics.register(&mut registry, "worker-0");
    numaresources_runtime::admin::router(numaresources_runtime::admin::Checks::new(), Arc::new(registry))
}

#[tokio::test]
async fn metrics_over_https_follow_a_rotated_certificate() {
    use numaresources_runtime::tls::CertificateAuthority;
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let names = ["localhost".to_owned()];
    let first_ca = CertificateAuthority::generate("first", Duration::from_secs(3600)).unwrap();
    first_ca.issue_serving(&names, Duration::from_secs(3600)).unwrap().write(&cert_file, &key_file).unwrap();
    let tls = MetricsTls {
        cert_file: cert_file.clone(),
        key_file: key_file.clone(),
        client_ca_file: None,
        policy: Default::default(),
    };
    let endpoint = MetricsEndpoint { address: "127.0.0.1:0".parse().unwrap(), tls: Some(tls) };
    let server = MetricsServer::bind(&endpoint).await.unwrap();
    let address = server.local_addr().unwrap();
    let serving = tokio::spawn(server.serve(admin_router(&Metrics::default()), std::future::pending()));

    let response = bounded("scrape", https_get(address, first_ca.cert_pem(), "/metrics")).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains(r#"numaresources_rte_scans_total{node="worker-0"} 0"#), "{response}");

    // The Secret is renewed by a new CA: new connections get the new certificate.
    let second_ca = CertificateAuthority::generate("second", Duration::from_secs(3600)).unwrap();
    second_ca.issue_serving(&names, Duration::from_secs(3600)).unwrap().write(&cert_file, &key_file).unwrap();
    bounded("the renewed certificate to be served", async {
        while https_get(address, second_ca.cert_pem(), "/metrics").await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(https_get(address, first_ca.cert_pem(), "/metrics").await.is_err(), "the old certificate is gone");
    serving.abort();
}

#[tokio::test]
async fn an_unusable_metrics_certificate_is_a_clear_start_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("tls.crt");
    let tls = MetricsTls {
        cert_file: missing.clone(),
        key_file: dir.path().join("tls.key"),
        client_ca_file: None,
        policy: Default::default(),
    };
    let endpoint = MetricsEndpoint { address: "127.0.0.1:0".parse().unwrap(), tls: Some(tls) };
    let error = MetricsServer::bind(&endpoint).await.unwrap_err().to_string();
    assert!(
        error.contains("cannot serve metrics over TLS") && error.contains(&missing.display().to_string()),
        "{error}"
    );
}

#[tokio::test]
async fn metrics_are_scraped_over_loopback_with_upstream_names_after_a_scan() {
    let node = Node::new();
    let _kubelet = node.kubelet(&[("dpdk", &[2])]);
    let (recorder, _told) = Recorder::new();
    let mut agent = Agent::new(node.config(), node.client(), recorder);
    let endpoint = MetricsEndpoint { address: "127.0.0.1:0".parse().unwrap(), tls: None };
    let listener = MetricsServer::bind(&endpoint).await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(listener.serve(admin_router(&agent.metrics()), async move {
        let _ = stopped.await;
    }));

    bounded("refresh", agent.refresh(Trigger::Reactive)).await.unwrap();
    bounded("unchanged refresh", agent.refresh(Trigger::Periodic)).await.unwrap();
    let (head, body) = bounded("scrape", http_get(address, "/metrics")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/openmetrics-text"), "{head}");
    for line in [
        r#"rte_noderesourcetopology_writes_total{node="worker-0",operation="update",trigger="reactive"} 1"#,
        r#"numaresources_rte_scans_total{node="worker-0"} 2"#,
        r#"numaresources_rte_publishes_total{node="worker-0"} 1"#,
        r#"numaresources_rte_skipped_unchanged_total{node="worker-0"} 1"#,
        r#"numaresources_rte_scan_failures_total{node="worker-0"} 0"#,
        r#"numaresources_rte_direct_write_in_use{node="worker-0"} 0"#,
        r#"numaresources_rte_direct_write_fallbacks_total{node="worker-0"} 0"#,
    ] {
        assert!(body.lines().any(|l| l == line), "missing {line:?} in\n{body}");
    }
    for prefix in [
        r#"rte_operation_delay_milliseconds{node="worker-0",operation_name="podresources_scan",trigger="reactive"} "#,
        r#"rte_operation_delay_milliseconds{node="worker-0",operation_name="node_resource_object_update",trigger="reactive"} "#,
        r#"rte_wakeup_delay_milliseconds{node="worker-0",trigger="periodic"} "#,
    ] {
        let value =
            body.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no {prefix} in\n{body}"));
        assert!(value.parse::<f64>().unwrap() >= 0.0, "{value}");
    }
    assert!(!body.contains("rte_podresource_api_call_failures_total{"), "no failures yet:\n{body}");
    let (head, _) = bounded("unknown path", http_get(address, "/nope")).await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    stop.send(()).unwrap();
    bounded("metrics server shutdown", server).await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Terminal pods from a Pod watch.

#[tokio::test]
async fn terminal_pods_seen_by_the_watch_are_left_out_of_the_scan() {
    let node = Node::new();
    let _kubelet = node.kubelet(&[("dpdk", &[2]), ("job-done", &[4])]);
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let terminal = TerminalPods::default();
    let watch = tokio::spawn(terminal.clone().watch(client, "worker-0".into()));
    let mut server = ApiServerVerifier(handle);
    let (request, respond) = bounded("list", server.0.next_request()).await.expect("a list request");
    assert_eq!((request.method().as_str(), request.uri().path()), ("GET", "/api/v1/pods"));
    let query = request.uri().query().unwrap_or_default().to_owned();
    assert!(
        query
            .contains("fieldSelector=spec.nodeName%3Dworker-0%2Cstatus.phase%21%3DPending%2Cstatus.phase%21%3DRunning"),
        "{query}"
    );
    let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "10"}, "items": [
        {"metadata": {"name": "job-done", "namespace": "telco"}, "spec": {"nodeName": "worker-0", "containers": []},
         "status": {"phase": "Succeeded"}},
    ]});
    respond.send_response(
        Response::builder()
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&list).unwrap()))
            .unwrap(),
    );
    bounded("the watch saw the terminal pod", async {
        while terminal.read().pods.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    let (recorder, _told) = Recorder::new();
    let mut agent = Agent::new(node.config(), node.client(), recorder.clone()).with_terminal_pods(terminal);
    bounded("refresh", agent.refresh(Trigger::Periodic)).await.unwrap();
    let published = recorder.published.lock().unwrap()[0].clone();
    // CPU 4 (NUMA 0) held by the finished job counts as free; CPU 2 stays taken.
    assert_eq!((available_cpus(&published, "node-0"), available_cpus(&published, "node-1")), (11, 12));
    let status: Value =
        serde_json::from_str(&fs::read_to_string(node.dir.path().join("status.json")).unwrap()).unwrap();
    assert_eq!(status["pods"], json!([{"Namespace": "telco", "Name": "dpdk"}]));
    watch.abort();
}

// ---------------------------------------------------------------------------------------------
// The entry point with --oneshot.

fn oneshot_args(node: &Node) -> Args {
    Args {
        hostname: Some("worker-0".into()),
        sysfs: node.sys.clone(),
        podresources_socket: Kubelet(Some(node.socket.as_path().into())),
        config: Some(node.dir.path().join("empty-config.yaml")),
        oneshot: true,
        no_publish: true,
        podreadiness: false,
        metrics_mode: MetricsMode::Disabled,
        ..Args::default()
    }
}

/// `numaresources rte --oneshot --no-publish`, without a kube client.
async fn oneshot(node: &Node) -> Result<(), exporter::Error> {
    Exporter::new(oneshot_args(node).resolve().unwrap(), None).run(std::future::pending()).await
}

#[tokio::test]
async fn oneshot_refreshes_once_and_fails_when_the_scan_fails() {
    let node = Node::new();
    fs::write(node.dir.path().join("empty-config.yaml"), "").unwrap();
    let error = bounded("oneshot without kubelet", oneshot(&node)).await.unwrap_err();
    assert!(matches!(error, exporter::Error::Oneshot(ScanError::Kubelet(_))), "{error}");
    let _kubelet = node.kubelet(&[("dpdk", &[2])]);
    bounded("oneshot", oneshot(&node)).await.unwrap();
}
