//! The install manifests of the aggregated NRT API server (`manifests/apiserver/`) are typed
//! Kubernetes objects with no unknown fields, agree with each other (Service ↔ Deployment ↔
//! APIService, ServiceAccount ↔ RBAC), and agree with the binary (flags, probe paths, shutdown).
//!
//! The flags are read from the clap derive in `cmd/src/apiserver.rs` (and the global options of
//! `cmd/src/cli.rs`) by `support::clap_flags`, which says why and how.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{EnvVar, Service};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use numaresources_api::Quantity;
use numaresources_tests::workspace_root;
use serde_json::Value;
use support::clap_flags::{Subcommand, flags_of};
use support::{Install, binds, differences, labels, single};

const DIR: &str = "manifests/apiserver";
const NAMESPACE: &str = "numaresources";
const NAME: &str = "numaresources-apiserver";
const GROUP: &str = numaresources_api::nrt::GROUP;
const VERSION: &str = numaresources_api::nrt::VERSION;
const PLURAL: &str = numaresources_api::nrt::PLURAL;
/// The labels every object (and the pod template) carries.
const LABELS: &[(&str, &str)] = &[
    ("app.kubernetes.io/name", NAME),
    ("app.kubernetes.io/part-of", "numaresources"),
    ("app.kubernetes.io/component", "apiserver"),
];

/// The kinds the directory ships, each at least once.
const KINDS: [&str; 7] =
    ["Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding", "APIService"];

/// Every object of `manifests/apiserver/`, typed with no unknown field and of a kind of [`KINDS`]
/// (or a Role, or a PodDisruptionBudget).
fn manifests() -> Install {
    let manifests = Install::from_dir(DIR);
    manifests.assert_kinds_within(&[KINDS.as_slice(), &["Role", "PodDisruptionBudget"]].concat());
    manifests
}

#[test]
fn the_kustomization_lists_every_manifest_of_the_directory() {
    let dir = workspace_root().join(DIR);
    assert_eq!(
        support::kustomization_resources(&dir),
        support::manifest_files(&dir),
        "a manifest left out of (or missing from) the kustomization"
    );
}

/// Whether `rules` allow `verb` on `resource` of `group` (wildcards included).
fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    let has = support::lists_or_wildcard;
    rules.iter().any(|rule| {
        has(&rule.api_groups, group)
            && has(&rule.resources, resource)
            && rule.verbs.iter().any(|v| v == verb || v == "*")
    })
}

fn mebibytes(quantity: &str) -> f64 {
    let bytes = Quantity::parse(quantity).unwrap_or_else(|e| panic!("{quantity}: {e}")).ceil_i64().unwrap();
    bytes as f64 / (1024.0 * 1024.0)
}

