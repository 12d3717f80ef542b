//! The install manifests of the admission webhook (`manifests/webhook/`) are typed Kubernetes
//! objects with no unknown fields, agree with each other (Service ↔ Deployment ↔ webhook
//! configurations, PodDisruptionBudget ↔ Deployment, ServiceAccount ↔ RBAC), and agree with the
//! code: every path a configuration calls is a path of the webhook crate, every flag of the
//! container is a flag of `numaresources webhook`, and the probes are served. The pod webhook's
//! configuration is not shipped here but applied by the controllers (`numaresources-pod-routing`,
//! while a `NUMAResourcesScheduler` routes pods): the same checks run on what they render.
//!
//! The flags are read from the clap derive in `cmd/src/webhook.rs` (and the global options of
//! `cmd/src/cli.rs`) by `support::clap_flags`, which says why.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, WebhookClientConfig,
};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use numaresources_tests::workspace_root;
use numaresources_webhook::{MUTATE_NODETOPOLOGY_PATH, MUTATE_PODS_PATH, VALIDATE_NODETOPOLOGY_PATH, WEBHOOK_PATHS};
use serde::Deserialize;
use support::clap_flags::Subcommand;
use support::{Install, allows, labels, pod_labels};

const DIR: &str = "manifests/webhook";
const NAMESPACE: &str = "numaresources";
const NAME: &str = "numaresources-webhook";
const LABELS: &[(&str, &str)] = &[
    ("app.kubernetes.io/name", NAME),
    ("app.kubernetes.io/part-of", "numaresources"),
    ("app.kubernetes.io/component", "webhook"),
];
const OUR_GROUP: &str = numaresources_api::operator::GROUP;
const OUR_RESOURCES: [&str; 2] = ["numaresourcesoperators", "numaresourcesschedulers"];
/// Namespaces whose pods must never wait on the pod webhook.
const NEVER_CALLED_FOR: [&str; 4] = ["kube-system", "kube-public", "kube-node-lease", NAMESPACE];

/// The kinds the directory ships, each at least once.
const KINDS: [&str; 8] = [
    "Deployment",
    "Service",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "PodDisruptionBudget",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// Every object of `manifests/webhook/`, typed with no unknown field and of a kind of [`KINDS`].
fn manifests() -> Install {
    let manifests = Install::from_dir(DIR);
    manifests.assert_kinds_within(&KINDS);
    manifests
}

/// Every long flag `numaresources webhook` accepts.
fn webhook_flags() -> Subcommand {
    Subcommand::read("webhook", &["secure-port", "health-port", "cert-dir", "tls-cert-file", "namespace", "log-format"])
}

/// The fields both webhook kinds share (read through their common JSON form; a validating
/// webhook has no reinvocationPolicy).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Webhook {
    name: String,
    #[serde(skip)]
    mutating: bool,
    client_config: WebhookClientConfig,
    admission_review_versions: Vec<String>,
    side_effects: String,
    failure_policy: Option<String>,
    match_policy: Option<String>,
    timeout_seconds: Option<i32>,
    reinvocation_policy: Option<String>,
    namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    rules: Vec<RuleWithOperations>,
}

/// The pod routing configuration as the controllers apply it (without the caBundle they may add).
fn pod_routing() -> MutatingWebhookConfiguration {
    numaresources_controllers::render::pod_routing::configuration(NAMESPACE, None).unwrap()
}

/// Every webhook of both shipped configurations and of the rendered pod routing one.
fn webhooks(m: &Install) -> Vec<Webhook> {
    let rendered = [pod_routing()];
    let mutating = m.mutating.iter().chain(&rendered);
    let mutating = mutating.flat_map(|c| c.webhooks.iter().flatten()).map(serde_json::to_value);
    let validating = m.validating.iter().flat_map(|c| c.webhooks.iter().flatten()).map(serde_json::to_value);
    let both = mutating.map(|w| (w, true)).chain(validating.map(|w| (w, false)));
    both.map(|(w, mutating)| Webhook { mutating, ..serde_json::from_value(w.unwrap()).unwrap() }).collect()
}

