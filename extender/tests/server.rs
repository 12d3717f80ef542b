//! The extender as kube-scheduler meets it: its HTTP routes fed the request bodies kube-scheduler
//! sends (extender v1 JSON, node-cache capable), over NRTs and pods watched from the fake API,
//! authorized by the extender's checked-in ClusterRole; binding goes through the pod's `binding`
//! subresource.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use numaresources_api::fit::kubelet::PolicyOptions;
use numaresources_extender::engine::Engine;
use numaresources_extender::server::{Shared, router};
use numaresources_testkit::fake_api::{FakeApi, Rbac};
use serde_json::{Value, json};
use tower::ServiceExt;

const RBAC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/extender/rbac.yaml");
const SCHEDULER: &str = "topo-aware-scheduler";

fn pod(name: &str, cpu: &str) -> Value {
    let resources = json!({"cpu": cpu, "memory": "1Gi"});
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
           "spec": {"schedulerName": SCHEDULER, "containers": [
               {"name": "app", "image": "example/app:1", "resources": {"requests": resources, "limits": resources}}]},
           "status": {"phase": "Pending", "qosClass": "Guaranteed"}})
}

/// The UID the fake gave pod `name` (it assigns its own).
fn uid_of(fake: &FakeApi, name: &str) -> String {
    fake.get(&format!("/api/v1/namespaces/ns/pods/{name}")).unwrap()["metadata"]["uid"].as_str().unwrap().to_owned()
}

