//! Removing the NRT API server we deployed, when the `NUMAResourcesOperator` switches to the
//! cluster's own API (annotation `nrt-api-definition: cluster`).
//!
//! Owner references only clean up after the operator object is deleted; a switch keeps the
//! object, so without this the server, its Service and RBAC would keep running. (The serving
//! certificate's Secret belongs to the certificate lifecycle, [`crate::certificates`], not to
//! the CR.) The
//! APIService goes first: while it exists the aggregator routes the group to the Service, and
//! a registration pointing at nothing breaks discovery for every client. Only objects whose
//! controller reference is this `NUMAResourcesOperator` are removed; an object of the same name
//! that someone else created stays.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use numaresources_api::operator::NUMAResourcesOperator;
use serde::de::DeserializeOwned;

use crate::apply::{controlled_by, delete, get_opt};
use crate::context::{Context, Result};
use crate::mode::ApiserverDeployment;
use crate::render::apiserver as render;

/// Deletes every API server object this `nro` controls; returns what was deleted
/// (`Kind namespace/name`), empty when there was nothing left.
pub async fn remove_api_server(nro: &NUMAResourcesOperator, ctx: &Context) -> Result<Vec<String>> {
    if ctx.settings.apiserver_deployment == ApiserverDeployment::Installed {
        // The install (kustomize or OLM) deployed the server: nothing of it is ours to remove,
        // and under OLM the controllers may not even read the API server's RBAC.
        return Ok(Vec::new());
    }
    let uid = nro.uid().unwrap_or_default();
    let client = &ctx.client;
    let namespace = &ctx.settings.namespace;
    let objects = render::objects(namespace, &ctx.settings.image)?;
    let mut deleted = Vec::new();
    let mut take = |done: Option<String>| deleted.extend(done);

    if let Some(api_service) = &objects.api_service {
        take(delete_if_ours(&Api::<APIService>::all(client.clone()), &api_service.name_any(), &uid).await?);
    }
    if let Some(deployment) = &objects.deployment {
        take(
            delete_if_ours(&Api::<Deployment>::namespaced(client.clone(), namespace), &deployment.name_any(), &uid)
                .await?,
        );
    }
    if let Some(budget) = &objects.disruption_budget {
        let api = Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace);
        take(delete_if_ours(&api, &budget.name_any(), &uid).await?);
    }
    if let Some(service) = &objects.service {
        take(delete_if_ours(&Api::<Service>::namespaced(client.clone(), namespace), &service.name_any(), &uid).await?);
    }
    // The exporters' direct write path goes with the server (their DaemonSets lose it this pass).
    let ca = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    take(delete_if_ours(&ca, crate::names::APISERVER_CA_CONFIG_MAP, &uid).await?);
    let services = Api::<Service>::namespaced(client.clone(), namespace);
    take(delete_if_ours(&services, numaresources_api::direct_write::WRITE_SERVICE, &uid).await?);
    let policy = crate::render::network_policy::apiserver(namespace)?;
    take(delete_if_ours(&Api::<NetworkPolicy>::namespaced(client.clone(), namespace), &policy.name_any(), &uid).await?);
    for binding in &objects.cluster_role_bindings {
        take(delete_if_ours(&Api::<ClusterRoleBinding>::all(client.clone()), &binding.name_any(), &uid).await?);
    }
    for binding in &objects.role_bindings {
        let api = Api::<RoleBinding>::namespaced(client.clone(), binding.namespace().as_deref().unwrap_or(namespace));
        take(delete_if_ours(&api, &binding.name_any(), &uid).await?);
    }
    // The server's own Role in the namespace (its Lease, the exporter pods its warm-up lists).
    for role in &objects.roles {
        let api = Api::<Role>::namespaced(client.clone(), role.namespace().as_deref().unwrap_or(namespace));
        take(delete_if_ours(&api, &role.name_any(), &uid).await?);
    }
    for role in &objects.cluster_roles {
        take(delete_if_ours(&Api::<ClusterRole>::all(client.clone()), &role.name_any(), &uid).await?);
    }
    if let Some(account) = &objects.service_account {
        let api = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
        take(delete_if_ours(&api, &account.name_any(), &uid).await?);
    }

    if !deleted.is_empty() {
        tracing::info!(deleted = ?deleted, "removed the NRT API server: the cluster's own API is used now");
        let note = format!("using the cluster's NodeResourceTopology API; removed {}", deleted.join(", "));
        ctx.event(&nro.object_ref(&()), EventType::Normal, "APIServerRemoved", "Delete", note).await;
    }
    Ok(deleted)
}

/// Deletes `name` when its controller is `owner_uid`; returns `Kind [namespace/]name` if it did.
async fn delete_if_ours<K>(api: &Api<K>, name: &str, owner_uid: &str) -> Result<Option<String>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug,
{
    let Some(existing) = get_opt(api, name).await? else { return Ok(None) };
    if !controlled_by(&existing, owner_uid) || !delete(api, name).await? {
        return Ok(None);
    }
    let described = match existing.namespace() {
        Some(namespace) => format!("{} {namespace}/{name}", K::kind(&())),
        None => format!("{} {name}", K::kind(&())),
    };
    Ok(Some(described))
}
