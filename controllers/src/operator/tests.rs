//! Reconciler scenarios against the in-memory API (`crate::fake`), mirroring the upstream
//! operator's fake-client controller tests: everything on the first pass, a no-op second pass, a spec
//! change touching only what changed, node-group removal, foreign objects left alone, invalid
//! objects degraded with upstream's reasons, API errors retried with backoff, an NRT CRD in the
//! way, and deletion unregistering the APIService first.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::DynamicObject;
use numaresources_api::operator::{
    InfoRefreshPauseMode, NUMAResourcesOperator, NUMAResourcesOperatorSpec, NodeGroup, NodeGroupConfig,
};
use serde_json::{Value, json};

use super::*;
use crate::context::Settings;
use crate::fake::{FakeApi, one_pass};

pub(super) const NS: &str = "numaresources";
pub(super) const NRO: &str = "/apis/nodetopology.openshift.io/v1/numaresourcesoperators/numaresourcesoperator";
pub(super) const APISERVICE_PATH: &str = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha2.topology.node.k8s.io";
const APISERVER_DEPLOYMENT: &str = "/apis/apps/v1/namespaces/numaresources/deployments/numaresources-apiserver";
const TLS_SECRET: &str = "/api/v1/namespaces/numaresources/secrets/numaresources-apiserver-tls";
const CRD: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/noderesourcetopologies.topology.node.k8s.io";

pub(super) fn ds_path(name: &str) -> String {
    format!("/apis/apps/v1/namespaces/{NS}/daemonsets/{name}")
}

fn selector_group(key: &str, value: &str) -> NodeGroup {
    NodeGroup {
        node_selector: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some([(key.to_owned(), value.to_owned())].into()),
            match_expressions: None,
        }),
        ..NodeGroup::default()
    }
}

pub(super) fn worker_group() -> NodeGroup {
    selector_group("node-role.kubernetes.io/worker", "")
}

fn nro_object(name: &str, groups: Vec<NodeGroup>) -> Value {
    let mut nro =
        NUMAResourcesOperator::new(name, NUMAResourcesOperatorSpec { node_groups: groups, ..Default::default() });
    nro.metadata.generation = Some(1);
    serde_json::to_value(nro).unwrap()
}

pub(super) struct Harness {
    pub fake: FakeApi,
    pub ctx: Arc<Context>,
}

impl Harness {
    pub fn new(groups: Vec<NodeGroup>) -> Self {
        Self::with_settings(groups, Settings::kubernetes(NS, "quay.io/numaresources/numaresources:v1"))
    }

    pub fn with_settings(groups: Vec<NodeGroup>, settings: Settings) -> Self {
        let (fake, client) = crate::fake::start();
        for (name, labels) in [
            ("worker-a", json!({"node-role.kubernetes.io/worker": ""})),
            ("worker-b", json!({"node-role.kubernetes.io/worker": "", "gpu": "true"})),
            ("cp-a", json!({"node-role.kubernetes.io/control-plane": ""})),
        ] {
            fake.insert_node(name, labels);
        }
        fake.insert(NRO, nro_object(OPERATOR_SINGLETON_NAME, groups));
        Self { fake, ctx: Arc::new(Context::new(client, settings, None)) }
    }

    /// One pass through the controller's entry point (the raw object, as the guarded watch
    /// delivers it).
    async fn reconcile_path(&self, path: &str) -> Result<Action> {
        let obj: DynamicObject = self.fake.typed(path);
        one_pass(reconcile_raw(Arc::new(obj), self.ctx.clone())).await
    }

    pub async fn reconcile(&self) -> Result<Action> {
        self.reconcile_path(NRO).await
    }

    /// Adds the finalizer, applies, rolls everything out, registers the APIService.
    pub async fn converge(&self) {
        self.reconcile().await.unwrap();
        self.reconcile().await.unwrap();
        self.fake.roll_out();
        self.reconcile().await.unwrap();
        self.fake.roll_out();
        self.reconcile().await.unwrap();
    }

    fn nro(&self) -> NUMAResourcesOperator {
        self.fake.typed(NRO)
    }

