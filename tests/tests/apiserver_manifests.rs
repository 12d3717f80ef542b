//! The install manifests of the aggregated NRT API server (`manifests/apiserver/`) are typed
//! Kubernetes objects with no unknown fields, agree with each other (Service ↔ Deployment ↔
//! APIService, ServiceAccount ↔ RBAC), and agree with the binary (flags, probe paths, shutdown).
//!
//! How the flags are checked: this crate cannot run the `numaresources` binary (Cargo gives
//! `CARGO_BIN_EXE_*` only to the package that owns the binary, and a nested `cargo run` from a test
//! would wait on the build lock of the `cargo test` that started it). So the test reads the clap
//! derive in `cmd/src/apiserver.rs` (and the global options of `cmd/src/cli.rs`) the way clap does:
//! every field is a flag named by its `long = "…"` or, without one, by the field name in kebab
//! case. Anything the reader does not understand (a flattened struct from another file, a
//! positional field, a field without `long`) fails the test instead of being skipped, and a few
//! flags we know exist must be found, so a change in the source layout cannot make the check
//! pass vacuously.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use numaresources_api::Quantity;
use numaresources_tests::workspace_root;
use serde::Serialize;
use serde::de::{Deserialize, DeserializeOwned};
use serde_json::Value;
use support::differences;

const NAMESPACE: &str = "numaresources";
const NAME: &str = "numaresources-apiserver";
const GROUP: &str = numaresources_api::nrt::GROUP;
const VERSION: &str = numaresources_apiserver::discovery::VERSION;
const PLURAL: &str = numaresources_api::nrt::PLURAL;
/// The labels every object (and the pod template) carries.
const LABELS: &[(&str, &str)] = &[
    ("app.kubernetes.io/name", NAME),
    ("app.kubernetes.io/part-of", "numaresources"),
    ("app.kubernetes.io/component", "apiserver"),
];

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// Every object under `manifests/apiserver/`, typed, with where it came from (`file#document`).
#[derive(Debug, Default)]
struct Manifests {
    deployments: Vec<(String, Deployment)>,
    services: Vec<(String, Service)>,
    service_accounts: Vec<(String, ServiceAccount)>,
    cluster_roles: Vec<(String, ClusterRole)>,
    cluster_role_bindings: Vec<(String, ClusterRoleBinding)>,
    roles: Vec<(String, Role)>,
    role_bindings: Vec<(String, RoleBinding)>,
    api_services: Vec<(String, APIService)>,
    /// Kind, origin and metadata of every object, for the checks common to all kinds.
    all: Vec<(String, String, ObjectMeta)>,
}

/// The kustomization that makes the directory one resource of the install.
const KUSTOMIZATION: &str = "kustomization.yaml";

#[test]
fn the_kustomization_lists_every_manifest_of_the_directory() {
    let dir = workspace_root().join("manifests/apiserver");
    let kustomization: Value =
        serde_norway::from_str(&std::fs::read_to_string(dir.join(KUSTOMIZATION)).unwrap()).unwrap();
    assert_eq!(kustomization["kind"], "Kustomization");
    let mut listed: Vec<String> =
        kustomization["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_owned()).collect();
    listed.sort();
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != KUSTOMIZATION)
        .collect();
    present.sort();
    assert_eq!(listed, present, "a manifest left out of (or missing from) the kustomization");
}

impl Manifests {
    fn load() -> Self {
        let dir = workspace_root().join("manifests/apiserver");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml"))
            .filter(|path| !path.ends_with(KUSTOMIZATION))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no YAML in {}", dir.display());
        let mut manifests = Self::default();
        for file in &files {
            manifests.load_file(file);
        }
        manifests
    }

    fn load_file(&mut self, path: &Path) {
        let text = std::fs::read_to_string(path).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut documents = 0;
        for (index, document) in serde_norway::Deserializer::from_str(&text).enumerate() {
            let origin = format!("{file}#{index}");
            let value = Value::deserialize(document).unwrap_or_else(|e| panic!("{origin}: not YAML: {e}"));
            if value.is_null() {
                continue; // an empty document (a stray `---`)
            }
            documents += 1;
            self.add(origin, &value);
        }
        assert!(documents > 0, "{file} holds no object");
    }

