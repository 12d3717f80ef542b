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

#[test]
fn a_kubelet_with_default_managers_lacks_every_alignment_and_a_tuned_one_none() {
    let defaults = alignment_gaps(&json!({}));
    assert_eq!(defaults.len(), 3, "{defaults:?}");
    assert!(defaults[0].starts_with("CPU manager none: "), "{defaults:?}");
    assert!(defaults[1].starts_with("memory manager None: memory and hugepages are not NUMA-aligned"), "{defaults:?}");
    assert!(defaults[2].starts_with("Topology Manager policy none: "), "{defaults:?}");
    let tuned =
        json!({"cpuManagerPolicy": "static", "memoryManagerPolicy": "Static", "topologyManagerPolicy": "restricted"});
    assert!(alignment_gaps(&tuned).is_empty());
    // The common setup: static CPU manager and single-numa-node, the memory manager left alone.
    let common = json!({"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"});
    assert_eq!(alignment_gaps(&common).len(), 1);
}

#[test]
fn the_alignment_report_groups_nodes_by_what_they_lack_and_stays_short() {
    let gap = |text: &str| vec![text.to_owned()];
    let mut per_node: BTreeMap<String, Vec<String>> =
        (0..8).map(|i| (format!("w-{i}"), gap("memory manager None"))).collect();
    per_node.insert("x".into(), gap("CPU manager none"));
    per_node.insert("fine".into(), Vec::new());
    assert_eq!(
        describe_alignment(&per_node).unwrap(),
        "x: CPU manager none. w-0, w-1, w-2, w-3, w-4 and 3 more: memory manager None"
    );
    assert_eq!(describe_alignment(&BTreeMap::from([("fine".to_owned(), Vec::new())])), None);
}

