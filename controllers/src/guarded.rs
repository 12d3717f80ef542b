//! Guarded watch: the controllers watch their custom resources as raw JSON ([`DynamicObject`])
//! and parse each one inside reconcile.
//!
//! A typed watcher fails its whole list when one object does not deserialize, and then no
//! object is reconciled at all. An object the CRD schema accepts can still be malformed for our
//! types: a string field our types parse further (`infoRefreshPeriod: "1 day"`), or a value that
//! an older schema let through. Parsed here, such an object only degrades itself: its status
//! says which field is wrong and why, and every other object keeps being reconciled.

use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Resource, ResourceExt};
use numaresources_runtime::admin::Flag;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::conditions::{self as cond, State};
use crate::context::{Context, Error, Result};
use crate::names::FIELD_MANAGER;

/// Why a watched object does not parse into our type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct Malformed {
    /// The offending field (`spec.nodeGroups[0].config.infoRefreshPeriod`).
    pub path: String,
    /// The parser's complaint.
    pub reason: String,
}

impl Malformed {
    /// The message of the `Degraded` condition.
    pub fn condition_message(&self) -> String {
        format!("the object cannot be read: field {self}; correct it (nothing is reconciled for it until then)")
    }
}

/// The dynamic description of a cluster-scoped custom resource type.
pub fn resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// What a controller watches for `K`: every object, as raw JSON.
pub fn watched_api<K: Resource<DynamicType = ()>>(client: kube::Client) -> Api<DynamicObject> {
    Api::all_with(client, &resource::<K>())
}

/// A controller of `K` over its guarded watch ([`watched_api`]).
pub fn controller<K: Resource<DynamicType = ()>>(client: kube::Client) -> Controller<DynamicObject> {
    Controller::new_with(watched_api::<K>(client), Default::default(), resource::<K>())
}

/// One `()` per change of a Node's labels; its status updates (the many heartbeats) give none.
pub fn node_label_changes(client: kube::Client) -> impl futures_util::Stream<Item = ()> + Send + 'static {
    watcher::watcher(Api::<PartialObjectMeta<Node>>::all(client), watcher::Config::default())
        .touched_objects()
        .predicate_filter(predicates::labels, Default::default())
        .filter_map(|node| async move { node.ok().map(|_| ()) })
}

/// Runs the controller `name` until `shutdown` completes; sets `synced` once its main watch has
/// listed everything (left unset if the controller stops first).
pub async fn drive<F, C>(
    name: &'static str,
    controller: Controller<DynamicObject>,
    reconcile: impl FnMut(Arc<DynamicObject>, Arc<C>) -> F,
    error_policy: impl Fn(Arc<DynamicObject>, &Error, Arc<C>) -> Action,
    ctx: Arc<C>,
    synced: Flag,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) where
    F: Future<Output = Result<Action>> + Send + 'static,
    C: Send + Sync + 'static,
{
    let store = controller.store();
    let mark_synced = async move {
        if store.wait_until_ready().await.is_ok() {
            synced.set();
        }
    };
    let running = controller.graceful_shutdown_on(shutdown).run(reconcile, error_policy, ctx).for_each(|result| {
        match result {
            Ok((object, _)) => tracing::debug!(controller = name, object = %object.name, "reconciled"),
            Err(error) => tracing::debug!(controller = name, %error, "reconcile error"),
        }
        std::future::ready(())
    });
    futures_util::future::join(mark_synced, running).await;
}

/// The object as `K`, or the field that stops it.
pub fn parse<K: DeserializeOwned>(obj: &DynamicObject) -> Result<K, Malformed> {
    let value = serde_json::to_value(obj)
        .map_err(|e| Malformed { path: ".".into(), reason: format!("cannot be serialized: {e}") })?;
    serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        Malformed { path, reason: e.into_inner().to_string() }
    })
}

/// Marks a malformed object `Degraded` (reason [`cond::REASON_MALFORMED`]) through the raw API
/// and tells a person with a Warning Event, once per distinct message.
pub async fn degrade(ctx: &Context, resource: &ApiResource, obj: &DynamicObject, malformed: &Malformed) -> Result<()> {
    let previous: Vec<Condition> =
        obj.data.pointer("/status/conditions").and_then(|c| serde_json::from_value(c.clone()).ok()).unwrap_or_default();
    let message = malformed.condition_message();
    let state = State::degraded(cond::REASON_MALFORMED, message.clone());
    let conditions = cond::conditions(&previous, &state, &[], obj.metadata.generation);
    if cond::same(&previous, &conditions) {
        return Ok(());
    }
    let name = obj.name_any();
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), resource);
    let patch = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "status": {"conditions": conditions},
    });
    api.patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map_err(|e| Error::kube(format!("update the status of {} {name}", resource.kind), e))?;
    tracing::warn!(kind = %resource.kind, %name, %malformed, "object does not parse; marked Degraded");
    let reference = obj.object_ref(resource);
    ctx.event(&reference, EventType::Warning, cond::REASON_MALFORMED, "Reconcile", message).await;
    Ok(())
}

/// Removes `finalizer` from an object our types cannot read (kube's finalizer helper would fail
/// parsing the API server's answer): a malformed object being deleted must still go. The
/// resourceVersion makes it a compare-and-swap: a concurrent change to the list fails it with a
/// conflict, and the retry sees the new list.
pub async fn release(ctx: &Context, resource: &ApiResource, obj: &DynamicObject, finalizer: &str) -> Result<()> {
    let remaining: Vec<&String> = obj.finalizers().iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {"finalizers": remaining, "resourceVersion": obj.resource_version()}});
    let name = obj.name_any();
    Api::<DynamicObject>::all_with(ctx.client.clone(), resource)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::kube(format!("remove the finalizer of {} {name}", resource.kind), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use numaresources_api::operator::NUMAResourcesOperator;
    use serde_json::json;

    use super::*;

    fn raw(spec: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "nodetopology.openshift.io/v1", "kind": "NUMAResourcesOperator",
            "metadata": {"name": "numaresourcesoperator"}, "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn a_valid_object_parses_and_a_malformed_one_names_its_field() {
        let nro: NUMAResourcesOperator = parse(&raw(json!({"nodeGroups": [{"poolName": "worker"}]}))).unwrap();
        assert_eq!(nro.spec.node_groups[0].pool_name.as_deref(), Some("worker"));

        let bad = raw(json!({"nodeGroups": [{"poolName": "worker", "config": {"infoRefreshPeriod": "1 day"}}]}));
        let error = parse::<NUMAResourcesOperator>(&bad).unwrap_err();
        assert_eq!(error.path, "spec.nodeGroups[0].config.infoRefreshPeriod");
        assert!(error.reason.contains("1 day"), "{error}");
        assert!(error.condition_message().contains("field spec.nodeGroups[0].config.infoRefreshPeriod: "));
    }
}
