//! Scheduler reconciler scenarios against the in-memory API, mirroring the upstream operator's
//! fake-client controller tests: everything on the first
//! pass, no-op second pass, wrong name, invalid spec and recovery, a name change rolling the
//! Deployment, replica autodetection with leader election, and API errors; the pod routing
//! webhook and the ordered deletion its finalizer gives.

use std::collections::BTreeSet;

use http::Method;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use numaresources_api::GoDuration;
use numaresources_api::operator::NUMAResourcesSchedulerSpec;
use serde_json::{Value, json};

use super::*;
use crate::context::Settings;
use crate::fake::{FakeApi, one_pass};
use crate::mode::CertificateMode;

const NS: &str = "numaresources";
const NRS: &str = "/apis/nodetopology.openshift.io/v1/numaresourcesschedulers/numaresourcesscheduler";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/numaresources/deployments/numaresources-scheduler";
const CONFIG: &str = "/api/v1/namespaces/numaresources/configmaps/numaresources-scheduler-config";
const IMAGE: &str = "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5";
const ROUTING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/numaresources-pod-routing";
const CA: &str = "/api/v1/namespaces/numaresources/secrets/numaresources-ca";

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
    // As after the first pass: most scenarios are about what comes next.
    nrs.metadata.finalizers = Some(vec![FINALIZER_POD_ROUTING.to_owned()]);
    serde_json::to_value(nrs).unwrap()
}

impl Harness {
    fn new(control_plane_nodes: usize) -> Self {
        Self::with_mode(control_plane_nodes, CertificateMode::SelfManaged)
    }

    fn with_mode(control_plane_nodes: usize, certificate_mode: CertificateMode) -> Self {
        let (fake, client) = crate::fake::start();
        let settings = Settings { certificate_mode, ..Settings::kubernetes(NS, "unused") };
        let h = Self { fake, ctx: Arc::new(Context::new(client, settings, None)) };
        for i in 0..control_plane_nodes {
            h.add_control_plane_node(i);
        }
        h.fake.insert_node("worker", json!({"node-role.kubernetes.io/worker": ""}));
        h.fake.insert(NRS, nrs_object(SCHEDULER_SINGLETON_NAME));
        h
    }

    fn add_control_plane_node(&self, i: usize) {
        self.fake.insert_node(&format!("cp-{i}"), json!({"node-role.kubernetes.io/control-plane": ""}));
    }

