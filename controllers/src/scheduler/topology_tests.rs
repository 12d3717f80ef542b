//! The scheduler sees every eligible node's NRT (issue: NRTs that appear after the scheduler
//! started are never seen): the first rollout waits for them (bounded), new NRTs restart the
//! scheduler (rate-limited, with an Event), and status names the nodes without one. And the
//! configuration renders only what the chosen image knows.

use super::*;

const NRO: &str = "/apis/nodetopology.openshift.io/v1/numaresourcesoperators/numaresourcesoperator";
const NRTS: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";

/// The operator object whose one node group is the workers (the harness has one: `worker`).
fn with_worker_group(h: &Harness) {
    h.fake.insert(
        NRO,
        json!({"apiVersion": "nodetopology.openshift.io/v1", "kind": "NUMAResourcesOperator",
            "metadata": {"name": "numaresourcesoperator"},
            "spec": {"nodeGroups": [{"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}]}}),
    );
}

fn add_worker(h: &Harness, name: &str) {
    h.fake.insert_node(name, json!({"node-role.kubernetes.io/worker": ""}));
}

/// Publishes `node`'s NRT as created at `created` (RFC 3339).
fn publish_nrt(h: &Harness, node: &str, created: &str) {
    h.fake.insert(
        &format!("{NRTS}/{node}"),
        json!({"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
            "metadata": {"name": node, "creationTimestamp": created}, "zones": []}),
    );
}

fn epoch(h: &Harness) -> String {
    h.deployment().spec.unwrap().template.metadata.unwrap().annotations.unwrap()[topology::ANNOTATION_CACHE_EPOCH]
        .clone()
}

/// As if the running pods had started at `value`: the Deployment as another writer left it
/// (re-inserted, so the fake does not take our next apply for a no-op: a real server would
/// apply it over the changed field).
fn set_epoch(h: &Harness, value: &str) {
    let mut deployment = h.fake.get(DEPLOYMENT).unwrap();
    deployment["spec"]["template"]["metadata"]["annotations"][topology::ANNOTATION_CACHE_EPOCH] = json!(value);
    h.fake.remove(DEPLOYMENT);
    h.fake.insert(DEPLOYMENT, deployment);
}

fn with_events(h: Harness) -> Harness {
    Harness { ctx: crate::fake::recording(&h.ctx), ..h }
}

#[tokio::test]
async fn the_first_rollout_waits_until_every_eligible_node_has_an_nrt() {
    let h = Harness::new(1);
    with_worker_group(&h);
    add_worker(&h, "worker-b");
    publish_nrt(&h, "worker", "2026-01-01T00:00:00Z");
    assert_eq!(h.reconcile().await.unwrap(), Action::requeue(topology::WAIT_REQUEUE));
    assert!(h.fake.get(DEPLOYMENT).is_none(), "not rolled out before worker-b has an NRT");
    let (status, reason, message) = h.condition(cond::PROGRESSING);
    assert_eq!((status.as_str(), reason.as_str()), ("True", topology::REASON_WAITING));
    assert!(message.contains("worker-b") && !message.contains("worker,"), "{message}");
    let (status, reason, message) = h.condition(topology::CONDITION);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NodesWithoutTopology"));
    assert!(message.contains("1 of 2 eligible nodes") && message.ends_with("worker-b"), "{message}");

    publish_nrt(&h, "worker-b", "2026-01-01T00:00:00Z");
    assert_eq!(h.reconcile().await.unwrap(), Action::requeue(PROGRESS_REQUEUE));
    assert!(h.fake.get(DEPLOYMENT).is_some());
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
    let (status, _, message) = h.condition(topology::CONDITION);
    assert_eq!(status, "True", "{message}");
}

#[tokio::test]
async fn the_wait_is_bounded_and_then_status_says_which_nodes_the_scheduler_cannot_see() {
    let h = Harness::new(1);
    with_worker_group(&h);
    h.reconcile().await.unwrap();
    assert!(h.fake.get(DEPLOYMENT).is_none());
    // The wait began longer ago than the bound (its start is the condition's transition time).
    h.fake.edit(NRS, |nrs| {
        for c in nrs["status"]["conditions"].as_array_mut().unwrap() {
            if c["type"] == cond::PROGRESSING {
                c["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
            }
        }
    });
    h.reconcile().await.unwrap();
    assert!(h.fake.get(DEPLOYMENT).is_some(), "rolled out after the bound");
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
    let (status, _, message) = h.condition(topology::CONDITION);
    assert_eq!(status, "False");
    assert!(message.contains("worker"), "{message}");
}

#[tokio::test]
async fn nrts_that_appear_after_the_pods_started_restart_them_once_with_an_event() {
    let h = with_events(Harness::new(1));
    with_worker_group(&h);
    publish_nrt(&h, "worker", "2020-01-01T00:00:00Z");
    h.reconcile().await.unwrap();
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    // The pods started long ago; a node is added and its exporter publishes now.
    set_epoch(&h, "2021-01-01T00:00:00Z");
    add_worker(&h, "worker-new");
    publish_nrt(&h, "worker-new", "2022-01-01T00:00:00Z");
    h.reconcile().await.unwrap();
    let restarted = epoch(&h);
    assert_ne!(restarted, "2021-01-01T00:00:00Z", "a new epoch restarts the pods");
    let announced = h.fake.events("SchedulerRestarted");
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert!(announced[0]["note"].as_str().unwrap().ends_with("worker-new"), "{announced:?}");
    // The restarted pods know every NRT: nothing more.
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    assert_eq!(epoch(&h), restarted);
    assert_eq!(h.fake.events("SchedulerRestarted").len(), 1);
}

#[tokio::test]
async fn restarts_are_rate_limited() {
    let h = Harness::new(1);
    with_worker_group(&h);
    publish_nrt(&h, "worker", "2020-01-01T00:00:00Z");
    h.reconcile().await.unwrap();
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    // Restarted just now (the epoch is this second); an NRT newer than that is recreated.
    let just_restarted = epoch(&h);
    h.fake.remove(&format!("{NRTS}/worker"));
    publish_nrt(&h, "worker", "2999-01-01T00:00:00Z");
    let action = h.reconcile().await.unwrap();
    assert_eq!(epoch(&h), just_restarted, "not again within the interval");
    assert!(action != Action::requeue(RESYNC), "looks again when the interval is over: {action:?}");
}

#[tokio::test]
async fn preemption_is_rendered_only_for_an_image_that_knows_it_and_status_says_so() {
    let h = with_events(Harness::new(1));
    h.fake.edit(NRS, |nrs| nrs["spec"]["preemptionMode"] = json!("Enabled"));
    h.reconcile().await.unwrap();
    h.reconcile().await.unwrap();
    let args = h.config().pointer("/profiles/0/pluginConfig/0/args").unwrap().clone();
    assert!(args.get("preemptionMode").is_none(), "v0.33.5 exits on an unknown field: {args:#?}");
    let (status, reason, message) = h.condition(cond::SCHEDULER_IMAGE_COMPATIBLE);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "SettingsNotRendered"));
    assert!(message.contains("preemptionMode"), "{message}");
    assert_eq!(h.fake.events("SettingsNotRendered").len(), 1, "warned once, not per pass");
}

#[tokio::test]
async fn knidebug_follows_the_image_not_the_platform() {
    let filters = |h: &Harness| -> Vec<String> {
        let config = h.config();
        let enabled = config.pointer("/profiles/0/plugins/filter/enabled").unwrap().as_array().unwrap().clone();
        enabled.iter().map(|f| f["name"].as_str().unwrap().to_owned()).collect()
    };
    // OpenShift with the upstream image: no KNIDebug (it would crash-loop).
    let (fake, client) = crate::fake::start();
    let mut settings = Settings::kubernetes(NS, "unused");
    settings.platform = Platform::OpenShift(4, 20);
    let openshift = Harness { fake, ctx: Arc::new(Context::new(client, settings, None)) };
    openshift.add_control_plane_node(0);
    openshift.fake.insert(NRS, nrs_object(SCHEDULER_SINGLETON_NAME));
    openshift.reconcile().await.unwrap();
    assert!(!filters(&openshift).contains(&"KNIDebug".to_owned()));
    // Plain Kubernetes with the OpenShift build: KNIDebug.
    let h = Harness::new(1);
    h.fake.edit(NRS, |nrs| nrs["spec"]["imageSpec"] = json!("quay.io/openshift-kni/scheduler-plugins:4.20-snapshot"));
    h.reconcile().await.unwrap();
    assert!(filters(&h).contains(&"KNIDebug".to_owned()));
    assert_eq!(h.condition(cond::SCHEDULER_IMAGE_COMPATIBLE).0, "True");
    // An image nobody knows: the conservative set, and a condition saying so.
    h.fake.edit(NRS, |nrs| nrs["spec"]["imageSpec"] = json!("example.com/my-scheduler:1"));
    h.reconcile().await.unwrap();
    assert!(!filters(&h).contains(&"KNIDebug".to_owned()));
    let (status, _, message) = h.condition(cond::SCHEDULER_IMAGE_COMPATIBLE);
    assert_eq!(status, "False");
    assert!(message.contains("example.com/my-scheduler:1"), "{message}");
}

#[tokio::test]
async fn the_scheduler_gets_its_network_policy_with_the_deployment() {
    let h = Harness::new(1);
    h.reconcile().await.unwrap();
    let path = "/apis/networking.k8s.io/v1/namespaces/numaresources/networkpolicies/numaresources-scheduler";
    let applied: k8s_openapi::api::networking::v1::NetworkPolicy = h.fake.typed(path);
    assert_eq!(applied.spec, crate::render::network_policy::scheduler(NS).unwrap().spec);
    assert_eq!(applied.metadata.owner_references.unwrap()[0].kind, "NUMAResourcesScheduler");
}

/// The extender engine watches NRTs itself: its first rollout does not wait for them, and an NRT
/// created later restarts nothing.
#[tokio::test]
async fn the_extender_engine_neither_waits_for_nrts_nor_restarts_for_new_ones() {
    let h = Harness::new(1);
    h.fake.edit(NRS, |nrs| nrs["spec"]["engine"] = json!("Extender"));
    with_worker_group(&h);
    add_worker(&h, "worker-b");
    publish_nrt(&h, "worker", "2026-01-01T00:00:00Z");
    h.reconcile().await.unwrap();
    assert!(h.fake.get(DEPLOYMENT).is_some(), "rolled out although worker-b has no NRT yet");
    let first = epoch(&h);
    publish_nrt(&h, "worker-b", "2099-01-01T00:00:00Z");
    h.reconcile().await.unwrap();
    assert_eq!(epoch(&h), first, "no restart for an NRT created after the pods started");
}

#[test]
fn an_extender_image_of_another_minor_than_the_cluster_is_said() {
    use crate::server_version::KubeVersion;
    let cluster = Some(KubeVersion { major: 1, minor: 33 });
    assert!(extender_image_warnings("registry.k8s.io/kube-scheduler:v1.33.2", cluster).is_empty());
    let other = extender_image_warnings("registry.k8s.io/kube-scheduler:v1.31.0", cluster);
    assert_eq!(other.len(), 1);
    assert!(other[0].contains("is kube-scheduler v1.31 while the cluster runs v1.33"), "{other:?}");
    assert!(extender_image_warnings("registry.k8s.io/kube-scheduler:v1.31.0", None).is_empty(), "version unknown");
    assert!(extender_image_warnings("example.com/my-scheduler:1", cluster).is_empty(), "not the stock image");
}

/// The extender engine without an image runs the stock kube-scheduler of the cluster's release,
/// and its conditions say which engine decides, with which image.
#[tokio::test]
async fn the_extender_engine_defaults_to_the_clusters_kube_scheduler_and_its_conditions_name_it() {
    let h = Harness::new(1);
    let settings = Settings {
        stock_scheduler_image: Some("registry.k8s.io/kube-scheduler:v1.33.2".into()),
        ..h.ctx.settings.clone()
    };
    let h = Harness { ctx: Arc::new(Context::new(h.ctx.client.clone(), settings, None)), ..h };
    h.fake.edit(NRS, |nrs| {
        nrs["spec"]["engine"] = json!("Extender");
        nrs["spec"]["imageSpec"] = json!("");
    });
    h.reconcile().await.unwrap();
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    let pod = h.deployment().spec.unwrap().template.spec.unwrap();
    let images: Vec<String> = pod.containers.iter().filter_map(|c| c.image.clone()).collect();
    assert!(images.contains(&"registry.k8s.io/kube-scheduler:v1.33.2".to_owned()), "{images:?}");
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
    let (status, reason, message) = h.condition(cond::EXTENDER_ENGINE_ACTIVE);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Extender"));
    assert!(message.contains("registry.k8s.io/kube-scheduler:v1.33.2"), "{message}");
    assert_eq!(h.condition(cond::DEDICATED_INFORMER_ACTIVE).0, "False", "the plugin's informer is not running");
}

/// Without a readable release there is no image to default to: Degraded, saying what to set.
#[tokio::test]
async fn the_extender_engine_without_an_image_or_a_readable_version_is_degraded_naming_the_field() {
    let h = Harness::new(1);
    h.fake.edit(NRS, |nrs| {
        nrs["spec"]["engine"] = json!("Extender");
        nrs["spec"]["imageSpec"] = json!("");
    });
    h.reconcile().await.unwrap();
    let (status, reason, message) = h.condition(cond::DEGRADED);
    assert_eq!((status.as_str(), reason.as_str()), ("True", cond::REASON_SCHEDULER_IMAGE));
    assert!(message.contains("set spec.imageSpec"), "{message}");
    assert!(h.fake.get(DEPLOYMENT).is_none());
}

#[tokio::test]
async fn the_plugin_engine_says_so_naming_its_image() {
    let h = Harness::new(1);
    h.reconcile().await.unwrap();
    let (status, reason, message) = h.condition(cond::EXTENDER_ENGINE_ACTIVE);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Plugin"));
    assert!(message.contains(IMAGE), "{message}");
}
