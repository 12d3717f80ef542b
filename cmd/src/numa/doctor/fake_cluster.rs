//! `doctor` against the fake API (kube-apiserver's stand-in), authorized by the shipped
//! `numaresources:doctor` ClusterRole: a healthy cluster reads all ok with only the role's get and
//! list, and a right taken away skips its check and says so.

use std::path::Path;
use std::sync::Arc;

use numaresources_api::nrt::well_known::{ANNOTATION_LAST_CHANGE, ATTR_PODS_FINGERPRINT};
use numaresources_controllers::names;
use numaresources_testkit::fake_api::{FakeApi, Rbac};
use serde_json::{Value, json};

use super::*;

const NAMESPACE: &str = "numaresources";
const DOCTOR_RBAC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/doctor/rbac.yaml");

/// A fake cluster with one node group of one node, every link of the chain healthy.
pub(super) fn healthy_cluster(rbac: Rbac) -> (FakeApi, kube::Client) {
    let (fake, client) = FakeApi::start(Arc::new(rbac));
    let available = json!({"conditions": [{"type": "Available", "status": "True"}]});
    fake.insert(
        &format!("/apis/apiregistration.k8s.io/v1/apiservices/{API_SERVICE}"),
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": API_SERVICE},
               "status": available}),
    );
    fake.insert_node("worker-0", json!({"node-role.kubernetes.io/worker": ""}));
    fake.insert(
        "/apis/nodetopology.openshift.io/v1/numaresourcesoperators/numaresourcesoperator",
        json!({"apiVersion": "nodetopology.openshift.io/v1", "kind": "NUMAResourcesOperator",
               "metadata": {"name": "numaresourcesoperator"}, "spec": {"nodeGroups": [
                   {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}]}}),
    );
    let image = "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.34.7";
    fake.insert(
        "/apis/nodetopology.openshift.io/v1/numaresourcesschedulers/numaresourcesscheduler",
        json!({"apiVersion": "nodetopology.openshift.io/v1", "kind": "NUMAResourcesScheduler",
               "metadata": {"name": "numaresourcesscheduler"}, "spec": {"imageSpec": image}}),
    );
    let deployment = |name: &str, image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
               "spec": {"replicas": 1, "selector": {}, "template": {"spec": {"containers": [
                   {"name": "main", "image": image}]}}},
               "status": available})
    };
    fake.insert(
        &format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{}", names::SCHEDULER),
        deployment(names::SCHEDULER, image),
    );
    fake.insert(
        &format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{}", names::APISERVER),
        deployment(names::APISERVER, "numaresources:1"),
    );
    fake.insert(
        &format!("/api/v1/namespaces/{NAMESPACE}/configmaps/{}", names::SCHEDULER_CONFIG),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": names::SCHEDULER_CONFIG, "namespace": NAMESPACE},
               "data": {"config.yaml": super::tests::rendered_scheduler_config()}}),
    );
    let exporter_labels = json!({names::LABEL_COMPONENT: names::COMPONENT_RTE});
    fake.insert(
        &format!("/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/numaresourcesoperator-worker"),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "numaresourcesoperator-worker", "namespace": NAMESPACE, "labels": exporter_labels},
               "status": {"desiredNumberScheduled": 1, "numberReady": 1, "currentNumberScheduled": 1,
                          "numberMisscheduled": 0}}),
    );
    fake.insert(
        &format!("/api/v1/namespaces/{NAMESPACE}/pods/exporter-worker-0"),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "exporter-worker-0", "namespace": NAMESPACE, "labels": exporter_labels},
               "spec": {"nodeName": "worker-0", "containers": [{"name": "rte"}]},
               "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let certificate = super::tests::certificate(Duration::from_secs(90 * 24 * 3600));
    fake.insert(
        &format!("/api/v1/namespaces/{NAMESPACE}/secrets/{}", names::APISERVER_TLS_SECRET),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": names::APISERVER_TLS_SECRET, "namespace": NAMESPACE},
               "data": {"tls.crt": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, certificate)}}),
    );
    fake.insert("/api/v1/nodes/worker-0/proxy/configz", json!({"kubeletconfig": super::tests::aligned_kubelet()}));
    fake.insert("/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-0", nrt_object("worker-0"));
    (fake, client)
}

