//! The OLM bundle (`manifests/bundle`, written by `numaresources bundle`) agrees with the
//! kustomize install as `kubectl kustomize manifests/default` renders it: the same Deployments
//! (but for what OLM does itself), the same permissions, an `apiservicedefinitions` entry and
//! `webhookdefinitions` that reach the same container ports and paths, and owned CRDs that are
//! the generated ones. The CSV is read into structs that refuse unknown fields.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use numaresources_controllers::{ApiserverDeployment, CertificateMode, check_compatible};
use numaresources_tests::workspace_root;
use numaresources_webhook::{MUTATE_PODS_PATH, WEBHOOK_PATHS};
use serde_json::{Value, json};
use support::csv::ClusterServiceVersion;
use support::{Install, NAMESPACE, pod_spec};

const BUNDLE: &str = "manifests/bundle";
const CSV_FILE: &str = "manifests/numaresources-operator.clusterserviceversion.yaml";
/// Where OLM mounts the certificates it makes (OLM's paths for the certificates of APIServices and webhooks).
const OLM_CERTIFICATE_PATHS: [&str; 2] =
    ["/apiserver.local.config/certificates", "/tmp/k8s-webhook-server/serving-certs"];
/// The kinds OLM installs from a registry+v1 bundle besides the CSV and CRDs.
const BUNDLE_KINDS: [&str; 7] =
    ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "PodDisruptionBudget", "Service", "ServiceAccount"];

fn read(relative: &str) -> String {
    let path = workspace_root().join(BUNDLE).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn csv() -> ClusterServiceVersion {
    let value: Value = serde_norway::from_str(&read(CSV_FILE)).unwrap();
    support::decode("the ClusterServiceVersion", &value)
}

/// Rules as comparable text.
fn rule_set(rules: &[PolicyRule]) -> BTreeSet<String> {
    rules.iter().map(|r| serde_json::to_string(r).unwrap()).collect()
}

#[test]
fn the_csv_names_this_version_and_installs_cluster_wide_only() {
    let csv = csv();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(csv.api_version, "operators.coreos.com/v1alpha1");
    assert_eq!(csv.kind, "ClusterServiceVersion");
    assert_eq!(csv.metadata.name.as_deref(), Some(format!("numaresources-operator.v{version}").as_str()));
    assert_eq!(csv.spec.version, version);
    let supported: Vec<&str> =
        csv.spec.install_modes.iter().filter(|m| m.supported).map(|m| m.type_.as_str()).collect();
    assert_eq!(supported, ["AllNamespaces"], "cluster-scoped singletons and a cluster-wide pod webhook");
    assert_eq!(csv.spec.install_modes.len(), 4, "every install mode is stated");
    assert_eq!(csv.spec.install.strategy, "deployment");

    let annotations: Value = serde_norway::from_str(&read("metadata/annotations.yaml")).unwrap();
    let a = &annotations["annotations"];
    assert_eq!(a["operators.operatorframework.io.bundle.mediatype.v1"], "registry+v1");
    assert_eq!(a["operators.operatorframework.io.bundle.manifests.v1"], "manifests/");
    assert_eq!(a["operators.operatorframework.io.bundle.metadata.v1"], "metadata/");
    let package = a["operators.operatorframework.io.bundle.package.v1"].as_str().unwrap();
    assert!(csv.metadata.name.as_deref().unwrap().starts_with(&format!("{package}.v")), "the CSV belongs to {package}");
    // The bundle image carries the same labels.
    let dockerfile = read("bundle.Dockerfile");
    let labels: Vec<(&str, &str)> =
        dockerfile.lines().filter_map(|l| l.strip_prefix("LABEL ")).filter_map(|l| l.split_once('=')).collect();
    assert_eq!(labels.len(), a.as_object().unwrap().len(), "one LABEL per annotation");
    for (key, value) in labels {
        assert_eq!(a[key], value, "bundle.Dockerfile: LABEL {key}");
    }
    let channels: Vec<&str> =
        a["operators.operatorframework.io.bundle.channels.v1"].as_str().unwrap().split(',').collect();
    assert!(channels.contains(&a["operators.operatorframework.io.bundle.channel.default.v1"].as_str().unwrap()));

    // alm-examples: the samples, valid custom resources of the owned CRDs.
    let examples = csv.metadata.annotations.clone().unwrap_or_default()["alm-examples"].clone();
    let examples: Vec<Value> = serde_json::from_str(&examples).unwrap();
    let kinds: BTreeSet<&str> = examples.iter().filter_map(|e| e["kind"].as_str()).collect();
    let owned: BTreeSet<&str> = csv.spec.customresourcedefinitions.owned.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, owned, "one example per owned kind");
}