    /// One pass through the controller's entry point (the raw object of the guarded watch).
    async fn reconcile_path(&self, path: &str) -> Result<Action> {
        let obj: DynamicObject = self.fake.typed(path);
        one_pass(reconcile_raw(Arc::new(obj), self.ctx.clone())).await
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

    /// Turns pod routing on and converges: the scheduler rolled out, the webhook applied.
    async fn route_pods(&self) {
        self.fake.edit(NRS, |nrs| nrs["spec"]["podRouting"] = json!({"mode": "ExclusiveResources"}));
        self.reconcile().await.unwrap();
        self.fake.roll_out();
        assert_eq!(self.reconcile().await.unwrap(), Action::requeue(RESYNC));
    }

    fn routing(&self) -> MutatingWebhookConfiguration {
        self.fake.typed(ROUTING)
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
    let nrs: Arc<DynamicObject> = Arc::new(h.fake.typed(NRS));
    assert_eq!(error_policy_raw(nrs, &error, h.ctx.clone()), Action::requeue(Duration::from_secs(5)));
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
    h.ctx.readiness.api_reachable.set();
    h.ctx.readiness.leading.set();
    let failing: Vec<String> =
        h.ctx.readiness.checks().run_all().unwrap_err().into_iter().map(|(name, _)| name).collect();
    let others =
        ["operator-cache", "scheduler-cache", "kubeletconfig-cache"].into_iter().filter(|c| *c != "scheduler-cache");
    assert_eq!(failing, others.collect::<Vec<_>>(), "this controller alone has synced its cache");
}

#[tokio::test]
async fn the_first_pass_adds_the_finalizer_and_nothing_else() {
    let h = Harness::new(1);
    h.fake.edit(NRS, |nrs| {
        nrs["metadata"].as_object_mut().unwrap().remove("finalizers");
    });
    assert_eq!(h.reconcile().await.unwrap(), Action::await_change());
    let finalizers = h.fake.typed::<NUMAResourcesScheduler>(NRS).metadata.finalizers;
    assert_eq!(finalizers, Some(vec![FINALIZER_POD_ROUTING.to_owned()]));
    assert!(h.fake.get(DEPLOYMENT).is_none(), "the next pass (the finalizer's change wakes it) applies");
}

#[tokio::test]
async fn routing_applies_the_pod_webhook_once_the_scheduler_runs_and_disabling_removes_it() {
    let h = Harness::new(1);
    h.fake.edit(NRS, |nrs| nrs["spec"]["podRouting"] = json!({"mode": "ExclusiveResources"}));
    h.reconcile().await.unwrap();
    assert!(h.fake.get(ROUTING).is_none(), "no pod is routed to a scheduler that is not running yet");
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    let routing = h.routing();
    let owner = &routing.metadata.owner_references.clone().unwrap()[0];
    let nrs = h.fake.typed::<NUMAResourcesScheduler>(NRS);
    assert_eq!((owner.kind.as_str(), owner.controller), ("NUMAResourcesScheduler", Some(true)));
    assert_eq!(Some(&owner.uid), nrs.metadata.uid.as_ref());
    let webhook = &routing.webhooks.unwrap()[0];
    assert_eq!(webhook.name, "pods.nodetopology.openshift.io");
    assert_eq!(webhook.failure_policy.as_deref(), Some("Ignore"));

    h.fake.edit(NRS, |nrs| nrs["spec"]["podRouting"] = json!({"mode": "Disabled"}));
    h.reconcile().await.unwrap();
    assert!(h.fake.get(ROUTING).is_none(), "Disabled: the webhook is gone");
    assert!(h.fake.get(DEPLOYMENT).is_some(), "the scheduler itself stays");
}

#[tokio::test]
async fn self_managed_routing_carries_the_ca_bundle_and_the_certificate_loop_keeps_it() {
    let h = Harness::new(1);
    h.route_pods().await;
    let held = |h: &Harness| h.routing().webhooks.unwrap()[0].client_config.ca_bundle.clone();
    let ca: k8s_openapi::api::core::v1::Secret = h.fake.typed(CA);
    let bundle = ca.data.unwrap()["ca-bundle.crt"].clone();
    assert_eq!(held(&h), Some(bundle.clone()), "applied with the bundle trusted now");

    // Re-created by someone without caBundle: the certificate loop fills it in again.
    h.fake.edit(ROUTING, |routing| {
        routing["webhooks"][0]["clientConfig"].as_object_mut().unwrap().remove("caBundle");
    });
    let policy = numaresources_runtime::tls::rotation::RotationPolicy::default();
    let pass = crate::certificates::reconcile(&h.ctx, &policy, std::time::SystemTime::now()).await.unwrap();
    assert!(pass.failed_consumers.is_empty(), "{:?}", pass.failed_consumers);
    assert_eq!(held(&h), Some(bundle), "the pod routing configuration is one of the loop's consumers");
}

#[tokio::test]
async fn injectors_are_asked_by_annotation_and_olm_gets_no_configuration_of_ours() {
    let h = Harness::with_mode(1, CertificateMode::CertManager);
    h.route_pods().await;
    let routing = h.routing();
    assert_eq!(
        routing.metadata.annotations.unwrap()["cert-manager.io/inject-ca-from"],
        "numaresources/numaresources-webhook"
    );
    assert!(routing.webhooks.unwrap()[0].client_config.ca_bundle.is_none(), "cainjector's to fill");
    assert!(h.fake.get(CA).is_none(), "no CA of ours");

    let h = Harness::with_mode(1, CertificateMode::Olm);
    h.route_pods().await;
    assert!(h.fake.get(ROUTING).is_none(), "the CSV declares the pod webhook; OLM owns it");
    h.fake.edit(NRS, |nrs| nrs["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"));
    h.reconcile().await.unwrap();
    assert!(h.fake.get(NRS).is_none(), "nothing of ours to wait for: the finalizer goes at once");
}

#[tokio::test]
async fn deletion_removes_the_pod_webhook_first_and_holds_the_finalizer_until_it_is_gone() {
    let h = Harness::new(1);
    h.route_pods().await;
    // Someone else's finalizer keeps the configuration around for a while after the DELETE.
    h.fake.edit(ROUTING, |routing| routing["metadata"]["finalizers"] = json!(["example.com/hold"]));
    h.fake.edit(NRS, |nrs| nrs["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"));
    h.fake.take_calls();
    let error = h.reconcile().await.unwrap_err();
    assert!(matches!(error, Error::NotYet(_)), "{error}");
    let calls = h.fake.take_calls();
    let deleted: Vec<&str> = calls.iter().filter(|c| c.method == Method::DELETE).map(|c| c.path.as_str()).collect();
    assert_eq!(deleted, [ROUTING], "only the pod webhook; the garbage collector does the rest");
    assert!(h.routing().metadata.deletion_timestamp.is_some());
    let nrs = h.fake.typed::<NUMAResourcesScheduler>(NRS);
    assert_eq!(nrs.metadata.finalizers, Some(vec![FINALIZER_POD_ROUTING.to_owned()]), "held while it exists");
    assert!(h.fake.get(DEPLOYMENT).is_some());

    h.fake.remove(ROUTING);
    h.reconcile().await.unwrap();
    assert!(h.fake.get(NRS).is_none(), "gone (GET 404): finalizer released, object deleted");
}

#[tokio::test]
async fn a_malformed_object_being_deleted_still_removes_the_pod_webhook_and_goes() {
    let h = Harness::new(1);
    h.route_pods().await;
    h.fake.edit(NRS, |nrs| {
        nrs["spec"]["cacheResyncPeriod"] = json!("5 seconds");
        nrs["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    });
    assert_eq!(h.reconcile().await.unwrap(), Action::await_change());
    assert!(h.fake.get(ROUTING).is_none());
    assert!(h.fake.get(NRS).is_none(), "finalizer released through the raw object");
}

#[tokio::test]
async fn a_pod_webhook_configuration_of_someone_else_is_never_deleted() {
    let h = Harness::new(1);
    let mut foreign = serde_json::to_value(crate::render::pod_routing::configuration(NS, None).unwrap()).unwrap();
    foreign["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "someone", "controller": true}]);
    h.fake.insert(ROUTING, foreign);
    h.fake.edit(NRS, |nrs| nrs["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"));
    h.reconcile().await.unwrap();
    assert!(h.fake.get(ROUTING).is_some());
    assert!(h.fake.get(NRS).is_none());
}

#[path = "topology_tests.rs"]
mod topology_tests;
