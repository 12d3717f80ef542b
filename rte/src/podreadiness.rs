//! The conditions the agent sets on its own Pod (as upstream's exporter does), which the
//! operator's DaemonSet lists as readiness gates (`controllers/src/render/rte.rs`): `PodresourcesFetched` after each scan and
//! `NodeTopologyUpdated` after each publish, `True`, or `False` with reason `ScanFailed` /
//! `UpdateFailed` and the error as the message.
//!
//! A condition is written only when its status or reason differs from what this process last
//! wrote successfully, so a healthy agent writes each condition once. The write is a strategic
//! merge patch of `status.conditions` through `pods/status`: pod conditions merge by `type`, so
//! the kubelet's own conditions (`Ready`, `ContainersReady`, …) are left alone, which a JSON merge
//! patch (it replaces the whole list) would not do. Upstream reads the Pod and replaces its
//! status (`update`); the patch needs no read and cannot conflict.

use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::publish::FIELD_MANAGER;

/// The RBAC rule the agent needs for its conditions.
pub(crate) const POD_STATUS_RBAC: &str = "pods/status (in the agent's namespace): patch";

/// The longest message written; longer errors are cut (on a character boundary) with `…`.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;

/// How long one status write may take before it counts as failed.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The Pod the agent runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnPod {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl fmt::Display for OwnPod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The two conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// The kubelet's pod resources (and sysfs) were read.
    PodresourcesFetched,
    /// The node's NodeResourceTopology was written (or needed no write).
    NodeTopologyUpdated,
}

impl ConditionType {
    /// The condition type as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PodresourcesFetched => "PodresourcesFetched",
            Self::NodeTopologyUpdated => "NodeTopologyUpdated",
        }
    }

    /// The reason written with `False`.
    pub(crate) fn failure_reason(self) -> &'static str {
        match self {
            Self::PodresourcesFetched => "ScanFailed",
            Self::NodeTopologyUpdated => "UpdateFailed",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::PodresourcesFetched => 0,
            Self::NodeTopologyUpdated => 1,
        }
    }
}

/// One condition to set: `True`, or `False` with the failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// Which condition.
    pub kind: ConditionType,
    /// `None` for `True`; the error message for `False`.
    pub failure: Option<String>,
}

impl Condition {
    /// The condition holds.
    pub fn ok(kind: ConditionType) -> Self {
        Self { kind, failure: None }
    }

    /// The condition does not hold because of `error`.
    pub fn failed(kind: ConditionType, error: &dyn fmt::Display) -> Self {
        Self { kind, failure: Some(truncate(error.to_string())) }
    }

    /// `True` or `False`.
    pub fn status(&self) -> &'static str {
        if self.failure.is_none() { "True" } else { "False" }
    }

    /// The reason; none for `True`.
    pub fn reason(&self) -> Option<&'static str> {
        self.failure.as_ref().map(|_| self.kind.failure_reason())
    }

    /// What decides whether a write is needed: status and reason, never the message.
    fn state(&self) -> (&'static str, Option<&'static str>) {
        (self.status(), self.reason())
    }
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES - '…'.len_utf8();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// The strategic merge patch that sets `condition` at `now`. A `True` condition sends `null`
/// reason and message, which removes a failure's leftovers from the merged element.
pub(crate) fn status_patch(condition: &Condition, now: &Time) -> Value {
    json!({
        "status": {
            "conditions": [{
                "type": condition.kind.as_str(),
                "status": condition.status(),
                "lastTransitionTime": now,
                "reason": condition.reason(),
                "message": condition.failure,
            }]
        }
    })
}

/// What was last written, per condition. Pure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tracker {
    written: [Option<(&'static str, Option<&'static str>)>; 2],
}

impl Tracker {
    /// Whether `condition` differs from what was last written (or nothing was).
    pub(crate) fn needs_write(&self, condition: &Condition) -> bool {
        self.written[condition.kind.index()] != Some(condition.state())
    }

    /// Records a successful write.
    pub fn record(&mut self, condition: &Condition) {
        self.written[condition.kind.index()] = Some(condition.state());
    }

    /// Forgets a condition, so the next one is written whatever it is.
    pub(crate) fn forget(&mut self, kind: ConditionType) {
        self.written[kind.index()] = None;
    }
}

/// Why a condition could not be written; logged and counted, never fatal.
#[derive(Debug, thiserror::Error)]
pub enum ConditionError {
    /// The API server answered with an error.
    #[error(
        "cannot set condition {kind} on pod {pod}: {source} (the agent's ServiceAccount needs RBAC on {POD_STATUS_RBAC})"
    )]
    Api {
        /// The condition type.
        kind: &'static str,
        /// The pod.
        pod: OwnPod,
        /// What the client said.
        #[source]
        source: kube::Error,
    },
    /// No answer in time.
    #[error("cannot set condition {kind} on pod {pod}: no answer from the API server within {WRITE_TIMEOUT:?}")]
    Timeout {
        /// The condition type.
        kind: &'static str,
        /// The pod.
        pod: OwnPod,
    },
}