impl Webhook {
    fn path(&self) -> &str {
        self.client_config.service.as_ref().and_then(|s| s.path.as_deref()).unwrap_or_default()
    }

    /// Whether a rule matches `operation` on `resource` of `group`/`version` (wildcards included).
    fn matches(&self, group: &str, version: &str, resource: &str, operation: &str) -> bool {
        let has = support::lists_or_wildcard;
        self.rules.iter().any(|rule| {
            has(&rule.api_groups, group)
                && has(&rule.api_versions, version)
                && has(&rule.resources, resource)
                && has(&rule.operations, operation)
        })
    }
}

/// What the ClusterRoleBindings of this directory grant `namespace/name`; every ClusterRole they
/// name is shipped here.
fn cluster_rules_of(m: &Install, namespace: &str, name: &str) -> Vec<PolicyRule> {
    for binding in &m.cluster_role_bindings {
        if support::binds(binding.subjects.as_deref(), namespace, name) {
            let role = &binding.role_ref.name;
            assert!(support::named(&m.cluster_roles, role).is_some(), "ClusterRole {role} is not shipped");
        }
    }
    m.cluster_rules_of(namespace, name)
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn the_kustomization_lists_every_manifest() {
    let dir = workspace_root().join(DIR);
    let files = support::manifest_files(&dir);
    assert!(!files.is_empty(), "no YAML in {DIR}");
    assert_eq!(support::kustomization_resources(&dir), files);
}

#[test]
fn every_document_is_a_known_typed_object_in_the_right_place() {
    let m = manifests();
    m.assert_placed_once(&[]);
    for (_, origin, meta) in &m.objects {
        let labels = labels(meta);
        for (key, value) in LABELS {
            assert_eq!(labels.get(*key).map(String::as_str), Some(*value), "{origin}: label {key}");
        }
    }
    for kind in KINDS {
        assert!(m.ships(kind), "no {kind} in {DIR}");
    }
    let pod_labels = pod_labels(m.single_deployment());
    for (key, value) in LABELS {
        assert_eq!(pod_labels.get(*key).map(String::as_str), Some(*value), "pod template label {key}");
    }
}

#[test]
fn every_webhook_calls_a_path_of_the_crate_through_the_service() {
    let m = manifests();
    let service = m.single_service();
    let service_ports: Vec<i32> = service.spec.as_ref().unwrap().ports.iter().flatten().map(|p| p.port).collect();
    let webhooks = webhooks(&m);
    let mut called = BTreeSet::new();
    for webhook in &webhooks {
        let name = &webhook.name;
        assert!(name.split('.').count() >= 3, "{name}: webhook names are fully qualified");
        assert!(webhook.client_config.url.is_none(), "{name}: call the Service, not a URL");
        assert!(
            webhook.client_config.ca_bundle.as_ref().is_none_or(|b| b.0.is_empty()),
            "{name}: caBundle is injected, not shipped"
        );
        let reference =
            webhook.client_config.service.as_ref().unwrap_or_else(|| panic!("{name}: no service reference"));
        assert_eq!(reference.namespace, NAMESPACE, "{name}");
        assert_eq!(Some(&reference.name), service.metadata.name.as_ref(), "{name}");
        assert!(service_ports.contains(&reference.port.unwrap_or(443)), "{name}: the Service has no such port");
        assert!(WEBHOOK_PATHS.contains(&webhook.path()), "{name}: {} is not a path of the webhook", webhook.path());
        called.insert(webhook.path().to_owned());

        assert_eq!(webhook.admission_review_versions, ["v1"], "{name}: the webhook serves admission.k8s.io/v1 only");
        assert_eq!(webhook.side_effects, "None", "{name}: no side effects, dry runs included");
        assert_eq!(webhook.match_policy.as_deref(), Some("Equivalent"), "{name}");
        let timeout = webhook.timeout_seconds.unwrap_or_else(|| panic!("{name}: set timeoutSeconds explicitly"));
        assert!((1..=30).contains(&timeout), "{name}: timeoutSeconds {timeout}");
        assert!(webhook.failure_policy.is_some(), "{name}: set failurePolicy explicitly");
    }
    let all: BTreeSet<String> = WEBHOOK_PATHS.iter().map(|p| (*p).to_owned()).collect();
    assert_eq!(called, all, "every path of the crate is called by a webhook");
}

#[test]
fn the_pod_webhook_fails_open_and_never_waits_on_itself() {
    let m = manifests();
    let shipped = m.mutating.iter().flat_map(|c| c.webhooks.iter().flatten());
    let shipped: Vec<&str> = shipped.filter_map(|w| w.client_config.service.as_ref()?.path.as_deref()).collect();
    assert!(!shipped.contains(&MUTATE_PODS_PATH), "the controllers apply the pod webhook, the install must not");
    let webhooks = webhooks(&m);
    let pods: Vec<&Webhook> = webhooks.iter().filter(|w| w.path() == MUTATE_PODS_PATH).collect();
    assert_eq!(pods.len(), 1);
    let pod = pods[0];
    assert!(pod.mutating);
    assert_eq!(pod.failure_policy.as_deref(), Some("Ignore"), "a pod must never be blocked by the webhook");
    assert!(pod.matches("", "v1", "pods", "CREATE"));
    for operation in ["UPDATE", "DELETE", "CONNECT"] {
        assert!(!pod.matches("", "v1", "pods", operation), "pods {operation} is not ours to mutate");
    }
    assert!(!pod.matches("", "v1", "pods/binding", "CREATE"), "no subresources");
    // The namespaceSelector keeps the system namespaces and ours out: a restart of the webhook
    // (or of anything it depends on) never waits on the webhook.
    let selector = pod.namespace_selector.clone().expect("the pod webhook needs a namespaceSelector");
    for namespace in NEVER_CALLED_FOR {
        let namespace_labels = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), namespace.to_owned())]);
        assert!(!numaresources_api::selector::matches(&selector, &namespace_labels), "{namespace} is not excluded");
    }
    let workloads = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), "workloads".to_owned())]);
    assert!(numaresources_api::selector::matches(&selector, &workloads), "ordinary namespaces are selected");
    assert_ne!(pod.reinvocation_policy.as_deref(), Some("IfNeeded"), "routing needs no second pass");
}

