//! The exporters' direct write path ([`DirectWrite`]): while our API server serves the NRT API,
//! every exporter DaemonSet carries the Service's URL and mounts a projected token of our
//! server's audience with the CA bundle that verifies the server; when the cluster serves NRT
//! itself (annotation `nrt-api-definition: cluster`), none of it.
//!
//! The bundle is the one the APIService's `caBundle` holds, from the same source in each
//! certificate mode, put in the ConfigMap [`APISERVER_CA_CONFIG_MAP`] (a ConfigMap, so no
//! node's kubelet fetches a Secret with a private key for it):
//! - self-managed: the bundle of every CA trusted now, written here under the certificates
//!   lock and kept current by the certificate lifecycle, which counts the ConfigMap among the
//!   consumers a CA rotation waits for ([`crate::certificates`]);
//! - cert-manager and OLM: copied from the APIService their injector filled;
//! - service-ca: the ConfigMap carries the annotation, and service-ca injects its CA itself.
//!
//! Under OLM the Service in front of the API server is OLM's, named after the Deployment
//! ([`OLM_SERVICE_SUFFIX`]), and so is the certificate it serves.
//!
//! The exporters write through the write Service (`numaresources_api::direct_write::WRITE_SERVICE`),
//! applied here in every mode, which reaches replicas that are not Ready: after a cold start of
//! every replica, the exporters' writes are what make them Ready.

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Api;
use numaresources_api::direct_write::{WRITE_SERVICE, admin_url, service_host, service_url};

use super::nrt_api::ApiState;
use crate::apply::{Applier, get_opt};
use crate::certificates;
use crate::context::{Context, Result};
use crate::mode::CertificateMode;
use crate::names::{APISERVER, APISERVER_CA_CONFIG_MAP, APISERVICE};
use crate::render::rte::{DirectWrite, ca_config_map, write_service};

/// OLM names the Service of an `apiservicedefinitions` entry `<deployment>-service`.
pub const OLM_SERVICE_SUFFIX: &str = "-service";

/// The Service in front of our API server in `mode`.
pub fn api_server_service(mode: CertificateMode) -> String {
    match mode {
        CertificateMode::Olm => format!("{APISERVER}{OLM_SERVICE_SUFFIX}"),
        CertificateMode::SelfManaged | CertificateMode::CertManager | CertificateMode::ServiceCa => {
            APISERVER.to_owned()
        }
    }
}

/// The direct write path for the exporters when our API server serves the NRT API (`state`),
/// with its CA ConfigMap applied; `None` when the cluster serves it.
pub async fn prepare(ctx: &Context, applier: &Applier, state: &ApiState) -> Result<Option<DirectWrite>> {
    if !matches!(state, ApiState::Ready | ApiState::Progressing(_)) {
        return Ok(None);
    }
    let namespace = &ctx.settings.namespace;
    let mode = ctx.settings.certificate_mode;
    let (key, annotations) = mode.ca_config_map();
    match mode {
        CertificateMode::SelfManaged => {
            // Under the lock, so the lifecycle's own updates of this ConfigMap are never rolled back.
            let _certificates = ctx.certificates.lock().await;
            let bundle = certificates::bundle_for_apply(ctx).await?;
            applier.namespaced(ca_config_map(namespace, key, bundle.as_deref(), annotations)?).await?;
        }
        CertificateMode::ServiceCa => {
            applier.namespaced(ca_config_map(namespace, key, None, annotations)?).await?;
        }
        CertificateMode::CertManager | CertificateMode::Olm => {
            // Until the injector has filled the APIService, whatever the ConfigMap holds stays.
            if let Some(bundle) = injected_bundle(ctx).await? {
                applier.namespaced(ca_config_map(namespace, key, Some(&bundle), annotations)?).await?;
            }
        }
    }
    // The exporters write through a Service that reaches replicas before they are Ready (a
    // cold store becomes Ready only once they have written), checking the certificate against
    // the Service the APIService uses, which every certificate mode's certificate names.
    applier.namespaced(write_service(namespace)?).await?;
    Ok(Some(DirectWrite {
        url: service_url(WRITE_SERVICE, namespace),
        tls_server_name: service_host(&api_server_service(mode), namespace),
        admin_url: admin_url(WRITE_SERVICE, namespace),
        ca_config_map: APISERVER_CA_CONFIG_MAP.to_owned(),
        ca_key: key.to_owned(),
    }))
}

/// The `caBundle` an injector put on our APIService (one pointing at our Service), if any.
async fn injected_bundle(ctx: &Context) -> Result<Option<String>> {
    let api_services: Api<APIService> = Api::all(ctx.client.clone());
    let Some(api_service) = get_opt(&api_services, APISERVICE).await? else { return Ok(None) };
    let Some(spec) = api_service.spec else { return Ok(None) };
    let service = api_server_service(ctx.settings.certificate_mode);
    let ours = spec.service.as_ref().is_some_and(|s| {
        s.name.as_deref() == Some(service.as_str()) && s.namespace.as_deref() == Some(&ctx.settings.namespace)
    });
    Ok(spec.ca_bundle.filter(|_| ours).and_then(|bundle| String::from_utf8(bundle.0).ok()).filter(|b| !b.is_empty()))
}

#[cfg(test)]
#[path = "direct_write_tests.rs"]
mod tests;