    fn add(&mut self, origin: String, value: &Value) {
        let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
        let metadata = match (api_version, kind.as_str()) {
            ("apps/v1", "Deployment") => push(&mut self.deployments, origin.clone(), value, |o| &o.metadata),
            ("v1", "Service") => push(&mut self.services, origin.clone(), value, |o| &o.metadata),
            ("v1", "ServiceAccount") => push(&mut self.service_accounts, origin.clone(), value, |o| &o.metadata),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                push(&mut self.cluster_roles, origin.clone(), value, |o| &o.metadata)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                push(&mut self.cluster_role_bindings, origin.clone(), value, |o| &o.metadata)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => push(&mut self.roles, origin.clone(), value, |o| &o.metadata),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                push(&mut self.role_bindings, origin.clone(), value, |o| &o.metadata)
            }
            ("apiregistration.k8s.io/v1", "APIService") => {
                push(&mut self.api_services, origin.clone(), value, |o| &o.metadata)
            }
            other => panic!("{origin}: unexpected apiVersion/kind {other:?}; teach this test the kind"),
        };
        self.all.push((kind, origin, metadata));
    }

    /// The one Deployment.
    fn deployment(&self) -> &Deployment {
        assert_eq!(self.deployments.len(), 1, "expected exactly one Deployment");
        &self.deployments[0].1
    }

    fn pod_spec(&self) -> &PodSpec {
        self.deployment().spec.as_ref().unwrap().template.spec.as_ref().expect("pod template without spec")
    }

    /// The container running `numaresources apiserver`.
    fn container(&self) -> &Container {
        let containers = &self.pod_spec().containers;
        assert_eq!(containers.len(), 1, "expected one container");
        &containers[0]
    }

    fn service(&self) -> &Service {
        assert_eq!(self.services.len(), 1, "expected exactly one Service");
        &self.services[0].1
    }

    fn api_service(&self) -> &APIService {
        assert_eq!(self.api_services.len(), 1, "expected exactly one APIService");
        &self.api_services[0].1
    }

    /// Every rule a ServiceAccount gets through ClusterRoleBindings to the ClusterRoles shipped here.
    fn cluster_rules_of(&self, namespace: &str, name: &str) -> Vec<PolicyRule> {
        self.cluster_role_bindings
            .iter()
            .filter(|(_, binding)| binds_service_account(binding.subjects.as_deref(), namespace, name))
            .filter(|(_, binding)| binding.role_ref.kind == "ClusterRole")
            .flat_map(|(_, binding)| {
                let role = self.cluster_role(&binding.role_ref.name);
                role.and_then(|r| r.rules.clone()).unwrap_or_default()
            })
            .collect()
    }

    fn cluster_role(&self, name: &str) -> Option<&ClusterRole> {
        self.cluster_roles.iter().map(|(_, r)| r).find(|r| r.metadata.name.as_deref() == Some(name))
    }
}

/// Deserializes `value` as `T`, then fails on anything the typed object does not give back
/// unchanged: unknown or misspelled fields (dropped by the typed deserializer), and values that
/// only deserialized by coercion. Type errors are reported with their field path.
fn push<T: DeserializeOwned + Serialize>(
    list: &mut Vec<(String, T)>,
    origin: String,
    value: &Value,
    metadata: fn(&T) -> &ObjectMeta,
) -> ObjectMeta {
    let object: T = serde_path_to_error::deserialize(value.clone())
        .unwrap_or_else(|e| panic!("{origin}: at {}: {}", e.path(), e.inner()));
    let back = serde_json::to_value(&object).unwrap();
    let mut problems = Vec::new();
    differences("", value, &back, &mut problems);
    assert!(
        problems.is_empty(),
        "{origin}: fields that do not survive a round trip through the typed object (unknown, misspelled or \
         wrongly typed):\n  {}",
        problems.join("\n  ")
    );
    let meta = metadata(&object).clone();
    list.push((origin, object));
    meta
}

fn binds_service_account(subjects: Option<&[Subject]>, namespace: &str, name: &str) -> bool {
    subjects
        .unwrap_or_default()
        .iter()
        .any(|s| s.kind == "ServiceAccount" && s.name == name && s.namespace.as_deref() == Some(namespace))
}

/// Whether `rules` allow `verb` on `resource` of `group` (wildcards included).
fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    let has = |list: &Option<Vec<String>>, wanted: &str| {
        list.as_deref().unwrap_or_default().iter().any(|item| item == wanted || item == "*")
    };
    rules.iter().any(|rule| {
        has(&rule.api_groups, group)
            && has(&rule.resources, resource)
            && rule.verbs.iter().any(|v| v == verb || v == "*")
    })
}

