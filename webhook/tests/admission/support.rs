//! Fixtures, a webhook with injected cluster state, requests through the router, and answer
//! decoding (including the base64 JSONPatch, applied to the request's object).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use base64::Engine;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use numaresources_api::operator::{
    NUMAResourcesScheduler, NUMAResourcesSchedulerSpec, PodRouting, PodRoutingMode, SCHEDULER_SINGLETON_NAME,
};
use numaresources_webhook::{ClusterCache, Config, Feeds, Webhook};
use serde_json::Value;
use tower::ServiceExt;

/// The namespace every captured pod lives in.
pub const WORKLOADS: &str = "numa-workloads";

/// A captured AdmissionReview body (`validating/…` for the validating webhook's copy).
pub fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/admission/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// The request's `object` of a review body.
pub fn object(review: &Value) -> Value {
    review["request"]["object"].clone()
}

/// A webhook whose caches are synced and hold `scheduler`, the workloads namespace labelled
/// `numa: "true"`, and one worker node.
pub fn webhook_with(scheduler: Option<NUMAResourcesScheduler>) -> (Arc<Webhook>, Feeds) {
    let (cluster, mut feeds) = ClusterCache::new();
    feeds.set_scheduler(scheduler);
    feeds.set_namespaces([
        (WORKLOADS, labels(&[("numa", "true"), ("kubernetes.io/metadata.name", WORKLOADS)])),
        ("other", labels(&[("kubernetes.io/metadata.name", "other")])),
    ]);
    feeds.set_nodes([("worker-0", labels(&[("node-role.kubernetes.io/worker", "")]))]);
    (Webhook::with_cluster(Config::new("numaresources").unwrap(), cluster), feeds)
}

/// The scheduler singleton with `mode` (and optionally a namespace selector).
pub fn scheduler(mode: PodRoutingMode, selector: Option<BTreeMap<String, String>>) -> NUMAResourcesScheduler {
    let spec = NUMAResourcesSchedulerSpec {
        scheduler_image: "quay.io/openshift-kni/scheduler-plugins:4.18-snapshot".into(),
        pod_routing: Some(PodRouting {
            mode: Some(mode),
            namespace_selector: selector.map(|match_labels| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some(match_labels),
                    match_expressions: None,
                }
            }),
        }),
        ..NUMAResourcesSchedulerSpec::default()
    };
    NUMAResourcesScheduler::new(SCHEDULER_SINGLETON_NAME, spec)
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// An answer as a test reads it.
#[derive(Debug)]
pub struct Answered {
    pub status: StatusCode,
    pub review: Value,
}

impl Answered {
    pub fn response(&self) -> &Value {
        &self.review["response"]
    }

    pub fn allowed(&self) -> bool {
        self.response()["allowed"].as_bool().unwrap()
    }

    /// The decoded JSONPatch, if any (checking `patchType` goes with it).
    pub fn patch(&self) -> Option<json_patch::Patch> {
        let encoded = self.response()["patch"].as_str()?;
        assert_eq!(self.response()["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    /// `object` with the patch applied (unchanged without one).
    pub fn patched(&self, object: &Value) -> Value {
        let mut object = object.clone();
        if let Some(patch) = self.patch() {
            json_patch::patch(&mut object, &patch.0).unwrap();
        }
        object
    }

    pub fn warnings(&self) -> Vec<String> {
        self.response()["warnings"]
            .as_array()
            .map(|w| w.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    }

    pub fn message(&self) -> &str {
        self.response()["status"]["message"].as_str().unwrap_or_default()
    }

    /// Checks what every answer must be: an AdmissionReview v1 echoing the request's uid.
    pub fn assert_answers(&self, request: &Value) -> &Self {
        assert_eq!(self.status, StatusCode::OK, "{:?}", self.review);
        assert_eq!(self.review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(self.review["kind"], "AdmissionReview");
        assert_eq!(self.response()["uid"], request["request"]["uid"], "the uid is echoed");
        self
    }
}

/// POSTs `body` with `content_type` to `path`.
pub async fn post_raw(app: &Router, path: &str, content_type: Option<&str>, body: Vec<u8>) -> Answered {
    let mut request = Request::post(format!("{path}?timeout=10s"));
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let response = app.clone().oneshot(request.body(Body::from(body)).unwrap()).await.unwrap();
    let status = response.status();
    assert_eq!(response.headers()["content-type"], "application/json", "{status}");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answered { status, review: serde_json::from_slice(&bytes).unwrap() }
}

/// The admin port as `numaresources webhook` serves it: the webhook's readiness checks and its
/// metrics in the process's registry.
pub fn admin(webhook: &Webhook) -> Router {
    numaresources_runtime::admin::component_router(webhook.readiness(), |registry| webhook.register_metrics(registry))
}

/// POSTs a review to `path` the way kube-apiserver does.
pub async fn post(webhook: &Arc<Webhook>, path: &str, review: &Value) -> Answered {
    post_raw(&webhook.router(), path, Some("application/json"), serde_json::to_vec(review).unwrap()).await
}

/// GETs `path` from `app`: (status, body).
pub async fn get(app: &Router, path: &str) -> (StatusCode, String) {
    let response = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}
