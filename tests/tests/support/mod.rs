//! Shared by the `install_*` and `*_manifests` tests: what `kubectl kustomize` makes of an
//! overlay, or what one directory of `manifests/` holds, every object typed (k8s-openapi, or the
//! small structs of `foreign` for cert-manager and OpenShift kinds) with a round trip that fails
//! on unknown, misspelled or coerced fields; RBAC and mount lookups; the flags of the binary
//! (`clap_flags`).

#![allow(clippy::unwrap_used, dead_code)] // test helpers fail loudly; not every test uses every helper

pub mod clap_flags;
pub mod csv;
pub mod foreign;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, Service, ServiceAccount, Volume, VolumeMount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use numaresources_tests::workspace_root;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use foreign::{Certificate, Issuer, SecurityContextConstraints};

/// The namespace of the install.
pub const NAMESPACE: &str = "numaresources";
/// The file that makes a directory one resource of the install.
pub const KUSTOMIZATION: &str = "kustomization.yaml";
/// The kinds of the install that are not namespaced.
pub const CLUSTER_SCOPED: [&str; 8] = [
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "APIService",
    "SecurityContextConstraints",
];
/// The overlays a person applies.
pub const OVERLAYS: [&str; 3] = ["default", "cert-manager", "openshift"];

/// The file names of the manifests in `dir`: its YAML files but the kustomization, sorted.
pub fn manifest_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| (name.ends_with(".yaml") || name.ends_with(".yml")) && name != KUSTOMIZATION)
        .collect();
    files.sort();
    files
}

