//! The upstream operator's condition model: `Available`, `Upgradeable`, `Progressing` and `Degraded`
//! behave as one state. Setting one rewrites all four (`Available` also sets `Upgradeable`), the
//! others are `False` with their own type as reason, and every condition carries the
//! generation it describes. A condition keeps its `lastTransitionTime` while its status holds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use numaresources_api::operator::ObjectReference;

use crate::context::Context;

/// `Available`.
pub const AVAILABLE: &str = "Available";
/// `Upgradeable`.
pub const UPGRADEABLE: &str = "Upgradeable";
/// `Progressing`.
pub const PROGRESSING: &str = "Progressing";
/// `Degraded`.
pub const DEGRADED: &str = "Degraded";

/// Reason of `Available`.
pub const REASON_AS_EXPECTED: &str = "AsExpected";
/// Progressing: an exporter DaemonSet has not rolled out yet.
pub const REASON_DAEMONSET_UPDATING: &str = "DaemonSetIsUpdating";
/// Progressing: a Deployment has not become available yet.
pub const REASON_DEPLOYMENT_UPDATING: &str = "Progressing";
/// Degraded: an API call failed.
pub const REASON_INTERNAL_ERROR: &str = "InternalError";
/// Degraded: the node groups are invalid or cannot be resolved.
pub const REASON_VALIDATION: &str = "ValidationErrorUnderNodeGroups";
/// Degraded: `imageSpec` set while custom exporter images are restricted.
pub const REASON_CUSTOM_IMAGE: &str = "CustomUserImage";
/// Degraded: the operator object is not named `numaresourcesoperator`.
pub const REASON_OPERATOR_NAME: &str = "IncorrectNUMAResourcesOperatorResourceName";
/// Degraded: the scheduler object is not named `numaresourcesscheduler`.
pub const REASON_SCHEDULER_NAME: &str = "IncorrectNUMAResourcesSchedulerResourceName";
/// Degraded: the scheduler image is missing or not allowed (upstream's reason for the same check).
pub const REASON_SCHEDULER_IMAGE: &str = "InvalidSchedulerImage";
/// Degraded: another scheduler field is invalid (ours: upstream leaves these to the schema).
pub const REASON_SCHEDULER_INVALID: &str = "InvalidSchedulerSpec";
/// Degraded: the object does not parse into our types although the CRD schema accepted it
/// (ours: upstream's typed cache cannot even hold such an object).
pub const REASON_MALFORMED: &str = "MalformedObject";
/// Degraded: a NodeResourceTopology CRD already serves the API we would serve.
pub const REASON_NRT_CRD_PRESENT: &str = "NodeResourceTopologyCRDPresent";
/// Degraded: kube-apiserver is older than the minimum supported version.
pub const REASON_UNSUPPORTED_KUBERNETES: &str = "UnsupportedKubernetesVersion";

/// Extra NRO condition: whether the kubelets of each node group agree on the topology manager.
pub const KUBELET_CONFIG_CONSISTENT: &str = "KubeletConfigConsistent";
/// Extra NRO condition: whether every node's kubelet can give NUMA-aligned placement (static
/// CPU manager, Static memory manager, a Topology Manager policy that aligns); False names the
/// nodes and what each lacks.
pub const KUBELET_NUMA_ALIGNED: &str = "KubeletNUMAAligned";
/// Extra NRS condition: whether the scheduler image runs every setting of the spec (False names
/// what is not rendered for it, or that the image is not one whose capabilities are known).
pub const SCHEDULER_IMAGE_COMPATIBLE: &str = "SchedulerImageCompatible";
/// Extra NRS condition: whether the plugin runs its own pod informer.
pub const DEDICATED_INFORMER_ACTIVE: &str = "DedicatedInformerActive";
/// Extra NRS condition: the engine is the stock kube-scheduler with our extender (True) or
/// scheduler-plugins' NodeResourceTopologyMatch (False); the message names the image.
pub const EXTENDER_ENGINE_ACTIVE: &str = "ExtenderEngineActive";

/// Which of the one-hot base conditions is true, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Everything is deployed and ready.
    Available,
    /// Applied, waiting for a rollout.
    Progressing { reason: String, message: String },
    /// Something is wrong that a person must look at.
    Degraded { reason: String, message: String },
}

impl State {
    /// Progressing with a reason and message.
    pub fn progressing(reason: &str, message: impl Into<String>) -> Self {
        Self::Progressing { reason: reason.to_owned(), message: message.into() }
    }

    /// Degraded with a reason and message.
    pub fn degraded(reason: &str, message: impl Into<String>) -> Self {
        Self::Degraded { reason: reason.to_owned(), message: message.into() }
    }
}

/// A condition outside the base four, set as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extra {
    /// Condition type.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// The conditions for `state` (plus `extras`), keeping transition times from `existing` where
