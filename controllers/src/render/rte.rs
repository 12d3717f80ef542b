//! The exporter (`numaresources rte`) of one node group: its DaemonSet, and the ServiceAccount
//! and RBAC every group shares, as upstream's operator deploys them.
//!
//! Flag mapping (upstream's, from the normalized node group configuration), adapted to what
//! `numaresources rte` accepts:
//!
//! | normalized config | arguments |
//! |---|---|
//! | `logLevel` | `-v=2/4/6/8` |
//! | `infoRefreshMode` ≠ Events | `--sleep-interval=<infoRefreshPeriod>` |
//! | `infoRefreshMode` = Events | `--sleep-interval=0` (upstream leaves a stale 10 s: a quirk we fix) |
//! | `infoRefreshMode` ≠ Periodic | `--notify-file=/host-run-rte/notify` and `--podresources-poll-interval=500ms` |
//! | `infoRefreshMode` = Periodic | `--podresources-poll-interval=0` |
//! | `infoRefreshPause` = Enabled | `--no-publish` |
//! | `podsFingerprinting` | `--pods-fingerprint=false`, or `--pods-fingerprint` with `--pods-fingerprint-method=all` / `with-exclusive-resources` and the status dump file |
//! | always | `--sysfs`, `--podresources-socket`, `--refresh-node-resources`, `--add-nrt-owner=false`, `--metrics-mode` (+ TLS profile) |
//!
//! Upstream's events come from the notify file alone, which nothing touches on a plain node; ours
//! also come from polling the kubelet's podresources `List` for a change of allocations, which
//! works on any node. `Periodic` asks for periodic scans only, so it turns that poll off (the
//! exporter's own default polls).
//!
//! Whenever our API server serves the NRT API, every exporter also gets the direct write path
//! ([`DirectWrite`], the contract in `numaresources_api::direct_write`): `--nrt-server` with
//! the Service's URL, and a projected volume with a ServiceAccount token of our server's own
//! audience and the CA bundle that verifies it. When the cluster serves NRT itself, none of it.
//!
//! The group's ConfigMap is mounted as a directory, never with `subPath`: the kubelet updates a
//! ConfigMap volume by swapping its `..data` symlink, which a `subPath` mount never sees, and the
//! exporter follows that swap to apply a new configuration without a restart.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use numaresources_api::direct_write::{
    ADMIN_PORT, CA_FILE_NAME, NRT_SERVER_ADMIN_URL_FLAG, NRT_SERVER_CA_FILE_FLAG, NRT_SERVER_FLAG,
    NRT_SERVER_TLS_NAME_FLAG, NRT_TOKEN_FILE_FLAG, TOKEN_AUDIENCE, TOKEN_EXPIRATION_SECONDS, TOKEN_FILE_NAME,
    TOKEN_MOUNT_DIR, WRITE_SERVICE,
};
pub use numaresources_api::exporter::CONFIG_DIR;
use numaresources_api::exporter::{METRICS_CERTS_DIR, METRICS_PORT};
use numaresources_api::nrt;
use numaresources_api::operator::{
    InfoRefreshMode, InfoRefreshPauseMode, NodeGroupConfig, PodsFingerprintingMode, UnmanagedMemoryMode,
};
use serde_json::{Value, json};

use super::{RenderError, binding, typed};
use crate::names::{self, COMPONENT_RTE, RTE_CLUSTER_ROLE, RTE_CONTAINER, RTE_ROLE, RTE_SERVICE_ACCOUNT};
use crate::nodegroups::ResolvedPool;

/// Where the exporter's refresh trigger file lives in the container.
pub const NOTIFY_FILE: &str = "/host-run-rte/notify";
/// How often an event-driven exporter asks the kubelet's podresources `List` whether allocations
/// changed (a scan follows at once): fast enough to show an allocation within a second, two
/// kubelet calls per second per node.
pub const ALLOCATION_POLL_INTERVAL: &str = "500ms";
/// The poll interval that turns the allocation poll off (`Periodic`).
const ALLOCATION_POLL_OFF: &str = "0";
/// Where the pods fingerprint status is dumped (a memory-backed emptyDir).
pub const PFP_STATUS_FILE: &str = "/run/pfpstatus/status.json";
/// The Secret with the metrics serving certificate (`httptls`).
pub const METRICS_CERT_SECRET: &str = "rte-metrics-service-cert";

