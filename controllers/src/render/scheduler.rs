//! The NUMA-aware secondary scheduler, as upstream's operator renders it: its
//! `KubeSchedulerConfiguration` ConfigMap, its Deployment, and its RBAC. Input is the spec normalized for the platform.
//!
//! `NodeResourceTopologyMatch` args follow upstream's delete-when-unset rules:
//! `cacheResyncPeriodSeconds` only when the rounded period is > 0, `preemptionMode` only when
//! `Enabled`, `scoringStrategy.resources` only when given; `cache.resyncMethod` is always
//! `Autodetect`. Leader election is on only with more than one replica, and always written.
//!
//! kube-scheduler decodes its configuration strictly: an argument or plugin the image does not
//! know makes it exit. So `preemptionMode` and the `KNIDebug` filter are rendered only for an
//! image that has them ([`SchedulerCapabilities`], by image reference).
//!
//! With `engine: Extender` the image is the stock kube-scheduler: its profile keeps the default
//! plugins, an `extenders` stanza calls the numaresources scheduler extender, which runs beside it
//! in the pod (our image, `scheduler-extender`, on loopback) and decides by the kubelet's rules.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use numaresources_api::operator::scheduler_image::SchedulerCapabilities;
use numaresources_api::operator::{
    CacheResyncDebugMode, CacheResyncDetectionMode, LogLevel, NUMAResourcesSchedulerSpec, PreemptionMode,
    SchedulerEngine, SchedulerInformerMode, ScoringStrategyType,
};
use numaresources_api::{GoDuration, StringEnum, nrt};
use serde_json::{Value, json};

use super::{RenderError, binding, typed};
use crate::names::{
    self, COMPONENT_SCHEDULER, SCHEDULER, SCHEDULER_CLUSTER_ROLE, SCHEDULER_CONFIG, SCHEDULER_LEADER_LEASE,
    SCHEDULER_LEADER_ROLE,
};

/// The ConfigMap key and the file the scheduler reads.
pub const CONFIG_KEY: &str = "config.yaml";
/// The filter plugins, in upstream's order; `KNIDebug` exists only in the OpenShift build.
const FILTERS: &[&str] = &[
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "KNIDebug",
    "NodeResourcesFit",
    "NodeResourceTopologyMatch",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
];

/// What the scheduler objects depend on besides the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// The controllers' namespace, where the scheduler runs.
    pub namespace: String,
    /// What the scheduler image can decode (`KNIDebug`, `preemptionMode`).
    pub capabilities: SchedulerCapabilities,
    /// Requests equal to limits (the `scheduler-qos-request: guaranteed` annotation).
    pub guaranteed_qos: bool,
    /// Our image, which the extender engine runs beside kube-scheduler.
    pub extender_image: String,
}

/// How many replicas to run (upstream's replica autodetection): an explicit count, 0 included (scaled to
/// zero: upstream autodetects only when the field is unset), must fit the eligible nodes; unset
/// picks 3 with at least 3 eligible nodes, else 1.
pub fn replicas(requested: Option<i32>, eligible_nodes: usize) -> Result<i32, String> {
    match requested {
        Some(n) if n >= 0 => {
            if usize::try_from(n).is_ok_and(|n| n <= eligible_nodes) {
                Ok(n)
            } else {
                Err(format!("spec.replicas {n} exceeds the {eligible_nodes} nodes eligible to run the scheduler"))
            }
        }
        _ => match eligible_nodes {
            0 => Err("no node is eligible to run the scheduler, so replicas cannot be detected".into()),
            1 | 2 => Ok(1),
            _ => Ok(3),
        },
    }
}

/// The effective cache resync period: rounded to whole seconds; zero disables.
pub fn cache_resync_seconds(spec: &NUMAResourcesSchedulerSpec) -> i64 {
    spec.cache_resync_period.unwrap_or(numaresources_api::operator::defaults::CACHE_RESYNC_PERIOD).round_to_seconds()
}