fn harness(policies: &[(&str, &str)]) -> (FakeApi, Arc<KubeletConfigContext>) {
    let (fake, client) = crate::fake::start();
    for (node, policy) in policies {
        fake.insert_node(node, json!({"node-role.kubernetes.io/worker": ""}));
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
    let shared = Arc::new(Context::new(client, Settings::kubernetes(NS, "img"), None));
    (fake, Arc::new(KubeletConfigContext::new(shared)))
}

/// The same controller context, with its Events recorded by the fake.
fn recording(ctx: &Arc<KubeletConfigContext>) -> Arc<KubeletConfigContext> {
    Arc::new(KubeletConfigContext::new(crate::fake::recording(&ctx.shared)))
}

async fn run_once(fake: &FakeApi, ctx: &Arc<KubeletConfigContext>) -> Action {
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
async fn kubelets_that_cannot_align_are_named_on_the_config_map_and_told_once_in_an_event() {
    let (fake, ctx) = harness(&[("worker-a", "single-numa-node"), ("worker-b", "single-numa-node")]);
    let ctx = recording(&ctx);
    fake.insert(
        "/api/v1/nodes/worker-b/proxy/configz",
        json!({"kubeletconfig": {"cpuManagerPolicy": "static", "memoryManagerPolicy": "Static",
            "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}}),
    );
    run_once(&fake, &ctx).await;
    run_once(&fake, &ctx).await;
    let cm: ConfigMap = fake.typed(WORKER_CM);
    let report = cm.metadata.annotations.unwrap()[names::ANNOTATION_KUBELET_ALIGNMENT].clone();
    assert!(report.starts_with("worker-a: CPU manager none: "), "{report}");
    assert!(report.contains("memory manager None"), "{report}");
    assert!(!report.contains("worker-b"), "{report}");
    assert_eq!(fake.events(ALIGNMENT_REASON).len(), 1, "once per change of the report, not every pass");
}

#[tokio::test]
async fn disagreeing_kubelets_are_reported_and_an_unreachable_one_skipped() {
    let (fake, ctx) = harness(&[("worker-a", "single-numa-node"), ("worker-b", "none")]);
    fake.insert_node("worker-c", json!({"node-role.kubernetes.io/worker": ""}));
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
    crate::fake::run_controller_until(|shutdown| run(ctx.shared.clone(), shutdown), || fake.get(WORKER_CM).is_some())
        .await;
}

const KUBELET_CONFIG: &str = "/apis/machineconfiguration.openshift.io/v1/kubeletconfigs/cnf";

/// OpenShift: the group names the pool `worker`, whose KubeletConfig `cnf` sets `kubelet_config`.
fn openshift_harness(kubelet_config: Value) -> (FakeApi, Arc<KubeletConfigContext>) {
    let (fake, plain) = harness(&[("worker-a", "none")]);
    let mut settings = Settings::kubernetes(NS, "img");
    settings.platform = numaresources_api::operator::defaults::Platform::OpenShift(4, 20);
    settings.machine_config_pools = true;
    settings.kubelet_configs = true;
    let ctx = Arc::new(KubeletConfigContext::new(Arc::new(Context::new(plain.client.clone(), settings, None))));
    fake.edit(NRO, |nro| nro["spec"]["nodeGroups"] = json!([{"poolName": "worker"}]));
    fake.insert(
        "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker",
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "worker", "labels": {"pools.operator.machineconfiguration.openshift.io/worker": ""}},
            "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}}),
    );
    fake.insert(
        KUBELET_CONFIG,
        json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "KubeletConfig", "metadata": {"name": "cnf"},
            "spec": {"machineConfigPoolSelector": {"matchLabels": {"pools.operator.machineconfiguration.openshift.io/worker": ""}},
                "kubeletConfig": kubelet_config}}),
    );
    (fake, ctx)
}

#[tokio::test]
async fn on_openshift_the_kubelet_config_selecting_the_pool_is_used() {
    let (fake, ctx) =
        openshift_harness(json!({"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}));
    run_once(&fake, &ctx).await;
    let (yaml, _) = config_of(&fake);
    assert_eq!(yaml["kubelet"], json!({"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}));
}

#[tokio::test]
async fn a_node_without_an_address_is_reported_once_and_the_others_still_configured() {
    let (fake, plain) = harness(&[("worker-a", "single-numa-node"), ("worker-b", "single-numa-node")]);
    let ctx = recording(&plain);
    // What kube-apiserver answers when it proxies to a node that has no address.
    let no_address = "/api/v1/nodes/worker-b/proxy/configz";
    let unreachable_events = || fake.events(unreachable::REASON);
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

fn node(labels: Value, boot: &str, version: &str, ready: &str, transition: &str, heartbeat: &str) -> Node {
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-a", "labels": labels},
        "status": {
            "nodeInfo": {"bootID": boot, "kubeletVersion": version, "machineID": "m", "systemUUID": "s",
                "kernelVersion": "k", "osImage": "o", "containerRuntimeVersion": "c", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64"},
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": transition,
                "lastHeartbeatTime": heartbeat, "reason": "KubeletReady"}]}}),
    )
    .unwrap()
}

#[test]
fn a_kubelet_restart_or_reboot_changes_the_incarnation_and_a_heartbeat_does_not() {
    let labels = json!({"node-role.kubernetes.io/worker": ""});
    let at = |n: &Node| kubelet_incarnation(n).unwrap();
    let running = at(&node(labels.clone(), "b1", "v1.33.0", "True", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z"));
    let heartbeat = at(&node(labels.clone(), "b1", "v1.33.0", "True", "2026-01-01T00:00:00Z", "2026-01-01T00:10:10Z"));
    assert_eq!(running, heartbeat, "a heartbeat says nothing new");
    for (what, changed) in [
        (
            "restarted (NotReady)",
            node(labels.clone(), "b1", "v1.33.0", "False", "2026-01-01T00:11:00Z", "2026-01-01T00:11:00Z"),
        ),
        ("ready again", node(labels.clone(), "b1", "v1.33.0", "True", "2026-01-01T00:11:05Z", "2026-01-01T00:11:05Z")),
        ("rebooted", node(labels.clone(), "b2", "v1.33.0", "True", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z")),
        ("upgraded", node(labels.clone(), "b1", "v1.34.0", "True", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z")),
        ("relabelled", node(json!({}), "b1", "v1.33.0", "True", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z")),
    ] {
        assert_ne!(at(&changed), running, "{what}");
    }
}

/// Runs the controller until the worker ConfigMap says `policy`; the run is bounded well below
/// [`RESYNC`], so only a watch can get it there.
async fn run_until_policy(fake: &FakeApi, ctx: &Arc<KubeletConfigContext>, change: impl FnOnce(&FakeApi)) {
    assert!(RESYNC > std::time::Duration::from_secs(60), "the bound below must not reach the poll");
    let policy_is = |wanted: &str| {
        fake.get(WORKER_CM).is_some_and(|_| config_of(fake).0["kubelet"]["topologyManagerPolicy"] == wanted)
    };
    let change = std::cell::RefCell::new(Some(change));
    crate::fake::run_controller_until(
        |shutdown| run(ctx.shared.clone(), shutdown),
        || {
            // Change the source once the controller has written what it first read.
            if policy_is("none")
                && let Some(change) = change.borrow_mut().take()
            {
                change(fake);
            }
            policy_is("single-numa-node")
        },
    )
    .await;
}

#[tokio::test]
async fn a_kubelet_restarted_with_a_new_policy_is_seen_without_waiting_for_the_poll() {
    let (fake, ctx) = harness(&[("worker-a", "none")]);
    run_until_policy(&fake, &ctx, |fake| {
        fake.insert(
            "/api/v1/nodes/worker-a/proxy/configz",
            json!({"kubeletconfig": {"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}}),
        );
        // The restarted kubelet reports NotReady until its first checks pass.
        fake.edit("/api/v1/nodes/worker-a", |node| {
            node["status"] = json!({"conditions": [{"type": "Ready", "status": "False",
                "lastTransitionTime": "2026-01-01T00:11:00Z", "lastHeartbeatTime": "2026-01-01T00:11:00Z"}]});
        });
    })
    .await;
}

#[tokio::test]
async fn a_changed_kubelet_config_is_seen_without_waiting_for_the_poll() {
    let (fake, ctx) = openshift_harness(json!({"topologyManagerPolicy": "none"}));
    run_until_policy(&fake, &ctx, |fake| {
        fake.edit(KUBELET_CONFIG, |kc| {
            kc["spec"]["kubeletConfig"]["topologyManagerPolicy"] = json!("single-numa-node")
        });
    })
    .await;
}
