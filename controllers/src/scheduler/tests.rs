//! Scheduler reconciler scenarios against the in-memory API (nro.md §5.3): everything on the first
//! pass, no-op second pass, wrong name, invalid spec and recovery, a name change rolling the
//! Deployment, replica autodetection with leader election, and API errors.

use std::collections::BTreeSet;

use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use numaresources_api::GoDuration;
use numaresources_api::operator::NUMAResourcesSchedulerSpec;
use serde_json::{Value, json};

use super::*;
use crate::context::Settings;
use crate::fake::FakeApi;

const NS: &str = "numaresources";
const NRS: &str = "/apis/nodetopology.openshift.io/v1/numaresourcesschedulers/numaresourcesscheduler";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/numaresources/deployments/numaresources-scheduler";
const CONFIG: &str = "/api/v1/namespaces/numaresources/configmaps/numaresources-scheduler-config";
const IMAGE: &str = "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5";

struct Harness {
    fake: FakeApi,
    ctx: Arc<Context>,
}

fn nrs_object(name: &str) -> Value {
    let mut nrs = NUMAResourcesScheduler::new(
        name,
        NUMAResourcesSchedulerSpec { scheduler_image: IMAGE.into(), ..Default::default() },
    );
    nrs.metadata.generation = Some(1);
    serde_json::to_value(nrs).unwrap()
}

impl Harness {
    fn new(control_plane_nodes: usize) -> Self {
        let (fake, client) = FakeApi::start();
        let h = Self { fake, ctx: Arc::new(Context::new(client, Settings::kubernetes(NS, "unused"), None)) };
        for i in 0..control_plane_nodes {
            h.add_control_plane_node(i);
        }
        h.fake.insert("/api/v1/nodes/worker", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker", "labels": {"node-role.kubernetes.io/worker": ""}}}));
        h.fake.insert(NRS, nrs_object(SCHEDULER_SINGLETON_NAME));
        h
    }

    fn add_control_plane_node(&self, i: usize) {
        let name = format!("cp-{i}");
        self.fake.insert(
            &format!("/api/v1/nodes/{name}"),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"node-role.kubernetes.io/control-plane": ""}}}),
        );
    }

    /// One pass through the controller's entry point (the raw object of the guarded watch).
    async fn reconcile_path(&self, path: &str) -> Result<Action> {
        let obj: DynamicObject = self.fake.typed(path);
        tokio::time::timeout(Duration::from_secs(10), reconcile_raw(Arc::new(obj), self.ctx.clone()))
            .await
            .expect("reconcile timed out: likely deadlocked")
    }

    async fn reconcile(&self) -> Result<Action> {
        self.reconcile_path(NRS).await
    }

    fn status(&self) -> NUMAResourcesSchedulerStatus {
        self.fake.typed::<NUMAResourcesScheduler>(NRS).status.unwrap_or_default()
    }

    fn condition(&self, type_: &str) -> (String, String, String) {
        let conditions = self.status().conditions;
        let c = cond::find(&conditions, type_).unwrap_or_else(|| panic!("no {type_} in {conditions:?}"));
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    fn config(&self) -> Value {
        let cm: ConfigMap = self.fake.typed(CONFIG);
        serde_norway::from_str(&cm.data.unwrap()["config.yaml"]).unwrap()
    }

    fn deployment(&self) -> Deployment {
        self.fake.typed(DEPLOYMENT)
    }
}

