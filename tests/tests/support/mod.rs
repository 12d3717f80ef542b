//! Shared by the `install_*` tests: what `kubectl kustomize` makes of an overlay, every object
//! typed (k8s-openapi, or the small structs below for cert-manager and OpenShift kinds) with a
//! round trip that fails on unknown, misspelled or coerced fields.

#![allow(clippy::unwrap_used, dead_code)] // test helpers fail loudly; not every test uses every helper

pub mod csv;
pub mod foreign;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use numaresources_tests::workspace_root;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use foreign::{Certificate, Issuer, SecurityContextConstraints};

/// The namespace of the install.
pub const NAMESPACE: &str = "numaresources";
/// The overlays a person applies.
pub const OVERLAYS: [&str; 3] = ["default", "cert-manager", "openshift"];

/// The rendered output of `kubectl kustomize <dir>`, as YAML documents in output order.
pub fn kustomize(dir: &Path) -> Vec<Value> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl kustomize (kubectl must be on PATH): {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kubectl kustomize {}: {stderr}", dir.display());
    let text = String::from_utf8(output.stdout).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|document| <Value as serde::Deserialize>::deserialize(document).unwrap())
        .filter(|value| !value.is_null())
        .collect()
}

/// Every object of a rendered install, typed.
#[derive(Debug, Default)]
pub struct Install {
    /// (kind, namespace, name) of every object, in output order: the order `kubectl apply -k`
    /// and `kubectl delete -k` act in.
    pub order: Vec<(String, Option<String>, String)>,
    pub namespaces: Vec<Namespace>,
    pub crds: Vec<CustomResourceDefinition>,
    pub deployments: Vec<Deployment>,
    pub services: Vec<Service>,
    pub service_accounts: Vec<ServiceAccount>,
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
    pub disruption_budgets: Vec<PodDisruptionBudget>,
    pub mutating: Vec<MutatingWebhookConfiguration>,
    pub validating: Vec<ValidatingWebhookConfiguration>,
    pub api_services: Vec<APIService>,
    pub issuers: Vec<Issuer>,
    pub certificates: Vec<Certificate>,
    pub security_context_constraints: Vec<SecurityContextConstraints>,
}

impl Install {
    /// `kubectl kustomize manifests/<overlay>`, typed.
    pub fn build(overlay: &str) -> Self {
        Self::from_documents(overlay, &kustomize(&workspace_root().join("manifests").join(overlay)))
    }

