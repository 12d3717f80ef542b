//! The exporter's direct write path against a replicated API server: the real agent (`Agent`
//! with the `FailoverPublisher`, a fake kubelet on a unix socket, the real sysfs tree) publishes
//! to a follower of three real `numaresources apiserver` processes in delegated mode, presenting
//! a projected token that the kube-apiserver double reviews as bound to the exporter pod on the
//! agent's node (by pod, without the node-name extra, as clusters before 1.30 issue them). The
//! follower forwards each write to the leader, which places the token through its pod.
//!
//! kube-apiserver, the agent's fallback, is a closed port here: every write that lands is one
//! the agent sent to our server directly. Every wait is bounded; nothing asserts how long
//! anything took.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

mod sysfs_fixture;

use std::path::Path;
use std::time::Duration;

use http::Method;
use numaresources_rte::agent::Agent;
use numaresources_rte::agent::own_object::Lost;
use numaresources_rte::direct::failover::FailoverPublisher;
use numaresources_rte::direct::{DirectServer, held};
use numaresources_rte::podresources::PodResourcesClient;
use numaresources_rte::podresources::testing::RunningKubelet;
use numaresources_rte::publish::Outcome;
use numaresources_rte::trigger::Trigger;
use numaresources_tests::replicas::{Cluster, NRT_PATH, read_retrying, request};
use numaresources_tests::served::{BOUND, kube_client};
use serde_json::Value;

const NODE: &str = "worker-0";
/// The projected token the kubelet mounts into the exporter pod on [`NODE`].
const TOKEN: &str = "projected-token-of-the-exporter-on-worker-0";
const PATIENCE: Duration = BOUND;

/// The exporter pod's node: the sysfs tree, the kubelet, and the mounted CA bundle and token.
struct Node {
    dir: tempfile::TempDir,
    kubelet: RunningKubelet,
}

impl Node {
    fn new(ca: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        sysfs_fixture::unpack_intel_2numa_24cpu(dir.path());
        let kubelet = sysfs_fixture::idle_kubelet(&dir.path().join("pod-resources.sock"));
        std::fs::copy(ca, dir.path().join("ca.crt")).unwrap();
        std::fs::write(dir.path().join("token"), TOKEN).unwrap();
        Self { dir, kubelet }
    }

    /// The agent writing to our server at `url`; its kube-apiserver is a port nobody listens on.
    async fn agent(&self, url: &str) -> Agent<PodResourcesClient, FailoverPublisher> {
        self.agent_for(NODE, TOKEN, url, None).await
    }

    /// The agent of `node` presenting `token`, writing to our server at `url`, through the
    /// retries and back-offs the exporter uses; its kube-apiserver is a port nobody listens on.
    async fn agent_for(
        &self,
        node: &str,
        token: &str,
        url: &str,
        heartbeat: Option<Duration>,
    ) -> Agent<PodResourcesClient, FailoverPublisher> {
        let path = self.dir.path();
        let token_file = path.join(format!("token-{node}"));
        std::fs::write(&token_file, token).unwrap();
        let direct = DirectServer {
            url: url.parse().unwrap(),
            ca_file: path.join("ca.crt"),
            token_file,
            tls_server_name: None,
            admin_url: None,
        };
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        let ca_pem = std::fs::read_to_string(path.join("ca.crt")).unwrap();
        let kube = kube_client(&format!("https://{closed}"), &ca_pem, "kube-apiserver-token").await;
        let publisher = FailoverPublisher::new(direct, node, kube, false);
        let mut config = sysfs_fixture::agent_config(node, &path.join("machine/sys"));
        if heartbeat.is_some() {
            // The heartbeat is looked at by the periodic scans.
            config.sleep_interval = Some(Duration::from_secs(1));
            config.heartbeat = heartbeat;
        }
        Agent::new(config, sysfs_fixture::kubelet_client(&path.join("pod-resources.sock")), publisher)
    }

