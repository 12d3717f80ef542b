//! The NRT API server replicas' peer certificate, kept in every mode, is `peer`'s.
//!
//! Self-managed certificates (`--certificate-mode=self-managed`, the default on plain Kubernetes): a CA whose key is
//! kept in the Secret `numaresources-ca`, the serving certificates of the API server and the
//! webhook in `numaresources-apiserver-tls` and `numaresources-webhook-tls` (what their
//! Deployments mount), and `caBundle` on the APIService and the webhook configurations (the install's two and the
//! scheduler's pod routing one).
//!
//! The decisions are `numaresources_runtime::tls::rotation`'s, made pure for one pass in [`plan`]: leaves
//! are renewed well before their notAfter (read from the certificate, not from an annotation);
//! a CA near its end is rotated with an overlap, so that no handshake fails while bundles and
//! Secrets propagate: the new CA joins `caBundle` first, leaves move to it once that bundle has
//! been out for a propagation period, and the old CA leaves `caBundle` once the new leaves have
//! been out as long.
//!
//! The I/O here is thin: read the three Secrets and the consumers (the APIService, our two
//! mutating and one validating webhook configurations), write only what
//! differs (CA first, so no certificate is ever published whose issuer's key is not stored; then
//! `caBundle`; then the leaves), and sleep until the next decision. Nothing cluster-scoped may own
//! these Secrets and no CR does (the webhook outlives any `NUMAResourcesOperator`), so they carry
//! the `app.kubernetes.io/managed-by` and `part-of` labels instead of an owner reference.
//! `caBundle` is patched on objects that exist, never created: the install or the operator
//! creates them. So is the ConfigMap `numaresources-apiserver-ca`, where the exporters find
//! the bundle for their direct write path: a consumer like the others once the operator has
//! created it.

pub(crate) mod peer;
mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use k8s_openapi::{ByteString, Resource as _};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use numaresources_runtime::tls::PemPair;
use numaresources_runtime::tls::rotation::{CaStep, RotationPolicy, keys};
use serde_json::{Value, json};

pub(crate) use plan::{LEAVES, leaf_secret_data};
pub use plan::{Observed, Plan, plan};

use crate::apply::get_opt;
use crate::context::{Context, Error, Result};
use crate::mode::CertificateMode;
use crate::names::{
    self, APISERVICE, CA_SECRET, COMPONENT_CERTIFICATES, FIELD_MANAGER, POD_ROUTING_CONFIGURATION,
    WEBHOOK_CONFIGURATION,
};

/// Look again at least this often, even with no decision due: a webhook configuration
/// re-created without `caBundle` or a deleted Secret is repaired within this delay.
pub(crate) const RESYNC: Duration = Duration::from_secs(60);

/// What a pass did.
#[derive(Debug)]
pub(crate) struct Pass {
    /// What every client must trust now (`caBundle`).
    pub bundle: String,
    /// When a decision is next due.
    pub next: Option<SystemTime>,
    /// Objects written (Secrets applied, consumers patched).
    pub writes: usize,
    /// Consumers that could not be read or patched (the pass went on without them).
    pub failed_consumers: Vec<Error>,
    /// Serving Secrets left alone: one of that name exists with another `type`, which cannot be
    /// changed in place (reported as a Warning Event; deleting it is left to a person).
    pub foreign_secrets: Vec<&'static str>,
}

/// One pass at `now`, under [`Context::certificates`]. See [`pass`].
pub(crate) async fn reconcile(ctx: &Context, policy: &RotationPolicy, now: SystemTime) -> Result<Pass> {
    let _writing = ctx.certificates.lock().await;
    pass(ctx, policy, now).await
}

