//! The aggregated NodeResourceTopology API server: `topology.node.k8s.io/v1alpha2`
//! `noderesourcetopologies`, served from memory behind an `APIService`.
//!
//! ```text
//!   request ─► router ─► negotiate (Accept) ─► rest / watch / discovery / openapi / health
//!                                                   │ reads: Arc clones of stored objects
//!                                                   ▼         and their pre-serialized JSON
//!                                            store (one writer at a time, bounded history)
//! ```
//!
//! The crate returns an [`axum::Router`]; the binary binds the TLS listener.

pub mod auth;
pub mod body;
pub mod config;
pub mod discovery;
mod etag;
pub mod exporter_pods;
mod fair;
mod fallback;
mod headroom;
mod health;
mod held;
mod legacy_watch;
pub mod merge_patch;
mod metrics;
mod negotiate;
mod nodes;
pub mod openapi;
mod paging;
pub mod patch_limits;
pub mod query;
mod render;
pub mod replication;
pub mod request_head;
mod request_info;
mod response;
mod rest;
mod row_parts;
mod server;
pub mod status;
pub mod store;
mod table;
pub mod validate;
mod warmup;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;

pub use health::Readiness;
pub use server::{ApiServer, Clients, ServerError};
pub use store::Store;

/// Limits and periods that tests and benchmarks may tune.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Request bodies above this are refused with 413 (kube-apiserver's default is 3 MiB), and so
    /// is a write whose object, once encoded, is larger.
    pub max_body_bytes: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// What one watch may queue for a client that reads slower than events come, in bytes
    /// (at least one event goes out, however large).
    pub watch_buffer_bytes: usize,
    /// How long a watch may wait for room in that queue before it is ended (the client resumes
    /// from the last event it read).
    pub watch_blocked_timeout: Duration,
    /// The shortest time between two writes of one watch: changes that come sooner wait and go
    /// out together, in one write (zero: each change is written as it comes).
    pub watch_flush_interval: Duration,
    /// How deep a request body (JSON or YAML) may nest; at most
    /// [`body::DEFAULT_MAX_NESTING_DEPTH`], which serde_json enforces anyway.
    pub max_nesting_depth: usize,
    /// The most operations one JSON patch may have (kube-apiserver: 10,000).
    pub max_json_patch_operations: usize,
}

/// The default of [`Limits::max_body_bytes`]: kube-apiserver's `MaxRequestBodyBytes` (it also
/// bounds what a patch may make of an object, and what a JSON patch's copies may add).
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// The default of [`Limits::watch_buffer_bytes`].
pub(crate) const DEFAULT_WATCH_BUFFER_BYTES: usize = 64 * 1024;
/// The default of [`Limits::watch_blocked_timeout`], as `--watch-blocked-timeout` reads it.
pub(crate) const DEFAULT_WATCH_BLOCKED_TIMEOUT: &str = "10s";
/// The default of [`Limits::watch_flush_interval`], as `--watch-flush-interval` reads it: a
/// watcher of a 5,000-node fleet (≈500 changes a second) gets ≈5 changes per write instead of
/// one, for at most this much more delivery latency (against a 50 ms p99 target).
pub(crate) const DEFAULT_WATCH_FLUSH_INTERVAL: &str = "10ms";

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            bookmark_interval: Duration::from_secs(60),
            watch_buffer_bytes: DEFAULT_WATCH_BUFFER_BYTES,
            // A constant that parses (a unit test builds the default limits).
            watch_blocked_timeout: numaresources_runtime::flags::period(DEFAULT_WATCH_BLOCKED_TIMEOUT)
                .unwrap_or_else(|error| unreachable!("the default watch blocked timeout: {error}")),
            watch_flush_interval: config::watch_flush_interval(DEFAULT_WATCH_FLUSH_INTERVAL)
                .unwrap_or_else(|error| unreachable!("the default watch flush interval: {error}")),
            max_nesting_depth: body::DEFAULT_MAX_NESTING_DEPTH,
            max_json_patch_operations: patch_limits::MAX_JSON_PATCH_OPERATIONS,
        }
    }
}

/// Everything a handler needs.
#[derive(Debug)]
pub struct AppState {
    /// The objects.
    pub store: Arc<Store>,
    /// Discovery documents.
    pub discovery: discovery::Discovery,
    /// OpenAPI documents.
    pub openapi: openapi::OpenApi,
    /// Limits.
    pub limits: Limits,
    /// Readiness checks.
    pub readiness: Arc<Readiness>,
    /// Authentication and authorization.
    pub auth: auth::Auth,
    /// Prometheus metrics.
    pub metrics: metrics::Metrics,
    /// What `/metrics` on the HTTPS port encodes: the series of [`AppState::register_metrics`]
    /// (the admin port serves the same series from the process's registry).
    pub metrics_registry: Arc<prometheus_client::registry::Registry>,
    /// Replication across replicas (None: a single replica, as `local` and standalone tests run).
    pub replication: Option<Arc<replication::Replication>>,
    /// Cancelled when the server begins to stop: watches end with a final bookmark so clients
    /// resume elsewhere without relisting.
    pub stopping: tokio_util::sync::CancellationToken,
}

