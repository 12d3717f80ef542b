//! Three real `numaresources apiserver` processes on loopback replicating one NRT store, with
//! their Lease served by the kube-apiserver double (the only stand-in: for kube-apiserver's
//! endpoints). Real TLS on the public ports, mutual TLS on the peer ports, real signals.
//!
//! Scenarios: exactly one leader; a write through a follower is on every replica with the same
//! resourceVersion, and a consistent LIST on a follower already has it; a watch resumes on another
//! replica from its last resourceVersion without a 410 and misses nothing; kill -9 of the leader
//! loses no acknowledged write and refuses writes (503 + Retry-After) only during the election;
//! SIGTERM of the leader hands over while writes keep succeeding; a replica that is not caught up
//! is not Ready; a cold store answers discovery and reads with 503; in delegated mode (tokens
//! reviewed by the double), an exporter placed through its pod writes its own node's object
//! through a follower and is refused another node's, and the leader's answers (201, 200, 403, 404,
//! 409) reach the client through the follower as the leader gave them.
//!
//! Every wait is bounded by a generous deadline; nothing asserts how long anything took.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use http::Method;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_tests::replicas::{
    Answer, Cluster, LEASE_NAME, LEASE_NAMESPACE, NRT_PATH, Replica, ReplicaOptions, nrt, plain_get, read_retrying,
    request, request_as, wait_ready, write_retrying,
};
use numaresources_tests::served::{BOUND, bounded, until};
use serde_json::json;
use tokio::time::Instant;

/// Generous bound for anything the cluster must do (elect, catch up, become Ready).
const PATIENCE: Duration = BOUND;
/// What a replica logs when it starts leading.
const LEADING: &str = "leading the store";
/// The discovery document kube-apiserver's availability check reads.
const DISCOVERY: &str = "/apis/topology.node.k8s.io/v1alpha2";

fn object_path(name: &str) -> String {
    format!("{NRT_PATH}/{name}")
}