#[test]
fn every_bundle_file_is_one_object_olm_installs_and_the_crds_are_the_generated_ones() {
    let dir = workspace_root().join(BUNDLE).join("manifests");
    let crds = workspace_root().join("manifests/crds");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let documents: Vec<Value> = serde_norway::Deserializer::from_str(&text)
            .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .collect();
        assert_eq!(documents.len(), 1, "{file}: OLM reads one object per file");
        let object = &documents[0];
        let kind = object["kind"].as_str().unwrap();
        files += 1;
        match kind {
            "ClusterServiceVersion" => assert!(file.ends_with(".clusterserviceversion.yaml")),
            "CustomResourceDefinition" => {
                let generated: Value =
                    serde_norway::from_str(&std::fs::read_to_string(crds.join(&file)).unwrap()).unwrap();
                assert_eq!(*object, generated, "{file}: not the CRD of manifests/crds");
            }
            other => {
                assert!(BUNDLE_KINDS.contains(&other), "{file}: OLM does not install a {other} from a bundle");
                assert!(object["metadata"]["namespace"].is_null(), "{file}: OLM picks the namespace");
                Install::from_documents(&file, &documents);
            }
        }
    }
    let owned = csv().spec.customresourcedefinitions.owned;
    let crd_files =
        std::fs::read_dir(&crds).unwrap().filter(|e| e.as_ref().unwrap().file_name() != "kustomization.yaml");
    assert!(files > crd_files.count(), "the bundle holds the CSV and every CRD");
    for crd in numaresources_api::crds::all() {
        let name = crd.metadata.name.clone().unwrap();
        for version in crd.spec.versions.iter().filter(|v| v.served) {
            let entry = owned.iter().find(|o| o.name == name && o.version == version.name);
            let entry = entry.unwrap_or_else(|| panic!("{name} {} is not owned", version.name));
            assert_eq!(entry.kind, crd.spec.names.kind);
            assert!(!entry.description.is_empty() && !entry.display_name.is_empty(), "{name}: described");
        }
    }
}

/// The kustomize Deployment as OLM runs it: OLM's certificate mounts instead of ours, no fixed
/// UIDs, and the controllers in OLM mode.
fn as_under_olm(spec: &Value) -> Value {
    let mut spec = spec.clone();
    let pod = &mut spec["template"]["spec"];
    // (`get_mut`, not indexing: indexing a missing key would insert a null.)
    if let Some(context) = pod.get_mut("securityContext").and_then(Value::as_object_mut) {
        for field in ["runAsUser", "runAsGroup", "fsGroup"] {
            context.remove(field);
        }
    }
    let mut dropped = Vec::new();
    for container in pod.get_mut("containers").and_then(Value::as_array_mut).unwrap() {
        if let Some(mounts) = container.get_mut("volumeMounts").and_then(Value::as_array_mut) {
            mounts.retain(|m| {
                let olm = OLM_CERTIFICATE_PATHS.iter().any(|p| m["mountPath"] == *p);
                if olm {
                    dropped.push(m["name"].clone());
                }
                !olm
            });
        }
        for arg in container.get_mut("args").and_then(Value::as_array_mut).into_iter().flatten() {
            if arg == "--certificate-mode=self-managed" {
                *arg = json!("--certificate-mode=olm");
            }
        }
    }
    if let Some(volumes) = pod.get_mut("volumes").and_then(Value::as_array_mut) {
        volumes.retain(|v| !dropped.contains(&v["name"]));
    }
    spec
}