/// Every long flag `numaresources apiserver` accepts: its own options plus the global ones.
fn apiserver_flags() -> Subcommand {
    Subcommand::read(
        "apiserver",
        &["secure-port", "cert-dir", "tls-cert-file", "tls-private-key-file", "log-level", "log-format"],
    )
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn every_document_is_a_known_typed_object_in_the_right_place() {
    let m = manifests();
    // The authentication ConfigMap reader binding is in kube-system.
    m.assert_placed_once(&["RoleBinding"]);
    for kind in KINDS {
        assert!(m.ships(kind), "no {kind} in {DIR}");
    }
}

#[test]
fn labels_follow_the_app_kubernetes_io_conventions() {
    let m = manifests();
    let template = &m.single_deployment().spec.as_ref().unwrap().template;
    let template_meta = template.metadata.clone().expect("pod template without metadata");
    let all = m.objects.iter().map(|(_, origin, meta)| (origin.clone(), meta.clone()));
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
    let selector = m.single_deployment().spec.as_ref().unwrap().selector.match_labels.clone().unwrap_or_default();
    assert!(!selector.is_empty(), "the Deployment selects by matchLabels");
    let pod_labels = labels(&template_meta);
    for (key, value) in &selector {
        assert_eq!(pod_labels.get(key), Some(value), "selector label {key} is not on the pod template");
    }
}

#[test]
fn the_service_selects_the_pods_and_targets_a_named_container_port() {
    let m = manifests();
    let service = m.single_service();
    assert_eq!(service.metadata.name.as_deref(), Some(NAME));
    let spec = service.spec.as_ref().unwrap();
    let template_labels = labels(m.single_deployment().spec.as_ref().unwrap().template.metadata.as_ref().unwrap());
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
    let container_ports = m.single_container().ports.as_deref().unwrap_or_default();
    let container_port = container_ports
        .iter()
        .find(|p| p.name.as_deref() == Some(target.as_str()))
        .unwrap_or_else(|| panic!("targetPort {target} is not a named container port"));
    assert_eq!(port.protocol.as_deref().unwrap_or("TCP"), container_port.protocol.as_deref().unwrap_or("TCP"));
}

#[test]
fn the_apiservice_names_our_group_version_and_points_at_the_service() {
    let m = manifests();
    let api_service = single(&m.api_services, "APIService");
    assert_eq!(api_service.metadata.name.as_deref(), Some(format!("{VERSION}.{GROUP}").as_str()));
    let spec = api_service.spec.as_ref().unwrap();
    assert_eq!(spec.group.as_deref(), Some(GROUP));
    assert_eq!(spec.version.as_deref(), Some(VERSION));
    assert!((1..=20000).contains(&spec.group_priority_minimum), "groupPriorityMinimum out of range");
    assert!((1..=1000).contains(&spec.version_priority), "versionPriority out of range");

    let reference = spec.service.as_ref().expect("the APIService has no service reference (it would be local)");
    let service = m.single_service();
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
    let m = manifests();
    let container = m.single_container();
    let accepted = apiserver_flags();
    let flags = accepted.container_flags(container);
    let value_of = |flag: &str| accepted.value(&flags, flag);

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

    m.assert_serving_certificate_mounts(value_of, "/apiserver.local.config/certificates/");
}

/// The probe paths are routes of the real server that answer 200 without credentials.
#[tokio::test]
async fn probe_paths_are_served_without_credentials() {
    use tower::ServiceExt;

    let m = manifests();
    let container = m.single_container();
    let readiness = container.readiness_probe.as_ref().expect("no readiness probe");
    let liveness = container.liveness_probe.as_ref().expect("no liveness probe");
    // The server as `numaresources local` makes it: the flags' defaults, standalone.
    let mut config =
        numaresources_runtime::flags::defaults::<numaresources_apiserver::config::Args>().unwrap().config().unwrap();
    config.authentication = numaresources_apiserver::config::Authentication::Standalone(
        numaresources_apiserver::auth::Standalone::from_token_file("").unwrap(),
    );
    let server = numaresources_apiserver::ApiServer::new(config, None).unwrap();
    for (probe, expected) in [(readiness, "/readyz"), (liveness, "/livez")] {
        let get = probe.http_get.as_ref().expect("probes are HTTP GETs");
        assert_eq!(get.path.as_deref(), Some(expected));
        assert_eq!(get.scheme.as_deref(), Some("HTTP"), "the admin port speaks plain HTTP");
        match &get.port {
            IntOrString::String(name) => {
                assert_eq!(name, "health", "probes go to the admin port");
                let port = container.ports.iter().flatten().find(|p| p.name.as_deref() == Some("health")).unwrap();
                let flag = format!("--health-port={}", port.container_port);
                assert!(container.args.iter().flatten().any(|a| *a == flag), "the server is told {flag}");
            }
            IntOrString::Int(port) => panic!("name the probe port instead of {port}"),
        }
        let path = get.path.clone().unwrap();
        // The kubelet has no credentials: the admin router asks for none.
        let router = server.admin_router();
        let request = axum::http::Request::get(&path).body(axum::body::Body::empty()).unwrap();
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
    }
    // The router does tell paths apart (a typo would not pass).
    let router = server.admin_router();
    let request = axum::http::Request::get("/readyzz").body(axum::body::Body::empty()).unwrap();
    assert_eq!(router.oneshot(request).await.unwrap().status(), 404);
}

#[test]
fn the_pod_is_restricted_pod_security_compliant() {
    let m = manifests();
    let pod = m.single_pod_spec();
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
    let m = manifests();
    let deployment = m.single_deployment();
    assert_eq!(deployment.metadata.name.as_deref(), Some(NAME));
    let spec = deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2), "a leader and a follower holding every acknowledged write");
    let pod = m.single_pod_spec();
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-cluster-critical"));

    let resources = m.single_container().resources.clone().expect("no resources");
    let requests = resources.requests.unwrap_or_default();
    let limits = resources.limits.unwrap_or_default();
    let memory_request = mebibytes(&requests.get("memory").expect("no memory request").0);
    let memory_limit = mebibytes(&limits.get("memory").expect("no memory limit").0);
    assert!(requests.contains_key("cpu"), "no CPU request");
    // BENCHMARKS.md: 5,000 NRTs add 26.6–26.8 MiB; the design holds the whole server to 64 MiB.
    assert!(memory_request >= 28.0, "memory request {memory_request} MiB is below what 5,000 NRTs use");
    assert!(memory_limit >= 64.0 && memory_limit >= memory_request, "memory limit {memory_limit} MiB");
}

