//! Pod CREATE admission: decide from the caches whether the pod goes to the NUMA-aware
//! scheduler, and if so answer with a patch that names it and says why.

mod routing;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;

pub(crate) use routing::{DEFAULT_SCHEDULER, Decision, NamespaceLabels, RoutingPolicy, SkipReason, SystemNamespaces};

use crate::review::{self, Answer, Malformed, Reviewed, kind_label};
use crate::{ROUTING_ANNOTATION, Webhook};

/// Answers one pod review body; the decision is there for a CREATE that was decided.
pub(crate) fn review(webhook: &Webhook, body: &[u8]) -> (Reviewed, Option<Decision>) {
    match review::decode::<Pod>(body) {
        Ok(request) => admit(webhook, &request),
        // The review is fine but the pod is not a pod we can read: fail open, as the webhook's
        // failurePolicy would.
        Err(Malformed { uid: Some(uid), envelope_ok: true, reason }) => {
            tracing::debug!(%uid, "admitting a pod the webhook cannot read: {reason}");
            webhook.activity.refused();
            let answer = Answer::allow(&uid)
                .with_warnings(vec!["the NUMA resources webhook could not read this pod; it was not routed".into()]);
            (Reviewed::unreadable(answer), None)
        }
        Err(malformed) => {
            tracing::debug!(uid = ?malformed.uid, "refusing a malformed pod review: {}", malformed.reason);
            webhook.activity.refused();
            (Reviewed::unreadable(Answer::invalid(malformed.uid.as_deref(), &malformed.reason)), None)
        }
    }
}

fn admit(webhook: &Webhook, request: &AdmissionRequest<Pod>) -> (Reviewed, Option<Decision>) {
    let mut reviewed = Reviewed {
        answer: Answer::allow(&request.uid),
        kind: kind_label(&request.kind),
        operation: review::operation_name(&request.operation),
        dry_run: request.dry_run,
    };
    let kind = &request.kind;
    if reviewed.kind != "Pod" {
        tracing::warn!(uid = %request.uid, ?kind, "the pod webhook received another kind: check its rules");
        reviewed.answer = reviewed.answer.with_warnings(vec![format!(
            "the NUMA resources pod webhook does not handle {}/{} {}; admitted unchanged",
            kind.group, kind.version, kind.kind
        )]);
        return (reviewed, None);
    }
    // Only a new pod's scheduler can be chosen; updates and subresources pass.
    if request.operation != Operation::Create || request.sub_resource.is_some() {
        return (reviewed, None);
    }
    let Some(pod) = &request.object else {
        return (reviewed, None);
    };
    let namespace = request.namespace.as_deref().or(pod.metadata.namespace.as_deref()).unwrap_or_default();
    let decision = decide(webhook, pod, namespace);
    let name = pod_name(pod);
    match &decision {
        Decision::Route { scheduler, reason } => {
            let why = reason.to_string();
            tracing::debug!(%namespace, pod = %name, %scheduler, dry_run = request.dry_run, "routing pod: {why}");
            match Answer::allow(&request.uid).with_patch(&routing_patch(pod, scheduler, &why)) {
                Ok(answer) => reviewed.answer = answer,
                Err(error) => tracing::error!(%namespace, pod = %name, "encoding the routing patch: {error}"),
            }
        }
        Decision::Leave(reason) => tracing::debug!(%namespace, pod = %name, "pod not routed: {reason}"),
    }
    (reviewed, Some(decision))
}

/// The decision for a pod, from what the caches hold now.
fn decide(webhook: &Webhook, pod: &Pod, namespace: &str) -> Decision {
    let cluster = &webhook.cluster;
    if !cluster.synced() {
        return Decision::Leave(SkipReason::NotSynced);
    }
    let Some(scheduler) = cluster.scheduler() else {
        return Decision::Leave(SkipReason::NoScheduler);
    };
    let policy = match &scheduler.0 {
        Ok(scheduler) => RoutingPolicy::of(scheduler),
        Err(_) => return Decision::Leave(SkipReason::SchedulerUnreadable),
    };
    // Labels are only looked up (and copied) when a selector needs them.
    let labels = policy.namespace_selector.as_ref().and_then(|_| cluster.namespace_labels(namespace));
    let labels = match &labels {
        Some(labels) => NamespaceLabels::Known(labels),
        None => NamespaceLabels::Unknown,
    };
    routing::decide(pod, namespace, &policy, labels, &webhook.system)
}

