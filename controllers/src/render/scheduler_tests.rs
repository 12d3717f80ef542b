//! Table tests of the scheduler rendering, mirroring upstream's controller unit tests: every
//! ConfigMap knob including preemption set/unset, leader election vs replicas, replica autodetection, QoS.

use numaresources_api::operator::defaults::Platform;
use numaresources_api::operator::{LogLevel, ResourceSpecParams, ScoringStrategyParams};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use numaresources_api::operator::scheduler_image::SchedulerCapabilities;

use super::*;

fn settings() -> SchedulerSettings {
    SchedulerSettings {
        namespace: "numaresources".into(),
        capabilities: SchedulerCapabilities { kni_debug: false, preemption_mode: true },
        guaranteed_qos: false,
        extender_image: "numaresources:test".into(),
    }
}

fn spec() -> NUMAResourcesSchedulerSpec {
    NUMAResourcesSchedulerSpec {
        scheduler_image: "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33".into(),
        ..Default::default()
    }
}

fn rendered(spec: &NUMAResourcesSchedulerSpec, replicas: i32) -> Value {
    let normalized = spec.normalized(Platform::Kubernetes);
    serde_norway::from_str(&config_yaml(&normalized, &settings(), replicas)).unwrap()
}

fn args(config: &Value) -> &Value {
    config.pointer("/profiles/0/pluginConfig/0/args").unwrap()
}

#[test]
fn defaults_render_the_upstream_configuration() {
    let config = rendered(&spec(), 1);
    assert_eq!(config["kind"], "KubeSchedulerConfiguration");
    assert_eq!(config.pointer("/profiles/0/schedulerName").unwrap(), "topo-aware-scheduler");
    assert_eq!(
        args(&config),
        &json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "NodeResourceTopologyMatchArgs",
            "cacheResyncPeriodSeconds": 5,
            "cache": {"resyncMethod": "Autodetect", "foreignPodsDetect": "OnlyExclusiveResources", "informerMode": "Dedicated"},
            "scoringStrategy": {"type": "LeastAllocated"},
        })
    );
    let plugins = config.pointer("/profiles/0/plugins").unwrap();
    assert_eq!(plugins.pointer("/multiPoint/disabled/0/name").unwrap(), "DynamicResources");
    assert_eq!(plugins.pointer("/multiPoint/enabled/0/name").unwrap(), "NodeResourceTopologyMatch");
    assert_eq!(plugins.pointer("/filter/disabled/0/name").unwrap(), "*");
    let filters: Vec<&str> = plugins
        .pointer("/filter/enabled")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(filters.len(), 13, "{filters:?}");
    assert!(!filters.contains(&"KNIDebug"), "only the OpenShift fork has it");
    assert_eq!(filters[6], "NodeResourceTopologyMatch");
}

