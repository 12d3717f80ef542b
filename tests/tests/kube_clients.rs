//! kube-rs clients against our API server over TLS: `kube::runtime::watcher` (list+watch and
//! the streaming list) feeding a `reflector`, while another task writes; then a server restart
//! on the same port with a fresh store, whose revisions start above the old ones, so the watcher's
//! resourceVersion is too old: it must get a 410 `Expired`, relist, and the reflector must hold
//! exactly the new server's objects.
//!
//! Every wait is bounded; nothing asserts how long anything took.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use futures_util::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_apiserver::{AppState, Store, router};
use numaresources_tests::replicas::two_zone_nrt;
use numaresources_tests::served::{Served, bounded, kube_client, serving_tls, test_ca};
use serde_json::json;
use tokio::sync::mpsc;

/// One incarnation of the API server: its own store, every request's path and query recorded.
struct Server {
    served: Served,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(tls: &Arc<rustls::ServerConfig>, address: SocketAddr) -> Self {
        let state = Arc::new(AppState::new(Arc::new(Store::new(1_000)), "0.1.0", "kube-clients"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&requests);
        let app = router(state).layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            let log = Arc::clone(&log);
            async move {
                log.lock().unwrap().push(request.uri().to_string());
                next.run(request).await
            }
        }));
        Self { served: Served::start(address, Arc::clone(tls), app).await, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// A 2-zone worker with `available` CPUs free in zone 0.
fn nrt(name: &str, available: i64) -> NodeResourceTopology {
    two_zone_nrt(name, [available, 10])
}

fn available_patch(available: i64) -> Patch<serde_json::Value> {
    // Zones are replaced whole by a merge patch.
    let object = nrt("unused", available);
    Patch::Merge(json!({ "zones": object.zones }))
}

/// name → (uid, resourceVersion, available CPUs in zone 0).
type Summary = BTreeMap<String, (String, String, String)>;

fn summarize<'a>(objects: impl IntoIterator<Item = &'a NodeResourceTopology>) -> Summary {
    objects
        .into_iter()
        .map(|o| {
            let meta = &o.metadata;
            let free = o.zones.first().and_then(|z| z.resources.first()).map(|r| r.available.to_string());
            (
                meta.name.clone().unwrap_or_default(),
                (
                    meta.uid.clone().unwrap_or_default(),
                    meta.resource_version.clone().unwrap_or_default(),
                    free.unwrap_or_default(),
                ),
            )
        })
        .collect()
}

async fn server_state(api: &Api<NodeResourceTopology>) -> Summary {
    let list = api.list(&ListParams::default()).await.unwrap();
    summarize(&list.items)
}

/// Waits until the reflector's store holds exactly what the server lists.
async fn converged(what: &str, api: &Api<NodeResourceTopology>, reader: &reflector::Store<NodeResourceTopology>) {
    let want = server_state(api).await;
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let have = summarize(reader.state().iter().map(AsRef::as_ref));
            if have == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if result.is_err() {
        let have = summarize(reader.state().iter().map(AsRef::as_ref));
        panic!("{what}: the reflector never converged (likely deadlocked)\nserver: {want:?}\nreflector: {have:?}");
    }
}

/// What the watcher reported, as the test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Init,
    InitDone,
    Expired,
    OtherError(String),
}

/// A create/patch/delete workload: `count` objects, each patched `patches` times, every third
/// deleted. Returns when done.
async fn churn(api: Api<NodeResourceTopology>, prefix: &str, count: usize, patches: i64) {
    for i in 0..count {
        api.create(&PostParams::default(), &nrt(&format!("{prefix}-{i:02}"), 10)).await.unwrap();
    }
    for round in 0..patches {
        for i in 0..count {
            let available = (round + i as i64) % 10;
            api.patch(&format!("{prefix}-{i:02}"), &PatchParams::default(), &available_patch(available)).await.unwrap();
        }
    }
    for i in (0..count).step_by(3) {
        api.delete(&format!("{prefix}-{i:02}"), &DeleteParams::default()).await.unwrap();
    }
}

