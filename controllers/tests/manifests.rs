//! The checked-in install manifests agree with the code: the controllers' RBAC allows every call
//! the reconcilers make and covers every permission in the roles they write (Kubernetes refuses
//! to let a subject grant what it does not hold), and every sample CR is valid and renders.
//!
//! The calls themselves are checked where they are made: the in-memory API of the reconciler
//! tests (`controllers/src/fake_rbac.rs`) answers `403` to anything `rbac.yaml` does not allow.
//! The list here is the reader's summary, plus what no request shows: `bind` and the
//! `finalizers` permission admission asks for.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::path::PathBuf;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use numaresources_api::operator::validation::{validate_operator, validate_scheduler};
use numaresources_api::operator::{NUMAResourcesOperator, NUMAResourcesScheduler};
use numaresources_controllers::nodegroups::{self, NodeInfo, PoolInfo};
use numaresources_controllers::render::{apiserver, rte, scheduler};
use serde::Deserialize;
use serde_json::Value;

fn manifests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(manifests().join(file)).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The rules of the controllers' ClusterRole, Role in `numaresources` and Role in `kube-system`.
fn controller_rules() -> (Vec<PolicyRule>, Vec<PolicyRule>, Vec<PolicyRule>) {
    let mut cluster = Vec::new();
    let mut namespaced = Vec::new();
    let mut kube_system = Vec::new();
    for doc in documents("controllers/rbac.yaml") {
        match (doc["kind"].as_str().unwrap(), doc["metadata"]["namespace"].as_str()) {
            ("ClusterRole", _) => cluster = serde_json::from_value::<ClusterRole>(doc).unwrap().rules.unwrap(),
            ("Role", Some("numaresources")) => namespaced = serde_json::from_value::<Role>(doc).unwrap().rules.unwrap(),
            ("Role", Some("kube-system")) => kube_system = serde_json::from_value::<Role>(doc).unwrap().rules.unwrap(),
            _ => {}
        }
    }
    (cluster, namespaced, kube_system)
}

fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str, name: Option<&str>) -> bool {
    rules.iter().any(|rule| {
        rule.api_groups.iter().flatten().any(|g| g == group)
            && rule.resources.iter().flatten().any(|r| r == resource)
            && rule.verbs.iter().any(|v| v == verb)
            && match (&rule.resource_names, name) {
                (None, _) => true,
                (Some(names), _) if names.is_empty() => true,
                (Some(names), Some(name)) => names.iter().any(|n| n == name),
                (Some(_), None) => false,
            }
    })
}

