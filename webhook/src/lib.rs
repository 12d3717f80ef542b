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
mod metrics;
mod pods;
pub mod review;

use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::routing::post;
use numaresources_runtime::InvalidConfig;
use numaresources_runtime::admin::{self, Checks};
use prometheus_client::registry::Registry;

pub use cluster::{ClusterCache, Feeds};

use crate::metrics::Metrics;

pub use numaresources_api::webhook::MUTATE_PODS_PATH;
/// The path of the mutating webhook for `NUMAResourcesOperator` and `NUMAResourcesScheduler`.
pub const MUTATE_NODETOPOLOGY_PATH: &str = "/mutate-nodetopology";
/// The path of the validating webhook for `NUMAResourcesOperator` and `NUMAResourcesScheduler`.
pub const VALIDATE_NODETOPOLOGY_PATH: &str = "/validate-nodetopology";
/// Every webhook path this server answers.
pub const WEBHOOK_PATHS: [&str; 3] = [MUTATE_PODS_PATH, MUTATE_NODETOPOLOGY_PATH, VALIDATE_NODETOPOLOGY_PATH];

/// The annotation a routed pod gets: why it was sent to the NUMA-aware scheduler.
pub const ROUTING_ANNOTATION: &str = "nodetopology.openshift.io/scheduler-routing";
/// The annotation with which a pod opts out of routing, with the value [`OPT_OUT_VALUE`].
pub(crate) const OPT_OUT_ANNOTATION: &str = "nodetopology.openshift.io/scheduler";
/// The value of [`OPT_OUT_ANNOTATION`] that keeps a pod on the default scheduler.
pub(crate) const OPT_OUT_VALUE: &str = "default";

/// The largest request body read. kube-apiserver caps a request at 3 MiB, and an UPDATE review
/// carries the object twice (`object` and `oldObject`), so twice that fits every real review.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;

/// The webhook's configuration, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    namespace: String,
}

impl Config {
    /// The webhook of the components running in `namespace` (never routed, like the system
    /// namespaces); refused unless it is a namespace name.
    pub fn new(namespace: impl Into<String>) -> Result<Self, InvalidConfig> {
        let namespace = namespace.into();
        let problems = numaresources_api::metadata::dns1123_subdomain(&namespace)
            .into_iter()
            .map(|problem| format!("namespace {namespace:?}: {problem}"))
            .collect();
        InvalidConfig::check(Self { namespace }, problems)
    }
}

/// The webhook: configuration, the cluster caches, metrics. Shared by every request.
pub struct Webhook {
    system: pods::SystemNamespaces,
    cluster: ClusterCache,
    metrics: Metrics,
    activity: activity::Activity,
    /// The watches that fill `cluster`, taken by [`Webhook::run`]; none when the caches are fed
    /// by hand ([`Webhook::with_cluster`]).
    watches: Mutex<Option<(kube::Client, Feeds)>>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook").field("system", &self.system).field("cluster", &self.cluster).finish_non_exhaustive()
    }
}

impl Webhook {
    /// The webhook of `config`, its caches filled from kube-apiserver through `client` once
    /// [`Webhook::run`] runs.
    pub fn new(config: Config, client: kube::Client) -> Arc<Self> {
        let (cluster, feeds) = ClusterCache::new();
        Self::build(config, cluster, Some((client, feeds)))
    }

    /// The webhook of `config` reading caches fed by hand through the [`Feeds`] of `cluster`
    /// (tests, benchmarks).
    pub fn with_cluster(config: Config, cluster: ClusterCache) -> Arc<Self> {
        Self::build(config, cluster, None)
    }

    fn build(config: Config, cluster: ClusterCache, watches: Option<(kube::Client, Feeds)>) -> Arc<Self> {
        Arc::new(Self {
            system: pods::SystemNamespaces::new(config.namespace),
            cluster,
            metrics: Metrics::default(),
            activity: activity::Activity::default(),
            watches: Mutex::new(watches),
        })
    }

    /// The HTTPS surface kube-apiserver calls: the three webhooks, plus `/healthz`, `/livez` and
    /// `/readyz` for probes that go through TLS.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route(MUTATE_PODS_PATH, post(handler::mutate_pods))
            .route(MUTATE_NODETOPOLOGY_PATH, post(handler::mutate_custom_resources))
            .route(VALIDATE_NODETOPOLOGY_PATH, post(handler::validate_custom_resources))
            .with_state(self.clone())
            .merge(admin::probes(self.readiness()))
    }

    /// What `/readyz` checks: the caches routing reads (the scheduler, the namespaces) have
    /// completed their first list, so answers are correct.
    pub fn readiness(&self) -> Checks {
        self.cluster.readiness()
    }

    /// Registers the webhook's metrics (`numaresources_webhook_*`) in the process's registry.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.metrics.register(registry);
    }

    /// Follows the cluster into the caches (unless they are fed by hand) and logs the activity
    /// summary, until `shutdown` completes.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner).take();
        let follow = async move {
            match watches {
                Some((client, feeds)) => cluster::follow_cluster(client, feeds).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = follow => {}
            () = activity::summarize_activity(self.clone()) => {}
            () = shutdown => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_namespace_must_be_a_namespace_name() {
        assert!(super::Config::new(numaresources_api::DEFAULT_NAMESPACE).is_ok());
        let refused = super::Config::new("Numa Resources").unwrap_err().to_string();
        assert!(
            refused.starts_with("invalid configuration: namespace \"Numa Resources\": a lowercase RFC 1123"),
            "{refused}"
        );
    }
}