#[test]
fn our_objects_fail_closed_with_defaults_reinvoked_and_deletes_never_blocked() {
    let m = manifests();
    let webhooks = webhooks(&m);
    for (path, mutating) in [(MUTATE_NODETOPOLOGY_PATH, true), (VALIDATE_NODETOPOLOGY_PATH, false)] {
        let found: Vec<&Webhook> = webhooks.iter().filter(|w| w.path() == path).collect();
        assert_eq!(found.len(), 1, "{path}");
        let webhook = found[0];
        assert_eq!(webhook.mutating, mutating, "{path}");
        assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"), "{path}: our objects fail closed");
        for resource in OUR_RESOURCES {
            for operation in ["CREATE", "UPDATE"] {
                assert!(webhook.matches(OUR_GROUP, "v1", resource, operation), "{path}: {resource} {operation}");
            }
            assert!(!webhook.matches(OUR_GROUP, "v1", resource, "DELETE"), "{path}: a DELETE must never be blocked");
            assert!(!webhook.matches(OUR_GROUP, "v1", &format!("{resource}/status"), "UPDATE"), "{path}: status");
        }
        assert!(!webhook.matches("", "v1", "pods", "CREATE"), "{path}");
        for rule in &webhook.rules {
            assert!(!rule.api_groups.iter().flatten().any(|g| g == "*"), "{path}: OLM refuses `*` groups");
        }
    }
    let defaults = webhooks.iter().find(|w| w.path() == MUTATE_NODETOPOLOGY_PATH).unwrap();
    assert_eq!(defaults.reinvocation_policy.as_deref(), Some("IfNeeded"), "defaults run again after later mutations");
}