/// The kubelet's grace period covers the preStop sleep and the server's drain after SIGTERM.
#[test]
fn termination_grace_covers_prestop_and_the_drain() {
    // The binary serves with the default drain (its options never set `shutdown_grace`), read
    // here from the options' Debug form: `shutdown_grace: 30s`. Before draining, a leader hands
    // its Lease over for at most HAND_OVER_GRACE.
    let apiserver = std::fs::read_to_string(workspace_root().join("cmd/src/apiserver.rs")).unwrap();
    assert!(
        !apiserver.contains(".shutdown_grace("),
        "cmd/src/apiserver.rs no longer serves with the default drain: update this test"
    );
    let hand_over: i64 = apiserver
        .split("const HAND_OVER_GRACE: Duration = Duration::from_secs(")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|digits| digits.parse().ok())
        .expect("cmd/src/apiserver.rs names HAND_OVER_GRACE in whole seconds");
    let options = format!("{:?}", numaresources_runtime::ServeOptions::default());
    let grace = options
        .split("shutdown_grace: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse::<i64>().ok())
        .unwrap_or_else(|| panic!("cannot read the shutdown grace from {options}"));
    assert!(options.contains(&format!("shutdown_grace: {grace}s")), "the grace is not whole seconds: {options}");

    let m = manifests();
    let pre_stop = m.single_container().lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).expect("no preStop hook");
    let sleep = pre_stop.sleep.as_ref().expect("preStop should be the kubelet's sleep action (no shell in the image)");
    assert!(sleep.seconds >= 1, "preStop sleep");
    let period = m.single_pod_spec().termination_grace_period_seconds.expect("no terminationGracePeriodSeconds");
    assert!(
        period > sleep.seconds + hand_over + grace,
        "terminationGracePeriodSeconds {period} must exceed preStop {}s + hand-over {hand_over}s + drain {grace}s",
        sleep.seconds
    );
}

#[test]
fn the_service_account_is_bound_to_what_the_server_needs() {
    let m = manifests();
    let pod = m.single_pod_spec();
    let account = pod.service_account_name.as_deref().expect("no serviceAccountName");
    assert!(
        m.service_accounts
            .iter()
            .any(|sa| sa.metadata.name.as_deref() == Some(account)
                && sa.metadata.namespace.as_deref() == Some(NAMESPACE)),
        "ServiceAccount {account} is not shipped"
    );
    let to_cluster_role = |name: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "ClusterRole".into(),
        name: name.into(),
    };
    assert!(
        m.cluster_role_bindings.iter().any(|b| b.role_ref == to_cluster_role("system:auth-delegator")
            && binds(b.subjects.as_deref(), NAMESPACE, account)),
        "no ClusterRoleBinding of {account} to system:auth-delegator"
    );
    let reader = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "Role".into(),
        name: "extension-apiserver-authentication-reader".into(),
    };
    assert!(
        m.role_bindings.iter().any(|b| b.metadata.namespace.as_deref() == Some("kube-system")
            && b.role_ref == reader
            && binds(b.subjects.as_deref(), NAMESPACE, account)),
        "no RoleBinding in kube-system of {account} to extension-apiserver-authentication-reader"
    );
    let rules = m.cluster_rules_of(NAMESPACE, account);
    for verb in ["get", "list", "watch"] {
        assert!(allows(&rules, "", "nodes", verb), "the server cannot {verb} nodes");
    }

    // Every binding to one of our ClusterRoles names a ClusterRole shipped here.
    for binding in &m.cluster_role_bindings {
        let origin = format!("ClusterRoleBinding {}", binding.metadata.name.as_deref().unwrap_or_default());
        let role = &binding.role_ref.name;
        if role.starts_with("numaresources") {
            assert!(support::named(&m.cluster_roles, role).is_some(), "{origin}: ClusterRole {role} is not shipped");
        }
        assert!(!binding.subjects.as_deref().unwrap_or_default().is_empty(), "{origin}: no subjects");
    }
}