fn labels(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

fn mebibytes(quantity: &str) -> f64 {
    let bytes = Quantity::parse(quantity).unwrap_or_else(|e| panic!("{quantity}: {e}")).ceil_i64().unwrap();
    bytes as f64 / (1024.0 * 1024.0)
}

// ---------------------------------------------------------------------------------------------
// The binary's flags, read from its clap derive
// ---------------------------------------------------------------------------------------------

/// A long flag of the binary and its default value, if any.
#[derive(Debug, Clone)]
struct Flag {
    default: Option<String>,
    /// Whether clap accepts it more than once (a `Vec` field).
    repeatable: bool,
}

/// One field of a clap-derived struct.
#[derive(Debug)]
struct Field {
    name: String,
    ty: String,
    attributes: Vec<String>,
}

/// The fields of `struct <name> { … }` in `source`, with their `#[…]` attributes (doc and line
/// comments dropped). A small reader for the shapes clap derives use: attributes are scanned with
/// bracket depth and string literals skipped; a field runs to the next comma outside `<…>`/`(…)`.
fn struct_fields(source: &str, name: &str) -> Vec<Field> {
    let start = source
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("`struct {name} {{` not found: update this test's reader"));
    let body_start = start + source[start..].find('{').unwrap() + 1;
    let body_end = body_start + source[body_start..].find("\n}").expect("end of struct");
    let body: String = source[body_start..body_end]
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let chars: Vec<char> = body.chars().collect();
    let mut fields = Vec::new();
    let mut attributes = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
        } else if chars[i] == '#' {
            let begin = i;
            let mut depth = 0;
            let mut in_string = false;
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
            let begin = i;
            let mut depth = 0;
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
            let (field, ty) = declaration
                .split_once(':')
                .unwrap_or_else(|| panic!("cannot read the field {declaration:?} of {name}"));
            fields.push(Field {
                name: field.trim().to_owned(),
                ty: ty.trim().to_owned(),
                attributes: std::mem::take(&mut attributes),
            });
            i += 1;
        }
    }
    assert!(!fields.is_empty(), "no fields read from {name}");
    fields
}

