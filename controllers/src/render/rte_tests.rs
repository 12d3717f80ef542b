//! Table tests of the exporter rendering, mirroring upstream's controller unit tests:
//! defaults rendered into args, every config knob, TLS args, tolerations, and the DaemonSet
//! invariants (priority class, anti-affinity, maxUnavailable, termination policy).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use numaresources_api::GoDuration;
use numaresources_api::operator::{InfoRefreshMode, InfoRefreshPauseMode, NodeGroupConfig, PodsFingerprintingMode};

use super::*;

fn settings() -> RteSettings {
    RteSettings {
        namespace: "numaresources".into(),
        nro_name: "numaresourcesoperator".into(),
        image: "quay.io/numaresources/numaresources:v1".into(),
        verbosity: 2,
        metrics: MetricsMode::Http,
        openshift_selinux: false,
        direct_write: None,
    }
}

fn pool(config: NodeGroupConfig) -> ResolvedPool {
    ResolvedPool {
        group: 0,
        pool: "worker".into(),
        node_selector: LabelSelector {
            match_labels: Some(BTreeMap::from([("node-role.kubernetes.io/worker".into(), String::new())])),
            match_expressions: None,
        },
        nodes: vec!["node-a".into()],
        config: config.normalized(),
    }
}

fn render(config: NodeGroupConfig) -> DaemonSet {
    daemon_set(&settings(), &pool(config), "SHA256:00").unwrap()
}

fn pod(ds: &DaemonSet) -> &PodSpec {
    ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn exporter_args(ds: &DaemonSet) -> Vec<String> {
    pod(ds).containers[0].args.clone().unwrap()
}

fn has(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag)
}

fn starts(args: &[String], prefix: &str) -> bool {
    args.iter().any(|a| a.starts_with(prefix))
}

#[test]
fn defaults_render_into_the_daemonset_args() {
    let args = exporter_args(&render(NodeGroupConfig::default()));
    assert_eq!(
        args,
        [
            "rte",
            "-v=2",
            "--sysfs=/host-sys",
            "--podresources-socket=unix:///host-podresources/kubelet.sock",
            "--refresh-node-resources",
            "--add-nrt-owner=false",
            "--sleep-interval=10s",
            "--podresources-poll-interval=0",
            "--pods-fingerprint",
            "--pods-fingerprint-method=with-exclusive-resources",
            "--pods-fingerprint-status-file=/run/pfpstatus/status.json",
            "--metrics-mode=http",
        ]
    );
}

#[test]
fn every_config_knob_maps_to_its_flags() {
    type Check = fn(&[String]) -> bool;
    let rows: Vec<(&str, NodeGroupConfig, Check)> = vec![
        (
            "fingerprinting disabled",
            NodeGroupConfig { pods_fingerprinting: Some(PodsFingerprintingMode::Disabled), ..Default::default() },
            |a| {
                has(a, "--pods-fingerprint=false")
                    && !starts(a, "--pods-fingerprint-method")
                    && !starts(a, "--pods-fingerprint-status-file")
            },
        ),
        (
            "fingerprinting of every pod",
            NodeGroupConfig { pods_fingerprinting: Some(PodsFingerprintingMode::Enabled), ..Default::default() },
            |a| has(a, "--pods-fingerprint") && has(a, "--pods-fingerprint-method=all"),
        ),
        (
            "fingerprinting of exclusive-resource pods",
            NodeGroupConfig {
                pods_fingerprinting: Some(PodsFingerprintingMode::EnabledExclusiveResources),
                ..Default::default()
            },
            |a| has(a, "--pods-fingerprint-method=with-exclusive-resources"),
        ),
        (
            "period",
            NodeGroupConfig { info_refresh_period: Some(GoDuration::from_secs(90)), ..Default::default() },
            |a| {
                has(a, "--sleep-interval=1m30s")
                    && !starts(a, "--notify-file")
                    && has(a, "--podresources-poll-interval=0")
            },
        ),
        (
            "explicit zero period disables periodic scans",
            NodeGroupConfig { info_refresh_period: Some(GoDuration::ZERO), ..Default::default() },
            |a| has(a, "--sleep-interval=0s"),
        ),
        (
            "events mode: notify file, no periodic scans",
            NodeGroupConfig { info_refresh_mode: Some(InfoRefreshMode::Events), ..Default::default() },
            |a| {
                has(a, "--notify-file=/host-run-rte/notify")
                    && has(a, "--podresources-poll-interval=500ms")
                    && has(a, "--sleep-interval=0")
                    && !has(a, "--sleep-interval=10s")
            },
        ),
        (
            "periodic and events: both",
            NodeGroupConfig { info_refresh_mode: Some(InfoRefreshMode::PeriodicAndEvents), ..Default::default() },
            |a| {
                has(a, "--notify-file=/host-run-rte/notify")
                    && has(a, "--podresources-poll-interval=500ms")
                    && has(a, "--sleep-interval=10s")
            },
        ),
        (
            "pause enabled",
            NodeGroupConfig { info_refresh_pause: Some(InfoRefreshPauseMode::Enabled), ..Default::default() },
            |a| has(a, "--no-publish"),
        ),
        (
            "pause disabled",
            NodeGroupConfig { info_refresh_pause: Some(InfoRefreshPauseMode::Disabled), ..Default::default() },
            |a| !has(a, "--no-publish"),
        ),
        (
            "memory without the memory manager omitted, as upstream",
            NodeGroupConfig { unmanaged_memory: Some(UnmanagedMemoryMode::Omit), ..Default::default() },
            |a| has(a, "--unmanaged-memory=omit"),
        ),
        (
            "memory without the memory manager at node level (the exporter's default)",
            NodeGroupConfig { unmanaged_memory: Some(UnmanagedMemoryMode::NodeLevel), ..Default::default() },
            |a| !a.iter().any(|arg| arg.starts_with("--unmanaged-memory")),
        ),
    ];
    for (name, config, check) in rows {
        let args = exporter_args(&render(config));
        assert!(check(&args), "{name}: {args:?}");
    }
}