    fn condition(&self, type_: &str) -> (String, String, String) {
        let nro = self.nro();
        let conditions = nro.status.unwrap_or_default().conditions;
        let c = cond::find(&conditions, type_).unwrap_or_else(|| panic!("no {type_} in {conditions:?}"));
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    fn degraded(&self) -> (String, String) {
        let (status, reason, message) = self.condition(cond::DEGRADED);
        assert_eq!(status, "True", "Degraded: {reason} {message}");
        (reason, message)
    }

    fn daemon_sets(&self) -> BTreeSet<String> {
        self.fake.paths().into_iter().filter(|p| p.contains("/daemonsets/")).collect()
    }
}

#[tokio::test]
async fn first_reconcile_creates_everything_then_becomes_available() {
    let h = Harness::new(vec![worker_group()]);
    assert_eq!(h.reconcile().await.unwrap(), Action::await_change(), "first pass adds the finalizer");
    assert_eq!(h.nro().metadata.finalizers, Some(vec![FINALIZER_APISERVICE.to_owned()]));

    assert_eq!(h.reconcile().await.unwrap(), Action::requeue(PROGRESS_REQUEUE));
    let paths: BTreeSet<String> = h.fake.paths().into_iter().collect();
    for expected in [
        "/api/v1/namespaces/numaresources/serviceaccounts/numaresources-rte",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/numaresources:rte",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/numaresources:rte",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/numaresources/roles/numaresources-rte",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/numaresources/rolebindings/numaresources-rte",
        "/apis/apps/v1/namespaces/numaresources/daemonsets/numaresourcesoperator-worker",
        "/api/v1/namespaces/numaresources/serviceaccounts/numaresources-apiserver",
        "/api/v1/namespaces/numaresources/services/numaresources-apiserver",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/numaresources-apiserver:extension-apiserver-authentication-reader",
        APISERVER_DEPLOYMENT,
        TLS_SECRET,
    ] {
        assert!(paths.contains(expected), "{expected} missing from {paths:#?}");
    }
    assert!(!paths.contains(APISERVICE_PATH), "registered only once the server is available");
    assert_eq!(h.condition(cond::PROGRESSING).1, cond::REASON_DEPLOYMENT_UPDATING);

    // Owner references on everything we created.
    let ds: DaemonSet = h.fake.typed(&ds_path("numaresourcesoperator-worker"));
    let owner = &ds.metadata.owner_references.unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("NUMAResourcesOperator", Some(true)));

    h.fake.roll_out();
    h.reconcile().await.unwrap();
    let api_service: APIService = h.fake.typed(APISERVICE_PATH);
    let secret: Secret = h.fake.typed(TLS_SECRET);
    assert_eq!(api_service.spec.unwrap().ca_bundle, Some(secret.data.unwrap()["ca.crt"].clone()), "caBundle is our CA");
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
    assert_eq!(h.condition(cond::UPGRADEABLE).0, "True");
    let status = h.nro().status.unwrap();
    assert_eq!(status.node_groups.len(), 1);
    assert_eq!(status.node_groups[0].pool_name, "worker");
    assert_eq!(status.node_groups[0].daemon_set.name, "numaresourcesoperator-worker");
    assert_eq!(status.node_groups[0].config, NodeGroupConfig::defaults());
    assert_eq!(status.daemon_sets.len(), 1);
    let related: Vec<&str> = status.related_objects.iter().map(|r| r.resource.as_str()).collect();
    for resource in ["namespaces", "noderesourcetopologies", "daemonsets", "apiservices"] {
        assert!(related.contains(&resource), "{resource} in {related:?}");
    }
    assert!(status.conditions.iter().all(|c| c.observed_generation == Some(1)));
}

#[tokio::test]
async fn second_reconcile_changes_nothing() {
    let h = Harness::new(vec![worker_group()]);
    h.converge().await;
    let before = h.fake.versions();
    h.fake.take_calls();
    h.reconcile().await.unwrap();
    assert_eq!(h.fake.versions(), before, "no object changed");
    let calls = h.fake.take_calls();
    assert!(calls.iter().all(|c| c.method != Method::POST && c.method != Method::DELETE), "{calls:#?}");
    assert!(!calls.iter().any(|c| c.path.ends_with("/status")), "status unchanged, not written");
}

