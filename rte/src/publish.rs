//! Writing the node's NodeResourceTopology to the API server.
//!
//! The first publish reads the object (404: create it). Later ones send a JSON merge patch of
//! what the agent owns: `zones`, `attributes` and two annotations (the last trigger and the
//! legacy fingerprint). Nothing else in the metadata is touched, so labels or annotations other
//! tools put there survive. When a patch fails for a reason other than the API server being
//! unreachable, the publisher falls back to read-modify-write (GET, then PUT with the fresh
//! resourceVersion), which is also where the Node owner reference is (re)applied. A patch
//! answered 404 (the object was deleted, or the API server lost it) creates the object again at
//! once, in the same publish.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams, PostParams};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::{ANNOTATION_FINGERPRINT, ANNOTATION_RTE_UPDATE};
use serde_json::{Map, Value, json};

/// The annotations the agent owns on its object; every other one belongs to someone else.
pub(crate) const OWNED_ANNOTATIONS: &[&str] = &[ANNOTATION_RTE_UPDATE, ANNOTATION_FINGERPRINT];

/// The field manager name sent with writes.
pub(crate) const FIELD_MANAGER: &str = "numaresources-rte";

/// The RBAC rule the agent needs on its objects.
pub const NRT_RBAC: &str = "noderesourcetopologies.topology.node.k8s.io (cluster-scoped): get, create, update, patch";
/// The RBAC rule the agent needs on Nodes for the owner reference.
pub(crate) const NODE_RBAC: &str = "nodes: get";

/// What a publish did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The object did not exist and was created.
    Created,
    /// The object was merge-patched.
    Patched,
    /// The object was read and replaced (after a failed patch).
    Replaced,
    /// Nothing was written (`--no-publish`).
    DryRun,
}

/// Why a publish failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The request did not get an answer from the API server.
    #[error("cannot reach the API server to {verb} {what}: {source}")]
    Unreachable {
        /// The verb (`get`, `create`, …).
        verb: &'static str,
        /// The object, e.g. `noderesourcetopologies/worker-0`.
        what: String,
        /// What the client said.
        #[source]
        source: kube::Error,
    },
    /// The agent's identity may not do this.
    #[error(
        "forbidden to {verb} {what}: the agent's ServiceAccount needs RBAC on {rbac}; the API server said: {message}"
    )]
    Forbidden {
        /// The verb.
        verb: &'static str,
        /// The object.
        what: String,
        /// The rule that grants it.
        rbac: &'static str,
        /// The API server's message.
        message: String,
    },
    /// The API server rejected the object.
    #[error("the API server rejected {what} as invalid: {message}")]
    Invalid {
        /// The object.
        what: String,
        /// The API server's message.
        message: String,
    },
    /// The Node this agent runs for does not exist (needed for the owner reference).
    #[error(
        "node {0:?} not found: cannot set it as the owner of its NodeResourceTopology (or run with --add-nrt-owner=false)"
    )]
    NodeNotFound(String),
    /// Neither path takes the publish now: our API server directly failed, and the path
    /// through kube-apiserver failed recently and is not tried again yet (a cold start of our
    /// server: kube-apiserver cannot reach it either until a replica is Ready).
    #[error(
        "cannot publish to the NRT API server directly ({direct}), nor for now through kube-apiserver ({fallback})"
    )]
    NoPath {
        /// Why the direct path failed.
        direct: String,
        /// Why kube-apiserver's path last failed.
        fallback: String,
    },
    /// Another failure status.
    #[error("{verb} {what} failed: {code} {reason}: {message}")]
    Api {
        /// The verb.
        verb: &'static str,
        /// The object.
        what: String,
        /// The HTTP status code.
        code: u16,
        /// The Status reason.
        reason: String,
        /// The API server's message.
        message: String,
    },
}