/// The exporters' metrics Service (upstream's name).
pub const METRICS_SERVICE: &str = "numaresources-rte-metrics-service";

/// How the exporter serves `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MetricsMode {
    /// Plain HTTP (plain Kubernetes: no certificate authority to issue one).
    #[default]
    Http,
    /// HTTPS with the certificate in [`METRICS_CERT_SECRET`] and the cluster's TLS profile.
    HttpTls {
        /// `--metrics-tls-min-version`, left out when empty.
        min_version: String,
        /// `--metrics-tls-cipher-suites`, left out when empty.
        cipher_suites: String,
    },
}

/// The exporters' projected volume of the direct write path (token and CA bundle).
pub const NRT_SERVER_VOLUME: &str = "nrt-server";

/// The direct write path, rendered while our API server serves the NRT API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectWrite {
    /// The write Service ([`WRITE_SERVICE`]), as a base URL.
    pub url: String,
    /// The host name the serving certificate names: the Service the APIService uses.
    pub tls_server_name: String,
    /// The write Service's admin port, as a base URL: where the exporters ask whether the
    /// server holds their node's object.
    pub admin_url: String,
    /// The ConfigMap holding the CA bundle that verifies the server's certificate.
    pub ca_config_map: String,
    /// The key of the bundle in it (the certificate mode's injector decides).
    pub ca_key: String,
}

impl DirectWrite {
    /// The exporter's flags.
    pub fn args(&self) -> [String; 5] {
        [
            format!("{NRT_SERVER_FLAG}={}", self.url),
            format!("{NRT_SERVER_TLS_NAME_FLAG}={}", self.tls_server_name),
            format!("{NRT_SERVER_ADMIN_URL_FLAG}={}", self.admin_url),
            format!("{NRT_SERVER_CA_FILE_FLAG}={TOKEN_MOUNT_DIR}/{CA_FILE_NAME}"),
            format!("{NRT_TOKEN_FILE_FLAG}={TOKEN_MOUNT_DIR}/{TOKEN_FILE_NAME}"),
        ]
    }

    /// The projected volume: the kubelet writes a token for our server's audience (rotated
    /// before it expires) beside the CA bundle. The ConfigMap is optional so an exporter never
    /// waits for it: without the bundle the exporter publishes through kube-apiserver.
    pub fn volume(&self) -> Value {
        json!({"name": NRT_SERVER_VOLUME, "projected": {"sources": [
            {"serviceAccountToken": {
                "audience": TOKEN_AUDIENCE,
                "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                "path": TOKEN_FILE_NAME,
            }},
            {"configMap": {
                "name": self.ca_config_map,
                "items": [{"key": self.ca_key, "path": CA_FILE_NAME}],
                "optional": true,
            }},
        ]}})
    }
}

/// The ConfigMap with the CA bundle of the direct write path
/// ([`names::APISERVER_CA_CONFIG_MAP`]): `bundle` under `key` when the controllers write it,
/// `annotations` when an injector fills it.
pub fn ca_config_map(
    namespace: &str,
    key: &str,
    bundle: Option<&str>,
    annotations: std::collections::BTreeMap<String, String>,
) -> Result<ConfigMap, RenderError> {
    let mut config_map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": names::APISERVER_CA_CONFIG_MAP, "namespace": namespace,
            "labels": names::labels(names::APISERVER, names::COMPONENT_APISERVER),
        },
    });
    if !annotations.is_empty() {
        config_map["metadata"]["annotations"] = json!(annotations);
    }
    if let Some(bundle) = bundle {
        config_map["data"] = json!({key: bundle});
    }
    typed("API server CA ConfigMap", config_map)
}

/// The Service the exporters write through ([`WRITE_SERVICE`]): the API server's pods, Ready
/// or not (`publishNotReadyAddresses`), on the same port as the Service the APIService uses.
pub fn write_service(namespace: &str) -> Result<Service, RenderError> {
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": WRITE_SERVICE, "namespace": namespace,
            "labels": names::labels(names::APISERVER, names::COMPONENT_APISERVER),
        },
        "spec": {
            "type": "ClusterIP",
            "publishNotReadyAddresses": true,
            "selector": names::selector_labels(names::APISERVER, names::COMPONENT_APISERVER),
            "ports": [
                {"name": "https", "protocol": "TCP", "port": 443, "targetPort": "https"},
                {"name": "health", "protocol": "TCP", "port": ADMIN_PORT, "targetPort": "health"},
            ],
        },
    });
    typed("the exporters' write Service", service)
}