/// One pass at `now`; the caller holds [`Context::certificates`]. A consumer that cannot be read
/// or patched does not stop the pass (it holds any move to a new CA back, see [`plan`]); it is
/// reported in [`Pass::failed_consumers`]. Neither does a serving Secret of another `type`
/// ([`Pass::foreign_secrets`]); a CA Secret of another type does, as the CA could not be kept.
pub(crate) async fn pass(ctx: &Context, policy: &RotationPolicy, now: SystemTime) -> Result<Pass> {
    let namespace = &ctx.settings.namespace;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let ca_secret = get_opt(&secrets, CA_SECRET).await?;
    if let Some(found) = foreign_type(ca_secret.as_ref(), CA_SECRET_TYPE) {
        report_foreign_secret(ctx, CA_SECRET, CA_SECRET_TYPE, &found).await;
        return Err(Error::NotYet(format!(
            "Secret {namespace}/{CA_SECRET} has type {found:?}, not {CA_SECRET_TYPE:?}: the CA cannot be kept there"
        )));
    }
    let mut leaf_secrets = Vec::with_capacity(LEAVES.len());
    for leaf in LEAVES {
        leaf_secrets.push(get_opt(&secrets, leaf.secret).await?);
    }
    let (consumers, mut failed_consumers) = Consumers::read(&ctx.client, namespace).await;
    let observed = Observed {
        ca: ca_secret.as_ref().map(string_data),
        leaves: leaf_secrets.iter().map(|secret| secret.as_ref().and_then(pair_of)).collect(),
        leaf_cas: leaf_secrets
            .iter()
            .map(|secret| secret.as_ref().and_then(|s| string_data(s).remove("ca.crt")))
            .collect(),
        bundles: consumers.bundles(),
        unreadable: consumers.unreadable,
    };
    let plan = plan(&observed, namespace, policy, now).map_err(Error::Certificate)?;
    let bundle = plan.bundle();

    let mut writes = 0;
    let ca_labels = names::labels(CA_SECRET, COMPONENT_CERTIFICATES);
    let desired_ca = desired_secret(CA_SECRET, namespace, ca_labels, CA_SECRET_TYPE, plan.ca.to_secret_data());
    // A restart of the overlap is recorded once a consumer has been given the bundle: one whose
    // patch keeps failing holds this pass's leaves back without rewriting the CA Secret (and
    // emitting an Event) every pass. Nothing but `rotated-at` changes then, so writing after the
    // patches publishes no certificate whose key is not stored.
    let restart_only = plan.ca_step == CaStep::Unchanged && plan.republished;
    if !restart_only && write_secret(&secrets, ca_secret.as_ref(), desired_ca.clone(), &CA_KEYS).await? {
        writes += 1;
        announce_ca(ctx, &plan).await;
    }
    ctx.metrics.certificate_expiry(CA_SECRET, &plan.ca.cert_pem);
    let (patched, failed_patches) = consumers.inject(&ctx.client, &bundle).await;
    writes += patched;
    if restart_only && patched > 0 && write_secret(&secrets, ca_secret.as_ref(), desired_ca, &CA_KEYS).await? {
        writes += 1;
        announce_ca(ctx, &plan).await;
    }
    failed_consumers.extend(failed_patches);
    let mut foreign_secrets = Vec::new();
    for ((leaf, existing), (pair, issued)) in LEAVES.iter().zip(&leaf_secrets).zip(plan.leaves.iter().zip(&plan.issued))
    {
        if let Some(found) = foreign_type(existing.as_ref(), LEAF_SECRET_TYPE) {
            report_foreign_secret(ctx, leaf.secret, LEAF_SECRET_TYPE, &found).await;
            foreign_secrets.push(leaf.secret);
            continue;
        }
        let labels = names::labels(leaf.service, leaf.component);
        let desired = desired_secret(leaf.secret, namespace, labels, LEAF_SECRET_TYPE, leaf_secret_data(pair, &bundle));
        if write_secret(&secrets, existing.as_ref(), desired, &LEAF_KEYS).await? {
            writes += 1;
        }
        ctx.metrics.certificate_expiry(leaf.secret, &pair.cert_pem);
        if let Some(reason) = issued {
            tracing::info!(%namespace, secret = leaf.secret, reason, "issued a serving certificate");
            let note = format!("issued a serving certificate for Service {}: {reason}", leaf.service);
            ctx.event(&secret_reference(namespace, leaf.secret), EventType::Normal, "CertificateIssued", "Issue", note)
                .await;
        }
    }
    Ok(Pass { bundle, next: plan.next, writes, failed_consumers, foreign_secrets })
}