/// The `KubeSchedulerConfiguration` text.
pub fn config_yaml(spec: &NUMAResourcesSchedulerSpec, settings: &SchedulerSettings, replicas: i32) -> String {
    let foreign = match spec.cache_resync_detection {
        Some(CacheResyncDetectionMode::Aggressive) => "All",
        _ => "OnlyExclusiveResources",
    };
    let informer = match spec.scheduler_informer {
        Some(SchedulerInformerMode::Shared) => "Shared",
        _ => "Dedicated",
    };
    let cache = json!({"resyncMethod": "Autodetect", "foreignPodsDetect": foreign, "informerMode": informer});

    let strategy = spec.scoring_strategy.clone().unwrap_or_default();
    let mut scoring = json!({"type": strategy.type_.unwrap_or(ScoringStrategyType::LeastAllocated).as_str()});
    if !strategy.resources.is_empty() {
        scoring["resources"] = strategy
            .resources
            .iter()
            .map(|r| json!({"name": r.name, "weight": if r.weight == 0 { 1 } else { r.weight }}))
            .collect();
    }
    let mut args = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "NodeResourceTopologyMatchArgs",
        "cache": cache,
        "scoringStrategy": scoring,
    });
    let resync = cache_resync_seconds(spec);
    if resync > 0 {
        args["cacheResyncPeriodSeconds"] = json!(resync);
    }
    if spec.preemption_mode == Some(PreemptionMode::Enabled) && settings.capabilities.preemption_mode {
        args["preemptionMode"] = json!("Enabled");
    }
    let filters: Vec<Value> = FILTERS
        .iter()
        .filter(|name| settings.capabilities.kni_debug || **name != "KNIDebug")
        .map(|name| json!({"name": name}))
        .collect();
    let leader_election = json!({
        "leaderElect": replicas > 1,
        "resourceLock": "leases",
        "resourceName": SCHEDULER_LEADER_LEASE,
        "resourceNamespace": settings.namespace,
    });
    if spec.engine() == SchedulerEngine::Extender {
        return extender_config_yaml(spec, leader_election);
    }
    let config = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {
            "leaderElect": replicas > 1,
            "resourceLock": "leases",
            "resourceName": SCHEDULER_LEADER_LEASE,
            "resourceNamespace": settings.namespace,
        },
        "profiles": [{
            "schedulerName": spec.effective_scheduler_name(),
            "plugins": {
                "multiPoint": {
                    "enabled": [{"name": "NodeResourceTopologyMatch"}],
                    "disabled": [{"name": "DynamicResources"}],
                },
                "filter": {"disabled": [{"name": "*"}], "enabled": filters},
            },
            "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": args}],
        }],
    });
    serde_norway::to_string(&config).unwrap_or_default()
}

/// How long kube-scheduler waits for the extender (it is on loopback; a filter over thousands of
/// nodes takes milliseconds).
const EXTENDER_TIMEOUT: &str = "5s";

/// The extender engine's configuration: the default plugins, and the extender on loopback for
/// filter, prioritize and bind (it must see every pod of the profile: no `managedResources`),
/// not ignorable (a pod is retried rather than placed without it).
fn extender_config_yaml(spec: &NUMAResourcesSchedulerSpec, leader_election: Value) -> String {
    use numaresources_api::extender::{BIND_VERB, DEFAULT_PORT, FILTER_VERB, PRIORITIZE_VERB};
    let config = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": leader_election,
        "profiles": [{"schedulerName": spec.effective_scheduler_name()}],
        "extenders": [{
            "urlPrefix": format!("http://127.0.0.1:{DEFAULT_PORT}"),
            "filterVerb": FILTER_VERB,
            "prioritizeVerb": PRIORITIZE_VERB,
            "bindVerb": BIND_VERB,
            "weight": 1,
            "nodeCacheCapable": true,
            "httpTimeout": EXTENDER_TIMEOUT,
            "ignorable": false,
        }],
    });
    serde_norway::to_string(&config).unwrap_or_default()
}