#[tokio::test]
async fn spec_change_updates_exactly_what_changed() {
    let h = Harness::new(vec![worker_group()]);
    h.converge().await;
    let before = h.fake.versions();
    h.fake.edit(NRO, |nro| nro["spec"]["nodeGroups"][0]["config"] = json!({"infoRefreshPause": "Enabled"}));
    let nro_version = h.fake.versions()[NRO].clone();
    h.reconcile().await.unwrap();
    let after = h.fake.versions();
    let changed: BTreeSet<&str> =
        after.iter().filter(|(path, v)| before.get(*path) != Some(*v)).map(|(path, _)| path.as_str()).collect();
    let ds = ds_path("numaresourcesoperator-worker");
    assert_eq!(changed, BTreeSet::from([ds.as_str(), NRO]), "only the DaemonSet (and the NRO's status)");
    assert_ne!(after[NRO], nro_version, "status now describes generation 2");
    let ds: DaemonSet = h.fake.typed(&ds);
    let args = ds.spec.unwrap().template.spec.unwrap().containers[0].args.clone().unwrap();
    assert!(args.contains(&"--no-publish".to_owned()), "{args:?}");
    assert_eq!(h.condition(cond::PROGRESSING).1, cond::REASON_DAEMONSET_UPDATING, "the new pods roll out");
    let status = h.nro().status.unwrap();
    assert_eq!(status.node_groups[0].config.info_refresh_pause, Some(InfoRefreshPauseMode::Enabled));
}

#[tokio::test]
async fn removed_node_group_deletes_its_daemonset_and_only_it() {
    let h = Harness::new(vec![worker_group(), selector_group("gpu", "true")]);
    let gpu = format!(
        "numaresourcesoperator-{}",
        nodegroups::pool_name_for_selector(&selector_group("gpu", "true").node_selector.unwrap())
    );
    // A foreign DaemonSet with our labels but no owner reference, and one owned by someone else.
    for (name, owners) in [
        ("foreign", json!([])),
        ("someone-elses", json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "other", "controller": true}])),
    ] {
        h.fake.insert(
            &ds_path(name),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {
                "name": name, "namespace": NS, "ownerReferences": owners,
                "labels": {"app.kubernetes.io/component": "rte", "app.kubernetes.io/managed-by": "numaresources-controllers"},
            }}),
        );
    }
    h.converge().await;
    assert!(h.daemon_sets().contains(&ds_path(&gpu)));
    // worker-b is in both groups: reported by name.
    let (reason, message) = h.degraded();
    assert_eq!(reason, cond::REASON_VALIDATION);
    assert!(message.contains("worker-b (pools worker, "), "{message}");

    h.fake.edit(NRO, |nro| {
        nro["spec"]["nodeGroups"].as_array_mut().unwrap().pop();
    });
    h.fake.take_calls();
    h.reconcile().await.unwrap();
    let deletes: Vec<String> =
        h.fake.take_calls().into_iter().filter(|c| c.method == Method::DELETE).map(|c| c.path).collect();
    assert_eq!(deletes, [ds_path(&gpu)]);
    assert_eq!(
        h.daemon_sets(),
        BTreeSet::from([ds_path("foreign"), ds_path("numaresourcesoperator-worker"), ds_path("someone-elses")])
    );
}