impl AppState {
    /// State around `store`, reporting `version`/`commit` on `/version`.
    pub fn new(store: Arc<Store>, version: &str, commit: &str) -> Self {
        Self {
            store,
            discovery: discovery::Discovery::new(version, commit),
            openapi: openapi::OpenApi::new(),
            limits: Limits::default(),
            readiness: Arc::new(Readiness::default()),
            auth: auth::Auth::Disabled,
            metrics: metrics::Metrics::default(),
            metrics_registry: Arc::default(),
            replication: None,
            stopping: tokio_util::sync::CancellationToken::new(),
        }
        .with_metrics_registry()
    }

    /// Registers the server's series, `numaresources_apiserver_*` (replication's among them
    /// when replicated), in `registry`.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let ours = registry.sub_registry_with_prefix(METRICS_PREFIX);
        self.metrics.register(ours, self.store.clone());
        if let Some(replication) = &self.replication {
            replication.metrics().register(ours);
        }
    }

    /// This state with [`AppState::metrics_registry`] made from its current parts.
    pub(crate) fn with_metrics_registry(mut self) -> Self {
        let mut registry = prometheus_client::registry::Registry::default();
        self.register_metrics(&mut registry);
        self.metrics_registry = Arc::new(registry);
        self
    }
}

/// The prefix of the API server's metric names.
pub const METRICS_PREFIX: &str = "numaresources_apiserver";

/// Every route the server answers, behind a yield for fairness between connections, metrics, the
/// request-head bounds, authentication, error rendering and the replication middleware (which
/// forwards writes to the leader and holds reads back on a cold store).
///
/// The middlewares wrap the routes once, around the whole router, rather than each route through
/// `Router::layer`: there every middleware boxes the route below it, and each request clones that
/// nest of boxes at every level (≈50 allocations per request for these six); here cloning the
/// stack only bumps reference counts. Every request still passes all six, unknown paths and
/// methods included.
pub fn router(state: Arc<AppState>) -> Router {
    use axum::middleware::from_fn_with_state;
    let middlewares = tower::ServiceBuilder::new()
        .layer(from_fn_with_state(state.clone(), front))
        .layer(from_fn_with_state(state.clone(), replication::route))
        .service(routes().with_state(state));
    Router::new().fallback_service(middlewares)
}

/// The server's own middlewares in front of the replication's, outermost first, as one layer:
/// each `from_fn` layer costs a boxed future and a boxed service per request.
async fn front(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let state = &*state;
    fair::yield_when_back_to_back(request, async |request| {
        metrics::track(state, request, async |request| {
            request_head::check(request, async |request| {
                auth::check(state, request, async |request| {
                    fallback::errors_as_status(state, request, async move |request| next.run(request).await).await
                })
                .await
            })
            .await
        })
        .await
    })
    .await
}

/// `/metrics` and the probes on the HTTPS port (behind authentication and authorization there;
/// the admin port serves them without, [`ApiServer::admin_router`]).
fn admin_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/metrics", get(metrics::serve))
        .route("/healthz", get(health::probes))
        .route("/livez", get(health::probes))
        .route("/readyz", get(health::probes))
        .route("/healthz/{check}", get(health::probes))
        .route("/livez/{check}", get(health::probes))
        .route("/readyz/{check}", get(health::probes))
}

/// The routes alone (the peer listener serves them to forwarded requests, without
/// authentication: the follower that forwards did it).
pub(crate) fn routes() -> Router<Arc<AppState>> {
    let group = numaresources_api::nrt::GROUP;
    let version = numaresources_api::nrt::VERSION;
    let plural = numaresources_api::nrt::PLURAL;
    let collection = format!("/apis/{group}/{version}/{plural}");
    let item = format!("{collection}/{{name}}");
    let watch_collection = format!("/apis/{group}/{version}/watch/{plural}");
    let watch_item = format!("{watch_collection}/{{name}}");
    Router::new()
        .route("/apis", get(discovery::apis))
        .route(&format!("/apis/{group}"), get(discovery::group).fallback(rest::method_not_allowed))
        .route(&format!("/apis/{group}/{version}"), get(discovery::resources).fallback(rest::method_not_allowed))
        .route(
            &collection,
            get(rest::list_or_watch)
                .post(rest::create)
                .delete(rest::delete_collection)
                .fallback(rest::method_not_allowed),
        )
        .route(
            &item,
            get(rest::get).put(rest::update).patch(rest::patch).delete(rest::delete).fallback(rest::method_not_allowed),
        )
        .route(&watch_collection, get(legacy_watch::collection))
        .route(&watch_item, get(legacy_watch::object))
        .route("/version", get(discovery::version))
        .route("/api", get(discovery::core))
        .route("/openapi/v2", get(openapi::v2))
        .route("/openapi/v3", get(openapi::v3_index))
        .route(&format!("/openapi/v3/apis/{group}/{version}"), get(openapi::v3))
        .merge(admin_routes())
        .fallback(rest::not_found)
}