#[test]
fn the_service_and_the_deployment_agree_on_ports_and_flags() {
    let m = manifests();
    let container = m.single_container();
    let accepted = webhook_flags();
    let flags = accepted.container_flags(container);
    let ports = container.ports.as_deref().unwrap_or_default();
    let port_named = |name: &str| ports.iter().find(|p| p.name.as_deref() == Some(name)).map(|p| p.container_port);

    let service = m.single_service().spec.as_ref().unwrap();
    for (key, value) in service.selector.clone().unwrap_or_default() {
        assert_eq!(
            pod_labels(m.single_deployment()).get(&key),
            Some(&value),
            "Service selector {key}={value} misses the pods"
        );
    }
    let https = service.ports.iter().flatten().find(|p| p.port == 443).expect("the Service has no port 443");
    let Some(IntOrString::String(target)) = &https.target_port else { panic!("name the targetPort") };
    let secure_port: i32 = accepted.value(&flags, "secure-port").parse().unwrap();
    assert_eq!(port_named(target), Some(secure_port), "targetPort {target} is not --secure-port");

    let health_port: i32 = accepted.value(&flags, "health-port").parse().unwrap();
    assert_ne!(health_port, 0, "the probes need the health port");
    for (probe, path) in [(&container.readiness_probe, "/readyz"), (&container.liveness_probe, "/livez")] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).unwrap_or_else(|| panic!("no {path} probe"));
        assert_eq!(get.path.as_deref(), Some(path));
        assert_ne!(get.scheme.as_deref(), Some("HTTPS"), "the health port is plain HTTP");
        let IntOrString::String(name) = &get.port else { panic!("name the probe port") };
        assert_eq!(port_named(name), Some(health_port), "{path}: probe port {name} is not --health-port");
    }
    if let Some(address) = flags.get("bind-address") {
        assert!(address == "0.0.0.0" || address == "::", "--bind-address={address} is unreachable");
    }

    // The generated certificate covers the name kube-apiserver verifies.
    let service_name = format!("{NAME}.{NAMESPACE}.svc");
    assert!(accepted.value(&flags, "tls-sni-names").split(',').any(|n| n == service_name), "--tls-sni-names");

    // The own namespace (never routed) is the pod's, from the downward API.
    let env = container.env.as_deref().unwrap_or_default();
    let namespace = env.iter().find(|e| e.name == "POD_NAMESPACE").expect("POD_NAMESPACE is not set");
    let field = namespace.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).map(|f| f.field_path.as_str());
    assert_eq!(field, Some("metadata.namespace"));
    let source = std::fs::read_to_string(workspace_root().join("cmd/src/webhook.rs")).unwrap();
    assert!(source.contains("env = \"POD_NAMESPACE\""), "--namespace is not read from POD_NAMESPACE");

    let value_of = |flag: &str| accepted.value(&flags, flag);
    m.assert_serving_certificate_mounts(value_of, "/tmp/k8s-webhook-server/serving-certs/");
}

