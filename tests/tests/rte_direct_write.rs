//! The exporter's direct write path end to end: the real agent (`Agent` with the
//! `FailoverPublisher`, a real fake kubelet on a unix socket, a real sysfs tree) publishes over
//! TLS to our API server on 127.0.0.1 with the projected token it reads from a file, and falls
//! back to kube-apiserver when it cannot.
//!
//! kube-apiserver cannot run here. Its stand-in is a second TLS listener serving our router over
//! the same store: through kube-apiserver a write reaches our server anyway (the aggregator
//! proxies it), so what the tests look at is which listener the agent called, and with which
//! token. Both listeners record every request (path, query, `Authorization`, status) before our
//! server handles it. Both authenticate with standalone static tokens: the agent's kube-apiserver
//! credential is known only to the stand-in, its projected tokens only to our server (the
//! delegated TokenReview with our audience is the server side of the same issue, tested there).
//!
//! Every wait is bounded; nothing asserts how long anything took.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

mod sysfs_fixture;

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::{Next, from_fn};
use axum::response::IntoResponse as _;
use numaresources_apiserver::auth::{Auth, Standalone};
use numaresources_apiserver::replication::STORE_WARM_CHECK;
use numaresources_apiserver::{AppState, Store, router};
use numaresources_rte::agent::{Agent, own_object};
use numaresources_rte::config::Config;
use numaresources_rte::direct::DirectServer;
use numaresources_rte::direct::failover::{FailoverOptions, FailoverPublisher};
use numaresources_rte::metrics::DirectPathMetrics;
use numaresources_rte::podresources::PodResourcesClient;
use numaresources_rte::podresources::testing::RunningKubelet;
use numaresources_rte::publish::Outcome;
use numaresources_rte::trigger::Trigger;
use numaresources_runtime::tls::CertificateAuthority;
use numaresources_tests::served::{Served, bounded, kube_client, serving_tls, test_ca, until};
use serde_json::json;
use tokio::sync::watch;

const NODE: &str = "worker-0";
/// What the agent's in-cluster credential presents to kube-apiserver.
const KUBE_TOKEN: &str = "kube-apiserver-service-account-token";
/// The projected tokens of our audience, before and after the kubelet rotates the file.
const PROJECTED: [&str; 2] = ["projected-token-1", "projected-token-2"];
const COLLECTION: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";

// ---------------------------------------------------------------------------------------------
// The two listeners.

/// One request as a listener saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    query: String,
    bearer: Option<String>,
    status: u16,
}

impl Seen {
    fn is_nrt_write(&self) -> bool {
        self.path.starts_with(COLLECTION) && matches!(self.method.as_str(), "POST" | "PATCH" | "PUT")
    }

    fn is_watch(&self) -> bool {
        self.path.starts_with(COLLECTION) && self.query.contains("watch=true")
    }
}

/// The requests a listener saw; while `unavailable`, it answers every request 503 as a replica
/// does while no replica leads (an election under way), before our router sees it.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Seen>>>, Arc<std::sync::atomic::AtomicBool>);

impl Log {
    fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    fn set_unavailable(&self, unavailable: bool) {
        self.1.store(unavailable, std::sync::atomic::Ordering::Relaxed);
    }

    /// The NRT writes the server accepted.
    fn writes(&self) -> Vec<Seen> {
        self.all().into_iter().filter(|s| s.is_nrt_write() && s.status < 300).collect()
    }

    async fn record(self, request: Request, next: Next) -> axum::response::Response {
        let bearer = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let (method, path) = (request.method().to_string(), request.uri().path().to_owned());
        let query = request.uri().query().unwrap_or_default().to_owned();
        let response = if self.1.load(std::sync::atomic::Ordering::Relaxed) {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "no replica leads the NodeResourceTopology store right now (an election is under way); retry",
                "reason": "ServiceUnavailable", "code": 503});
            (http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(status)).into_response()
        } else {
            next.run(request).await
        };
        let status = response.status().as_u16();
        self.0.lock().unwrap().push(Seen { method, path, query, bearer, status });
        response
    }
}

/// Our router over TLS on 127.0.0.1:0, recording requests.
struct Listener {
    served: Served,
    state: Arc<AppState>,
    log: Log,
}

