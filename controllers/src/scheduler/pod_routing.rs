//! The pod webhook's MutatingWebhookConfiguration, owned by the `NUMAResourcesScheduler`: present
//! while pods are routed (`podRouting.mode` other than `Disabled`), removed when routing is
//! disabled, and on deletion removed before anything else (the finalizer in [`super`]), so no
//! pod is routed to a scheduler that is going away (a webhook left pointing at a removed
//! Service would fail every pod creation its rules match, or, failing open, route pods nowhere).
//!
//! Under `--certificate-mode=olm` the CSV declares the pod webhook and OLM owns it: nothing here
//! creates or deletes one. Self-managed: applied with the bundle of every CA trusted now, under
//! the lock of the certificate lifecycle's own `caBundle` patches (which count it as a consumer),
//! so our one field manager never drops or rolls back a CA. cert-manager and service-ca: it
//! carries the annotation that asks their injector.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::{Api, ResourceExt};
use numaresources_api::operator::{NUMAResourcesScheduler, PodRoutingMode};

use crate::apply::{Applier, Removal, delete_controlled};
use crate::certificates;
use crate::context::{Context, Result};
use crate::mode::CertificateMode;
use crate::names::POD_ROUTING_CONFIGURATION;
use crate::render::pod_routing as render;

/// Whether the controllers keep a pod routing configuration at all (not under OLM).
fn ours_to_manage(ctx: &Context) -> bool {
    ctx.settings.certificate_mode != CertificateMode::Olm
}

/// Deletes ours when `nrs` does not route pods; applies it when it does and the scheduler is
/// `available` (a pod routed to a scheduler that is not running yet would wait Pending; one
/// already applied stays through a rollout).
pub async fn reconcile(nrs: &NUMAResourcesScheduler, ctx: &Context, applier: &Applier, available: bool) -> Result<()> {
    if !ours_to_manage(ctx) {
        return Ok(());
    }
    if nrs.spec.pod_routing_mode() == PodRoutingMode::Disabled {
        remove(nrs, ctx).await?;
        return Ok(());
    }
    if !available {
        return Ok(());
    }
    let namespace = &ctx.settings.namespace;
    // Held until the configuration is applied: its caBundle is the bundle this pass settled on.
    let _certificates = ctx.certificates.lock().await;
    let bundle = certificates::bundle_for_apply(ctx).await?;
    let mut configuration = render::configuration(namespace, bundle.as_deref())?;
    configuration.annotations_mut().extend(ctx.settings.certificate_mode.webhook_annotations(namespace));
    applier.cluster(configuration).await?;
    Ok(())
}

/// Deletes the configuration if `nrs` controls it (never someone else's).
pub async fn remove(nrs: &NUMAResourcesScheduler, ctx: &Context) -> Result<Removal> {
    if !ours_to_manage(ctx) {
        return Ok(Removal::NothingOurs);
    }
    let api: Api<MutatingWebhookConfiguration> = Api::all(ctx.client.clone());
    delete_controlled(&api, POD_ROUTING_CONFIGURATION, &nrs.uid().unwrap_or_default()).await
}
