//! kube-scheduler's extender protocol, v1 (`k8s.io/kube-scheduler/extender/v1`): what it POSTs to
//! `<urlPrefix>/<verb>` and what it reads back.
//!
//! The Go types carry no JSON tags, so every key is the Go field name (`Pod`, `NodeNames`,
//! `FailedNodes`, ...) and absent values are `null`. kube-scheduler decodes keys without regard
//! to case; we answer with its exact spelling and accept `null` or a missing key anywhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

/// The highest score an extender gives (`MaxExtenderPriority`); kube-scheduler multiplies it by
/// the extender's weight and by 10.
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// The filter and prioritize request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    pub pod: Option<Pod>,
    /// The candidate nodes as objects (only when the extender is not node-cache capable; we
    /// read their names).
    pub nodes: Option<NodeList>,
    /// The candidate nodes by name (`nodeCacheCapable: true`).
    pub node_names: Option<Vec<String>>,
}

/// A `v1.NodeList`, read for its items' names only.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeList {
    /// The nodes.
    pub items: Vec<NamedObject>,
}

/// An object, read for its name only.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NamedObject {
    /// Its metadata.
    pub metadata: NameOnly,
}

/// `metadata.name`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NameOnly {
    /// The name.
    pub name: Option<String>,
}

impl ExtenderArgs {
    /// The pod, and the candidate node names from whichever form the scheduler sent.
    pub fn into_pod_and_candidates(self) -> (Option<Pod>, Vec<String>) {
        let names = match (self.node_names, self.nodes) {
            (Some(names), _) => names,
            (None, nodes) => {
                nodes.unwrap_or_default().items.into_iter().filter_map(|node| node.metadata.name).collect()
            }
        };
        (self.pod, names)
    }
}

/// The filter answer. `NodeNames` is always set (an answer with neither `NodeNames` nor `Nodes`
/// drops every node).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ExtenderFilterResult {
    /// Unused: we are node-cache capable.
    pub nodes: Option<serde_json::Value>,
    /// The nodes that pass.
    pub node_names: Option<Vec<String>>,
    /// Refused nodes where preemption could make room, with the reason (nodes in the same state
    /// share one text).
    pub failed_nodes: Option<BTreeMap<String, Arc<str>>>,
    /// Refused nodes no preemption helps, with the reason.
    pub failed_and_unresolvable_nodes: Option<BTreeMap<String, Arc<str>>>,
    /// Why nothing could be decided (fails the scheduling attempt unless the extender is
    /// `ignorable`).
    pub error: String,
}

/// One node's score.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostPriority {
    /// The node.
    pub host: String,
    /// 0..=[`MAX_EXTENDER_PRIORITY`].
    pub score: i64,
}

/// The bind request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ExtenderBindingArgs {
    /// The pod's name.
    pub pod_name: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The pod's UID.
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    /// The node chosen.
    pub node: String,
}

/// The bind answer: an empty `Error` is success.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ExtenderBindingResult {
    /// Why the pod was not bound.
    pub error: String,
}
