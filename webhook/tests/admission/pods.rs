//! The pod webhook on the bodies a real kube-apiserver sent: what is routed, the exact object
//! after the patch, and everything that is left alone.

use numaresources_api::operator::PodRoutingMode;
use numaresources_webhook::{MUTATE_PODS_PATH, ROUTING_ANNOTATION};
use serde_json::{Value, json};

use crate::support::{Answered, WORKLOADS, admin, fixture, get, labels, object, post, scheduler, webhook_with};

/// The fixture's pod as it must be after routing: two fields changed, nothing else.
fn routed(pod: &Value, why: &str) -> Value {
    let mut expected = pod.clone();
    expected["spec"]["schedulerName"] = json!("topo-aware-scheduler");
    let annotations = expected["metadata"].as_object_mut().unwrap().entry("annotations").or_insert(json!({}));
    annotations[ROUTING_ANNOTATION] = json!(why);
    expected
}

async fn admit(mode: PodRoutingMode, name: &str) -> (Value, Answered) {
    let (webhook, _feeds) = webhook_with(Some(scheduler(mode, None)));
    let review = fixture(name);
    let answer = post(&webhook, MUTATE_PODS_PATH, &review).await;
    answer.assert_answers(&review);
    assert!(answer.allowed(), "pods are never denied: {:?}", answer.review);
    (review, answer)
}

#[tokio::test]
async fn exclusive_resources_mode_routes_exactly_the_pods_that_need_numa_alignment() {
    let integral_cpus =
        "podRouting mode ExclusiveResources: Guaranteed pod, container \"app\" requests whole CPUs (cpu: 2)";
    let cases: [(&str, Option<&str>); 13] = [
        ("pod-create-guaranteed-integral.json", Some(integral_cpus)),
        ("pod-create-dryrun.json", Some(integral_cpus)),
        ("pod-create-generatename.json", Some(integral_cpus)),
        (
            "pod-create-hugepages.json",
            Some("podRouting mode ExclusiveResources: Guaranteed pod, container \"app\" requests whole CPUs (cpu: 1)"),
        ),
        ("pod-create-device.json", Some(integral_cpus)),
        ("pod-create-initcontainer.json", Some(integral_cpus)),
        ("pod-create-guaranteed-fractional.json", None),
        ("pod-create-burstable.json", None),
        ("pod-create-besteffort.json", None),
        ("pod-create-scheduler-named.json", None),
        ("pod-create-optout-annotation.json", None),
        ("pod-update-labels.json", None),
        // The validating webhook's copy of a routed pod: by then the name is set, still routed
        // if it ever reached the mutating path.
        ("validating/pod-create-guaranteed-integral.json", Some(integral_cpus)),
    ];
    for (name, why) in cases {
        let (review, answer) = admit(PodRoutingMode::ExclusiveResources, name).await;
        let pod = object(&review);
        match why {
            Some(why) => assert_eq!(answer.patched(&pod), routed(&pod, why), "{name}"),
            None => assert!(answer.patch().is_none(), "{name}: {:?}", answer.patch()),
        }
    }
}

/// The hugepages and device fixtures also ask for whole CPUs; with their CPUs made fractional
/// (still Guaranteed: requests = limits) the hugepages or the device alone must route them.
#[tokio::test]
async fn hugepages_or_a_device_alone_route_a_guaranteed_pod_with_fractional_cpus() {
    let cases = [
        ("pod-create-hugepages.json", "requests hugepages (hugepages-2Mi)"),
        ("pod-create-device.json", "requests a device (example.com/sriov_vf)"),
    ];
    for (name, why) in cases {
        let (webhook, _feeds) = webhook_with(Some(scheduler(PodRoutingMode::ExclusiveResources, None)));
        let mut review = fixture(name);
        let resources = &mut review["request"]["object"]["spec"]["containers"][0]["resources"];
        resources["requests"]["cpu"] = json!("500m");
        resources["limits"]["cpu"] = json!("500m");
        let answer = post(&webhook, MUTATE_PODS_PATH, &review).await;
        answer.assert_answers(&review);
        let pod = object(&review);
        let why = format!("podRouting mode ExclusiveResources: Guaranteed pod, container \"app\" {why}");
        assert_eq!(answer.patched(&pod), routed(&pod, &why), "{name}");
    }
}