impl PublishError {
    fn from_kube(verb: &'static str, what: String, rbac: &'static str, error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) if status.is_forbidden() => {
                Self::Forbidden { verb, what, rbac, message: status.message.clone() }
            }
            kube::Error::Api(status) if status.is_invalid() => Self::Invalid { what, message: status.message.clone() },
            kube::Error::Api(status) => Self::Api {
                verb,
                what,
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            },
            source => Self::Unreachable { verb, what, source },
        }
    }

    /// True when the API server could not be reached (retrying with another verb is pointless).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }

    /// True when the API server answered that it cannot serve the request now (429, or a 502,
    /// 503 or 504: overloaded, unavailable, an election under way): another verb against it
    /// would fare no better, while another path to the object might.
    pub(crate) fn is_unavailable(&self) -> bool {
        matches!(self, Self::Api { code: 429 | 502 | 503 | 504, .. })
    }

    /// True when the API server answered 404 Not Found.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, Self::Api { code: 404, .. })
    }
}

/// Something that makes the API server hold `desired`.
pub trait Publisher {
    /// Publishes the node's topology.
    fn publish(&self, desired: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send;
}

/// The merge patch (RFC 7386) that makes an object carry `desired`'s zones, attributes and owned
/// annotations; an owned annotation `desired` lacks is removed (`null`). Lists are replaced
/// whole, so `attributes` is always sent, empty or not.
pub fn merge_patch(desired: &NodeResourceTopology) -> Value {
    let annotations = desired.metadata.annotations.as_ref();
    let owned: Map<String, Value> = OWNED_ANNOTATIONS
        .iter()
        .map(|key| {
            let value = annotations.and_then(|a| a.get(*key)).map_or(Value::Null, |v| Value::String(v.clone()));
            ((*key).to_owned(), value)
        })
        .collect();
    json!({
        "metadata": { "annotations": owned },
        "zones": desired.zones,
        "attributes": desired.attributes,
    })
}

/// `current` with `desired`'s zones, attributes and owned annotations, and the owner reference
/// if given; everything else (labels, others' annotations, resourceVersion) kept.
pub(crate) fn apply_desired(
    mut current: NodeResourceTopology,
    desired: &NodeResourceTopology,
    owner: Option<&OwnerReference>,
) -> NodeResourceTopology {
    current.zones.clone_from(&desired.zones);
    current.attributes.clone_from(&desired.attributes);
    let wanted = desired.metadata.annotations.as_ref();
    let annotations = current.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for key in OWNED_ANNOTATIONS {
        match wanted.and_then(|a| a.get(*key)) {
            Some(value) => annotations.insert((*key).to_owned(), value.clone()),
            None => annotations.remove(*key),
        };
    }
    if annotations.is_empty() {
        current.metadata.annotations = None;
    }
    if let Some(owner) = owner {
        set_owner(&mut current, owner);
    }
    current
}

/// Puts `owner` among the owner references, replacing a Node reference of the same name (a
/// node recreated under the same name has a new uid).
fn set_owner(nrt: &mut NodeResourceTopology, owner: &OwnerReference) {
    let refs = nrt.metadata.owner_references.get_or_insert_with(Vec::new);
    refs.retain(|r| !(r.kind == owner.kind && r.api_version == owner.api_version && r.name == owner.name));
    refs.push(owner.clone());
}

/// The owner reference to a Node.
pub(crate) fn node_owner(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.into(),
        uid: uid.into(),
        ..OwnerReference::default()
    }
}

/// Publishes through the Kubernetes API.
#[derive(Debug, Clone)]
pub struct KubePublisher {
    nrts: kube::Api<NodeResourceTopology>,
    nodes: kube::Api<Node>,
    add_owner: bool,
    /// Set once the object is known to exist, so later publishes go straight to a patch.
    exists: std::sync::Arc<AtomicBool>,
    /// Never GET before the patch ([`Self::patch_first`]).
    patch_first: bool,
}

impl KubePublisher {
    /// A publisher writing through `client`; `add_owner` makes the Node own the object.
    pub fn new(client: kube::Client, add_owner: bool) -> Self {
        Self::with_node_client(client.clone(), client, add_owner)
    }

