//! The kustomize installs (`manifests/default`, `cert-manager`, `openshift`), as real
//! `kubectl kustomize` renders them: every object typed with no unknown field, and the objects
//! agree with each other and with the code. Services reach a port their Deployment serves, the
//! APIService and every webhook reach an existing Service port and a path the webhook serves,
//! every container runs the one image with a subcommand and flags of the binary, ServiceAccounts
//! hold what their components call, the certificate wiring of each overlay closes, and the
//! rendered order lets `kubectl delete -k` unregister before it removes.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::admissionregistration::v1::{ServiceReference, WebhookClientConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use numaresources_api::operator::NUMAResourcesOperator;
use numaresources_controllers::names::{
    APISERVER, APISERVER_TLS_SECRET, APISERVICE, WEBHOOK, WEBHOOK_CONFIGURATION, WEBHOOK_TLS_SECRET,
};
use numaresources_controllers::nodegroups::{self, NodeInfo};
use numaresources_controllers::render::rte;
use numaresources_controllers::{ApiserverDeployment, CertificateMode, check_compatible};
use numaresources_tests::workspace_root;
use numaresources_webhook::{MUTATE_PODS_PATH, WEBHOOK_PATHS};
use support::clap_flags::Subcommand;
use support::{Install, NAMESPACE, OVERLAYS, allows, annotations, flag, pod_spec};

const IMAGE_NAME: &str = "quay.io/numaresources/numaresources";
const CONTROLLERS: &str = "numaresources-controllers";

/// The certificate mode each overlay runs the controllers in.
fn certificate_mode(overlay: &str) -> &'static str {
    match overlay {
        "default" => "self-managed",
        "cert-manager" => "cert-manager",
        "openshift" => "service-ca",
        other => panic!("unknown overlay {other}"),
    }
}

/// A webhook of the shipped configurations or of the pod routing one the controllers apply:
/// (configuration metadata, webhook name, service reference, failure policy).
struct WebhookCall {
    configuration: ObjectMeta,
    name: String,
    service: ServiceReference,
    failure_policy: Option<String>,
}

/// Every webhook the overlay's cluster ends up with: the shipped ones, and the pod webhook as the
/// controllers render it in the overlay's certificate mode (while a `NUMAResourcesScheduler`
/// routes pods; its annotations ask the same injector).
fn webhook_calls(install: &Install, overlay: &str) -> Vec<WebhookCall> {
    let call =
        |configuration: &ObjectMeta, name: &str, config: &WebhookClientConfig, failure_policy: &Option<String>| {
            WebhookCall {
                configuration: configuration.clone(),
                name: name.to_owned(),
                service: config.service.clone().unwrap_or_else(|| panic!("{name}: no service")),
                failure_policy: failure_policy.clone(),
            }
        };
    let mode: CertificateMode = certificate_mode(overlay).parse().unwrap();
    let mut pod_routing = numaresources_controllers::render::pod_routing::configuration(NAMESPACE, None).unwrap();
    pod_routing.metadata.annotations = Some(mode.webhook_annotations(NAMESPACE));
    let mut calls = Vec::new();
    for configuration in install.mutating.iter().chain([&pod_routing]) {
        for w in configuration.webhooks.iter().flatten() {
            calls.push(call(&configuration.metadata, &w.name, &w.client_config, &w.failure_policy));
        }
    }
    for configuration in &install.validating {
        for w in configuration.webhooks.iter().flatten() {
            calls.push(call(&configuration.metadata, &w.name, &w.client_config, &w.failure_policy));
        }
    }
    calls
}

