//! The node restriction: an exporter may write only its own node's NodeResourceTopology.
//!
//! Which identities it binds is decided here, the same way on every cluster version and on both
//! paths (a token presented to us directly, or the aggregator's request headers, which carry the
//! same extras):
//!
//! - **Exporters are node-bound**: the exporter's service account (`--exporter-service-account`
//!   in the exporter namespace), and any identity whose token is bound to a pod the exporter pod
//!   cache holds (an exporter deployed under another account).
//! - **Everyone else is not**: people, the controllers, other writers (NFD's topology-updater in
//!   its own namespace) are governed by RBAC alone. Binding every pod-bound token instead would
//!   pin the controllers to the node they happen to run on, and only on clusters whose tokens
//!   name the node.
//!
//! An exporter's node is the TokenReview's `node-name` extra where kube-apiserver sends it,
//! otherwise its pod's (`pod-name`/`pod-uid` extras, looked up in the cache of exporter pods;
//! the UID must match, so a token of a deleted and re-created pod is refused). A token whose
//! pod is gone is refused even with a `node-name` extra: reviews are cached for a while, and the
//! cache learns of a deletion first. An exporter whose node cannot be told may not write.

use std::sync::Arc;

use numaresources_api::direct_write::{EXTRA_NODE_NAME, EXTRA_POD_NAME, EXTRA_POD_UID};

use super::authn::UserInfo;
use crate::exporter_pods::{ExporterPods, Lookup};

/// The exporter's service account the controllers render.
pub(crate) const DEFAULT_EXPORTER_SERVICE_ACCOUNT: &str = "numaresources-rte";
/// The namespace the exporters run in by default.
pub(crate) const DEFAULT_EXPORTER_NAMESPACE: &str = "numaresources";

/// Who is node-bound, and where their pods are looked up.
#[derive(Debug, Clone)]
pub struct NodeRestriction {
    /// The exporter namespace.
    namespace: String,
    /// `system:serviceaccount:<namespace>:<exporter service account>`.
    exporter_user: String,
    /// The exporter pods (None: pod-bound tokens without a `node-name` extra cannot be placed).
    pods: Option<Arc<ExporterPods>>,
}

impl Default for NodeRestriction {
    fn default() -> Self {
        Self::new(DEFAULT_EXPORTER_NAMESPACE, DEFAULT_EXPORTER_SERVICE_ACCOUNT)
    }
}

/// What the restriction makes of an identity that writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// Not an exporter: RBAC alone decides.
    Unbound,
    /// May write only this node's object.
    Node {
        /// The node.
        node: String,
        /// Whether the node was found through the pod (the token did not name it).
        through_pod: bool,
        /// Whether the token's pod is one the exporter-pod cache holds, with the token's uid:
        /// its own node's object is then the exporter's to write without a review per request.
        live_pod: bool,
    },
    /// An exporter that may not write at all, and why.
    Refused(String),
    /// The exporter pods are not listed yet: cannot tell (retry shortly).
    Unknown,
}