    /// Makes the next scan differ: `n` exclusive CPUs taken on NUMA node 0.
    fn allocate(&self, n: usize) {
        self.kubelet.set_list(sysfs_fixture::pods_on_numa_node_0(n));
    }
}

/// Refreshes until a publish succeeds (an election in progress answers 503, and the fallback
/// is unreachable); what it did.
async fn publish(agent: &mut Agent<PodResourcesClient, FailoverPublisher>, what: &str) -> Outcome {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let error = match agent.refresh(Trigger::Reactive).await {
            Ok(Some(outcome)) => return outcome,
            Ok(None) => "nothing published".to_owned(),
            Err(error) => error.to_string(),
        };
        assert!(tokio::time::Instant::now() < deadline, "{what}: no publish within {PATIENCE:?}, last: {error}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The node's object on replica `index`, with a consistent read (a 503 with Retry-After, as a
/// replica answers while an election settles, retried as a client does).
async fn object_on(cluster: &Cluster, index: usize) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let answer = read_retrying(&cluster.client(index).await, &format!("{NRT_PATH}/{NODE}"), deadline).await.unwrap();
    assert_eq!(answer.status, 200, "{NODE} on replica {index}: {answer:?}\n{}", cluster.logs());
    answer.body
}

/// Available CPUs of zone `zone` in an NRT.
fn available_cpus(object: &Value, zone: &str) -> i64 {
    let zone = object["zones"].as_array().unwrap().iter().find(|z| z["name"] == zone).unwrap();
    let cpu = zone["resources"].as_array().unwrap().iter().find(|r| r["name"] == "cpu").unwrap();
    cpu["available"].as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_publishes_through_a_follower_and_keeps_its_object_across_a_deletion_and_a_leader_loss() {
    let (mut cluster, leader) = Cluster::start_with_exporter_pods(3, &[NODE], PATIENCE).await;
    cluster.double.issue_exporter_token(TOKEN, NODE);
    let follower = (leader + 1) % 3;
    let node = Node::new(&cluster.files.ca);
    let mut agent = node.agent(&cluster.replicas[follower].url()).await;

    // The first publish: created through the follower, on every replica alike.
    assert_eq!(publish(&mut agent, "the first publish").await, Outcome::Created);
    let created = object_on(&cluster, leader).await;
    for index in 0..3 {
        let copy = object_on(&cluster, index).await;
        assert_eq!(copy["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"], "replica {index}");
    }
    let free = available_cpus(&created, "node-0");

    // A change: the merge patch goes the same way.
    node.allocate(2);
    assert_eq!(publish(&mut agent, "the publish after an allocation").await, Outcome::Patched);
    assert_eq!(available_cpus(&object_on(&cluster, leader).await, "node-0"), free - 2);

    // Deleted by hand: the next publish's patch answers 404 through the follower, and the agent
    // creates the object again.
    let admin = cluster.client(leader).await;
    let deleted = request(&admin, Method::DELETE, &format!("{NRT_PATH}/{NODE}"), None).await.unwrap();
    assert_eq!(deleted.status, 200, "{deleted:?}");
    node.allocate(4);
    assert_eq!(publish(&mut agent, "the publish after the deletion").await, Outcome::Created);
    assert_eq!(available_cpus(&object_on(&cluster, follower).await, "node-0"), free - 4);

    // The leader lost: once another replica leads, the agent's follower takes its writes again
    // (it may lead itself now), and nothing it wrote before is gone.
    cluster.replicas[leader].kill();
    let next = cluster.wait_for_leader(Some(leader), PATIENCE).await;
    let next = next.unwrap_or_else(|| panic!("no new leader\n{}", cluster.logs()));
    node.allocate(6);
    assert_eq!(publish(&mut agent, "the publish after the leader's loss").await, Outcome::Patched);
    assert_eq!(available_cpus(&object_on(&cluster, next).await, "node-0"), free - 6);
}

/// How many objects a LIST through `reader` returns; None when it fails.
async fn listed(reader: &kube::Client) -> Option<usize> {
    let answer = request(reader, Method::GET, NRT_PATH, None).await.ok()?;
    (answer.status == 200).then(|| answer.body["items"].as_array().map_or(0, Vec::len))
}

/// Waits until a LIST through `reader` returns `expected` objects.
async fn all_listed(reader: &kube::Client, what: &str, cluster: &Cluster, expected: usize) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while listed(reader).await != Some(expected) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not every object within {PATIENCE:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The exporters' cold start, routed as a cluster routes it: a Service for reads that reaches
/// only Ready replicas, and the write Service (not-ready addresses published) the exporters
/// write through and ask, on its admin port, whether their object is held. Every replica is
/// killed and started again while three real agents run; the objects must come back without
/// anyone's help, and no reader may ever get a list that lacks them (an informer that lists an
/// empty store drops every node's topology; a 503 keeps it).
///
/// The agents have no heartbeat and their nodes do not change: the only thing that can bring
/// the objects back is the question (as the exporters run it, every few seconds), so the test
/// shows the objects return within seconds of a cold start, not at a heartbeat a minute away.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cold_start_of_every_replica_comes_back_from_the_exporters_and_never_serves_a_list_without_them() {
    use numaresources_tests::replicas::ReplicaOptions;
    use numaresources_tests::service::{Publish, Service};

    const NODES: [&str; 3] = ["worker-0", "worker-1", "worker-2"];
    let mut cluster = Cluster::start(2, ReplicaOptions { delegated: true, ..ReplicaOptions::default() }).await;
    // As the Deployment runs them: the warm-up bound is longer than the exporters' heartbeat.
    cluster.options.store_warmup = "90s".to_owned();
    cluster.double.set_direct_exporter_pods(NODES.iter().map(|node| (*node).to_owned()).collect());
    for index in 0..2 {
        cluster.respawn(index);
    }
    let reads = Service::start(cluster.backends().await, Publish::Ready).await;
    let writes = Service::start(cluster.backends().await, Publish::NotReadyToo).await;
    // The write Service's admin port.
    let asks = Service::start(cluster.admin_backends().await, Publish::NotReadyToo).await;

    let node = Node::new(&cluster.files.ca);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (mut agents, mut askers) = (Vec::new(), Vec::new());
    for name in NODES {
        let token = format!("projected-token-of-the-exporter-on-{name}");
        cluster.double.issue_exporter_token(&token, name);
        let lost = Lost::new();
        let agent = node.agent_for(name, &token, &writes.url(), None).await.with_republish(lost.clone());
        let mut stopped = stopped.clone();
        agents.push(tokio::spawn(agent.run(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })));
        let admin_url = asks.plain_url().parse().unwrap();
        askers.push(tokio::spawn(held::follow(admin_url, name.to_owned(), lost, held::HELD_INTERVAL)));
    }

    let reader = numaresources_tests::replicas::ClusterFiles::client(&cluster.files, &reads.url()).await;
    all_listed(&reader, "the first publishes", &cluster, NODES.len()).await;

    // A reader polling through the read Service all along, as an informer's relists would.
    let polling = tokio::spawn({
        let reader = reader.clone();
        let stopped = stopped.clone();
        async move {
            let mut short = Vec::new();
            while !*stopped.borrow() {
                if let Some(count) = listed(&reader).await.filter(|count| *count < NODES.len()) {
                    short.push(count);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            short
        }
    });

    for replica in &mut cluster.replicas {
        replica.kill();
    }
    assert!(writes.endpoints().len() <= 2);
    let restarted = std::time::Instant::now();
    for index in 0..2 {
        cluster.respawn(index);
    }
    all_listed(&reader, "after the cold start", &cluster, NODES.len()).await;
    eprintln!("every object back through the read Service {:?} after the replicas restarted", restarted.elapsed());

    stop.send_replace(true);
    askers.iter().for_each(tokio::task::JoinHandle::abort);
    let short = polling.await.unwrap();
    assert!(short.is_empty(), "lists without every object were served: {short:?}\n{}", cluster.logs());
    for agent in agents {
        agent.await.unwrap().unwrap();
    }
}