    /// A publisher writing through `nrts` and reading the Node for the owner reference through
    /// `nodes` (our API server, written to directly, serves no Nodes).
    pub(crate) fn with_node_client(nrts: kube::Client, nodes: kube::Client, add_owner: bool) -> Self {
        Self {
            nrts: kube::Api::all(nrts),
            nodes: kube::Api::all(nodes),
            add_owner,
            exists: std::sync::Arc::default(),
            patch_first: false,
        }
    }

    /// Starts with a merge patch instead of a GET (a 404 creates the object, in the same
    /// publish). For our API server written to directly: a replica still warming up answers reads
    /// 503 but takes writes, which are what warm it.
    #[must_use]
    pub fn patch_first(mut self) -> Self {
        self.patch_first = true;
        self
    }

    fn what(name: &str) -> String {
        format!("noderesourcetopologies/{name}")
    }

    async fn owner(&self, node: &str) -> Result<Option<OwnerReference>, PublishError> {
        if !self.add_owner {
            return Ok(None);
        }
        let found = self
            .nodes
            .get_opt(node)
            .await
            .map_err(|e| PublishError::from_kube("get", format!("nodes/{node}"), NODE_RBAC, e))?;
        let node_object = found.ok_or_else(|| PublishError::NodeNotFound(node.to_owned()))?;
        let uid = node_object.metadata.uid.unwrap_or_default();
        Ok(Some(node_owner(node, &uid)))
    }

    async fn get(&self, name: &str) -> Result<Option<NodeResourceTopology>, PublishError> {
        self.nrts.get_opt(name).await.map_err(|e| PublishError::from_kube("get", Self::what(name), NRT_RBAC, e))
    }

    async fn create(&self, desired: &NodeResourceTopology) -> Result<Outcome, PublishError> {
        let name = desired.metadata.name.clone().unwrap_or_default();
        let owner = self.owner(&name).await?;
        let mut object = apply_desired(NodeResourceTopology::new(&name), desired, owner.as_ref());
        object.metadata.resource_version = None;
        let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
        self.nrts
            .create(&params, &object)
            .await
            .map_err(|e| PublishError::from_kube("create", Self::what(&name), NRT_RBAC, e))?;
        self.exists.store(true, Ordering::Relaxed);
        Ok(Outcome::Created)
    }

    async fn patch(&self, desired: &NodeResourceTopology) -> Result<(), PublishError> {
        let name = desired.metadata.name.as_deref().unwrap_or_default();
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        self.nrts
            .patch(name, &params, &Patch::Merge(merge_patch(desired)))
            .await
            .map(drop)
            .map_err(|e| PublishError::from_kube("patch", Self::what(name), NRT_RBAC, e))
    }

    async fn replace(&self, desired: &NodeResourceTopology) -> Result<Outcome, PublishError> {
        let name = desired.metadata.name.clone().unwrap_or_default();
        let Some(current) = self.get(&name).await? else {
            return self.create(desired).await;
        };
        let owner = self.owner(&name).await?;
        let object = apply_desired(current, desired, owner.as_ref());
        let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
        self.nrts
            .replace(&name, &params, &object)
            .await
            .map_err(|e| PublishError::from_kube("update", Self::what(&name), NRT_RBAC, e))?;
        Ok(Outcome::Replaced)
    }

    async fn publish_inner(&self, desired: NodeResourceTopology) -> Result<Outcome, PublishError> {
        let name = desired.metadata.name.clone().unwrap_or_default();
        if !self.patch_first && !self.exists.load(Ordering::Relaxed) {
            if self.get(&name).await?.is_none() {
                return self.create(&desired).await;
            }
            self.exists.store(true, Ordering::Relaxed);
        }
        match self.patch(&desired).await {
            Ok(()) => Ok(Outcome::Patched),
            Err(error) if error.is_unreachable() || error.is_unavailable() => Err(error),
            // The object is gone (deleted, or the API server lost its store): create it in
            // this same publish rather than at the next heartbeat.
            Err(error) if error.is_not_found() => {
                if self.exists.swap(false, Ordering::Relaxed) {
                    tracing::info!(node = %name, "the object is gone; creating it again");
                } else {
                    tracing::debug!(node = %name, "no object yet; creating it");
                }
                self.create(&desired).await
            }
            Err(error) => {
                tracing::info!(%error, node = %name, "merge patch failed; falling back to get and update");
                self.replace(&desired).await
            }
        }
    }
}