#[tokio::test]
async fn invalid_objects_are_degraded_with_upstream_reasons() {
    // Spec-only problems wait for a spec change; resolution problems depend on the cluster and
    // are looked at again.
    type Row = (&'static str, Value, &'static str, &'static str);
    let cluster_dependent = ["poolName without MachineConfigPools"];
    let rows: Vec<Row> = vec![
        (
            "both specifiers",
            json!([{"poolName": "worker", "nodeSelector": {"matchLabels": {"a": "b"}}}]),
            cond::REASON_VALIDATION,
            "must have only a single specifier set",
        ),
        ("no specifier", json!([{}]), cond::REASON_VALIDATION, "missing any pool specifier"),
        ("empty poolName", json!([{"poolName": ""}]), cond::REASON_VALIDATION, "pool name must not be empty"),
        (
            "duplicate poolName",
            json!([{"poolName": "worker"}, {"poolName": "worker"}]),
            cond::REASON_VALIDATION,
            "Duplicate value",
        ),
        (
            "too many annotations",
            json!([{"nodeSelector": {}, "annotations": {"a1": "", "a2": "", "a3": "", "a4": "", "a5": "", "a6": "", "a7": "", "a8": "", "a9": ""}}]),
            cond::REASON_VALIDATION,
            "Too many",
        ),
        (
            "poolName without MachineConfigPools",
            json!([{"poolName": "worker"}]),
            cond::REASON_VALIDATION,
            "need MachineConfigPools",
        ),
    ];
    for (name, groups, reason, needle) in rows {
        let h = Harness::new(vec![]);
        h.fake.edit(NRO, |nro| nro["spec"]["nodeGroups"] = groups.clone());
        h.reconcile().await.unwrap();
        let expected =
            if cluster_dependent.contains(&name) { Action::requeue(RESOLVE_RETRY) } else { Action::await_change() };
        assert_eq!(h.reconcile().await.unwrap(), expected, "{name}");
        let (got_reason, message) = h.degraded();
        assert_eq!(got_reason, reason, "{name}");
        assert!(message.contains(needle), "{name}: {message}");
        assert!(h.daemon_sets().is_empty(), "{name}: nothing rolled out");
    }
}

#[tokio::test]
async fn wrong_name_and_custom_image_are_degraded() {
    let h = Harness::new(vec![worker_group()]);
    let other = "/apis/nodetopology.openshift.io/v1/numaresourcesoperators/other";
    h.fake.insert(other, nro_object("other", vec![worker_group()]));
    h.reconcile_path(other).await.unwrap();
    let other_nro: NUMAResourcesOperator = h.fake.typed(other);
    let conditions = other_nro.status.unwrap().conditions;
    assert_eq!(cond::find(&conditions, cond::DEGRADED).unwrap().reason, cond::REASON_OPERATOR_NAME);
    assert!(other_nro.metadata.finalizers.is_none(), "nothing reconciled, not even the finalizer");

    h.fake.edit(NRO, |nro| nro["spec"]["imageSpec"] = json!("example.com/custom:1"));
    h.reconcile().await.unwrap();
    h.reconcile().await.unwrap();
    let (reason, message) = h.degraded();
    assert_eq!(reason, cond::REASON_CUSTOM_IMAGE);
    assert!(message.contains("custom operand image is not supported: example.com/custom:1"), "{message}");
    assert!(h.daemon_sets().is_empty());

    let mut settings = Settings::kubernetes(NS, "quay.io/numaresources/numaresources:v1");
    settings.allow_custom_rte_image = true;
    let allowed = Harness::with_settings(vec![worker_group()], settings);
    allowed.fake.edit(NRO, |nro| nro["spec"]["imageSpec"] = json!("example.com/custom:1"));
    allowed.reconcile().await.unwrap();
    allowed.reconcile().await.unwrap();
    let ds: DaemonSet = allowed.fake.typed(&ds_path("numaresourcesoperator-worker"));
    let image = ds.spec.unwrap().template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("example.com/custom:1"));
}

#[tokio::test]
async fn pause_annotation_leaves_operands_alone() {
    let h = Harness::new(vec![worker_group()]);
    h.converge().await;
    h.fake.edit(NRO, |nro| {
        nro["metadata"]["annotations"] = json!({"config.numa-operator.openshift.io/pause-reconciliation": "enabled"});
        nro["spec"]["nodeGroups"] = json!([]);
    });
    h.fake.take_calls();
    assert_eq!(h.reconcile().await.unwrap(), Action::await_change());
    assert!(h.fake.take_calls().is_empty(), "not a single request");
    assert!(h.daemon_sets().contains(&ds_path("numaresourcesoperator-worker")));
}

#[tokio::test]
async fn api_errors_are_degraded_and_retried_with_backoff() {
    let h = Harness::new(vec![worker_group()]);
    h.reconcile().await.unwrap();
    h.fake.fail(Method::PATCH, "/daemonsets/", 500, 2);
    let nro: Arc<DynamicObject> = Arc::new(h.fake.typed(NRO));
    let error = h.reconcile().await.unwrap_err();
    assert!(error.to_string().contains("apply DaemonSet numaresources/numaresourcesoperator-worker"), "{error}");
    let (reason, message) = h.degraded();
    assert_eq!(reason, cond::REASON_INTERNAL_ERROR);
    assert!(message.contains("injected failure"), "the API server's words: {message}");
    assert_eq!(error_policy_raw(nro.clone(), &error, h.ctx.clone()), Action::requeue(Duration::from_secs(5)));
    let error = h.reconcile().await.unwrap_err();
    assert_eq!(error_policy_raw(nro.clone(), &error, h.ctx.clone()), Action::requeue(Duration::from_secs(10)));
    h.reconcile().await.unwrap();
    assert_eq!(
        error_policy_raw(nro, &error, h.ctx.clone()),
        Action::requeue(Duration::from_secs(5)),
        "reset by success"
    );
    let metrics = h.ctx.metrics.encode().unwrap();
    assert!(metrics.contains(r#"reconcile_failures_total{controller="operator",error="kube"} 3"#), "{metrics}");
}

#[tokio::test]
async fn an_nrt_crd_in_the_way_is_reported_not_fought() {
    let h = Harness::new(vec![worker_group()]);
    h.fake.insert(
        CRD,
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "noderesourcetopologies.topology.node.k8s.io"},
            "spec": {"group": "topology.node.k8s.io", "scope": "Cluster",
                "names": {"plural": "noderesourcetopologies", "kind": "NodeResourceTopology"},
                "versions": [{"name": "v1alpha2", "served": true, "storage": true}]}}),
    );
    h.reconcile().await.unwrap();
    assert_eq!(h.reconcile().await.unwrap(), Action::requeue(BLOCKED_REQUEUE));
    let (reason, message) = h.degraded();
    assert_eq!(reason, cond::REASON_NRT_CRD_PRESENT);
    assert!(message.contains("nrt-api-definition=cluster"), "says what to do: {message}");
    assert!(h.fake.get(APISERVER_DEPLOYMENT).is_none() && h.fake.get(APISERVICE_PATH).is_none());

    // The user chooses the CRD: we deploy exporters and no API server.
    h.fake.edit(NRO, |nro| {
        nro["metadata"]["annotations"] = json!({"config.numa-operator.openshift.io/nrt-api-definition": "cluster"});
    });
    h.reconcile().await.unwrap();
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
    assert!(h.fake.get(APISERVER_DEPLOYMENT).is_none());
    assert!(h.fake.get(CRD).is_some(), "never removes a CRD it did not create");
}

