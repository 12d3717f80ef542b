//! Which pods on this node are terminal (phase `Succeeded` or `Failed`), from a watch on Pods,
//! for `--exclude-terminal-pods` (docs/exporter-accounting.md). The kubelet's `List` may still report such
//! pods (kubernetes/kubernetes#119423); their resources are free again and the scheduler no
//! longer counts them, so the accounting and the fingerprint leave them out.
//!
//! The watch asks the API server for this node's pods that are neither `Pending` nor `Running`
//! (field selectors AND their terms, so upstream's `status.phase==Failed,status.phase==Succeeded`
//! can match nothing; two `!=` terms can), and keeps `Succeeded`/`Failed` client-side, which
//! drops `Unknown`.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::podresources::middleware::PodKey;

/// The RBAC rule the watch needs.
pub(crate) const PODS_RBAC: &str = "pods (cluster-wide, filtered to this node by field selector): list, watch";

/// The field selector for this node's pods that may be terminal.
pub(crate) fn field_selector(node: &str) -> String {
    format!("spec.nodeName={node},status.phase!=Pending,status.phase!=Running")
}

/// The pod's key if it is terminal and on `node`. Pure.
pub(crate) fn terminal_key(pod: &Pod, node: &str) -> Option<PodKey> {
    let on_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let terminal = matches!(phase, Some("Succeeded" | "Failed"));
    let namespace = pod.metadata.namespace.as_deref()?;
    let name = pod.metadata.name.as_deref()?;
    (on_node && terminal).then(|| PodKey::new(namespace, name))
}

/// The set the watch maintains: applies watcher events, buffering a relist until it is complete.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TerminalSet {
    /// The terminal pods as last known.
    pub pods: HashSet<PodKey>,
    relist: Option<HashSet<PodKey>>,
}

impl TerminalSet {
    /// Applies one event for `node`. Pure.
    pub fn apply(&mut self, event: Event<Pod>, node: &str) {
        match event {
            Event::Apply(pod) => match terminal_key(&pod, node) {
                Some(key) => drop(self.pods.insert(key)),
                // A pod that left the terminal phases (or the node) cannot be terminal any more.
                None => self.remove(&pod),
            },
            Event::Delete(pod) => self.remove(&pod),
            Event::Init => self.relist = Some(HashSet::new()),
            Event::InitApply(pod) => {
                if let (Some(relist), Some(key)) = (self.relist.as_mut(), terminal_key(&pod, node)) {
                    relist.insert(key);
                }
            }
            Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    self.pods = relist;
                }
            }
        }
    }

    fn remove(&mut self, pod: &Pod) {
        if let (Some(namespace), Some(name)) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref()) {
            self.pods.remove(&PodKey::new(namespace, name));
        }
    }
}

/// The terminal pods, shared between the watch and the agent.
#[derive(Debug, Clone, Default)]
pub struct TerminalPods(Arc<RwLock<TerminalSet>>);

impl TerminalPods {
    /// Reads the current set.
    pub fn read(&self) -> RwLockReadGuard<'_, TerminalSet> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies one watcher event.
    pub fn apply(&self, event: Event<Pod>, node: &str) {
        self.0.write().unwrap_or_else(PoisonError::into_inner).apply(event, node);
    }

    /// Watches `node`'s pods through `client` and keeps the set current; runs until dropped.
    /// Errors are logged and the watch is retried with backoff.
    pub async fn watch(self, client: kube::Client, node: String) {
        let pods: kube::Api<Pod> = kube::Api::all(client);
        let config = watcher::Config::default().fields(&field_selector(&node));
        let mut events = std::pin::pin!(watcher::watcher(pods, config).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.apply(event, &node),
                Err(error) => tracing::warn!(%error, rbac = PODS_RBAC, "terminal pods watch failed; retrying"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use kube::api::ObjectMeta;

    use super::*;

    fn pod(name: &str, node: &str, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta { namespace: Some("batch".into()), name: Some(name.into()), ..ObjectMeta::default() },
            spec: Some(PodSpec { node_name: Some(node.into()), ..PodSpec::default() }),
            status: Some(PodStatus { phase: Some(phase.into()), ..PodStatus::default() }),
        }
    }

    fn names(set: &TerminalSet) -> Vec<&str> {
        let mut names: Vec<&str> = set.pods.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn only_succeeded_and_failed_pods_of_this_node_are_terminal() {
        let cases = [
            (pod("a", "worker-0", "Succeeded"), true),
            (pod("b", "worker-0", "Failed"), true),
            (pod("c", "worker-0", "Running"), false),
            (pod("d", "worker-0", "Pending"), false),
            (pod("e", "worker-0", "Unknown"), false),
            (pod("f", "worker-1", "Succeeded"), false),
        ];
        for (pod, want) in cases {
            let name = pod.metadata.name.clone().unwrap();
            assert_eq!(terminal_key(&pod, "worker-0").is_some(), want, "{name}");
        }
        assert_eq!(field_selector("worker-0"), "spec.nodeName=worker-0,status.phase!=Pending,status.phase!=Running");
    }

    #[test]
    fn events_add_remove_and_a_relist_replaces_the_set_once_complete() {
        let mut set = TerminalSet::default();
        let node = "worker-0";
        set.apply(Event::Apply(pod("job-1", node, "Succeeded")), node);
        set.apply(Event::Apply(pod("job-2", node, "Failed")), node);
        set.apply(Event::Apply(pod("job-3", node, "Running")), node);
        assert_eq!(names(&set), ["job-1", "job-2"]);
        set.apply(Event::Delete(pod("job-1", node, "Succeeded")), node);
        assert_eq!(names(&set), ["job-2"]);
        // A relist: the old set stays until it is complete, then is replaced whole.
        set.apply(Event::Init, node);
        set.apply(Event::InitApply(pod("job-4", node, "Failed")), node);
        set.apply(Event::InitApply(pod("job-5", node, "Unknown")), node);
        assert_eq!(names(&set), ["job-2"]);
        set.apply(Event::InitDone, node);
        assert_eq!(names(&set), ["job-4"]);
        // A pod recreated under the same name and running again is no longer terminal.
        set.apply(Event::Apply(pod("job-4", node, "Pending")), node);
        assert!(set.pods.is_empty());
    }
}