/// The Service an APIService or webhook names, and the Deployment behind it; fails if the
/// Service is not shipped or has no such port.
fn reach<'a>(
    install: &'a Install,
    namespace: &str,
    name: &str,
    port: i32,
    what: &str,
) -> (&'a Service, &'a Deployment) {
    let service =
        install.service(namespace, name).unwrap_or_else(|| panic!("{what}: Service {namespace}/{name} is not shipped"));
    let ports = service.spec.as_ref().unwrap().ports.clone().unwrap_or_default();
    assert!(ports.iter().any(|p| p.port == port), "{what}: Service {name} has no port {port}");
    (service, install.backend_of(service))
}

fn subcommand_of(deployment: &Deployment) -> String {
    let container = &pod_spec(deployment).containers[0];
    container.args.as_ref().and_then(|a| a.first().cloned()).unwrap_or_default()
}

#[test]
fn every_object_is_typed_and_in_its_namespace_once() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        // The authentication ConfigMap reader bindings, and the controllers' Role to write them.
        install.assert_placed_once(&["Role", "RoleBinding"]);
        assert_eq!(install.namespaces.len(), 1, "{overlay}: the install creates its namespace");
        assert_eq!(install.crds.len(), numaresources_api::crds::all().len(), "{overlay}: every CRD");
        let deployments: BTreeSet<&str> =
            install.deployments.iter().filter_map(|d| d.metadata.name.as_deref()).collect();
        assert_eq!(deployments, BTreeSet::from([APISERVER, CONTROLLERS, WEBHOOK]), "{overlay}");
        assert_eq!(install.api_services.len(), 1, "{overlay}: the install ships the APIService");
    }
}

/// `kubectl apply -k` and `kubectl delete -k` both act in the rendered order. Deleting must
/// unregister the webhooks and the APIService before their Services, Deployments or the
/// namespace go (a webhook whose Service is gone fails the requests it matches; an APIService
/// without its Service breaks discovery and blocks namespace deletion); applying must create
/// the namespace before anything in it.
#[test]
fn the_order_unregisters_before_it_removes_and_creates_the_namespace_first() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        let position = |wanted: &dyn Fn(&str, &Option<String>) -> bool| -> Vec<usize> {
            install.order.iter().enumerate().filter(|(_, (k, ns, _))| wanted(k, ns)).map(|(i, _)| i).collect()
        };
        let registrations = position(&|k, _| {
            matches!(k, "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" | "APIService")
        });
        assert_eq!(registrations.len(), 3, "{overlay}: two webhook configurations and the APIService");
        let namespace = position(&|k, _| k == "Namespace");
        let namespaced = position(&|_, ns| ns.as_deref() == Some(NAMESPACE));
        let served = position(&|k, _| matches!(k, "Service" | "Deployment" | "Namespace"));
        let last_registration = *registrations.iter().max().unwrap();
        assert!(
            served.iter().all(|&i| i > last_registration),
            "{overlay}: a Service, Deployment or the namespace comes before a registration: {:?}",
            install.order
        );
        assert!(namespaced.iter().all(|&i| i > namespace[0]), "{overlay}: an object comes before its namespace");
        // The serving certificates exist before the servers start (cert-manager).
        let issued = position(&|k, _| matches!(k, "Issuer" | "Certificate"));
        let deployments = position(&|k, _| k == "Deployment");
        assert!(issued.iter().all(|i| deployments.iter().all(|d| i < d)), "{overlay}: Certificates after Deployments");
    }
}

#[test]
fn every_service_targets_a_port_its_deployment_serves() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        assert_eq!(install.services.len(), 2, "{overlay}: the API server's and the webhook's");
        for service in &install.services {
            let name = service.metadata.name.clone().unwrap();
            let deployment = install.backend_of(service);
            let spec = service.spec.as_ref().unwrap();
            assert!(matches!(spec.type_.as_deref(), None | Some("ClusterIP")), "{overlay}: {name}");
            for port in spec.ports.iter().flatten() {
                let target = port
                    .target_port
                    .clone()
                    .unwrap_or(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(port.port));
                let served = support::target_container_port(deployment, &target);
                assert!(
                    served.is_some(),
                    "{overlay}: Service {name} port {} → {target:?} is no container port",
                    port.port
                );
            }
            for (key, value) in spec.selector.iter().flatten() {
                let selector = deployment.spec.as_ref().unwrap().selector.match_labels.clone().unwrap_or_default();
                assert!(selector.get(key) == Some(value) || support::pod_labels(deployment).get(key) == Some(value));
            }
        }
    }
}