/// What every exporter DaemonSet shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RteSettings {
    /// The operator's namespace.
    pub namespace: String,
    /// The `NUMAResourcesOperator`'s name (DaemonSets are `<nro>-<pool>`).
    pub nro_name: String,
    /// The image: the controllers' own.
    pub image: String,
    /// klog verbosity from the spec's `logLevel`.
    pub verbosity: u8,
    /// The metrics endpoint.
    pub metrics: MetricsMode,
    /// Run under OpenShift's SELinux type for device plugins (`container_device_plugin_t`), which
    /// may open the kubelet's podresources socket.
    pub openshift_selinux: bool,
    /// The direct write path, while our API server serves the NRT API.
    pub direct_write: Option<DirectWrite>,
}

/// The exporter arguments for one node group's normalized config.
pub fn args(config: &NodeGroupConfig, verbosity: u8, metrics: &MetricsMode) -> Vec<String> {
    let mut args = vec![
        "rte".to_owned(),
        format!("-v={verbosity}"),
        "--sysfs=/host-sys".to_owned(),
        "--podresources-socket=unix:///host-podresources/kubelet.sock".to_owned(),
        "--refresh-node-resources".to_owned(),
        "--add-nrt-owner=false".to_owned(),
    ];
    let mode = config.info_refresh_mode.clone().unwrap_or(InfoRefreshMode::Periodic);
    if mode == InfoRefreshMode::Events {
        args.push("--sleep-interval=0".to_owned());
    } else {
        let period = config.info_refresh_period.unwrap_or(numaresources_api::operator::defaults::INFO_REFRESH_PERIOD);
        args.push(format!("--sleep-interval={period}"));
    }
    if mode == InfoRefreshMode::Periodic {
        args.push(format!("--podresources-poll-interval={ALLOCATION_POLL_OFF}"));
    } else {
        args.push(format!("--notify-file={NOTIFY_FILE}"));
        args.push(format!("--podresources-poll-interval={ALLOCATION_POLL_INTERVAL}"));
    }
    if config.info_refresh_pause == Some(InfoRefreshPauseMode::Enabled) {
        args.push("--no-publish".to_owned());
    }
    if config.unmanaged_memory == Some(UnmanagedMemoryMode::Omit) {
        args.push("--unmanaged-memory=omit".to_owned());
    }
    match fingerprint_method(config) {
        None => args.push("--pods-fingerprint=false".to_owned()),
        Some(method) => {
            args.push("--pods-fingerprint".to_owned());
            args.push(format!("--pods-fingerprint-method={method}"));
            args.push(format!("--pods-fingerprint-status-file={PFP_STATUS_FILE}"));
        }
    }
    match metrics {
        MetricsMode::Http => args.push("--metrics-mode=http".to_owned()),
        MetricsMode::HttpTls { min_version, cipher_suites } => {
            args.push("--metrics-mode=httptls".to_owned());
            if !min_version.is_empty() {
                args.push(format!("--metrics-tls-min-version={min_version}"));
            }
            if !cipher_suites.is_empty() {
                args.push(format!("--metrics-tls-cipher-suites={cipher_suites}"));
            }
        }
    }
    args
}

fn fingerprint_method(config: &NodeGroupConfig) -> Option<&'static str> {
    match config.pods_fingerprinting.clone().unwrap_or(PodsFingerprintingMode::EnabledExclusiveResources) {
        PodsFingerprintingMode::Disabled => None,
        PodsFingerprintingMode::Enabled => Some("all"),
        _ => Some("with-exclusive-resources"),
    }
}

/// The labels of one group's exporter pods (the last one makes each DaemonSet's selector its own).
pub fn pod_labels(pool: &str) -> std::collections::BTreeMap<String, String> {
    let mut labels = names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE);
    labels.insert(names::LABEL_NODE_GROUP.to_owned(), pool.to_owned());
    labels
}