#[test]
fn the_deployments_are_the_kustomize_ones_as_olm_runs_them() {
    let install = Install::build("default");
    let csv = csv();
    let deployments = &csv.spec.install.spec.deployments;
    let names: BTreeSet<&str> = deployments.iter().map(|d| d.name.as_str()).collect();
    let expected: BTreeSet<&str> = install.deployments.iter().filter_map(|d| d.metadata.name.as_deref()).collect();
    assert_eq!(names, expected);
    let image = csv.metadata.annotations.clone().unwrap_or_default()["containerImage"].clone();
    for deployment in deployments {
        let kustomized = install.deployment(&deployment.name);
        assert_eq!(Some(&deployment.label), kustomized.metadata.labels.as_ref(), "{}", deployment.name);
        let expected = as_under_olm(&serde_json::to_value(kustomized.spec.as_ref().unwrap()).unwrap());
        let bundled = serde_json::to_value(&deployment.spec).unwrap();
        let mut problems = Vec::new();
        support::differences("", &expected, &bundled, &mut problems);
        assert!(
            problems.is_empty(),
            "{}: the bundle differs from the kustomize install:\n  {}",
            deployment.name,
            problems.join("\n  ")
        );
        // The same image everywhere, named by the CSV for catalogs.
        let pod = deployment.spec.template.spec.as_ref().unwrap();
        for container in &pod.containers {
            assert_eq!(container.image.as_ref(), Some(&image), "{}", deployment.name);
        }
    }
    let related: Vec<&str> = csv.spec.related_images.iter().map(|r| r.image.as_str()).collect();
    assert_eq!(related, [image.as_str()], "relatedImages lists the one image");
    let controllers = deployments.iter().find(|d| d.name == "numaresources-controllers").unwrap();
    let args = controllers.spec.template.spec.as_ref().unwrap().containers[0].args.clone().unwrap();
    assert_eq!(support::flag(&args, "certificate-mode"), Some("olm"), "OLM owns the certificates and caBundle");
    assert_eq!(support::flag(&args, "apiserver-deployment"), Some("installed"), "the CSV ships the API server");
    let mode: CertificateMode = support::flag(&args, "certificate-mode").unwrap().parse().unwrap();
    let deployment: ApiserverDeployment = support::flag(&args, "apiserver-deployment").unwrap().parse().unwrap();
    check_compatible(mode, deployment).unwrap();
}

#[test]
fn the_apiservice_definition_reaches_the_api_server_container_port() {
    let install = Install::build("default");
    let csv = csv();
    let owned = &csv.spec.apiservicedefinitions.owned;
    assert_eq!(owned.len(), 1);
    let definition = &owned[0];
    let api_service = install.api_services[0].spec.as_ref().unwrap();
    assert_eq!(Some(&definition.group), api_service.group.as_ref());
    assert_eq!(Some(&definition.version), api_service.version.as_ref());
    assert_eq!(definition.group, numaresources_api::nrt::GROUP);
    assert_eq!(definition.kind, numaresources_api::nrt::KIND);
    assert_eq!(definition.name, numaresources_api::nrt::PLURAL);
    // OLM's Service forwards containerPort to the same port of the deployment's pods.
    let reference = api_service.service.as_ref().unwrap();
    let service = install.service(NAMESPACE, reference.name.as_deref().unwrap()).unwrap();
    let backend = install.backend_of(service);
    assert_eq!(Some(definition.deployment_name.as_str()), backend.metadata.name.as_deref());
    let port = service.spec.as_ref().unwrap().ports.iter().flatten().find(|p| Some(p.port) == reference.port).unwrap();
    let served = support::target_container_port(backend, port.target_port.as_ref().unwrap());
    assert_eq!(served, Some(definition.container_port), "containerPort is the port the API server listens on");
    let listening = support::flag(pod_spec(backend).containers[0].args.as_deref().unwrap(), "secure-port");
    assert_eq!(listening, Some(definition.container_port.to_string().as_str()));
}

