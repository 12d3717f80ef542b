//! The NRT API server replicas' peer certificate: the Secret `numaresources-apiserver-peer`
//! (`ca.crt`, `tls.crt`, `tls.key`) that every replica mounts, presents on its peer port and as a
//! client to the leader, and verifies the other replicas with (mutual TLS, serverAuth and
//! clientAuth, DNS name `numaresources-apiserver-peer.<namespace>.svc`).
//!
//! Kept in every `--certificate-mode`: the peer CA is private to the replicas (only they verify
//! it), so no injector has anything to do with it, and cert-manager or service-ca would add
//! nothing but a second writer. Whenever the NRT API server is deployed (always with
//! `--apiserver-deployment=installed`; with `operator`, while its Deployment exists, so not when
//! the cluster serves the NRT API itself).
//!
//! The CA lives in a Secret of its own, `numaresources-apiserver-peer-ca` (the format of
//! `numaresources_runtime::tls::rotation::CaState`), not next to the pair: the replicas mount the whole
//! pair Secret's `ca.crt` key as their trust bundle, which during a rotation must hold two CAs,
//! while the CA state's `ca.crt` is the current CA alone; and the CA key, which can mint a peer
//! for any name, stays out of what the pods mount. Decisions are `rotation`'s: the leaf is renewed
//! before its end, a CA near its end is rotated with the same overlap as the serving CA (the two-CA
//! bundle reaches the replicas first, the leaf moves after a propagation, the old CA leaves after
//! another). The "consumers" of the bundle are the replicas, through the pair Secret's `ca.crt`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::events::EventType;
use numaresources_runtime::tls::rotation::{self, CaState, CaStep, LeafStep, RotationPolicy, keys};
use numaresources_runtime::tls::{CertificateAuthority, PemPair};

use super::{
    CA_KEYS, CA_SECRET_TYPE, LEAF_KEYS, LEAF_SECRET_TYPE, desired_secret, foreign_type, leaf_secret_data, pair_of,
    report_foreign_secret, secret_reference, string_data, write_secret,
};
use crate::apply::get_opt;
use crate::context::{Context, Error, Result};
use crate::mode::ApiserverDeployment;
use crate::names::{self, APISERVER, COMPONENT_APISERVER};

use crate::names::{PEER_CA_SECRET, PEER_SECRET};

/// While the NRT API server is not deployed (operator mode), look again this often: the
/// Deployment's pods wait for the Secret (their volume is not optional) at most this long.
pub const DEPLOYMENT_POLL: Duration = Duration::from_secs(10);

/// The one DNS name of the peer certificate: what the Deployment's `--peer-server-name` says.
pub fn peer_name(namespace: &str) -> String {
    format!("{PEER_SECRET}.{namespace}.svc")
}

/// What the two Secrets must hold after a pass.
#[derive(Debug, Clone)]
pub struct PeerPlan {
    /// The peer CA state for [`PEER_CA_SECRET`].
    pub ca: CaState,
    /// What happened to the CA.
    pub ca_step: CaStep,
    /// The pair for [`PEER_SECRET`].
    pub leaf: PemPair,
    /// Why the pair was issued in this pass, if it was.
    pub issued: Option<&'static str>,
    /// When a decision is next due.
    pub next: Option<SystemTime>,
}

/// Decides a pass at `now`. `ca` is the CA Secret's data, `existing` the pair Secret's pair and
/// `held` its `ca.crt` (what the replicas trust now).
pub fn plan_peer(
    ca: Option<&BTreeMap<String, String>>,
    existing: Option<&PemPair>,
    held: Option<&str>,
    namespace: &str,
    policy: &RotationPolicy,
    now: SystemTime,
) -> std::result::Result<PeerPlan, numaresources_runtime::tls::Error> {
    let state = ca.and_then(|data| match CaState::from_secret_data(data) {
        Ok(state) => Some(state),
        Err(error) => {
            tracing::warn!(%error, "the peer CA Secret cannot be used; a new peer CA replaces it");
            None
        }
    });
    let written = [existing.map(|pair| pair.cert_pem.as_str())];
    let (mut ca, ca_step) = match state {
        Some(state) => rotation::advance_ca(Some(&state), &written, policy, now)?,
        // What the replicas trust now stays trusted while the pair moves to the new CA.
        None => {
            let trusted = existing.zip(held).and_then(|(pair, held)| rotation::issuer_in(held, &pair.cert_pem));
            rotation::replace_ca(trusted.as_deref(), policy, now)?
        }
    };
    // A pair Secret found without the two-CA bundle during an overlap (edited, re-created)
    // restarts the overlap: the replicas must trust both before the pair moves.
    if ca.previous_cert_pem.is_some() && ca_step == CaStep::Unchanged && held != Some(ca.bundle().as_str()) {
        ca = ca.republished(now);
    }
    let names = [peer_name(namespace)];
    let (leaf, issued) = match (rotation::plan_leaf(&ca, existing, &names, policy, now), existing) {
        (LeafStep::Keep, Some(pair)) => (pair.clone(), None),
        (step, _) => {
            let authority = CertificateAuthority::from_pem_at(&ca.cert_pem, &ca.key_pem, now)?;
            let reason = match step {
                LeafStep::Issue(reason) => reason,
                LeafStep::Keep => "no peer certificate yet",
            };
            (authority.issue_peer_at(&names, now, policy.leaf_validity)?, Some(reason))
        }
    };
    let next = rotation::next_decision(&ca, &[leaf.cert_pem.as_str()], policy, now);
    Ok(PeerPlan { ca, ca_step, leaf, issued, next })
}