impl Listener {
    /// `tokens`: `(token, user)` pairs authenticated, each in `system:masters` (the standalone
    /// authorizer lets only those write).
    async fn start(ca: &CertificateAuthority, dir: &Path, store: &Arc<Store>, tokens: &[(&str, &str)]) -> Self {
        let name = tokens.first().map_or("none", |(_, user)| *user).replace(':', "-");
        let tls = serving_tls(ca, dir, &name);
        let mut state = AppState::new(Arc::clone(store), "0.1.0", "e2e");
        let token_file: String =
            tokens.iter().map(|(token, user)| format!("{token},{user},{user},\"system:masters\"\n")).collect();
        state.auth = Auth::Standalone(Arc::new(Standalone::from_token_file(&token_file).unwrap()));
        let state = Arc::new(state);
        let log = Log::default();
        let recorder = log.clone();
        let app =
            router(Arc::clone(&state)).layer(from_fn(move |request, next| recorder.clone().record(request, next)));
        Self { served: Served::on_loopback(tls, app).await, state, log }
    }

    fn url(&self) -> String {
        self.served.url()
    }
}

/// A port on 127.0.0.1 nothing listens on (bound, then closed).
async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

// ---------------------------------------------------------------------------------------------
// The node: a sysfs tree, a kubelet, the mounted CA bundle and projected token.

struct Node {
    dir: tempfile::TempDir,
    sys: PathBuf,
    socket: PathBuf,
    ca: CertificateAuthority,
    kubelet: RunningKubelet,
}

impl Node {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sys = sysfs_fixture::unpack_intel_2numa_24cpu(dir.path());
        let socket = dir.path().join("pod-resources.sock");
        let kubelet = sysfs_fixture::idle_kubelet(&socket);
        let ca = test_ca();
        fs::create_dir_all(dir.path().join("nrt-server")).unwrap();
        fs::write(dir.path().join("nrt-server/ca.crt"), ca.cert_pem()).unwrap();
        let node = Self { dir, sys, socket, ca, kubelet };
        node.rotate_token(PROJECTED[0]);
        node
    }

    fn token_file(&self) -> PathBuf {
        self.dir.path().join("nrt-server/token")
    }

    /// Writes the projected token as the kubelet does: a new file swapped in.
    fn rotate_token(&self, token: &str) {
        let next = self.dir.path().join("nrt-server/.token.next");
        fs::write(&next, token).unwrap();
        fs::rename(&next, self.token_file()).unwrap();
    }

    fn direct(&self, url: &str) -> DirectServer {
        DirectServer {
            url: url.parse().unwrap(),
            ca_file: self.dir.path().join("nrt-server/ca.crt"),
            token_file: self.token_file(),
            tls_server_name: None,
            admin_url: None,
        }
    }

    /// The client the agent builds for kube-apiserver (in a cluster: in-cluster config).
    async fn kube_client(&self, kube: &Listener) -> kube::Client {
        kube_client(&kube.url(), self.ca.cert_pem(), KUBE_TOKEN).await
    }

    fn config(&self) -> Config {
        let mut config = sysfs_fixture::agent_config(NODE, &self.sys);
        config.allocation_poll = None;
        config
    }

    /// The agent writing to `direct` (falling back to `kube`), retrying the direct path quickly
    /// so the way back is seen within a test.
    async fn agent(&self, direct: &str, kube: &Listener) -> Agent<PodResourcesClient, FailoverPublisher> {
        self.agent_and_path(direct, kube).await.0
    }

    /// [`Self::agent`], and the client its own-object watch uses (none on the direct path).
    async fn agent_and_path(
        &self,
        direct: &str,
        kube: &Listener,
    ) -> (Agent<PodResourcesClient, FailoverPublisher>, watch::Receiver<Option<kube::Client>>, DirectPathMetrics) {
        let options = FailoverOptions {
            retry_initial: Duration::from_millis(20),
            retry_max: Duration::from_millis(100),
            ..FailoverOptions::default()
        };
        let metrics = DirectPathMetrics::default();
        let publisher =
            FailoverPublisher::with_options(self.direct(direct), NODE, self.kube_client(kube).await, false, options)
                .with_metrics(metrics.clone());
        let path = publisher.own_object_client();
        (Agent::new(self.config(), sysfs_fixture::kubelet_client(&self.socket), publisher), path, metrics)
    }

    /// Makes the next scan differ: `n` exclusive CPUs taken on NUMA node 0.
    fn allocate(&self, n: usize) {
        self.kubelet.set_list(sysfs_fixture::pods_on_numa_node_0(n));
    }
}

async fn refresh(agent: &mut Agent<PodResourcesClient, FailoverPublisher>, what: &str) -> Outcome {
    bounded(what, agent.refresh(Trigger::Reactive)).await.unwrap_or_else(|e| panic!("{what}: {e}")).unwrap()
}

