//! The install manifests of the admission webhook (`manifests/webhook/`) are typed Kubernetes
//! objects with no unknown fields, agree with each other (Service ↔ Deployment ↔ webhook
//! configurations, PodDisruptionBudget ↔ Deployment, ServiceAccount ↔ RBAC), and agree with the
//! code: every path a configuration calls is a path of the webhook crate, every flag of the
//! container is a flag of `numaresources webhook`, and the probes are served.
//!
//! The flags are read from the clap derive in `cmd/src/webhook.rs` (and the global options of
//! `cmd/src/cli.rs`) the way `apiserver_manifests.rs` reads them, for the reason given there; the
//! reader is repeated here so that each manifest test stands alone.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, ServiceReference, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use numaresources_tests::workspace_root;
use numaresources_webhook::{MUTATE_NODETOPOLOGY_PATH, MUTATE_PODS_PATH, VALIDATE_NODETOPOLOGY_PATH, WEBHOOK_PATHS};
use serde::Serialize;
use serde::de::{Deserialize, DeserializeOwned};
use serde_json::Value;
use support::differences;

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

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Manifests {
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    disruption_budgets: Vec<PodDisruptionBudget>,
    mutating: Vec<MutatingWebhookConfiguration>,
    validating: Vec<ValidatingWebhookConfiguration>,
    /// Kind, origin (`file#document`) and metadata of every object.
    all: Vec<(String, String, ObjectMeta)>,
}

const KUSTOMIZATION: &str = "kustomization.yaml";

impl Manifests {
    fn load() -> Self {
        let mut manifests = Self::default();
        for file in yaml_files() {
            let text = std::fs::read_to_string(workspace_root().join(DIR).join(&file)).unwrap();
            let mut documents = 0;
            for (index, document) in serde_norway::Deserializer::from_str(&text).enumerate() {
                let origin = format!("{file}#{index}");
                let value = Value::deserialize(document).unwrap_or_else(|e| panic!("{origin}: not YAML: {e}"));
                if !value.is_null() {
                    documents += 1;
                    manifests.add(origin, &value);
                }
            }
            assert!(documents > 0, "{file} holds no object");
        }
        manifests
    }

    fn add(&mut self, origin: String, value: &Value) {
        let api_version = value["apiVersion"].as_str().unwrap_or_default();
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        let o = origin.clone();
        let metadata = match (api_version, kind.as_str()) {
            ("apps/v1", "Deployment") => push(&mut self.deployments, o, value, |x| &x.metadata),
            ("v1", "Service") => push(&mut self.services, o, value, |x| &x.metadata),
            ("v1", "ServiceAccount") => push(&mut self.service_accounts, o, value, |x| &x.metadata),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => push(&mut self.cluster_roles, o, value, |x| &x.metadata),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                push(&mut self.cluster_role_bindings, o, value, |x| &x.metadata)
            }
            ("policy/v1", "PodDisruptionBudget") => push(&mut self.disruption_budgets, o, value, |x| &x.metadata),
            ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
                push(&mut self.mutating, o, value, |x| &x.metadata)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
                push(&mut self.validating, o, value, |x| &x.metadata)
            }
            other => panic!("{origin}: unexpected apiVersion/kind {other:?}; teach this test the kind"),
        };
        self.all.push((kind, origin, metadata));
    }

    fn deployment(&self) -> &Deployment {
        assert_eq!(self.deployments.len(), 1, "expected exactly one Deployment");
        &self.deployments[0]
    }

    fn pod_spec(&self) -> &PodSpec {
        self.deployment().spec.as_ref().unwrap().template.spec.as_ref().expect("pod template without spec")
    }

    fn pod_labels(&self) -> BTreeMap<String, String> {
        labels(self.deployment().spec.as_ref().unwrap().template.metadata.as_ref().expect("template metadata"))
    }

    fn container(&self) -> &Container {
        let containers = &self.pod_spec().containers;
        assert_eq!(containers.len(), 1, "expected one container");
        &containers[0]
    }

    fn service(&self) -> &Service {
        assert_eq!(self.services.len(), 1, "expected exactly one Service");
        &self.services[0]
    }

    /// Every webhook of both configurations: (name, kind of configuration, its shared fields).
    fn webhooks(&self) -> Vec<Webhook> {
        let mut all = Vec::new();
        for configuration in &self.mutating {
            for w in configuration.webhooks.as_deref().unwrap_or_default() {
                all.push(Webhook {
                    name: w.name.clone(),
                    mutating: true,
                    service: w.client_config.service.clone(),
                    url: w.client_config.url.clone(),
                    ca_bundle: w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()),
                    versions: w.admission_review_versions.clone(),
                    side_effects: w.side_effects.clone(),
                    failure_policy: w.failure_policy.clone(),
                    match_policy: w.match_policy.clone(),
                    timeout: w.timeout_seconds,
                    reinvocation: w.reinvocation_policy.clone(),
                    namespace_selector: w.namespace_selector.clone(),
                    rules: w.rules.clone().unwrap_or_default(),
                });
            }
        }
        for configuration in &self.validating {
            for w in configuration.webhooks.as_deref().unwrap_or_default() {
                all.push(Webhook {
                    name: w.name.clone(),
                    mutating: false,
                    service: w.client_config.service.clone(),
                    url: w.client_config.url.clone(),
                    ca_bundle: w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()),
                    versions: w.admission_review_versions.clone(),
                    side_effects: w.side_effects.clone(),
                    failure_policy: w.failure_policy.clone(),
                    match_policy: w.match_policy.clone(),
                    timeout: w.timeout_seconds,
                    reinvocation: None,
                    namespace_selector: w.namespace_selector.clone(),
                    rules: w.rules.clone().unwrap_or_default(),
                });
            }
        }
        all
    }

    fn cluster_rules_of(&self, namespace: &str, name: &str) -> Vec<PolicyRule> {
        self.cluster_role_bindings
            .iter()
            .filter(|binding| binds_service_account(binding.subjects.as_deref(), namespace, name))
            .flat_map(|binding| {
                let role =
                    self.cluster_roles.iter().find(|r| r.metadata.name.as_deref() == Some(&binding.role_ref.name));
                role.unwrap_or_else(|| panic!("ClusterRole {} is not shipped", binding.role_ref.name))
                    .rules
                    .clone()
                    .unwrap_or_default()
            })
            .collect()
    }
}