/// The exporter DaemonSet of one pool. `config_hash` is the hash of the pool's ConfigMap data.
pub fn daemon_set(settings: &RteSettings, pool: &ResolvedPool, config_hash: &str) -> Result<DaemonSet, RenderError> {
    let name = names::node_group_object_name(&settings.nro_name, &pool.pool);
    let labels = pod_labels(&pool.pool);
    let mut selector = names::selector_labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE);
    selector.insert(names::LABEL_NODE_GROUP.to_owned(), pool.pool.clone());
    let fingerprinting = fingerprint_method(&pool.config).is_some();
    let tls = matches!(settings.metrics, MetricsMode::HttpTls { .. });

    let mut volume_mounts = vec![
        json!({"name": "host-sys", "mountPath": "/host-sys", "readOnly": true}),
        json!({"name": "host-podresources", "mountPath": "/host-podresources"}),
        json!({"name": "host-run-rte", "mountPath": "/host-run-rte"}),
        json!({"name": "rte-config-volume", "mountPath": CONFIG_DIR, "readOnly": true}),
    ];
    let mut volumes = vec![
        json!({"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}}),
        json!({"name": "host-podresources", "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}}),
        json!({"name": "host-run-rte", "hostPath": {"path": "/run/rte", "type": "DirectoryOrCreate"}}),
        json!({"name": "rte-config-volume", "configMap": {"name": name, "optional": true}}),
    ];
    if fingerprinting {
        volume_mounts.push(json!({"name": "run-pfpstatus", "mountPath": "/run/pfpstatus"}));
        volumes.push(json!({"name": "run-pfpstatus", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}));
    }
    let mut args = args(&pool.config, settings.verbosity, &settings.metrics);
    if let Some(direct) = &settings.direct_write {
        args.extend(direct.args());
        volume_mounts.push(json!({"name": NRT_SERVER_VOLUME, "mountPath": TOKEN_MOUNT_DIR, "readOnly": true}));
        volumes.push(direct.volume());
    }
    if tls {
        // Tied to the metrics mode, not to fingerprinting (upstream's quirk).
        volume_mounts.push(json!({"name": METRICS_CERT_SECRET, "mountPath": METRICS_CERTS_DIR, "readOnly": true}));
        volumes.push(json!({"name": METRICS_CERT_SECRET, "secret": {"secretName": METRICS_CERT_SECRET}}));
    }
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let env = json!([
        {"name": "NODE_NAME", "valueFrom": field("spec.nodeName")},
        {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
        {"name": "POD_NAME", "valueFrom": field("metadata.name")},
        {"name": "REFERENCE_NAMESPACE", "valueFrom": field("metadata.namespace")},
        {"name": "REFERENCE_POD_NAME", "valueFrom": field("metadata.name")},
        {"name": "REFERENCE_CONTAINER_NAME", "value": names::SHARED_POOL_CONTAINER},
        {"name": "METRICS_PORT", "value": METRICS_PORT.to_string()},
    ]);
    let mut security_context = json!({
        // Root for the podresources socket's permissions; no capabilities beyond that.
        "runAsUser": 0,
        "runAsGroup": 0,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]},
    });
    if settings.openshift_selinux {
        security_context["seLinuxOptions"] = json!({"type": "container_device_plugin_t", "level": "s0"});
    }
    let mut affinity = json!({
        // A second exporter on a node (the node is in two groups) stays Pending: visible, harmless.
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": names::selector_labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE)},
        }]},
    });
    if let Some(term) = node_selector_term(&pool.node_selector) {
        affinity["nodeAffinity"] =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}});
    }
    let mut pod_spec = json!({
        "serviceAccountName": RTE_SERVICE_ACCOUNT,
        "priorityClassName": "system-node-critical",
        "readinessGates": [{"conditionType": "PodresourcesFetched"}, {"conditionType": "NodeTopologyUpdated"}],
        "affinity": affinity,
        "containers": [
            {
                "name": RTE_CONTAINER,
                "image": settings.image,
                "imagePullPolicy": "IfNotPresent",
                "args": args,
                "env": env,
                "ports": [{"name": "metrics-port", "containerPort": METRICS_PORT, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
                "securityContext": security_context,
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": volume_mounts,
            },
            {
                // Never gets exclusive CPUs, so its cpuset is the shared pool (kubernetes#102190).
                "name": names::SHARED_POOL_CONTAINER,
                "image": settings.image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["pause"],
                "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}},
                "securityContext": {
                    "runAsNonRoot": true,
                    "runAsUser": 65532,
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
                "terminationMessagePolicy": "FallbackToLogsOnError",
            },
        ],
        "volumes": volumes,
    });
    if !pool.config.tolerations.is_empty() {
        pod_spec["tolerations"] = serde_json::to_value(&pool.config.tolerations).unwrap_or(Value::Null);
    }
    let mut ds_labels = labels.clone();
    ds_labels.insert(names::LABEL_NRO_NAME.to_owned(), settings.nro_name.clone());
    typed(
        "exporter DaemonSet",
        json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": settings.namespace, "labels": ds_labels},
            "spec": {
                "selector": {"matchLabels": selector},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {names::ANNOTATION_CONFIG_HASH: config_hash},
                    },
                    "spec": pod_spec,
                },
            },
        }),
    )
}

