//! Prometheus metrics on `/metrics`: requests by verb, resource and code with their latency,
//! open watches, the number of objects, and how long ago each node's exporter last reported
//! (a live node's object is never deleted for being late; this is how staleness shows), and
//! the fleet's NUMA headroom ([`crate::headroom`]), computed when scraped.
//!
//! Requests are counted before authentication, so every request label takes its value from a
//! fixed set (as kube-apiserver's `apiserver_request_total` does): an unknown HTTP method is
//! counted as `other`, and paths are folded into the resource (`noderesourcetopologies`, or
//! empty for every other path). Whatever a client sends, the request series stay bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::response::Response;
use numaresources_runtime::admin::{self, Checks};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::headroom::{CPU_STEPS, Headroom, MEMORY_STEPS_GIB, RESOURCE_KINDS};
use crate::request_info::Attributes;
use crate::{AppState, Store};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    resource: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: &'static str,
    resource: &'static str,
}

/// The `verb` of a request on any path other than the resource's, when its method is a standard
/// one (lower-case, as the resource verbs are spelled).
const NON_RESOURCE_VERBS: &[&str] = &["get", "head", "post", "put", "patch", "delete", "options"];
/// The `verb` of a request whose method is none of the above.
const OTHER_VERB: &str = "other";

/// The bounded `verb` and `resource` labels of a request.
fn request_labels(request: &Request) -> VerbLabels {
    match Attributes::of(request.method(), request.uri().path(), request.uri().query()) {
        Attributes::Resource { verb, .. } => VerbLabels { verb, resource: numaresources_api::nrt::PLURAL },
        Attributes::NonResource { verb, .. } => VerbLabels {
            verb: NON_RESOURCE_VERBS.iter().find(|known| **known == verb).copied().unwrap_or(OTHER_VERB),
            resource: "",
        },
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AtLeastCpus {
    at_least: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AtLeastGib {
    at_least_gib: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceKind {
    resource: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The fleet headroom gauges, set from [`Headroom`] on every scrape.
#[derive(Default)]
struct HeadroomGauges {
    zones: Gauge<i64, AtomicI64>,
    free_cpus: Family<AtLeastCpus, Gauge<i64, AtomicI64>>,
    free_memory: Family<AtLeastGib, Gauge<i64, AtomicI64>>,
    available: Family<ResourceKind, FloatGauge>,
    allocatable: Family<ResourceKind, FloatGauge>,
}

impl HeadroomGauges {
    fn set(&self, headroom: &Headroom) {
        self.zones.set(gauge_value(headroom.zones));
        for (step, count) in CPU_STEPS.iter().zip(headroom.zones_with_free_cpus) {
            self.free_cpus.get_or_create(&AtLeastCpus { at_least: *step }).set(gauge_value(count));
        }
        for (step, count) in MEMORY_STEPS_GIB.iter().zip(headroom.zones_with_free_memory) {
            self.free_memory.get_or_create(&AtLeastGib { at_least_gib: *step }).set(gauge_value(count));
        }
        for (kind, (available, allocatable)) in
            RESOURCE_KINDS.iter().zip(headroom.available.iter().zip(&headroom.allocatable))
        {
            self.available.get_or_create(&ResourceKind { resource: kind }).set(*available);
            self.allocatable.get_or_create(&ResourceKind { resource: kind }).set(*allocatable);
        }
    }
}

fn gauge_value(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The gauges read off the store when scraped: the object count, each node's report age and
/// the fleet headroom.
#[derive(Default)]
struct StoreGauges {
    /// Held through a refresh and its encoding, so two scrapes at once do not interleave.
    scraping: std::sync::Mutex<()>,
    objects: Gauge<i64, AtomicI64>,
    report_age: Family<NodeLabels, Gauge<i64, AtomicI64>>,
    headroom: HeadroomGauges,
}

impl StoreGauges {
    fn refresh(&self, store: &Store) {
        let snapshot = store.snapshot();
        self.objects.set(gauge_value(snapshot.items.len() as u64));
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        self.report_age.clear();
        for stored in &snapshot.items {
            let age = now.saturating_sub(stored.last_report_unix());
            self.report_age.get_or_create(&NodeLabels { node: stored.name().to_owned() }).set(gauge_value(age));
        }
        let objects: Vec<_> = snapshot.items.iter().filter_map(|stored| stored.object().ok()).collect();
        self.headroom.set(&Headroom::of(objects.iter().map(|object| object.as_ref())));
    }
}

/// [`StoreGauges`] as a collector: refreshed from the store on each scrape, then encoded.
struct StoreCollector {
    store: Arc<Store>,
    gauges: Arc<StoreGauges>,
}

impl std::fmt::Debug for StoreCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreCollector").finish_non_exhaustive()
    }
}

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let gauges = &self.gauges;
        let _scraping = gauges.scraping.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        gauges.refresh(&self.store);
        let headroom = &gauges.headroom;
        let mut one = |name: &str, help: &str, metric: &dyn EncodeMetric| {
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
        };
        one("objects", "NodeResourceTopology objects in the store", &gauges.objects)?;
        one(
            "node_report_age_seconds",
            "Seconds since each node's exporter last reported, changed or not",
            &gauges.report_age,
        )?;
        one("fleet_numa_zones", "NUMA zones (type Node) across every NRT", &headroom.zones)?;
        one("fleet_numa_zones_free_cpus", "NUMA zones with at least `at_least` CPUs available", &headroom.free_cpus)?;
        one(
            "fleet_numa_zones_free_memory",
            "NUMA zones with at least `at_least_gib` GiB of memory available",
            &headroom.free_memory,
        )?;
        one(
            "fleet_numa_available",
            "Available amount summed over every NUMA zone, by resource (CPUs; bytes; other: device counts)",
            &headroom.available,
        )?;
        one(
            "fleet_numa_allocatable",
            "Allocatable amount summed over every NUMA zone, by resource (CPUs; bytes; other: device counts)",
            &headroom.allocatable,
        )
    }
}

/// The server's metrics.
pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    latency: Family<VerbLabels, Histogram>,
    watches: Gauge<i64, AtomicI64>,
    terminated_watches: Counter,
    store_gauges: Arc<StoreGauges>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(
                (|| Histogram::new(exponential_buckets(0.000_05, 2.0, 16))) as fn() -> Histogram,
            ),
            watches: Gauge::default(),
            terminated_watches: Counter::default(),
            store_gauges: Arc::default(),
        }
    }
}

