//! The agent's counters and their Prometheus exposition on `/metrics` (`nrt-rte.md` §2.9).
//!
//! Upstream's metrics keep their names, labels and meanings, so existing dashboards read the
//! same: `rte_podresource_api_call_failures_total{function_name}`,
//! `rte_noderesourcetopology_writes_total{operation,trigger}`,
//! `rte_operation_delay_milliseconds{operation_name,trigger}` and
//! `rte_wakeup_delay_milliseconds{trigger}`, each with a `node` label. The rest of what the agent
//! counts is ours, under `numaresources_rte_`. Upstream's patch metrics
//! (`rte_noderesourcetopology_patch_*`) describe its diff-based patching, which this agent does
//! not do, so they are not exported.
//!
//! Exposition is OpenMetrics text over plain HTTP, or over HTTPS (`--metrics-mode=httptls`) with
//! a certificate from a mounted Secret that is reloaded when the kubelet swaps the files, the
//! cluster's TLS profile (minimum version, cipher suites) and optionally verified client
//! certificates.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::agent::Trigger;
use crate::publish::Outcome;

/// The content type of the exposition.
pub const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A podresources call, as upstream labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodResourcesCall {
    /// `List`.
    List,
    /// `GetAllocatableResources`.
    GetAllocatableResources,
}

impl PodResourcesCall {
    fn label(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::GetAllocatableResources => "get_allocatable_resources",
        }
    }
}

/// A timed stage, as upstream labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// The scan: sysfs discovery, the kubelet's answers, the assembly.
    PodresourcesScan,
    /// The publish.
    NodeResourceObjectUpdate,
}