/// The extender beside kube-scheduler: our image, on loopback, scoring by the spec's strategy;
/// its probes on their own port.
fn extender_container(spec: &NUMAResourcesSchedulerSpec, settings: &SchedulerSettings) -> Value {
    use numaresources_api::extender::HEALTH_PORT;
    let strategy =
        spec.scoring_strategy.as_ref().and_then(|s| s.type_.clone()).unwrap_or(ScoringStrategyType::LeastAllocated);
    json!({
        "name": "numa-extender",
        "image": settings.extender_image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["scheduler-extender", "--scheduler-name", spec.effective_scheduler_name(),
                 "--scoring-strategy", strategy.as_str()],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "ports": [{"name": "extender-health", "containerPort": HEALTH_PORT, "protocol": "TCP"}],
        // Ready once it has read the NRTs and pods: before that its filter answers an error.
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": HEALTH_PORT}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": HEALTH_PORT}, "initialDelaySeconds": 15, "periodSeconds": 10},
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
    })
}

/// The profile's scheduler name in a rendered (or applied) configuration.
pub fn scheduler_name_in(config_yaml: &str) -> Option<String> {
    let config: Value = serde_norway::from_str(config_yaml).ok()?;
    config.pointer("/profiles/0/schedulerName")?.as_str().map(str::to_owned)
}

/// The ConfigMap holding [`config_yaml`].
pub fn config_map(settings: &SchedulerSettings, yaml: String) -> Result<ConfigMap, RenderError> {
    typed(
        "scheduler ConfigMap",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": SCHEDULER_CONFIG, "namespace": settings.namespace, "labels": names::labels(SCHEDULER, COMPONENT_SCHEDULER)},
            "data": {CONFIG_KEY: yaml},
        }),
    )
}

/// The scheduler Deployment. `config_hash` is the hash of the ConfigMap data and `cache_epoch`
/// when its pods' NRT cache was filled (a new value restarts them: see `scheduler::topology`).
pub fn deployment(
    spec: &NUMAResourcesSchedulerSpec,
    settings: &SchedulerSettings,
    replicas: i32,
    config_hash: &str,
    cache_epoch: &str,
) -> Result<Deployment, RenderError> {
    let labels = names::labels(SCHEDULER, COMPONENT_SCHEDULER);
    let selector = names::selector_labels(SCHEDULER, COMPONENT_SCHEDULER);
    let verbosity = spec.log_level.as_ref().map_or(2, LogLevel::klog_verbosity);
    let resources = if settings.guaranteed_qos {
        let guaranteed = json!({"cpu": "600m", "memory": "1200Mi"});
        json!({"requests": guaranteed, "limits": guaranteed})
    } else {
        json!({"requests": {"cpu": "150m", "memory": "500Mi"}})
    };
    let mut env = Vec::new();
    if spec.cache_resync_debug != Some(CacheResyncDebugMode::Disabled) {
        env.push(json!({"name": "PFP_STATUS_DUMP", "value": "/run/pfpstatus"}));
    }
    let probe = |initial: i32| json!({"httpGet": {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}, "initialDelaySeconds": initial, "periodSeconds": 10});
    let extender = spec.engine() == SchedulerEngine::Extender;
    // scheduler-plugins' image keeps the binary in /bin; the stock image has it on its PATH.
    let binary = if extender { "kube-scheduler" } else { "/bin/kube-scheduler" };
    let mut containers = vec![json!({
        "name": "kube-scheduler",
        "image": spec.scheduler_image,
        "imagePullPolicy": "IfNotPresent",
        "command": [binary, "--config=/etc/kubernetes/config.yaml", format!("-v={verbosity}")],
        "env": env,
        "resources": resources,
        "livenessProbe": probe(15),
        "readinessProbe": probe(0),
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "etckubernetes", "mountPath": "/etc/kubernetes", "readOnly": true},
            {"name": "run-pfpstatus", "mountPath": "/run/pfpstatus"},
        ],
    })];
    if extender {
        containers.push(extender_container(spec, settings));
    }
    typed(
        "scheduler Deployment",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": SCHEDULER, "namespace": settings.namespace, "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels, "annotations": {
                        names::ANNOTATION_CONFIG_HASH: config_hash,
                        names::ANNOTATION_SCHEDULER_CACHE_EPOCH: cache_epoch,
                    }},
                    "spec": {
                        "serviceAccountName": SCHEDULER,
                        "priorityClassName": "system-node-critical",
                        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                        "topologySpreadConstraints": [{
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": selector},
                            "matchLabelKeys": ["pod-template-hash"],
                        }],
                        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 50,
                            "preference": {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]},
                        }]}},
                        "tolerations": [
                            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
                        ],
                        "containers": containers,
                        "volumes": [
                            {"name": "etckubernetes", "configMap": {"name": SCHEDULER_CONFIG}},
                            {"name": "run-pfpstatus", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                        ],
                    },
                },
            },
        }),
    )
}

