//! `NUMAResourcesOperator`: which nodes run the resource topology exporter, and how.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{LogLevel, NamespacedName, ObjectReference};
use crate::duration::GoDuration;
use crate::string_enum::string_enum;

/// At most this many per-node-group annotations (upstream's `NodeGroupMaxAnnotations`).
pub const NODE_GROUP_MAX_ANNOTATIONS: usize = 8;

/// Desired state of the NUMA resources operator: the node groups that get an exporter.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[kube(
    group = "nodetopology.openshift.io",
    version = "v1",
    kind = "NUMAResourcesOperator",
    plural = "numaresourcesoperators",
    singular = "numaresourcesoperator",
    shortname = "numaresop",
    status = "NUMAResourcesOperatorStatus",
    derive = "PartialEq",
    doc = "NUMAResourcesOperator runs the resource topology exporter on groups of nodes and serves the NodeResourceTopology API.",
    validation = Rule::new("has(self.metadata.name) && self.metadata.name == 'numaresourcesoperator'")
        .message("This is a singleton resource and the object name must be 'numaresourcesoperator'."),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct NUMAResourcesOperatorSpec {
    /// Groups of nodes to enable the resource topology exporter on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_groups: Vec<NodeGroup>,
    /// Optional resource topology exporter image. Deprecated: the operator runs its own image.
    #[serde(default, rename = "imageSpec", skip_serializing_if = "String::is_empty")]
    pub exporter_image: String,
    /// Exporter log verbosity. Valid values are: "Normal", "Debug", "Trace", "TraceAll".
    /// Defaults to "Normal".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Normal"))]
    pub log_level: Option<LogLevel>,
    /// Optional namespace/name glob patterns of pods to ignore at node level.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_excludes: Vec<NamespacedName>,
}

/// A group of nodes that runs one exporter DaemonSet. Choose the nodes with exactly one of
/// `nodeSelector` (plain Kubernetes), `poolName` or `machineConfigPoolSelector` (OpenShift).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    /// Label selector over MachineConfigPool labels (OpenShift).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_config_pool_selector: Option<LabelSelector>,
    /// The exporter's behaviour for this group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<NodeGroupConfig>,
    /// Name of the MachineConfigPool (OpenShift) or NodePool (HyperShift) of the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_name: Option<String>,
    /// Per-node-group annotations that fine-tune the operator; at most 8.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Label selector over Node labels: how node groups are chosen on plain Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

string_enum! {
    /// Whether and how the exporter publishes the pods fingerprint.
    pub enum PodsFingerprintingMode {
        /// No fingerprint.
        Disabled = "Disabled",
        /// Fingerprint of every pod on the node.
        Enabled = "Enabled",
        /// Fingerprint of the pods with exclusive resources only. The default.
        EnabledExclusiveResources = "EnabledExclusiveResources",
    }
}

string_enum! {
    /// When the exporter refreshes the topology.
    pub enum InfoRefreshMode {
        /// On a timer. The default.
        Periodic = "Periodic",
        /// On pod lifecycle events.
        Events = "Events",
        /// Both.
        PeriodicAndEvents = "PeriodicAndEvents",
    }
}

string_enum! {
    /// Whether the exporter publishes at all.
    pub enum InfoRefreshPauseMode {
        /// Publishes. The default.
        Disabled = "Disabled",
        /// Runs but does not publish.
        Enabled = "Enabled",
    }
}

string_enum! {
    /// What the exporter publishes for memory and hugepages on a node whose kubelet does not
    /// manage them per NUMA node (its memory manager is not Static).
    pub enum UnmanagedMemoryMode {
        /// The node's totals in every zone, marked `memoryNUMAManaged=false`, so the
        /// scheduler's per-zone check refuses nothing the kubelet would admit. The default.
        NodeLevel = "NodeLevel",
        /// Nothing, as the upstream exporter: the NUMA-aware scheduler then refuses every pod
        /// that requests memory on such a node.
        Omit = "Omit",
    }
}

/// How the exporter reports topology for one node group. Every field is optional; the
/// normalized form ([`NodeGroup::normalized_config`]) has them all set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupConfig {
    /// Whether the pods fingerprint is reported for the nodes of this group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_fingerprinting: Option<PodsFingerprintingMode>,
    /// The mechanism that refreshes the topology info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_refresh_mode: Option<InfoRefreshMode>,
    /// The topology info refresh period. Use an explicit 0 to disable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_refresh_period: Option<GoDuration>,
    /// Whether updates to NodeResourceTopology objects are paused for this group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_refresh_pause: Option<InfoRefreshPauseMode>,
    /// Memory and hugepages on nodes whose kubelet does not manage them per NUMA node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmanaged_memory: Option<UnmanagedMemoryMode>,
    /// Tolerations for the exporter pods of this group. When not empty they replace the
    /// defaults entirely.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// Observed state of the NUMA resources operator.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NUMAResourcesOperatorStatus {
    /// The exporter DaemonSets that are ready, one per node group.
    #[serde(default, rename = "daemonsets", skip_serializing_if = "Vec::is_empty")]
    pub daemon_sets: Vec<NamespacedName>,
    /// MachineConfigPools resolved from the node groups (OpenShift).
    #[serde(default, rename = "machineconfigpools", skip_serializing_if = "Vec::is_empty")]
    pub machine_config_pools: Vec<MachineConfigPool>,
    /// Observed state of each node group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_groups: Vec<NodeGroupStatus>,
    /// Available, Progressing, Degraded and Upgradeable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Objects of interest for this operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_objects: Vec<ObjectReference>,
}

/// The observed state of one MachineConfigPool selected by a node group.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigPool {
    /// Name of the MachineConfigPool.
    pub name: String,
    /// Conditions copied from the MachineConfigPool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MachineConfigPoolCondition>,
    /// The configuration applied to this pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<NodeGroupConfig>,
}

/// A MachineConfigPool condition (`machineconfiguration.openshift.io/v1`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigPoolCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the condition last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The observed state of one node group that resolved to a set of nodes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NodeGroupStatus {
    /// The exporter DaemonSet of this node group (one object, despite the JSON name).
    #[serde(rename = "daemonsets")]
    pub daemon_set: NamespacedName,
    /// The normalized configuration applied to this node group.
    pub config: NodeGroupConfig,
    /// The pool name of the nodes in this node group (despite the JSON name).
    #[serde(rename = "selector")]
    pub pool_name: String,
}