/// The value of `key = "…"` inside an attribute, if present.
fn attribute_string(attribute: &str, key: &str) -> Option<String> {
    let at = attribute.find(&format!("{key} = \""))?;
    let rest = &attribute[at + key.len() + 4..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Whether an attribute lists `word` as a bare argument (`long`, `global = true`, `flatten`).
fn attribute_has(attribute: &str, word: &str) -> bool {
    let inner = attribute.split_once('(').map_or("", |(_, rest)| rest.trim_end_matches(")]"));
    inner.split(',').any(|part| part.trim() == word)
}

/// The long flags of the fields of `struct <name>` in `source`. `only_global` keeps the ones
/// marked `global = true` (the only top-level options accepted after a subcommand).
fn flags_of(source: &str, name: &str, only_global: bool, flags: &mut BTreeMap<String, Flag>) {
    for field in struct_fields(source, name) {
        let args: Vec<&String> = field.attributes.iter().filter(|a| a.starts_with("#[arg(")).collect();
        let command: Vec<&String> = field.attributes.iter().filter(|a| a.starts_with("#[command(")).collect();
        if command.iter().any(|a| attribute_has(a, "subcommand")) {
            continue;
        }
        if command.iter().any(|a| attribute_has(a, "flatten")) {
            // Flattened structs are followed when they are defined in the same file.
            let inner = field.ty.trim_start_matches("Box<").trim_end_matches('>');
            flags_of(source, inner, only_global, flags);
            continue;
        }
        assert!(
            args.len() == 1,
            "{name}.{}: expected one #[arg(...)] attribute (a positional or unusual field): update this test",
            field.name
        );
        let arg = args[0];
        assert!(
            attribute_has(arg, "long") || attribute_string(arg, "long").is_some(),
            "{name}.{}: not a --long flag: update this test",
            field.name
        );
        if only_global && !arg.contains("global = true") {
            continue;
        }
        let long = attribute_string(arg, "long").unwrap_or_else(|| field.name.replace('_', "-"));
        let flag = Flag { default: attribute_string(arg, "default_value"), repeatable: field.ty.starts_with("Vec<") };
        assert!(flags.insert(long.clone(), flag).is_none(), "--{long} declared twice");
    }
}

/// Every long flag `numaresources apiserver` accepts: its own options plus the global ones.
fn apiserver_flags() -> BTreeMap<String, Flag> {
    let cmd = workspace_root().join("cmd/src");
    let apiserver = std::fs::read_to_string(cmd.join("apiserver.rs")).unwrap();
    let cli = std::fs::read_to_string(cmd.join("cli.rs")).unwrap();
    assert!(
        cli.contains("Apiserver(Box<ApiserverArgs>)"),
        "cli.rs no longer has the `apiserver` subcommand as read here"
    );
    let mut flags = BTreeMap::new();
    flags_of(&apiserver, "ApiserverArgs", false, &mut flags);
    flags_of(&cli, "Cli", true, &mut flags);
    for known in ["secure-port", "cert-dir", "tls-cert-file", "tls-private-key-file", "log-level", "log-format"] {
        assert!(flags.contains_key(known), "--{known} not found in the source: the reader is broken; got {flags:?}");
    }
    flags
}

/// The container's arguments after the subcommand, as flag → value.
fn container_flags(container: &Container) -> BTreeMap<String, String> {
    assert!(container.command.is_none(), "use args only: the image's entrypoint is the numaresources binary");
    let args = container.args.as_deref().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("apiserver"), "the first argument is the subcommand");
    let accepted = apiserver_flags();
    let mut flags = BTreeMap::new();
    for arg in &args[1..] {
        let (flag, value) = arg
            .strip_prefix("--")
            .and_then(|a| a.split_once('='))
            .unwrap_or_else(|| panic!("argument {arg:?}: write flags as --name=value"));
        let known = accepted.get(flag).unwrap_or_else(|| {
            panic!("--{flag} is not a flag of `numaresources apiserver`; it accepts: {:?}", accepted.keys())
        });
        let previous = flags.insert(flag.to_owned(), value.to_owned());
        assert!(previous.is_none() || known.repeatable, "--{flag} given twice");
    }
    flags
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn every_document_is_a_known_typed_object_in_the_right_place() {
    let m = Manifests::load();
    let mut seen = BTreeSet::new();
    for (kind, origin, meta) in &m.all {
        let name = meta.name.as_deref().unwrap_or_else(|| panic!("{origin}: no metadata.name"));
        let namespaced = !matches!(kind.as_str(), "ClusterRole" | "ClusterRoleBinding" | "APIService");
        if namespaced {
            let namespace = meta.namespace.as_deref().unwrap_or_else(|| panic!("{origin}: no namespace"));
            let reader_binding = kind == "RoleBinding" && namespace == "kube-system";
            assert!(namespace == NAMESPACE || reader_binding, "{origin}: namespace {namespace}");
        } else {
            assert!(meta.namespace.is_none(), "{origin}: a cluster-scoped {kind} has a namespace");
        }
        assert!(seen.insert((kind.clone(), meta.namespace.clone(), name.to_owned())), "{origin}: {kind} {name} twice");
    }
    for kind in
        ["Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding", "APIService"]
    {
        assert!(m.all.iter().any(|(k, _, _)| k == kind), "no {kind} in manifests/apiserver");
    }
}

#[test]
fn labels_follow_the_app_kubernetes_io_conventions() {
    let m = Manifests::load();
    let template = &m.deployment().spec.as_ref().unwrap().template;
    let template_meta = template.metadata.clone().expect("pod template without metadata");
    let all = m.all.iter().map(|(_, origin, meta)| (origin.clone(), meta.clone()));
    for (origin, meta) in all.chain([("the pod template".to_owned(), template_meta.clone())]) {
        let labels = labels(&meta);
        for (key, value) in LABELS {
            assert_eq!(labels.get(*key).map(String::as_str), Some(*value), "{origin}: label {key}");
        }
        for key in labels.keys() {
            let allowed =
                key.starts_with("app.kubernetes.io/") || key.starts_with("rbac.authorization.k8s.io/aggregate-to-");
            assert!(allowed, "{origin}: unexpected label {key}");
        }
    }
    // The selector (immutable once applied) uses a subset of the template's labels.
    let selector = m.deployment().spec.as_ref().unwrap().selector.match_labels.clone().unwrap_or_default();
    assert!(!selector.is_empty(), "the Deployment selects by matchLabels");
    let pod_labels = labels(&template_meta);
    for (key, value) in &selector {
        assert_eq!(pod_labels.get(key), Some(value), "selector label {key} is not on the pod template");
    }
}

#[test]
fn the_service_selects_the_pods_and_targets_a_named_container_port() {
    let m = Manifests::load();
    let service = m.service();
    assert_eq!(service.metadata.name.as_deref(), Some(NAME));
    let spec = service.spec.as_ref().unwrap();
    let template_labels = labels(m.deployment().spec.as_ref().unwrap().template.metadata.as_ref().unwrap());
    let selector = spec.selector.clone().unwrap_or_default();
    assert!(!selector.is_empty(), "the Service has no selector");
    for (key, value) in &selector {
        assert_eq!(template_labels.get(key), Some(value), "Service selector {key}={value} does not match the pods");
    }
    assert!(matches!(spec.type_.as_deref(), None | Some("ClusterIP")), "the aggregator expects a ClusterIP Service");

    let ports = spec.ports.as_deref().unwrap_or_default();
    let port = ports.iter().find(|p| p.port == 443).expect("the Service has no port 443");
    let Some(IntOrString::String(target)) = &port.target_port else {
        panic!("the Service's targetPort should name the container port, got {:?}", port.target_port);
    };
    let container_ports = m.container().ports.as_deref().unwrap_or_default();
    let container_port = container_ports
        .iter()
        .find(|p| p.name.as_deref() == Some(target.as_str()))
        .unwrap_or_else(|| panic!("targetPort {target} is not a named container port"));
    assert_eq!(port.protocol.as_deref().unwrap_or("TCP"), container_port.protocol.as_deref().unwrap_or("TCP"));
}

#[test]
fn the_apiservice_names_our_group_version_and_points_at_the_service() {
    let m = Manifests::load();
    let api_service = m.api_service();
    assert_eq!(api_service.metadata.name.as_deref(), Some(format!("{VERSION}.{GROUP}").as_str()));
    let spec = api_service.spec.as_ref().unwrap();
    assert_eq!(spec.group.as_deref(), Some(GROUP));
    assert_eq!(spec.version.as_deref(), Some(VERSION));
    assert!((1..=20000).contains(&spec.group_priority_minimum), "groupPriorityMinimum out of range");
    assert!((1..=1000).contains(&spec.version_priority), "versionPriority out of range");

    let reference = spec.service.as_ref().expect("the APIService has no service reference (it would be local)");
    let service = m.service();
    assert_eq!(reference.namespace.as_deref(), service.metadata.namespace.as_deref());
    assert_eq!(reference.name.as_deref(), service.metadata.name.as_deref());
    let port = reference.port.unwrap_or(443);
    let ports = service.spec.as_ref().unwrap().ports.as_deref().unwrap_or_default();
    assert!(ports.iter().any(|p| p.port == port), "the Service has no port {port}");

    // The bundle is injected by the certificate lifecycle; TLS is verified, never skipped.
    assert!(spec.ca_bundle.as_ref().is_none_or(|b| b.0.is_empty()), "caBundle is injected, not shipped");
    assert_ne!(spec.insecure_skip_tls_verify, Some(true), "insecureSkipTLSVerify must stay off");
}

#[test]
fn container_args_are_flags_the_binary_accepts_and_agree_with_the_pod() {
    let m = Manifests::load();
    let container = m.container();
    let flags = container_flags(container);
    let accepted = apiserver_flags();
    let value_of = |flag: &str| -> String {
        flags
            .get(flag)
            .cloned()
            .or_else(|| accepted[flag].default.clone())
            .unwrap_or_else(|| panic!("--{flag} has neither a value in the manifest nor a default"))
    };

    // The port it listens on is the named container port.
    let secure_port: i32 = value_of("secure-port").parse().unwrap();
    let ports = container.ports.as_deref().unwrap_or_default();
    assert!(
        ports.iter().any(|p| p.container_port == secure_port && p.name.is_some()),
        "--secure-port={secure_port} is not a named container port"
    );
    // Listening on every address (the default), so kubelet probes and the Service reach it.
    if let Some(address) = flags.get("bind-address") {
        assert!(address == "0.0.0.0" || address == "::", "--bind-address={address} is unreachable from the Service");
    }

    let mounts = container.volume_mounts.as_deref().unwrap_or_default();
    let volumes = m.pod_spec().volumes.as_deref().unwrap_or_default();
    let volume_at = |file: &str| {
        let mount = mounts
            .iter()
            .filter(|mount| Path::new(file).starts_with(&mount.mount_path))
            .max_by_key(|mount| mount.mount_path.len())
            .unwrap_or_else(|| panic!("{file} is on no volume mount (the root filesystem is read-only)"));
        let volume = volumes.iter().find(|v| v.name == mount.name).expect("mount of an undeclared volume");
        (mount, volume)
    };

    // The generated fallback is written to a writable emptyDir.
    let (mount, volume) = volume_at(&value_of("cert-dir"));
    assert!(volume.empty_dir.is_some() && mount.read_only != Some(true), "--cert-dir must be on a writable emptyDir");

    // The serving pair is read from an optional Secret mounted where OLM mounts its own, with the
    // file names the binary reads.
    for flag in ["tls-cert-file", "tls-private-key-file"] {
        let file = value_of(flag);
        assert!(
            file.starts_with("/apiserver.local.config/certificates/"),
            "--{flag}={file}: OLM mounts the certificate under /apiserver.local.config/certificates/"
        );
        let (mount, volume) = volume_at(&file);
        let secret = volume.secret.as_ref().unwrap_or_else(|| panic!("--{flag}: {file} is not on a Secret volume"));
        assert_eq!(secret.optional, Some(true), "the Secret is optional: without it the binary generates a pair");
        assert_eq!(mount.read_only, Some(true));
        assert!(mount.sub_path.is_none(), "a subPath mount never sees certificate rotation");
        let relative = Path::new(&file).strip_prefix(&mount.mount_path).unwrap().to_string_lossy().into_owned();
        let items = secret.items.as_deref().unwrap_or_default();
        assert!(
            items.is_empty() || items.iter().any(|item| item.path == relative),
            "--{flag}: no Secret key is projected to {relative}"
        );
        if let Some(mode) = secret.default_mode {
            assert!((0..=0o777).contains(&mode), "defaultMode {mode} is not a file mode (write it in decimal)");
        }
    }
}

/// The probe paths are routes of the real server that answer 200 without credentials.
#[tokio::test]
async fn probe_paths_are_served_without_credentials() {
    use tower::ServiceExt;

    let m = Manifests::load();
    let container = m.container();
    let named_ports: Vec<String> =
        container.ports.as_deref().unwrap_or_default().iter().filter_map(|p| p.name.clone()).collect();
    let readiness = container.readiness_probe.as_ref().expect("no readiness probe");
    let liveness = container.liveness_probe.as_ref().expect("no liveness probe");
    let state = Arc::new(numaresources_apiserver::AppState::new(
        Arc::new(numaresources_apiserver::Store::new(16)),
        "test",
        "test",
    ));
    for (probe, expected) in [(readiness, "/readyz"), (liveness, "/livez")] {
        let get = probe.http_get.as_ref().expect("probes are HTTP GETs");
        assert_eq!(get.path.as_deref(), Some(expected));
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"), "the server only speaks TLS");
        match &get.port {
            IntOrString::String(name) => {
                assert!(named_ports.contains(name), "probe port {name} is not a container port")
            }
            IntOrString::Int(port) => panic!("name the probe port instead of {port}"),
        }
        let path = get.path.clone().unwrap();
        // The kubelet has no credentials: the delegated authorizer must let the path through.
        assert!(numaresources_apiserver::auth::always_allowed(&path), "{path} needs credentials");
        let router = numaresources_apiserver::router(state.clone());
        let request = axum::http::Request::get(&path).body(axum::body::Body::empty()).unwrap();
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
    }
    // The router does tell paths apart (a typo would not pass).
    let router = numaresources_apiserver::router(state);
    let request = axum::http::Request::get("/readyzz").body(axum::body::Body::empty()).unwrap();
    assert_eq!(router.oneshot(request).await.unwrap().status(), 404);
}

#[test]
fn the_pod_is_restricted_pod_security_compliant() {
    let m = Manifests::load();
    let pod = m.pod_spec();
    assert_ne!(pod.host_network, Some(true));
    assert_ne!(pod.host_pid, Some(true));
    assert_ne!(pod.host_ipc, Some(true));
    assert_ne!(pod.automount_service_account_token, Some(false), "the server needs its token (in-cluster config)");
    let pod_context = pod.security_context.clone().unwrap_or_default();
    let pod_seccomp = pod_context.seccomp_profile.as_ref().map(|s| s.type_.clone());
    assert_ne!(pod_context.run_as_user, Some(0));

    // Restricted allows only these volume types.
    for volume in pod.volumes.as_deref().unwrap_or_default() {
        let allowed = volume.config_map.is_some()
            || volume.csi.is_some()
            || volume.downward_api.is_some()
            || volume.empty_dir.is_some()
            || volume.ephemeral.is_some()
            || volume.persistent_volume_claim.is_some()
            || volume.projected.is_some()
            || volume.secret.is_some();
        assert!(allowed, "volume {} is of a type restricted pods may not use", volume.name);
    }

    let containers = pod.containers.iter().chain(pod.init_containers.as_deref().unwrap_or_default());
    for container in containers {
        let name = &container.name;
        let context = container.security_context.clone().unwrap_or_default();
        assert_eq!(context.allow_privilege_escalation, Some(false), "{name}: allowPrivilegeEscalation");
        assert_ne!(context.privileged, Some(true), "{name}: privileged");
        assert_eq!(context.read_only_root_filesystem, Some(true), "{name}: readOnlyRootFilesystem");
        assert!(
            context.run_as_non_root.or(pod_context.run_as_non_root) == Some(true),
            "{name}: runAsNonRoot (pod or container)"
        );
        assert_ne!(context.run_as_user, Some(0), "{name}: runAsUser 0");
        let seccomp = context.seccomp_profile.as_ref().map(|s| s.type_.clone()).or(pod_seccomp.clone());
        assert!(
            matches!(seccomp.as_deref(), Some("RuntimeDefault" | "Localhost")),
            "{name}: seccompProfile must be RuntimeDefault or Localhost, got {seccomp:?}"
        );
        let capabilities = context.capabilities.clone().unwrap_or_default();
        assert!(
            capabilities.drop.as_deref().unwrap_or_default().iter().any(|c| c == "ALL"),
            "{name}: capabilities must drop ALL"
        );
        for added in capabilities.add.as_deref().unwrap_or_default() {
            assert_eq!(added, "NET_BIND_SERVICE", "{name}: restricted pods may add only NET_BIND_SERVICE");
        }
        for port in container.ports.as_deref().unwrap_or_default() {
            assert!(port.host_port.is_none_or(|p| p == 0), "{name}: hostPort");
        }
    }
}

#[test]
fn the_deployment_is_sized_and_scheduled_as_designed() {
    let m = Manifests::load();
    let deployment = m.deployment();
    assert_eq!(deployment.metadata.name.as_deref(), Some(NAME));
    let spec = deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1), "the store is in memory: one replica until it is replicated");
    let pod = m.pod_spec();
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-cluster-critical"));

    let resources = m.container().resources.clone().expect("no resources");
    let requests = resources.requests.unwrap_or_default();
    let limits = resources.limits.unwrap_or_default();
    let memory_request = mebibytes(&requests.get("memory").expect("no memory request").0);
    let memory_limit = mebibytes(&limits.get("memory").expect("no memory limit").0);
    assert!(requests.contains_key("cpu"), "no CPU request");
    // BENCHMARKS.md: 5,000 NRTs add 27.6 MiB; the design holds the whole server to 64 MiB.
    assert!(memory_request >= 28.0, "memory request {memory_request} MiB is below what 5,000 NRTs use");
    assert!(memory_limit >= 64.0 && memory_limit >= memory_request, "memory limit {memory_limit} MiB");
}