#[tokio::test]
async fn deletion_unregisters_the_apiservice_first() {
    let h = Harness::new(vec![worker_group()]);
    h.converge().await;
    assert!(h.fake.get(APISERVICE_PATH).is_some());
    h.fake.edit(NRO, |nro| nro["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"));
    h.fake.take_calls();
    h.reconcile().await.unwrap();
    let calls = h.fake.take_calls();
    let deleted: Vec<&str> = calls.iter().filter(|c| c.method == Method::DELETE).map(|c| c.path.as_str()).collect();
    assert_eq!(deleted, [APISERVICE_PATH], "only the APIService; the garbage collector does the rest");
    assert!(h.fake.get(NRO).is_none(), "finalizer removed, object gone");
}

#[tokio::test]
async fn an_apiserver_older_than_the_minimum_is_reported_by_name_and_nothing_is_deployed() {
    let mut settings = Settings::kubernetes(NS, "quay.io/numaresources/numaresources:v1");
    settings.kubernetes_version = Some(crate::server_version::KubeVersion { major: 1, minor: 28 });
    let h = Harness::with_settings(vec![worker_group()], settings);
    h.fake.insert("/version", json!({"major": "1", "minor": "28", "gitVersion": "v1.28.0", "metadata": {}}));
    h.reconcile().await.unwrap();
    assert_eq!(h.reconcile().await.unwrap(), Action::requeue(crate::server_version::RECHECK));
    let (reason, message) = h.degraded();
    assert_eq!(reason, cond::REASON_UNSUPPORTED_KUBERNETES);
    assert!(message.contains("v1.28") && message.contains("v1.30"), "names both versions: {message}");
    assert!(h.daemon_sets().is_empty() && h.fake.get(APISERVER_DEPLOYMENT).is_none(), "nothing deployed");

    // The cluster is upgraded while we run: the next pass reads /version again and goes on.
    h.fake.edit("/version", |v| *v = json!({"major": "1", "minor": "30", "gitVersion": "v1.30.1"}));
    h.converge().await;
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
}

#[tokio::test]
async fn exporters_and_the_api_server_get_their_network_policies_and_a_switch_removes_the_servers() {
    let h = Harness::new(vec![worker_group()]);
    h.converge().await;
    let policy = |name: &str| format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/{name}");
    for (name, rendered) in [
        // Writing to our API server directly while it serves the NRT API.
        ("numaresources-rte", crate::render::network_policy::exporters_writing_directly(NS).unwrap()),
        ("numaresources-apiserver", crate::render::network_policy::apiserver(NS).unwrap()),
    ] {
        let applied: k8s_openapi::api::networking::v1::NetworkPolicy = h.fake.typed(&policy(name));
        assert_eq!(applied.spec, rendered.spec, "{name}");
    }
    h.fake.edit(NRO, |nro| {
        nro["metadata"]["annotations"] = json!({"config.numa-operator.openshift.io/nrt-api-definition": "cluster"});
    });
    h.reconcile().await.unwrap();
    assert!(h.fake.get(&policy("numaresources-apiserver")).is_none(), "removed with the server");
    let exporters: k8s_openapi::api::networking::v1::NetworkPolicy = h.fake.typed(&policy("numaresources-rte"));
    assert_eq!(
        exporters.spec,
        crate::render::network_policy::exporters(NS).unwrap().spec,
        "back to kube-apiserver only"
    );
}

