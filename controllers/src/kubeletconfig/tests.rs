//! kubeletconfig: distillation rules, and the controller against the in-memory API with
//! kubelets answering configz.

use numaresources_api::operator::{NUMAResourcesOperatorSpec, NamespacedName, NodeGroup};
use serde_json::{Value, json};

use super::*;
use crate::context::Settings;
use crate::fake::{FakeApi, one_pass};

const NS: &str = "numaresources";
const NRO: &str = "/apis/nodetopology.openshift.io/v1/numaresourcesoperators/numaresourcesoperator";
const WORKER_CM: &str = "/api/v1/namespaces/numaresources/configmaps/numaresourcesoperator-worker";

fn tm(policy: &str, scope: &str) -> TopologyManager {
    TopologyManager { policy: policy.into(), scope: scope.into() }
}

#[test]
fn agreeing_nodes_give_their_setting_and_disagreeing_ones_are_named() {
    let agree = BTreeMap::from([
        ("a".to_owned(), tm("single-numa-node", "pod")),
        ("b".to_owned(), tm("single-numa-node", "pod")),
    ]);
    assert_eq!(distill(&agree), (tm("single-numa-node", "pod"), None));
    let disagree = BTreeMap::from([
        ("a".to_owned(), tm("single-numa-node", "container")),
        ("b".to_owned(), tm("none", "container")),
        ("c".to_owned(), tm("single-numa-node", "container")),
    ]);
    let (setting, report) = distill(&disagree);
    assert_eq!(setting, TopologyManager::default(), "not averaged");
    assert_eq!(report.as_deref(), Some("none/container on b; single-numa-node/container on a, c"));
    assert_eq!(distill(&BTreeMap::new()), (TopologyManager::default(), None));
}

#[test]
fn kubelet_defaults_fill_what_configz_leaves_out() {
    assert_eq!(topology_manager_of(&json!({}), true), tm("none", "container"));
    assert_eq!(
        topology_manager_of(&json!({"topologyManagerPolicy": "restricted"}), true),
        tm("restricted", "container")
    );
    assert_eq!(topology_manager_of(&json!({}), false), TopologyManager::default(), "a KubeletConfig that says nothing");
}

#[test]
fn the_first_kubelet_config_selecting_the_pool_wins() {
    let kc = |name: &str, selector: Value, config: Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "KubeletConfig",
            "metadata": {"name": name}, "spec": {"machineConfigPoolSelector": selector, "kubeletConfig": config}}))
        .unwrap()
    };
    let configs = [
        kc(
            "other",
            json!({"matchLabels": {"pools.operator.machineconfiguration.openshift.io/master": ""}}),
            json!({"topologyManagerPolicy": "restricted"}),
        ),
        kc(
            "cnf",
            json!({"matchLabels": {"cnf": ""}}),
            json!({"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}),
        ),
    ];
    let labels = BTreeMap::from([("cnf".to_owned(), String::new())]);
    assert_eq!(from_kubelet_configs(&configs, &labels), tm("single-numa-node", "pod"));
    assert_eq!(from_kubelet_configs(&configs, &BTreeMap::new()), TopologyManager::default(), "no match: ignored");
}

fn harness(policies: &[(&str, &str)]) -> (FakeApi, Arc<Context>) {
    let (fake, client) = FakeApi::start();
    for (node, policy) in policies {
        fake.insert(
            &format!("/api/v1/nodes/{node}"),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"node-role.kubernetes.io/worker": ""}}}),
        );
        fake.insert(
            &format!("/api/v1/nodes/{node}/proxy/configz"),
            json!({"kubeletconfig": {"topologyManagerPolicy": policy, "topologyManagerScope": "pod"}}),
        );
    }
    let group = NodeGroup {
        node_selector: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some([("node-role.kubernetes.io/worker".to_owned(), String::new())].into()),
            match_expressions: None,
        }),
        ..NodeGroup::default()
    };
    let spec = NUMAResourcesOperatorSpec {
        node_groups: vec![group],
        pod_excludes: vec![NamespacedName { namespace: "kube-system".into(), name: "*".into() }],
        ..Default::default()
    };
    fake.insert(NRO, serde_json::to_value(NUMAResourcesOperator::new(OPERATOR_SINGLETON_NAME, spec)).unwrap());
    (fake, Arc::new(Context::new(client, Settings::kubernetes(NS, "img"), None)))
}

async fn run_once(fake: &FakeApi, ctx: &Arc<Context>) -> Action {
    let obj: DynamicObject = fake.typed(NRO);
    one_pass(reconcile_raw(Arc::new(obj), ctx.clone())).await.unwrap()
}

fn config_of(fake: &FakeApi) -> (Value, String) {
    let cm: ConfigMap = fake.typed(WORKER_CM);
    let yaml: Value = serde_norway::from_str(&cm.data.unwrap()["config.yaml"]).unwrap();
    let disagreement = cm.metadata.annotations.unwrap()[names::ANNOTATION_KUBELET_DISAGREEMENT].clone();
    (yaml, disagreement)
}

#[tokio::test]
async fn the_group_config_map_carries_the_kubelets_settings_and_pod_excludes() {
    let (fake, ctx) = harness(&[("worker-a", "single-numa-node"), ("worker-b", "single-numa-node")]);
    assert_eq!(run_once(&fake, &ctx).await, Action::requeue(RESYNC));
    let (yaml, disagreement) = config_of(&fake);
    assert_eq!(
        yaml,
        json!({"kubelet": {"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"},
            "podExclude": [{"namespacePattern": "kube-system", "namePattern": "*"}]})
    );
    assert_eq!(disagreement, "");
    let cm: ConfigMap = fake.typed(WORKER_CM);
    assert_eq!(cm.metadata.owner_references.unwrap()[0].kind, "NUMAResourcesOperator");
}