#[tokio::test]
async fn mode_all_routes_every_default_scheduler_pod_but_never_an_explicit_choice() {
    let all = "podRouting mode All: every pod of a selected namespace";
    for name in ["pod-create-besteffort.json", "pod-create-burstable.json", "pod-create-guaranteed-fractional.json"] {
        let (review, answer) = admit(PodRoutingMode::All, name).await;
        let pod = object(&review);
        assert_eq!(answer.patched(&pod), routed(&pod, all), "{name}");
    }
    for name in ["pod-create-scheduler-named.json", "pod-create-optout-annotation.json", "pod-update-labels.json"] {
        let (_, answer) = admit(PodRoutingMode::All, name).await;
        assert!(answer.patch().is_none(), "{name}");
    }
}

#[tokio::test]
async fn the_opt_out_annotation_keeps_existing_annotations_untouched() {
    // Routed with mode All only if the opt-out were ignored: prove the annotation is read.
    let (review, answer) = admit(PodRoutingMode::All, "pod-create-optout-annotation.json").await;
    assert_eq!(answer.patched(&object(&review)), object(&review));
}

#[tokio::test]
async fn nothing_is_routed_without_a_scheduler_or_with_routing_disabled() {
    for scheduler in [None, Some(scheduler(PodRoutingMode::Disabled, None))] {
        let (webhook, _feeds) = webhook_with(scheduler);
        let review = fixture("pod-create-guaranteed-integral.json");
        let answer = post(&webhook, MUTATE_PODS_PATH, &review).await;
        answer.assert_answers(&review);
        assert!(answer.allowed() && answer.patch().is_none());
    }
}

#[tokio::test]
async fn the_namespace_selector_decides_and_the_scheduler_name_comes_from_status() {
    let review = fixture("pod-create-guaranteed-integral.json");
    let (webhook, _feeds) =
        webhook_with(Some(scheduler(PodRoutingMode::ExclusiveResources, Some(labels(&[("team", "numa")])))));
    assert!(post(&webhook, MUTATE_PODS_PATH, &review).await.patch().is_none(), "namespace not selected");

    let mut selected = scheduler(PodRoutingMode::ExclusiveResources, Some(labels(&[("numa", "true")])));
    selected.status = Some(numaresources_api::operator::NUMAResourcesSchedulerStatus {
        scheduler_name: "numa-scheduler-running".into(),
        ..Default::default()
    });
    let (webhook, _feeds) = webhook_with(Some(selected));
    let answer = post(&webhook, MUTATE_PODS_PATH, &review).await;
    assert_eq!(answer.patched(&object(&review))["spec"]["schedulerName"], "numa-scheduler-running");

    // A namespace the cache does not hold cannot be matched against a selector.
    let mut elsewhere = review.clone();
    elsewhere["request"]["namespace"] = json!("brand-new");
    assert!(post(&webhook, MUTATE_PODS_PATH, &elsewhere).await.patch().is_none());
}

#[tokio::test]
async fn system_namespaces_and_our_own_are_never_routed() {
    let (webhook, mut feeds) = webhook_with(Some(scheduler(PodRoutingMode::All, None)));
    feeds.set_namespaces(["kube-system", "openshift-etcd", "numaresources"].map(|n| (n, labels(&[("numa", "true")]))));
    for namespace in ["kube-system", "openshift-etcd", "numaresources"] {
        let mut review = fixture("pod-create-besteffort.json");
        review["request"]["namespace"] = json!(namespace);
        review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
        let answer = post(&webhook, MUTATE_PODS_PATH, &review).await;
        answer.assert_answers(&review);
        assert!(answer.patch().is_none(), "{namespace}");
    }
}