    pub fn from_documents(origin: &str, documents: &[Value]) -> Self {
        let mut install = Self::default();
        for value in documents {
            let api_version = value["apiVersion"].as_str().unwrap_or_default();
            let kind = value["kind"].as_str().unwrap_or_default();
            let at = format!("{origin}: {kind} {}", value["metadata"]["name"]);
            let meta = match (api_version, kind) {
                ("v1", "Namespace") => typed(&mut install.namespaces, &at, value, |o| &o.metadata),
                ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                    typed(&mut install.crds, &at, value, |o| &o.metadata)
                }
                ("apps/v1", "Deployment") => typed(&mut install.deployments, &at, value, |o| &o.metadata),
                ("v1", "Service") => typed(&mut install.services, &at, value, |o| &o.metadata),
                ("v1", "ServiceAccount") => typed(&mut install.service_accounts, &at, value, |o| &o.metadata),
                ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                    typed(&mut install.cluster_roles, &at, value, |o| &o.metadata)
                }
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                    typed(&mut install.cluster_role_bindings, &at, value, |o| &o.metadata)
                }
                ("rbac.authorization.k8s.io/v1", "Role") => typed(&mut install.roles, &at, value, |o| &o.metadata),
                ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                    typed(&mut install.role_bindings, &at, value, |o| &o.metadata)
                }
                ("policy/v1", "PodDisruptionBudget") => {
                    typed(&mut install.disruption_budgets, &at, value, |o| &o.metadata)
                }
                ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
                    typed(&mut install.mutating, &at, value, |o| &o.metadata)
                }
                ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
                    typed(&mut install.validating, &at, value, |o| &o.metadata)
                }
                ("apiregistration.k8s.io/v1", "APIService") => {
                    typed(&mut install.api_services, &at, value, |o| &o.metadata)
                }
                ("cert-manager.io/v1", "Issuer") => typed(&mut install.issuers, &at, value, |o| &o.metadata),
                ("cert-manager.io/v1", "Certificate") => typed(&mut install.certificates, &at, value, |o| &o.metadata),
                ("security.openshift.io/v1", "SecurityContextConstraints") => {
                    typed(&mut install.security_context_constraints, &at, value, |o| &o.metadata)
                }
                other => panic!("{at}: unexpected apiVersion/kind {other:?}; teach the install tests the kind"),
            };
            let name = meta.name.clone().unwrap_or_else(|| panic!("{at}: no metadata.name"));
            install.order.push((kind.to_owned(), meta.namespace.clone(), name));
        }
        install
    }

    /// The Deployment called `name`.
    pub fn deployment(&self, name: &str) -> &Deployment {
        named(&self.deployments, name, |d| &d.metadata).unwrap_or_else(|| panic!("no Deployment {name}"))
    }

    /// The Service `namespace/name`, if shipped.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        self.services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name) && s.metadata.namespace.as_deref() == Some(namespace))
    }

    /// The one Deployment whose pods a Service selects (fails on none or several).
    pub fn backend_of(&self, service: &Service) -> &Deployment {
        let selector = service.spec.as_ref().and_then(|s| s.selector.clone()).unwrap_or_default();
        assert!(!selector.is_empty(), "Service {:?} has no selector", service.metadata.name);
        let selected: Vec<&Deployment> = self
            .deployments
            .iter()
            .filter(|d| d.metadata.namespace == service.metadata.namespace)
            .filter(|d| {
                let labels = pod_labels(d);
                selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .collect();
        assert_eq!(selected.len(), 1, "Service {:?} selects {} Deployments", service.metadata.name, selected.len());
        selected[0]
    }

    /// Every rule `namespace/account` holds, cluster-wide and in `in_namespace`, through the
    /// bindings and roles of this install.
    pub fn rules_of(&self, namespace: &str, account: &str, in_namespace: &str) -> Vec<PolicyRule> {
        let mut rules = self.cluster_rules_of(namespace, account);
        rules.extend(self.rules_in(namespace, account, in_namespace));
        rules
    }

    /// What ClusterRoleBindings grant `namespace/account`.
    pub fn cluster_rules_of(&self, namespace: &str, account: &str) -> Vec<PolicyRule> {
        let bindings = self.cluster_role_bindings.iter().filter(|b| binds(b.subjects.as_deref(), namespace, account));
        bindings.flat_map(|b| self.cluster_role_rules(&b.role_ref.name)).collect()
    }

    /// What RoleBindings in `in_namespace` grant `namespace/account`.
    pub fn rules_in(&self, namespace: &str, account: &str, in_namespace: &str) -> Vec<PolicyRule> {
        let mut rules = Vec::new();
        for binding in &self.role_bindings {
            if binding.metadata.namespace.as_deref() != Some(in_namespace)
                || !binds(binding.subjects.as_deref(), namespace, account)
            {
                continue;
            }
            if binding.role_ref.kind == "ClusterRole" {
                rules.extend(self.cluster_role_rules(&binding.role_ref.name));
            } else if let Some(role) = self.roles.iter().find(|r| {
                r.metadata.name.as_deref() == Some(binding.role_ref.name.as_str())
                    && r.metadata.namespace.as_deref() == Some(in_namespace)
            }) {
                rules.extend(role.rules.clone().unwrap_or_default());
            }
        }
        rules
    }

    fn cluster_role_rules(&self, name: &str) -> Vec<PolicyRule> {
        named(&self.cluster_roles, name, |r| &r.metadata).and_then(|r| r.rules.clone()).unwrap_or_default()
    }
}

/// Deserializes `value` as `T` (errors with their field path) and fails on anything the typed
/// object does not give back unchanged.
pub fn typed<T: DeserializeOwned + Serialize>(
    list: &mut Vec<T>,
    origin: &str,
    value: &Value,
    metadata: fn(&T) -> &ObjectMeta,
) -> ObjectMeta {
    let object: T = decode(origin, value);
    let meta = metadata(&object).clone();
    list.push(object);
    meta
}

/// `value` as `T`, failing on fields the typed object drops, adds or changes.
pub fn decode<T: DeserializeOwned + Serialize>(origin: &str, value: &Value) -> T {
    let object: T = serde_path_to_error::deserialize(value.clone())
        .unwrap_or_else(|e| panic!("{origin}: at {}: {}", e.path(), e.inner()));
    let mut problems = Vec::new();
    differences("", value, &serde_json::to_value(&object).unwrap(), &mut problems);
    assert!(problems.is_empty(), "{origin}: fields lost or changed by the typed object:\n  {}", problems.join("\n  "));
    object
}

/// Where `input` and `output` differ, as `path: what` lines.
pub fn differences(path: &str, input: &Value, output: &Value, problems: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => differences(&here, value, other, problems),
                    None => problems.push(format!("{here}: unknown field (dropped by the typed object)")),
                }
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                problems.push(format!("{path}.{key}: added by the typed object"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), x, y, problems);
            }
        }
        (a, b) if a == b => {}
        (a, b) => problems.push(format!("{path}: written {a}, read back as {b}")),
    }
}

