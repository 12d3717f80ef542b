//! The extender's HTTP side: `POST /filter`, `/prioritize` and `/bind` as kube-scheduler calls
//! them, `GET /healthz` and `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use tokio::sync::RwLock;

use crate::engine::Engine;
use crate::protocol::{ExtenderArgs, ExtenderBindingArgs, ExtenderBindingResult, ExtenderFilterResult, HostPriority};

/// The largest request body read: a pod and the names of 5,000 nodes take about 150 KiB; a
/// scheduler that sends whole Node objects (not node-cache capable) is refused past this.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// What the handlers share.
pub struct Shared {
    /// The decisions.
    pub engine: RwLock<Engine>,
    /// Whether the NRTs and the pods have been listed once (before that the extender knows
    /// nothing, and says so rather than passing every node).
    pub synced: AtomicBool,
    /// Creates the Bindings (None: binding is refused).
    pub client: Option<kube::Client>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("synced", &self.synced).finish_non_exhaustive()
    }
}

impl Shared {
    /// A fresh state around `engine`.
    pub fn new(engine: Engine, client: Option<kube::Client>) -> Arc<Self> {
        Arc::new(Self { engine: RwLock::new(engine), synced: AtomicBool::new(false), client })
    }
}

/// The routes.
pub fn router(shared: Arc<Shared>) -> Router {
    use numaresources_api::extender::{BIND_VERB, FILTER_VERB, PRIORITIZE_VERB};
    Router::new()
        .route(&format!("/{FILTER_VERB}"), post(filter))
        .route(&format!("/{PRIORITIZE_VERB}"), post(prioritize))
        .route(&format!("/{BIND_VERB}"), post(bind))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(shared.clone())
        .merge(health_router(shared))
}

/// `/healthz` and `/readyz` alone, for the port the kubelet probes (the verbs are not there).
pub fn health_router(shared: Arc<Shared>) -> Router {
    Router::new().route("/healthz", get(|| async { "ok" })).route("/readyz", get(ready)).with_state(shared)
}

/// What the filter answers before the first list: an error, so kube-scheduler retries the pod
/// rather than placing it without the NRTs.
const NOT_SYNCED: &str = "the NUMA extender has not read the NRTs and pods yet";

async fn filter(State(shared): State<Arc<Shared>>, Json(args): Json<ExtenderArgs>) -> Json<ExtenderFilterResult> {
    if !shared.synced.load(Ordering::Acquire) {
        return Json(ExtenderFilterResult { error: NOT_SYNCED.to_owned(), ..ExtenderFilterResult::default() });
    }
    let (Some(pod), candidates) = args.into_pod_and_candidates() else {
        return Json(ExtenderFilterResult {
            error: "no Pod in the request".to_owned(),
            ..ExtenderFilterResult::default()
        });
    };
    let result = shared.engine.read().await.filter(&pod, candidates);
    tracing::debug!(pod = ?pod.metadata.name, passing = ?result.node_names.as_ref().map(Vec::len), "filter");
    Json(result)
}

async fn prioritize(State(shared): State<Arc<Shared>>, Json(args): Json<ExtenderArgs>) -> Json<Vec<HostPriority>> {
    let (Some(pod), candidates) = args.into_pod_and_candidates() else { return Json(Vec::new()) };
    if !shared.synced.load(Ordering::Acquire) {
        return Json(Vec::new());
    }
    Json(shared.engine.read().await.prioritize(&pod, candidates))
}

async fn bind(State(shared): State<Arc<Shared>>, Json(args): Json<ExtenderBindingArgs>) -> Json<ExtenderBindingResult> {
    let error = match bind_pod(&shared, &args).await {
        Ok(()) => String::new(),
        Err(error) => {
            tracing::warn!(pod = %args.pod_name, namespace = %args.pod_namespace, node = %args.node, %error, "binding failed");
            error
        }
    };
    Json(ExtenderBindingResult { error })
}

/// Holds the pod against the node first (a filter for the next pod must count it) if it still
/// fits there, then creates the Binding; a failed binding drops the hold.
async fn bind_pod(shared: &Shared, args: &ExtenderBindingArgs) -> Result<(), String> {
    let client = shared.client.clone().ok_or("this extender does not bind")?;
    let pods: Api<Pod> = Api::namespaced(client, &args.pod_namespace);
    let pod = pods.get(&args.pod_name).await.map_err(|e| format!("reading the pod: {e}"))?;
    if pod.metadata.uid.as_deref() != Some(args.pod_uid.as_str()) {
        return Err(format!("pod {}/{} is not UID {} any more", args.pod_namespace, args.pod_name, args.pod_uid));
    }
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()) {
        // A retried bind that went through before: done (and held since).
        Some(node) if node == args.node => return Ok(()),
        Some(node) => return Err(format!("pod {}/{} is bound to {node} already", args.pod_namespace, args.pod_name)),
        None => {}
    }
    // A pod bound since this one's filter may have taken the room: then kube-scheduler is
    // told, and puts the pod back in its queue to be filtered again.
    shared
        .engine
        .write()
        .await
        .hold_if_it_fits(&args.node, &pod)
        .map_err(|refusal| format!("numa: {refusal}, since a pod bound after this one was filtered took the room"))?;
    let binding = serde_json::json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": args.pod_name, "namespace": args.pod_namespace, "uid": args.pod_uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
    });
    let created = pods
        .create_subresource::<_, serde_json::Value>("binding", &args.pod_name, &PostParams::default(), &binding)
        .await;
    if let Err(error) = created {
        shared.engine.write().await.unbound(&args.node, &args.pod_uid);
        return Err(format!("creating the Binding: {error}"));
    }
    Ok(())
}

async fn ready(State(shared): State<Arc<Shared>>) -> (StatusCode, &'static str) {
    if shared.synced.load(Ordering::Acquire) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, NOT_SYNCED)
    }
}
