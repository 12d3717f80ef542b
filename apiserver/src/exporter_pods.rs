//! The exporter pods, as one watch keeps them: which node each runs on and its UID.
//!
//! The node restriction needs them to tell which node a pod-bound token belongs to on clusters
//! whose TokenReview does not name the node (before 1.30, or without the pod-node token
//! feature): the token names its pod (`pod-name`, `pod-uid`), the pod names its node. Only what
//! that needs is kept per pod (a few short strings), so 5,000 exporters cost a few hundred KiB,
//! not the megabytes their whole Pod objects would.

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};

/// What the node restriction and the warm-up need of one exporter pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExporterPod {
    /// `metadata.uid`: a token bound to an older pod of the same name is not this pod's.
    pub uid: String,
    /// `spec.nodeName`, once scheduled.
    pub node: Option<String>,
    /// `status.phase` is Running and the pod is not being deleted.
    pub running: bool,
    /// It mounts a projected token of our audience: it writes to us directly (through the
    /// write Service, which reaches replicas that are not Ready), not only through
    /// kube-apiserver (which cannot reach a replica until one is Ready).
    pub writes_directly: bool,
}

impl ExporterPod {
    fn of(pod: &Pod) -> Option<(String, Self)> {
        let name = pod.metadata.name.clone()?;
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            && pod.metadata.deletion_timestamp.is_none();
        let exporter = Self {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            running,
            writes_directly: mounts_our_token(pod),
        };
        Some((name, exporter))
    }
}

/// Whether `pod` mounts a projected ServiceAccount token of our audience, as the controllers
/// render every exporter that writes to us directly.
fn mounts_our_token(pod: &Pod) -> bool {
    let volumes = pod.spec.iter().flat_map(|spec| spec.volumes.iter().flatten());
    let sources = volumes.filter_map(|volume| volume.projected.as_ref()).flat_map(|p| p.sources.iter().flatten());
    sources
        .filter_map(|source| source.service_account_token.as_ref())
        .any(|token| token.audience.as_deref() == Some(numaresources_api::direct_write::TOKEN_AUDIENCE))
}

/// What the cache knows about one pod name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The first list has not completed: nothing can be said yet.
    NotSynced,
    /// No exporter pod of that name exists (never did, or was deleted).
    Missing,
    /// The pod.
    Found(ExporterPod),
}

/// The exporter pods of one namespace, kept current by a watch ([`ExporterPods::follow`]).
#[derive(Debug)]
pub struct ExporterPods {
    namespace: String,
    pods: RwLock<HashMap<String, ExporterPod>>,
    /// The pods listed so far during a (re)list, swapped in whole at its end so a relist never
    /// shows a half-filled map.
    relisting: RwLock<HashMap<String, ExporterPod>>,
    synced: AtomicBool,
}