/// The kubelet's grace period covers the preStop sleep and the server's drain after SIGTERM.
#[test]
fn termination_grace_covers_prestop_and_the_drain() {
    // The binary serves with `serve` (the default options), whose drain is read here from the
    // options' Debug form: `shutdown_grace: 30s`.
    let apiserver = std::fs::read_to_string(workspace_root().join("cmd/src/apiserver.rs")).unwrap();
    assert!(
        apiserver.contains("serve(listener") && !apiserver.contains("serve_with"),
        "cmd/src/apiserver.rs no longer serves with the default options: update this test"
    );
    let options = format!("{:?}", numaresources_certs::ServeOptions::default());
    let grace = options
        .split("shutdown_grace: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse::<i64>().ok())
        .unwrap_or_else(|| panic!("cannot read the shutdown grace from {options}"));
    assert!(options.contains(&format!("shutdown_grace: {grace}s")), "the grace is not whole seconds: {options}");

    let m = Manifests::load();
    let pre_stop = m.container().lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).expect("no preStop hook");
    let sleep = pre_stop.sleep.as_ref().expect("preStop should be the kubelet's sleep action (no shell in the image)");
    assert!(sleep.seconds >= 1, "preStop sleep");
    let period = m.pod_spec().termination_grace_period_seconds.expect("no terminationGracePeriodSeconds");
    assert!(
        period > sleep.seconds + grace,
        "terminationGracePeriodSeconds {period} must exceed preStop {}s + drain {grace}s",
        sleep.seconds
    );
}