/// The fields both webhook kinds share.
#[derive(Debug)]
struct Webhook {
    name: String,
    mutating: bool,
    service: Option<ServiceReference>,
    url: Option<String>,
    ca_bundle: Option<Vec<u8>>,
    versions: Vec<String>,
    side_effects: String,
    failure_policy: Option<String>,
    match_policy: Option<String>,
    timeout: Option<i32>,
    reinvocation: Option<String>,
    namespace_selector: Option<LabelSelector>,
    rules: Vec<RuleWithOperations>,
}

impl Webhook {
    fn path(&self) -> &str {
        self.service.as_ref().and_then(|s| s.path.as_deref()).unwrap_or_default()
    }

    /// Whether a rule matches `operation` on `resource` of `group`/`version` (wildcards included).
    fn matches(&self, group: &str, version: &str, resource: &str, operation: &str) -> bool {
        let has = |list: &Option<Vec<String>>, wanted: &str| {
            list.as_deref().unwrap_or_default().iter().any(|item| item == wanted || item == "*")
        };
        self.rules.iter().any(|rule| {
            has(&rule.api_groups, group)
                && has(&rule.api_versions, version)
                && has(&rule.resources, resource)
                && has(&rule.operations, operation)
        })
    }
}

fn yaml_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(workspace_root().join(DIR))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != KUSTOMIZATION)
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no YAML in {DIR}");
    files
}

/// Deserializes `value` as `T` and fails on anything the typed object does not give back: unknown
/// or misspelled fields, values that only deserialized by coercion. Errors carry the field path.
fn push<T: DeserializeOwned + Serialize>(
    list: &mut Vec<T>,
    origin: String,
    value: &Value,
    metadata: fn(&T) -> &ObjectMeta,
) -> ObjectMeta {
    let object: T = serde_path_to_error::deserialize(value.clone())
        .unwrap_or_else(|e| panic!("{origin}: at {}: {}", e.path(), e.inner()));
    let mut problems = Vec::new();
    differences("", value, &serde_json::to_value(&object).unwrap(), &mut problems);
    assert!(problems.is_empty(), "{origin}: fields lost or changed by the typed object:\n  {}", problems.join("\n  "));
    let meta = metadata(&object).clone();
    list.push(object);
    meta
}

