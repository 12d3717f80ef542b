//! The exporter's contract: what the controllers render for `numaresources rte` and what the
//! agent reads, written once.
//!
//! - the per-node-group ConfigMap ([`ExporterConfig`]), mounted as a directory at [`CONFIG_DIR`]
//!   and read from its [`CONFIG_FILE`] key;
//! - the kubelet's topology manager settings it carries ([`TopologyManager`]);
//! - where `/metrics` is served ([`METRICS_PORT`]) and where its `httptls` certificate is mounted
//!   ([`METRICS_CERTS_DIR`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The port the exporter serves `/metrics` on (upstream's), which the DaemonSet, its Service and
/// the exporters' NetworkPolicy open.
pub const METRICS_PORT: u16 = 2112;

/// Where the DaemonSet mounts the Secret with the metrics serving certificate (`httptls`).
pub const METRICS_CERTS_DIR: &str = "/etc/secrets/rte/";

/// Where the DaemonSet mounts the node group's ConfigMap, as a directory: the kubelet updates a
/// ConfigMap volume by swapping its `..data` symlink, which a `subPath` mount never sees.
pub const CONFIG_DIR: &str = "/etc/resource-topology-exporter/";

/// The ConfigMap's data key, so also the file name in [`CONFIG_DIR`].
pub const CONFIG_FILE: &str = "config.yaml";

/// The kubelet's topology manager settings, as the kubelet spells them. An empty field is unknown
/// (the controllers could not tell); [`TopologyManager::kubelet_defaults`] is what a kubelet runs
/// with when its configuration says nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopologyManager {
    /// `none`, `best-effort`, `restricted` or `single-numa-node`.
    pub policy: String,
    /// `container` or `pod`.
    pub scope: String,
}

impl TopologyManager {
    /// The kubelet's own defaults: policy `none`, scope `container`.
    pub fn kubelet_defaults() -> Self {
        Self { policy: "none".into(), scope: "container".into() }
    }
}

/// The exporter's configuration file, `config.yaml` of the node group's ConfigMap. Unknown keys
/// are ignored when read (as upstream's exporter does); empty sections are left out when written.
///
/// Field order is the written order, which goes into the DaemonSet's `configmap.hash`: keep it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExporterConfig {
    /// The kubelet's topology manager settings the controllers saw for the group.
    #[serde(default)]
    pub kubelet: KubeletSection,
    /// Pods left out of the accounting and the fingerprint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_exclude: Vec<PodExcludeRule>,
    /// Resource names never published, by node name (`*` for every node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_exclude: BTreeMap<String, Vec<String>>,
}

/// The `kubelet` section of [`ExporterConfig`]: a key is written only when known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletSection {
    /// `topologyManagerPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_manager_policy: Option<String>,
    /// `topologyManagerScope`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_manager_scope: Option<String>,
}

impl From<&TopologyManager> for KubeletSection {
    /// The known settings; an empty (unknown) one is left out.
    fn from(tm: &TopologyManager) -> Self {
        let known = |value: &str| Some(value.to_owned()).filter(|v| !v.is_empty());
        Self { topology_manager_policy: known(&tm.policy), topology_manager_scope: known(&tm.scope) }
    }
}

/// One `podExclude` entry: shell globs; an empty pattern matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExcludeRule {
    /// Name glob.
    #[serde(default)]
    pub name_pattern: String,
    /// Namespace glob.
    #[serde(default)]
    pub namespace_pattern: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nrt::well_known::{TOPOLOGY_MANAGER_POLICIES, TOPOLOGY_MANAGER_SCOPES};

    #[test]
    fn unknown_settings_and_empty_sections_are_left_out() {
        let config = ExporterConfig { kubelet: (&TopologyManager::default()).into(), ..ExporterConfig::default() };
        assert_eq!(serde_json::to_value(&config).unwrap(), serde_json::json!({"kubelet": {}}));
    }

    #[test]
    fn unknown_keys_are_ignored_and_missing_ones_default() {
        let text = r#"{"podExclude": [{"namePattern": "canary-*"}], "unknownKey": 1}"#;
        let config: ExporterConfig = serde_json::from_str(text).unwrap();
        assert_eq!(config.pod_exclude, [PodExcludeRule { name_pattern: "canary-*".into(), ..Default::default() }]);
        assert_eq!(config.kubelet, KubeletSection::default());
    }

    #[test]
    fn kubelet_defaults_are_known_values() {
        let tm = TopologyManager::kubelet_defaults();
        assert!(TOPOLOGY_MANAGER_POLICIES.contains(&tm.policy.as_str()));
        assert!(TOPOLOGY_MANAGER_SCOPES.contains(&tm.scope.as_str()));
    }
}