/// A label selector as one required node selector term; `None` for the empty selector (every
/// node), which needs no term.
fn node_selector_term(selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> Option<Value> {
    let mut expressions: Vec<Value> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| json!({"key": key, "operator": "In", "values": [value]}))
        .collect();
    for requirement in selector.match_expressions.iter().flatten() {
        // LabelSelector and NodeSelector operators share In/NotIn/Exists/DoesNotExist.
        let mut expression = json!({"key": requirement.key, "operator": requirement.operator});
        if let Some(values) = &requirement.values
            && !values.is_empty()
        {
            expression["values"] = json!(values);
        }
        expressions.push(expression);
    }
    (!expressions.is_empty()).then(|| json!({"matchExpressions": expressions}))
}

/// The metrics Service of every exporter (OpenShift, `httptls`): its annotation makes the
/// service-ca operator issue [`METRICS_CERT_SECRET`], which the exporters serve with.
pub fn metrics_service(namespace: &str) -> Result<Service, RenderError> {
    typed(
        "exporter metrics Service",
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": METRICS_SERVICE, "namespace": namespace,
                "labels": names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE),
                "annotations": {"service.beta.openshift.io/serving-cert-secret-name": METRICS_CERT_SECRET},
            },
            "spec": {
                "selector": names::selector_labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE),
                "ports": [{"name": "metrics-port", "port": METRICS_PORT, "targetPort": "metrics-port", "protocol": "TCP"}],
            },
        }),
    )
}

/// The exporters' ServiceAccount.
pub fn service_account(namespace: &str) -> Result<ServiceAccount, RenderError> {
    super::service_account(RTE_SERVICE_ACCOUNT, namespace, names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE))
}

/// What the exporters need cluster-wide: write their node's NRT, read their Node.
pub fn cluster_role() -> Result<ClusterRole, RenderError> {
    typed(
        "exporter ClusterRole",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": RTE_CLUSTER_ROLE, "labels": names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE)},
            "rules": [
                {"apiGroups": [nrt::GROUP], "resources": [nrt::PLURAL], "verbs": ["create", "get", "update", "patch"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            ],
        }),
    )
}

/// Binds [`cluster_role`] to the exporters' ServiceAccount.
pub fn cluster_role_binding(namespace: &str) -> Result<ClusterRoleBinding, RenderError> {
    let metadata = json!({"name": RTE_CLUSTER_ROLE, "labels": names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE)});
    binding(metadata, "ClusterRole", RTE_CLUSTER_ROLE, RTE_SERVICE_ACCOUNT, namespace)
}

/// What the exporters need in their namespace: the readiness conditions of their own pods.
pub fn role(namespace: &str) -> Result<Role, RenderError> {
    typed(
        "exporter Role",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": RTE_ROLE, "namespace": namespace, "labels": names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE)},
            "rules": [{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}],
        }),
    )
}

/// Binds [`role`] to the exporters' ServiceAccount.
pub fn role_binding(namespace: &str) -> Result<RoleBinding, RenderError> {
    let labels = names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE);
    let metadata = json!({"name": RTE_ROLE, "namespace": namespace, "labels": labels});
    binding(metadata, "Role", RTE_ROLE, RTE_SERVICE_ACCOUNT, namespace)
}

#[cfg(test)]
#[path = "rte_tests.rs"]
mod tests;