#[test]
fn the_apiservice_and_every_webhook_reach_a_service_port_and_a_served_path() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        let api_service = &install.api_services[0];
        assert_eq!(api_service.metadata.name.as_deref(), Some(APISERVICE));
        let spec = api_service.spec.as_ref().unwrap();
        assert_eq!(spec.group.as_deref(), Some(numaresources_api::nrt::GROUP));
        let reference = spec.service.as_ref().expect("the APIService names a Service");
        let (_, backend) = reach(
            &install,
            reference.namespace.as_deref().unwrap(),
            reference.name.as_deref().unwrap(),
            reference.port.unwrap_or(443),
            APISERVICE,
        );
        assert_eq!(subcommand_of(backend), "apiserver", "{overlay}: the APIService reaches the API server");
        assert!(spec.ca_bundle.as_ref().is_none_or(|b| b.0.is_empty()), "{overlay}: caBundle is injected");
        assert_ne!(spec.insecure_skip_tls_verify, Some(true), "{overlay}");

        let calls = webhook_calls(&install, overlay);
        let mut paths = BTreeSet::new();
        for call in &calls {
            let (_, backend) = reach(
                &install,
                &call.service.namespace,
                &call.service.name,
                call.service.port.unwrap_or(443),
                &call.name,
            );
            assert_eq!(subcommand_of(backend), "webhook", "{overlay}: {} reaches the webhook", call.name);
            let path = call.service.path.clone().unwrap_or_default();
            assert!(
                WEBHOOK_PATHS.contains(&path.as_str()),
                "{overlay}: {}: {path} is no path of the webhook",
                call.name
            );
            paths.insert(path);
        }
        assert_eq!(paths.len(), WEBHOOK_PATHS.len(), "{overlay}: every path of the webhook is called");
    }
}

#[test]
fn every_container_runs_the_one_image_with_a_subcommand_and_its_flags() {
    let subcommands = support::subcommands();
    let mut readers = BTreeMap::new();
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        let mut images = BTreeSet::new();
        for deployment in &install.deployments {
            let name = deployment.metadata.name.clone().unwrap();
            for container in &pod_spec(deployment).containers {
                images.insert(container.image.clone().unwrap_or_default());
                assert!(container.command.is_none(), "{overlay}: {name}: the image's entrypoint is the binary");
                let args = container.args.clone().unwrap_or_default();
                let subcommand = args.first().cloned().unwrap_or_default();
                assert!(subcommands.contains(&subcommand), "{overlay}: {name}: {subcommand:?} is no subcommand");
                for arg in &args[1..] {
                    let flag =
                        arg.strip_prefix("--").and_then(|a| a.split('=').next()).unwrap_or_else(|| panic!("{arg}"));
                    let declared =
                        readers.entry(subcommand.clone()).or_insert_with(|| Subcommand::read(&subcommand, &[]));
                    assert!(declared.accepted.contains_key(flag), "{overlay}: {name}: `{subcommand}` has no --{flag}");
                }
            }
        }
        assert_eq!(images.len(), 1, "{overlay}: one image for every container: {images:?}");
        let image = images.into_iter().next().unwrap();
        assert!(image.starts_with(&format!("{IMAGE_NAME}:")), "{overlay}: {image}");

        // The controllers hand their own image to the exporters they render.
        let controllers = &pod_spec(install.deployment(CONTROLLERS)).containers[0];
        let env =
            controllers.env.iter().flatten().find(|e| e.name == "NUMARESOURCES_IMAGE").expect("NUMARESOURCES_IMAGE");
        assert_eq!(env.value.as_deref(), Some(image.as_str()), "{overlay}: NUMARESOURCES_IMAGE follows the image");

        let args = controllers.args.clone().unwrap_or_default();
        let modes: Vec<&String> = args.iter().filter(|a| a.starts_with("--certificate-mode=")).collect();
        assert_eq!(modes.len(), 1, "{overlay}: one --certificate-mode");
        assert_eq!(flag(&args, "certificate-mode"), Some(certificate_mode(overlay)), "{overlay}");
        assert_eq!(
            flag(&args, "apiserver-deployment"),
            Some("installed"),
            "{overlay}: the install ships the API server"
        );
        // Values the controllers accept, in a combination they accept.
        let mode: CertificateMode = flag(&args, "certificate-mode").unwrap().parse().unwrap();
        let deployment: ApiserverDeployment = flag(&args, "apiserver-deployment").unwrap().parse().unwrap();
        check_compatible(mode, deployment).unwrap();
    }
}

