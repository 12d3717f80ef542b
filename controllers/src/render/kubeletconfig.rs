//! The per-pool exporter ConfigMap (nro.md §3.3): the kubelet's topology manager settings and the
//! user's `podExcludes`, in the shape `numaresources rte --config` reads (`rte/src/config.rs`
//! `OperatorConfig`). The exporter's DaemonSet mounts it and hashes it into `configmap.hash`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use numaresources_api::operator::NamespacedName;
use serde_json::{Map, Value, json};

use super::{RenderError, typed};
use crate::names::{self, COMPONENT_RTE, RTE_SERVICE_ACCOUNT};

/// The data key the exporter reads.
pub const CONFIG_KEY: &str = "config.yaml";

/// The topology manager settings of one pool, as the kubelet spells them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopologyManager {
    /// `topologyManagerPolicy`; empty when unknown.
    pub policy: String,
    /// `topologyManagerScope`; empty when unknown.
    pub scope: String,
}

/// The `config.yaml` text: `kubelet` keys only when known, `podExclude` only when given.
pub fn config_yaml(topology_manager: &TopologyManager, pod_excludes: &[NamespacedName]) -> String {
    let mut kubelet = Map::new();
    if !topology_manager.policy.is_empty() {
        kubelet.insert("topologyManagerPolicy".into(), json!(topology_manager.policy));
    }
    if !topology_manager.scope.is_empty() {
        kubelet.insert("topologyManagerScope".into(), json!(topology_manager.scope));
    }
    let mut root = Map::new();
    root.insert("kubelet".into(), Value::Object(kubelet));
    if !pod_excludes.is_empty() {
        let excludes: Vec<Value> =
            pod_excludes.iter().map(|e| json!({"namespacePattern": e.namespace, "namePattern": e.name})).collect();
        root.insert("podExclude".into(), Value::Array(excludes));
    }
    // Serializing a JSON value to YAML cannot fail; an empty document is still a valid config.
    serde_norway::to_string(&Value::Object(root)).unwrap_or_default()
}

/// The ConfigMap `<nro>-<pool>`. `disagreement` names the nodes whose kubelets differ.
pub fn config_map(
    namespace: &str,
    nro_name: &str,
    pool: &str,
    yaml: String,
    disagreement: Option<&str>,
) -> Result<ConfigMap, RenderError> {
    let mut labels = names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE);
    labels.insert(names::LABEL_NRO_NAME.to_owned(), nro_name.to_owned());
    labels.insert(names::LABEL_POOL.to_owned(), pool.to_owned());
    labels.insert(names::LABEL_NODE_GROUP.to_owned(), pool.to_owned());
    // Always written, empty when all agree, so an apply clears an old report.
    let annotations = BTreeMap::from([(names::ANNOTATION_KUBELET_DISAGREEMENT, disagreement.unwrap_or_default())]);
    typed(
        "exporter ConfigMap",
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": names::node_group_object_name(nro_name, pool),
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "data": {CONFIG_KEY: yaml},
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_yaml_is_what_the_exporter_reads() {
        let tm = TopologyManager { policy: "single-numa-node".into(), scope: "pod".into() };
        let excludes = [NamespacedName { namespace: "kube-*".into(), name: "*".into() }];
        let yaml = config_yaml(&tm, &excludes);
        let parsed: Value = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(
            parsed,
            json!({
                "kubelet": {"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"},
                "podExclude": [{"namespacePattern": "kube-*", "namePattern": "*"}],
            })
        );
        let unknown: Value = serde_norway::from_str(&config_yaml(&TopologyManager::default(), &[])).unwrap();
        assert_eq!(unknown, json!({"kubelet": {}}), "unknown settings and no excludes are left out");
    }

    #[test]
    fn config_map_carries_upstream_labels_and_the_disagreement() {
        let cm =
            config_map("numaresources", "numaresourcesoperator", "worker", "kubelet: {}\n".into(), Some("a: none"))
                .unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("numaresourcesoperator-worker"));
        let labels = cm.metadata.labels.unwrap();
        assert_eq!(labels.get(names::LABEL_NRO_NAME).map(String::as_str), Some("numaresourcesoperator"));
        assert_eq!(labels.get(names::LABEL_POOL).map(String::as_str), Some("worker"));
        let annotations = cm.metadata.annotations.unwrap();
        assert_eq!(annotations.get(names::ANNOTATION_KUBELET_DISAGREEMENT).map(String::as_str), Some("a: none"));
        assert_eq!(cm.data.unwrap().get(CONFIG_KEY).map(String::as_str), Some("kubelet: {}\n"));
    }
}
