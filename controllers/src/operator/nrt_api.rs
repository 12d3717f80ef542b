//! The NodeResourceTopology API step: deploy our aggregated API server, or use what the cluster
//! already has (annotation `nrt-api-definition: cluster`), and never fight an NRT CRD.
//!
//! Order matters to kube-apiserver's aggregator: the APIService is applied only once the
//! Deployment is available (registering a group nobody serves breaks discovery for every client),
//! and on deletion it goes first (see the finalizer in [`super`]).
//!
//! With `--apiserver-deployment=installed` the install ships the API server (kustomize base or
//! OLM CSV): this step creates, changes and deletes none of it, and only reports whether its
//! Deployment is available.
//!
//! Certificates follow `--certificate-mode`. Self-managed: a pass of
//! [`crate::certificates`] makes sure the CA and the serving certificate Secret exist before the
//! Deployment mounts it, and the APIService is applied with the bundle of every CA trusted now,
//! under the same lock as the lifecycle's own `caBundle` patches, so our one field manager never
//! drops or rolls back a CA. cert-manager and service-ca: the APIService (and for service-ca the
//! Service) carries the annotation that asks their injector, and no `caBundle` of ours.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::{Api, ResourceExt};
use numaresources_api::nrt;
use numaresources_api::operator::NUMAResourcesOperator;

use crate::apply::{Applier, Removal, delete_controlled, get_opt};
use crate::certificates;
use crate::context::{Context, Result};
use crate::mode::ApiserverDeployment;
use numaresources_api::nrt::VERSION as NRT_VERSION;

use crate::names::{ANNOTATION_NRT_API, APISERVER, APISERVICE, NRT_CRD};
use crate::render::apiserver as render;

/// Where the NRT API stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiState {
    /// Our API server is available and registered.
    Ready,
    /// Applied; waiting for it to become available.
    Progressing(String),
    /// The cluster provides the API (annotation `cluster`); we deploy nothing.
    External,
    /// An NRT CRD serves the API: we refuse to take it over. The message says what to do.
    Blocked(String),
}

/// True when the object asks to use the cluster's own NRT API.
pub fn uses_cluster_api(nro: &NUMAResourcesOperator) -> bool {
    nro.annotations().get(ANNOTATION_NRT_API).is_some_and(|v| v == "cluster")
}

/// Runs the step.
pub async fn reconcile(nro: &NUMAResourcesOperator, ctx: &Context, applier: &Applier) -> Result<ApiState> {
    if uses_cluster_api(nro) {
        // Switching to the cluster's API: remove our server, APIService first (only ours).
        Box::pin(super::nrt_teardown::remove_api_server(nro, ctx)).await?;
        return Ok(ApiState::External);
    }
    if ctx.settings.apiserver_deployment == ApiserverDeployment::Installed {
        return installed_state(ctx).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    if let Some(crd) = get_opt(&crds, NRT_CRD).await?
        && crd.spec.versions.iter().any(|v| v.name == NRT_VERSION && v.served)
    {
        return Ok(ApiState::Blocked(format!(
            "the CustomResourceDefinition {NRT_CRD} already serves {}/{NRT_VERSION}, so the NodeResourceTopology API \
             server cannot be registered; either delete that CRD (its objects are republished by the exporters) or \
             annotate the NUMAResourcesOperator with {ANNOTATION_NRT_API}=cluster to keep using it",
            nrt::GROUP
        )));
    }

    let namespace = &ctx.settings.namespace;
    let mut objects = render::objects(namespace, &ctx.settings.image)?;
    let (api_service_annotations, service_annotations) = ctx.settings.certificate_mode.apiserver_annotations(namespace);
    // Held until the APIService is applied: its caBundle is the bundle this pass settled on.
    let _certificates = ctx.certificates.lock().await;
    let ca_bundle = certificates::bundle_for_apply(ctx).await?;
    if let Some(sa) = objects.service_account {
        applier.namespaced(sa).await?;
    }
    for role in objects.cluster_roles {
        applier.cluster(role).await?;
    }
    for binding in objects.cluster_role_bindings {
        applier.cluster(binding).await?;
    }
    for role in objects.roles {
        applier.namespaced(role).await?;
    }
    for binding in objects.role_bindings {
        applier.namespaced(binding).await?;
    }
    if let Some(mut service) = objects.service.take() {
        service.annotations_mut().extend(service_annotations);
        applier.namespaced(service).await?;
    }
    applier.namespaced(crate::render::network_policy::apiserver(namespace)?).await?;
    // Before the Deployment: a drain during its first rollout already keeps one replica serving.
    if let Some(budget) = objects.disruption_budget {
        applier.namespaced(budget).await?;
    }
    let available = match objects.deployment {
        Some(deployment) => deployment_available(&applier.namespaced(deployment).await?),
        None => false,
    };
    if !available {
        return Ok(ApiState::Progressing(format!(
            "waiting for Deployment {namespace}/{APISERVER} to become available"
        )));
    }
    if let Some(mut api_service) = objects.api_service {
        api_service.annotations_mut().extend(api_service_annotations);
        let api_service = match &ca_bundle {
            Some(ca) => render::with_ca_bundle(api_service, ca),
            None => api_service,
        };
        applier.cluster(api_service).await?;
    }
    Ok(ApiState::Ready)
}

/// `--apiserver-deployment=installed`: only whether the shipped Deployment is available.
async fn installed_state(ctx: &Context) -> Result<ApiState> {
    let namespace = &ctx.settings.namespace;
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(match get_opt(&deployments, APISERVER).await? {
        Some(deployment) if deployment_available(&deployment) => ApiState::Ready,
        Some(_) => ApiState::Progressing(format!(
            "waiting for Deployment {namespace}/{APISERVER} (installed with the operator) to become available"
        )),
        None => ApiState::Progressing(format!(
            "Deployment {namespace}/{APISERVER} does not exist: with --apiserver-deployment=installed the install \
             (kustomize base or OLM bundle) provides it"
        )),
    })
}

/// Deletes our APIService (the finalizer's job), if there is one.
pub async fn unregister(nro: &NUMAResourcesOperator, ctx: &Context) -> Result<Removal> {
    // Someone else's registration is never ours to remove.
    let api_services: Api<APIService> = Api::all(ctx.client.clone());
    delete_controlled(&api_services, APISERVICE, &nro.uid().unwrap_or_default()).await
}

/// A Deployment whose `Available` condition is true for its current generation.
pub fn deployment_available(deployment: &Deployment) -> bool {
    let Some(status) = &deployment.status else { return false };
    let current = status.observed_generation >= deployment.metadata.generation;
    current && status.conditions.iter().flatten().any(|c| c.type_ == "Available" && c.status == "True")
}

#[cfg(test)]
#[path = "nrt_api_tests.rs"]
mod tests;