/// Runs passes until `shutdown` completes: the replicas' peer certificate in every mode
/// ([`peer`], while the API server is deployed), and, when the certificate mode is
/// `self-managed`, the serving certificates and `caBundle` (in any other mode nothing of ours
/// writes those). Sleeps until the next decision (at most [`RESYNC`]); failures retry with the
/// controllers' backoff.
pub(crate) async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()>) {
    let serving = ctx.settings.certificate_mode == CertificateMode::SelfManaged;
    if !serving {
        tracing::info!(mode = %ctx.settings.certificate_mode, "serving certificates and caBundle are not ours to manage");
    }
    let policy = RotationPolicy::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let now = SystemTime::now();
        let mut delay = peer::step(&ctx, &policy, now).await;
        if serving {
            delay = delay.min(serving_step(&ctx, &policy, now).await);
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One pass over the serving certificates; returns when to look again.
async fn serving_step(ctx: &Context, policy: &RotationPolicy, now: SystemTime) -> Duration {
    match reconcile(ctx, policy, now).await {
        Ok(pass) if pass.failed_consumers.is_empty() && pass.foreign_secrets.is_empty() => {
            tracing::debug!(writes = pass.writes, "serving certificate pass");
            ctx.reset_backoff(BACKOFF_KEY);
            let due = pass.next.and_then(|next| next.duration_since(now).ok()).unwrap_or(RESYNC);
            due.clamp(Duration::from_secs(1), RESYNC)
        }
        Ok(pass) => {
            for error in &pass.failed_consumers {
                tracing::warn!(%error, "caBundle not injected; retrying");
            }
            for secret in &pass.foreign_secrets {
                tracing::warn!(%secret, "serving Secret of another type left alone; retrying");
            }
            ctx.backoff(BACKOFF_KEY).min(RESYNC)
        }
        Err(error) => {
            let delay = ctx.backoff(BACKOFF_KEY);
            tracing::warn!(%error, retry_in = ?delay, "certificate pass failed");
            delay
        }
    }
}

const BACKOFF_KEY: &str = "certificates/self-managed";

/// For a controller about to apply a consumer with `caBundle` (the caller holds
/// [`Context::certificates`] until it has applied, so our one field manager never drops or rolls
/// back a CA). Self-managed: runs a pass, so the CA and the serving Secrets exist, and returns
/// the bundle every client must trust now. Other modes: `None`, the injector fills `caBundle`.
pub(crate) async fn bundle_for_apply(ctx: &Context) -> Result<Option<String>> {
    if ctx.settings.certificate_mode != CertificateMode::SelfManaged {
        return Ok(None);
    }
    let pass = pass(ctx, &RotationPolicy::default(), SystemTime::now()).await?;
    for error in &pass.failed_consumers {
        // The lifecycle's own loop retries these; the caller's apply goes on.
        tracing::warn!(%error, "caBundle not injected");
    }
    Ok(Some(pass.bundle))
}

/// The objects whose `caBundle` we fill, as they are now (absent ones are skipped). Only what
/// points at our own Services is ours: an APIService of the same name served by kube-apiserver
/// itself (a CRD-backed NRT API, `nrt-api-definition: cluster`) or by another vendor's server, or
/// a webhook someone added to our configuration, trusts some other CA; writing ours there would
/// break it, and counting it as lacking our bundle would hold a rotation back forever.
struct Consumers {
    api_service: Option<APIService>,
    /// The install's configuration and the scheduler's pod routing one, by name.
    mutating: Vec<(&'static str, MutatingWebhookConfiguration)>,
    validating: Option<ValidatingWebhookConfiguration>,
    /// The exporters' copy of the bundle (their direct write path), once the operator made it.
    ca_config_map: Option<ConfigMap>,
    /// The namespace our Services live in.
    namespace: String,
    /// How many could not be read (RBAC, an API outage): they count as lacking the bundle.
    unreadable: usize,
}

/// Whether a Service reference names `name` in `namespace`.
fn points_at(service: Option<(&str, Option<&str>)>, name: &str, namespace: &str) -> bool {
    service.is_some_and(|(service, ns)| service == name && ns == Some(namespace))
}

impl Consumers {
    /// Reads them (the APIService, the three webhook configurations, the exporters' CA
    /// ConfigMap); one that cannot be read is reported, not fatal, so the serving
    /// certificates are still kept while, say, a webhook configuration is forbidden to us.
    async fn read(client: &kube::Client, namespace: &str) -> (Self, Vec<Error>) {
        let mut errors = Vec::new();
        let api_service = kept(get_opt(&Api::all(client.clone()), APISERVICE).await, &mut errors).filter(
            |api_service: &APIService| {
                let service = api_service.spec.as_ref().and_then(|spec| spec.service.as_ref());
                let ours = points_at(
                    service.map(|s| (s.name.as_deref().unwrap_or_default(), s.namespace.as_deref())),
                    names::APISERVER,
                    namespace,
                );
                if !ours {
                    tracing::debug!(
                        apiservice = APISERVICE,
                        "the APIService is not served by our API server; its caBundle is left alone"
                    );
                }
                ours
            },
        );
        let mut mutating = Vec::new();
        for name in [WEBHOOK_CONFIGURATION, POD_ROUTING_CONFIGURATION] {
            if let Some(configuration) = kept(get_opt(&Api::all(client.clone()), name).await, &mut errors) {
                mutating.push((name, configuration));
            }
        }
        let validating = kept(get_opt(&Api::all(client.clone()), WEBHOOK_CONFIGURATION).await, &mut errors);
        let config_maps = Api::namespaced(client.clone(), namespace);
        let ca_config_map = kept(get_opt(&config_maps, names::APISERVER_CA_CONFIG_MAP).await, &mut errors);
        let unreadable = errors.len();
        let namespace = namespace.to_owned();
        (Self { api_service, mutating, validating, ca_config_map, namespace, unreadable }, errors)
    }

    /// Whether a webhook's clientConfig sends to our webhook Service.
    fn ours(&self, config: &WebhookClientConfig) -> bool {
        let service = config.service.as_ref().map(|s| (s.name.as_str(), Some(s.namespace.as_str())));
        points_at(service, names::WEBHOOK, &self.namespace)
    }

    /// The `caBundle` each consumer of ours holds: the APIService, then every webhook.
    fn bundles(&self) -> Vec<Option<String>> {
        let text = |bytes: Option<&ByteString>| bytes.and_then(|b| String::from_utf8(b.0.clone()).ok());
        let mut bundles = Vec::new();
        if let Some(api_service) = &self.api_service {
            bundles.push(text(api_service.spec.as_ref().and_then(|spec| spec.ca_bundle.as_ref())));
        }
        let mutating = self.mutating.iter().flat_map(|(_, c)| c.webhooks.iter().flatten()).map(|w| &w.client_config);
        let validating = self.validating.iter().flat_map(|c| c.webhooks.iter().flatten()).map(|w| &w.client_config);
        for config in mutating.chain(validating).filter(|config| self.ours(config)) {
            bundles.push(text(config.ca_bundle.as_ref()));
        }
        if let Some(config_map) = &self.ca_config_map {
            bundles.push(config_map.data.as_ref().and_then(|data| data.get(crate::mode::CA_CONFIG_MAP_KEY)).cloned());
        }
        bundles
    }

    /// Patches `caBundle` where it differs from `bundle`; returns how many objects were patched
    /// and the failures.
    async fn inject(&self, client: &kube::Client, bundle: &str) -> (usize, Vec<Error>) {
        let encoded = json!(ByteString(bundle.as_bytes().to_vec()));
        let wanted = Some(ByteString(bundle.as_bytes().to_vec()));
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
        let mut results = Vec::new();
        if let Some(api_service) = &self.api_service
            && api_service.spec.as_ref().map(|spec| &spec.ca_bundle) != Some(&wanted)
        {
            // Guarded by a test of spec.service, so a concurrent change of backend is not patched.
            let api: Api<APIService> = Api::all(client.clone());
            let patch = json!([
                {"op": "test", "path": "/spec/service/name", "value": names::APISERVER},
                {"op": "test", "path": "/spec/service/namespace", "value": self.namespace},
                {"op": "add", "path": "/spec/caBundle", "value": encoded},
            ]);
            let result = match serde_json::from_value::<json_patch::Patch>(patch) {
                Ok(patch) => api.patch(APISERVICE, &params, &Patch::Json::<()>(patch)).await.map(|_| ()),
                Err(error) => Err(kube::Error::SerdeError(error)),
            };
            results.push(result.map_err(|e| (APIService::KIND, APISERVICE, e)));
        }
        for (name, configuration) in &self.mutating {
            let webhooks = configuration.webhooks.iter().flatten();
            let webhooks = webhooks.map(|w| (&w.name, &w.client_config.ca_bundle, self.ours(&w.client_config)));
            let patch = webhook_patch(webhooks, &wanted);
            results.extend(patch_configuration::<MutatingWebhookConfiguration>(client, name, &params, patch).await);
        }
        if let Some(configuration) = &self.validating {
            let webhooks = configuration.webhooks.iter().flatten();
            let webhooks = webhooks.map(|w| (&w.name, &w.client_config.ca_bundle, self.ours(&w.client_config)));
            let patch = webhook_patch(webhooks, &wanted);
            let result =
                patch_configuration::<ValidatingWebhookConfiguration>(client, WEBHOOK_CONFIGURATION, &params, patch);
            results.extend(result.await);
        }
        if let Some(config_map) = &self.ca_config_map
            && config_map.data.as_ref().and_then(|data| data.get(crate::mode::CA_CONFIG_MAP_KEY)).map(String::as_str)
                != Some(bundle)
        {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &self.namespace);
            let patch = Patch::Merge(json!({"data": {crate::mode::CA_CONFIG_MAP_KEY: bundle}}));
            let name = names::APISERVER_CA_CONFIG_MAP;
            results.push(api.patch(name, &params, &patch).await.map(|_| ()).map_err(|e| (ConfigMap::KIND, name, e)));
        }
        let patched = results.iter().filter(|result| result.is_ok()).count();
        let failed = results
            .into_iter()
            .filter_map(Result::err)
            .map(|(kind, name, error)| Error::kube(format!("inject caBundle into {kind} {name}"), error))
            .collect();
        (patched, failed)
    }
}

/// Applies `patch` (if any) to the webhook configuration `name`; the error names what failed.
async fn patch_configuration<K>(
    client: &kube::Client,
    name: &'static str,
    params: &PatchParams,
    patch: Option<Patch<Value>>,
) -> Option<std::result::Result<(), (&'static str, &'static str, kube::Error)>>
where
    K: k8s_openapi::Resource + kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = patch?;
    let api: Api<K> = Api::all(client.clone());
    Some(api.patch(name, params, &patch).await.map(|_| ()).map_err(|e| (K::KIND, name, e)))
}

/// The object read, or `None` with the error kept.
fn kept<K>(result: Result<Option<K>>, errors: &mut Vec<Error>) -> Option<K> {
    result.unwrap_or_else(|error| {
        errors.push(error);
        None
    })
}

/// A JSON patch setting `caBundle` on every webhook of ours (the `bool`) that lacks `wanted`,
/// each guarded by a test of the webhook's name at that index (a concurrent reordering fails the
/// patch instead of writing into the wrong entry). `None` when every webhook of ours holds it.
fn webhook_patch<'a>(
    webhooks: impl Iterator<Item = (&'a String, &'a Option<ByteString>, bool)>,
    wanted: &Option<ByteString>,
) -> Option<Patch<Value>> {
    let mut operations = Vec::new();
    for (index, (name, held, ours)) in webhooks.enumerate() {
        if ours && held != wanted {
            operations.push(json!({"op": "test", "path": format!("/webhooks/{index}/name"), "value": name}));
            operations.push(
                json!({"op": "add", "path": format!("/webhooks/{index}/clientConfig/caBundle"), "value": wanted}),
            );
        }
    }
    if operations.is_empty() {
        return None;
    }
    serde_json::from_value::<json_patch::Patch>(Value::Array(operations)).ok().map(Patch::Json)
}