/// Changing the image where the README says (`images:` of the overlay) changes every container
/// and the exporters' image with it.
#[test]
fn setting_the_image_in_the_overlay_reaches_every_container_and_the_exporters() {
    let copy = tempfile::tempdir().unwrap();
    let manifests = copy.path().join("manifests");
    copy_dir(&workspace_root().join("manifests"), &manifests);
    let kustomization = manifests.join("default/kustomization.yaml");
    let text = std::fs::read_to_string(&kustomization).unwrap();
    let edited = text
        .replacen(
            &format!("- name: {IMAGE_NAME}\n"),
            &format!("- name: {IMAGE_NAME}\n  newName: registry.example/numa\n"),
            1,
        )
        .replacen("newTag: \"0.1.0\"", "newTag: \"1.2.3\"", 1);
    assert_ne!(edited, text, "the default overlay no longer sets the image as expected");
    std::fs::write(&kustomization, edited).unwrap();
    let install = Install::from_documents("edited default", &support::kustomize(&manifests.join("default")));
    for deployment in &install.deployments {
        for container in &pod_spec(deployment).containers {
            assert_eq!(container.image.as_deref(), Some("registry.example/numa:1.2.3"));
            for env in container.env.iter().flatten().filter(|e| e.name == "NUMARESOURCES_IMAGE") {
                assert_eq!(env.value.as_deref(), Some("registry.example/numa:1.2.3"));
            }
        }
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn every_service_account_holds_what_its_component_calls() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        for deployment in &install.deployments {
            let account = pod_spec(deployment).service_account_name.clone().unwrap();
            assert!(
                install.service_accounts.iter().any(|sa| sa.metadata.name.as_deref() == Some(account.as_str())),
                "{overlay}: ServiceAccount {account} is not shipped"
            );
        }
        // Every binding names a role that exists: shipped here, or built into Kubernetes.
        for binding in &install.cluster_role_bindings {
            let role = &binding.role_ref.name;
            assert!(
                role.starts_with("system:")
                    || install.cluster_roles.iter().any(|r| r.metadata.name.as_ref() == Some(role)),
                "{overlay}: ClusterRole {role} is not shipped"
            );
        }
        // The controllers render the exporter's ClusterRole under this name; the install must not
        // ship another copy to fight over.
        assert!(
            !install.cluster_roles.iter().any(|r| r.metadata.name.as_deref() == Some("numaresources:rte")),
            "{overlay}: the example numaresources:rte role collides with the controllers' own"
        );

        let apiserver = install.rules_of(NAMESPACE, APISERVER, NAMESPACE);
        for verb in ["get", "list", "watch"] {
            assert!(allows(&apiserver, "", "nodes", verb, None), "{overlay}: the API server cannot {verb} nodes");
        }
        assert!(
            install.cluster_role_bindings.iter().any(|b| b.role_ref.name == "system:auth-delegator"
                && support::binds(b.subjects.as_deref(), NAMESPACE, APISERVER)),
            "{overlay}: the API server delegates authentication and authorization"
        );
        let reader = install.rules_of(NAMESPACE, APISERVER, "kube-system");
        let bound_reader = install.role_bindings.iter().any(|b| {
            b.metadata.namespace.as_deref() == Some("kube-system")
                && b.role_ref.name == "extension-apiserver-authentication-reader"
                && support::binds(b.subjects.as_deref(), NAMESPACE, APISERVER)
        });
        assert!(bound_reader || !reader.is_empty(), "{overlay}: the API server reads the authentication ConfigMap");

        let webhook = install.rules_of(NAMESPACE, WEBHOOK, NAMESPACE);
        for verb in ["get", "list", "watch"] {
            for (group, resource) in
                [(numaresources_api::operator::GROUP, "numaresourcesschedulers"), ("", "namespaces"), ("", "nodes")]
            {
                assert!(
                    allows(&webhook, group, resource, verb, None),
                    "{overlay}: the webhook cannot {verb} {resource}"
                );
            }
        }

        let controllers = install.rules_of(NAMESPACE, CONTROLLERS, NAMESPACE);
        let mut calls: Vec<(&str, &str, &str, Option<&str>)> = vec![
            ("nodetopology.openshift.io", "numaresourcesoperators", "watch", None),
            ("nodetopology.openshift.io", "numaresourcesoperators/status", "patch", Some("numaresourcesoperator")),
            ("apps", "daemonsets", "patch", Some("numaresourcesoperator-worker")),
            ("apps", "deployments", "get", Some(APISERVER)),
            ("coordination.k8s.io", "leases", "update", Some(CONTROLLERS)),
            ("events.k8s.io", "events", "create", None),
            // The API server replicas' peer certificate and its CA, kept in every mode.
            ("", "secrets", "create", None),
            ("", "secrets", "get", Some(PEER_SECRET)),
            ("", "secrets", "patch", Some(PEER_SECRET)),
            ("", "secrets", "get", Some(PEER_CA_SECRET)),
            ("", "secrets", "patch", Some(PEER_CA_SECRET)),
        ];
        if certificate_mode(overlay) == "self-managed" {
            // Self-managed: the controllers write the Secrets and inject caBundle.
            calls.extend([
                ("", "secrets", "create", None),
                ("", "secrets", "get", Some(APISERVER_TLS_SECRET)),
                ("", "secrets", "patch", Some(APISERVER_TLS_SECRET)),
                ("", "secrets", "get", Some(WEBHOOK_TLS_SECRET)),
                ("", "secrets", "patch", Some(WEBHOOK_TLS_SECRET)),
                ("", "secrets", "get", Some("numaresources-ca")),
                ("", "secrets", "patch", Some("numaresources-ca")),
                ("apiregistration.k8s.io", "apiservices", "patch", Some(APISERVICE)),
                ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch", Some(WEBHOOK_CONFIGURATION)),
                (
                    "admissionregistration.k8s.io",
                    "validatingwebhookconfigurations",
                    "patch",
                    Some(WEBHOOK_CONFIGURATION),
                ),
            ]);
        }
        for (group, resource, verb, name) in calls {
            assert!(
                allows(&controllers, group, resource, verb, name),
                "{overlay}: controllers: {verb} {group}/{resource} {name:?}"
            );
        }
    }
}