#[tokio::test]
async fn apiservice_deleted_is_announced_only_when_one_was_deleted() {
    for registered in [false, true] {
        let h = Harness::new(vec![worker_group()]);
        let h = Harness { ctx: crate::fake::recording(&h.ctx), ..h };
        if registered {
            h.converge().await;
            assert!(h.fake.get(APISERVICE_PATH).is_some());
        } else {
            // The finalizer is there, the API server never became available: no APIService.
            h.reconcile().await.unwrap();
            h.reconcile().await.unwrap();
            assert!(h.fake.get(APISERVICE_PATH).is_none());
        }
        h.fake.edit(NRO, |nro| nro["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"));
        h.reconcile().await.unwrap();
        assert!(h.fake.get(NRO).is_none(), "finalizer removed, object gone");
        let announced = h.fake.events("APIServiceDeleted").len();
        assert_eq!(announced, usize::from(registered), "registered: {registered}");
    }
}

#[tokio::test]
async fn kubelet_disagreement_in_the_config_map_shows_in_status() {
    let h = Harness::new(vec![worker_group()]);
    h.fake.insert(
        "/api/v1/namespaces/numaresources/configmaps/numaresourcesoperator-worker",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "numaresourcesoperator-worker", "namespace": NS,
            "annotations": {names::ANNOTATION_KUBELET_DISAGREEMENT: "worker-a: none/container; worker-b: single-numa-node/container"}},
            "data": {"config.yaml": "kubelet: {}\n"}}),
    );
    h.converge().await;
    let (status, reason, message) = h.condition(cond::KUBELET_CONFIG_CONSISTENT);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "KubeletConfigDisagreement"));
    assert!(message.contains("pool worker: worker-a: none/container"), "{message}");
    let ds: DaemonSet = h.fake.typed(&ds_path("numaresourcesoperator-worker"));
    let hash = ds.spec.unwrap().template.metadata.unwrap().annotations.unwrap()["configmap.hash"].clone();
    assert_eq!(hash, config_hash(&[("config.yaml".to_owned(), "kubelet: {}\n".to_owned())].into()));
}

#[tokio::test]
async fn kubelets_that_cannot_align_show_in_status() {
    let h = Harness::new(vec![worker_group()]);
    h.converge().await;
    assert_eq!(h.condition(cond::KUBELET_NUMA_ALIGNED).0, "True");
    h.fake.insert(
        "/api/v1/namespaces/numaresources/configmaps/numaresourcesoperator-worker",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "numaresourcesoperator-worker", "namespace": NS,
            "annotations": {names::ANNOTATION_KUBELET_ALIGNMENT: "worker-a: memory manager None: memory and hugepages are not NUMA-aligned"}},
            "data": {"config.yaml": "kubelet: {}\n"}}),
    );
    h.converge().await;
    let (status, reason, message) = h.condition(cond::KUBELET_NUMA_ALIGNED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "KubeletNotNUMAAligned"));
    assert!(message.contains("pool worker: worker-a: memory manager None"), "{message}");
}

#[tokio::test]
async fn events_tell_a_person_what_happened_once() {
    let h = Harness::new(vec![]);
    let h = Harness { ctx: crate::fake::recording(&h.ctx), ..h };
    h.fake.edit(NRO, |nro| nro["spec"]["nodeGroups"] = json!([{}]));
    h.reconcile().await.unwrap();
    h.reconcile().await.unwrap();
    h.reconcile().await.unwrap();
    let events: Vec<String> = h.fake.paths().into_iter().filter(|p| p.contains("/events/")).collect();
    assert_eq!(events.len(), 1, "one Warning, not one per pass: {events:?}");
    let event = h.fake.get(&events[0]).unwrap();
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], cond::REASON_VALIDATION);
    assert_eq!(event["regarding"]["kind"], "NUMAResourcesOperator");
    assert!(events[0].starts_with("/apis/events.k8s.io/v1/namespaces/default/events/"), "cluster-scoped: default");
}