#[test]
fn two_replicas_a_disruption_budget_and_a_restricted_pod() {
    let m = manifests();
    let spec = m.single_deployment().spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2), "the configuration for our objects fails closed: keep two");
    assert_eq!(m.disruption_budgets.len(), 1);
    let budget = m.disruption_budgets[0].spec.as_ref().unwrap();
    assert_eq!(budget.min_available, Some(IntOrString::Int(1)));
    let selector = budget.selector.as_ref().and_then(|s| s.match_labels.clone()).expect("PDB selector");
    for (key, value) in &selector {
        assert_eq!(pod_labels(m.single_deployment()).get(key), Some(value), "the PDB does not select the pods");
    }
    for (key, value) in spec.selector.match_labels.clone().unwrap_or_default() {
        assert_eq!(
            pod_labels(m.single_deployment()).get(&key),
            Some(&value),
            "the Deployment selector misses its pods"
        );
    }

    let resources = m.single_container().resources.clone().expect("no resources");
    assert!(resources.requests.as_ref().is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")));
    assert!(resources.limits.as_ref().is_some_and(|l| l.contains_key("memory")), "no memory limit");

    let pod = m.single_pod_spec();
    assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
    assert_ne!(pod.host_network, Some(true));
    let pod_context = pod.security_context.clone().unwrap_or_default();
    let context = m.single_container().security_context.clone().expect("no container securityContext");
    assert_eq!(context.allow_privilege_escalation, Some(false));
    assert_eq!(context.read_only_root_filesystem, Some(true));
    assert_eq!(context.run_as_non_root.or(pod_context.run_as_non_root), Some(true));
    assert!(context.capabilities.and_then(|c| c.drop).is_some_and(|d| d.iter().any(|c| c == "ALL")));
    let seccomp = context.seccomp_profile.or(pod_context.seccomp_profile).map(|s| s.type_);
    assert_eq!(seccomp.as_deref(), Some("RuntimeDefault"));

    let pre_stop =
        m.single_container().lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).and_then(|p| p.sleep.as_ref());
    let sleep = pre_stop.expect("preStop sleep").seconds;
    let grace = pod.termination_grace_period_seconds.expect("terminationGracePeriodSeconds");
    assert!(grace > sleep + 30, "grace {grace}s must cover preStop {sleep}s and the 30 s drain");
}

#[test]
fn the_service_account_reads_what_the_caches_watch_and_nothing_more() {
    let m = manifests();
    assert!(m.service_accounts.iter().any(|sa| sa.metadata.name.as_deref() == Some(NAME)));
    let rules = cluster_rules_of(&m, NAMESPACE, NAME);
    let allows = |group: &str, resource: &str, verb: &str| allows(&rules, group, resource, verb, None);
    for verb in ["get", "list", "watch"] {
        assert!(allows(OUR_GROUP, "numaresourcesschedulers", verb), "{verb} numaresourcesschedulers");
        assert!(allows("", "namespaces", verb), "{verb} namespaces");
        assert!(allows("", "nodes", verb), "{verb} nodes");
    }
    let readable: BTreeSet<&str> = ["numaresourcesschedulers", "namespaces", "nodes"].into();
    for rule in &rules {
        assert!(rule.verbs.iter().all(|v| ["get", "list", "watch"].contains(&v.as_str())), "read only: {rule:?}");
        assert!(rule.resources.iter().flatten().all(|r| readable.contains(r.as_str())), "least privilege: {rule:?}");
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none(), "{rule:?}");
    }
}

/// The probe paths answer on the admin router and the webhook paths on the HTTPS router.
#[tokio::test]
async fn probe_and_webhook_paths_are_routes_of_the_webhook() {
    use axum::body::Body;
    use tower::ServiceExt;

    let (cluster, mut feeds) = numaresources_webhook::ClusterCache::new();
    feeds.set_scheduler(None);
    feeds.set_namespaces([]);
    feeds.set_nodes([]);
    let webhook =
        numaresources_webhook::Webhook::with_cluster(numaresources_webhook::Config::new(NAMESPACE).unwrap(), cluster);
    let m = manifests();
    let container = m.single_container();
    for probe in [&container.readiness_probe, &container.liveness_probe] {
        let path = probe.as_ref().and_then(|p| p.http_get.as_ref()).and_then(|g| g.path.clone()).unwrap();
        let request = http::Request::get(&path).body(Body::empty()).unwrap();
        let response = numaresources_runtime::admin::router(webhook.readiness(), Default::default())
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
    }
    for webhook_config in webhooks(&m) {
        let request = http::Request::post(webhook_config.path())
            .header("content-type", "application/json")
            .body(Body::from("{}"))
            .unwrap();
        let response = webhook.router().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200, "POST {} answers with a review", webhook_config.path());
    }
}