impl Publisher for KubePublisher {
    fn publish(&self, desired: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send {
        self.publish_inner(desired)
    }
}

#[cfg(test)]
mod tests {
    use numaresources_api::nrt::{AttributeInfo, Zone};

    use super::*;

    fn desired(annotations: &[(&str, &str)]) -> NodeResourceTopology {
        let mut nrt = NodeResourceTopology::new("worker-0");
        nrt.zones = vec![Zone { name: "node-0".into(), zone_type: "Node".into(), ..Zone::default() }];
        nrt.attributes = vec![AttributeInfo::new("topologyManagerPolicy", "none")];
        if !annotations.is_empty() {
            nrt.metadata.annotations =
                Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        }
        nrt
    }

    #[test]
    fn the_merge_patch_carries_zones_attributes_and_only_owned_annotations() {
        let nrt = desired(&[
            ("k8stopoawareschedwg/rte-update", "periodic"),
            ("topology.node.k8s.io/fingerprint", "pfp0v001ef46db3751d8e999"),
            ("someone.else/annotation", "x"),
        ]);
        assert_eq!(
            merge_patch(&nrt),
            json!({
                "metadata": {"annotations": {
                    "k8stopoawareschedwg/rte-update": "periodic",
                    "topology.node.k8s.io/fingerprint": "pfp0v001ef46db3751d8e999",
                }},
                "zones": [{"name": "node-0", "type": "Node"}],
                "attributes": [{"name": "topologyManagerPolicy", "value": "none"}],
            })
        );
    }

    #[test]
    fn a_fingerprint_no_longer_computed_is_removed_and_empty_attributes_are_sent() {
        let mut nrt = desired(&[("k8stopoawareschedwg/rte-update", "reactive")]);
        nrt.attributes.clear();
        let patch = merge_patch(&nrt);
        assert_eq!(patch["metadata"]["annotations"]["topology.node.k8s.io/fingerprint"], Value::Null);
        assert_eq!(patch["attributes"], json!([]));
    }

    #[test]
    fn replacing_keeps_others_metadata_and_refreshes_a_stale_node_owner() {
        let mut current = desired(&[("someone.else/annotation", "x"), ("topology.node.k8s.io/fingerprint", "old")]);
        current.zones.clear();
        current.metadata.resource_version = Some("42".into());
        current.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        current.metadata.owner_references = Some(vec![
            node_owner("worker-0", "stale-uid"),
            OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: "rte".into(),
                uid: "d".into(),
                ..OwnerReference::default()
            },
        ]);
        let want = desired(&[("k8stopoawareschedwg/rte-update", "periodic")]);
        let owner = node_owner("worker-0", "fresh-uid");
        let merged = apply_desired(current, &want, Some(&owner));
        assert_eq!(merged.zones, want.zones);
        assert_eq!(merged.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(merged.metadata.labels.unwrap()["team"], "a");
        let annotations = merged.metadata.annotations.unwrap();
        assert_eq!(
            annotations.keys().map(String::as_str).collect::<Vec<_>>(),
            ["k8stopoawareschedwg/rte-update", "someone.else/annotation"]
        );
        let owners: Vec<(String, String)> =
            merged.metadata.owner_references.unwrap().into_iter().map(|o| (o.kind, o.uid)).collect();
        assert_eq!(owners, [("DaemonSet".into(), "d".into()), ("Node".into(), "fresh-uid".into())]);
    }
}