/// The Secret a server mounts its serving certificate from.
fn mounted_secret(install: &Install, deployment: &str, file_flag: &str) -> String {
    let deployment = install.deployment(deployment);
    let container = &pod_spec(deployment).containers[0];
    let args = container.args.clone().unwrap_or_default();
    let file = flag(&args, file_flag).unwrap_or_else(|| panic!("{file_flag} is not set"));
    support::secret_mounted_for(deployment, container, file).unwrap_or_else(|| panic!("{file} is on no Secret"))
}

#[test]
fn the_servers_mount_the_secrets_every_certificate_mode_writes() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        assert_eq!(mounted_secret(&install, APISERVER, "tls-cert-file"), APISERVER_TLS_SECRET, "{overlay}");
        assert_eq!(mounted_secret(&install, WEBHOOK, "tls-cert-file"), WEBHOOK_TLS_SECRET, "{overlay}");
        for peer_flag in ["peer-ca-file", "peer-client-cert-file", "peer-client-key-file"] {
            assert_eq!(mounted_secret(&install, APISERVER, peer_flag), PEER_SECRET, "{overlay}: {peer_flag}");
        }
        // The controllers write the peer Secret in every mode: no second writer.
        assert!(
            install
                .certificates
                .iter()
                .all(|c| c.spec.secret_name != PEER_SECRET && c.spec.secret_name != PEER_CA_SECRET),
            "{overlay}: a cert-manager Certificate writes the controllers' peer Secret"
        );
        // The warm-up lists the exporter pods of its namespace.
        let server = install.rules_of(NAMESPACE, APISERVER, NAMESPACE);
        for verb in ["get", "list"] {
            assert!(allows(&server, "", "pods", verb, None), "{overlay}: the API server cannot {verb} pods");
        }
    }
}