#[test]
fn the_service_account_is_bound_to_what_the_server_needs() {
    let m = Manifests::load();
    let pod = m.pod_spec();
    let account = pod.service_account_name.as_deref().expect("no serviceAccountName");
    assert!(
        m.service_accounts.iter().any(|(_, sa)| sa.metadata.name.as_deref() == Some(account)
            && sa.metadata.namespace.as_deref() == Some(NAMESPACE)),
        "ServiceAccount {account} is not shipped"
    );
    let to_cluster_role = |name: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "ClusterRole".into(),
        name: name.into(),
    };
    assert!(
        m.cluster_role_bindings.iter().any(|(_, b)| b.role_ref == to_cluster_role("system:auth-delegator")
            && binds_service_account(b.subjects.as_deref(), NAMESPACE, account)),
        "no ClusterRoleBinding of {account} to system:auth-delegator"
    );
    let reader = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "Role".into(),
        name: "extension-apiserver-authentication-reader".into(),
    };
    assert!(
        m.role_bindings.iter().any(|(_, b)| b.metadata.namespace.as_deref() == Some("kube-system")
            && b.role_ref == reader
            && binds_service_account(b.subjects.as_deref(), NAMESPACE, account)),
        "no RoleBinding in kube-system of {account} to extension-apiserver-authentication-reader"
    );
    let rules = m.cluster_rules_of(NAMESPACE, account);
    for verb in ["get", "list", "watch"] {
        assert!(allows(&rules, "", "nodes", verb), "the server cannot {verb} nodes");
    }

    // Every binding to one of our ClusterRoles names a ClusterRole shipped here.
    for (origin, binding) in &m.cluster_role_bindings {
        let role = &binding.role_ref.name;
        if role.starts_with("numaresources") {
            assert!(m.cluster_role(role).is_some(), "{origin}: ClusterRole {role} is not shipped");
        }
        assert!(!binding.subjects.as_deref().unwrap_or_default().is_empty(), "{origin}: no subjects");
    }
}