impl NodeRestriction {
    /// Binds the service account `service_account` of `namespace`, and the pods the cache holds.
    pub fn new(namespace: &str, service_account: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            exporter_user: format!("system:serviceaccount:{namespace}:{service_account}"),
            pods: None,
        }
    }

    /// Places pod-bound tokens through `pods` (which must watch this restriction's namespace).
    #[must_use]
    pub fn with_pods(mut self, pods: Arc<ExporterPods>) -> Self {
        self.pods = Some(pods);
        self
    }

    /// The binding of `user`.
    pub fn binding(&self, user: &UserInfo) -> Binding {
        let node_extra = first_extra(user, EXTRA_NODE_NAME);
        let bound_pod = first_extra(user, EXTRA_POD_NAME).zip(first_extra(user, EXTRA_POD_UID));
        // A pod-bound service-account token's pod lives in the account's namespace.
        let pod_namespace = user.name.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split(':').next());
        let lookup = match (&self.pods, bound_pod) {
            (Some(pods), Some((name, _))) if pod_namespace == Some(self.namespace.as_str()) => Some(pods.lookup(name)),
            _ => None,
        };
        let exporter = user.name == self.exporter_user || matches!(lookup, Some(Lookup::Found(_)));
        if !exporter {
            // A pod of the exporter namespace the cache cannot place yet may be an exporter.
            return if matches!(lookup, Some(Lookup::NotSynced)) { Binding::Unknown } else { Binding::Unbound };
        }
        let Some((pod_name, pod_uid)) = bound_pod else {
            return match node_extra {
                Some(node) => Binding::Node { node: node.to_owned(), through_pod: false, live_pod: false },
                None => Binding::Refused(
                    "the exporter's token names neither its node nor its pod (present a projected, pod-bound service-account token)"
                        .to_owned(),
                ),
            };
        };
        let pod = || format!("{}/{pod_name}", self.namespace);
        match lookup {
            Some(Lookup::Found(found)) if found.uid != pod_uid => Binding::Refused(format!(
                "the token is bound to pod {} with uid {pod_uid}, which no longer exists (that name is now uid {})",
                pod(),
                found.uid
            )),
            Some(Lookup::Found(found)) => match (found.node, node_extra) {
                (Some(node), Some(named)) if node != named => {
                    Binding::Refused(format!("the token names node {named:?} but its pod {} runs on {node:?}", pod()))
                }
                (Some(node), _) => Binding::Node { node, through_pod: node_extra.is_none(), live_pod: true },
                (None, Some(named)) => Binding::Node { node: named.to_owned(), through_pod: false, live_pod: true },
                (None, None) => Binding::Refused(format!("the token's pod {} is not scheduled to a node yet", pod())),
            },
            Some(Lookup::Missing) => {
                Binding::Refused(format!("the token is bound to pod {}, which no longer exists", pod()))
            }
            // kube-apiserver checked the pod when it reviewed the token; the node it named holds.
            Some(Lookup::NotSynced) | None if node_extra.is_some() => {
                Binding::Node { node: node_extra.unwrap_or_default().to_owned(), through_pod: false, live_pod: false }
            }
            Some(Lookup::NotSynced) => Binding::Unknown,
            None => Binding::Refused(format!(
                "the token names no node and its pod {}/{pod_name} is not one this server follows",
                pod_namespace.unwrap_or("?")
            )),
        }
    }
}