/// The API server replicas' peer certificate (controllers' `certificates::peer`).
const PEER_SECRET: &str = "numaresources-apiserver-peer";
/// Its CA, with the key.
const PEER_CA_SECRET: &str = "numaresources-apiserver-peer-ca";

/// What injects `caBundle` into an object, per overlay: nothing (the controllers patch it), the
/// cert-manager Certificate it names, or the service-ca operator.
#[test]
fn each_overlay_wires_its_certificate_source_to_the_registrations() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        let mut registrations: Vec<(String, ObjectMeta, String)> = Vec::new();
        let api_service = &install.api_services[0];
        let reference = api_service.spec.as_ref().unwrap().service.clone().unwrap();
        registrations.push((APISERVICE.to_owned(), api_service.metadata.clone(), reference.name.unwrap()));
        for call in webhook_calls(&install, overlay) {
            registrations.push((call.name.clone(), call.configuration.clone(), call.service.name.clone()));
        }
        for (what, meta, service_name) in &registrations {
            let annotations = annotations(meta);
            let service = install.service(NAMESPACE, service_name).unwrap();
            let secret = if service_name == APISERVER { APISERVER_TLS_SECRET } else { WEBHOOK_TLS_SECRET };
            match overlay {
                "default" => assert!(annotations.is_empty(), "{overlay}: {what}: the controllers inject caBundle"),
                "cert-manager" => {
                    let from = annotations.get("cert-manager.io/inject-ca-from").unwrap_or_else(|| panic!("{what}"));
                    let (namespace, name) = from.split_once('/').unwrap();
                    assert_eq!(namespace, NAMESPACE);
                    let certificate = install
                        .certificates
                        .iter()
                        .find(|c| c.metadata.name.as_deref() == Some(name))
                        .unwrap_or_else(|| panic!("{what}: no Certificate {name}"));
                    assert_eq!(
                        certificate.spec.secret_name, secret,
                        "{what}: the Certificate writes what the server mounts"
                    );
                    let dns = certificate.spec.dns_names.clone().unwrap_or_default();
                    assert!(
                        dns.contains(&format!("{service_name}.{NAMESPACE}.svc")),
                        "{what}: the name kube-apiserver verifies"
                    );
                }
                "openshift" => {
                    assert_eq!(
                        annotations.get("service.beta.openshift.io/inject-cabundle").map(String::as_str),
                        Some("true"),
                        "{what}"
                    );
                    let issued = support::annotations(&service.metadata)
                        .get("service.beta.openshift.io/serving-cert-secret-name")
                        .cloned();
                    assert_eq!(issued.as_deref(), Some(secret), "{what}: service-ca writes what the server mounts");
                }
                other => panic!("{other}"),
            }
        }
    }
}

