//! Admission of `NUMAResourcesOperator` and `NUMAResourcesScheduler`: persisted defaults
//! (mutating) and validation with warnings (validating). The webhook configurations fail closed
//! for these, so every decision here is about the object, never about our own health.
//!
//! What passes unchanged: DELETE (`object` is null) and CONNECT, subresources (`status` carries
//! nothing we default or judge), and kinds or versions we do not serve. The last only reaches us
//! through a misconfigured rule (`matchPolicy: Equivalent` converts other versions of our kinds to
//! v1 first), so it is admitted with a warning naming the mistake rather than blocking objects we
//! cannot judge.

mod defaulting;
mod validation;
mod warnings;

use std::collections::BTreeMap;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use numaresources_api::FieldErrors;
use numaresources_api::operator::validation::{validate_operator, validate_scheduler};
use numaresources_api::operator::{NUMAResourcesOperator, NUMAResourcesScheduler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Webhook;
use crate::review::{self, Answer, Reviewed, kind_label};

/// Which of the two webhooks is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `/mutate-nodetopology`: defaults.
    Mutate,
    /// `/validate-nodetopology`: validation and warnings.
    Validate,
}

/// What the webhook needs to know about one of our kinds.
trait OurKind: Serialize + DeserializeOwned + Clone {
    const KIND: &'static str;
    fn with_defaults(&self) -> Self;
    fn problems(&self) -> FieldErrors;
    fn warnings(&self, nodes: Option<&[BTreeMap<String, String>]>) -> Vec<String>;
}

impl OurKind for NUMAResourcesOperator {
    const KIND: &'static str = "NUMAResourcesOperator";
    fn with_defaults(&self) -> Self {
        defaulting::operator(self)
    }
    fn problems(&self) -> FieldErrors {
        validate_operator(self)
    }
    fn warnings(&self, nodes: Option<&[BTreeMap<String, String>]>) -> Vec<String> {
        warnings::operator(self, nodes)
    }
}

impl OurKind for NUMAResourcesScheduler {
    const KIND: &'static str = "NUMAResourcesScheduler";
    fn with_defaults(&self) -> Self {
        defaulting::scheduler(self)
    }
    fn problems(&self) -> FieldErrors {
        validate_scheduler(self)
    }
    fn warnings(&self, _nodes: Option<&[BTreeMap<String, String>]>) -> Vec<String> {
        warnings::scheduler(self)
    }
}

/// Answers one review body.
pub(crate) fn review(webhook: &Webhook, body: &[u8], mode: Mode) -> Reviewed {
    match review::decode::<DynamicObject>(body) {
        Ok(request) => Reviewed {
            answer: admit(webhook, &request, mode),
            kind: kind_label(&request.kind),
            operation: review::operation_name(&request.operation),
            dry_run: request.dry_run,
        },
        Err(malformed) => {
            tracing::debug!(uid = ?malformed.uid, "refusing a malformed review: {}", malformed.reason);
            webhook.activity.refused();
            Reviewed::unreadable(Answer::invalid(malformed.uid.as_deref(), &malformed.reason))
        }
    }
}

fn admit(webhook: &Webhook, request: &AdmissionRequest<DynamicObject>, mode: Mode) -> Answer {
    let allow = Answer::allow(&request.uid);
    if request.sub_resource.is_some() || matches!(request.operation, Operation::Delete | Operation::Connect) {
        return allow;
    }
    match kind_label(&request.kind) {
        "NUMAResourcesOperator" => judge::<NUMAResourcesOperator>(webhook, request, mode),
        "NUMAResourcesScheduler" => judge::<NUMAResourcesScheduler>(webhook, request, mode),
        _ => {
            let kind = &request.kind;
            tracing::warn!(uid = %request.uid, ?kind, "the webhook received a kind it does not handle: check its rules");
            allow.with_warnings(vec![format!(
                "the NUMA resources webhook does not handle {}/{} {}; admitted unchanged",
                kind.group, kind.version, kind.kind
            )])
        }
    }
}

fn judge<T: OurKind>(webhook: &Webhook, request: &AdmissionRequest<DynamicObject>, mode: Mode) -> Answer {
    let uid = request.uid.as_str();
    let Some(object) = &request.object else {
        return Answer::invalid(Some(uid), "a CREATE or UPDATE review without an object");
    };
    let name = object.metadata.name.as_deref().unwrap_or(&request.name);
    let raw = match serde_json::to_value(object) {
        Ok(raw) => raw,
        Err(error) => return Answer::invalid(Some(uid), &format!("re-encoding the object: {error}")),
    };
    let typed: T = match validation::decode(&raw) {
        Ok(typed) => typed,
        Err(errors) => return Answer::deny(uid, validation::invalid(T::KIND, name, &errors)),
    };
    match mode {
        Mode::Mutate => with_defaults(uid, &raw, &typed),
        Mode::Validate => {
            let problems = typed.problems();
            if !problems.is_empty() {
                return Answer::deny(uid, validation::invalid(T::KIND, name, &problems));
            }
            let nodes = webhook.cluster.node_labels();
            Answer::allow(uid).with_warnings(typed.warnings(nodes.as_deref()))
        }
    }
}

/// Allows the object with its missing defaults as a patch. Should the patch not apply to what
/// kube-apiserver sent (a bug, not a user error), the object is admitted as it is: the
/// controllers apply the same defaults when they read it.
fn with_defaults<T: OurKind>(uid: &str, raw: &Value, typed: &T) -> Answer {
    let allow = Answer::allow(uid);
    let patch = match defaulting::patch(typed, &typed.with_defaults()) {
        Ok(patch) => patch,
        Err(error) => {
            tracing::error!(%uid, kind = T::KIND, "computing the defaults: {error}");
            return allow;
        }
    };
    if let Err(error) = json_patch::patch(&mut raw.clone(), &patch.0) {
        tracing::error!(%uid, kind = T::KIND, "the defaults patch does not apply to the object: {error}");
        return allow;
    }
    match allow.clone().with_patch(&patch) {
        Ok(answer) => answer,
        Err(error) => {
            tracing::error!(%uid, kind = T::KIND, "encoding the defaults patch: {error}");
            allow
        }
    }
}
