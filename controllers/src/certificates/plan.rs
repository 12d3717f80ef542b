//! One pass of the certificate lifecycle as a pure function: from what the Secrets and the
//! `caBundle` fields hold now to what they must hold, built on `numaresources_runtime::tls::rotation`.

use std::collections::BTreeMap;
use std::time::SystemTime;

use numaresources_runtime::tls::rotation::{self, CaState, CaStep, LeafStep, RotationPolicy};
use numaresources_runtime::tls::{Error, PemPair};

use crate::names::{
    APISERVER, APISERVER_TLS_SECRET, COMPONENT_APISERVER, COMPONENT_WEBHOOK, WEBHOOK, WEBHOOK_TLS_SECRET,
};

/// A serving certificate we keep: the Secret its server mounts and the Service it answers for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leaf {
    /// The `kubernetes.io/tls` Secret.
    pub secret: &'static str,
    /// The Service whose DNS names it covers.
    pub service: &'static str,
    /// `app.kubernetes.io/component` of the Secret.
    pub component: &'static str,
}

/// The API server's and the webhook's serving certificates.
pub const LEAVES: [Leaf; 2] = [
    Leaf { secret: APISERVER_TLS_SECRET, service: APISERVER, component: COMPONENT_APISERVER },
    Leaf { secret: WEBHOOK_TLS_SECRET, service: WEBHOOK, component: COMPONENT_WEBHOOK },
];

/// What the cluster holds, as far as the decisions care.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The CA Secret's data, if it exists.
    pub ca: Option<BTreeMap<String, String>>,
    /// Each leaf Secret's pair (same order as `LEAVES`), if it exists with both keys.
    pub leaves: Vec<Option<PemPair>>,
    /// Each leaf Secret's `ca.crt` (same order as `LEAVES`): where an older install kept the
    /// only copy of its CA certificate.
    pub leaf_cas: Vec<Option<String>>,
    /// The `caBundle` each existing consumer of ours holds now (the APIService, every webhook).
    pub bundles: Vec<Option<String>>,
    /// How many consumers could not be read: whether they hold the bundle is unknown.
    pub unreadable: usize,
}

/// What the Secrets and the `caBundle` fields must hold after the pass.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The CA state to keep in the CA Secret.
    pub ca: CaState,
    /// What happened to the CA.
    pub ca_step: CaStep,
    /// A consumer lacked the bundle during an overlap: the overlap starts over from now.
    pub republished: bool,
    /// The restart is worth an Event: the first in a propagation period (a configuration that
    /// keeps losing `caBundle`, say to a GitOps tool re-applying it, is reported once an hour,
    /// not every pass).
    pub announce_republished: bool,
    /// The pair each leaf Secret must hold (same order as `LEAVES`).
    pub leaves: Vec<PemPair>,
    /// Why each leaf was issued in this pass, if it was.
    pub issued: Vec<Option<&'static str>>,
    /// When to look again: the earliest moment a decision may change.
    pub next: Option<SystemTime>,
}

impl Plan {
    /// What every client must trust: the `caBundle`, and the leaf Secrets' `ca.crt`.
    pub fn bundle(&self) -> String {
        self.ca.bundle()
    }
}

/// Decides the pass at `now` for the Services of `namespace`.
pub fn plan(observed: &Observed, namespace: &str, policy: &RotationPolicy, now: SystemTime) -> Result<Plan, Error> {
    let state = observed.ca.as_ref().and_then(|data| match CaState::from_secret_data(data) {
        Ok(state) => Some(state),
        Err(error) => {
            tracing::warn!(%error, "the CA Secret cannot be used; a new CA replaces it");
            None
        }
    });
    let written: Vec<Option<&str>> = (0..LEAVES.len())
        .map(|index| observed.leaves.get(index).and_then(Option::as_ref).map(|pair| pair.cert_pem.as_str()))
        .collect();
    let stored_rotated_at = state.as_ref().map(|state| state.rotated_at.min(now));
    let (mut ca, ca_step) = match state {
        Some(state) => rotation::advance_ca(Some(&state), &written, policy, now)?,
        None => rotation::replace_ca(still_trusted(observed).as_deref(), policy, now)?,
    };

    // The overlap is measured from the moment every consumer holds both CAs: one found without
    // the current bundle (a failed patch, a configuration re-created or edited) restarts it.
    let bundle = ca.bundle();
    let lacking = observed.bundles.iter().any(|held| held.as_deref() != Some(bundle.as_str()));
    let overlapping = ca.previous_cert_pem.is_some() && ca_step == CaStep::Unchanged;
    let republished = overlapping && lacking;
    if republished {
        ca = ca.republished(now);
    }
    let announce_republished = republished
        && stored_rotated_at.is_some_and(|at| at.checked_add(policy.propagation).is_some_and(|end| end <= now));
    // During an overlap, a consumer could not be read: leaves wait for it, decided as if the
    // overlap started now (not recorded: when it is readable again it either holds the bundle,
    // which only we write, or restarts the overlap as a lacking one).
    let held_back = overlapping && !republished && observed.unreadable > 0;
    let deciding = if held_back { ca.republished(now) } else { ca.clone() };

    let mut leaves = Vec::with_capacity(LEAVES.len());
    let mut issued = Vec::with_capacity(LEAVES.len());
    for (leaf, existing) in LEAVES.iter().zip(observed.leaves.iter().chain(std::iter::repeat(&None))) {
        let names = rotation::service_names(leaf.service, namespace);
        match (rotation::plan_leaf(&deciding, existing.as_ref(), &names, policy, now), existing) {
            (LeafStep::Keep, Some(pair)) => {
                leaves.push(pair.clone());
                issued.push(None);
            }
            (step, _) => {
                leaves.push(rotation::issue_leaf(&ca, &names, policy, now)?);
                issued.push(Some(match step {
                    LeafStep::Issue(reason) => reason,
                    LeafStep::Keep => "no serving certificate yet",
                }));
            }
        }
    }
    let certs: Vec<&str> = leaves.iter().map(|pair| pair.cert_pem.as_str()).collect();
    let next = rotation::next_decision(&ca, &certs, policy, now);
    Ok(Plan { ca, ca_step, republished, announce_republished, leaves, issued, next })
}

/// With no usable CA Secret: the CA certificate clients may trust now, so that it stays in the
/// bundle while the leaves it signed are replaced. That is the unusable CA Secret's certificate,
/// or else (upgrading from the previous operator, which kept no CA key) the certificate in a leaf
/// Secret's `ca.crt` that issued its `tls.crt`.
fn still_trusted(observed: &Observed) -> Option<String> {
    let from_secret =
        observed.ca.as_ref().and_then(|data| data.get(numaresources_runtime::tls::rotation::keys::CA_CERT));
    if let Some(pem) = from_secret
        && rotation::not_after(pem).is_some()
    {
        return Some(pem.clone());
    }
    observed
        .leaves
        .iter()
        .zip(&observed.leaf_cas)
        .find_map(|(pair, ca)| rotation::issuer_in(ca.as_deref()?, &pair.as_ref()?.cert_pem))
}

/// The data of a leaf Secret: the `kubernetes.io/tls` keys plus `ca.crt`, which holds every CA
/// clients must trust now (the bundle), as cert-manager's `ca.crt` holds the issuer.
pub fn leaf_secret_data(pair: &PemPair, bundle: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("tls.crt".to_owned(), pair.cert_pem.clone()),
        ("tls.key".to_owned(), pair.key_pem.clone()),
        ("ca.crt".to_owned(), bundle.to_owned()),
    ])
}