/// The `resources` the kustomization of `dir` lists, sorted.
pub fn kustomization_resources(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(KUSTOMIZATION)).unwrap();
    let kustomization: Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(kustomization["kind"], "Kustomization", "{}", dir.display());
    let resources = kustomization["resources"].as_array().unwrap_or_else(|| panic!("{}: no resources", dir.display()));
    let mut listed: Vec<String> = resources.iter().map(|r| r.as_str().unwrap().to_owned()).collect();
    listed.sort();
    listed
}

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
    /// Kind, origin and metadata of every object, in the same order, for the checks common to
    /// all kinds.
    pub objects: Vec<(String, String, ObjectMeta)>,
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
    pub network_policies: Vec<NetworkPolicy>,
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
            let kind = value["kind"].as_str().unwrap_or_default();
            install.add(format!("{origin}: {kind} {}", value["metadata"]["name"]), value);
        }
        install
    }

    /// The manifests of one directory of the repository (`manifests/webhook`, …) as they are on
    /// disk, without kustomize: every YAML file but the kustomization, each holding at least one
    /// object. Origins read `file#document`.
    pub fn from_dir(relative: &str) -> Self {
        let dir = workspace_root().join(relative);
        let files = manifest_files(&dir);
        assert!(!files.is_empty(), "no YAML in {relative}");
        let mut install = Self::default();
        for file in files {
            let text = std::fs::read_to_string(dir.join(&file)).unwrap();
            let mut documents = 0;
            for (index, document) in serde_norway::Deserializer::from_str(&text).enumerate() {
                let origin = format!("{file}#{index}");
                let value = Value::deserialize(document).unwrap_or_else(|e| panic!("{origin}: not YAML: {e}"));
                if value.is_null() {
                    continue; // an empty document (a stray `---`)
                }
                documents += 1;
                install.add(origin, &value);
            }
            assert!(documents > 0, "{file} holds no object");
        }
        install
    }

    /// Types `value` into its list; `at` says where it came from in failures.
    fn add(&mut self, at: String, value: &Value) {
        let api_version = value["apiVersion"].as_str().unwrap_or_default();
        let kind = value["kind"].as_str().unwrap_or_default();
        let meta = match (api_version, kind) {
            ("v1", "Namespace") => typed(&mut self.namespaces, &at, value),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => typed(&mut self.crds, &at, value),
            ("apps/v1", "Deployment") => typed(&mut self.deployments, &at, value),
            ("v1", "Service") => typed(&mut self.services, &at, value),
            ("v1", "ServiceAccount") => typed(&mut self.service_accounts, &at, value),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => typed(&mut self.cluster_roles, &at, value),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                typed(&mut self.cluster_role_bindings, &at, value)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => typed(&mut self.roles, &at, value),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => typed(&mut self.role_bindings, &at, value),
            ("policy/v1", "PodDisruptionBudget") => typed(&mut self.disruption_budgets, &at, value),
            ("networking.k8s.io/v1", "NetworkPolicy") => typed(&mut self.network_policies, &at, value),
            ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
                typed(&mut self.mutating, &at, value)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
                typed(&mut self.validating, &at, value)
            }
            ("apiregistration.k8s.io/v1", "APIService") => typed(&mut self.api_services, &at, value),
            ("cert-manager.io/v1", "Issuer") => typed(&mut self.issuers, &at, value),
            ("cert-manager.io/v1", "Certificate") => typed(&mut self.certificates, &at, value),
            ("security.openshift.io/v1", "SecurityContextConstraints") => {
                typed(&mut self.security_context_constraints, &at, value)
            }
            other => panic!("{at}: unexpected apiVersion/kind {other:?}; teach the install tests the kind"),
        };
        let name = meta.name.clone().unwrap_or_else(|| panic!("{at}: no metadata.name"));
        self.order.push((kind.to_owned(), meta.namespace.clone(), name));
        self.objects.push((kind.to_owned(), at, meta));
    }

    /// Fails on a cluster-scoped object with a namespace, a namespaced one outside [`NAMESPACE`]
    /// (but for the kinds of `in_kube_system`, which may also sit in kube-system), and on an
    /// object shipped twice.
    pub fn assert_placed_once(&self, in_kube_system: &[&str]) {
        let mut seen = BTreeSet::new();
        for (kind, origin, meta) in &self.objects {
            let name = meta.name.as_deref().unwrap_or_else(|| panic!("{origin}: no metadata.name"));
            if CLUSTER_SCOPED.contains(&kind.as_str()) {
                assert!(meta.namespace.is_none(), "{origin}: a cluster-scoped {kind} has a namespace");
            } else {
                let namespace = meta.namespace.as_deref().unwrap_or_else(|| panic!("{origin}: no namespace"));
                let system = in_kube_system.contains(&kind.as_str()) && namespace == "kube-system";
                assert!(namespace == NAMESPACE || system, "{origin}: {kind} {name} in {namespace}");
            }
            assert!(seen.insert((kind, &meta.namespace, name)), "{origin}: {kind} {name} twice");
        }
    }

    /// Fails on an object of a kind outside `kinds`, the kinds a test knows to check.
    pub fn assert_kinds_within(&self, kinds: &[&str]) {
        for (kind, origin, _) in &self.objects {
            assert!(kinds.contains(&kind.as_str()), "{origin}: unexpected kind {kind}; teach this test the kind");
        }
    }

    /// Whether an object of `kind` is shipped.
    pub fn ships(&self, kind: &str) -> bool {
        self.objects.iter().any(|(k, _, _)| k == kind)
    }

    /// The one Deployment of a component's directory.
    pub fn single_deployment(&self) -> &Deployment {
        single(&self.deployments, "Deployment")
    }

    pub fn single_pod_spec(&self) -> &PodSpec {
        pod_spec(self.single_deployment())
    }

    /// The one container of the one Deployment.
    pub fn single_container(&self) -> &Container {
        single(&self.single_pod_spec().containers, "container")
    }

    /// The one container's serving certificate as OLM mounts it: `--tls-cert-file` and `--tls-private-key-file`
    /// (values by `value_of`) under `olm_dir`, on an optional Secret (without it the binary generates
    /// a pair) mounted read-only without subPath (a subPath mount never sees rotation), projected to
    /// the file names the binary reads; and `--cert-dir`, where a generated pair goes, on a writable
    /// emptyDir.
    pub fn assert_serving_certificate_mounts(&self, value_of: impl Fn(&str) -> String, olm_dir: &str) {
        let (pod, container) = (self.single_pod_spec(), self.single_container());
        for flag in ["tls-cert-file", "tls-private-key-file"] {
            let file = value_of(flag);
            assert!(file.starts_with(olm_dir), "--{flag}={file}: OLM mounts the certificate under {olm_dir}");
            let (mount, volume) = volume_at(pod, container, &file);
            let secret = volume.secret.as_ref().unwrap_or_else(|| panic!("--{flag}: {file} is not on a Secret volume"));
            assert_eq!(secret.optional, Some(true), "--{flag}: the Secret is optional");
            assert_eq!(mount.read_only, Some(true), "--{flag}");
            assert!(mount.sub_path.is_none(), "--{flag}: a subPath mount never sees certificate rotation");
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
        let (mount, volume) = volume_at(pod, container, &value_of("cert-dir"));
        assert!(
            volume.empty_dir.is_some() && mount.read_only != Some(true),
            "--cert-dir must be on a writable emptyDir"
        );
    }

    pub fn single_service(&self) -> &Service {
        single(&self.services, "Service")
    }

    /// The Deployment called `name`.
    pub fn deployment(&self, name: &str) -> &Deployment {
        named(&self.deployments, name).unwrap_or_else(|| panic!("no Deployment {name}"))
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

    /// The rules of the ClusterRole `name`, none if it is not shipped.
    pub fn cluster_role_rules(&self, name: &str) -> Vec<PolicyRule> {
        named(&self.cluster_roles, name).and_then(|r| r.rules.clone()).unwrap_or_default()
    }
}

/// An object with Kubernetes metadata: every k8s-openapi kind, and those of `foreign`.
pub trait Object: DeserializeOwned + Serialize {
    fn meta(&self) -> &ObjectMeta;
}

impl<T: k8s_openapi::Metadata<Ty = ObjectMeta> + DeserializeOwned + Serialize> Object for T {
    fn meta(&self) -> &ObjectMeta {
        self.metadata()
    }
}

/// The kinds of `foreign` carry their metadata in a plain field.
macro_rules! foreign_objects {
    ($($kind:ty),*) => {
        $(impl Object for $kind {
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
        })*
    };
}

foreign_objects!(Issuer, Certificate, SecurityContextConstraints);

/// Deserializes `value` as `T` (errors with their field path), fails on anything the typed
/// object does not give back unchanged, and adds it to `list`.
pub fn typed<T: Object>(list: &mut Vec<T>, origin: &str, value: &Value) -> ObjectMeta {
    let object: T = decode(origin, value);
    let meta = object.meta().clone();
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

/// The only element of `objects`, failing on none or several.
pub fn single<'a, T>(objects: &'a [T], what: &str) -> &'a T {
    assert_eq!(objects.len(), 1, "expected exactly one {what}");
    &objects[0]
}

