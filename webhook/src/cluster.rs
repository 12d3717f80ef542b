//! What the webhook knows about the cluster, held in kube-runtime reflector stores and never
//! fetched on the request path: the `NUMAResourcesScheduler` (routing policy), Namespace labels
//! (the routing selector) and Node labels (the "selects no node" warning), the last two as
//! metadata only.
//!
//! [`ClusterCache::new`] returns the readers and one [`Feed`] per store. In a cluster,
//! [`follow_cluster`] runs a watcher into each feed; tests apply events (or whole lists) to the
//! feeds themselves. A cache counts as synced once its first list is complete; relists after
//! that swap in atomically and never make it unsynced again.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{DeserializeGuard, PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use numaresources_api::operator::{NUMAResourcesScheduler, SCHEDULER_SINGLETON_NAME};
use numaresources_runtime::admin::{Checks, Flag};

/// A `NUMAResourcesScheduler` as cached: a copy that fails to decode is kept as an error rather
/// than stalling the whole watch.
pub(crate) type CachedScheduler = DeserializeGuard<NUMAResourcesScheduler>;
type NamespaceMeta = PartialObjectMeta<Namespace>;
type NodeMeta = PartialObjectMeta<Node>;

/// The readers: cheap to clone, shared by every request.
#[derive(Clone)]
pub struct ClusterCache {
    schedulers: Store<CachedScheduler>,
    namespaces: Store<NamespaceMeta>,
    nodes: Store<NodeMeta>,
    synced: [Flag; 3],
}

impl fmt::Debug for ClusterCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterCache")
            .field("schedulers", &self.schedulers.len())
            .field("namespaces", &self.namespaces.len())
            .field("nodes", &self.nodes.len())
            .field("synced", &self.synced.each_ref().map(Flag::is_set))
            .finish()
    }
}

/// The writers, one per cache.
#[derive(Debug)]
pub struct Feeds {
    /// The `NUMAResourcesScheduler` (only the singleton name is watched).
    pub(crate) schedulers: Feed<CachedScheduler>,
    /// Namespace metadata.
    pub(crate) namespaces: Feed<NamespaceMeta>,
    /// Node metadata.
    pub(crate) nodes: Feed<NodeMeta>,
}

/// The single writer of one cache.
pub(crate) struct Feed<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<K>,
    synced: Flag,
}

impl<K: Lookup + Clone + 'static> fmt::Debug for Feed<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Feed").field("synced", &self.synced.is_set()).finish_non_exhaustive()
    }
}

impl<K: Lookup + Clone + 'static> Feed<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    fn new() -> (Store<K>, Self) {
        let writer = Writer::default();
        (writer.as_reader(), Self { writer, synced: Flag::default() })
    }

    /// Applies one watcher event; the end of a list (`InitDone`) marks the cache synced.
    pub(crate) fn apply(&mut self, event: &Event<K>) {
        self.writer.apply_watcher_event(event);
        if matches!(event, Event::InitDone) {
            self.synced.set();
        }
    }

    /// Replaces the whole cache with `objects`, as a complete relist does.
    pub(crate) fn replace(&mut self, objects: impl IntoIterator<Item = K>) {
        self.apply(&Event::Init);
        for object in objects {
            self.apply(&Event::InitApply(object));
        }
        self.apply(&Event::InitDone);
    }
}

impl Feeds {
    /// Replaces the cached `NUMAResourcesScheduler` (`None`: there is none).
    pub fn set_scheduler(&mut self, scheduler: Option<NUMAResourcesScheduler>) {
        self.schedulers.replace(scheduler.map(|s| DeserializeGuard(Ok(s))));
    }

    /// Replaces the cached namespaces: names and labels.
    pub fn set_namespaces<'a>(&mut self, namespaces: impl IntoIterator<Item = (&'a str, BTreeMap<String, String>)>) {
        self.namespaces.replace(namespaces.into_iter().map(|(name, labels)| metadata(name, labels)));
    }

    /// Replaces the cached nodes: names and labels.
    pub fn set_nodes<'a>(&mut self, nodes: impl IntoIterator<Item = (&'a str, BTreeMap<String, String>)>) {
        self.nodes.replace(nodes.into_iter().map(|(name, labels)| metadata(name, labels)));
    }
}

fn metadata<K>(name: &str, labels: BTreeMap<String, String>) -> PartialObjectMeta<K> {
    ObjectMeta { name: Some(name.to_owned()), labels: Some(labels), ..ObjectMeta::default() }.into_response_partial()
}

impl ClusterCache {
    /// Empty, unsynced caches and their feeds.
    pub fn new() -> (Self, Feeds) {
        let (schedulers, scheduler_feed) = Feed::new();
        let (namespaces, namespace_feed) = Feed::new();
        let (nodes, node_feed) = Feed::new();
        let synced = [scheduler_feed.synced.clone(), namespace_feed.synced.clone(), node_feed.synced.clone()];
        let feeds = Feeds { schedulers: scheduler_feed, namespaces: namespace_feed, nodes: node_feed };
        (Self { schedulers, namespaces, nodes, synced }, feeds)
    }

    /// True once the caches routing depends on (the scheduler and the namespaces) have completed
    /// their first list. The node cache is not one of them: it only feeds a warning, so a Node
    /// watch that cannot start must not stop pods from being routed.
    pub(crate) fn synced(&self) -> bool {
        let [schedulers, namespaces, _nodes] = &self.synced;
        schedulers.is_set() && namespaces.is_set()
    }