#[test]
fn callers_get_the_access_they_need_on_noderesourcetopologies() {
    let m = manifests();
    let aggregated = |label: &str| -> Vec<PolicyRule> {
        m.cluster_roles
            .iter()
            .filter(|r| labels(&r.metadata).get(label).map(String::as_str) == Some("true"))
            .flat_map(|r| r.rules.clone().unwrap_or_default())
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

/// The value `name` gets from the downward API in `container`, if any (`fieldRef.fieldPath`).
fn downward_field(container: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    let env: &[EnvVar] = container.env.as_deref().unwrap_or_default();
    let var = env.iter().find(|var| var.name == name)?;
    Some(var.value_from.as_ref()?.field_ref.as_ref()?.field_path.clone())
}

#[test]
fn replicas_elect_a_leader_on_their_lease_and_replicate_over_the_peer_port() {
    let m = manifests();
    let container = m.single_container();
    let flags = apiserver_flags().container_flags(container);
    let flag = |name: &str| flags.get(name).cloned().unwrap_or_else(|| panic!("--{name} is not set"));

    assert_eq!(flag("leader-elect"), "true");
    // The Lease lives in the pod's own namespace, named as the Role allows.
    assert_eq!(flag("leader-elect-resource-namespace"), "$(POD_NAMESPACE)");
    assert_eq!(downward_field(container, "POD_NAMESPACE").as_deref(), Some("metadata.namespace"));
    let lease = flag("leader-elect-resource-name");
    let account = m.single_pod_spec().service_account_name.clone().unwrap();
    let rules = m.rules_in(NAMESPACE, &account, NAMESPACE);
    let on_lease = |verb: &str| {
        rules.iter().any(|rule| {
            rule.api_groups.iter().flatten().any(|g| g == "coordination.k8s.io")
                && rule.resources.iter().flatten().any(|r| r == "leases")
                && rule.verbs.iter().any(|v| v == verb)
                && rule.resource_names.as_ref().is_none_or(|names| names.contains(&lease))
        })
    };
    for verb in ["get", "create", "update"] {
        assert!(on_lease(verb), "the server cannot {verb} its Lease {lease}: {rules:?}");
    }

    // Peers reach each other on the pod IP at a named container port the Service does not expose.
    assert_eq!(flag("peer-advertise-ip"), "$(POD_IP)");
    assert_eq!(downward_field(container, "POD_IP").as_deref(), Some("status.podIP"));
    let peer_port: i32 = flag("peer-advertise-port").parse().unwrap();
    let ports = container.ports.as_deref().unwrap_or_default();
    let peer = ports.iter().find(|p| p.container_port == peer_port).expect("the peer port is a container port");
    let peer_name = peer.name.clone().expect("the peer port is named");
    let service = m.single_service().spec.clone().unwrap();
    assert!(
        !service.ports.iter().flatten().any(|p| p.target_port == Some(IntOrString::String(peer_name.clone()))
            || p.target_port == Some(IntOrString::Int(peer_port))),
        "the Service must not expose the peer port"
    );

    // The peer files: one read-only Secret volume, its keys projected to the names read.
    let mut secrets = Vec::new();
    for name in ["peer-ca-file", "peer-client-cert-file", "peer-client-key-file"] {
        let file = flag(name);
        let (mount, volume) = support::volume_at(m.single_pod_spec(), container, &file);
        assert_eq!(mount.read_only, Some(true), "--{name}: mounted read-only");
        let secret = volume.secret.as_ref().unwrap_or_else(|| panic!("--{name}: {file} is not on a Secret volume"));
        let relative = Path::new(&file).strip_prefix(&mount.mount_path).unwrap().to_string_lossy().into_owned();
        let items = secret.items.as_deref().unwrap_or_default();
        assert!(items.iter().any(|item| item.path == relative), "--{name}: no Secret key is projected to {relative}");
        secrets.push(secret.secret_name.clone().unwrap_or_default());
    }
    secrets.dedup();
    assert_eq!(secrets, ["numaresources-apiserver-peer"]);
    assert!(flag("peer-server-name").ends_with(&format!(".{NAMESPACE}.svc")), "relocated with the namespace");
}

#[test]
fn replicas_spread_over_nodes_and_one_always_stays() {
    let m = manifests();
    let template = &m.single_deployment().spec.as_ref().unwrap().template;
    let pod_labels = template.metadata.as_ref().and_then(|meta| meta.labels.clone()).unwrap_or_default();
    let selects_the_pods = |selector: &BTreeMap<String, String>| {
        !selector.is_empty() && selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v))
    };

    let affinity = m.single_pod_spec().affinity.as_ref().and_then(|a| a.pod_anti_affinity.as_ref());
    let preferred = affinity.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref());
    let term =
        preferred.and_then(|terms| terms.first()).map(|t| &t.pod_affinity_term).expect("preferred anti-affinity");
    assert_eq!(term.topology_key, "kubernetes.io/hostname");
    let labels = term.label_selector.as_ref().and_then(|s| s.match_labels.clone()).unwrap_or_default();
    assert!(selects_the_pods(&labels), "the anti-affinity selects the API server's own pods: {labels:?}");
    assert!(
        affinity.is_some_and(|a| a.required_during_scheduling_ignored_during_execution.is_none()),
        "required anti-affinity would leave a replica Pending on a one-node cluster"
    );

    let budget = single(&m.disruption_budgets, "PodDisruptionBudget");
    let spec = budget.spec.as_ref().unwrap();
    assert_eq!(spec.min_available, Some(IntOrString::Int(1)));
    let labels = spec.selector.as_ref().and_then(|s| s.match_labels.clone()).unwrap_or_default();
    assert!(selects_the_pods(&labels), "the budget selects the API server's pods: {labels:?}");
}