#[test]
fn callers_get_the_access_they_need_on_noderesourcetopologies() {
    let m = Manifests::load();
    let aggregated = |label: &str| -> Vec<PolicyRule> {
        m.cluster_roles
            .iter()
            .filter(|(_, r)| labels(&r.metadata).get(label).map(String::as_str) == Some("true"))
            .flat_map(|(_, r)| r.rules.clone().unwrap_or_default())
            .collect()
    };
    let view = aggregated("rbac.authorization.k8s.io/aggregate-to-view");
    for verb in ["get", "list", "watch"] {
        assert!(allows(&view, GROUP, PLURAL, verb), "view cannot {verb}");
    }
    for verb in ["create", "update", "patch", "delete", "deletecollection"] {
        assert!(!allows(&view, GROUP, PLURAL, verb), "view must not {verb}");
    }
    for label in ["rbac.authorization.k8s.io/aggregate-to-edit", "rbac.authorization.k8s.io/aggregate-to-admin"] {
        let rules = aggregated(label);
        for verb in ["create", "update", "patch", "delete"] {
            assert!(allows(&rules, GROUP, PLURAL, verb), "{label} cannot {verb}");
        }
    }

    let rte = m.cluster_rules_of(NAMESPACE, "numaresources-rte");
    for verb in ["create", "get", "update", "patch"] {
        assert!(allows(&rte, GROUP, PLURAL, verb), "the node agent cannot {verb}");
    }
    assert!(allows(&rte, "", "nodes", "get"), "the node agent cannot get its Node");
    assert!(!allows(&rte, GROUP, PLURAL, "delete"), "the node agent never deletes");

    let scheduler = m.cluster_rules_of(NAMESPACE, "numaresources-scheduler");
    for verb in ["get", "list", "watch"] {
        assert!(allows(&scheduler, GROUP, PLURAL, verb), "the scheduler cannot {verb}");
    }
    assert!(!allows(&scheduler, GROUP, PLURAL, "update"), "the scheduler only reads");
}