/// What a pass did.
#[derive(Debug, Default)]
pub struct PeerPass {
    /// Secrets written.
    pub writes: usize,
    /// When a decision is next due.
    pub next: Option<SystemTime>,
}

/// Whether the NRT API server is deployed, so its replicas need the peer certificate: always
/// when the install ships it; in operator mode while its Deployment exists (the operator removes
/// it when the cluster serves the NRT API itself).
pub async fn deployed(ctx: &Context) -> Result<bool> {
    if ctx.settings.apiserver_deployment == ApiserverDeployment::Installed {
        return Ok(true);
    }
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    Ok(get_opt(&deployments, APISERVER).await?.is_some())
}

/// One pass at `now`: reads both Secrets, writes what differs (the CA first, so no pair is
/// published whose issuer's key is not stored).
pub async fn pass(ctx: &Context, policy: &RotationPolicy, now: SystemTime) -> Result<PeerPass> {
    let namespace = &ctx.settings.namespace;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let ca_secret = get_opt(&secrets, PEER_CA_SECRET).await?;
    let pair_secret = get_opt(&secrets, PEER_SECRET).await?;
    for (name, existing, wanted) in
        [(PEER_CA_SECRET, &ca_secret, CA_SECRET_TYPE), (PEER_SECRET, &pair_secret, LEAF_SECRET_TYPE)]
    {
        if let Some(found) = foreign_type(existing.as_ref(), wanted) {
            report_foreign_secret(ctx, name, wanted, &found).await;
            return Err(Error::NotYet(format!(
                "Secret {namespace}/{name} has type {found:?}, not {wanted:?}: the peer certificate cannot be kept"
            )));
        }
    }
    let existing = pair_secret.as_ref().and_then(pair_of);
    let held = pair_secret.as_ref().and_then(|secret| string_data(secret).remove(keys::CA_CERT));
    let ca_data = ca_secret.as_ref().map(string_data);
    let plan = plan_peer(ca_data.as_ref(), existing.as_ref(), held.as_deref(), namespace, policy, now)
        .map_err(Error::Certificate)?;

    let mut writes = 0;
    let labels = names::labels(APISERVER, COMPONENT_APISERVER);
    let desired_ca =
        desired_secret(PEER_CA_SECRET, namespace, labels.clone(), CA_SECRET_TYPE, plan.ca.to_secret_data());
    if write_secret(&secrets, ca_secret.as_ref(), desired_ca, &CA_KEYS).await? {
        writes += 1;
        if plan.ca_step != CaStep::Unchanged {
            let note = format!("peer CA: {:?}", plan.ca_step);
            tracing::info!(%namespace, secret = PEER_CA_SECRET, step = ?plan.ca_step, "peer CA changed");
            let reference = secret_reference(namespace, PEER_CA_SECRET);
            ctx.event(&reference, EventType::Normal, "PeerCertificateAuthority", "Rotate", note).await;
        }
    }
    ctx.metrics.certificate_expiry(PEER_CA_SECRET, &plan.ca.cert_pem);
    let data = leaf_secret_data(&plan.leaf, &plan.ca.bundle());
    let desired = desired_secret(PEER_SECRET, namespace, labels, LEAF_SECRET_TYPE, data);
    if write_secret(&secrets, pair_secret.as_ref(), desired, &LEAF_KEYS).await? {
        writes += 1;
    }
    ctx.metrics.certificate_expiry(PEER_SECRET, &plan.leaf.cert_pem);
    if let Some(reason) = plan.issued {
        tracing::info!(%namespace, secret = PEER_SECRET, reason, "issued the API server replicas' peer certificate");
        let note = format!("issued the API server replicas' peer certificate: {reason}");
        ctx.event(&secret_reference(namespace, PEER_SECRET), EventType::Normal, "CertificateIssued", "Issue", note)
            .await;
    }
    Ok(PeerPass { writes, next: plan.next })
}

/// One step of the lifecycle loop: a pass when the API server is deployed; returns when to look
/// again.
pub(super) async fn step(ctx: &Context, policy: &RotationPolicy, now: SystemTime) -> Duration {
    let result = match deployed(ctx).await {
        Ok(true) => pass(ctx, policy, now).await.map(Some),
        Ok(false) => Ok(None),
        Err(error) => Err(error),
    };
    match result {
        Ok(Some(pass)) => {
            tracing::debug!(writes = pass.writes, "peer certificate pass");
            ctx.reset_backoff(BACKOFF_KEY);
            let due = pass.next.and_then(|next| next.duration_since(now).ok()).unwrap_or(super::RESYNC);
            due.clamp(Duration::from_secs(1), super::RESYNC)
        }
        Ok(None) => {
            ctx.reset_backoff(BACKOFF_KEY);
            // Not kept while the API server is not deployed: an old expiry must not alert.
            ctx.metrics.forget_certificate(PEER_CA_SECRET);
            ctx.metrics.forget_certificate(PEER_SECRET);
            DEPLOYMENT_POLL
        }
        Err(error) => {
            let delay = ctx.backoff(BACKOFF_KEY);
            tracing::warn!(%error, retry_in = ?delay, "peer certificate pass failed");
            delay
        }
    }
}

const BACKOFF_KEY: &str = "certificates/peer";

#[cfg(test)]
#[path = "peer_tests.rs"]
mod tests;
