//! `NUMAResourcesScheduler`: the NUMA-aware secondary scheduler, and which pods are sent to it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{LogLevel, NamespacedName, ObjectReference};
use crate::duration::GoDuration;
use crate::string_enum::string_enum;

/// The profile name the scheduler runs with when `schedulerName` is not set.
pub const DEFAULT_SCHEDULER_NAME: &str = "topo-aware-scheduler";

/// Desired state of the NUMA-aware secondary scheduler.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[kube(
    group = "nodetopology.openshift.io",
    version = "v1",
    kind = "NUMAResourcesScheduler",
    plural = "numaresourcesschedulers",
    singular = "numaresourcesscheduler",
    shortname = "numaressched",
    status = "NUMAResourcesSchedulerStatus",
    derive = "PartialEq",
    doc = "NUMAResourcesScheduler runs the NUMA-aware secondary scheduler (NodeResourceTopologyMatch) and routes pods to it.",
    validation = Rule::new("has(self.metadata.name) && self.metadata.name == 'numaresourcesscheduler'")
        .message("This is a singleton resource and the object name must be 'numaresourcesscheduler'."),
    printcolumn(name = "Scheduler", type_ = "string", json_path = ".status.schedulerName"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct NUMAResourcesSchedulerSpec {
    /// Scheduler container image. Required with the Plugin engine; with the Extender engine,
    /// empty means the stock kube-scheduler of the cluster's own release
    /// (registry.k8s.io/kube-scheduler:<kube-apiserver's version>).
    #[serde(default, rename = "imageSpec")]
    pub scheduler_image: String,
    /// Scheduler name to be used in pod templates (`spec.schedulerName`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
    /// Scheduler log verbosity. Valid values are: "Normal", "Debug", "Trace", "TraceAll".
    /// Defaults to "Normal".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Normal"))]
    pub log_level: Option<LogLevel>,
    /// The cache resync period. Use an explicit 0 to disable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_resync_period: Option<GoDuration>,
    /// Cache resync debug options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_resync_debug: Option<CacheResyncDebugMode>,
    /// The informer the scheduler uses to watch pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_informer: Option<SchedulerInformerMode>,
    /// Which foreign pods trigger a cache resync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_resync_detection: Option<CacheResyncDetectionMode>,
    /// How the plugin scores nodes. Defaults to LeastAllocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring_strategy: Option<ScoringStrategyParams>,
    /// How many scheduler replicas run. Unset: detected from the control-plane size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// NUMA-aware preemption. Unset means disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_mode: Option<PreemptionMode>,
    /// Which pods the admission webhook sends to this scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_routing: Option<PodRouting>,
    /// What places the pods: "Plugin" (scheduler-plugins' NodeResourceTopologyMatch in the
    /// imageSpec image; the default) or "Extender" (the stock kube-scheduler in imageSpec, of the
    /// cluster's version, with the numaresources scheduler extender beside it, deciding by the
    /// kubelet's own Topology Manager rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<SchedulerEngine>,
}

string_enum! {
    /// What places the pods routed to the NUMA-aware scheduler.
    pub enum SchedulerEngine {
        /// scheduler-plugins' NodeResourceTopologyMatch. The default.
        Plugin = "Plugin",
        /// The stock kube-scheduler with the numaresources scheduler extender.
        Extender = "Extender",
    }
}

string_enum! {
    /// Whether the scheduler dumps its cache state when a resync fails.
    pub enum CacheResyncDebugMode {
        /// No dump.
        Disabled = "Disabled",
        /// Dump the state as JSON at each failed resync. The default.
        DumpJSONFile = "DumpJSONFile",
    }
}

string_enum! {
    /// The informer the NodeResourceTopologyMatch plugin uses.
    pub enum SchedulerInformerMode {
        /// The framework's shared informer.
        Shared = "Shared",
        /// A separate informer for the plugin.
        Dedicated = "Dedicated",
    }
}

string_enum! {
    /// Which foreign pods make the plugin resync a node.
    pub enum CacheResyncDetectionMode {
        /// Guaranteed pods that request NUMA-specific resources. The default.
        Relaxed = "Relaxed",
        /// Any guaranteed pod.
        Aggressive = "Aggressive",
    }
}

string_enum! {
    /// The plugin's scoring strategy.
    pub enum ScoringStrategyType {
        /// Favours the nodes with the least available resource.
        MostAllocated = "MostAllocated",
        /// Favours nodes with balanced usage.
        BalancedAllocation = "BalancedAllocation",
        /// Favours the nodes with the most available resource. The default.
        LeastAllocated = "LeastAllocated",
        /// Favours the nodes that can hold the pod on the fewest NUMA nodes, and among those the
        /// closest ones.
        LeastNUMANodes = "LeastNUMANodes",
    }
}

string_enum! {
    /// NUMA-aware preemption.
    pub enum PreemptionMode {
        /// The plugin simulates NUMA placement when preempting.
        Enabled = "Enabled",
        /// Plain preemption.
        Disabled = "Disabled",
    }
}

string_enum! {
    /// Which pods the admission webhook routes to the NUMA-aware scheduler.
    pub enum PodRoutingMode {
        /// None: pods name the scheduler themselves. The default.
        Disabled = "Disabled",
        /// Guaranteed pods asking for integral CPUs, hugepages or devices.
        ExclusiveResources = "ExclusiveResources",
        /// Every pod that uses the default scheduler.
        All = "All",
    }
}

/// A scoring model for the plugin.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ScoringStrategyParams {
    /// The strategy.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<ScoringStrategyType>,
    /// Resources and their weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceSpecParams>,
}

/// A resource and its weight in scoring.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ResourceSpecParams {
    /// Name of the resource.
    pub name: String,
    /// Weight of the resource.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub weight: i64,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// Which pods are sent to the NUMA-aware scheduler by the admission webhook.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodRouting {
    /// Which pods are routed. Defaults to Disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Disabled"))]
    pub mode: Option<PodRoutingMode>,
    /// The namespaces whose pods are routed; unset selects every namespace. System namespaces
    /// are never routed, whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

/// Observed state of the NUMA-aware secondary scheduler.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NUMAResourcesSchedulerStatus {
    /// The secondary scheduler Deployment.
    #[serde(default, skip_serializing_if = "NamespacedName::is_empty")]
    pub deployment: NamespacedName,
    /// The scheduler name the running scheduler answers to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
    /// The effective cache resync period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_resync_period: Option<GoDuration>,
    /// Available, Progressing, Degraded and Upgradeable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Objects of interest for this scheduler.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_objects: Vec<ObjectReference>,
}