#[tokio::test]
async fn openshift_pools_resolve_through_machine_config_pools() {
    let mut settings = Settings::kubernetes(NS, "quay.io/numaresources/numaresources:v1");
    settings.platform = numaresources_api::operator::defaults::Platform::OpenShift(4, 20);
    settings.machine_config_pools = true;
    let h =
        Harness::with_settings(vec![NodeGroup { pool_name: Some("worker".into()), ..NodeGroup::default() }], settings);
    h.fake.insert(
        "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker",
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "worker", "labels": {"pools.operator.machineconfiguration.openshift.io/worker": ""}},
            "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}}),
    );
    h.converge().await;
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
    let status = h.nro().status.unwrap();
    assert_eq!(status.machine_config_pools[0].name, "worker");
    assert_eq!(status.node_groups[0].pool_name, "worker");
    let ds: DaemonSet = h.fake.typed(&ds_path("numaresourcesoperator-worker"));
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let selinux = pod.containers[0].security_context.as_ref().unwrap().se_linux_options.clone().unwrap();
    assert_eq!(selinux.type_.as_deref(), Some("container_device_plugin_t"));
    let term = &pod
        .affinity
        .unwrap()
        .node_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms[0];
    assert_eq!(
        term.match_expressions.as_ref().unwrap()[0].key,
        "node-role.kubernetes.io/worker",
        "the pool's node selector"
    );
}

const MALFORMED_PERIOD: &str = "spec.nodeGroups[0].config.infoRefreshPeriod";

fn malformed_group() -> Value {
    json!([{"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
        "config": {"infoRefreshPeriod": "1 day"}}])
}

#[tokio::test]
async fn a_malformed_object_is_degraded_naming_the_field_and_recovers_when_fixed() {
    let h = Harness::new(vec![worker_group()]);
    h.fake.edit(NRO, |nro| nro["spec"]["nodeGroups"] = malformed_group());
    assert_eq!(h.reconcile().await.unwrap(), Action::await_change());
    let nro = h.fake.get(NRO).unwrap();
    let degraded = nro["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Degraded").unwrap();
    assert_eq!(
        (degraded["status"].as_str(), degraded["reason"].as_str()),
        (Some("True"), Some(cond::REASON_MALFORMED))
    );
    let message = degraded["message"].as_str().unwrap();
    assert!(message.contains(MALFORMED_PERIOD) && message.contains("1 day"), "{message}");
    assert_eq!(degraded["observedGeneration"], nro["metadata"]["generation"]);
    assert!(h.daemon_sets().is_empty(), "nothing rolled out for it");
    let versions = h.fake.versions();
    h.reconcile().await.unwrap();
    assert_eq!(h.fake.versions(), versions, "the same verdict is not written twice");

    h.fake.edit(NRO, |nro| nro["spec"]["nodeGroups"][0]["config"]["infoRefreshPeriod"] = json!("1m"));
    h.converge().await;
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
}

