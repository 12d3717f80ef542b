//! The admission webhook: defaults and validation of our custom resources, and routing of pods
//! to the NUMA-aware scheduler.
//!
//! ```text
//!  kube-apiserver ── POST AdmissionReview ──► handler: content type, size cap, decode (review)
//!                                               ├─ /mutate-pods            pods: QoS, exclusive resources,
//!                                               │                          routing decision (pure) → JSONPatch
//!                                               ├─ /mutate-nodetopology    custom_resources: persisted defaults
//!                                               └─ /validate-nodetopology  custom_resources: api validation + warnings
//!  watchers (kube-runtime) ──► ClusterCache: the NUMAResourcesScheduler, Namespace and Node metadata
//! ```
//!
//! Nothing on the request path talks to kube-apiserver: routing reads the reflector caches, and
//! until they are synced pods are admitted unchanged and `/readyz` fails. Every answer is an
//! `admission.k8s.io/v1` AdmissionReview; a pod webhook failure never blocks a pod (its
//! configuration fails open), a problem with one of our objects is denied with every field at
//! fault (fail closed).

mod activity;
mod cluster;
mod custom_resources;
mod handler;
mod health;
mod metrics;
mod pods;
pub mod review;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

pub use activity::{SUMMARY_INTERVAL, summarize_activity};
pub use cluster::{ClusterCache, Feed, Feeds, follow_cluster};

use crate::metrics::Metrics;

/// The pod-mutating webhook's path.
pub const MUTATE_PODS_PATH: &str = "/mutate-pods";
/// The path of the mutating webhook for `NUMAResourcesOperator` and `NUMAResourcesScheduler`.
pub const MUTATE_NODETOPOLOGY_PATH: &str = "/mutate-nodetopology";
/// The path of the validating webhook for `NUMAResourcesOperator` and `NUMAResourcesScheduler`.
pub const VALIDATE_NODETOPOLOGY_PATH: &str = "/validate-nodetopology";
/// Every webhook path this server answers.
pub const WEBHOOK_PATHS: [&str; 3] = [MUTATE_PODS_PATH, MUTATE_NODETOPOLOGY_PATH, VALIDATE_NODETOPOLOGY_PATH];

/// The annotation a routed pod gets: why it was sent to the NUMA-aware scheduler.
pub const ROUTING_ANNOTATION: &str = "nodetopology.openshift.io/scheduler-routing";
/// The annotation with which a pod opts out of routing, with the value [`OPT_OUT_VALUE`].
pub const OPT_OUT_ANNOTATION: &str = "nodetopology.openshift.io/scheduler";
/// The value of [`OPT_OUT_ANNOTATION`] that keeps a pod on the default scheduler.
pub const OPT_OUT_VALUE: &str = "default";
/// The namespace the components run in when not told otherwise; never routed.
pub const DEFAULT_NAMESPACE: &str = "numaresources";

/// The largest request body read. kube-apiserver caps a request at 3 MiB, and an UPDATE review
/// carries the object twice (`object` and `oldObject`), so twice that fits every real review.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;

/// The webhook's state: configuration, the cluster caches, metrics.
#[derive(Debug)]
pub struct Webhook {
    system: pods::SystemNamespaces,
    cluster: ClusterCache,
    metrics: Metrics,
    activity: activity::Activity,
}

impl Webhook {
    /// A webhook running in `namespace` (never routed, like the system namespaces), reading the
    /// cluster from `cluster`.
    pub fn new(namespace: impl Into<String>, cluster: ClusterCache) -> Self {
        Self {
            system: pods::SystemNamespaces::new(namespace),
            cluster,
            metrics: Metrics::default(),
            activity: activity::Activity::default(),
        }
    }
}

/// The HTTPS surface kube-apiserver calls: the three webhooks, plus `/healthz`, `/livez` and
/// `/readyz` for probes that go through TLS.
pub fn router(webhook: Arc<Webhook>) -> Router {
    Router::new()
        .route(MUTATE_PODS_PATH, post(handler::mutate_pods))
        .route(MUTATE_NODETOPOLOGY_PATH, post(handler::mutate_custom_resources))
        .route(VALIDATE_NODETOPOLOGY_PATH, post(handler::validate_custom_resources))
        .merge(health::probes())
        .with_state(webhook)
}

/// The plain-HTTP health port: `/healthz`, `/livez`, `/readyz` and `/metrics`.
pub fn health_router(webhook: Arc<Webhook>) -> Router {
    health::probes().route("/metrics", get(health::metrics)).with_state(webhook)
}