async fn watcher_and_reflector_survive_a_restart(config: watcher::Config, streaming: bool) {
    let dir = tempfile::tempdir().unwrap();
    let ca = test_ca();
    let tls = serving_tls(&ca, dir.path(), "apiserver");
    let server = Server::start(&tls, "127.0.0.1:0".parse().unwrap()).await;
    let (address, url) = (server.served.address, server.served.url());
    let kube = kube_client(&url, ca.cert_pem(), "placeholder").await;
    let api: Api<NodeResourceTopology> = Api::all(kube.clone());

    // Objects that exist before the watcher starts.
    for i in 0..5 {
        api.create(&PostParams::default(), &nrt(&format!("before-{i}"), 4)).await.unwrap();
    }

    let (reader, writer) = reflector::store::<NodeResourceTopology>();
    let (tell, mut seen) = mpsc::unbounded_channel::<Seen>();
    let stream = reflector(writer, watcher(api.clone(), config).default_backoff());
    let consumer = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let report = match item {
                Ok(watcher::Event::Init) => Some(Seen::Init),
                Ok(watcher::Event::InitDone) => Some(Seen::InitDone),
                Ok(_) => None,
                Err(watcher::Error::WatchError(status)) if status.code == 410 => Some(Seen::Expired),
                Err(other) => Some(Seen::OtherError(other.to_string())),
            };
            if let Some(report) = report {
                let _ = tell.send(report);
            }
        }
    });
    let next_seen = async |seen: &mut mpsc::UnboundedReceiver<Seen>, what: &str| -> Seen {
        bounded(what, seen.recv()).await.unwrap()
    };

    // The first list (or streaming list) and convergence to the pre-existing objects.
    assert_eq!(next_seen(&mut seen, "the initial list").await, Seen::Init);
    assert_eq!(next_seen(&mut seen, "the end of the initial list").await, Seen::InitDone);
    bounded("reflector ready", reader.wait_until_ready()).await.unwrap();
    converged("after the initial list", &api, &reader).await;
    assert_eq!(reader.state().len(), 5);

    // Another task writes while the watch runs; the store follows it.
    bounded("churn", tokio::spawn(churn(api.clone(), "churn", 12, 5))).await.unwrap();
    api.delete("before-0", &DeleteParams::default()).await.unwrap();
    converged("after creates, patches and deletes", &api, &reader).await;
    assert_eq!(reader.state().len(), 4 + 12 - 4);
    let old_names: Vec<String> = summarize(reader.state().iter().map(AsRef::as_ref)).into_keys().collect();
    let old_revision: u64 =
        server_state(&api).await.values().map(|(_, rv, _)| rv.parse::<u64>().unwrap()).max().unwrap();
    let first_requests = server.requests();
    if streaming {
        assert!(
            first_requests.iter().any(|r| r.contains("sendInitialEvents=true")),
            "the streaming list was used: {first_requests:?}"
        );
    } else {
        assert!(
            first_requests.iter().any(|r| r.contains("limit=500") && !r.contains("watch=")),
            "the watcher's paged list was used: {first_requests:?}"
        );
    }

    // The restart: a fresh store on the same port, with some of the old names (new objects) and
    // some new ones; everything else the reflector holds is now stale.
    server.served.stop().await;
    let server = Server::start(&tls, address).await;
    let admin = kube_client(&url, ca.cert_pem(), "placeholder").await;
    let fresh: Api<NodeResourceTopology> = Api::all(admin);
    for name in ["before-1", "after-a", "after-b"] {
        fresh.create(&PostParams::default(), &nrt(name, 7)).await.unwrap();
    }
    assert!(
        fresh.get("before-1").await.unwrap().metadata.resource_version.unwrap().parse::<u64>().unwrap() > old_revision
    );

    // The watcher resumes with its old resourceVersion, is told it expired, and relists.
    let mut after_restart = Vec::new();
    loop {
        let item = next_seen(&mut seen, "the relist after the restart").await;
        after_restart.push(item.clone());
        if item == Seen::InitDone {
            break;
        }
    }
    assert!(after_restart.contains(&Seen::Expired), "a 410 Expired came first: {after_restart:?}");
    let expired_at = after_restart.iter().position(|s| *s == Seen::Expired).unwrap();
    assert_eq!(after_restart[expired_at + 1], Seen::Init, "{after_restart:?}");
    converged("after the restart", &fresh, &reader).await;
    let names: Vec<String> = summarize(reader.state().iter().map(AsRef::as_ref)).into_keys().collect();
    assert_eq!(names, ["after-a", "after-b", "before-1"], "no stale objects (before: {old_names:?})");

    // What the new server was asked: a resumed watch from the old revision, then the relist.
    let requests = server.requests();
    let resumed = requests
        .iter()
        .position(|r| r.contains("watch=true") && !r.contains("sendInitialEvents") && r.contains("resourceVersion="))
        .unwrap_or_else(|| panic!("no resumed watch: {requests:?}"));
    let relist = requests
        .iter()
        .skip(resumed + 1)
        .position(|r| {
            if streaming {
                r.contains("sendInitialEvents=true")
            } else {
                r.contains("limit=500") && !r.contains("watch=")
            }
        })
        .map(|i| i + resumed + 1);
    assert!(relist.is_some(), "a relist followed the expired watch: {requests:?}");

    // And the reflector keeps following the new server.
    fresh.patch("after-a", &PatchParams::default(), &available_patch(1)).await.unwrap();
    fresh.delete("before-1", &DeleteParams::default()).await.unwrap();
    converged("after writes to the new server", &fresh, &reader).await;
    assert_eq!(reader.state().len(), 2);

    consumer.abort();
    server.served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_watch_reflector_follows_writes_and_relists_after_a_restart() {
    watcher_and_reflector_survive_a_restart(watcher::Config::default(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_reflector_follows_writes_and_relists_after_a_restart() {
    watcher_and_reflector_survive_a_restart(watcher::Config::default().streaming_lists(), true).await;
}