#[tokio::test]
async fn first_reconcile_creates_everything_then_becomes_available() {
    let h = Harness::new(1);
    assert_eq!(h.reconcile().await.unwrap(), Action::requeue(PROGRESS_REQUEUE));
    let paths: BTreeSet<String> = h.fake.paths().into_iter().collect();
    for expected in [
        "/api/v1/namespaces/numaresources/serviceaccounts/numaresources-scheduler",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/numaresources:scheduler",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/numaresources:scheduler",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/numaresources:scheduler:kube-scheduler",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/numaresources:scheduler:volume-scheduler",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/numaresources/roles/numaresources-scheduler-leader-elect",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/numaresources/rolebindings/numaresources-scheduler-leader-elect",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/numaresources-scheduler:extension-apiserver-authentication-reader",
        CONFIG,
        DEPLOYMENT,
    ] {
        assert!(paths.contains(expected), "{expected} missing from {paths:#?}");
    }
    assert_eq!(h.condition(cond::PROGRESSING).0, "True");
    let owner = &h.deployment().metadata.owner_references.unwrap()[0];
    assert_eq!(owner.kind, "NUMAResourcesScheduler");

    h.fake.roll_out();
    assert_eq!(h.reconcile().await.unwrap(), Action::requeue(RESYNC));
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
    assert_eq!(h.condition(cond::DEDICATED_INFORMER_ACTIVE).0, "True", "Dedicated by default on Kubernetes");
    let status = h.status();
    assert_eq!(status.scheduler_name, "topo-aware-scheduler");
    assert_eq!(status.cache_resync_period, Some(GoDuration::from_secs(5)));
    assert_eq!(status.deployment.name, "numaresources-scheduler");
    assert_eq!(status.related_objects.len(), 2);
}

#[tokio::test]
async fn second_reconcile_changes_nothing() {
    let h = Harness::new(1);
    h.reconcile().await.unwrap();
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    let before = h.fake.versions();
    h.fake.take_calls();
    h.reconcile().await.unwrap();
    assert_eq!(h.fake.versions(), before);
    assert!(!h.fake.take_calls().iter().any(|c| c.path.ends_with("/status") || c.method == Method::POST));
}

#[tokio::test]
async fn a_new_scheduler_name_rolls_the_deployment_and_reaches_status() {
    let h = Harness::new(1);
    h.reconcile().await.unwrap();
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    let hash_before =
        h.deployment().spec.unwrap().template.metadata.unwrap().annotations.unwrap()["configmap.hash"].clone();
    h.fake.edit(NRS, |nrs| nrs["spec"]["schedulerName"] = json!("numa-aware"));
    h.reconcile().await.unwrap();
    assert_eq!(h.config().pointer("/profiles/0/schedulerName").unwrap(), "numa-aware");
    let hash_after =
        h.deployment().spec.unwrap().template.metadata.unwrap().annotations.unwrap()["configmap.hash"].clone();
    assert_ne!(hash_before, hash_after, "the config hash rolls the pods");
    assert_eq!(h.status().scheduler_name, "numa-aware");
    assert_eq!(h.condition(cond::PROGRESSING).0, "True", "the new generation rolls out");
}

#[tokio::test]
async fn replicas_follow_the_control_plane_and_leader_election_follows_replicas() {
    let h = Harness::new(1);
    h.reconcile().await.unwrap();
    assert_eq!(h.deployment().spec.unwrap().replicas, Some(1));
    assert_eq!(h.config()["leaderElection"]["leaderElect"], false);
    h.add_control_plane_node(1);
    h.add_control_plane_node(2);
    h.reconcile().await.unwrap();
    assert_eq!(h.deployment().spec.unwrap().replicas, Some(3));
    assert_eq!(h.config()["leaderElection"]["leaderElect"], true);

    h.fake.edit(NRS, |nrs| nrs["spec"]["replicas"] = json!(5));
    h.reconcile().await.unwrap();
    let (status, reason, message) = h.condition(cond::DEGRADED);
    assert_eq!((status.as_str(), reason.as_str()), ("True", cond::REASON_INTERNAL_ERROR));
    assert!(message.contains("spec.replicas 5 exceeds the 3 nodes"), "{message}");
}

#[tokio::test]
async fn managed_control_planes_count_every_node() {
    let h = Harness::new(0);
    h.reconcile().await.unwrap();
    assert_eq!(h.deployment().spec.unwrap().replicas, Some(1), "one worker, no visible control plane");
}