fn first_extra<'a>(user: &'a UserInfo, key: &str) -> Option<&'a str> {
    user.extra.get(key).and_then(|values| values.first()).map(String::as_str).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::Event;

    use super::*;

    const EXPORTER: &str = "system:serviceaccount:numaresources:numaresources-rte";

    fn user(name: &str, extras: &[(&str, &str)]) -> UserInfo {
        UserInfo {
            name: name.to_owned(),
            extra: extras.iter().map(|(k, v)| ((*k).to_owned(), vec![(*v).to_owned()])).collect(),
            ..UserInfo::default()
        }
    }

    fn pods(listed: &[(&str, &str, &str)]) -> Arc<ExporterPods> {
        let pods = Arc::new(ExporterPods::new("numaresources"));
        pods.apply(Event::Init);
        for (name, uid, node) in listed {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "uid": uid}, "spec": {"nodeName": node, "containers": []},
                "status": {"phase": "Running"}}))
            .unwrap();
            pods.apply(Event::InitApply(pod));
        }
        pods.apply(Event::InitDone);
        pods
    }

    fn node(node: &str, through_pod: bool, live_pod: bool) -> Binding {
        Binding::Node { node: node.to_owned(), through_pod, live_pod }
    }

    #[test]
    fn the_node_comes_from_the_token_or_from_the_pod() {
        let restriction = NodeRestriction::default().with_pods(pods(&[("rte-a", "u-a", "worker-a")]));
        let with_node = user(EXPORTER, &[(EXTRA_NODE_NAME, "worker-a")]);
        assert_eq!(restriction.binding(&with_node), node("worker-a", false, false), "no pod to check");
        let with_pod = user(EXPORTER, &[(EXTRA_POD_NAME, "rte-a"), (EXTRA_POD_UID, "u-a")]);
        assert_eq!(restriction.binding(&with_pod), node("worker-a", true, true));
    }

    #[test]
    fn gone_recreated_or_misplaced_pods_are_refused() {
        let restriction = NodeRestriction::default().with_pods(pods(&[("rte-a", "u-a2", "worker-a")]));
        let refused = |extras: &[(&str, &str)]| {
            let binding = restriction.binding(&user(EXPORTER, extras));
            assert!(matches!(binding, Binding::Refused(_)), "{extras:?}: {binding:?}");
        };
        refused(&[(EXTRA_POD_NAME, "rte-a"), (EXTRA_POD_UID, "u-a1")]);
        refused(&[(EXTRA_POD_NAME, "rte-gone"), (EXTRA_POD_UID, "u-g")]);
        refused(&[(EXTRA_POD_NAME, "rte-gone"), (EXTRA_POD_UID, "u-g"), (EXTRA_NODE_NAME, "worker-g")]);
        refused(&[(EXTRA_POD_NAME, "rte-a"), (EXTRA_POD_UID, "u-a2"), (EXTRA_NODE_NAME, "worker-b")]);
        refused(&[]);
    }

    #[test]
    fn only_exporters_are_bound() {
        let restriction = NodeRestriction::default().with_pods(pods(&[("rte-x", "u-x", "worker-x")]));
        // Another account whose token is bound to an exporter pod: an exporter.
        let other_account = user(
            "system:serviceaccount:numaresources:go-rte",
            &[(EXTRA_POD_NAME, "rte-x"), (EXTRA_POD_UID, "u-x"), (EXTRA_NODE_NAME, "worker-x")],
        );
        assert_eq!(restriction.binding(&other_account), node("worker-x", false, true));
        // The controllers' pod token, on a cluster that names nodes: not bound.
        let controllers = user(
            "system:serviceaccount:numaresources:numaresources-controllers",
            &[(EXTRA_POD_NAME, "controllers-0"), (EXTRA_POD_UID, "u-c"), (EXTRA_NODE_NAME, "master-0")],
        );
        assert_eq!(restriction.binding(&controllers), Binding::Unbound);
        // NFD's updater in its own namespace, and a person: not bound.
        let nfd = user("system:serviceaccount:nfd:nfd-topology-updater", &[(EXTRA_NODE_NAME, "worker-x")]);
        assert_eq!(restriction.binding(&nfd), Binding::Unbound);
        assert_eq!(restriction.binding(&user("kubernetes-admin", &[])), Binding::Unbound);
    }

    #[test]
    fn before_the_pods_are_listed_only_a_named_node_places_an_exporter() {
        let restriction = NodeRestriction::default().with_pods(Arc::new(ExporterPods::new("numaresources")));
        let with_pod = user(EXPORTER, &[(EXTRA_POD_NAME, "rte-a"), (EXTRA_POD_UID, "u-a")]);
        assert_eq!(restriction.binding(&with_pod), Binding::Unknown);
        let mut with_both = with_pod.clone();
        with_both.extra.insert(EXTRA_NODE_NAME.to_owned(), vec!["worker-a".to_owned()]);
        assert_eq!(restriction.binding(&with_both), node("worker-a", false, false), "its pod not seen yet");
        let other_pod = user("system:serviceaccount:numaresources:x", &[(EXTRA_POD_NAME, "p"), (EXTRA_POD_UID, "u")]);
        assert_eq!(restriction.binding(&other_pod), Binding::Unknown, "may be an exporter");
    }
}