impl ExporterPods {
    /// An empty, not yet synced cache of the pods of `namespace`.
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            pods: RwLock::default(),
            relisting: RwLock::default(),
            synced: AtomicBool::new(false),
        }
    }

    /// The namespace the exporters run in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether the first list has completed.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The pod named `name`.
    pub fn lookup(&self, name: &str) -> Lookup {
        if !self.synced() {
            return Lookup::NotSynced;
        }
        match read(&self.pods).get(name) {
            Some(pod) => Lookup::Found(pod.clone()),
            None => Lookup::Missing,
        }
    }

    /// The nodes that run a Running exporter pod, each with whether that exporter writes to us
    /// directly (`None` before the first list).
    pub(crate) fn running_nodes(&self) -> Option<BTreeMap<String, bool>> {
        self.synced().then(|| {
            let pods = read(&self.pods);
            let running = pods.values().filter(|p| p.running);
            running.filter_map(|p| Some((p.node.clone()?, p.writes_directly))).collect()
        })
    }

    /// Watches the pods `selector` matches and applies every event, for ever (the watcher
    /// backs off and relists on errors; the last known pods stay meanwhile).
    pub async fn follow(&self, client: kube::Client, selector: &str) {
        use futures_util::StreamExt;
        use kube::runtime::WatchStreamExt;
        let api: Api<Pod> = Api::namespaced(client, &self.namespace);
        let config = watcher::Config::default().labels(selector);
        let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.apply(event),
                Err(error) => {
                    tracing::warn!(%error, namespace = %self.namespace, "watching the exporter pods; retrying")
                }
            }
        }
    }

    /// Applies one watch event.
    pub fn apply(&self, event: Event<Pod>) {
        match event {
            Event::Init => write(&self.relisting).clear(),
            Event::InitApply(pod) => {
                if let Some((name, exporter)) = ExporterPod::of(&pod) {
                    write(&self.relisting).insert(name, exporter);
                }
            }
            Event::InitDone => {
                let listed = std::mem::take(&mut *write(&self.relisting));
                tracing::debug!(pods = listed.len(), namespace = %self.namespace, "exporter pods listed");
                *write(&self.pods) = listed;
                self.synced.store(true, Ordering::Release);
            }
            Event::Apply(pod) => {
                if let Some((name, exporter)) = ExporterPod::of(&pod) {
                    write(&self.pods).insert(name, exporter);
                }
            }
            Event::Delete(pod) => {
                if let Some(name) = &pod.metadata.name {
                    write(&self.pods).remove(name);
                }
            }
        }
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str, node: &str, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": uid},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn nothing_is_known_before_the_first_list_completes() {
        let pods = ExporterPods::new("numaresources");
        pods.apply(Event::Init);
        pods.apply(Event::InitApply(pod("rte-a", "u-a", "a", "Running")));
        assert_eq!(pods.lookup("rte-a"), Lookup::NotSynced);
        assert_eq!(pods.running_nodes(), None);
        pods.apply(Event::InitDone);
        assert_eq!(
            pods.lookup("rte-a"),
            Lookup::Found(ExporterPod {
                uid: "u-a".into(),
                node: Some("a".into()),
                running: true,
                writes_directly: false
            })
        );
    }

    #[test]
    fn deleted_pods_are_forgotten_and_a_relist_replaces_everything() {
        let pods = ExporterPods::new("numaresources");
        for event in [Event::Init, Event::InitApply(pod("rte-a", "u-a", "a", "Running")), Event::InitDone] {
            pods.apply(event);
        }
        pods.apply(Event::Apply(pod("rte-b", "u-b", "b", "Pending")));
        assert_eq!(pods.running_nodes(), Some(BTreeMap::from([("a".to_owned(), false)])));
        pods.apply(Event::Delete(pod("rte-a", "u-a", "a", "Running")));
        assert_eq!(pods.lookup("rte-a"), Lookup::Missing);

        // A relist (after a lost watch) that no longer holds rte-b: gone once the list is done,
        // and still there while it runs.
        pods.apply(Event::Init);
        pods.apply(Event::InitApply(pod("rte-c", "u-c", "c", "Running")));
        assert!(matches!(pods.lookup("rte-b"), Lookup::Found(_)));
        pods.apply(Event::InitDone);
        assert_eq!(pods.lookup("rte-b"), Lookup::Missing);
        assert!(matches!(pods.lookup("rte-c"), Lookup::Found(_)));
    }

    #[test]
    fn an_exporter_with_a_projected_token_of_our_audience_writes_directly() {
        let mut direct = pod("rte-a", "u-a", "a", "Running");
        let volume = |audience: &str| {
            serde_json::from_value(serde_json::json!({"name": "nrt-server", "projected": {"sources": [
                {"configMap": {"name": "ca"}},
                {"serviceAccountToken": {"audience": audience, "path": "token"}},
            ]}}))
            .unwrap()
        };
        direct.spec.as_mut().unwrap().volumes = Some(vec![volume(numaresources_api::direct_write::TOKEN_AUDIENCE)]);
        let mut other = pod("rte-b", "u-b", "b", "Running");
        other.spec.as_mut().unwrap().volumes = Some(vec![volume("vault")]);
        let pods = ExporterPods::new("numaresources");
        for event in [Event::Init, Event::InitApply(direct), Event::InitApply(other), Event::InitDone] {
            pods.apply(event);
        }
        assert_eq!(pods.running_nodes(), Some(BTreeMap::from([("a".to_owned(), true), ("b".to_owned(), false)])));
    }
}