impl Metrics {
    /// Registers the series in `registry` (the server's prefix is the caller's), the store's
    /// gauges as read off `store` on each scrape.
    pub fn register(&self, registry: &mut Registry, store: Arc<Store>) {
        numaresources_runtime::register_series!(registry,
            "requests": "Requests by verb, resource and HTTP code" => self.requests,
            "request_duration_seconds": "Request latency by verb and resource (watches: time to first byte)" => self.latency,
            "watches": "Open watch streams" => self.watches,
            "terminated_watches": "Watches ended because their client stopped reading (the client resumes from its last event)" => self.terminated_watches,
        );
        registry.register_collector(Box::new(StoreCollector { store, gauges: self.store_gauges.clone() }));
    }
}

/// Counts an open watch while alive.
#[derive(Debug)]
pub(crate) struct WatchGuard {
    open: Gauge<i64, AtomicI64>,
    terminated: Counter,
}

impl WatchGuard {
    /// Counts this watch as ended because its client stopped reading.
    pub fn terminated(&self) {
        self.terminated.inc();
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Metrics {
    /// Marks a watch as open until the guard drops.
    pub(crate) fn watch_opened(&self) -> WatchGuard {
        self.watches.inc();
        WatchGuard { open: self.watches.clone(), terminated: self.terminated_watches.clone() }
    }
}

/// The middleware recording every request.
pub(crate) async fn track(state: &AppState, request: Request, next: impl AsyncFnOnce(Request) -> Response) -> Response {
    let labels = request_labels(&request);
    let start = Instant::now();
    let response = next(request).await;
    let metrics = &state.metrics;
    metrics.latency.get_or_create(&labels).observe(start.elapsed().as_secs_f64());
    let VerbLabels { verb, resource } = labels;
    metrics.requests.get_or_create(&RequestLabels { verb, resource, code: response.status().as_u16() }).inc();
    response
}

/// `GET /metrics` on the HTTPS port: the runtime's admin router encodes the server's registry
/// (the same series the admin port serves).
pub async fn serve(State(state): State<Arc<AppState>>, request: Request) -> Response {
    crate::health::answer_with(admin::router(Checks::new(), state.metrics_registry.clone()), request).await
}