#[tokio::test]
async fn wrong_name_and_invalid_spec_degrade_then_recover() {
    let h = Harness::new(1);
    let other = "/apis/nodetopology.openshift.io/v1/numaresourcesschedulers/other";
    h.fake.insert(other, nrs_object("other"));
    h.reconcile_path(other).await.unwrap();
    let other_status = h.fake.typed::<NUMAResourcesScheduler>(other).status.unwrap();
    assert_eq!(cond::find(&other_status.conditions, cond::DEGRADED).unwrap().reason, cond::REASON_SCHEDULER_NAME);
    assert!(h.fake.get(DEPLOYMENT).is_none());

    h.fake.edit(NRS, |nrs| nrs["spec"]["imageSpec"] = json!(""));
    assert_eq!(h.reconcile().await.unwrap(), Action::await_change());
    let (_, reason, message) = h.condition(cond::DEGRADED);
    assert_eq!(reason, cond::REASON_SCHEDULER_IMAGE, "upstream's reason for the image");
    assert!(message.contains("spec.imageSpec"), "{message}");

    h.fake.edit(NRS, |nrs| {
        nrs["spec"]["imageSpec"] = json!(IMAGE);
        nrs["spec"]["schedulerName"] = json!("Not_A_DNS_Name");
    });
    assert_eq!(h.reconcile().await.unwrap(), Action::await_change());
    let (_, reason, message) = h.condition(cond::DEGRADED);
    assert_eq!(reason, cond::REASON_SCHEDULER_INVALID, "ours, where upstream has none");
    assert!(message.contains("spec.schedulerName"), "{message}");
    h.fake.edit(NRS, |nrs| nrs["spec"]["schedulerName"] = json!(""));

    h.fake.edit(NRS, |nrs| nrs["spec"]["imageSpec"] = json!(IMAGE));
    h.reconcile().await.unwrap();
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
    assert_eq!(h.condition(cond::DEGRADED).0, "False");
}

#[tokio::test]
async fn api_errors_degrade_and_retry() {
    let h = Harness::new(1);
    h.fake.fail(Method::PATCH, "/deployments/", 500, 1);
    let error = h.reconcile().await.unwrap_err();
    assert!(error.to_string().contains("apply Deployment numaresources/numaresources-scheduler"), "{error}");
    assert_eq!(h.condition(cond::DEGRADED).1, cond::REASON_INTERNAL_ERROR);
    let nrs = Arc::new(h.fake.typed::<NUMAResourcesScheduler>(NRS));
    assert_eq!(error_policy(nrs, &error, h.ctx.clone()), Action::requeue(Duration::from_secs(5)));
    h.reconcile().await.unwrap();
    assert_eq!(h.condition(cond::DEGRADED).0, "False");
}

#[tokio::test]
async fn an_explicit_zero_scales_the_scheduler_to_zero() {
    let h = Harness::new(3);
    h.fake.edit(NRS, |nrs| nrs["spec"]["replicas"] = json!(0));
    h.reconcile().await.unwrap();
    assert_eq!(h.deployment().spec.unwrap().replicas, Some(0), "not autodetected (that would be 3)");
    assert_eq!(h.config()["leaderElection"]["leaderElect"], false);
}

#[tokio::test]
async fn a_malformed_object_is_degraded_naming_the_field() {
    let h = Harness::new(1);
    h.fake.edit(NRS, |nrs| nrs["spec"]["cacheResyncPeriod"] = json!("5 seconds"));
    assert_eq!(h.reconcile().await.unwrap(), Action::await_change());
    let nrs = h.fake.get(NRS).unwrap();
    let degraded = nrs["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Degraded").unwrap();
    assert_eq!(degraded["reason"], cond::REASON_MALFORMED);
    let message = degraded["message"].as_str().unwrap();
    assert!(message.contains("spec.cacheResyncPeriod") && message.contains("5 seconds"), "{message}");
    assert!(h.fake.get(DEPLOYMENT).is_none());

    h.fake.edit(NRS, |nrs| nrs["spec"]["cacheResyncPeriod"] = json!("5s"));
    h.reconcile().await.unwrap();
    assert!(h.fake.get(DEPLOYMENT).is_some(), "fixed: reconciled again");
}

#[tokio::test]
async fn the_running_controller_reconciles_and_reports_its_cache_synced() {
    let h = Harness::new(1);
    let reconciled = || h.fake.get(DEPLOYMENT).is_some() && h.status().scheduler_name == "topo-aware-scheduler";
    crate::fake::run_controller_until(|shutdown| run(h.ctx.clone(), shutdown), reconciled).await;
    h.ctx.readiness.api_reachable();
    h.ctx.readiness.leading();
    assert_eq!(h.ctx.readiness.check(), Err("leading; 1 of 3 controllers have synced their caches".into()));
}