/// Names the scheduler and records why, touching nothing else.
fn routing_patch(pod: &Pod, scheduler: &str, why: &str) -> Patch {
    let scheduler_path = PointerBuf::from_tokens(["spec", "schedulerName"]);
    let scheduler_value = Value::String(scheduler.to_owned());
    let name_scheduler = if pod.spec.as_ref().is_some_and(|s| s.scheduler_name.is_some()) {
        PatchOperation::Replace(ReplaceOperation { path: scheduler_path, value: scheduler_value })
    } else {
        PatchOperation::Add(AddOperation { path: scheduler_path, value: scheduler_value })
    };
    let annotate = match pod.metadata.annotations {
        Some(_) => AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations", ROUTING_ANNOTATION]),
            value: Value::String(why.to_owned()),
        },
        None => AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: serde_json::json!({ ROUTING_ANNOTATION: why }),
        },
    };
    Patch(vec![name_scheduler, PatchOperation::Add(annotate)])
}

/// `namespace/name` for logs; a pod created from `generateName` has no name yet.
fn pod_name(pod: &Pod) -> String {
    match (&pod.metadata.name, &pod.metadata.generate_name) {
        (Some(name), _) => name.clone(),
        (None, Some(prefix)) => format!("{prefix}<generated>"),
        (None, None) => "<unnamed>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn apply(pod: &Pod) -> Value {
        let mut value = serde_json::to_value(pod).unwrap();
        json_patch::patch(&mut value, &routing_patch(pod, "numa", "why").0).unwrap();
        value
    }

    #[test]
    fn the_patch_adds_or_replaces_exactly_two_fields() {
        let bare = Pod { spec: Some(PodSpec::default()), ..Pod::default() };
        let patched = apply(&bare);
        assert_eq!(patched["spec"]["schedulerName"], "numa");
        assert_eq!(patched["metadata"]["annotations"][ROUTING_ANNOTATION], "why");

        let mut existing = bare.clone();
        existing.metadata =
            ObjectMeta { annotations: Some([("a/b".to_owned(), "c".to_owned())].into()), ..ObjectMeta::default() };
        existing.spec.as_mut().unwrap().scheduler_name = Some("default-scheduler".into());
        let patched = apply(&existing);
        assert_eq!(patched["spec"]["schedulerName"], "numa");
        assert_eq!(patched["metadata"]["annotations"], serde_json::json!({"a/b": "c", ROUTING_ANNOTATION: "why"}));
    }

    #[test]
    fn routing_a_pod_logs_nothing_at_info_and_is_counted_for_the_summary() {
        use numaresources_api::operator::{
            NUMAResourcesScheduler, NUMAResourcesSchedulerSpec, PodRouting, PodRoutingMode, SCHEDULER_SINGLETON_NAME,
        };

        use crate::activity::capture::InfoOrAbove;

        const POD: &str = include_str!("../../tests/fixtures/admission/pod-create-guaranteed-integral.json");
        let (cluster, mut feeds) = crate::ClusterCache::new();
        let webhook = Webhook::with_cluster(crate::Config::new("numaresources").unwrap(), cluster);
        let lines = InfoOrAbove::default();
        // Before the caches sync (once logged at info per pod), then routed.
        let unsynced = tracing::subscriber::with_default(lines.clone(), || review(&webhook, POD.as_bytes()).1);
        assert_eq!(unsynced, Some(Decision::Leave(SkipReason::NotSynced)));
        let spec = NUMAResourcesSchedulerSpec {
            pod_routing: Some(PodRouting { mode: Some(PodRoutingMode::All), namespace_selector: None }),
            ..NUMAResourcesSchedulerSpec::default()
        };
        feeds.set_scheduler(Some(NUMAResourcesScheduler::new(SCHEDULER_SINGLETON_NAME, spec)));
        feeds.set_namespaces([("numa-workloads", Default::default())]);
        feeds.set_nodes([]);
        let routed = tracing::subscriber::with_default(lines.clone(), || review(&webhook, POD.as_bytes()).1);
        assert!(matches!(routed, Some(Decision::Route { .. })), "{routed:?}");
        let malformed = tracing::subscriber::with_default(lines.clone(), || review(&webhook, b"{").0);
        assert_eq!(malformed.answer.verdict(), review::Verdict::Invalid);
        assert_eq!(lines.count(), 0, "per-request lines belong at debug");
        assert_eq!(webhook.activity.take().refused, 1);
    }

    #[test]
    fn pods_without_names_are_logged_by_prefix() {
        let pod = Pod {
            metadata: ObjectMeta { generate_name: Some("w-".into()), ..ObjectMeta::default() },
            ..Pod::default()
        };
        assert_eq!(pod_name(&pod), "w-<generated>");
    }
}