#[test]
fn the_cert_manager_issuers_chain_to_a_self_signed_ca() {
    let install = Install::build("cert-manager");
    let issuer = |name: &str| {
        install
            .issuers
            .iter()
            .find(|i| i.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no Issuer {name}"))
    };
    for certificate in &install.certificates {
        let name = certificate.metadata.name.clone().unwrap();
        let reference = &certificate.spec.issuer_ref;
        assert_eq!((reference.group.as_str(), reference.kind.as_str()), ("cert-manager.io", "Issuer"), "{name}");
        let signer = issuer(&reference.name);
        if certificate.spec.is_ca == Some(true) {
            assert!(signer.spec.self_signed.is_some(), "{name}: the CA is self-signed");
            assert_eq!(
                certificate.spec.private_key.as_ref().unwrap().rotation_policy,
                "Never",
                "{name}: keep the CA key"
            );
        } else {
            let ca = signer.spec.ca.as_ref().unwrap_or_else(|| panic!("{name}: signed by a CA Issuer"));
            let ca_certificate = install.certificates.iter().find(|c| c.spec.secret_name == ca.secret_name);
            assert!(
                ca_certificate.is_some_and(|c| c.spec.is_ca == Some(true)),
                "{name}: the CA Issuer's Secret is our CA"
            );
            assert!(certificate.spec.usages.iter().flatten().any(|u| u == "server auth"), "{name}: serverAuth");
        }
        assert_ne!(
            certificate.spec.secret_name, "numaresources-ca",
            "{name}: that Secret belongs to the self-managed mode"
        );
    }
    assert_eq!(install.certificates.iter().filter(|c| c.spec.is_ca != Some(true)).count(), 2, "one per server");
}

#[test]
fn the_namespace_admits_the_exporters_and_openshift_grants_them_an_scc() {
    // The exporter DaemonSet the controllers render into the namespace, OpenShift flavour.
    let text = std::fs::read_to_string(workspace_root().join("manifests/samples/numaresourcesoperator.yaml")).unwrap();
    let nro: NUMAResourcesOperator = serde_norway::from_str(&text).unwrap();
    let nodes = [NodeInfo {
        name: "worker-a".into(),
        labels: [("node-role.kubernetes.io/worker".to_owned(), String::new())].into(),
    }];
    let resolution = nodegroups::resolve(&nro.spec.normalized().node_groups, &nodes, None, false).unwrap();
    let settings = rte::RteSettings {
        namespace: NAMESPACE.into(),
        nro_name: "numaresourcesoperator".into(),
        image: "img".into(),
        verbosity: 2,
        metrics: rte::MetricsMode::Http,
        openshift_selinux: true,
        // With our API server (the default): the projected token and CA volume too.
        direct_write: Some(rte::DirectWrite {
            url: numaresources_api::direct_write::service_url(
                numaresources_api::direct_write::WRITE_SERVICE,
                NAMESPACE,
            ),
            tls_server_name: numaresources_api::direct_write::service_host("numaresources-apiserver", NAMESPACE),
            admin_url: numaresources_api::direct_write::admin_url(
                numaresources_api::direct_write::WRITE_SERVICE,
                NAMESPACE,
            ),
            ca_config_map: "numaresources-apiserver-ca".into(),
            ca_key: "service-ca.crt".into(),
        }),
    };
    let daemon_set = rte::daemon_set(&settings, &resolution.pools[0], "hash").unwrap();
    let pod = daemon_set.spec.unwrap().template.spec.unwrap();
    let host_paths = pod.volumes.iter().flatten().any(|v| v.host_path.is_some());
    assert!(host_paths, "the exporter mounts host paths: only a privileged namespace admits it");

    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        let labels = install.namespaces[0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("pod-security.kubernetes.io/enforce").map(String::as_str),
            Some("privileged"),
            "{overlay}"
        );
    }

    let install = Install::build("openshift");
    assert_eq!(install.security_context_constraints.len(), 1);
    let scc = &install.security_context_constraints[0];
    let scc_name = scc.metadata.name.clone().unwrap();
    assert!(scc.allow_host_dir_volume_plugin && scc.volumes.iter().any(|v| v == "hostPath"), "hostPath");
    assert!(!scc.allow_privileged_container && !scc.allow_host_network && !scc.allow_host_pid, "no more than needed");
    let runs_as_root =
        pod.containers.iter().any(|c| c.security_context.as_ref().and_then(|s| s.run_as_user) == Some(0));
    assert!(!runs_as_root || scc.run_as_user.type_ == "RunAsAny", "the exporter runs as root");
    let selinux =
        pod.containers.iter().any(|c| c.security_context.as_ref().and_then(|s| s.se_linux_options.as_ref()).is_some());
    assert!(!selinux || scc.se_linux_context.type_ == "RunAsAny", "the exporter sets its SELinux type");
    for volume in pod.volumes.iter().flatten() {
        let kind = if volume.host_path.is_some() {
            "hostPath"
        } else if volume.config_map.is_some() {
            "configMap"
        } else if volume.empty_dir.is_some() {
            "emptyDir"
        } else if volume.secret.is_some() {
            "secret"
        } else if volume.projected.is_some() {
            "projected"
        } else {
            "other"
        };
        assert!(scc.volumes.iter().any(|v| v == kind), "the SCC refuses the exporter's {kind} volume {}", volume.name);
    }
    for container in &pod.containers {
        let context = container.security_context.clone().unwrap_or_default();
        assert_ne!(context.allow_privilege_escalation, Some(true), "{}", container.name);
        let dropped = context.capabilities.and_then(|c| c.drop).unwrap_or_default();
        assert!(dropped.iter().any(|c| c == "ALL") || scc.required_drop_capabilities.is_empty(), "{}", container.name);
    }
    let account = pod.service_account_name.clone().unwrap();
    let rules = install.rules_of(NAMESPACE, &account, NAMESPACE);
    assert!(
        allows(&rules, "security.openshift.io", "securitycontextconstraints", "use", Some(&scc_name)),
        "{account} may use {scc_name}"
    );

    // The other components take a UID from the namespace's range (restricted-v2).
    for deployment in &install.deployments {
        let context = pod_spec(deployment).security_context.clone().unwrap_or_default();
        assert!(
            context.run_as_user.is_none() && context.fs_group.is_none(),
            "{:?}: fixed UID on OpenShift",
            deployment.metadata.name
        );
        assert_eq!(context.run_as_non_root, Some(true));
    }
}

/// The pod webhook is the one that could block every pod in the cluster: it fails open and never
/// waits on itself (its own namespace and the system ones are left out).
#[test]
fn the_pod_webhook_fails_open_in_every_overlay() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        let calls = webhook_calls(&install, overlay);
        let pods = calls.iter().find(|c| c.service.path.as_deref() == Some(MUTATE_PODS_PATH)).unwrap();
        assert_eq!(pods.failure_policy.as_deref(), Some("Ignore"), "{overlay}");
    }
}

/// A manifest left out of its directory's kustomization would silently not be installed.
#[test]
fn every_kustomization_lists_every_manifest_of_its_directory() {
    let dirs = ["base", "controllers", "webhook", "apiserver", "crds", "network-policies", "doctor", "extender"]
        .into_iter()
        .chain(OVERLAYS);
    for dir in dirs {
        let path = workspace_root().join("manifests").join(dir);
        let listed = support::kustomization_resources(&path);
        for file in support::manifest_files(&path) {
            assert!(listed.contains(&file), "manifests/{dir}/{file} is not in its kustomization");
        }
    }
}