#[test]
fn the_refresh_mode_renders_the_allocation_poll_exactly_once() {
    // Periodic turns the exporter's default poll off; the event modes ask for it explicitly.
    for (mode, poll) in [
        (InfoRefreshMode::Periodic, "--podresources-poll-interval=0"),
        (InfoRefreshMode::Events, "--podresources-poll-interval=500ms"),
        (InfoRefreshMode::PeriodicAndEvents, "--podresources-poll-interval=500ms"),
    ] {
        let args =
            exporter_args(&render(NodeGroupConfig { info_refresh_mode: Some(mode.clone()), ..Default::default() }));
        let polls: Vec<&String> = args.iter().filter(|a| a.starts_with("--podresources-poll-interval")).collect();
        assert_eq!(polls, [poll], "{mode:?}: {args:?}");
    }
}

#[test]
fn the_config_map_is_mounted_as_a_directory_so_the_kubelets_swap_reaches_the_exporter() {
    let ds = render(NodeGroupConfig::default());
    let mount = pod(&ds).containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "rte-config-volume")
        .expect("the ConfigMap is mounted");
    assert_eq!(mount.sub_path, None, "a subPath mount never sees the kubelet's ..data swap");
    assert_eq!(mount.sub_path_expr, None);
    assert_eq!(mount.mount_path, CONFIG_DIR);
    // The exporter reads <dir>/config.yaml by default (rte's DEFAULT_OPERATOR_CONFIG).
    assert_eq!(
        format!("{}{}", CONFIG_DIR, crate::render::kubeletconfig::CONFIG_KEY),
        "/etc/resource-topology-exporter/config.yaml"
    );
}

#[test]
fn log_level_and_tls_profile_flags() {
    let mut s = settings();
    s.verbosity = 6;
    s.metrics = MetricsMode::HttpTls { min_version: "VersionTLS12".into(), cipher_suites: "TLS_A,TLS_B".into() };
    let args = exporter_args(&daemon_set(&s, &pool(NodeGroupConfig::default()), "h").unwrap());
    assert!(has(&args, "-v=6"));
    assert!(has(&args, "--metrics-mode=httptls"));
    assert!(has(&args, "--metrics-tls-min-version=VersionTLS12"));
    assert!(has(&args, "--metrics-tls-cipher-suites=TLS_A,TLS_B"));
    s.metrics = MetricsMode::HttpTls { min_version: String::new(), cipher_suites: String::new() };
    let ds = daemon_set(&s, &pool(NodeGroupConfig::default()), "h").unwrap();
    let args = exporter_args(&ds);
    assert!(!starts(&args, "--metrics-tls-"), "empty profile values are left out: {args:?}");
    let volumes: Vec<String> = pod(&ds).volumes.iter().flatten().map(|v| v.name.clone()).collect();
    assert!(volumes.contains(&METRICS_CERT_SECRET.to_owned()), "{volumes:?}");
    let plain = render(NodeGroupConfig::default());
    assert!(!pod(&plain).volumes.iter().flatten().any(|v| v.name == METRICS_CERT_SECRET));
}