#[test]
fn the_controllers_may_make_every_call_they_make() {
    let (cluster, namespaced, kube_system) = controller_rules();
    let either =
        |g: &str, r: &str, v: &str, n: Option<&str>| allows(&cluster, g, r, v, n) || allows(&namespaced, g, r, v, n);
    type Call = (&'static str, &'static str, &'static str, Option<&'static str>);
    let cluster_calls: &[Call] = &[
        ("nodetopology.openshift.io", "numaresourcesoperators", "watch", None),
        ("nodetopology.openshift.io", "numaresourcesoperators", "patch", Some("numaresourcesoperator")),
        ("nodetopology.openshift.io", "numaresourcesoperators/status", "patch", Some("numaresourcesoperator")),
        ("nodetopology.openshift.io", "numaresourcesschedulers/status", "patch", Some("numaresourcesscheduler")),
        ("nodetopology.openshift.io", "numaresourcesoperators/finalizers", "update", Some("numaresourcesoperator")),
        ("", "nodes", "list", None),
        ("", "nodes", "watch", None),
        ("", "nodes/proxy", "get", Some("worker-a")),
        ("rbac.authorization.k8s.io", "clusterroles", "create", None),
        ("rbac.authorization.k8s.io", "clusterroles", "patch", Some("numaresources:rte")),
        ("rbac.authorization.k8s.io", "clusterrolebindings", "patch", Some("numaresources:scheduler:kube-scheduler")),
        ("rbac.authorization.k8s.io", "clusterroles", "bind", Some("system:kube-scheduler")),
        ("rbac.authorization.k8s.io", "clusterroles", "bind", Some("system:auth-delegator")),
        ("apiregistration.k8s.io", "apiservices", "create", None),
        ("apiregistration.k8s.io", "apiservices", "patch", Some("v1alpha2.topology.node.k8s.io")),
        ("apiregistration.k8s.io", "apiservices", "delete", Some("v1alpha2.topology.node.k8s.io")),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "get",
            Some("noderesourcetopologies.topology.node.k8s.io"),
        ),
        ("events.k8s.io", "events", "create", None),
        ("machineconfiguration.openshift.io", "machineconfigpools", "list", None),
        ("machineconfiguration.openshift.io", "kubeletconfigs", "list", None),
        ("config.openshift.io", "clusterversions", "get", Some("version")),
        // Switching to the cluster's NRT API removes our server's cluster-scoped RBAC.
        ("rbac.authorization.k8s.io", "clusterroles", "delete", Some("numaresources:apiserver")),
        ("rbac.authorization.k8s.io", "clusterrolebindings", "delete", Some("numaresources:apiserver")),
        // The self-managed certificate lifecycle's caBundle injection.
        ("apiregistration.k8s.io", "apiservices", "get", Some("v1alpha2.topology.node.k8s.io")),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", Some("numaresources-webhook")),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch", Some("numaresources-webhook")),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get", Some("numaresources-webhook")),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch", Some("numaresources-webhook")),
    ];
    for (g, r, v, n) in cluster_calls {
        assert!(allows(&cluster, g, r, v, *n), "cluster: {v} {g}/{r} {n:?}");
    }
    let namespace_calls: &[Call] = &[
        ("apps", "daemonsets", "list", None),
        ("apps", "daemonsets", "watch", None),
        ("apps", "daemonsets", "patch", Some("numaresourcesoperator-worker")),
        ("apps", "daemonsets", "delete", Some("numaresourcesoperator-worker")),
        ("apps", "deployments", "patch", Some("numaresources-scheduler")),
        ("apps", "deployments", "watch", None),
        ("", "configmaps", "get", Some("numaresourcesoperator-worker")),
        ("", "configmaps", "delete", Some("numaresourcesoperator-worker")),
        ("", "configmaps", "watch", None),
        ("", "secrets", "create", None),
        ("", "secrets", "get", Some("numaresources-apiserver-tls")),
        ("", "secrets", "patch", Some("numaresources-apiserver-tls")),
        ("", "secrets", "get", Some("numaresources-webhook-tls")),
        ("", "secrets", "patch", Some("numaresources-webhook-tls")),
        ("", "secrets", "get", Some("numaresources-ca")),
        ("", "secrets", "patch", Some("numaresources-ca")),
        ("", "services", "patch", Some("numaresources-apiserver")),
        ("", "serviceaccounts", "patch", Some("numaresources-rte")),
        ("rbac.authorization.k8s.io", "roles", "patch", Some("numaresources-rte")),
        ("rbac.authorization.k8s.io", "rolebindings", "patch", Some("numaresources-rte")),
        ("coordination.k8s.io", "leases", "create", None),
        ("coordination.k8s.io", "leases", "get", Some("numaresources-controllers")),
        ("coordination.k8s.io", "leases", "update", Some("numaresources-controllers")),
        ("coordination.k8s.io", "leases", "patch", Some("numaresources-controllers")),
        ("apps", "deployments", "delete", Some("numaresources-apiserver")),
        ("", "services", "delete", Some("numaresources-apiserver")),
        ("", "serviceaccounts", "delete", Some("numaresources-apiserver")),
    ];
    for (g, r, v, n) in namespace_calls {
        assert!(either(g, r, v, *n), "namespace: {v} {g}/{r} {n:?}");
    }
    for name in [
        "numaresources-apiserver:extension-apiserver-authentication-reader",
        "numaresources-scheduler:extension-apiserver-authentication-reader",
    ] {
        assert!(allows(&kube_system, "rbac.authorization.k8s.io", "rolebindings", "patch", Some(name)), "{name}");
    }
    assert!(allows(
        &kube_system,
        "rbac.authorization.k8s.io",
        "roles",
        "bind",
        Some("extension-apiserver-authentication-reader")
    ));
}

