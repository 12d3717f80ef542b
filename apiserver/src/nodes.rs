//! Dropping the topology of Nodes that are gone. A live node's object is never deleted for being
//! late (a missing NRT makes the node unconstrained for the scheduler), but a deleted Node's
//! object is garbage: we follow Node deletions with a metadata-only watch, and after every
//! (re)list remove the objects of nodes that no longer exist.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};

use crate::store::{Preconditions, Store, StoreError};

/// How often a follower looks whether it was promoted, to relist Nodes as the new leader.
const PROMOTION_CHECK: Duration = Duration::from_secs(1);

/// Follows Nodes until the stream ends (it does not, short of shutdown: the watcher retries with
/// backoff and logs why). Only while `writable` (a single replica, or the leader) are objects
/// removed; a follower receives the removals replicated. A follower that becomes the leader
/// lists the Nodes again, so a Node deleted while it was following (whose removal the old leader
/// may never have made) loses its object too.
pub(crate) async fn follow_node_deletions(client: kube::Client, store: Arc<Store>, writable: impl Fn() -> bool) {
    // Metadata only: the node objects themselves are large and we need their names.
    let api = kube::Api::<PartialObjectMeta<Node>>::all(client);
    loop {
        let was_writable = writable();
        let mut listed: HashSet<String> = HashSet::new();
        let mut events = std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff());
        let mut promotion = tokio::time::interval(PROMOTION_CHECK);
        loop {
            let event = tokio::select! {
                event = events.next() => match event {
                    Some(event) => event,
                    None => return,
                },
                _ = promotion.tick() => {
                    if !was_writable && writable() {
                        tracing::info!("leading now: listing Nodes again to remove the objects of Nodes that are gone");
                        break;
                    }
                    continue;
                }
            };
            let name = |node: PartialObjectMeta<Node>| node.metadata.name.unwrap_or_default();
            let event = match event {
                Ok(Event::Apply(node)) => Event::Apply(name(node)),
                Ok(Event::Delete(node)) => Event::Delete(name(node)),
                Ok(Event::Init) => Event::Init,
                Ok(Event::InitApply(node)) => Event::InitApply(name(node)),
                Ok(Event::InitDone) => Event::InitDone,
                Err(error) => {
                    tracing::warn!("watching Nodes: {error}");
                    continue;
                }
            };
            // A follower only counts Nodes: the leader removes objects, and that reaches it
            // replicated.
            if writable() || matches!(event, Event::Init | Event::InitApply(_)) {
                apply(&store, &mut listed, event);
            }
        }
    }
}

/// Applies one watcher event, given as node names.
pub fn apply(store: &Store, listed: &mut HashSet<String>, event: Event<String>) {
    match event {
        Event::Delete(name) => remove(store, &name),
        Event::Init => listed.clear(),
        Event::InitApply(name) => {
            listed.insert(name);
        }
        Event::InitDone => {
            for stored in store.snapshot().items {
                if !listed.contains(stored.name()) {
                    remove(store, stored.name());
                }
            }
        }
        Event::Apply(_) => {}
    }
}

fn remove(store: &Store, name: &str) {
    match store.delete(name, &Preconditions::default(), false) {
        Ok(_) => tracing::info!(node = %name, "the Node is gone; removed its NodeResourceTopology"),
        Err(StoreError::NotFound) => {}
        Err(error) => tracing::warn!(node = %name, "removing the topology of a deleted Node: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use numaresources_api::nrt::NodeResourceTopology;

    use super::*;

    #[test]
    fn deleted_and_unlisted_nodes_lose_their_topology() {
        let store = Store::starting_at(0, 10);
        for name in ["a", "b", "c"] {
            store.create(NodeResourceTopology::new(name), false).unwrap();
        }
        let mut listed = HashSet::new();
        apply(&store, &mut listed, Event::Delete("a".into()));
        assert!(store.get("a").is_none());
        apply(&store, &mut listed, Event::Init);
        apply(&store, &mut listed, Event::InitApply("b".into()));
        apply(&store, &mut listed, Event::Apply("b".into()));
        assert!(store.get("c").is_some(), "nothing is removed before the list is complete");
        apply(&store, &mut listed, Event::InitDone);
        assert!(store.get("b").is_some());
        assert!(store.get("c").is_none());
        apply(&store, &mut listed, Event::Delete("missing".into()));
    }

    /// A Node's metadata as kube-apiserver serves it to a metadata-only client.
    fn node_meta(name: &str, version: u64) -> serde_json::Value {
        serde_json::json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                           "metadata": {"name": name, "resourceVersion": version.to_string()}})
    }

    /// A kube-apiserver serving Nodes `a` and `b`, then (on the first watch) the deletion of `b`;
    /// every later list shows `a` alone. Returns the client and the number of lists served.
    fn nodes_api() -> (kube::Client, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let lists = Arc::new(AtomicUsize::new(0));
        let served = lists.clone();
        tokio::spawn(async move {
            let mut parked = Vec::new(); // later watches stay open, as idle watches do
            let mut watches = 0;
            while let Some((request, respond)) = handle.next_request().await {
                assert_eq!(request.uri().path(), "/api/v1/nodes");
                let body = if request.uri().query().unwrap_or_default().contains("watch=true") {
                    watches += 1;
                    if watches > 1 {
                        parked.push(respond);
                        continue;
                    }
                    format!("{}\n", serde_json::json!({"type": "DELETED", "object": node_meta("b", 3)}))
                } else {
                    let items = if served.fetch_add(1, Ordering::SeqCst) == 0 {
                        vec![node_meta("a", 1), node_meta("b", 2)]
                    } else {
                        vec![node_meta("a", 1)]
                    };
                    serde_json::json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                                       "metadata": {"resourceVersion": "2"}, "items": items})
                    .to_string()
                };
                let response = http::Response::builder().status(200).body(kube::client::Body::from(body.into_bytes()));
                respond.send_response(response.unwrap());
            }
        });
        (kube::Client::new(service, "default"), lists)
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_that_becomes_leader_removes_the_objects_of_nodes_deleted_meanwhile() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let store = Arc::new(Store::starting_at(0, 10));
        for name in ["a", "b"] {
            store.create(NodeResourceTopology::new(name), false).unwrap();
        }
        let (client, lists) = nodes_api();
        let leading = Arc::new(AtomicBool::new(false));
        let task = {
            let (store, leading) = (store.clone(), leading.clone());
            tokio::spawn(follow_node_deletions(client, store, move || leading.load(Ordering::SeqCst)))
        };
        // As a follower, the deletion of `b` is seen and left to the leader.
        tokio::time::sleep(PROMOTION_CHECK * 3).await;
        assert!(store.get("b").is_some(), "a follower removes nothing");
        assert_eq!(lists.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Promoted: it lists again and removes what the old leader may never have removed.
        leading.store(true, Ordering::SeqCst);
        tokio::time::sleep(PROMOTION_CHECK * 3).await;
        assert_eq!(lists.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(store.get("b").is_none());
        assert!(store.get("a").is_some());
        task.abort();
    }
}