pub fn named<'a, T: Object>(objects: &'a [T], name: &str) -> Option<&'a T> {
    objects.iter().find(|o| o.meta().name.as_deref() == Some(name))
}

pub fn binds(subjects: Option<&[Subject]>, namespace: &str, name: &str) -> bool {
    subjects
        .unwrap_or_default()
        .iter()
        .any(|s| s.kind == "ServiceAccount" && s.name == name && s.namespace.as_deref() == Some(namespace))
}

/// Whether a list of an RBAC or admission rule (groups, versions, resources…) holds `wanted`
/// or the wildcard `*`.
pub fn lists_or_wildcard(list: &Option<Vec<String>>, wanted: &str) -> bool {
    list.as_deref().unwrap_or_default().iter().any(|item| item == wanted || item == "*")
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

pub fn labels(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
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

/// The volume mount holding `file` in `container` (the deepest, when mounts nest) and the volume
/// of `pod` it mounts; fails when the file is on no volume.
pub fn volume_at<'a>(pod: &'a PodSpec, container: &'a Container, file: &str) -> (&'a VolumeMount, &'a Volume) {
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| Path::new(file).starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())
        .unwrap_or_else(|| panic!("{file} is on no volume mount (the root filesystem is read-only)"));
    let volume = pod.volumes.iter().flatten().find(|v| v.name == mount.name);
    (mount, volume.unwrap_or_else(|| panic!("{file}: mount of the undeclared volume {}", mount.name)))
}

/// The Secret of the volume holding `file`, in `container` of `deployment`.
pub fn secret_mounted_for(deployment: &Deployment, container: &Container, file: &str) -> Option<String> {
    let (_, volume) = volume_at(pod_spec(deployment), container, file);
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
