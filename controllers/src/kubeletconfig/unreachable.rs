//! Kubelets that could not be asked for their configuration, reported once per node and episode.
//!
//! A node with no address (kube-apiserver answers the proxy with `no preferred addresses
//! found`) or a kubelet that is down stays so for many passes; one line per node per pass says
//! nothing new. A node is reported (Warning Event on the Node, warning log line) when it stops
//! answering, logged at info when it answers again, and at debug in between.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

use crate::context::Context;

/// The Event reason on the Node.
pub const REASON: &str = "KubeletConfigUnreadable";

/// The nodes known not to answer now, with why.
#[derive(Debug, Default)]
pub struct UnreachableKubelets(Mutex<BTreeMap<String, String>>);

/// What changed since the previous pass.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Nodes that stopped answering, with why.
    pub started: Vec<(String, String)>,
    /// Nodes that answer again.
    pub ended: Vec<String>,
}

impl UnreachableKubelets {
    /// Records one pass: `asked` are every node asked, `failures` those that did not answer.
    /// Nodes not asked any more (deleted, left their group) are forgotten, so the memory stays
    /// within the nodes of the node groups.
    pub fn observe(&self, asked: &[String], failures: BTreeMap<String, String>) -> Changes {
        let mut known = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut changes = Changes::default();
        known.retain(|node, _| {
            let still = failures.contains_key(node);
            if !still && asked.contains(node) {
                changes.ended.push(node.clone());
            }
            still
        });
        for (node, reason) in failures {
            if !known.contains_key(&node) {
                changes.started.push((node.clone(), reason.clone()));
            }
            known.insert(node, reason);
        }
        changes
    }
}

/// Records the pass and tells a person what changed.
pub async fn report(
    ctx: &Context,
    unreachable: &UnreachableKubelets,
    asked: &[String],
    failures: BTreeMap<String, String>,
) {
    for (node, reason) in &failures {
        tracing::debug!(%node, %reason, "the kubelet's configuration is still unreadable; node skipped");
    }
    let changes = unreachable.observe(asked, failures);
    for node in changes.ended {
        tracing::info!(%node, "the kubelet's configuration is readable again");
    }
    for (node, reason) in changes.started {
        tracing::warn!(%node, %reason, "cannot read the kubelet's configuration; node skipped until it answers");
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.clone()),
            ..ObjectReference::default()
        };
        let note = format!(
            "cannot read the kubelet's configuration of node {node} ({reason}); its topology manager settings are \
             left out of its node group's exporter configuration until it answers"
        );
        ctx.event(&regarding, EventType::Warning, REASON, "ReadKubeletConfig", note).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn failing(names: &[&str]) -> BTreeMap<String, String> {
        names.iter().map(|n| ((*n).to_owned(), "no preferred addresses found".to_owned())).collect()
    }

    #[test]
    fn each_node_is_reported_when_it_stops_answering_and_when_it_answers_again() {
        let memory = UnreachableKubelets::default();
        let all = nodes(&["a", "b", "c"]);
        let first = memory.observe(&all, failing(&["b"]));
        assert_eq!(first.started, [("b".to_owned(), "no preferred addresses found".to_owned())]);
        assert_eq!(memory.observe(&all, failing(&["b"])), Changes::default(), "once, not every pass");
        let both = memory.observe(&all, failing(&["b", "c"]));
        assert_eq!(both.started.len(), 1);
        assert_eq!(both.started[0].0, "c");
        let recovered = memory.observe(&all, failing(&["c"]));
        assert_eq!(recovered, Changes { started: vec![], ended: nodes(&["b"]) });
        // A node that is gone is forgotten without a word; if it comes back failing, it is new.
        assert_eq!(memory.observe(&nodes(&["a", "b"]), failing(&[])), Changes::default());
        assert_eq!(memory.observe(&all, failing(&["c"])).started.len(), 1);
    }
}