/// A Secret's data as text (entries that are not UTF-8 are left out: no PEM is).
fn string_data(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .filter_map(|(key, value)| Some((key.clone(), String::from_utf8(value.0.clone()).ok()?)))
        .collect()
}

/// The certificate and key of a `kubernetes.io/tls` Secret, when both are there.
fn pair_of(secret: &Secret) -> Option<PemPair> {
    let mut data = string_data(secret);
    Some(PemPair { cert_pem: data.remove("tls.crt")?, key_pem: data.remove("tls.key")? })
}

fn desired_secret(
    name: &str,
    namespace: &str,
    labels: BTreeMap<String, String>,
    type_: &str,
    data: BTreeMap<String, String>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        type_: Some(type_.to_owned()),
        data: Some(data.into_iter().map(|(key, value)| (key, ByteString(value.into_bytes()))).collect()),
        ..Secret::default()
    }
}

/// The CA Secret's type.
const CA_SECRET_TYPE: &str = "Opaque";
/// A serving Secret's type (what the servers' volume and cert-manager's Secrets use).
const LEAF_SECRET_TYPE: &str = "kubernetes.io/tls";

/// The type of an existing Secret, when it is not `wanted` (a Secret without one is `Opaque`).
fn foreign_type(existing: Option<&Secret>, wanted: &str) -> Option<String> {
    let found = existing?.type_.clone().unwrap_or_else(|| "Opaque".to_owned());
    (found != wanted).then_some(found)
}