/// name → resourceVersion of every NRT a LIST on `client` returns (`query` appended), retrying
/// a 503 with Retry-After as a client does (a follower that has not yet learnt who leads after
/// an election refuses a consistent LIST so).
async fn listed(client: &kube::Client, query: &str) -> BTreeMap<String, String> {
    let path = format!("{NRT_PATH}{query}");
    let answer = read_retrying(client, &path, Instant::now() + PATIENCE).await.unwrap();
    assert_eq!(answer.status, 200, "LIST{query}: {answer:?}");
    answer.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let meta = &item["metadata"];
            (meta["name"].as_str().unwrap().to_owned(), meta["resourceVersion"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// Starts three replicas and waits for a leader and for all to be Ready; returns the leader.
async fn three_ready_replicas() -> (Cluster, usize) {
    let cluster = Cluster::start(3, ReplicaOptions::default()).await;
    let leader = cluster.wait_for_leader(None, PATIENCE).await;
    let leader =
        leader.unwrap_or_else(|| panic!("no leader elected; the Lease: {:?}\n{}", cluster.holder(), cluster.logs()));
    cluster.wait_all_ready(PATIENCE).await;
    // Ready followers are not yet counted in sync by the leader: writes before that are
    // acknowledged by the leader alone, and a test of failover would prove nothing.
    cluster.wait_all_in_sync(PATIENCE).await;
    (cluster, leader)
}

/// The other two replicas' indexes.
fn followers(leader: usize) -> (usize, usize) {
    ((leader + 1) % 3, (leader + 2) % 3)
}

/// Creates `name` through `client`; its resourceVersion.
async fn create(client: &kube::Client, name: &str, sequence: u64) -> String {
    let answer = request(client, Method::POST, NRT_PATH, Some(&nrt(name, sequence))).await.unwrap();
    assert_eq!(answer.status, 201, "create {name}: {answer:?}");
    answer.resource_version().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_leader_and_a_write_through_a_follower_is_on_every_replica_with_one_resource_version() {
    let (mut cluster, leader) = three_ready_replicas().await;
    let lease = cluster.double.lease(LEASE_NAMESPACE, LEASE_NAME).unwrap();
    let annotations = lease.metadata.annotations.clone().unwrap_or_default();
    let peer = format!("https://127.0.0.1:{}", cluster.replicas[leader].peer_port);
    assert_eq!(annotations.get("nodetopology.openshift.io/peer-address"), Some(&peer), "{lease:?}");
    // The Lease tells each in-sync follower's lag (what `kubectl numa doctor` reports).
    let lag =
        annotations.get(numaresources_apiserver::replication::FOLLOWER_LAG_ANNOTATION).cloned().unwrap_or_default();
    let lagging: Vec<&str> = lag.split(',').filter_map(|entry| entry.split_once('=').map(|(id, _)| id)).collect();
    for id in cluster.in_sync() {
        assert!(lagging.contains(&id.as_str()), "{id} in sync but not in the lag annotation {lag:?}");
    }

    // Each replica knows its role; exactly one says it leads.
    for index in 0..3 {
        let needle = if index == leader { LEADING } else { "following the leader" };
        tokio::task::block_in_place(|| cluster.replicas[index].wait_for_log(needle, PATIENCE));
    }
    let leading = cluster.replicas.iter().filter(|r| r.log().iter().any(|l| l.contains(LEADING))).count();
    assert_eq!(leading, 1, "exactly one replica leads");

    let (follower, other) = followers(leader);
    let through_follower = cluster.client(follower).await;
    let version = create(&through_follower, "worker-0", 1).await;

    // Acknowledged means replicated: a consistent LIST on any replica already has it.
    for index in [follower, other, leader] {
        let objects = listed(&cluster.client(index).await, "").await;
        assert_eq!(objects.get("worker-0"), Some(&version), "consistent LIST on replica {index}");
    }
    // And a GET on each replica returns the same object, version included.
    let reference = request(&cluster.client(leader).await, Method::GET, &object_path("worker-0"), None).await.unwrap();
    for index in [follower, other] {
        let client = cluster.client(index).await;
        let answer = bounded("GET on a follower", async {
            loop {
                let answer = request(&client, Method::GET, &object_path("worker-0"), None).await.unwrap();
                if answer.ok() {
                    return answer;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert_eq!(answer.body, reference.body, "replica {index} serves the leader's object");
    }

    // An update through the other follower: one more version, the same everywhere.
    let mut changed = reference.body.clone();
    changed["attributes"] = nrt("worker-0", 2)["attributes"].clone();
    let updated =
        request(&cluster.client(other).await, Method::PUT, &object_path("worker-0"), Some(&changed)).await.unwrap();
    assert_eq!(updated.status, 200, "{updated:?}");
    let new_version = updated.resource_version().unwrap();
    assert_ne!(new_version, version);
    for index in 0..3 {
        let objects = listed(&cluster.client(index).await, "").await;
        assert_eq!(objects.get("worker-0"), Some(&new_version), "replica {index}");
    }
}

/// Reads watch events until `count` object events came; fails on an ERROR event (a 410 above all).
async fn next_events(
    stream: &mut (impl futures_util::Stream<Item = kube::Result<WatchEvent<NodeResourceTopology>>> + Unpin),
    count: usize,
) -> Vec<(String, String, String)> {
    let mut events = Vec::new();
    bounded("watch events", async {
        while events.len() < count {
            let event = stream.next().await.expect("the watch stays open").expect("a decodable event");
            let (kind, object) = match event {
                WatchEvent::Added(object) => ("ADDED", object),
                WatchEvent::Modified(object) => ("MODIFIED", object),
                WatchEvent::Deleted(object) => ("DELETED", object),
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(status) => panic!("the watch failed: {status:?}"),
            };
            let meta = object.metadata;
            events.push((kind.to_owned(), meta.name.unwrap_or_default(), meta.resource_version.unwrap_or_default()));
        }
    })
    .await;
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_resumes_on_another_replica_from_its_last_resource_version() {
    let (cluster, leader) = three_ready_replicas().await;
    let (first, second) = followers(leader);
    let writer = cluster.client(leader).await;
    let start = create(&writer, "start", 0).await;

    let mut written = Vec::new();
    let on_first = Api::<NodeResourceTopology>::all(cluster.client(first).await);
    let mut stream = on_first.watch(&WatchParams::default(), &start).await.unwrap().boxed();
    for i in 0..5 {
        let name = format!("worker-{i}");
        written.push(("ADDED".to_owned(), name.clone(), create(&writer, &name, i).await));
    }
    let seen = next_events(&mut stream, 5).await;
    assert_eq!(seen, written, "the first replica's watch");
    drop(stream);

    // While nobody watches: updates through the other follower.
    let mut more = Vec::new();
    let other_writer = cluster.client(second).await;
    for i in 0..5 {
        let name = format!("worker-{i}");
        let current = request(&other_writer, Method::GET, &object_path(&name), None).await.unwrap();
        let mut changed = current.body.clone();
        changed["attributes"] = nrt(&name, 100 + i)["attributes"].clone();
        let answer = request(&other_writer, Method::PUT, &object_path(&name), Some(&changed)).await.unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
        more.push(("MODIFIED".to_owned(), name, answer.resource_version().unwrap()));
    }

    // Resumed on the second replica from the last version seen on the first: no 410, nothing
    // missed, nothing twice.
    let last = &seen.last().unwrap().2;
    let on_second = Api::<NodeResourceTopology>::all(cluster.client(second).await);
    let mut resumed = on_second.watch(&WatchParams::default(), last).await.unwrap().boxed();
    assert_eq!(next_events(&mut resumed, 5).await, more, "the resumed watch");
    // Nothing else is pending: one more write is the very next event.
    let barrier = create(&writer, "barrier", 0).await;
    assert_eq!(next_events(&mut resumed, 1).await, [("ADDED".to_owned(), "barrier".to_owned(), barrier)]);
}

/// What one writer saw: name → acknowledged resourceVersion, and the 503s before acks.
#[derive(Default)]
struct Writes {
    acknowledged: BTreeMap<String, String>,
    /// Creates that were refused, then found to exist on a retry (409): the refused attempt
    /// was applied after all. Not acknowledged, so no promise is attached; not a failure either.
    landed_unacknowledged: usize,
    /// Writes in flight when the leader died: 504 Timeout, "may or may not have been applied"
    /// (kube-apiserver's answer when it cannot know). Not acknowledged, not a failure.
    outcome_unknown: usize,
    refusals: Vec<Answer>,
    failures: Vec<String>,
    /// The longest one write took, its retries included.
    slowest: Duration,
}

impl Writes {
    fn settled(&self) -> usize {
        self.acknowledged.len() + self.landed_unacknowledged + self.outcome_unknown
    }
}

/// Creates `count` objects `prefix-<i>` through `client`, retrying on 503 as a client would.
async fn write_many(client: kube::Client, prefix: String, count: u64, written: Arc<AtomicUsize>) -> Writes {
    let mut writes = Writes::default();
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let started = Instant::now();
        let deadline = started + PATIENCE;
        let outcome = write_retrying(&client, Method::POST, NRT_PATH, &nrt(&name, i), deadline).await;
        writes.slowest = writes.slowest.max(started.elapsed());
        match outcome {
            Ok((answer, refusals)) => {
                let retried = !refusals.is_empty();
                writes.refusals.extend(refusals);
                match answer.resource_version() {
                    Some(version) if answer.status == 201 => {
                        writes.acknowledged.insert(name, version);
                    }
                    _ if answer.status == 409 && retried => writes.landed_unacknowledged += 1,
                    _ if answer.status == 504 && answer.body["reason"] == "Timeout" => writes.outcome_unknown += 1,
                    _ => writes.failures.push(format!("{name}: {answer:?}")),
                }
            }
            Err(error) => writes.failures.push(format!("{name}: {error}")),
        }
        written.fetch_add(1, Ordering::Relaxed);
    }
    writes
}

/// Every acknowledged write is on each of `survivors` with its acknowledged resourceVersion.
async fn assert_all_present(cluster: &Cluster, survivors: &[usize], writes: &Writes) {
    for &index in survivors {
        let objects = listed(&cluster.client(index).await, "").await;
        let missing: Vec<_> = writes
            .acknowledged
            .iter()
            .filter(|(name, version)| objects.get(*name) != Some(version))
            .map(|(name, version)| (name, version, objects.get(name)))
            .collect();
        assert!(
            missing.is_empty(),
            "replica {index} lost or changed acknowledged writes (name, acked, held): {missing:?}\n{}",
            cluster.logs()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_the_leader_loses_no_acknowledged_write_and_refuses_writes_only_during_the_election() {
    let (mut cluster, leader) = three_ready_replicas().await;
    let (follower, other) = followers(leader);
    let written = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn(write_many(cluster.client(follower).await, "kill".to_owned(), 200, written.clone()));

    until("the writer makes progress", || written.load(Ordering::Relaxed) >= 50).await;
    cluster.replicas[leader].kill();
    let new_leader = cluster.wait_for_leader(Some(leader), PATIENCE).await.expect("a new leader is elected");
    assert!([follower, other].contains(&new_leader));

    let writes = bounded("the writer finishes", writer).await.unwrap();
    assert!(writes.failures.is_empty(), "writes failed beyond a retried 503: {:?}", writes.failures);
    assert_eq!(writes.settled(), 200);
    for refusal in &writes.refusals {
        assert_eq!(refusal.body["reason"], "ServiceUnavailable", "{refusal:?}");
        assert!(refusal.retry_after.is_some(), "a 503 without Retry-After: {refusal:?}");
    }
    assert_all_present(&cluster, &[follower, other], &writes).await;

    // The election is over: once a survivor follows the new leader (Ready: in sync with it; the
    // one the writer did not use may learn of the new Lease holder a retry period later), writes
    // through it are no longer refused.
    for index in [follower, other] {
        let client = cluster.client(index).await;
        assert!(wait_ready(&client, PATIENCE).await, "replica {index} never became Ready again\n{}", cluster.logs());
        for i in 0..10 {
            let answer =
                request(&client, Method::POST, NRT_PATH, Some(&nrt(&format!("after-{index}-{i}"), i))).await.unwrap();
            assert_eq!(answer.status, 201, "replica {index} after the election: {answer:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_of_the_leader_hands_over_while_writes_keep_succeeding() {
    /// Writers through a follower, so that writes are on their way to the leader as it stops.
    const WRITERS: usize = 32;
    /// No write may wait anywhere near a timeout: the follower answers a write it forwarded to
    /// the leader that stopped within about a second of following the new one (a connection to
    /// the old leader was once seen to keep such a write waiting for a whole minute).
    const NO_WRITE_WAITS_LONGER: Duration = Duration::from_secs(10);
    let (mut cluster, leader) = three_ready_replicas().await;
    let (follower, other) = followers(leader);
    let written = Arc::new(AtomicUsize::new(0));
    let client = cluster.client(follower).await;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(write_many(client.clone(), format!("term-{w}"), 60, written.clone())))
        .collect();

    until("the writer makes progress", || written.load(Ordering::Relaxed) >= 300).await;
    let status = tokio::task::block_in_place(|| cluster.replicas[leader].terminate(PATIENCE));
    let log = cluster.replicas[leader].log().join("\n");
    assert!(status.is_some_and(|s| s.success()), "the leader exits cleanly on SIGTERM: {status:?}; its log:\n{log}");
    // Back at once at the same address, as a restarted container is.
    cluster.respawn(leader);
    let new_leader = cluster.wait_for_leader(Some(leader), PATIENCE).await.expect("a survivor leads");
    assert!([follower, other].contains(&new_leader));

    for writer in writers {
        let writes = bounded("the writers finish", writer).await.unwrap();
        assert!(writes.failures.is_empty(), "writes failed during the hand-over: {:?}", writes.failures);
        assert_eq!(writes.settled(), 60);
        assert!(writes.slowest < NO_WRITE_WAITS_LONGER, "a write waited {:?} during the hand-over", writes.slowest);
        assert_all_present(&cluster, &[follower, other], &writes).await;
    }
    let log = cluster.replicas[new_leader].log();
    assert!(log.iter().any(|line| line.contains(LEADING)), "{log:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_is_not_caught_up_is_not_ready() {
    let mut cluster = Cluster::start(2, ReplicaOptions::default()).await;
    let leader = cluster.wait_for_leader(None, PATIENCE).await.expect("a leader");
    cluster.wait_all_ready(PATIENCE).await;
    let writer = cluster.client(leader).await;
    for i in 0..300 {
        create(&writer, &format!("worker-{i}"), i).await;
    }
    let expected = listed(&writer, "").await;

    let (files, options) = (cluster.files.clone(), cluster.options.clone());
    let late = tokio::task::block_in_place(|| Replica::start(&files, 2, &options));
    cluster.replicas.push(late);
    let client = cluster.client(2).await;
    // Whenever it says Ready, its own cache (resourceVersion=0: no waiting for the leader)
    // already holds everything written before it started.
    bounded("the late replica becomes Ready", async {
        loop {
            let ready = request(&client, Method::GET, "/readyz", None).await.unwrap();
            if ready.status == 200 {
                let cached = listed(&client, "?resourceVersion=0").await;
                assert_eq!(cached, expected, "Ready before it caught up");
                return;
            }
            assert_eq!(ready.status, 500, "a failing /readyz answers 500: {ready:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cold_store_answers_discovery_and_reads_with_503_until_every_exporter_has_reported() {
    const NODES: u64 = 20;
    let (mut cluster, leader) = three_ready_replicas().await;
    let writer = cluster.client(leader).await;
    for i in 0..NODES {
        create(&writer, &format!("worker-{i}"), i).await;
    }

    // Every replica gone at once (a cluster restart). Each node runs an exporter pod; the
    // warm-up bound is far away, so only the exporters' reports can make the store warm.
    for replica in &mut cluster.replicas {
        replica.kill();
    }
    cluster.double.set_exporter_pods((0..NODES).map(|i| format!("worker-{i}")).collect());
    cluster.options.store_warmup = "1h".to_owned();
    for index in 0..3 {
        cluster.respawn(index);
        let client = cluster.client(index).await;
        let ready = request(&client, Method::GET, "/readyz", None).await.unwrap();
        assert_eq!(ready.status, 500, "replica {index} is Ready with a cold store: {ready:?}");
        for path in [DISCOVERY, NRT_PATH] {
            let answer = request(&client, Method::GET, path, None).await.unwrap();
            assert_eq!(answer.status, 503, "replica {index} answered {path} with a cold store: {answer:?}");
            assert_eq!(answer.body["reason"], "ServiceUnavailable", "{answer:?}");
        }
    }
    // A leader, and every exporter but one has reported: still cold.
    let leader = cluster.wait_for_leader(None, PATIENCE).await.expect("a leader after the restart");
    let writer = cluster.client(leader).await;
    for i in 1..NODES {
        publish_like_an_exporter(&writer, &format!("worker-{i}"), i).await;
    }
    for index in 0..3 {
        let client = cluster.client(index).await;
        let ready = request(&client, Method::GET, "/readyz", None).await.unwrap();
        assert_eq!(ready.status, 500, "replica {index} is Ready before worker-0's exporter reported: {ready:?}");
        let answer = request(&client, Method::GET, NRT_PATH, None).await.unwrap();
        assert_eq!(answer.status, 503, "replica {index} answered a LIST missing worker-0: {answer:?}");
    }
    // The last one reports: every replica becomes warm, and none answers a read (from its own
    // state: resourceVersion=0) or says Ready before it holds every object, though a follower
    // may hear that the leader is warm before the last object reaches it.
    publish_like_an_exporter(&writer, "worker-0", 0).await;
    bounded("warm again, never answering with an incomplete store", async {
        let clients = futures_util::future::join_all((0..3).map(|index| cluster.client(index))).await;
        let mut ready = [false; 3];
        while !ready.iter().all(|r| *r) {
            for (index, client) in clients.iter().enumerate() {
                let cached =
                    request(client, Method::GET, &format!("{NRT_PATH}?resourceVersion=0"), None).await.unwrap();
                let readyz = request(client, Method::GET, "/readyz", None).await.unwrap();
                if cached.status == 200 {
                    let items = cached.body["items"].as_array().map_or(0, Vec::len);
                    assert_eq!(items, usize::try_from(NODES).unwrap(), "replica {index} answered an incomplete store");
                }
                if readyz.status == 200 {
                    let after = request(client, Method::GET, &format!("{NRT_PATH}?resourceVersion=0"), None).await;
                    let after = after.unwrap();
                    let items = after.body["items"].as_array().map_or(0, Vec::len);
                    assert_eq!(
                        (after.status, items),
                        (200, usize::try_from(NODES).unwrap()),
                        "replica {index} is Ready, and then answers: {after:?}"
                    );
                    ready[index] = true;
                }
            }
        }
    })
    .await;
    for index in 0..3 {
        let client = cluster.client(index).await;
        let discovery = request(&client, Method::GET, DISCOVERY, None).await.unwrap();
        assert_eq!(discovery.status, 200, "{discovery:?}");
        assert_eq!(listed(&client, "").await.len(), usize::try_from(NODES).unwrap());
    }
}

/// Creates `name` as an exporter does after a restart: a 503 is retried (Retry-After), and so is
/// an unknown outcome (504 Timeout: the replica's leader changed while the write was on its
/// way), after which a 409 means the earlier attempt landed.
async fn publish_like_an_exporter(client: &kube::Client, name: &str, sequence: u64) {
    let deadline = Instant::now() + PATIENCE;
    let mut unknown = false;
    loop {
        let (answer, _) = write_retrying(client, Method::POST, NRT_PATH, &nrt(name, sequence), deadline).await.unwrap();
        match answer.status {
            201 => return,
            409 if unknown => return,
            504 if answer.body["reason"] == "Timeout" && Instant::now() < deadline => unknown = true,
            _ => panic!("an exporter re-creates its object on a cold store: {answer:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_exporter_placed_through_its_pod_writes_only_its_own_node_through_a_follower() {
    // Delegated mode, as in a cluster: tokens reviewed by the double, which binds them to
    // exporter pods without naming the node, so every replica must place them through the pod.
    let (cluster, leader) = Cluster::start_with_exporter_pods(3, &["worker-a", "worker-b"], PATIENCE).await;
    cluster.double.issue_exporter_token("token-of-the-exporter-on-worker-a", "worker-a");
    let (follower, _) = followers(leader);
    let exporter =
        cluster.files.client_with_token(&cluster.replicas[follower].url(), "token-of-the-exporter-on-worker-a").await;

    // Its own node's object: forwarded by the follower, written by the leader.
    let own = request(&exporter, Method::POST, NRT_PATH, Some(&nrt("worker-a", 1))).await.unwrap();
    assert_eq!(own.status, 201, "the exporter's own object through a follower: {own:?}\n{}", cluster.logs());
    assert_eq!(own.content_types, ["application/json"], "the leader's media type, once (client-go reads the first)");
    let on_leader = request(&cluster.client(leader).await, Method::GET, &object_path("worker-a"), None).await.unwrap();
    assert_eq!(on_leader.status, 200, "{on_leader:?}");
    assert_eq!(on_leader.resource_version(), own.resource_version(), "the leader holds what the follower answered");

    // Another node's: refused with the rule named, whether created or deleted.
    let other = request(&exporter, Method::POST, NRT_PATH, Some(&nrt("worker-b", 1))).await.unwrap();
    let refused = |answer: &Answer, what: &str| {
        assert_eq!(answer.status, 403, "{what}: {answer:?}");
        assert_eq!(answer.content_types, ["application/json"], "{what}: {answer:?}");
        assert_eq!(answer.body["reason"], "Forbidden", "{what}: {answer:?}");
        let message = answer.body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("node restriction") && message.contains("\"worker-a\""),
            "{what}: the Status names the rule and the caller's node: {message}"
        );
    };
    refused(&other, "creating worker-b as worker-a's exporter");
    let admin = cluster.client(leader).await;
    assert_eq!(request(&admin, Method::POST, NRT_PATH, Some(&nrt("worker-b", 1))).await.unwrap().status, 201);
    let deleted = request(&exporter, Method::DELETE, &object_path("worker-b"), None).await.unwrap();
    refused(&deleted, "deleting worker-b as worker-a's exporter");
    assert_eq!(request(&admin, Method::GET, &object_path("worker-b"), None).await.unwrap().status, 200);

    // What the exporter sends every publish, a merge patch of its zones: the same way through.
    const MERGE_PATCH: &str = "application/merge-patch+json";
    let zones = json!({"zones": nrt("worker-a", 2)["zones"]});
    let patched =
        request_as(&exporter, Method::PATCH, &object_path("worker-a"), Some(&zones), MERGE_PATCH).await.unwrap();
    assert_eq!(patched.status, 200, "{patched:?}");
    assert_eq!(patched.content_types, ["application/json"], "{patched:?}");
    let theirs = request_as(&exporter, Method::PATCH, &object_path("worker-b"), Some(&zones), MERGE_PATCH).await;
    refused(&theirs.unwrap(), "patching worker-b as worker-a's exporter");
    // Its object deleted by hand: the patch answers 404 through the follower, and the exporter
    // creates the object again (what it does on a 404).
    assert_eq!(request(&admin, Method::DELETE, &object_path("worker-a"), None).await.unwrap().status, 200);
    let gone = request_as(&exporter, Method::PATCH, &object_path("worker-a"), Some(&zones), MERGE_PATCH).await;
    let gone = gone.unwrap();
    assert_eq!((gone.status, gone.body["reason"].as_str()), (404, Some("NotFound")), "{gone:?}");
    let recreated = request(&exporter, Method::POST, NRT_PATH, Some(&nrt("worker-a", 3))).await.unwrap();
    assert_eq!(recreated.status, 201, "{recreated:?}");

    // The leader's other refusals reach the client through the follower as the leader gave them.
    let admin_on_follower = cluster.client(follower).await;
    let again = request(&admin_on_follower, Method::POST, NRT_PATH, Some(&nrt("worker-b", 2))).await.unwrap();
    assert_eq!((again.status, again.body["reason"].as_str()), (409, Some("AlreadyExists")), "{again:?}");
    let missing = request(&admin_on_follower, Method::DELETE, &object_path("worker-z"), None).await.unwrap();
    assert_eq!((missing.status, missing.body["reason"].as_str()), (404, Some("NotFound")), "{missing:?}");
}

/// What a monitoring stack meets: every replica serves `/metrics` and its probes on the plain
/// admin port without any token (as the webhook and the controllers do), and on the HTTPS port
/// a Prometheus ServiceAccount's ordinary token, issued for kube-apiserver's audience, is
/// accepted for `/metrics` and for reads, as every aggregated API server accepts it. A token
/// valid for no audience of ours is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_probes_need_no_token_on_the_admin_port_and_a_kube_apiserver_token_is_accepted() {
    let cluster = Cluster::start(2, ReplicaOptions { delegated: true, ..ReplicaOptions::default() }).await;
    cluster.wait_all_ready(PATIENCE).await;
    for replica in &cluster.replicas {
        let (status, body) = plain_get(replica.health_port, "/readyz?verbose").await.unwrap();
        assert_eq!(status, 200, "replica {}: {body}", replica.index);
        assert!(body.contains("[+]store-warm ok"), "{body}");
        let (status, body) = plain_get(replica.health_port, "/metrics").await.unwrap();
        assert_eq!(status, 200, "replica {}: {body}", replica.index);
        assert!(body.contains("numaresources_apiserver_"), "{body}");
    }

    cluster.double.issue_kube_token("prometheus-token", "monitoring", "prometheus-k8s");
    let prometheus = cluster.files.client_with_token(&cluster.replicas[0].url(), "prometheus-token").await;
    assert_eq!(request(&prometheus, Method::GET, "/metrics", None).await.unwrap().status, 200);
    assert_eq!(request(&prometheus, Method::GET, NRT_PATH, None).await.unwrap().status, 200);

    let stranger = cluster.files.client_with_token(&cluster.replicas[0].url(), "never-issued").await;
    assert_eq!(request(&stranger, Method::GET, "/metrics", None).await.unwrap().status, 401);
}

/// Every replica restarted at once on the addresses they had (a node reboot, a cluster restart):
/// the Lease still names a process that is gone, at an address a new process now answers on.
/// No replica follows itself (an earlier process of itself, whose address it has), and one of
/// them leads without waiting for the stale Lease to run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_restarted_on_their_addresses_never_follow_themselves_and_elect_a_leader() {
    let mut cluster = Cluster::start(3, ReplicaOptions::default()).await;
    let first = cluster.wait_for_leader(None, PATIENCE).await.unwrap_or_else(|| panic!("{}", cluster.logs()));
    cluster.wait_all_ready(PATIENCE).await;
    let stale = cluster.holder().unwrap();
    for replica in &mut cluster.replicas {
        replica.kill();
    }
    let restarted = std::time::Instant::now();
    for index in 0..3 {
        cluster.respawn(index);
    }
    // The stale holder's address is a running replica's again: wait for a new holder.
    let deadline = Instant::now() + PATIENCE;
    while cluster.holder().is_none_or(|holder| holder == stale) {
        assert!(Instant::now() < deadline, "no new leader within {PATIENCE:?}\n{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leader = cluster.leader().unwrap_or_else(|| panic!("{}", cluster.logs()));
    eprintln!("replica {first} led before; replica {leader} leads {:?} after the restart", restarted.elapsed());
    for replica in &cluster.replicas {
        let own = format!("following the leader leader=https://127.0.0.1:{}", replica.peer_port);
        let followed_itself = replica.log().into_iter().find(|line| line.contains(&own));
        assert!(followed_itself.is_none(), "replica {} followed itself: {followed_itself:?}", replica.index);
    }
}