#[test]
fn every_knob_maps_to_its_plugin_arg() {
    type Row = (&'static str, fn(&mut NUMAResourcesSchedulerSpec), fn(&Value) -> bool);
    let rows: Vec<Row> = vec![
        (
            "scheduler name",
            |s| s.scheduler_name = "numa".into(),
            |c| c.pointer("/profiles/0/schedulerName").unwrap() == "numa",
        ),
        (
            "resync 90s",
            |s| s.cache_resync_period = Some(GoDuration::from_secs(90)),
            |c| args(c)["cacheResyncPeriodSeconds"] == 90,
        ),
        (
            "resync rounds",
            |s| s.cache_resync_period = Some(GoDuration::from_nanos(2_500_000_000)),
            |c| args(c)["cacheResyncPeriodSeconds"] == 3,
        ),
        (
            "resync 0 removes the key",
            |s| s.cache_resync_period = Some(GoDuration::ZERO),
            |c| args(c).get("cacheResyncPeriodSeconds").is_none(),
        ),
        (
            "aggressive detection",
            |s| s.cache_resync_detection = Some(CacheResyncDetectionMode::Aggressive),
            |c| args(c)["cache"]["foreignPodsDetect"] == "All",
        ),
        (
            "shared informer",
            |s| s.scheduler_informer = Some(SchedulerInformerMode::Shared),
            |c| args(c)["cache"]["informerMode"] == "Shared",
        ),
        (
            "scoring strategy with resources",
            |s| {
                s.scoring_strategy = Some(ScoringStrategyParams {
                    type_: Some(ScoringStrategyType::MostAllocated),
                    resources: vec![
                        ResourceSpecParams { name: "cpu".into(), weight: 10 },
                        ResourceSpecParams { name: "memory".into(), weight: 0 },
                    ],
                })
            },
            |c| {
                args(c)["scoringStrategy"]
                    == json!({"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 10}, {"name": "memory", "weight": 1}]})
            },
        ),
        (
            "preemption enabled",
            |s| s.preemption_mode = Some(PreemptionMode::Enabled),
            |c| args(c)["preemptionMode"] == "Enabled",
        ),
        (
            "preemption disabled removes the key",
            |s| s.preemption_mode = Some(PreemptionMode::Disabled),
            |c| args(c).get("preemptionMode").is_none(),
        ),
        ("preemption unset removes the key", |s| s.preemption_mode = None, |c| args(c).get("preemptionMode").is_none()),
    ];
    for (name, change, check) in rows {
        let mut s = spec();
        change(&mut s);
        let config = rendered(&s, 1);
        assert!(check(&config), "{name}: {config:#?}");
    }
}

#[test]
fn leader_election_only_with_more_than_one_replica() {
    for (replicas, elect) in [(0, false), (1, false), (2, true), (3, true)] {
        let config = rendered(&spec(), replicas);
        let election = &config["leaderElection"];
        assert_eq!(election["leaderElect"], elect, "replicas {replicas}");
        assert_eq!(election["resourceName"], "numa-scheduler-leader");
        assert_eq!(election["resourceNamespace"], "numaresources");
    }
}

#[test]
fn replica_autodetection() {
    let rows: [(Option<i32>, usize, Result<i32, ()>); 10] = [
        (None, 0, Err(())),
        (None, 1, Ok(1)),
        (None, 2, Ok(1)),
        (None, 3, Ok(3)),
        (None, 5, Ok(3)),
        (Some(0), 3, Ok(0)),
        (Some(0), 0, Ok(0)),
        (Some(2), 3, Ok(2)),
        (Some(3), 3, Ok(3)),
        (Some(4), 3, Err(())),
    ];
    for (requested, eligible, expected) in rows {
        assert_eq!(replicas(requested, eligible).map_err(|_| ()), expected, "{requested:?} of {eligible}");
    }
}

#[test]
fn an_image_without_preemption_gets_no_preemption_argument() {
    let mut s = spec();
    s.preemption_mode = Some(PreemptionMode::Enabled);
    let without = SchedulerSettings { capabilities: SchedulerCapabilities::CONSERVATIVE, ..settings() };
    let config: Value = serde_norway::from_str(&config_yaml(&s.normalized(Platform::Kubernetes), &without, 1)).unwrap();
    assert!(args(&config).get("preemptionMode").is_none(), "{config:#?}");
    let filters = config.pointer("/profiles/0/plugins/filter/enabled").unwrap().as_array().unwrap();
    assert!(filters.iter().all(|f| f["name"] != "KNIDebug"));
}

#[test]
fn an_image_with_knidebug_gets_the_debug_filter() {
    let s = SchedulerSettings {
        capabilities: SchedulerCapabilities { kni_debug: true, preemption_mode: false },
        ..settings()
    };
    let config: Value =
        serde_norway::from_str(&config_yaml(&spec().normalized(Platform::OpenShift(4, 20)), &s, 1)).unwrap();
    let filters = config.pointer("/profiles/0/plugins/filter/enabled").unwrap().as_array().unwrap();
    assert_eq!(filters[5]["name"], "KNIDebug");
    assert_eq!(args(&config)["cache"]["informerMode"], "Shared", "unset informer on OpenShift 4.20");
}

#[test]
fn deployment_follows_the_spec_and_the_qos_annotation() {
    let mut s = spec();
    s.log_level = Some(LogLevel::Debug);
    let normalized = s.normalized(Platform::Kubernetes);
    let rendered = deployment(&normalized, &settings(), 3, "SHA256:ab", "2026-01-01T00:00:00Z").unwrap();
    let spec = rendered.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let template = &spec.template;
    assert_eq!(template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()["configmap.hash"], "SHA256:ab");
    let pod = template.spec.as_ref().unwrap();
    let container = &pod.containers[0];
    assert_eq!(container.image.as_deref(), Some("registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33"));
    assert!(container.command.as_ref().unwrap().contains(&"-v=4".to_owned()));
    assert_eq!(container.env.as_ref().unwrap()[0].value.as_deref(), Some("/run/pfpstatus"), "DumpJSONFile by default");
    let resources = container.resources.as_ref().unwrap();
    assert!(resources.limits.is_none(), "Burstable by default");
    assert_eq!(resources.requests.as_ref().unwrap()["cpu"].0, "150m");
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-node-critical"));
    let spread = &pod.topology_spread_constraints.as_ref().unwrap()[0];
    assert_eq!((spread.max_skew, spread.when_unsatisfiable.as_str()), (1, "DoNotSchedule"));
    assert_eq!(pod.security_context.as_ref().unwrap().run_as_non_root, Some(true));

    let guaranteed = SchedulerSettings { guaranteed_qos: true, ..settings() };
    let rendered = super::deployment(&normalized, &guaranteed, 1, "h", "e").unwrap();
    let resources = rendered.spec.unwrap().template.spec.unwrap().containers[0].resources.clone().unwrap();
    assert_eq!(resources.requests, resources.limits);

    let mut quiet = normalized.clone();
    quiet.cache_resync_debug = Some(CacheResyncDebugMode::Disabled);
    let deployment = super::deployment(&quiet, &settings(), 1, "h", "e").unwrap();
    assert!(deployment.spec.unwrap().template.spec.unwrap().containers[0].env.as_ref().is_none_or(Vec::is_empty));
}

#[test]
fn status_values_read_back_from_the_config() {
    let mut s = spec();
    s.scheduler_name = "numa".into();
    let yaml = config_yaml(&s.normalized(Platform::Kubernetes), &settings(), 1);
    assert_eq!(scheduler_name_in(&yaml).as_deref(), Some("numa"));
    s.cache_resync_period = Some(GoDuration::from_nanos(1_400_000_000));
    assert_eq!(effective_resync_period(&s), GoDuration::from_secs(1));
}

#[test]
fn rbac_is_least_privilege() {
    let role = leader_election_role("numaresources").unwrap();
    let rules = role.rules.unwrap();
    assert_eq!(rules[0].verbs, ["create"]);
    assert!(rules[0].resource_names.is_none());
    assert_eq!(rules[1].resource_names.as_deref(), Some(&["numa-scheduler-leader".to_owned()][..]));
    let bindings = cluster_role_bindings("numaresources").unwrap();
    let roles: Vec<&str> = bindings.iter().map(|b| b.role_ref.name.as_str()).collect();
    assert_eq!(roles, ["numaresources:scheduler", "system:kube-scheduler", "system:volume-scheduler"]);
    let role_bindings = role_bindings("numaresources").unwrap();
    assert_eq!(role_bindings[1].metadata.namespace.as_deref(), Some("kube-system"));
    assert_eq!(cluster_role().unwrap().rules.unwrap()[0].verbs, ["get", "list", "watch"]);
    assert_eq!(service_account("numaresources").unwrap().metadata.name.as_deref(), Some("numaresources-scheduler"));
    let cm = config_map(&settings(), "x".into()).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("numaresources-scheduler-config"));
}

#[test]
fn the_extender_engine_runs_the_stock_scheduler_calling_our_extender_beside_it() {
    use numaresources_api::operator::SchedulerEngine;
    let spec = NUMAResourcesSchedulerSpec {
        scheduler_image: "registry.k8s.io/kube-scheduler:v1.33.0".into(),
        engine: Some(SchedulerEngine::Extender),
        scoring_strategy: Some(ScoringStrategyParams {
            type_: Some(ScoringStrategyType::MostAllocated),
            resources: vec![],
        }),
        ..NUMAResourcesSchedulerSpec::default()
    }
    .normalized(Platform::Kubernetes);
    let config: Value = serde_norway::from_str(&config_yaml(&spec, &settings(), 3)).unwrap();
    // The default plugins (no NodeResourceTopologyMatch, which the stock image does not have).
    assert_eq!(config["profiles"], json!([{"schedulerName": "topo-aware-scheduler"}]));
    assert_eq!(config["leaderElection"]["leaderElect"], true);
    assert_eq!(
        config["extenders"],
        json!([{"urlPrefix": "http://127.0.0.1:8888", "filterVerb": "filter", "prioritizeVerb": "prioritize",
                "bindVerb": "bind", "weight": 1, "nodeCacheCapable": true, "httpTimeout": "5s", "ignorable": false}])
    );

    let deployment = deployment(&spec, &settings(), 3, "hash", "epoch").unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let scheduler = &pod.containers[0];
    assert_eq!(scheduler.image.as_deref(), Some("registry.k8s.io/kube-scheduler:v1.33.0"));
    assert_eq!(scheduler.command.as_ref().unwrap()[0], "kube-scheduler", "the stock image has it on its PATH");
    let extender = &pod.containers[1];
    assert_eq!(extender.name, "numa-extender");
    let ready = extender.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
    assert_eq!((ready.path.as_deref(), &ready.port), (Some("/readyz"), &IntOrString::Int(8889)));
    assert_eq!(extender.image.as_deref(), Some("numaresources:test"));
    assert_eq!(
        extender.args.as_deref().unwrap(),
        ["scheduler-extender", "--scheduler-name", "topo-aware-scheduler", "--scoring-strategy", "MostAllocated"]
    );

    // The plugin engine is unchanged: one container, scheduler-plugins' binary path.
    let plugin = deployment_of(&spec_with_engine(None));
    assert_eq!(plugin.containers.len(), 1);
    assert_eq!(plugin.containers[0].command.as_ref().unwrap()[0], "/bin/kube-scheduler");
}

fn spec_with_engine(engine: Option<numaresources_api::operator::SchedulerEngine>) -> NUMAResourcesSchedulerSpec {
    NUMAResourcesSchedulerSpec { engine, ..spec() }.normalized(Platform::Kubernetes)
}

fn deployment_of(spec: &NUMAResourcesSchedulerSpec) -> k8s_openapi::api::core::v1::PodSpec {
    deployment(spec, &settings(), 1, "hash", "epoch").unwrap().spec.unwrap().template.spec.unwrap()
}