#[test]
fn the_webhook_definitions_are_the_kustomize_and_controllers_webhooks_through_olms_service() {
    let install = Install::build("default");
    let csv = csv();
    let definitions = &csv.spec.webhookdefinitions;
    let mut kustomized = Vec::new();
    // Outside OLM the controllers apply the pod webhook (while pods are routed); under OLM the
    // CSV declares it, as they render it.
    let pod_routing = numaresources_controllers::render::pod_routing::configuration(NAMESPACE, None).unwrap();
    for configuration in install.mutating.iter().chain([&pod_routing]) {
        for w in configuration.webhooks.iter().flatten() {
            kustomized.push(("MutatingAdmissionWebhook", serde_json::to_value(w).unwrap()));
        }
    }
    for configuration in &install.validating {
        for w in configuration.webhooks.iter().flatten() {
            kustomized.push(("ValidatingAdmissionWebhook", serde_json::to_value(w).unwrap()));
        }
    }
    assert_eq!(definitions.len(), kustomized.len(), "one definition per webhook");
    for (type_, webhook) in &kustomized {
        let name = webhook["name"].as_str().unwrap();
        let definition = definitions.iter().find(|d| d.generate_name == name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(definition.type_, *type_, "{name}");
        let service = &webhook["clientConfig"]["service"];
        assert_eq!(definition.webhook_path, service["path"].as_str().unwrap(), "{name}");
        assert!(WEBHOOK_PATHS.contains(&definition.webhook_path.as_str()), "{name}: a path of the webhook");
        assert_eq!(
            i64::from(definition.container_port),
            service["port"].as_i64().unwrap_or(443),
            "{name}: Service port"
        );
        let service = install.service(NAMESPACE, service["name"].as_str().unwrap()).unwrap();
        let backend = install.backend_of(service);
        assert_eq!(Some(definition.deployment_name.as_str()), backend.metadata.name.as_deref(), "{name}");
        let port = service.spec.as_ref().unwrap().ports.iter().flatten().find(|p| p.port == definition.container_port);
        let served = support::target_container_port(backend, port.unwrap().target_port.as_ref().unwrap());
        assert_eq!(served, Some(definition.target_port), "{name}: targetPort is the port the webhook listens on");
        let same = |field: &str, bundled: Value| assert_eq!(webhook[field], bundled, "{name}: {field}");
        same("rules", serde_json::to_value(&definition.rules).unwrap());
        same("failurePolicy", json!(definition.failure_policy));
        same("sideEffects", json!(definition.side_effects));
        same("matchPolicy", json!(definition.match_policy));
        same("timeoutSeconds", json!(definition.timeout_seconds));
        same("admissionReviewVersions", json!(definition.admission_review_versions));
        assert_eq!(
            webhook.get("reinvocationPolicy"),
            definition.reinvocation_policy.as_ref().map(|p| json!(p)).as_ref()
        );
        // OLM refuses webhooks on every group, on OLM's own and on webhook configurations.
        for rule in &definition.rules {
            for group in rule.api_groups.iter().flatten() {
                assert!(
                    !["*", "operators.coreos.com", "admissionregistration.k8s.io"].contains(&group.as_str()),
                    "{name}"
                );
            }
        }
    }
    // OLM generates the namespaceSelector (all namespaces for an AllNamespaces install), so the
    // kustomize exclusion of kube-system and our namespace is gone: the pod webhook must fail open.
    let pods = definitions.iter().find(|d| d.webhook_path == MUTATE_PODS_PATH).unwrap();
    assert_eq!(pods.failure_policy, "Ignore");
}

/// The controllers' pod webhook configuration (outside OLM).
const POD_ROUTING: &str = "numaresources-pod-routing";
/// What OLM binds itself for the API server it installs, so the CSV grants nothing on it (a rule
/// left with no name is dropped: no names would mean every object).
const MADE_BY_OLM: &str = "numaresources-apiserver:extension-apiserver-authentication-reader";

fn without_olm_bindings(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    rules
        .into_iter()
        .filter_map(|mut rule| match rule.resource_names.as_mut() {
            Some(names) => {
                names.retain(|name| name != MADE_BY_OLM);
                (!names.is_empty()).then_some(rule)
            }
            None => Some(rule),
        })
        .collect()
}

#[test]
fn the_csv_grants_nothing_on_the_api_servers_own_binding_and_keeps_the_schedulers() {
    let csv = csv();
    let rules: Vec<String> = csv
        .spec
        .install
        .spec
        .cluster_permissions
        .iter()
        .flat_map(|p| p.rules.iter())
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    assert!(rules.iter().all(|rule| !rule.contains(MADE_BY_OLM)), "{rules:#?}");
    assert!(
        rules.iter().any(|rule| rule.contains("numaresources-scheduler:extension-apiserver-authentication-reader"))
    );
}

/// Under OLM the CSV declares the pod webhook: the controllers never apply their pod routing
/// configuration, so the CSV grants nothing for it (`create` would cover every configuration).
fn without_pod_routing(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let for_pod_routing = |rule: &PolicyRule| {
        rule.resources.as_deref() == Some(&["mutatingwebhookconfigurations".to_owned()][..])
            && (rule.verbs == ["create"] || rule.resource_names.as_deref() == Some(&[POD_ROUTING.to_owned()][..]))
    };
    rules.into_iter().filter(|rule| !for_pod_routing(rule)).collect()
}

#[test]
fn the_csv_grants_nothing_for_the_controllers_own_pod_webhook() {
    let csv = csv();
    let spec = &csv.spec.install.spec;
    for rule in spec.cluster_permissions.iter().chain(&spec.permissions).flat_map(|p| p.rules.iter()) {
        let on_mutating = rule.resources.iter().flatten().any(|r| r == "mutatingwebhookconfigurations");
        assert!(!(on_mutating && rule.verbs.iter().any(|v| v == "create")), "{rule:?}");
        assert!(!rule.resource_names.iter().flatten().any(|n| n == POD_ROUTING), "{rule:?}");
    }
}

/// The rules of the built-in ClusterRoles the install binds `account` to that OLM does not bind
/// itself, as Kubernetes defines them (`kubectl get clusterrole <name> -o yaml` on 1.33): the CSV
/// must grant them as rules.
fn built_in_rules_bound_to(install: &Install, account: &str) -> Vec<PolicyRule> {
    let issuer_discovery = PolicyRule {
        non_resource_urls: Some(
            [
                "/.well-known/openid-configuration",
                "/.well-known/openid-configuration/",
                "/openid/v1/jwks",
                "/openid/v1/jwks/",
            ]
            .map(str::to_owned)
            .to_vec(),
        ),
        verbs: vec!["get".to_owned()],
        ..PolicyRule::default()
    };
    let bound = |role: &str| {
        install.cluster_role_bindings.iter().any(|binding| {
            binding.role_ref.name == role
                && binding
                    .subjects
                    .iter()
                    .flatten()
                    .any(|s| s.name == account && s.namespace.as_deref() == Some(NAMESPACE))
        })
    };
    if bound("system:service-account-issuer-discovery") { vec![issuer_discovery] } else { Vec::new() }
}

#[test]
fn permissions_are_what_the_kustomize_install_grants() {
    let install = Install::build("default");
    let csv = csv();
    let spec = &csv.spec.install.spec;
    for deployment in &install.deployments {
        let account = pod_spec(deployment).service_account_name.clone().unwrap();
        let of = |list: &[support::csv::Permission]| {
            list.iter().filter(|p| p.service_account_name == account).flat_map(|p| p.rules.clone()).collect::<Vec<_>>()
        };
        let cluster = rule_set(&of(&spec.cluster_permissions));
        let namespaced = rule_set(&of(&spec.permissions));
        // Cluster-wide: the ClusterRoles bound to the account, and what its Roles grant outside
        // the install namespace (OLM grants `permissions` only inside it).
        let mut expected_cluster = rule_set(&without_pod_routing(install.cluster_rules_of(NAMESPACE, &account)));
        expected_cluster.extend(rule_set(&without_olm_bindings(install.rules_in(NAMESPACE, &account, "kube-system"))));
        expected_cluster.extend(rule_set(&built_in_rules_bound_to(&install, &account)));
        assert_eq!(cluster, expected_cluster, "{account}: clusterPermissions");
        let expected_namespaced = rule_set(&install.rules_in(NAMESPACE, &account, NAMESPACE));
        assert_eq!(namespaced, expected_namespaced, "{account}: permissions");
    }
    let accounts: BTreeSet<&str> =
        spec.cluster_permissions.iter().chain(&spec.permissions).map(|p| p.service_account_name.as_str()).collect();
    let running: BTreeSet<String> =
        spec.deployments.iter().filter_map(|d| d.spec.template.spec.as_ref()?.service_account_name.clone()).collect();
    for account in accounts {
        assert!(running.contains(account), "{account} runs no deployment");
    }
}

/// Under OLM the pod webhook has no namespaceSelector (OLM generates an empty one for an
/// AllNamespaces install), so kube-apiserver calls it for the system namespaces and our own too.
/// The webhook itself must leave those pods alone, even when the scheduler routes every pod.
#[tokio::test]
async fn without_a_namespace_selector_the_webhook_still_leaves_system_and_own_pods_alone() {
    use axum::body::Body;
    use tower::ServiceExt;

    let scheduler = serde_json::from_value(json!({
        "apiVersion": "nodetopology.openshift.io/v1",
        "kind": "NUMAResourcesScheduler",
        "metadata": {"name": "numaresourcesscheduler"},
        "spec": {"imageSpec": "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5", "podRouting": {"mode": "All"}},
    }))
    .unwrap();
    let (cluster, mut feeds) = numaresources_webhook::ClusterCache::new();
    feeds.set_scheduler(Some(scheduler));
    let namespaces = ["numa-workloads", "kube-system", "kube-node-lease", NAMESPACE];
    feeds.set_namespaces(namespaces.map(|ns| (ns, [("kubernetes.io/metadata.name".to_owned(), ns.to_owned())].into())));
    feeds.set_nodes([]);
    let webhook =
        numaresources_webhook::Webhook::with_cluster(numaresources_webhook::Config::new(NAMESPACE).unwrap(), cluster);
    let fixture = workspace_root().join("webhook/tests/fixtures/admission/pod-create-guaranteed-integral.json");
    let review: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    for namespace in namespaces {
        let mut review = review.clone();
        review["request"]["namespace"] = json!(namespace);
        review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
        let request = http::Request::post(MUTATE_PODS_PATH)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&review).unwrap()))
            .unwrap();
        let response = webhook.router().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["allowed"], true, "{namespace}");
        let routed = !answer["response"]["patch"].is_null();
        assert_eq!(routed, namespace == "numa-workloads", "{namespace}: {answer}");
    }
}
