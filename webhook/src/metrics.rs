//! Prometheus metrics (`numaresources_webhook_*`, on the admin port's `/metrics`): admissions by kind, operation and
//! verdict with their latency, pods routed by mode, pods left alone by reason.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::review::Verdict;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    kind: &'static str,
    operation: &'static str,
    decision: &'static str,
    dry_run: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// One admission, as counted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admission {
    /// `Pod`, `NUMAResourcesOperator`, `NUMAResourcesScheduler`, or `other`.
    pub kind: &'static str,
    /// `CREATE`…, or `unknown` when the request could not be read.
    pub operation: &'static str,
    pub verdict: Verdict,
    pub dry_run: bool,
}

/// The webhook's metrics.
pub(crate) struct Metrics {
    admissions: Family<AdmissionLabels, Counter>,
    latency: Family<KindLabels, Histogram>,
    routed: Family<ModeLabels, Counter>,
    skipped: Family<ReasonLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let admissions = Family::<AdmissionLabels, Counter>::default();
        // 25 µs to ≈0.8 s: admissions take tens of microseconds; kube-apiserver gives up at 10 s.
        let latency = Family::<KindLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.000_025, 2.0, 16))) as fn() -> Histogram,
        );
        let routed = Family::<ModeLabels, Counter>::default();
        let skipped = Family::<ReasonLabels, Counter>::default();
        Self { admissions, latency, routed, skipped }
    }
}

impl Metrics {
    /// Registers every series in `registry`, under `numaresources_webhook_`.
    pub fn register(&self, registry: &mut Registry) {
        numaresources_runtime::register_series!(registry.sub_registry_with_prefix("numaresources_webhook"),
            "admissions": "Admission reviews by kind, operation, decision (allowed, patched, denied, invalid) and dry run" => self.admissions,
            "admission_duration_seconds": "Time from the request's arrival to its answer, body read included" => self.latency,
            "pods_routed": "Pods sent to the NUMA-aware scheduler, by podRouting mode" => self.routed,
            "pods_skipped": "Pod creations left to their scheduler, by reason" => self.skipped,
        );
    }

    pub fn admitted(&self, admission: Admission, elapsed: Duration) {
        let labels = AdmissionLabels {
            kind: admission.kind,
            operation: admission.operation,
            decision: admission.verdict.label(),
            dry_run: if admission.dry_run { "true" } else { "false" },
        };
        self.admissions.get_or_create(&labels).inc();
        self.latency.get_or_create(&KindLabels { kind: admission.kind }).observe(elapsed.as_secs_f64());
    }

    pub fn routed(&self, mode: &'static str) {
        self.routed.get_or_create(&ModeLabels { mode }).inc();
    }

    pub fn skipped(&self, reason: &'static str) {
        self.skipped.get_or_create(&ReasonLabels { reason }).inc();
    }
}
