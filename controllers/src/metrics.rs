//! Prometheus metrics of the reconcilers (controller-rs's set): passes, failures by error kind,
//! and pass duration, labelled by controller.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of every series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `operator`, `scheduler` or `kubeletconfig`.
    pub controller: String,
}

/// Labels of the failure counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FailureLabels {
    /// As [`ControllerLabels`].
    pub controller: String,
    /// [`crate::Error::metric_label`].
    pub error: String,
}

/// The reconcilers' metrics, shared by every controller.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<ControllerLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("numaresources_controllers");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.005, 2.0, 12))
        });
        registry.register("reconciliations", "Reconcile passes", reconciles.clone());
        registry.register("reconcile_failures", "Reconcile passes that failed, by error kind", failures.clone());
        registry.register("reconcile_duration_seconds", "Time a reconcile pass took", duration.clone());
        Self { registry: Arc::new(registry), reconciles, failures, duration }
    }
}

impl Metrics {
    /// Starts timing a pass of `controller`; the pass counts when the guard is dropped.
    pub fn pass(&self, controller: &str) -> PassTimer {
        let labels = ControllerLabels { controller: controller.to_owned() };
        self.reconciles.get_or_create(&labels).inc();
        PassTimer { metrics: self.clone(), labels, start: Instant::now() }
    }

    /// Counts a failed pass.
    pub fn failure(&self, controller: &str, error: &crate::Error) {
        let labels = FailureLabels { controller: controller.to_owned(), error: error.metric_label().to_owned() };
        self.failures.get_or_create(&labels).inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &self.registry)?;
        Ok(body)
    }
}

/// Records a pass's duration when dropped.
#[derive(Debug)]
pub struct PassTimer {
    metrics: Metrics,
    labels: ControllerLabels,
    start: Instant,
}

impl Drop for PassTimer {
    fn drop(&mut self) {
        self.metrics.duration.get_or_create(&self.labels).observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_and_failures_are_counted_by_controller() {
        let metrics = Metrics::default();
        drop(metrics.pass("operator"));
        metrics.failure("operator", &crate::Error::NotYet("x".into()));
        let text = metrics.encode().unwrap();
        assert!(text.contains("numaresources_controllers_reconciliations_total{controller=\"operator\"} 1"), "{text}");
        assert!(text.contains("reconcile_failures_total{controller=\"operator\",error=\"waiting\"} 1"), "{text}");
        assert!(text.contains("numaresources_controllers_reconcile_duration_seconds_count{controller=\"operator\"} 1"));
    }
}
