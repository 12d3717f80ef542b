//! The NodeResourceTopology API step: deploy our aggregated API server, or use what the cluster
//! already has (annotation `nrt-api-definition: cluster`), and never fight an NRT CRD.
//!
//! Order matters to kube-apiserver's aggregator: the APIService is applied only once the
//! Deployment is available (registering a group nobody serves breaks discovery for every client),
//! and on deletion it goes first (see the finalizer in [`super`]).
//!
//! Certificates (self-managed mode, design.md §6): a CA and a serving certificate for the
//! Service's DNS names live in the Secret `numaresources-apiserver-tls`; the CA is the
//! APIService's `caBundle`. Both are reissued 30 days before the leaf expires. A Secret of that
//! name that we did not create (cert-manager, service-ca) is left alone; its `ca.crt`, if any,
//! becomes the `caBundle`.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::{Api, ResourceExt};
use numaresources_api::operator::NUMAResourcesOperator;
use numaresources_certs::CertificateAuthority;

use crate::apply::{Applier, controlled_by, delete, get_opt};
use crate::context::{Context, Error, Result};
use crate::names::{self, ANNOTATION_NRT_API, APISERVER, APISERVER_TLS_SECRET, APISERVICE, NRT_CRD, NRT_VERSION};
use crate::render::apiserver as render;

/// Validity of the CA and the serving certificate we issue.
pub const CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Reissue when the serving certificate has less than this left.
pub const CERT_RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

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
        super::nrt_teardown::remove_api_server(nro, ctx).await?;
        return Ok(ApiState::External);
    }
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    if let Some(crd) = get_opt(&crds, NRT_CRD).await?
        && crd.spec.versions.iter().any(|v| v.name == NRT_VERSION && v.served)
    {
        return Ok(ApiState::Blocked(format!(
            "the CustomResourceDefinition {NRT_CRD} already serves {}/{NRT_VERSION}, so the NodeResourceTopology API \
             server cannot be registered; either delete that CRD (its objects are republished by the exporters) or \
             annotate the NUMAResourcesOperator with {ANNOTATION_NRT_API}=cluster to keep using it",
            names::NRT_GROUP
        )));
    }

    let namespace = &ctx.settings.namespace;
    let objects = render::objects(namespace, &ctx.settings.image)?;
    let ca_bundle = ensure_serving_certificate(ctx, applier).await?;
    if let Some(sa) = objects.service_account {
        applier.namespaced(sa).await?;
    }
    for role in objects.cluster_roles {
        applier.cluster(role).await?;
    }
    for binding in objects.cluster_role_bindings {
        applier.cluster(binding).await?;
    }
    for binding in objects.role_bindings {
        applier.namespaced(binding).await?;
    }
    if let Some(service) = objects.service {
        applier.namespaced(service).await?;
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
    if let Some(api_service) = objects.api_service {
        let api_service = match &ca_bundle {
            Some(ca) => render::with_ca_bundle(api_service, ca),
            None => api_service,
        };
        applier.cluster(api_service).await?;
    }
    Ok(ApiState::Ready)
}

/// Deletes our APIService (the finalizer's job). Returns whether it is gone.
pub async fn unregister(nro: &NUMAResourcesOperator, ctx: &Context) -> Result<bool> {
    let api_services: Api<APIService> = Api::all(ctx.client.clone());
    match get_opt(&api_services, APISERVICE).await? {
        None => Ok(true),
        // Someone else's registration: never ours to remove.
        Some(existing) if !controlled_by(&existing, &nro.uid().unwrap_or_default()) => Ok(true),
        Some(_) => {
            delete(&api_services, APISERVICE).await?;
            Ok(get_opt(&api_services, APISERVICE).await?.is_none())
        }
    }
}

/// A Deployment whose `Available` condition is true for its current generation.
pub fn deployment_available(deployment: &Deployment) -> bool {
    let Some(status) = &deployment.status else { return false };
    let current = status.observed_generation >= deployment.metadata.generation;
    current && status.conditions.iter().flatten().any(|c| c.type_ == "Available" && c.status == "True")
}

/// Makes sure the serving certificate Secret exists and is fresh; returns the CA for `caBundle`.
async fn ensure_serving_certificate(ctx: &Context, applier: &Applier) -> Result<Option<String>> {
    let namespace = &ctx.settings.namespace;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let existing = get_opt(&secrets, APISERVER_TLS_SECRET).await?;
    let ca_of = |secret: &Secret| {
        secret.data.as_ref().and_then(|d| d.get("ca.crt")).and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    if let Some(secret) = &existing {
        let ours = secret.labels().get(names::LABEL_MANAGED_BY).is_some_and(|v| v == names::FIELD_MANAGER);
        if !ours {
            return Ok(ca_of(secret));
        }
        if fresh(secret, Timestamp::now()) {
            return Ok(ca_of(secret));
        }
    }
    let ca = CertificateAuthority::generate(&format!("{APISERVER}-ca"), CERT_VALIDITY).map_err(Error::Certificate)?;
    let pair = ca.issue_serving(&render::service_dns_names(namespace), CERT_VALIDITY).map_err(Error::Certificate)?;
    let not_after = Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(CERT_VALIDITY.as_secs() as i64))
        .unwrap_or(Timestamp::MAX);
    tracing::info!(%namespace, secret = APISERVER_TLS_SECRET, "issued the API server's serving certificate");
    let secret = render::tls_secret(namespace, ca.cert_pem(), &pair.cert_pem, &pair.key_pem, &not_after.to_string());
    applier.namespaced(secret).await?;
    Ok(Some(ca.cert_pem().to_owned()))
}

/// All three keys present and the leaf not within [`CERT_RENEW_BEFORE`] of expiring.
fn fresh(secret: &Secret, now: Timestamp) -> bool {
    let complete =
        secret.data.as_ref().is_some_and(|d| ["ca.crt", "tls.crt", "tls.key"].iter().all(|k| d.contains_key(*k)));
    let not_after =
        secret.annotations().get(names::ANNOTATION_CERT_NOT_AFTER).and_then(|t| t.parse::<Timestamp>().ok());
    let renew_at = not_after.and_then(|t| {
        t.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(CERT_RENEW_BEFORE.as_secs() as i64)).ok()
    });
    complete && renew_at.is_some_and(|t| t > now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_renewed_thirty_days_ahead() {
        let now: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let secret = |not_after: &str| render::tls_secret("ns", "CA", "CRT", "KEY", not_after);
        assert!(fresh(&secret("2030-03-01T00:00:00Z"), now));
        assert!(!fresh(&secret("2030-01-20T00:00:00Z"), now), "inside the renewal window");
        assert!(!fresh(&secret("garbage"), now));
        let mut incomplete = secret("2031-01-01T00:00:00Z");
        incomplete.data.as_mut().unwrap().remove("tls.key");
        assert!(!fresh(&incomplete, now));
    }
}