/// A Secret of ours exists with another type: the API server refuses to change a Secret's type,
/// and the Secret may hold someone's data, so a person must move it out of the way.
async fn report_foreign_secret(ctx: &Context, name: &str, wanted: &str, found: &str) {
    let namespace = &ctx.settings.namespace;
    let note = format!(
        "Secret {namespace}/{name} has type {found:?}, not {wanted:?}, and a Secret's type cannot change: it is left \
         alone; delete or rename it to let the controllers manage it"
    );
    tracing::error!(%namespace, secret = name, found, wanted, "{note}");
    ctx.event(&secret_reference(namespace, name), EventType::Warning, "SecretTypeConflict", "Issue", note).await;
}

/// The data keys of the CA Secret (one that is not desired any more must go).
const CA_KEYS: [&str; 5] = [keys::CA_CERT, keys::CA_KEY, keys::PREVIOUS_CA_CERT, keys::ROTATED_AT, keys::CA_BUNDLE];
/// The data keys of a leaf Secret.
const LEAF_KEYS: [&str; 3] = ["tls.crt", "tls.key", "ca.crt"];

/// Applies `desired` unless `existing` already holds it (in the `managed` keys, its type and
/// labels); returns whether it wrote. The apply carries the resourceVersion read, so a concurrent
/// writer makes it fail (409) rather than be overwritten, and, being our field manager's whole
/// intent, drops what an older version of ours set (the owner reference and the expiry
/// annotation of the API server's Secret).
async fn write_secret(
    secrets: &Api<Secret>,
    existing: Option<&Secret>,
    mut desired: Secret,
    managed: &[&str],
) -> Result<bool> {
    if let Some(existing) = existing {
        let labelled = desired.labels().iter().all(|(key, value)| existing.labels().get(key) == Some(value));
        let value = |secret: &Secret, key: &str| secret.data.as_ref().and_then(|data| data.get(key)).cloned();
        let same =
            managed.iter().all(|key| value(existing, key) == value(&desired, key)) && existing.type_ == desired.type_;
        let legacy = existing.annotations().contains_key(names::ANNOTATION_CERT_NOT_AFTER);
        if same && labelled && !legacy {
            return Ok(false);
        }
        desired.metadata.resource_version = existing.metadata.resource_version.clone();
    }
    let name = desired.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    secrets
        .patch(&name, &params, &Patch::Apply(&desired))
        .await
        .map_err(|e| Error::kube(format!("apply Secret {}/{name}", desired.namespace().unwrap_or_default()), e))?;
    Ok(true)
}