    /// The caches routing depends on, as named readiness checks (for `/readyz`).
    pub(crate) fn readiness(&self) -> Checks {
        let [schedulers, namespaces, _nodes] = &self.synced;
        Checks::new()
            .with_flag("numaresourcesscheduler-cache", schedulers, "the NUMAResourcesScheduler has not been listed yet")
            .with_flag("namespace-cache", namespaces, "the namespaces have not been listed yet")
    }

    /// The `NUMAResourcesScheduler` singleton, unless absent or being deleted (then nothing is
    /// routed any more).
    pub(crate) fn scheduler(&self) -> Option<Arc<CachedScheduler>> {
        let cached = self.schedulers.get(&ObjectRef::new(SCHEDULER_SINGLETON_NAME))?;
        let deleting = match &cached.0 {
            Ok(scheduler) => scheduler.metadata.deletion_timestamp.is_some(),
            Err(invalid) => invalid.metadata.deletion_timestamp.is_some(),
        };
        (!deleting).then_some(cached)
    }

    /// The labels of a namespace, if cached.
    pub(crate) fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        let namespace = self.namespaces.get(&ObjectRef::new(name))?;
        Some(namespace.metadata.labels.clone().unwrap_or_default())
    }

    /// The labels of every cached node, when the node cache is synced.
    pub(crate) fn node_labels(&self) -> Option<Vec<BTreeMap<String, String>>> {
        self.synced[2]
            .is_set()
            .then(|| self.nodes.state().iter().map(|node| node.metadata.labels.clone().unwrap_or_default()).collect())
    }
}

/// Watches the cluster into `feeds` until the process stops: the watchers retry with backoff
/// and log why (a missing CRD or RBAC rule shows up here, and keeps `/readyz` failing).
pub(crate) async fn follow_cluster(client: kube::Client, feeds: Feeds) {
    let Feeds { schedulers, namespaces, nodes } = feeds;
    let by_name = watcher::Config::default().fields(&format!("metadata.name={SCHEDULER_SINGLETON_NAME}"));
    let scheduler_stream = watcher::watcher(kube::Api::<CachedScheduler>::all(client.clone()), by_name);
    // `Api<PartialObjectMeta<K>>` lists and watches metadata only.
    let namespace_stream =
        watcher::watcher(kube::Api::<NamespaceMeta>::all(client.clone()), watcher::Config::default());
    let node_stream = watcher::watcher(kube::Api::<NodeMeta>::all(client), watcher::Config::default());
    tokio::join!(
        follow("NUMAResourcesScheduler", scheduler_stream, schedulers, report_unreadable),
        follow("Namespace", namespace_stream, namespaces, |_| {}),
        follow("Node", node_stream, nodes, |_| {}),
    );
}

async fn follow<K>(
    what: &'static str,
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    mut feed: Feed<K>,
    inspect: impl Fn(&Event<K>),
) where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    let mut events = std::pin::pin!(stream.default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                inspect(&event);
                if matches!(event, Event::InitDone) {
                    tracing::info!(kind = what, "cache synced");
                }
                feed.apply(&event);
            }
            Err(error) => tracing::warn!(kind = what, "watch failed, retrying: {error}"),
        }
    }
}

fn report_unreadable(event: &Event<CachedScheduler>) {
    if let Event::Apply(cached) | Event::InitApply(cached) = event
        && let Err(invalid) = &cached.0
    {
        tracing::warn!(
            name = invalid.metadata.name.as_deref().unwrap_or_default(),
            "the NUMAResourcesScheduler cannot be read, so no pod is routed until it is fixed: {invalid}"
        );
    }
}

#[cfg(test)]
mod tests {
    use numaresources_api::operator::NUMAResourcesSchedulerSpec;

    use super::*;

    #[test]
    fn synced_once_the_routing_caches_are_listed_whatever_the_nodes() {
        let (cache, mut feeds) = ClusterCache::new();
        assert!(!cache.synced());
        feeds.set_scheduler(None);
        assert!(!cache.synced(), "namespaces not listed yet");
        feeds.set_namespaces([("work", BTreeMap::from([("numa".to_owned(), "true".to_owned())]))]);
        assert!(cache.synced(), "routing needs no node");
        assert!(cache.node_labels().is_none(), "nodes not listed yet: no node warning possible");
        feeds.set_nodes([]);
        assert_eq!(cache.node_labels(), Some(vec![]));
        assert!(cache.synced());
        assert_eq!(cache.namespace_labels("work").unwrap()["numa"], "true");
        assert!(cache.namespace_labels("other").is_none());
        // A relist starting does not unsync.
        feeds.nodes.apply(&Event::Init);
        assert!(cache.synced());
    }

    #[test]
    fn the_scheduler_singleton_unless_it_is_being_deleted() {
        let (cache, mut feeds) = ClusterCache::new();
        feeds.set_scheduler(Some(NUMAResourcesScheduler::new("something-else", NUMAResourcesSchedulerSpec::default())));
        assert!(cache.scheduler().is_none(), "only the singleton name counts");
        let mut scheduler =
            NUMAResourcesScheduler::new(SCHEDULER_SINGLETON_NAME, NUMAResourcesSchedulerSpec::default());
        feeds.set_scheduler(Some(scheduler.clone()));
        assert!(cache.scheduler().is_some_and(|s| s.0.is_ok()));
        scheduler.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        feeds.set_scheduler(Some(scheduler));
        assert!(cache.scheduler().is_none());
    }
}