pub fn named<'a, T>(objects: &'a [T], name: &str, metadata: fn(&T) -> &ObjectMeta) -> Option<&'a T> {
    objects.iter().find(|o| metadata(o).name.as_deref() == Some(name))
}

pub fn binds(subjects: Option<&[Subject]>, namespace: &str, name: &str) -> bool {
    subjects
        .unwrap_or_default()
        .iter()
        .any(|s| s.kind == "ServiceAccount" && s.name == name && s.namespace.as_deref() == Some(namespace))
}

/// Whether `rules` allow `verb` on `group/resource` (named `name`, if given).
pub fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str, name: Option<&str>) -> bool {
    rules.iter().any(|rule| {
        rule.api_groups.iter().flatten().any(|g| g == group)
            && rule.resources.iter().flatten().any(|r| r == resource)
            && rule.verbs.iter().any(|v| v == verb)
            && match (rule.resource_names.as_deref(), name) {
                (None | Some([]), _) => true,
                (Some(names), Some(name)) => names.iter().any(|n| n == name),
                (Some(_), None) => false,
            }
    })
}

pub fn pod_spec(deployment: &Deployment) -> &PodSpec {
    deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

pub fn pod_labels(deployment: &Deployment) -> BTreeMap<String, String> {
    let template = &deployment.spec.as_ref().unwrap().template;
    template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default()
}

pub fn annotations(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.annotations.clone().unwrap_or_default()
}

/// The container port a Service port's `targetPort` names (by name or number), in `deployment`.
pub fn target_container_port(deployment: &Deployment, target: &IntOrString) -> Option<i32> {
    pod_spec(deployment).containers.iter().flat_map(|c| c.ports.iter().flatten()).find_map(|p| match target {
        IntOrString::String(name) => (p.name.as_deref() == Some(name.as_str())).then_some(p.container_port),
        IntOrString::Int(port) => (p.container_port == *port).then_some(p.container_port),
    })
}

/// The Secret volume mounted at the directory holding `file`, in `container` of `deployment`.
pub fn secret_mounted_for(deployment: &Deployment, container: &Container, file: &str) -> Option<String> {
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| Path::new(file).starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())?;
    let volume = pod_spec(deployment).volumes.iter().flatten().find(|v| v.name == mount.name)?;
    volume.secret.as_ref().and_then(|s| s.secret_name.clone())
}

/// The value of `--flag=value` in `args`.
pub fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().find_map(|a| a.strip_prefix(&format!("--{flag}=")))
}

/// The subcommands of the binary: the variants of `enum Command` in `cmd/src/cli.rs`, in kebab
/// case, as clap names them.
pub fn subcommands() -> Vec<String> {
    let cli = std::fs::read_to_string(workspace_root().join("cmd/src/cli.rs")).unwrap();
    let start = cli.find("enum Command {").expect("enum Command in cmd/src/cli.rs");
    let body = &cli[start..start + cli[start..].find("\n}").unwrap()];
    let variants: Vec<String> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#') && l.chars().next().is_some_and(char::is_uppercase))
        .map(|l| l.split(|c: char| !c.is_alphanumeric()).next().unwrap().to_lowercase())
        .collect();
    for known in ["apiserver", "webhook", "controllers", "rte"] {
        assert!(variants.iter().any(|v| v == known), "the reader of enum Command missed {known}: {variants:?}");
    }
    variants
}

/// Whether `numaresources <subcommand>` declares `--<flag>`: a field of that name in
/// `cmd/src/<subcommand>.rs`, an explicit `long = "<flag>"` there, or a global option of
/// `cmd/src/cli.rs`. (The manifest tests of each directory check the flags thoroughly; this
/// catches an install-level argument the binary does not have.)
pub fn declares_flag(subcommand: &str, flag: &str) -> bool {
    let cmd = workspace_root().join("cmd/src");
    let own = std::fs::read_to_string(cmd.join(format!("{subcommand}.rs"))).unwrap_or_default();
    let cli = std::fs::read_to_string(cmd.join("cli.rs")).unwrap();
    let field = format!(" {}:", flag.replace('-', "_"));
    let long = format!("long = \"{flag}\"");
    own.lines().any(|l| l.starts_with("    ") && (l.contains(&field) || l.contains(&long)))
        || (cli.contains(&field) && cli.contains("global = true"))
}