fn labels(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

fn binds_service_account(subjects: Option<&[Subject]>, namespace: &str, name: &str) -> bool {
    subjects
        .unwrap_or_default()
        .iter()
        .any(|s| s.kind == "ServiceAccount" && s.name == name && s.namespace.as_deref() == Some(namespace))
}

// ---------------------------------------------------------------------------------------------
// The binary's flags, read from its clap derive
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Flag {
    default: Option<String>,
    repeatable: bool,
}

/// The `#[…]` attributes, name and type of each field of `struct <name> { … }` in `source`.
fn struct_fields(source: &str, name: &str) -> Vec<(String, String, Vec<String>)> {
    let start = source.find(&format!("struct {name} {{")).unwrap_or_else(|| panic!("`struct {name}` not found"));
    let body_start = start + source[start..].find('{').unwrap() + 1;
    let body_end = body_start + source[body_start..].find("\n}").expect("end of struct");
    let body: String = source[body_start..body_end]
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let chars: Vec<char> = body.chars().collect();
    let (mut fields, mut attributes, mut i) = (Vec::new(), Vec::new(), 0);
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
        } else if chars[i] == '#' {
            let (begin, mut depth, mut in_string) = (i, 0, false);
            while i < chars.len() {
                match chars[i] {
                    '\\' if in_string => i += 1,
                    '"' => in_string = !in_string,
                    '[' if !in_string => depth += 1,
                    ']' if !in_string => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            attributes.push(chars[begin..=i].iter().collect::<String>());
            i += 1;
        } else {
            let (begin, mut depth) = (i, 0);
            while i < chars.len() && !(chars[i] == ',' && depth == 0) {
                match chars[i] {
                    '<' | '(' => depth += 1,
                    '>' | ')' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            let declaration: String = chars[begin..i].iter().collect();
            let declaration = declaration.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            let (field, ty) = declaration.split_once(':').unwrap_or_else(|| panic!("cannot read {declaration:?}"));
            fields.push((field.trim().to_owned(), ty.trim().to_owned(), std::mem::take(&mut attributes)));
            i += 1;
        }
    }
    assert!(!fields.is_empty(), "no fields read from {name}");
    fields
}

fn attribute_string(attribute: &str, key: &str) -> Option<String> {
    let at = attribute.find(&format!("{key} = \""))?;
    let rest = &attribute[at + key.len() + 4..];
    Some(rest[..rest.find('"')?].to_owned())
}

fn flags_of(source: &str, name: &str, only_global: bool, flags: &mut BTreeMap<String, Flag>) {
    for (field, ty, attributes) in struct_fields(source, name) {
        if attributes.iter().any(|a| a.starts_with("#[command(") && a.contains("flatten")) {
            // A flattened group, defined in the same file.
            flags_of(source, ty.trim_start_matches("Box<").trim_end_matches('>'), only_global, flags);
            continue;
        }
        if attributes.iter().any(|a| a.starts_with("#[command(")) {
            continue; // the subcommand
        }
        let args: Vec<&String> = attributes.iter().filter(|a| a.starts_with("#[arg(")).collect();
        assert_eq!(args.len(), 1, "{name}.{field}: expected one #[arg(...)]: update this test");
        let arg = args[0];
        assert!(arg.contains("long"), "{name}.{field}: not a --long flag: update this test");
        if only_global && !arg.contains("global = true") {
            continue;
        }
        let long = attribute_string(arg, "long").unwrap_or_else(|| field.replace('_', "-"));
        let flag = Flag { default: attribute_string(arg, "default_value"), repeatable: ty.starts_with("Vec<") };
        assert!(flags.insert(long.clone(), flag).is_none(), "--{long} declared twice");
    }
}

/// Every long flag `numaresources webhook` accepts.
fn webhook_flags() -> BTreeMap<String, Flag> {
    let cmd = workspace_root().join("cmd/src");
    let webhook = std::fs::read_to_string(cmd.join("webhook.rs")).unwrap();
    let cli = std::fs::read_to_string(cmd.join("cli.rs")).unwrap();
    assert!(cli.contains("Webhook(Box<WebhookArgs>)"), "cli.rs no longer has the `webhook` subcommand as read here");
    let mut flags = BTreeMap::new();
    flags_of(&webhook, "WebhookArgs", false, &mut flags);
    flags_of(&cli, "Cli", true, &mut flags);
    for known in ["secure-port", "health-port", "cert-dir", "tls-cert-file", "namespace", "log-format"] {
        assert!(flags.contains_key(known), "--{known} not found: the reader is broken; got {flags:?}");
    }
    flags
}

/// The container's flags after the subcommand, checked against the binary's.
fn container_flags(container: &Container) -> BTreeMap<String, String> {
    assert!(container.command.is_none(), "use args only: the image's entrypoint is the numaresources binary");
    let args = container.args.as_deref().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("webhook"), "the first argument is the subcommand");
    let accepted = webhook_flags();
    let mut flags = BTreeMap::new();
    for arg in &args[1..] {
        let (flag, value) = arg
            .strip_prefix("--")
            .and_then(|a| a.split_once('='))
            .unwrap_or_else(|| panic!("argument {arg:?}: write flags as --name=value"));
        let known = accepted
            .get(flag)
            .unwrap_or_else(|| panic!("--{flag} is not a flag of `numaresources webhook`: {:?}", accepted.keys()));
        assert!(flags.insert(flag.to_owned(), value.to_owned()).is_none() || known.repeatable, "--{flag} twice");
    }
    flags
}

/// A flag's value in the manifest, else its default.
fn flag_value(flags: &BTreeMap<String, String>, flag: &str) -> String {
    flags
        .get(flag)
        .cloned()
        .or_else(|| webhook_flags()[flag].default.clone())
        .unwrap_or_else(|| panic!("--{flag} has neither a value nor a default"))
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn the_kustomization_lists_every_manifest() {
    let text = std::fs::read_to_string(workspace_root().join(DIR).join(KUSTOMIZATION)).unwrap();
    let kustomization: Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(kustomization["kind"], "Kustomization");
    let mut listed: Vec<String> =
        kustomization["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_owned()).collect();
    listed.sort();
    assert_eq!(listed, yaml_files());
}

#[test]
fn every_document_is_a_known_typed_object_in_the_right_place() {
    let m = Manifests::load();
    let mut seen = BTreeSet::new();
    for (kind, origin, meta) in &m.all {
        let name = meta.name.as_deref().unwrap_or_else(|| panic!("{origin}: no metadata.name"));
        let cluster_scoped = kind.starts_with("Cluster") || kind.ends_with("WebhookConfiguration");
        assert_eq!(meta.namespace.as_deref(), (!cluster_scoped).then_some(NAMESPACE), "{origin}: namespace");
        assert!(seen.insert((kind.clone(), name.to_owned())), "{origin}: {kind} {name} twice");
        let labels = labels(meta);
        for (key, value) in LABELS {
            assert_eq!(labels.get(*key).map(String::as_str), Some(*value), "{origin}: label {key}");
        }
    }
    for kind in [
        "Deployment",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "PodDisruptionBudget",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        assert!(m.all.iter().any(|(k, _, _)| k == kind), "no {kind} in {DIR}");
    }
    let pod_labels = m.pod_labels();
    for (key, value) in LABELS {
        assert_eq!(pod_labels.get(*key).map(String::as_str), Some(*value), "pod template label {key}");
    }
}

#[test]
fn every_webhook_calls_a_path_of_the_crate_through_the_service() {
    let m = Manifests::load();
    let service = m.service();
    let service_ports: Vec<i32> = service.spec.as_ref().unwrap().ports.iter().flatten().map(|p| p.port).collect();
    let webhooks = m.webhooks();
    let mut called = BTreeSet::new();
    for webhook in &webhooks {
        let name = &webhook.name;
        assert!(name.split('.').count() >= 3, "{name}: webhook names are fully qualified");
        assert!(webhook.url.is_none(), "{name}: call the Service, not a URL");
        assert!(webhook.ca_bundle.as_ref().is_none_or(Vec::is_empty), "{name}: caBundle is injected, not shipped");
        let reference = webhook.service.as_ref().unwrap_or_else(|| panic!("{name}: no service reference"));
        assert_eq!(reference.namespace, NAMESPACE, "{name}");
        assert_eq!(Some(&reference.name), service.metadata.name.as_ref(), "{name}");
        assert!(service_ports.contains(&reference.port.unwrap_or(443)), "{name}: the Service has no such port");
        assert!(WEBHOOK_PATHS.contains(&webhook.path()), "{name}: {} is not a path of the webhook", webhook.path());
        called.insert(webhook.path().to_owned());

        assert_eq!(webhook.versions, ["v1"], "{name}: the webhook serves admission.k8s.io/v1 only");
        assert_eq!(webhook.side_effects, "None", "{name}: no side effects, dry runs included");
        assert_eq!(webhook.match_policy.as_deref(), Some("Equivalent"), "{name}");
        let timeout = webhook.timeout.unwrap_or_else(|| panic!("{name}: set timeoutSeconds explicitly"));
        assert!((1..=30).contains(&timeout), "{name}: timeoutSeconds {timeout}");
        assert!(webhook.failure_policy.is_some(), "{name}: set failurePolicy explicitly");
    }
    let all: BTreeSet<String> = WEBHOOK_PATHS.iter().map(|p| (*p).to_owned()).collect();
    assert_eq!(called, all, "every path of the crate is called by a webhook");
}

#[test]
fn the_pod_webhook_fails_open_and_never_waits_on_itself() {
    let m = Manifests::load();
    let webhooks = m.webhooks();
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
    assert_ne!(pod.reinvocation.as_deref(), Some("IfNeeded"), "routing needs no second pass");
}

#[test]
fn our_objects_fail_closed_with_defaults_reinvoked_and_deletes_never_blocked() {
    let m = Manifests::load();
    let webhooks = m.webhooks();
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
    assert_eq!(defaults.reinvocation.as_deref(), Some("IfNeeded"), "defaults run again after later mutations");
}

#[test]
fn the_service_and_the_deployment_agree_on_ports_and_flags() {
    let m = Manifests::load();
    let container = m.container();
    let flags = container_flags(container);
    let ports = container.ports.as_deref().unwrap_or_default();
    let port_named = |name: &str| ports.iter().find(|p| p.name.as_deref() == Some(name)).map(|p| p.container_port);

    let service = m.service().spec.as_ref().unwrap();
    for (key, value) in service.selector.clone().unwrap_or_default() {
        assert_eq!(m.pod_labels().get(&key), Some(&value), "Service selector {key}={value} misses the pods");
    }
    let https = service.ports.iter().flatten().find(|p| p.port == 443).expect("the Service has no port 443");
    let Some(IntOrString::String(target)) = &https.target_port else { panic!("name the targetPort") };
    let secure_port: i32 = flag_value(&flags, "secure-port").parse().unwrap();
    assert_eq!(port_named(target), Some(secure_port), "targetPort {target} is not --secure-port");

    let health_port: i32 = flag_value(&flags, "health-port").parse().unwrap();
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
    assert!(flag_value(&flags, "tls-sni-names").split(',').any(|n| n == service_name), "--tls-sni-names");

    // The own namespace (never routed) is the pod's, from the downward API.
    let env = container.env.as_deref().unwrap_or_default();
    let namespace = env.iter().find(|e| e.name == "POD_NAMESPACE").expect("POD_NAMESPACE is not set");
    let field = namespace.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).map(|f| f.field_path.as_str());
    assert_eq!(field, Some("metadata.namespace"));
    let source = std::fs::read_to_string(workspace_root().join("cmd/src/webhook.rs")).unwrap();
    assert!(source.contains("env = \"POD_NAMESPACE\""), "--namespace is not read from POD_NAMESPACE");

    // Certificate files on the optional Secret at OLM's path; the fallback on a writable emptyDir.
    let mounts = container.volume_mounts.as_deref().unwrap_or_default();
    let volumes = m.pod_spec().volumes.as_deref().unwrap_or_default();
    let volume_at = |file: &str| {
        let mount = mounts
            .iter()
            .filter(|mount| Path::new(file).starts_with(&mount.mount_path))
            .max_by_key(|mount| mount.mount_path.len())
            .unwrap_or_else(|| panic!("{file} is on no volume (the root filesystem is read-only)"));
        (mount, volumes.iter().find(|v| v.name == mount.name).expect("mount of an undeclared volume"))
    };
    for flag in ["tls-cert-file", "tls-private-key-file"] {
        let file = flag_value(&flags, flag);
        assert!(file.starts_with("/tmp/k8s-webhook-server/serving-certs/"), "--{flag}: OLM mounts there");
        let (mount, volume) = volume_at(&file);
        let secret = volume.secret.as_ref().unwrap_or_else(|| panic!("--{flag} is not on a Secret"));
        assert_eq!(secret.optional, Some(true), "without the Secret the webhook generates a pair");
        assert_eq!(mount.read_only, Some(true));
        assert!(mount.sub_path.is_none(), "a subPath mount never sees rotation");
    }
    let (mount, volume) = volume_at(&flag_value(&flags, "cert-dir"));
    assert!(volume.empty_dir.is_some() && mount.read_only != Some(true), "--cert-dir is a writable emptyDir");
}

#[test]
fn two_replicas_a_disruption_budget_and_a_restricted_pod() {
    let m = Manifests::load();
    let spec = m.deployment().spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2), "the configuration for our objects fails closed: keep two");
    assert_eq!(m.disruption_budgets.len(), 1);
    let budget = m.disruption_budgets[0].spec.as_ref().unwrap();
    assert_eq!(budget.min_available, Some(IntOrString::Int(1)));
    let selector = budget.selector.as_ref().and_then(|s| s.match_labels.clone()).expect("PDB selector");
    for (key, value) in &selector {
        assert_eq!(m.pod_labels().get(key), Some(value), "the PDB does not select the pods");
    }
    for (key, value) in spec.selector.match_labels.clone().unwrap_or_default() {
        assert_eq!(m.pod_labels().get(&key), Some(&value), "the Deployment selector misses its pods");
    }

    let resources = m.container().resources.clone().expect("no resources");
    assert!(resources.requests.as_ref().is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")));
    assert!(resources.limits.as_ref().is_some_and(|l| l.contains_key("memory")), "no memory limit");

    let pod = m.pod_spec();
    assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
    assert_ne!(pod.host_network, Some(true));
    let pod_context = pod.security_context.clone().unwrap_or_default();
    let context = m.container().security_context.clone().expect("no container securityContext");
    assert_eq!(context.allow_privilege_escalation, Some(false));
    assert_eq!(context.read_only_root_filesystem, Some(true));
    assert_eq!(context.run_as_non_root.or(pod_context.run_as_non_root), Some(true));
    assert!(context.capabilities.and_then(|c| c.drop).is_some_and(|d| d.iter().any(|c| c == "ALL")));
    let seccomp = context.seccomp_profile.or(pod_context.seccomp_profile).map(|s| s.type_);
    assert_eq!(seccomp.as_deref(), Some("RuntimeDefault"));

    let pre_stop = m.container().lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).and_then(|p| p.sleep.as_ref());
    let sleep = pre_stop.expect("preStop sleep").seconds;
    let grace = pod.termination_grace_period_seconds.expect("terminationGracePeriodSeconds");
    assert!(grace > sleep + 30, "grace {grace}s must cover preStop {sleep}s and the 30 s drain");
}

#[test]
fn the_service_account_reads_what_the_caches_watch_and_nothing_more() {
    let m = Manifests::load();
    assert!(m.service_accounts.iter().any(|sa| sa.metadata.name.as_deref() == Some(NAME)));
    let rules = m.cluster_rules_of(NAMESPACE, NAME);
    let allows = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|rule| {
            rule.api_groups.iter().flatten().any(|g| g == group)
                && rule.resources.iter().flatten().any(|r| r == resource)
                && rule.verbs.iter().any(|v| v == verb)
        })
    };
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

/// The probe paths answer on the health router and the webhook paths on the HTTPS router.
#[tokio::test]
async fn probe_and_webhook_paths_are_routes_of_the_webhook() {
    use axum::body::Body;
    use tower::ServiceExt;

    let (cluster, mut feeds) = numaresources_webhook::ClusterCache::new();
    feeds.set_scheduler(None);
    feeds.set_namespaces([]);
    feeds.set_nodes([]);
    let webhook = Arc::new(numaresources_webhook::Webhook::new(NAMESPACE, cluster));
    let m = Manifests::load();
    let container = m.container();
    for probe in [&container.readiness_probe, &container.liveness_probe] {
        let path = probe.as_ref().and_then(|p| p.http_get.as_ref()).and_then(|g| g.path.clone()).unwrap();
        let request = http::Request::get(&path).body(Body::empty()).unwrap();
        let response = numaresources_webhook::health_router(webhook.clone()).oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
    }
    for webhook_config in m.webhooks() {
        let request = http::Request::post(webhook_config.path())
            .header("content-type", "application/json")
            .body(Body::from("{}"))
            .unwrap();
        let response = numaresources_webhook::router(webhook.clone()).oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200, "POST {} answers with a review", webhook_config.path());
    }
}