#[tokio::test]
async fn a_malformed_object_does_not_stop_the_others() {
    let h = Harness::new(vec![worker_group()]);
    let other = "/apis/nodetopology.openshift.io/v1/numaresourcesoperators/other";
    let mut bad = nro_object("other", vec![]);
    bad["spec"]["nodeGroups"] = malformed_group();
    h.fake.insert(other, bad);

    // What a typed watcher would do: its list fails as a whole.
    let typed: Api<NUMAResourcesOperator> = Api::all(h.ctx.client.clone());
    assert!(typed.list(&ListParams::default()).await.is_err(), "one bad object fails the typed list");
    // What our watcher lists: both, each reconciled on its own.
    let listed =
        guarded::watched_api::<NUMAResourcesOperator>(h.ctx.client.clone()).list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 2);
    for obj in listed.items {
        reconcile_raw(Arc::new(obj), h.ctx.clone()).await.unwrap();
    }
    h.converge().await;
    assert_eq!(h.condition(cond::AVAILABLE).0, "True", "the valid object reconciles");
    let bad = h.fake.get(other).unwrap();
    let reasons: Vec<&str> = bad["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "True")
        .map(|c| c["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, [cond::REASON_MALFORMED]);
}

#[tokio::test]
async fn a_malformed_object_being_deleted_is_still_let_go() {
    let h = Harness::new(vec![worker_group()]);
    h.converge().await;
    h.fake.edit(NRO, |nro| {
        nro["spec"]["nodeGroups"] = malformed_group();
        nro["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    });
    h.reconcile().await.unwrap();
    assert!(h.fake.get(APISERVICE_PATH).is_none(), "the APIService is unregistered");
    assert!(h.fake.get(NRO).is_none(), "finalizer removed, object gone");
}

#[tokio::test]
async fn a_resolution_that_waits_on_the_cluster_is_retried_and_succeeds_later() {
    let mut settings = Settings::kubernetes(NS, "quay.io/numaresources/numaresources:v1");
    settings.platform = numaresources_api::operator::defaults::Platform::OpenShift(4, 20);
    settings.machine_config_pools = true;
    let h =
        Harness::with_settings(vec![NodeGroup { pool_name: Some("worker".into()), ..NodeGroup::default() }], settings);
    h.reconcile().await.unwrap();
    assert_eq!(h.reconcile().await.unwrap(), Action::requeue(RESOLVE_RETRY), "the pool does not exist yet");
    let (reason, message) = h.degraded();
    assert_eq!(reason, cond::REASON_VALIDATION);
    assert!(message.contains("failed to find MachineConfigPool"), "{message}");

    h.fake.insert(
        "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker",
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "worker"},
            "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}}),
    );
    h.reconcile().await.unwrap();
    assert!(h.daemon_sets().contains(&ds_path("numaresourcesoperator-worker")), "the retry resolved it");
}

#[tokio::test]
async fn switching_to_the_cluster_api_removes_our_server_apiservice_first() {
    let h = Harness::new(vec![worker_group()]);
    h.converge().await;
    // Everything of the API server install the operator created: the rendered objects' paths.
    let ours: BTreeSet<String> = h
        .fake
        .paths()
        .into_iter()
        .filter(|p| {
            let object = h.fake.get(p).unwrap();
            let component = &object["metadata"]["labels"]["app.kubernetes.io/component"];
            // Certificate Secrets belong to the certificate lifecycle, not to this switch.
            (component == "apiserver" || p.contains("/apiservices/"))
                && !p.contains("/secrets/")
                && object["metadata"]["ownerReferences"][0]["kind"] == "NUMAResourcesOperator"
        })
        .collect();
    assert!(ours.contains(APISERVICE_PATH) && ours.contains(APISERVER_DEPLOYMENT), "{ours:#?}");
    assert!(ours.iter().any(|p| p.contains("/clusterroles/")), "{ours:#?}");
    assert!(ours.iter().any(|p| p.contains("/roles/numaresources-apiserver")), "the Lease Role: {ours:#?}");
    // Same name, not ours: a binding someone else created in the place of one of ours.
    let foreign_binding = ours.iter().find(|p| p.contains("/clusterrolebindings/")).unwrap().clone();
    h.fake.edit(&foreign_binding, |b| b["metadata"]["ownerReferences"] = json!([]));

    h.fake.edit(NRO, |nro| {
        nro["metadata"]["annotations"] = json!({"config.numa-operator.openshift.io/nrt-api-definition": "cluster"});
    });
    h.fake.take_calls();
    h.reconcile().await.unwrap();
    let deleted: Vec<String> =
        h.fake.take_calls().into_iter().filter(|c| c.method == Method::DELETE).map(|c| c.path).collect();
    assert_eq!(deleted.first().map(String::as_str), Some(APISERVICE_PATH), "the APIService goes first: {deleted:#?}");
    let expected: BTreeSet<String> = ours.iter().filter(|p| **p != foreign_binding).cloned().collect();
    assert_eq!(deleted.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert!(h.fake.get(&foreign_binding).is_some(), "not ours, not touched");
    assert!(h.daemon_sets().contains(&ds_path("numaresourcesoperator-worker")), "exporters stay");

    h.fake.take_calls();
    h.reconcile().await.unwrap();
    assert!(h.fake.take_calls().iter().all(|c| c.method != Method::DELETE), "nothing left to delete");
    h.fake.roll_out();
    h.reconcile().await.unwrap();
    assert_eq!(h.condition(cond::AVAILABLE).0, "True");
}

#[tokio::test]
async fn the_running_controller_gets_past_a_malformed_object_and_reports_its_cache_synced() {
    let h = Harness::new(vec![worker_group()]);
    let other = "/apis/nodetopology.openshift.io/v1/numaresourcesoperators/other";
    let mut bad = nro_object("other", vec![]);
    bad["spec"]["nodeGroups"] = malformed_group();
    h.fake.insert(other, bad);
    h.ctx.readiness.api_reachable.set();
    h.ctx.readiness.leading.set();

    let handled = || {
        let valid = h.nro().metadata.finalizers.is_some();
        valid && h.fake.get(other).unwrap()["status"]["conditions"][3]["reason"] == cond::REASON_MALFORMED
    };
    crate::fake::run_controller_until(|shutdown| run(h.ctx.clone(), shutdown), handled).await;
    let failing: Vec<String> =
        h.ctx.readiness.checks().run_all().unwrap_err().into_iter().map(|(name, _)| name).collect();
    let others =
        ["operator-cache", "scheduler-cache", "kubeletconfig-cache"].into_iter().filter(|c| *c != "operator-cache");
    assert_eq!(failing, others.collect::<Vec<_>>(), "this controller alone has synced its cache");
}