/// worker-0's NRT, just reported: single-numa-node, two zones of 4 CPUs and 8 GiB.
pub(super) fn nrt_object(node: &str) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let zone = |index: u32| {
        json!({"name": format!("node-{index}"), "type": "Node", "resources": [
            {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"},
            {"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"}]})
    };
    json!({"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
           "metadata": {"name": node, "annotations": {ANNOTATION_LAST_CHANGE: now}},
           "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                          {"name": "topologyManagerScope", "value": "container"},
                          {"name": ATTR_PODS_FINGERPRINT, "value": "pfp0v001deadbeefdeadbeef"}],
           "zones": [zone(0), zone(1)]})
}

/// The shipped doctor role, less the rules `drop` matches (a rule's resources, joined by `,`).
fn doctor_role_without(drop: &str) -> Rbac {
    let text = std::fs::read_to_string(DOCTOR_RBAC).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rbac.yaml");
    let mut documents: Vec<Value> = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        let mut doc: Value = serde::Deserialize::deserialize(document).unwrap();
        if let Some(rules) = doc["rules"].as_array_mut() {
            rules.retain(|rule| {
                let resources: Vec<&str> =
                    rule["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
                resources.join(",") != drop
            });
        }
        documents.push(doc);
    }
    let yaml: Vec<String> = documents.iter().map(|d| serde_norway::to_string(d).unwrap()).collect();
    std::fs::write(&path, yaml.join("---\n")).unwrap();
    Rbac::from_file(&path)
}

#[tokio::test]
async fn the_doctor_role_reads_a_healthy_cluster_all_ok() {
    let (_fake, client) = healthy_cluster(Rbac::from_file(Path::new(DOCTOR_RBAC)));
    let checks = super::checks(&observe::observe(&client, NAMESPACE).await);
    let not_ok: Vec<&Check> = checks.iter().filter(|c| c.status != Status::Ok).collect();
    assert!(not_ok.is_empty(), "{not_ok:#?}");
}

#[tokio::test]
async fn a_right_the_doctor_lacks_skips_its_check_and_names_it() {
    let (_fake, client) = healthy_cluster(doctor_role_without("nodes/proxy"));
    let checks = super::checks(&observe::observe(&client, NAMESPACE).await);
    let kubelets = checks.iter().find(|c| c.name == "kubelets").unwrap();
    assert_eq!(kubelets.status, Status::Skip, "{kubelets:#?}");
    assert!(kubelets.detail.contains("get nodes/proxy"), "{}", kubelets.detail);
    assert!(kubelets.detail.contains("forbidden"), "{}", kubelets.detail);
    // Everything else is still read.
    let others: Vec<&Check> = checks.iter().filter(|c| c.name != "kubelets" && c.status != Status::Ok).collect();
    assert!(others.is_empty(), "{others:#?}");

    let (_fake, client) = healthy_cluster(doctor_role_without("secrets"));
    let checks = super::checks(&observe::observe(&client, NAMESPACE).await);
    let certificates = checks.iter().find(|c| c.name == "certificates").unwrap();
    assert_eq!(certificates.status, Status::Skip, "{certificates:#?}");
    assert!(certificates.detail.contains("forbidden"), "{}", certificates.detail);
}

/// What the node does with the probe pod, as the test plays the scheduler, the kubelet and the
/// exporter.
#[derive(Clone, Copy)]
enum Node {
    /// Bound to worker-0, Running, one CPU less on NUMA 0 until it is deleted.
    Aligns,
    /// Bound to worker-0, refused by its kubelet.
    Refuses,
    /// Never bound: the scheduler says why.
    Unschedulable,
    /// Bound to worker-0 and Running, and its NRT never shows it (an exporter that stopped).
    NeverReported,
    /// Bound to worker-0 and Running, shown in its NRT, which keeps the CPU once it is deleted.
    KeepsTheCpu,
    /// [`Node::Aligns`], but its NRT shows the pod [`LATE`] after it runs.
    ShownLate,
}

/// How long [`Node::ShownLate`]'s NRT takes: over the 0.1 s refresh period and two polls, well
/// within the 5 s each probe step may take here.
const LATE: Duration = Duration::from_secs(2);