async fn post(app: &axum::Router, verb: &str, body: &Value) -> Value {
    let request = http::Request::post(format!("/{verb}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200, "{verb}");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

/// The fake API with worker-0's NRT and a Pending pod, the extender following it; once it has
/// read both.
async fn started() -> (FakeApi, Arc<Shared>, axum::Router) {
    let (fake, client) = FakeApi::start(Arc::new(Rbac::from_file(Path::new(RBAC))));
    fake.insert(
        "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-0",
        numaresources_testkit::nrt::with_cpus("worker-0", &[8, 8], "single-numa-node", &[]),
    );
    fake.insert("/api/v1/namespaces/ns/pods/first", pod("first", "6"));
    let shared = Shared::new(Engine::new(PolicyOptions::default(), None), Some(client.clone()));
    tokio::spawn(numaresources_extender::watch::follow(client, shared.clone(), SCHEDULER.to_owned()));
    let app = router(shared.clone());
    for _ in 0..500 {
        let request = http::Request::get("/readyz").body(Body::empty()).unwrap();
        if app.clone().oneshot(request).await.unwrap().status() == 200 {
            return (fake, shared, app);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the extender never read the NRTs and pods");
}

#[tokio::test]
async fn before_it_has_read_the_nrts_the_filter_answers_an_error_not_every_node() {
    let app = router(Shared::new(Engine::new(PolicyOptions::default(), None), None));
    let answer =
        post(&app, "filter", &json!({"Pod": pod("first", "6"), "Nodes": null, "NodeNames": ["worker-0"]})).await;
    assert_eq!(answer["Error"], "the NUMA extender has not read the NRTs and pods yet");
    assert_eq!(answer["NodeNames"], Value::Null);
}

#[tokio::test]
async fn filter_bind_and_the_next_filter_counts_the_pod_it_bound() {
    let (fake, shared, app) = started().await;
    // kube-scheduler's filter request, node-cache capable: names only.
    let request = json!({"Pod": pod("first", "6"), "Nodes": null, "NodeNames": ["worker-0", "bare-node"]});
    let answer = post(&app, "filter", &request).await;
    assert_eq!(
        answer,
        json!({"Nodes": null, "NodeNames": ["worker-0", "bare-node"], "FailedNodes": {},
               "FailedAndUnresolvableNodes": {}, "Error": ""})
    );
    let scores = post(&app, "prioritize", &request).await;
    assert_eq!(scores.as_array().unwrap().len(), 2);
    assert_eq!(scores[0]["Host"], "worker-0");

    let uid = uid_of(&fake, "first");
    let bind = json!({"PodName": "first", "PodNamespace": "ns", "PodUID": uid, "Node": "worker-0"});
    assert_eq!(post(&app, "bind", &bind).await, json!({"Error": ""}));
    assert_eq!(fake.get("/api/v1/namespaces/ns/pods/first").unwrap()["spec"]["nodeName"], "worker-0");
    // A retried bind of a pod already there is done; to another node it is refused.
    assert_eq!(post(&app, "bind", &bind).await, json!({"Error": ""}));
    let elsewhere = json!({"PodName": "first", "PodNamespace": "ns", "PodUID": uid, "Node": "worker-9"});
    assert!(post(&app, "bind", &elsewhere).await["Error"].as_str().unwrap().contains("bound to worker-0 already"));
    assert_eq!(shared.engine.read().await.holds("worker-0").len(), 1, "held until the NRT counts it");

    // Two more 6-CPU pods: NUMA 0 has 2 left, so one fits on NUMA 1 and the other nowhere.
    let second = post(&app, "filter", &json!({"Pod": pod("second", "6"), "NodeNames": ["worker-0"]})).await;
    assert_eq!(second["NodeNames"], json!(["worker-0"]));
    fake.insert("/api/v1/namespaces/ns/pods/second", pod("second", "6"));
    let bind =
        json!({"PodName": "second", "PodNamespace": "ns", "PodUID": uid_of(&fake, "second"), "Node": "worker-0"});
    assert_eq!(post(&app, "bind", &bind).await, json!({"Error": ""}));
    let third = post(&app, "filter", &json!({"Pod": pod("third", "6"), "NodeNames": ["worker-0"]})).await;
    assert_eq!(third["NodeNames"], json!([]));
    assert_eq!(
        third["FailedNodes"]["worker-0"],
        "numa: the kubelet (single-numa-node) cannot align container \"app\": no single NUMA node holds all of it \
         (cpu 6 requested, at most 2 free on one NUMA node)"
    );
}

#[tokio::test]
async fn a_pod_filtered_before_another_took_the_room_is_refused_at_bind_and_left_unbound() {
    let (fake, shared, app) = started().await;
    fake.insert("/api/v1/namespaces/ns/pods/second", pod("second", "6"));
    fake.insert("/api/v1/namespaces/ns/pods/third", pod("third", "6"));
    // kube-scheduler's next scheduling cycle runs beside the previous pod's binding: three
    // 6-CPU pods are filtered (and pass) before any is bound, with room for two (one per NUMA
    // node).
    for name in ["first", "second", "third"] {
        let answer = post(&app, "filter", &json!({"Pod": pod(name, "6"), "NodeNames": ["worker-0"]})).await;
        assert_eq!(answer["NodeNames"], json!(["worker-0"]), "{name}");
    }
    let bind =
        |name: &str| json!({"PodName": name, "PodNamespace": "ns", "PodUID": uid_of(&fake, name), "Node": "worker-0"});
    assert_eq!(post(&app, "bind", &bind("first")).await, json!({"Error": ""}));
    assert_eq!(post(&app, "bind", &bind("second")).await, json!({"Error": ""}));
    let refused = post(&app, "bind", &bind("third")).await;
    let error = refused["Error"].as_str().unwrap();
    assert!(error.starts_with("numa: the kubelet (single-numa-node) cannot align container \"app\""), "{error}");
    assert!(error.contains("took the room"), "{error}");
    assert!(fake.get("/api/v1/namespaces/ns/pods/third").unwrap()["spec"]["nodeName"].is_null(), "no Binding");
    let holds = shared.engine.read().await.holds("worker-0").iter().map(|h| h.pod.clone()).collect::<Vec<_>>();
    assert_eq!(holds, ["ns/first", "ns/second"]);
}

#[tokio::test]
async fn a_wrong_uid_is_not_bound() {
    let (fake, _shared, app) = started().await;
    let bind = json!({"PodName": "first", "PodNamespace": "ns", "PodUID": "uid-old", "Node": "worker-0"});
    assert!(post(&app, "bind", &bind).await["Error"].as_str().unwrap().contains("is not UID uid-old"));
    assert!(fake.get("/api/v1/namespaces/ns/pods/first").unwrap()["spec"]["nodeName"].is_null());
}
