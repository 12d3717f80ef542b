//! The per-pool exporter ConfigMap: the kubelet's topology manager settings and the user's
//! `podExcludes`, written as the contract [`ExporterConfig`] that `numaresources rte --config`
//! reads. The exporter's DaemonSet mounts it and hashes it into `configmap.hash`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
pub use numaresources_api::exporter::{CONFIG_FILE as CONFIG_KEY, TopologyManager};
use numaresources_api::exporter::{ExporterConfig, PodExcludeRule};
use numaresources_api::operator::NamespacedName;
use serde_json::json;

use super::{RenderError, typed};
use crate::names::{self, COMPONENT_RTE, RTE_SERVICE_ACCOUNT};

/// The `config.yaml` text: `kubelet` keys only when known, `podExclude` only when given.
pub fn config_yaml(topology_manager: &TopologyManager, pod_excludes: &[NamespacedName]) -> String {
    let config = ExporterConfig {
        kubelet: topology_manager.into(),
        pod_exclude: pod_excludes
            .iter()
            .map(|e| PodExcludeRule { namespace_pattern: e.namespace.clone(), name_pattern: e.name.clone() })
            .collect(),
        ..ExporterConfig::default()
    };
    // Serializing plain strings to YAML cannot fail; an empty document is still a valid config.
    serde_norway::to_string(&config).unwrap_or_default()
}

/// What the kubeletconfig controller found of a group's kubelets, carried on its ConfigMap for
/// the operator controller's conditions.
#[derive(Debug, Clone, Copy, Default)]
pub struct KubeletReports<'a> {
    /// The nodes whose kubelets differ, and how.
    pub disagreement: Option<&'a str>,
    /// The nodes whose kubelets cannot give NUMA-aligned placement, and why.
    pub alignment: Option<&'a str>,
}

/// The ConfigMap `<nro>-<pool>`, with the group's [`KubeletReports`].
pub fn config_map(
    namespace: &str,
    nro_name: &str,
    pool: &str,
    yaml: String,
    reports: KubeletReports<'_>,
) -> Result<ConfigMap, RenderError> {
    let mut labels = names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE);
    labels.insert(names::LABEL_NRO_NAME.to_owned(), nro_name.to_owned());
    labels.insert(names::LABEL_POOL.to_owned(), pool.to_owned());
    labels.insert(names::LABEL_NODE_GROUP.to_owned(), pool.to_owned());
    // Always written, empty when there is nothing to say, so an apply clears an old report.
    let annotations = BTreeMap::from([
        (names::ANNOTATION_KUBELET_DISAGREEMENT, reports.disagreement.unwrap_or_default()),
        (names::ANNOTATION_KUBELET_ALIGNMENT, reports.alignment.unwrap_or_default()),
    ]);
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
    use serde_json::Value;

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
        // The text, not only its meaning: it goes into `configmap.hash`, so a change of key order
        // would roll every exporter.
        assert_eq!(
            yaml,
            "kubelet:\n  topologyManagerPolicy: single-numa-node\n  topologyManagerScope: pod\npodExclude:\n- namePattern: '*'\n  namespacePattern: kube-*\n"
        );
        let unknown: Value = serde_norway::from_str(&config_yaml(&TopologyManager::default(), &[])).unwrap();
        assert_eq!(unknown, json!({"kubelet": {}}), "unknown settings and no excludes are left out");
    }

    #[test]
    fn config_map_carries_upstream_labels_and_the_disagreement() {
        let reports = KubeletReports { disagreement: Some("a: none"), alignment: Some("b: memory manager None") };
        let cm =
            config_map("numaresources", "numaresourcesoperator", "worker", "kubelet: {}\n".into(), reports).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("numaresourcesoperator-worker"));
        let labels = cm.metadata.labels.unwrap();
        assert_eq!(labels.get(names::LABEL_NRO_NAME).map(String::as_str), Some("numaresourcesoperator"));
        assert_eq!(labels.get(names::LABEL_POOL).map(String::as_str), Some("worker"));
        let annotations = cm.metadata.annotations.unwrap();
        assert_eq!(annotations.get(names::ANNOTATION_KUBELET_DISAGREEMENT).map(String::as_str), Some("a: none"));
        assert_eq!(
            annotations.get(names::ANNOTATION_KUBELET_ALIGNMENT).map(String::as_str),
            Some("b: memory manager None")
        );
        assert_eq!(cm.data.unwrap().get(CONFIG_KEY).map(String::as_str), Some("kubelet: {}\n"));
    }
}