fn secret_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Secret".to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}

/// Logs and publishes what happened to the CA.
async fn announce_ca(ctx: &Context, plan: &Plan) {
    let (reason, note) = match plan.ca_step {
        CaStep::Created => ("CertificateAuthorityCreated", "created a new CA; serving certificates follow"),
        CaStep::Replaced => (
            "CertificateAuthorityReplaced",
            "the CA could not issue (no key, a broken key, not a CA) or was left by an older install: a new CA is \
             trusted next to it, serving certificates move to the new one after the overlap",
        ),
        CaStep::Rotated => (
            "CertificateAuthorityRotated",
            "the CA is near its expiry: a new CA is trusted next to it, serving certificates move to it after the \
             overlap",
        ),
        CaStep::PreviousRetired => (
            "PreviousCertificateAuthorityRetired",
            "every serving certificate comes from the new CA: the old one is no longer trusted",
        ),
        CaStep::Unchanged if plan.announce_republished => (
            "CertificateAuthorityRepublished",
            "a consumer lacked the two-CA caBundle: the overlap starts over before serving certificates move",
        ),
        CaStep::Unchanged => return,
    };
    tracing::info!(namespace = %ctx.settings.namespace, secret = CA_SECRET, reason, note);
    let reference = secret_reference(&ctx.settings.namespace, CA_SECRET);
    ctx.event(&reference, EventType::Normal, reason, "Rotate", note.to_owned()).await;
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