const NRT_PATH: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-0";

/// Plays the node's side until the probe pod is gone (at most 60 s of 20 ms rounds).
async fn play(fake: FakeApi, node: Node) {
    let mut seen: Option<String> = None;
    let mut seen_at = tokio::time::Instant::now();
    let mut late_shown = false;
    for _ in 0..3000 {
        let probe = fake
            .paths()
            .into_iter()
            .find(|p| p.starts_with("/api/v1/namespaces/numaresources-doctor-") && p.contains("/pods/"));
        match (&probe, &seen) {
            (Some(path), None) => {
                seen = Some(path.clone());
                seen_at = tokio::time::Instant::now();
                fake.edit(path, |pod| match node {
                    Node::Aligns | Node::NeverReported | Node::KeepsTheCpu | Node::ShownLate => {
                        pod["spec"]["nodeName"] = json!("worker-0");
                        pod["status"] = json!({"phase": "Running"});
                    }
                    Node::Refuses => {
                        pod["spec"]["nodeName"] = json!("worker-0");
                        pod["status"] = json!({"phase": "Failed", "reason": "TopologyAffinityError",
                            "message": "Pod was rejected: Resources cannot be allocated with Topology locality"});
                    }
                    Node::Unschedulable => {
                        pod["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                            "status": "False", "reason": "Unschedulable",
                            "message": "0/1 nodes are available: 1 cannot align container"}]});
                    }
                });
                if matches!(node, Node::Aligns | Node::KeepsTheCpu) {
                    fake.edit(NRT_PATH, |nrt| nrt["zones"][0]["resources"][0]["available"] = json!("3"));
                }
            }
            (Some(_), Some(_)) if matches!(node, Node::ShownLate) && !late_shown && seen_at.elapsed() >= LATE => {
                late_shown = true;
                fake.edit(NRT_PATH, |nrt| nrt["zones"][0]["resources"][0]["available"] = json!("3"));
            }
            (None, Some(_)) => {
                if !matches!(node, Node::KeepsTheCpu) {
                    fake.edit(NRT_PATH, |nrt| nrt["zones"][0]["resources"][0]["available"] = json!("4"));
                }
                return;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn probe_with(node: Node) -> (Vec<Check>, FakeApi) {
    probe_on(node, |_| {}, Some(Duration::from_secs(10))).await
}

/// [`probe_with`], once `prepare` has changed the healthy cluster, the node group refreshing
/// every `refresh_period`.
async fn probe_on(
    node: Node,
    prepare: impl FnOnce(&FakeApi),
    refresh_period: Option<Duration>,
) -> (Vec<Check>, FakeApi) {
    let (fake, client) = healthy_cluster(Rbac::from_file(Path::new(DOCTOR_RBAC)));
    prepare(&fake);
    let playing = tokio::spawn(play(fake.clone(), node));
    let groups = vec![GroupNodes { pool: "worker".into(), nodes: vec!["worker-0".into()], refresh_period }];
    let settings = probe::ProbeSettings {
        scheduler_name: "topo-aware-scheduler".into(),
        image: None,
        timeout: Duration::from_secs(5),
    };
    let checks = probe::probe(&client, &groups, &settings).await;
    playing.abort();
    (checks, fake)
}

fn probe_namespaces(fake: &FakeApi) -> Vec<String> {
    fake.paths().into_iter().filter(|p| p.starts_with("/api/v1/namespaces/numaresources-doctor-")).collect()
}

#[tokio::test]
async fn a_probe_pod_bound_admitted_shown_and_given_back_is_ok() {
    let (checks, fake) = probe_with(Node::Aligns).await;
    assert_eq!(checks.len(), 1, "{checks:#?}");
    assert_eq!(checks[0].name, "probe worker");
    assert_eq!(checks[0].status, Status::Ok, "{checks:#?}");
    assert!(checks[0].detail.starts_with("bound to worker-0 (its NRT said it fits) in "), "{}", checks[0].detail);
    assert!(checks[0].detail.contains("admitted, shown in its NRT (NUMA 0) after"), "{}", checks[0].detail);
    assert!(probe_namespaces(&fake).is_empty(), "left behind: {:?}", probe_namespaces(&fake));
}

#[tokio::test]
async fn a_probe_pod_the_kubelet_refuses_fails_with_the_kubelets_words() {
    let (checks, fake) = probe_with(Node::Refuses).await;
    assert_eq!(checks[0].status, Status::Fail, "{checks:#?}");
    assert!(
        checks[0]
            .detail
            .starts_with("worker-0's kubelet refused the probe pod: TopologyAffinityError: Pod was rejected"),
        "{}",
        checks[0].detail
    );
    assert!(probe_namespaces(&fake).is_empty(), "left behind: {:?}", probe_namespaces(&fake));
}

#[tokio::test]
async fn a_probe_pod_never_bound_fails_with_the_schedulers_words() {
    let (checks, fake) = probe_with(Node::Unschedulable).await;
    assert_eq!(checks[0].status, Status::Fail, "{checks:#?}");
    assert!(
        checks[0].detail.ends_with("Unschedulable: 0/1 nodes are available: 1 cannot align container"),
        "{}",
        checks[0].detail
    );
    assert!(probe_namespaces(&fake).is_empty(), "left behind: {:?}", probe_namespaces(&fake));
}

#[tokio::test]
async fn a_probe_pod_its_nrt_never_shows_fails_naming_the_exporter() {
    let (checks, fake) = probe_with(Node::NeverReported).await;
    assert_eq!(checks[0].status, Status::Fail, "{checks:#?}");
    assert!(checks[0].detail.starts_with("worker-0's NRT did not show the probe pod's CPU within"), "{checks:#?}");
    assert!(checks[0].fix.as_deref().unwrap_or_default().contains("exporter"), "{checks:#?}");
    assert!(probe_namespaces(&fake).is_empty(), "left behind: {:?}", probe_namespaces(&fake));
}

#[tokio::test]
async fn a_probe_pod_whose_cpu_the_nrt_keeps_after_deletion_fails() {
    let (checks, fake) = probe_with(Node::KeepsTheCpu).await;
    assert_eq!(checks[0].status, Status::Fail, "{checks:#?}");
    assert!(checks[0].detail.starts_with("worker-0's NRT did not give the probe pod's CPU back within"), "{checks:#?}");
    assert!(probe_namespaces(&fake).is_empty(), "left behind: {:?}", probe_namespaces(&fake));
}

/// The scheduler bound the probe where the NRT said it cannot fit: it is not filtering by the NRT.
#[tokio::test]
async fn a_probe_pod_bound_where_its_nrt_says_it_does_not_fit_fails() {
    let no_cpu_left = |fake: &FakeApi| {
        fake.edit(NRT_PATH, |nrt| {
            for zone in nrt["zones"].as_array_mut().unwrap() {
                zone["resources"][0]["available"] = json!("0");
            }
        });
    };
    let (checks, fake) = probe_on(Node::Aligns, no_cpu_left, None).await;
    assert_eq!(checks[0].status, Status::Fail, "{checks:#?}");
    assert_eq!(
        checks[0].detail, "the probe pod was bound to worker-0, whose NRT said it cannot take it",
        "{checks:#?}"
    );
    assert!(probe_namespaces(&fake).is_empty(), "left behind: {:?}", probe_namespaces(&fake));
}

/// An NRT that shows the probe later than its node group's refresh period: the scheduler decides
/// on old numbers that long after each change.
#[tokio::test]
async fn a_probe_pod_shown_later_than_the_refresh_period_warns() {
    let (checks, fake) = probe_on(Node::ShownLate, |_| {}, Some(Duration::from_millis(100))).await;
    assert_eq!(checks[0].status, Status::Warn, "{checks:#?}");
    assert!(
        checks[0].detail.ends_with("the NRT took longer than the node group's refresh period (0.1 s)"),
        "{checks:#?}"
    );
    assert!(probe_namespaces(&fake).is_empty(), "left behind: {:?}", probe_namespaces(&fake));
    // Within a period it is ok.
    let (checks, _) = probe_on(Node::ShownLate, |_| {}, Some(Duration::from_secs(10))).await;
    assert_eq!(checks[0].status, Status::Ok, "{checks:#?}");
}
