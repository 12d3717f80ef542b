//! The agent's counters, exposed on `/metrics`.
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
//! They are registered into the process's one registry ([`Metrics::register`]), which the
//! runtime's admin router exposes (see [`crate::metrics_endpoint`] for where and how).

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::publish::Outcome;
use crate::trigger::Trigger;

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
    pub(crate) fn set_in_use(&self, in_use: bool) {
        self.in_use.set(i64::from(in_use));
    }

    /// One publish made through kube-apiserver because the direct path could not be used.
    pub(crate) fn fell_back(&self) {
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
    pub(crate) fn direct_path(&self) -> &DirectPathMetrics {
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

    /// Registers every metric into `registry`, each labelled `node`.
    pub fn register(&self, registry: &mut Registry, node: &str) {
        let registry = registry.sub_registry_with_label((Cow::Borrowed("node"), Cow::Owned(node.to_owned())));
        // Counters get their `_total` suffix from the encoder.
        numaresources_runtime::register_series!(registry,
            "rte_podresource_api_call_failures": "The total number of podresource api calls that failed by the updater" => self.podresource_failures,
            "rte_noderesourcetopology_writes": "The total number of NodeResourceTopology writes" => self.writes,
            "rte_operation_delay_milliseconds": "The latency between exporting stages, milliseconds" => self.operation_delay,
            "rte_wakeup_delay_milliseconds": "The wakeup delay of the monitor code (time since the previous scan started), milliseconds" => self.wakeup_delay,
        );
        numaresources_runtime::register_series!(registry.sub_registry_with_prefix("numaresources_rte"),
            "scans": "Scans started" => self.scans,
            "scan_failures": "Scans that failed before publishing (sysfs or kubelet)" => self.scan_failures,
            "kubelet_failures": "Scans that failed because the kubelet could not be asked" => self.kubelet_failures,
            "publishes": "Successful publishes (including --no-publish dry runs)" => self.publishes,
            "skipped_unchanged": "Scans whose topology equalled the last published one" => self.skipped_unchanged,
            "publish_failures": "Failed publishes" => self.publish_failures,
            "pod_condition_writes": "Own-pod condition writes that succeeded" => self.condition_writes,
            "pod_condition_failures": "Own-pod condition writes that failed" => self.condition_failures,
            "direct_write_in_use": "1 while publishes go to the NRT API server directly (--nrt-server), 0 otherwise" => self.direct.in_use,
            "direct_write_fallbacks": "Publishes made through kube-apiserver because the NRT API server could not be used directly" => self.direct.fallbacks,
        );
    }
}

#[cfg(test)]
mod tests {
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
        let mut registry = Registry::default();
        metrics.register(&mut registry, "worker-0");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
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