/// Writes the conditions of the agent's own Pod through the Kubernetes API.
#[derive(Debug, Clone)]
pub struct PodConditions {
    pods: kube::Api<Pod>,
    pod: OwnPod,
    tracker: Tracker,
}

impl PodConditions {
    /// Conditions of `pod`, written through `client`.
    pub fn new(client: kube::Client, pod: OwnPod) -> Self {
        Self { pods: kube::Api::namespaced(client, &pod.namespace), pod, tracker: Tracker::default() }
    }

    /// The pod.
    pub fn pod(&self) -> &OwnPod {
        &self.pod
    }

    /// Sets `condition` if its status or reason changed since the last successful write.
    /// Returns whether it wrote. After a failure the condition is written again next time.
    pub async fn set(&mut self, condition: &Condition) -> Result<bool, ConditionError> {
        if !self.tracker.needs_write(condition) {
            return Ok(false);
        }
        let patch = status_patch(condition, &Time(Timestamp::now()));
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        let kind = condition.kind.as_str();
        let patch = Patch::Strategic(patch);
        let write = self.pods.patch_status(&self.pod.name, &params, &patch);
        let result = match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(source)) => Err(ConditionError::Api { kind, pod: self.pod.clone(), source }),
            Err(_) => Err(ConditionError::Timeout { kind, pod: self.pod.clone() }),
        };
        match &result {
            Ok(_) => self.tracker.record(condition),
            Err(_) => self.tracker.forget(condition.kind),
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_have_the_upstream_types_statuses_and_reasons() {
        use ConditionType::{NodeTopologyUpdated, PodresourcesFetched};
        let cases = [
            (Condition::ok(PodresourcesFetched), "PodresourcesFetched", "True", None),
            (Condition::failed(PodresourcesFetched, &"boom"), "PodresourcesFetched", "False", Some("ScanFailed")),
            (Condition::ok(NodeTopologyUpdated), "NodeTopologyUpdated", "True", None),
            (Condition::failed(NodeTopologyUpdated, &"boom"), "NodeTopologyUpdated", "False", Some("UpdateFailed")),
        ];
        for (condition, kind, status, reason) in cases {
            assert_eq!((condition.kind.as_str(), condition.status(), condition.reason()), (kind, status, reason));
        }
    }

    #[test]
    fn the_patch_merges_one_condition_by_type_and_clears_a_failure_when_true() {
        let now = Time(Timestamp::from_second(1_764_000_000).unwrap());
        let failed = Condition::failed(ConditionType::PodresourcesFetched, &"kubelet socket gone");
        assert_eq!(
            status_patch(&failed, &now),
            json!({"status": {"conditions": [{
                "type": "PodresourcesFetched", "status": "False", "lastTransitionTime": "2025-11-24T16:00:00Z",
                "reason": "ScanFailed", "message": "kubelet socket gone",
            }]}})
        );
        let ok = Condition::ok(ConditionType::NodeTopologyUpdated);
        assert_eq!(
            status_patch(&ok, &now),
            json!({"status": {"conditions": [{
                "type": "NodeTopologyUpdated", "status": "True", "lastTransitionTime": "2025-11-24T16:00:00Z",
                "reason": null, "message": null,
            }]}})
        );
    }

    #[test]
    fn only_a_change_of_status_or_reason_needs_a_write() {
        use ConditionType::{NodeTopologyUpdated, PodresourcesFetched};
        let mut tracker = Tracker::default();
        let ok = Condition::ok(PodresourcesFetched);
        let failed = Condition::failed(PodresourcesFetched, &"first error");
        let failed_again = Condition::failed(PodresourcesFetched, &"another error");
        // (condition, written before?, needs a write)
        let steps = [(&ok, true), (&ok, false), (&failed, true), (&failed_again, false), (&ok, true)];
        for (i, (condition, want)) in steps.into_iter().enumerate() {
            assert_eq!(tracker.needs_write(condition), want, "step {i}");
            tracker.record(condition);
        }
        // The other condition is tracked on its own.
        assert!(tracker.needs_write(&Condition::ok(NodeTopologyUpdated)));
        tracker.forget(PodresourcesFetched);
        assert!(tracker.needs_write(&ok));
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let condition = Condition::failed(ConditionType::NodeTopologyUpdated, &long);
        let message = condition.failure.unwrap();
        assert!(message.len() <= MAX_MESSAGE_BYTES && message.ends_with('…'), "{}", message.len());
        let short = Condition::failed(ConditionType::NodeTopologyUpdated, &"short");
        assert_eq!(short.failure.as_deref(), Some("short"));
    }
}