#[test]
fn tolerations_replace_the_defaults_or_stay_unset() {
    assert_eq!(pod(&render(NodeGroupConfig::default())).tolerations, None);
    let toleration = Toleration {
        key: Some("dedicated".into()),
        operator: Some("Equal".into()),
        value: Some("numa".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    };
    let ds = render(NodeGroupConfig { tolerations: vec![toleration.clone()], ..Default::default() });
    assert_eq!(pod(&ds).tolerations, Some(vec![toleration]));
}

#[test]
fn daemonset_invariants() {
    let ds = render(NodeGroupConfig::default());
    assert_eq!(ds.metadata.name.as_deref(), Some("numaresourcesoperator-worker"));
    assert_eq!(ds.metadata.namespace.as_deref(), Some("numaresources"));
    let spec = ds.spec.as_ref().unwrap();
    let strategy = spec.update_strategy.as_ref().unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    assert_eq!(strategy.rolling_update.as_ref().unwrap().max_unavailable, Some(IntOrString::String("25%".into())));
    let selector = spec.selector.match_labels.as_ref().unwrap();
    assert_eq!(selector.get(crate::names::LABEL_NODE_GROUP).map(String::as_str), Some("worker"));
    let template_labels = spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
    assert!(selector.iter().all(|(k, v)| template_labels.get(k) == Some(v)), "selector matches the template");
    let annotations = spec.template.metadata.as_ref().unwrap().annotations.as_ref().unwrap();
    assert_eq!(annotations.get("configmap.hash").map(String::as_str), Some("SHA256:00"));

    let pod = pod(&ds);
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-node-critical"));
    assert_eq!(pod.service_account_name.as_deref(), Some("numaresources-rte"));
    assert!(pod.containers.iter().all(|c| c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")));
    assert_eq!(pod.containers[1].name, "shared-pool-container");
    assert!(pod.containers[1].resources.as_ref().unwrap().limits.is_none(), "never Guaranteed: no exclusive CPUs");
    let gates: Vec<&str> = pod.readiness_gates.iter().flatten().map(|g| g.condition_type.as_str()).collect();
    assert_eq!(gates, ["PodresourcesFetched", "NodeTopologyUpdated"]);

    let affinity = pod.affinity.as_ref().unwrap();
    let anti = affinity.pod_anti_affinity.as_ref().unwrap();
    let term = &anti.required_during_scheduling_ignored_during_execution.as_ref().unwrap()[0];
    assert_eq!(term.topology_key, "kubernetes.io/hostname");
    let anti_labels = term.label_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
    assert!(!anti_labels.contains_key(crate::names::LABEL_NODE_GROUP), "across every group, not within one");
    let node_terms = &affinity
        .node_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()
        .node_selector_terms;
    let expression = &node_terms[0].match_expressions.as_ref().unwrap()[0];
    assert_eq!(
        (expression.key.as_str(), expression.operator.as_str(), expression.values.clone()),
        ("node-role.kubernetes.io/worker", "In", Some(vec![String::new()]))
    );

    let env: Vec<&str> = pod.containers[0].env.iter().flatten().map(|e| e.name.as_str()).collect();
    for name in ["NODE_NAME", "REFERENCE_NAMESPACE", "REFERENCE_POD_NAME", "REFERENCE_CONTAINER_NAME", "POD_NAME"] {
        assert!(env.contains(&name), "{name} in {env:?}");
    }
    let config_volume = pod.volumes.iter().flatten().find(|v| v.name == "rte-config-volume").unwrap();
    let config_map = config_volume.config_map.as_ref().unwrap();
    assert_eq!((config_map.name.as_str(), config_map.optional), ("numaresourcesoperator-worker", Some(true)));
}

#[test]
fn an_empty_node_selector_targets_every_node_without_a_term() {
    let mut every = pool(NodeGroupConfig::default());
    every.node_selector = LabelSelector::default();
    let ds = daemon_set(&settings(), &every, "h").unwrap();
    assert!(pod(&ds).affinity.as_ref().unwrap().node_affinity.is_none());
}

#[test]
fn openshift_runs_under_the_device_plugin_selinux_type() {
    let mut s = settings();
    s.openshift_selinux = true;
    let ds = daemon_set(&s, &pool(NodeGroupConfig::default()), "h").unwrap();
    let selinux = pod(&ds).containers[0].security_context.as_ref().unwrap().se_linux_options.clone().unwrap();
    assert_eq!(selinux.type_.as_deref(), Some("container_device_plugin_t"));
    assert!(
        pod(&render(NodeGroupConfig::default())).containers[0]
            .security_context
            .as_ref()
            .unwrap()
            .se_linux_options
            .is_none()
    );
}

#[test]
fn shared_rbac_grants_exactly_what_the_exporter_uses() {
    let rules = cluster_role().unwrap().rules.unwrap();
    assert_eq!(rules[0].verbs, ["create", "get", "update", "patch"]);
    assert_eq!(rules[1].resources.as_deref(), Some(&["nodes".to_owned()][..]));
    let binding = cluster_role_binding("numaresources").unwrap();
    assert_eq!(binding.subjects.unwrap()[0].namespace.as_deref(), Some("numaresources"));
    assert_eq!(role("ns").unwrap().rules.unwrap()[0].verbs, ["patch"]);
    assert_eq!(role_binding("ns").unwrap().role_ref.name, "numaresources-rte");
    assert_eq!(service_account("ns").unwrap().metadata.name.as_deref(), Some("numaresources-rte"));
}

#[test]
fn the_metrics_service_asks_service_ca_for_the_certificate() {
    let service = metrics_service("numaresources").unwrap();
    let annotations = service.metadata.annotations.unwrap();
    assert_eq!(annotations["service.beta.openshift.io/serving-cert-secret-name"], METRICS_CERT_SECRET);
    let spec = service.spec.unwrap();
    assert_eq!(spec.ports.unwrap()[0].port, 2112);
    assert!(!spec.selector.unwrap().contains_key(crate::names::LABEL_NODE_GROUP), "every group's exporters");
}

#[test]
fn the_direct_write_path_is_rendered_only_when_asked_for() {
    let plain = render(NodeGroupConfig::default());
    assert!(!starts(&exporter_args(&plain), "--nrt-"), "{:?}", exporter_args(&plain));
    assert!(!pod(&plain).volumes.iter().flatten().any(|v| v.name == NRT_SERVER_VOLUME));

    let mut s = settings();
    s.direct_write = Some(DirectWrite {
        url: "https://numaresources-apiserver-writes.numaresources.svc:443".into(),
        tls_server_name: "numaresources-apiserver.numaresources.svc".into(),
        admin_url: "http://numaresources-apiserver-writes.numaresources.svc:8081".into(),
        ca_config_map: "numaresources-apiserver-ca".into(),
        ca_key: "ca.crt".into(),
    });
    let ds = daemon_set(&s, &pool(NodeGroupConfig::default()), "h").unwrap();
    let args = exporter_args(&ds);
    assert_eq!(
        args[args.len() - 5..],
        [
            "--nrt-server=https://numaresources-apiserver-writes.numaresources.svc:443",
            "--nrt-server-tls-name=numaresources-apiserver.numaresources.svc",
            "--nrt-server-admin-url=http://numaresources-apiserver-writes.numaresources.svc:8081",
            "--nrt-server-ca-file=/var/run/secrets/numaresources/nrt-server/ca.crt",
            "--nrt-token-file=/var/run/secrets/numaresources/nrt-server/token",
        ]
    );
    let volume = pod(&ds).volumes.iter().flatten().find(|v| v.name == NRT_SERVER_VOLUME).unwrap().clone();
    let sources = volume.projected.unwrap().sources.unwrap();
    let token = sources[0].service_account_token.clone().unwrap();
    assert_eq!(
        (token.audience.as_deref(), token.expiration_seconds, token.path.as_str()),
        (Some("numaresources-apiserver"), Some(3600), "token")
    );
    let ca = sources[1].config_map.clone().unwrap();
    assert_eq!(ca.optional, Some(true), "an exporter never waits for the bundle");
}

#[test]
fn the_write_service_reaches_the_api_servers_pods_ready_or_not_on_the_https_and_admin_ports() {
    let service = write_service("numaresources").unwrap();
    assert_eq!(service.metadata.name.as_deref(), Some("numaresources-apiserver-writes"));
    let spec = service.spec.unwrap();
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    // The same pods and port as the Service the APIService uses (manifests/apiserver/service.yaml).
    let installed: Service = serde_norway::from_str(include_str!("../../../manifests/apiserver/service.yaml")).unwrap();
    let installed = installed.spec.unwrap();
    assert_eq!(spec.selector, installed.selector);
    let ports = spec.ports.unwrap();
    assert_eq!(ports[0], installed.ports.unwrap()[0]);
    // And the admin port, where the exporters ask whether their object is held: the
    // container's port of that name, which the server is told to serve.
    assert_eq!((ports[1].name.as_deref(), ports[1].port), (Some("health"), 8081));
    let deployment: k8s_openapi::api::apps::v1::Deployment =
        serde_norway::from_str(include_str!("../../../manifests/apiserver/deployment.yaml")).unwrap();
    let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
    let health = container.ports.iter().flatten().find(|p| p.name.as_deref() == Some("health")).unwrap();
    assert_eq!(health.container_port, 8081);
    assert!(container.args.iter().flatten().any(|arg| arg == "--health-port=8081"));
}