/// Every permission a rendered role grants is one the controllers hold.
fn covered(granted: &[PolicyRule], held: &[PolicyRule], what: &str) {
    for rule in granted {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    let names: Vec<Option<&str>> = match &rule.resource_names {
                        Some(names) if !names.is_empty() => names.iter().map(|n| Some(n.as_str())).collect(),
                        _ => vec![None],
                    };
                    for name in names {
                        assert!(
                            allows(held, group, resource, verb, name),
                            "{what} grants {verb} {group}/{resource} {name:?}, which the controllers do not hold"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_controllers_hold_what_the_roles_they_write_grant() {
    let (cluster, namespaced, _) = controller_rules();
    let both: Vec<PolicyRule> = cluster.iter().chain(&namespaced).cloned().collect();
    covered(&rte::cluster_role().unwrap().rules.unwrap(), &cluster, "the exporter ClusterRole");
    covered(&scheduler::cluster_role().unwrap().rules.unwrap(), &cluster, "the scheduler ClusterRole");
    for role in apiserver::objects("numaresources", "img").unwrap().cluster_roles {
        covered(&role.rules.unwrap_or_default(), &cluster, "an API server ClusterRole");
    }
    covered(&rte::role("numaresources").unwrap().rules.unwrap(), &both, "the exporter Role");
    covered(&scheduler::leader_election_role("numaresources").unwrap().rules.unwrap(), &both, "the scheduler Role");
}

#[test]
fn every_sample_is_valid_and_renders() {
    let nodes = [NodeInfo {
        name: "worker-a".into(),
        labels: [("node-role.kubernetes.io/worker".to_owned(), String::new())].into(),
    }];
    let pools = [PoolInfo {
        name: "worker".into(),
        labels: Default::default(),
        node_selector: Some(
            serde_json::from_value(serde_json::json!({"matchLabels": {"node-role.kubernetes.io/worker": ""}})).unwrap(),
        ),
    }];
    let mut seen = 0;
    for entry in std::fs::read_dir(manifests().join("samples")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        for doc in documents(&format!("samples/{file}")) {
            seen += 1;
            match doc["kind"].as_str().unwrap() {
                "NUMAResourcesOperator" => {
                    let nro: NUMAResourcesOperator = serde_json::from_value(doc).unwrap();
                    assert!(validate_operator(&nro).is_empty(), "{file}: {}", validate_operator(&nro));
                    let resolution =
                        nodegroups::resolve(&nro.spec.normalized().node_groups, &nodes, Some(&pools), false).unwrap();
                    assert_eq!(resolution.pools[0].nodes, ["worker-a"], "{file}");
                    let settings = rte::RteSettings {
                        namespace: "numaresources".into(),
                        nro_name: "numaresourcesoperator".into(),
                        image: "img".into(),
                        verbosity: 2,
                        metrics: rte::MetricsMode::Http,
                        openshift_selinux: false,
                        direct_write: None,
                    };
                    rte::daemon_set(&settings, &resolution.pools[0], "h").unwrap();
                }
                "NUMAResourcesScheduler" => {
                    let nrs: NUMAResourcesScheduler = serde_json::from_value(doc).unwrap();
                    assert!(validate_scheduler(&nrs).is_empty(), "{file}: {}", validate_scheduler(&nrs));
                }
                other => panic!("{file}: unexpected kind {other}"),
            }
        }
    }
    assert!(seen >= 4, "the Kubernetes and OpenShift samples of both kinds");
}
