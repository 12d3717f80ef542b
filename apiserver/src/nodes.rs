//! Dropping the topology of Nodes that are gone. A live node's object is never deleted for being
//! late (a missing NRT makes the node unconstrained for the scheduler), but a deleted Node's
//! object is garbage: we follow Node deletions with a metadata-only watch, and after every
//! (re)list remove the objects of nodes that no longer exist.

use std::collections::HashSet;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};

use crate::store::{Preconditions, Store, StoreError};

/// Follows Nodes until the stream ends (it does not, short of shutdown: the watcher retries with
/// backoff and logs why). Only while `writable` (a single replica, or the leader) are objects
/// removed; a follower receives the removals replicated.
pub async fn follow_node_deletions(client: kube::Client, store: Arc<Store>, writable: impl Fn() -> bool) {
    // Metadata only: the node objects themselves are large and we need their names.
    let api = kube::Api::<PartialObjectMeta<Node>>::all(client);
    let mut listed: HashSet<String> = HashSet::new();
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
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
        // A follower only counts Nodes: the leader removes objects, and that reaches it replicated.
        if writable() || matches!(event, Event::Init | Event::InitApply(_)) {
            apply(&store, &mut listed, event);
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
}