/// The two listeners over one store: kube-apiserver's stand-in knows only the agent's
/// kube-apiserver token, our server only the projected ones.
async fn listeners(node: &Node) -> (Arc<Store>, Listener, Listener) {
    let store = Arc::new(Store::new(1_000));
    let kube = Listener::start(&node.ca, node.dir.path(), &store, &[(KUBE_TOKEN, "system:serviceaccount:rte")]).await;
    let ours = Listener::start(
        &node.ca,
        node.dir.path(),
        &store,
        &[(PROJECTED[0], "projected:rte"), (PROJECTED[1], "projected:rte")],
    )
    .await;
    (store, kube, ours)
}

fn bearers(seen: &[Seen]) -> Vec<Option<&str>> {
    seen.iter().map(|s| s.bearer.as_deref()).collect()
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_agent_publishes_to_our_server_directly_with_the_projected_token_and_follows_its_rotation() {
    let node = Node::new().await;
    let (store, kube, ours) = listeners(&node).await;
    let mut agent = node.agent(&ours.url(), &kube).await;

    assert_eq!(refresh(&mut agent, "the first publish").await, Outcome::Created);
    let writes = ours.log.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!((writes[0].method.as_str(), writes[0].status), ("POST", 201));
    assert_eq!(bearers(&writes), [Some(PROJECTED[0])]);
    assert!(kube.log.all().iter().all(|s| !s.path.starts_with(COLLECTION)), "kube-apiserver saw {:?}", kube.log.all());
    assert!(store.get(NODE).is_some());

    // The kubelet rotates the token: the next write carries the new one.
    node.rotate_token(PROJECTED[1]);
    node.allocate(2);
    assert_eq!(refresh(&mut agent, "the publish after the rotation").await, Outcome::Patched);
    let writes = ours.log.writes();
    assert_eq!(bearers(&writes), [Some(PROJECTED[0]), Some(PROJECTED[1])]);
    assert_eq!((writes[1].method.as_str(), writes[1].status), ("PATCH", 200));

    // A token our server does not accept (401) is no reason to stop publishing.
    node.rotate_token("a-token-of-another-audience");
    node.allocate(3);
    assert_eq!(refresh(&mut agent, "the publish with a refused token").await, Outcome::Patched);
    let refused = ours.log.all().last().cloned().unwrap();
    assert_eq!((refused.status, refused.bearer.as_deref()), (401, Some("a-token-of-another-audience")));
    let through_kube = kube.log.writes();
    assert_eq!(bearers(&through_kube), [Some(KUBE_TOKEN)]);
    assert_eq!(through_kube[0].status, 200);

    kube.served.stop().await;
    ours.served.stop().await;
}

#[tokio::test]
async fn a_replica_answering_503_is_bypassed_through_kube_apiserver_until_it_answers_then_used_again() {
    let node = Node::new().await;
    let (store, kube, ours) = listeners(&node).await;
    ours.log.set_unavailable(true);
    let (mut agent, path, metrics) = node.agent_and_path(&ours.url(), &kube).await;
    let watched = path.clone();
    let watching = tokio::spawn(own_object::follow(path, NODE.to_owned(), own_object::Lost::new()));

    assert_eq!(refresh(&mut agent, "the publish while our server answers 503").await, Outcome::Created);
    assert!(ours.log.all().iter().any(|s| s.status == 503), "{:?}", ours.log.all());
    assert!(ours.log.writes().is_empty());
    assert_eq!(bearers(&kube.log.writes()), [Some(KUBE_TOKEN)]);
    assert_eq!(store.len(), 1);
    assert_eq!(metrics.get(), (false, 1), "(in use, fallbacks)");
    // The own-object watch moved to where the agent writes.
    until("the watch through kube-apiserver", || kube.log.all().iter().any(Seen::is_watch)).await;

    ours.log.set_unavailable(false);
    let mut n = 0;
    bounded("publishing directly again", async {
        while ours.log.writes().is_empty() {
            n += 1;
            node.allocate(n);
            refresh(&mut agent, "a publish once it answers").await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let through_kube = kube.log.writes().len();
    n += 1;
    node.allocate(n);
    refresh(&mut agent, "the publish after the way back").await;
    assert_eq!(kube.log.writes().len(), through_kube, "no write goes through kube-apiserver once back");
    assert_eq!(metrics.get(), (true, through_kube as u64), "(in use, fallbacks)");
    assert_eq!(bearers(&ours.log.writes()).last().copied().flatten(), Some(PROJECTED[0]));
    // Back on the direct path, the own-object watch stops, and none is opened on our server
    // (a watch lists within milliseconds of starting: given time, it would show in the log).
    assert!(path_is_direct(&watched));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ours.log.all().iter().all(|s| !s.is_watch()), "a watch on our server: {:?}", ours.log.all());

    watching.abort();
    kube.served.stop().await;
    ours.served.stop().await;
}

#[tokio::test]
async fn a_cold_replica_is_written_directly_since_the_exporters_writes_are_what_warm_it() {
    let node = Node::new().await;
    let (store, kube, ours) = listeners(&node).await;
    // A replica still warming up (after every replica was gone) answers reads 503, and through
    // kube-apiserver nothing reaches it then (the APIService is unavailable); writes it takes.
    ours.state.readiness.set(STORE_WARM_CHECK, false);
    let (mut agent, _, metrics) = node.agent_and_path(&ours.url(), &kube).await;

    assert_eq!(refresh(&mut agent, "the publish to a cold replica").await, Outcome::Created);
    let attempts: Vec<(String, u16)> =
        ours.log.all().into_iter().filter(Seen::is_nrt_write).map(|s| (s.method, s.status)).collect();
    assert_eq!(attempts, [("PATCH".to_owned(), 404), ("POST".to_owned(), 201)]);
    assert!(ours.log.all().iter().all(|s| s.status != 503), "no read was tried: {:?}", ours.log.all());
    assert!(kube.log.writes().is_empty());
    assert!(store.get(NODE).is_some());
    assert_eq!(metrics.get(), (true, 0), "(in use, fallbacks)");

    kube.served.stop().await;
    ours.served.stop().await;
}

#[tokio::test]
async fn an_unreachable_or_untrusted_server_is_bypassed_through_kube_apiserver() {
    let node = Node::new().await;
    let (store, kube, ours) = listeners(&node).await;

    // Nothing listens there.
    let closed = format!("https://{}", closed_port().await);
    let mut agent = node.agent(&closed, &kube).await;
    assert_eq!(refresh(&mut agent, "the publish with no server").await, Outcome::Created);
    assert_eq!(kube.log.writes().len(), 1);

    // Our server's certificate is not signed by the mounted CA.
    let other = CertificateAuthority::generate("another-ca", Duration::from_secs(3600)).unwrap();
    fs::write(node.dir.path().join("nrt-server/ca.crt"), other.cert_pem()).unwrap();
    let mut untrusting = node.agent(&ours.url(), &kube).await;
    node.allocate(1);
    refresh(&mut untrusting, "the publish to an untrusted server").await;
    assert!(ours.log.all().is_empty(), "no request completes without a trusted handshake: {:?}", ours.log.all());
    assert_eq!(kube.log.writes().len(), 2);
    assert_eq!(store.len(), 1);

    kube.served.stop().await;
    ours.served.stop().await;
}

fn path_is_direct(watched: &watch::Receiver<Option<kube::Client>>) -> bool {
    watched.borrow().is_none()
}

#[tokio::test]
async fn on_the_direct_path_no_own_object_watch_is_held_and_the_next_publish_creates_a_deleted_object_again() {
    let node = Node::new().await;
    let (store, kube, ours) = listeners(&node).await;
    let (mut agent, path, _) = node.agent_and_path(&ours.url(), &kube).await;
    assert!(path_is_direct(&path), "no client for an own-object watch while publishing directly");
    let watching = tokio::spawn(own_object::follow(path, NODE.to_owned(), own_object::Lost::new()));
    assert_eq!(refresh(&mut agent, "the first publish").await, Outcome::Created);
    // Time for a watch to list, had one started.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Someone deletes the object: the agent's next publish (a change here; the heartbeat on a
    // quiet node) finds it gone and creates it again, on our server.
    store.delete(NODE, &Default::default(), false).unwrap();
    node.allocate(1);
    assert_eq!(refresh(&mut agent, "the publish after the deletion").await, Outcome::Created);
    let writes: Vec<(String, u16)> =
        ours.log.all().into_iter().filter(Seen::is_nrt_write).map(|s| (s.method, s.status)).collect();
    assert_eq!(writes[writes.len() - 2..], [("PATCH".to_owned(), 404), ("POST".to_owned(), 201)]);
    assert!(store.get(NODE).is_some());
    assert!(ours.log.all().iter().all(|s| !s.is_watch()), "a watch on our server: {:?}", ours.log.all());
    assert!(kube.log.all().iter().all(|s| !s.path.starts_with(COLLECTION)), "{:?}", kube.log.all());

    watching.abort();
    kube.served.stop().await;
    ours.served.stop().await;
}