/// The scheduler's ServiceAccount.
pub fn service_account(namespace: &str) -> Result<ServiceAccount, RenderError> {
    super::service_account(SCHEDULER, namespace, names::labels(SCHEDULER, COMPONENT_SCHEDULER))
}

/// What the plugin reads beyond a kube-scheduler's built-in role: NodeResourceTopologies.
pub fn cluster_role() -> Result<ClusterRole, RenderError> {
    typed(
        "scheduler ClusterRole",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": SCHEDULER_CLUSTER_ROLE, "labels": names::labels(SCHEDULER, COMPONENT_SCHEDULER)},
            "rules": [{"apiGroups": [nrt::GROUP], "resources": [nrt::PLURAL], "verbs": ["get", "list", "watch"]}],
        }),
    )
}

/// Bindings of the scheduler's ServiceAccount: our ClusterRole and the built-in
/// `system:kube-scheduler` and `system:volume-scheduler` (what any kube-scheduler needs).
pub fn cluster_role_bindings(namespace: &str) -> Result<Vec<ClusterRoleBinding>, RenderError> {
    [
        (SCHEDULER_CLUSTER_ROLE.to_owned(), SCHEDULER_CLUSTER_ROLE),
        (format!("{SCHEDULER_CLUSTER_ROLE}:kube-scheduler"), "system:kube-scheduler"),
        (format!("{SCHEDULER_CLUSTER_ROLE}:volume-scheduler"), "system:volume-scheduler"),
    ]
    .into_iter()
    .map(|(name, role)| {
        let metadata = json!({"name": name, "labels": names::labels(SCHEDULER, COMPONENT_SCHEDULER)});
        binding(metadata, "ClusterRole", role, SCHEDULER, namespace)
    })
    .collect()
}

/// Leader election on the scheduler's own Lease only (`create` cannot be limited by name).
pub fn leader_election_role(namespace: &str) -> Result<Role, RenderError> {
    typed(
        "scheduler leader-election Role",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": SCHEDULER_LEADER_ROLE, "namespace": namespace, "labels": names::labels(SCHEDULER, COMPONENT_SCHEDULER)},
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [SCHEDULER_LEADER_LEASE], "verbs": ["get", "update", "patch"]},
            ],
        }),
    )
}

/// Role bindings: leader election here, and the authentication ConfigMap reader in `kube-system`
/// (kube-scheduler's delegated authentication for its secure port).
pub fn role_bindings(namespace: &str) -> Result<Vec<RoleBinding>, RenderError> {
    [
        (SCHEDULER_LEADER_ROLE.to_owned(), namespace, SCHEDULER_LEADER_ROLE),
        (
            format!("{SCHEDULER}:extension-apiserver-authentication-reader"),
            "kube-system",
            "extension-apiserver-authentication-reader",
        ),
    ]
    .into_iter()
    .map(|(name, in_namespace, role)| {
        let labels = names::labels(SCHEDULER, COMPONENT_SCHEDULER);
        binding(json!({"name": name, "namespace": in_namespace, "labels": labels}), "Role", role, SCHEDULER, namespace)
    })
    .collect()
}

/// The effective period the status reports.
pub fn effective_resync_period(spec: &NUMAResourcesSchedulerSpec) -> GoDuration {
    GoDuration::from_secs(cache_resync_seconds(spec).max(0))
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