/// The test's own helpers: the round-trip check catches misspellings, the flag reader reads
/// what clap would.
#[test]
fn the_checks_themselves_catch_mistakes() {
    let mut problems = Vec::new();
    let misspelled: Value = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "x", "namespace": "y"},
        "spec": {"selectr": {"a": "b"}, "ports": [{"port": 443, "targetPort": "https"}]}
    });
    let service: Service = serde_json::from_value(misspelled.clone()).unwrap();
    differences("", &misspelled, &serde_json::to_value(&service).unwrap(), &mut problems);
    assert_eq!(problems, vec![".spec.selectr: unknown field (dropped by the typed object)".to_owned()]);

    let source = "pub struct Example {\n    /// Doc.\n    #[arg(long, default_value = \"a,b]\")]\n    \
                  some_flag: Vec<String>,\n    #[arg(\n        long = \"renamed\",\n        global = true,\n    )]\n    \
                  pub other: Option<std::collections::BTreeMap<String, u8>>,\n}\n";
    let mut flags = BTreeMap::new();
    flags_of(source, "Example", false, &mut flags);
    assert_eq!(flags.keys().collect::<Vec<_>>(), ["renamed", "some-flag"]);
    assert_eq!(flags["some-flag"].default.as_deref(), Some("a,b]"));
    assert!(flags["some-flag"].repeatable && !flags["renamed"].repeatable);
    let mut global = BTreeMap::new();
    flags_of(source, "Example", true, &mut global);
    assert_eq!(global.keys().collect::<Vec<_>>(), ["renamed"]);
}
