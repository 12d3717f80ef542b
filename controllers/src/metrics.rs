//! Prometheus metrics of the reconcilers (controller-rs's set): passes, failures by error kind,
//! and pass duration, labelled by controller; and the expiry of every certificate the
//! controllers keep themselves, labelled by its Secret.

use std::time::{Instant, SystemTime};

use numaresources_api::fit::explain::ReasonKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
    /// [`crate::context::Error::metric_label`].
    pub error: String,
}

/// The Secrets whose certificates the controllers issue and renew themselves: the only values of
/// the `secret` label, so the series stay few whatever happens.
pub const CERTIFICATE_SECRETS: [&str; 5] = [
    crate::names::CA_SECRET,
    crate::names::APISERVER_TLS_SECRET,
    crate::names::WEBHOOK_TLS_SECRET,
    crate::names::PEER_CA_SECRET,
    crate::names::PEER_SECRET,
];

/// Labels of the certificate expiry gauge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CertificateLabels {
    /// One of [`CERTIFICATE_SECRETS`].
    pub secret: String,
}

/// Labels of the unschedulable-pods gauge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    /// One of [`crate::placement::reason_labels`].
    pub reason: String,
}

/// The reconcilers' metrics, shared by every controller.
#[derive(Clone)]
pub struct Metrics {
    reconciles: Family<ControllerLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
    certificate_expiry: Family<CertificateLabels, Gauge>,
    unschedulable: Family<ReasonLabels, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.005, 2.0, 12))
        });
        let certificate_expiry = Family::<CertificateLabels, Gauge>::default();
        let unschedulable = Family::<ReasonLabels, Gauge>::default();
        Self { reconciles, failures, duration, certificate_expiry, unschedulable }
    }
}

impl Metrics {
    /// Registers every series in `registry`, under `numaresources_controllers_`.
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("numaresources_controllers");
        registry.register("reconciliations", "Reconcile passes", self.reconciles.clone());
        registry.register("reconcile_failures", "Reconcile passes that failed, by error kind", self.failures.clone());
        registry.register("reconcile_duration_seconds", "Time a reconcile pass took", self.duration.clone());
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the certificate the controllers keep in this Secret expires (the current CA's, for a CA Secret), \
             as Unix seconds",
            self.certificate_expiry.clone(),
        );
        registry.register(
            "unschedulable_pods",
            "Pods the NUMA-aware scheduler cannot place, by the most common reason the nodes refuse them",
            self.unschedulable.clone(),
        );
    }

    /// Counts the unschedulable pods by their first reason (None: no node refuses it by the
    /// NUMA rules); every label of the fixed set is set, to 0 when no pod has it.
    pub fn set_unschedulable(&self, reasons: impl IntoIterator<Item = Option<ReasonKind>>) {
        let mut counts: std::collections::HashMap<&'static str, i64> =
            crate::placement::reason_labels().map(|label| (label, 0)).collect();
        for reason in reasons {
            let label = reason.map_or(crate::placement::NO_NUMA_REASON, ReasonKind::label);
            *counts.entry(label).or_default() += 1;
        }
        for (reason, count) in counts {
            self.unschedulable.get_or_create(&ReasonLabels { reason: reason.to_owned() }).set(count);
        }
    }

    /// Starts timing a pass of `controller`; the pass counts when the guard is dropped.
    pub fn pass(&self, controller: &str) -> PassTimer {
        let labels = ControllerLabels { controller: controller.to_owned() };
        self.reconciles.get_or_create(&labels).inc();
        PassTimer { metrics: self.clone(), labels, start: Instant::now() }
    }

    /// Counts a failed pass.
    pub fn failure(&self, controller: &str, error: &crate::context::Error) {
        let labels = FailureLabels { controller: controller.to_owned(), error: error.metric_label().to_owned() };
        self.failures.get_or_create(&labels).inc();
    }

    /// Records when the certificate in `secret` (one of [`CERTIFICATE_SECRETS`]; any other name
    /// is ignored) expires, from its PEM; a PEM that does not parse leaves the last value.
    pub fn certificate_expiry(&self, secret: &str, cert_pem: &str) {
        let Some(not_after) = numaresources_runtime::tls::rotation::not_after(cert_pem) else { return };
        if !CERTIFICATE_SECRETS.contains(&secret) {
            return;
        }
        let seconds = match not_after.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            Err(_) => 0,
        };
        self.certificate_expiry.get_or_create(&CertificateLabels { secret: secret.to_owned() }).set(seconds);
    }

    /// Drops the series of `secret`: its certificate is no longer kept (the NRT API server,
    /// whose peer certificate it was, is gone), so an old expiry must not alert.
    pub fn forget_certificate(&self, secret: &str) {
        self.certificate_expiry.remove(&CertificateLabels { secret: secret.to_owned() });
    }

    /// The text exposition of these series alone.
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut registry = Registry::default();
        self.register(&mut registry);
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &registry)?;
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
        metrics.failure("operator", &crate::context::Error::NotYet("x".into()));
        let text = metrics.encode().unwrap();
        assert!(text.contains("numaresources_controllers_reconciliations_total{controller=\"operator\"} 1"), "{text}");
        assert!(text.contains("reconcile_failures_total{controller=\"operator\",error=\"waiting\"} 1"), "{text}");
        assert!(text.contains("numaresources_controllers_reconcile_duration_seconds_count{controller=\"operator\"} 1"));
    }

    #[test]
    fn certificate_expiry_is_exported_for_our_secrets_only_and_can_be_forgotten() {
        let metrics = Metrics::default();
        let authority =
            numaresources_runtime::tls::CertificateAuthority::generate("test", std::time::Duration::from_secs(86_400))
                .unwrap();
        let expiry = authority.not_after().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        let cert = authority.cert_pem();
        metrics.certificate_expiry(crate::names::CA_SECRET, cert);
        metrics.certificate_expiry("someone-elses-secret", cert);
        metrics.certificate_expiry(crate::names::WEBHOOK_TLS_SECRET, "not a certificate");
        let text = metrics.encode().unwrap();
        let series = "numaresources_controllers_certificate_expiry_timestamp_seconds";
        assert!(text.contains(&format!("{series}{{secret=\"numaresources-ca\"}} {expiry}\n")), "{text}");
        assert_eq!(text.matches(&format!("{series}{{")).count(), 1, "a fixed set of label values: {text}");
        metrics.forget_certificate(crate::names::CA_SECRET);
        assert!(!metrics.encode().unwrap().contains(&format!("{series}{{")));
    }
}