/// a condition's status did not change.
pub fn conditions(existing: &[Condition], state: &State, extras: &[Extra], generation: Option<i64>) -> Vec<Condition> {
    let (true_type, reason, message) = match state {
        State::Available => (AVAILABLE, REASON_AS_EXPECTED, ""),
        State::Progressing { reason, message } => (PROGRESSING, reason.as_str(), message.as_str()),
        State::Degraded { reason, message } => (DEGRADED, reason.as_str(), message.as_str()),
    };
    let mut out = Vec::with_capacity(4 + extras.len());
    for type_ in [AVAILABLE, UPGRADEABLE, PROGRESSING, DEGRADED] {
        let is_true = type_ == true_type || (type_ == UPGRADEABLE && true_type == AVAILABLE);
        let (reason, message) = if type_ == true_type {
            (reason, message)
        } else if is_true {
            (REASON_AS_EXPECTED, "")
        } else {
            (type_, "")
        };
        out.push(condition(existing, type_, if is_true { "True" } else { "False" }, reason, message, generation));
    }
    for extra in extras {
        out.push(condition(existing, extra.type_, extra.status, &extra.reason, &extra.message, generation));
    }
    out
}

fn condition(
    existing: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    let previous = existing.iter().find(|c| c.type_ == type_);
    let last_transition_time = match previous {
        Some(previous) if previous.status == status => previous.last_transition_time.clone(),
        _ => Time(Timestamp::now()),
    };
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time,
    }
}

/// True when two condition lists say the same, transition times aside.
pub fn same(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.type_ == b.type_
                && a.status == b.status
                && a.reason == b.reason
                && a.message == b.message
                && a.observed_generation == b.observed_generation
        })
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Publishes an Event about `regarding` when its state changed from `previous`: a Warning when it
/// turns Degraded (or is Degraded for another reason), a Normal one with `available_note` when it
/// becomes Available.
pub async fn announce(
    ctx: &Context,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
    previous: &[Condition],
    state: &State,
    available_note: impl FnOnce() -> String,
) {
    let was = |type_: &str, reason: &str| {
        find(previous, type_).is_some_and(|c| c.status == "True" && (reason.is_empty() || c.reason == reason))
    };
    match state {
        State::Degraded { reason, message } if !was(DEGRADED, reason) => {
            ctx.event(regarding, EventType::Warning, reason, "Reconcile", message.clone()).await;
        }
        State::Available if !was(AVAILABLE, "") => {
            ctx.event(regarding, EventType::Normal, "Available", "Reconcile", available_note()).await;
        }
        _ => {}
    }
}

/// A `relatedObjects` entry (an empty namespace or name: cluster-scoped, or every object).
pub fn related(group: &str, resource: &str, namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        group: group.to_owned(),
        resource: resource.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(conditions: &[Condition]) -> Vec<(&str, &str, &str)> {
        conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str())).collect()
    }

    #[test]
    fn base_conditions_are_one_hot() {
        type Expected = [(&'static str, &'static str, &'static str); 4];
        let rows: [(State, Expected); 3] = [
            (
                State::Available,
                [
                    ("Available", "True", "AsExpected"),
                    ("Upgradeable", "True", "AsExpected"),
                    ("Progressing", "False", "Progressing"),
                    ("Degraded", "False", "Degraded"),
                ],
            ),
            (
                State::progressing(REASON_DAEMONSET_UPDATING, "waiting"),
                [
                    ("Available", "False", "Available"),
                    ("Upgradeable", "False", "Upgradeable"),
                    ("Progressing", "True", "DaemonSetIsUpdating"),
                    ("Degraded", "False", "Degraded"),
                ],
            ),
            (
                State::degraded(REASON_VALIDATION, "bad"),
                [
                    ("Available", "False", "Available"),
                    ("Upgradeable", "False", "Upgradeable"),
                    ("Progressing", "False", "Progressing"),
                    ("Degraded", "True", "ValidationErrorUnderNodeGroups"),
                ],
            ),
        ];
        for (state, expected) in rows {
            let got = conditions(&[], &state, &[], Some(3));
            assert_eq!(status_of(&got), expected.to_vec(), "{state:?}");
            assert!(got.iter().all(|c| c.observed_generation == Some(3)));
        }
    }

    #[test]
    fn transition_time_kept_while_status_holds() {
        let old = Time(Timestamp::UNIX_EPOCH);
        let mut first = conditions(&[], &State::Available, &[], Some(1));
        for c in &mut first {
            c.last_transition_time = old.clone();
        }
        let again = conditions(&first, &State::Available, &[], Some(2));
        assert!(again.iter().all(|c| c.last_transition_time == old));
        let degraded = conditions(&first, &State::degraded(REASON_INTERNAL_ERROR, "x"), &[], Some(2));
        let available = find(&degraded, AVAILABLE).map(|c| c.last_transition_time.clone());
        assert_ne!(available, Some(old.clone()));
        let progressing = find(&degraded, PROGRESSING).map(|c| c.last_transition_time.clone());
        assert_eq!(progressing, Some(old), "Progressing stayed False");
        assert!(same(&again, &conditions(&[], &State::Available, &[], Some(2))));
    }
}