#[tokio::test]
async fn until_the_caches_sync_pods_pass_unchanged_and_readyz_fails() {
    let (cluster, mut feeds) = numaresources_webhook::ClusterCache::new();
    let config = numaresources_webhook::Config::new("numaresources").unwrap();
    let webhook = numaresources_webhook::Webhook::with_cluster(config, cluster);
    let health = admin(&webhook);
    assert_eq!(get(&health, "/readyz").await.0, 500);
    let (_, verbose) = get(&health, "/readyz?verbose").await;
    assert!(verbose.contains("[-]namespace-cache failed"), "{verbose}");
    assert_eq!(get(&health, "/healthz").await.0, 200, "alive while not ready");

    feeds.set_scheduler(Some(scheduler(PodRoutingMode::All, None)));
    let review = fixture("pod-create-guaranteed-integral.json");
    let answer = post(&webhook, MUTATE_PODS_PATH, &review).await;
    answer.assert_answers(&review);
    assert!(answer.allowed() && answer.patch().is_none(), "not routed before the caches sync");

    // The node cache is never listed here: it only feeds a warning, routing does not wait for it.
    feeds.set_namespaces([(WORKLOADS, labels(&[]))]);
    assert_eq!(get(&health, "/readyz").await, (http::StatusCode::OK, "ok".to_owned()));
    assert!(post(&webhook, MUTATE_PODS_PATH, &review).await.patch().is_some(), "routed once synced");
    let https = webhook.router();
    assert_eq!(get(&https, "/readyz").await.0, 200, "the probes are on the TLS port too");
}

#[tokio::test]
async fn metrics_count_admissions_routes_and_skips_but_dry_runs_only_as_admissions() {
    let (webhook, _feeds) = webhook_with(Some(scheduler(PodRoutingMode::ExclusiveResources, None)));
    for name in ["pod-create-guaranteed-integral.json", "pod-create-dryrun.json", "pod-create-burstable.json"] {
        post(&webhook, MUTATE_PODS_PATH, &fixture(name)).await;
    }
    let (status, metrics) = get(&admin(&webhook), "/metrics").await;
    assert_eq!(status, 200);
    for line in [
        r#"numaresources_webhook_admissions_total{kind="Pod",operation="CREATE",decision="patched",dry_run="false"} 1"#,
        r#"numaresources_webhook_admissions_total{kind="Pod",operation="CREATE",decision="patched",dry_run="true"} 1"#,
        r#"numaresources_webhook_admissions_total{kind="Pod",operation="CREATE",decision="allowed",dry_run="false"} 1"#,
        r#"numaresources_webhook_pods_routed_total{mode="ExclusiveResources"} 1"#,
        r#"numaresources_webhook_pods_skipped_total{reason="not-guaranteed"} 1"#,
        r#"numaresources_webhook_admission_duration_seconds_count{kind="Pod"} 3"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
}

#[tokio::test]
async fn other_kinds_and_subresources_pass_unchanged() {
    let (webhook, _feeds) = webhook_with(Some(scheduler(PodRoutingMode::All, None)));
    let mut binding = fixture("pod-create-besteffort.json");
    binding["request"]["subResource"] = json!("binding");
    let answer = post(&webhook, MUTATE_PODS_PATH, &binding).await;
    answer.assert_answers(&binding);
    assert!(answer.allowed() && answer.patch().is_none() && answer.warnings().is_empty());

    let mut deployment = fixture("pod-create-besteffort.json");
    deployment["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let answer = post(&webhook, MUTATE_PODS_PATH, &deployment).await;
    answer.assert_answers(&deployment);
    assert!(answer.allowed() && answer.patch().is_none());
    assert!(answer.warnings()[0].contains("does not handle apps/v1 Deployment"), "{:?}", answer.warnings());
}