#[tokio::test]
async fn disagreeing_kubelets_are_reported_and_an_unreachable_one_skipped() {
    let (fake, ctx) = harness(&[("worker-a", "single-numa-node"), ("worker-b", "none")]);
    fake.insert(
        "/api/v1/nodes/worker-c",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-c", "labels": {"node-role.kubernetes.io/worker": ""}}}),
    );
    run_once(&fake, &ctx).await;
    let (yaml, disagreement) = config_of(&fake);
    assert_eq!(yaml["kubelet"], json!({}), "not averaged");
    assert_eq!(disagreement, "none/pod on worker-b; single-numa-node/pod on worker-a");
}

#[tokio::test]
async fn config_maps_of_removed_groups_are_deleted() {
    let (fake, ctx) = harness(&[("worker-a", "single-numa-node")]);
    run_once(&fake, &ctx).await;
    let foreign = "/api/v1/namespaces/numaresources/configmaps/numaresourcesoperator-foreign";
    fake.insert(
        foreign,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "numaresourcesoperator-foreign", "namespace": NS,
            "labels": {names::LABEL_NRO_NAME: "numaresourcesoperator"}}}),
    );
    fake.edit(NRO, |nro| nro["spec"]["nodeGroups"] = json!([]));
    run_once(&fake, &ctx).await;
    assert!(fake.get(WORKER_CM).is_none());
    assert!(fake.get(foreign).is_some(), "not ours: kept");
}

#[tokio::test]
async fn a_malformed_object_is_skipped_and_an_unresolvable_one_retried() {
    let (fake, ctx) = harness(&[("worker-a", "single-numa-node")]);
    fake.edit(NRO, |nro| nro["spec"]["nodeGroups"][0]["config"] = json!({"infoRefreshPeriod": "1 day"}));
    assert_eq!(run_once(&fake, &ctx).await, Action::await_change(), "the operator controller reports it");
    assert!(fake.get(WORKER_CM).is_none());

    fake.edit(NRO, |nro| nro["spec"]["nodeGroups"] = json!([{"poolName": "worker"}]));
    assert_eq!(run_once(&fake, &ctx).await, Action::requeue(cluster_nodes::RESOLVE_RETRY));
}

#[tokio::test]
async fn the_running_controller_writes_the_config_map() {
    let (fake, ctx) = harness(&[("worker-a", "single-numa-node")]);
    crate::fake::run_controller_until(|shutdown| run(ctx.clone(), shutdown), || fake.get(WORKER_CM).is_some()).await;
}

#[tokio::test]
async fn on_openshift_the_kubelet_config_selecting_the_pool_is_used() {
    let (fake, plain) = harness(&[("worker-a", "none")]);
    let mut settings = Settings::kubernetes(NS, "img");
    settings.platform = numaresources_api::operator::defaults::Platform::OpenShift(4, 20);
    settings.machine_config_pools = true;
    settings.kubelet_configs = true;
    let ctx = Arc::new(Context::new(plain.client.clone(), settings, None));
    fake.edit(NRO, |nro| nro["spec"]["nodeGroups"] = json!([{"poolName": "worker"}]));
    fake.insert(
        "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker",
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "worker", "labels": {"pools.operator.machineconfiguration.openshift.io/worker": ""}},
            "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}}),
    );
    fake.insert(
        "/apis/machineconfiguration.openshift.io/v1/kubeletconfigs/cnf",
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "KubeletConfig", "metadata": {"name": "cnf"},
            "spec": {"machineConfigPoolSelector": {"matchLabels": {"pools.operator.machineconfiguration.openshift.io/worker": ""}},
                "kubeletConfig": {"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}}}),
    );
    run_once(&fake, &ctx).await;
    let (yaml, _) = config_of(&fake);
    assert_eq!(yaml["kubelet"], json!({"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}));
}

#[tokio::test]
async fn a_node_without_an_address_is_reported_once_and_the_others_still_configured() {
    let (fake, plain) = harness(&[("worker-a", "single-numa-node"), ("worker-b", "single-numa-node")]);
    let recorder = kube::runtime::events::Recorder::new(plain.client.clone(), "numaresources-controllers".into());
    let ctx = Arc::new(Context::new(plain.client.clone(), plain.settings.clone(), Some(recorder)));
    // What kube-apiserver answers when it proxies to a node that has no address.
    let no_address = "/api/v1/nodes/worker-b/proxy/configz";
    let unreachable_events = || {
        fake.paths()
            .into_iter()
            .filter(|p| p.contains("/events/"))
            .filter_map(|p| fake.get(&p))
            .filter(|e| e["reason"] == unreachable::REASON)
            .collect::<Vec<_>>()
    };
    fake.remove(no_address);
    for _ in 0..3 {
        assert_eq!(run_once(&fake, &ctx).await, Action::requeue(RESYNC), "moves on");
    }
    let (yaml, _) = config_of(&fake);
    assert_eq!(yaml["kubelet"]["topologyManagerPolicy"], "single-numa-node", "from the node that answers");
    let events = unreachable_events();
    assert_eq!(events.len(), 1, "once per node, not per pass: {events:?}");
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(events[0]["regarding"]["kind"], "Node");
    assert_eq!(events[0]["regarding"]["name"], "worker-b");
}