impl Operation {
    fn label(self) -> &'static str {
        match self {
            Self::PodresourcesScan => "podresources_scan",
            Self::NodeResourceObjectUpdate => "node_resource_object_update",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FunctionLabels {
    function_name: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    operation: &'static str,
    trigger: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation_name: &'static str,
    trigger: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabels {
    trigger: &'static str,
}

type Milliseconds = Gauge<f64, AtomicU64>;

/// The direct write path's metrics (`--nrt-server`), shared with the publisher that switches.
#[derive(Debug, Clone, Default)]
pub struct DirectPathMetrics {
    in_use: Gauge,
    fallbacks: Counter,
}

impl DirectPathMetrics {
    /// Whether publishes go to the NRT API server directly now.
    pub fn set_in_use(&self, in_use: bool) {
        self.in_use.set(i64::from(in_use));
    }

    /// One publish made through kube-apiserver because the direct path could not be used.
    pub fn fell_back(&self) {
        self.fallbacks.inc();
    }

    /// (in use, fallbacks so far).
    pub fn get(&self) -> (bool, u64) {
        (self.in_use.get() == 1, self.fallbacks.get())
    }
}

/// Counters the agent keeps; shared with the `/metrics` server.
#[derive(Debug, Default)]
pub struct Metrics {
    scans: Counter,
    scan_failures: Counter,
    kubelet_failures: Counter,
    publishes: Counter,
    skipped_unchanged: Counter,
    publish_failures: Counter,
    condition_writes: Counter,
    condition_failures: Counter,
    podresource_failures: Family<FunctionLabels, Counter>,
    writes: Family<WriteLabels, Counter>,
    operation_delay: Family<OperationLabels, Milliseconds>,
    wakeup_delay: Family<TriggerLabels, Milliseconds>,
    direct: DirectPathMetrics,
}

/// A snapshot of [`Metrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Scans started.
    pub scans: u64,
    /// Scans that failed before publishing (discovery or kubelet).
    pub scan_failures: u64,
    /// Of those, the ones where the kubelet could not be asked.
    pub kubelet_failures: u64,
    /// Successful publishes.
    pub publishes: u64,
    /// Scans whose result equalled what was last published.
    pub skipped_unchanged: u64,
    /// Failed publishes.
    pub publish_failures: u64,
    /// Own-pod condition writes that succeeded.
    pub condition_writes: u64,
    /// Own-pod condition writes that failed.
    pub condition_failures: u64,
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl Metrics {
    /// The current values.
    pub fn snapshot(&self) -> Stats {
        Stats {
            scans: self.scans.get(),
            scan_failures: self.scan_failures.get(),
            kubelet_failures: self.kubelet_failures.get(),
            publishes: self.publishes.get(),
            skipped_unchanged: self.skipped_unchanged.get(),
            publish_failures: self.publish_failures.get(),
            condition_writes: self.condition_writes.get(),
            condition_failures: self.condition_failures.get(),
        }
    }

    /// The direct write path's metrics, for the publisher.
    pub fn direct_path(&self) -> &DirectPathMetrics {
        &self.direct
    }

    pub(crate) fn scan_started(&self, trigger: Trigger, since_last: Duration) {
        self.scans.inc();
        self.wakeup_delay.get_or_create(&TriggerLabels { trigger: trigger.as_str() }).set(millis(since_last));
    }

    pub(crate) fn scan_failed(&self, kubelet: bool) {
        self.scan_failures.inc();
        if kubelet {
            self.kubelet_failures.inc();
        }
    }

    pub(crate) fn podresources_call_failed(&self, call: PodResourcesCall) {
        self.podresource_failures.get_or_create(&FunctionLabels { function_name: call.label() }).inc();
    }

    pub(crate) fn took(&self, operation: Operation, trigger: Trigger, duration: Duration) {
        let labels = OperationLabels { operation_name: operation.label(), trigger: trigger.as_str() };
        self.operation_delay.get_or_create(&labels).set(millis(duration));
    }

    pub(crate) fn skipped(&self) {
        self.skipped_unchanged.inc();
    }

    pub(crate) fn published(&self, outcome: Outcome, trigger: Trigger) {
        self.publishes.inc();
        let operation = match outcome {
            Outcome::Created => "create",
            Outcome::Patched | Outcome::Replaced => "update",
            Outcome::DryRun => return,
        };
        self.writes.get_or_create(&WriteLabels { operation, trigger: trigger.as_str() }).inc();
    }

    pub(crate) fn publish_failed(&self) {
        self.publish_failures.inc();
    }

    pub(crate) fn condition_written(&self, ok: bool) {
        if ok {
            self.condition_writes.inc()
        } else {
            self.condition_failures.inc()
        };
    }

    /// A registry holding every metric, each labelled `node`.
    pub fn registry(&self, node: &str) -> Registry {
        let label = (Cow::Borrowed("node"), Cow::Owned(node.to_owned()));
        let mut registry = Registry::with_labels(std::iter::once(label));
        // Counters get their `_total` suffix from the encoder.
        registry.register(
            "rte_podresource_api_call_failures",
            "The total number of podresource api calls that failed by the updater",
            self.podresource_failures.clone(),
        );
        registry.register(
            "rte_noderesourcetopology_writes",
            "The total number of NodeResourceTopology writes",
            self.writes.clone(),
        );
        registry.register(
            "rte_operation_delay_milliseconds",
            "The latency between exporting stages, milliseconds",
            self.operation_delay.clone(),
        );
        registry.register(
            "rte_wakeup_delay_milliseconds",
            "The wakeup delay of the monitor code (time since the previous scan started), milliseconds",
            self.wakeup_delay.clone(),
        );
        let ours = registry.sub_registry_with_prefix("numaresources_rte");
        let counters: [(&str, &str, &Counter); 8] = [
            ("scans", "Scans started", &self.scans),
            ("scan_failures", "Scans that failed before publishing (sysfs or kubelet)", &self.scan_failures),
            ("kubelet_failures", "Scans that failed because the kubelet could not be asked", &self.kubelet_failures),
            ("publishes", "Successful publishes (including --no-publish dry runs)", &self.publishes),
            ("skipped_unchanged", "Scans whose topology equalled the last published one", &self.skipped_unchanged),
            ("publish_failures", "Failed publishes", &self.publish_failures),
            ("pod_condition_writes", "Own-pod condition writes that succeeded", &self.condition_writes),
            ("pod_condition_failures", "Own-pod condition writes that failed", &self.condition_failures),
        ];
        for (name, help, counter) in counters {
            ours.register(name, help, counter.clone());
        }
        ours.register(
            "direct_write_in_use",
            "1 while publishes go to the NRT API server directly (--nrt-server), 0 otherwise",
            self.direct.in_use.clone(),
        );
        ours.register(
            "direct_write_fallbacks",
            "Publishes made through kube-apiserver because the NRT API server could not be used directly",
            self.direct.fallbacks.clone(),
        );
        registry
    }

    /// The OpenMetrics text of every metric, labelled `node`.
    pub fn encode(&self, node: &str) -> Result<String, std::fmt::Error> {
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &self.registry(node))?;
        Ok(body)
    }
}

#[derive(Debug, Clone)]
struct Exposition {
    metrics: Arc<Metrics>,
    node: Arc<str>,
}

async fn serve_metrics(State(state): State<Exposition>) -> Response {
    match state.metrics.encode(&state.node) {
        Ok(body) => {
            let mut response = body.into_response();
            response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_OPENMETRICS));
            response
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode metrics: {error}")).into_response(),
    }
}

/// The metrics routes: `GET /metrics`.
pub fn router(metrics: Arc<Metrics>, node: &str) -> axum::Router {
    axum::Router::new().route("/metrics", get(serve_metrics)).with_state(Exposition { metrics, node: Arc::from(node) })
}

/// A bound metrics listener, ready to serve over plain HTTP or TLS.
pub struct MetricsServer {
    listener: tokio::net::TcpListener,
    tls: Option<TlsServing>,
}

/// What keeps HTTPS going: the configuration and the watcher that reloads its certificate.
struct TlsServing {
    config: Arc<rustls::ServerConfig>,
    _watcher: numaresources_certs::CertificateWatcher,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("address", &self.listener.local_addr().ok())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Why the metrics endpoint cannot start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsServerError {
    /// The address cannot be listened on.
    #[error("cannot listen for metrics on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate, key, client CA or TLS policy cannot be used.
    #[error("cannot serve metrics over TLS: {0}")]
    Tls(#[from] numaresources_certs::Error),
}

impl MetricsServer {
    /// Binds the endpoint's address and, for HTTPS, loads and starts watching the certificate.
    pub async fn bind(endpoint: &crate::config::MetricsEndpoint) -> Result<Self, MetricsServerError> {
        use numaresources_certs::{
            CaBundle, ClientCaVerifier, ReloadingCertificate, ServerConfigBuilder, WatchOptions,
        };
        let tls = match &endpoint.tls {
            None => None,
            Some(settings) => {
                let certificate = ReloadingCertificate::load(&settings.cert_file, &settings.key_file)?;
                let watcher = certificate.watch(WatchOptions::default())?;
                let mut builder = ServerConfigBuilder::new(Arc::new(certificate)).policy(settings.policy.clone());
                if let Some(ca_file) = &settings.client_ca_file {
                    let pem = std::fs::read(ca_file)
                        .map_err(|source| numaresources_certs::Error::Read { path: ca_file.clone(), source })?;
                    let bundle = CaBundle::from_pem(&pem)?;
                    builder = builder.client_cas(Arc::new(ClientCaVerifier::new(&[bundle])?));
                }
                Some(TlsServing { config: builder.build()?, _watcher: watcher })
            }
        };
        let address = endpoint.address;
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| MetricsServerError::Listen { address, source })?;
        Ok(Self { listener, tls })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `/metrics` until `shutdown` completes.
    pub async fn serve(
        self,
        metrics: Arc<Metrics>,
        node: &str,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        match self.tls {
            None => serve(self.listener, metrics, node, shutdown).await,
            Some(TlsServing { config, _watcher }) => {
                let address = self.listener.local_addr().ok();
                tracing::info!(?address, "serving metrics on /metrics (HTTPS)");
                numaresources_certs::serve(self.listener, config, router(metrics, node), shutdown).await
            }
        }
    }
}

/// Serves `/metrics` on `listener` over plain HTTP until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    node: &str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let address: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(?address, "serving metrics on /metrics (plain HTTP)");
    axum::serve(listener, router(metrics, node)).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn upstream_names_and_labels_and_ours_are_exported() {
        let metrics = Metrics::default();
        metrics.scan_started(Trigger::Periodic, Duration::from_millis(1500));
        metrics.podresources_call_failed(PodResourcesCall::GetAllocatableResources);
        metrics.scan_failed(true);
        metrics.scan_started(Trigger::Reactive, Duration::from_millis(20));
        metrics.took(Operation::PodresourcesScan, Trigger::Reactive, Duration::from_micros(2500));
        metrics.published(Outcome::Created, Trigger::Reactive);
        metrics.published(Outcome::Patched, Trigger::Periodic);
        metrics.published(Outcome::DryRun, Trigger::Periodic);
        let text = metrics.encode("worker-0").unwrap();
        for line in [
            "# TYPE rte_podresource_api_call_failures counter",
            r#"rte_podresource_api_call_failures_total{node="worker-0",function_name="get_allocatable_resources"} 1"#,
            r#"rte_noderesourcetopology_writes_total{node="worker-0",operation="create",trigger="reactive"} 1"#,
            r#"rte_noderesourcetopology_writes_total{node="worker-0",operation="update",trigger="periodic"} 1"#,
            r#"rte_operation_delay_milliseconds{node="worker-0",operation_name="podresources_scan",trigger="reactive"} 2.5"#,
            r#"rte_wakeup_delay_milliseconds{node="worker-0",trigger="periodic"} 1500.0"#,
            r#"numaresources_rte_scans_total{node="worker-0"} 2"#,
            r#"numaresources_rte_kubelet_failures_total{node="worker-0"} 1"#,
            r#"numaresources_rte_publishes_total{node="worker-0"} 3"#,
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert_eq!(metrics.snapshot().publishes, 3);
    }
}
