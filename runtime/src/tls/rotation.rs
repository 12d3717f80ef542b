//! Self-managed certificates over their whole life: a CA and the serving certificates it issues,
//! renewed before they expire, and a CA rotation during which no TLS handshake fails.
//!
//! Two delays make rotation delicate. A new `caBundle` takes a while to reach every client
//! (kube-apiserver's aggregator and admission plugins re-read the APIService and webhook
//! configurations through informers), and a renewed Secret takes a while to reach the server pods
//! (the kubelet refreshes mounted Secrets about once a minute). [`RotationPolicy::propagation`]
//! bounds both. A rotation therefore runs in three steps, each at least one propagation apart:
//!
//! 1. a new CA is made current and **both** CAs are published in the bundle; leaves stay as they
//!    are (still signed by the previous CA, which every client trusts);
//! 2. once every client has the two-CA bundle, leaves are re-issued by the new CA;
//! 3. once every server has its new leaf, the previous CA leaves the bundle.
//!
//! Everything here is a pure decision over PEM text and a clock: the controllers keep the state
//! in Secrets and patch `caBundle`, this module says what to write.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use x509_parser::extensions::GeneralName;

use crate::tls::pem;
use crate::tls::{CertificateAuthority, Error, PemPair};

/// How long certificates live, when they are replaced, and how long changes take to propagate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Lifetime of a new CA.
    pub ca_validity: Duration,
    /// A CA closer than this to its expiry is rotated.
    pub ca_renew_before: Duration,
    /// Lifetime of a serving certificate (never past its CA's).
    pub leaf_validity: Duration,
    /// A serving certificate closer than this to its expiry is re-issued.
    pub leaf_renew_before: Duration,
    /// The longest a published `caBundle` or a written Secret takes to reach every consumer.
    pub propagation: Duration,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl Default for RotationPolicy {
    /// CA: 5 years, rotated with a year left. Leaves: 1 year, re-issued with 4 months left (as
    /// cert-manager renews at two thirds of the lifetime). Propagation: one hour, well above the
    /// kubelet's and the informers' delays.
    fn default() -> Self {
        Self {
            ca_validity: 5 * 365 * DAY,
            ca_renew_before: 365 * DAY,
            leaf_validity: 365 * DAY,
            leaf_renew_before: 120 * DAY,
            propagation: Duration::from_secs(3600),
        }
    }
}

/// The CA state, as kept in a Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct CaState {
    /// The CA that issues new leaves (PEM certificate).
    pub cert_pem: String,
    /// Its private key (PKCS#8 PEM).
    pub key_pem: String,
    /// During a rotation: the CA being retired, still in the bundle.
    pub previous_cert_pem: Option<String>,
    /// When the current CA was made current (and published next to the previous one).
    pub rotated_at: SystemTime,
}

impl std::fmt::Debug for CaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaState")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("previous_cert_pem", &self.previous_cert_pem)
            .field("rotated_at", &crate::tls::time::rfc3339(self.rotated_at))
            .finish()
    }
}

/// Secret data keys of a [`CaState`].
pub mod keys {
    /// The current CA certificate.
    pub const CA_CERT: &str = "ca.crt";
    /// The current CA key.
    pub const CA_KEY: &str = "ca.key";
    /// The CA being retired, during a rotation.
    pub const PREVIOUS_CA_CERT: &str = "previous-ca.crt";
    /// When the current CA became current (Unix seconds).
    pub const ROTATED_AT: &str = "rotated-at";
    /// What clients must trust: the current CA, then the previous one during a rotation.
    pub const CA_BUNDLE: &str = "ca-bundle.crt";
}

impl CaState {
    /// What clients must trust (`caBundle`): the current CA and, during a rotation, the previous.
    pub fn bundle(&self) -> String {
        let mut bundle = self.cert_pem.trim_end().to_owned();
        bundle.push('\n');
        if let Some(previous) = &self.previous_cert_pem {
            bundle.push_str(previous.trim_end());
            bundle.push('\n');
        }
        bundle
    }

    /// The Secret data (string values; the caller base64-encodes as the API requires).
    pub fn to_secret_data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::from([
            (keys::CA_CERT.to_owned(), self.cert_pem.clone()),
            (keys::CA_KEY.to_owned(), self.key_pem.clone()),
            (keys::ROTATED_AT.to_owned(), unix_seconds(self.rotated_at).to_string()),
            (keys::CA_BUNDLE.to_owned(), self.bundle()),
        ]);
        if let Some(previous) = &self.previous_cert_pem {
            data.insert(keys::PREVIOUS_CA_CERT.to_owned(), previous.clone());
        }
        data
    }

    /// Reads the Secret data back; a missing or broken entry is an error that names it.
    pub fn from_secret_data(data: &BTreeMap<String, String>) -> Result<Self, Error> {
        let field = |key: &str| {
            data.get(key)
                .filter(|v| !v.trim().is_empty())
                .cloned()
                .ok_or_else(|| Error::InvalidCa { reason: format!("the CA Secret has no {key:?}") })
        };
        let rotated_at = field(keys::ROTATED_AT)?
            .trim()
            .parse::<i64>()
            .map(crate::tls::time::from_unix_seconds)
            .map_err(|e| Error::InvalidCa { reason: format!("{:?} is not Unix seconds: {e}", keys::ROTATED_AT) })?;
        let state = Self {
            cert_pem: field(keys::CA_CERT)?,
            key_pem: field(keys::CA_KEY)?,
            previous_cert_pem: data.get(keys::PREVIOUS_CA_CERT).filter(|v| !v.trim().is_empty()).cloned(),
            rotated_at,
        };
        // Both certificates must parse, so a broken Secret is found now and not at issue time.
        Parsed::from_pem(&state.cert_pem)?;
        if let Some(previous) = &state.previous_cert_pem {
            Parsed::from_pem(previous)?;
        }
        Ok(state)
    }

    /// The current CA, able to issue at `now`.
    fn authority_at(&self, now: SystemTime) -> Result<CertificateAuthority, Error> {
        CertificateAuthority::from_pem_at(&self.cert_pem, &self.key_pem, now)
    }

    /// The state with `rotated_at` no later than `now`: a moment in the future (a clock that was
    /// wrong, a hand-edited Secret) would hold the overlap for as long.
    fn clamped(&self, now: SystemTime) -> Self {
        Self { rotated_at: self.rotated_at.min(now), ..self.clone() }
    }

    /// Marks the bundle as published again at `now`: a consumer was found without it, so the
    /// overlap (the wait before leaves move to the current CA) starts over.
    pub fn republished(&self, now: SystemTime) -> Self {
        Self { rotated_at: now, ..self.clone() }
    }
}

/// What [`advance_ca`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaStep {
    /// Nothing to do.
    Unchanged,
    /// There was no usable CA (none, unreadable, or already expired): a new one, alone.
    Created,
    /// The CA certificate clients trust cannot issue (its key is missing, broken or not its own,
    /// or it is no CA), or came from an older install that kept no key: a new CA is current and
    /// the old certificate stays in the bundle, so the leaves it signed keep working until they
    /// move, as in a rotation.
    Replaced,
    /// The CA was near its expiry: a new one is current, the old one stays in the bundle.
    Rotated,
    /// Every leaf has come from the current CA for a propagation: the previous CA is retired.
    PreviousRetired,
}

/// Moves the CA state forward at `now`. `leaves` are the serving certificates currently written
/// (PEM), one entry per serving certificate we keep, `None` where its Secret is missing; they
/// decide when the previous CA may leave the bundle.
pub fn advance_ca(
    state: Option<&CaState>,
    leaves: &[Option<&str>],
    policy: &RotationPolicy,
    now: SystemTime,
) -> Result<(CaState, CaStep), Error> {
    let Some(state) = state.map(|state| state.clamped(now)) else {
        return Ok((new_ca(policy, now, None)?, CaStep::Created));
    };
    let Ok(parsed) = Parsed::from_pem(&state.cert_pem) else {
        return Ok((new_ca(policy, now, None)?, CaStep::Created));
    };
    if let Err(error) = state.authority_at(now) {
        tracing::warn!(%error, "the CA cannot issue; a new one replaces it");
        return replace_ca(Some(&state.cert_pem), policy, now);
    }
    if state.previous_cert_pem.is_some() {
        // A rotation in progress finishes before anything else: rotating again would drop a CA
        // that leaves may still chain to. (Checked first so that a CA whose whole life falls in
        // the renew window still gets its predecessor retired.)
        if leaves_settled(leaves, &parsed.subject, policy, now) {
            let retired = CaState { previous_cert_pem: None, ..state };
            return Ok((retired, CaStep::PreviousRetired));
        }
        return Ok((state, CaStep::Unchanged));
    }
    if parsed.not_after.duration_since(now).unwrap_or_default() <= policy.ca_renew_before {
        return Ok((new_ca(policy, now, Some(state.cert_pem.clone()))?, CaStep::Rotated));
    }
    Ok((state, CaStep::Unchanged))
}

/// A new CA in place of one we cannot issue from. `trusted` is the certificate clients may trust
/// now (an unusable CA Secret's, or what an older install left next to a serving certificate):
/// when it is a CA that has not expired, it stays in the bundle as the previous CA
/// ([`CaStep::Replaced`]); otherwise the new CA is alone ([`CaStep::Created`]).
pub fn replace_ca(trusted: Option<&str>, policy: &RotationPolicy, now: SystemTime) -> Result<(CaState, CaStep), Error> {
    let usable = trusted.filter(|pem| Parsed::from_pem(pem).is_ok_and(|ca| ca.is_ca && now < ca.not_after));
    match usable {
        Some(pem) => Ok((new_ca(policy, now, Some(pem.trim_end().to_owned() + "\n"))?, CaStep::Replaced)),
        None => Ok((new_ca(policy, now, None)?, CaStep::Created)),
    }
}

/// The certificate of `bundle` (PEM, one or more) that issued `cert_pem`, as PEM.
pub fn issuer_in(bundle: &str, cert_pem: &str) -> Option<String> {
    let cert = Parsed::from_pem(cert_pem).ok()?;
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .filter_map(|block| block.find("-----BEGIN CERTIFICATE-----").map(|start| format!("{}\n", &block[start..])))
        .find(|pem| Parsed::from_pem(pem).is_ok_and(|ca| ca.subject == cert.issuer))
}

/// Whether every leaf exists, comes from the CA named `subject` and has been out for a
/// propagation. A missing leaf is not settled: it is about to be issued, and the CA it replaces
/// may still be what its server presents.
fn leaves_settled(leaves: &[Option<&str>], subject: &str, policy: &RotationPolicy, now: SystemTime) -> bool {
    leaves.iter().all(|leaf| match leaf.map(Parsed::from_pem) {
        Some(Ok(parsed)) => parsed.issuer == subject && passed(parsed.issued_at(), policy.propagation, now),
        _ => false,
    })
}

/// Whether `delay` has passed since `since` at `now` (never, when the sum is beyond time).
fn passed(since: SystemTime, delay: Duration, now: SystemTime) -> bool {
    since.checked_add(delay).is_some_and(|end| end <= now)
}

fn new_ca(policy: &RotationPolicy, now: SystemTime, previous: Option<String>) -> Result<CaState, Error> {
    // A name unique to this CA, so that a leaf's issuer tells which CA signed it.
    let name = format!("numaresources-ca@{}", unix_seconds(now));
    let authority = CertificateAuthority::generate_at(&name, now, policy.ca_validity)?;
    Ok(CaState {
        cert_pem: authority.cert_pem().to_owned(),
        key_pem: authority.key_pem(),
        previous_cert_pem: previous,
        rotated_at: now,
    })
}

/// Why [`plan_leaf`] wants a new serving certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeafStep {
    /// The current one is fine.
    Keep,
    /// Issue a new one, for this reason (worth an Event).
    Issue(&'static str),
}

/// Decides whether the serving certificate `existing` for `names` must be re-issued at `now`.
pub fn plan_leaf(
    ca: &CaState,
    existing: Option<&PemPair>,
    names: &[String],
    policy: &RotationPolicy,
    now: SystemTime,
) -> LeafStep {
    let Some(existing) = existing else { return LeafStep::Issue("no serving certificate yet") };
    let Ok(leaf) = Parsed::from_pem(&existing.cert_pem) else {
        return LeafStep::Issue("the serving certificate does not parse");
    };
    if crate::tls::ServingCertificate::from_pem(existing.cert_pem.as_bytes(), existing.key_pem.as_bytes()).is_err() {
        return LeafStep::Issue("the serving key does not match its certificate");
    }
    let Ok(current) = Parsed::from_pem(&ca.cert_pem) else { return LeafStep::Issue("the CA does not parse") };
    let previous = ca.previous_cert_pem.as_deref().and_then(|pem| Parsed::from_pem(pem).ok());
    let signed_by_previous = previous.is_some_and(|p| p.subject == leaf.issuer);
    if leaf.issuer != current.subject && !signed_by_previous {
        return LeafStep::Issue("the serving certificate comes from a CA we no longer trust");
    }
    if leaf.not_after <= now {
        return LeafStep::Issue("the serving certificate has expired");
    }
    if signed_by_previous {
        // Only once every client trusts the new CA may a leaf it signed be served; until then
        // the old leaf stays (even one that misses a name: it is what servers present now). An
        // overlap that keeps starting over must not let it expire: it is replaced a propagation
        // before its end at the latest, so the new one reaches the servers in time.
        if passed(ca.rotated_at, policy.propagation, now) {
            return LeafStep::Issue("the CA was rotated and the new one has reached every client");
        }
        if now.checked_add(policy.propagation).is_some_and(|end| end < leaf.not_after) {
            return LeafStep::Keep;
        }
        return LeafStep::Issue("the serving certificate from the previous CA is about to expire");
    }
    if !names.iter().all(|name| leaf.names.contains(name)) {
        return LeafStep::Issue("the serving certificate does not cover every service name");
    }
    if leaf.not_after.duration_since(now).unwrap_or_default() <= policy.leaf_renew_before {
        return LeafStep::Issue("the serving certificate is due for renewal");
    }
    LeafStep::Keep
}

/// Issues a serving certificate for `names` from the current CA of `ca`, as of `now`.
pub fn issue_leaf(ca: &CaState, names: &[String], policy: &RotationPolicy, now: SystemTime) -> Result<PemPair, Error> {
    ca.authority_at(now)?.issue_serving_at(names, now, policy.leaf_validity)
}

/// The earliest moment after `now` at which [`advance_ca`] or [`plan_leaf`] may decide something
/// new for `ca` and the written `leaves` (PEM), so a controller can sleep until then. `None`
/// when nothing parses (the next pass will replace it anyway).
pub fn next_decision(ca: &CaState, leaves: &[&str], policy: &RotationPolicy, now: SystemTime) -> Option<SystemTime> {
    let current = Parsed::from_pem(&ca.cert_pem).ok()?;
    let mut moments = vec![current.not_after, current.not_after.checked_sub(policy.ca_renew_before).unwrap_or(now)];
    let rotating = ca.previous_cert_pem.is_some();
    if rotating {
        moments.extend(ca.rotated_at.checked_add(policy.propagation));
    }
    for leaf in leaves.iter().filter_map(|leaf| Parsed::from_pem(leaf).ok()) {
        moments.push(leaf.not_after);
        moments.push(leaf.not_after.checked_sub(policy.leaf_renew_before).unwrap_or(now));
        if rotating {
            moments.push(leaf.not_after.checked_sub(policy.propagation).unwrap_or(now));
            if leaf.issuer == current.subject {
                moments.extend(leaf.issued_at().checked_add(policy.propagation));
            }
        }
    }
    moments.into_iter().filter(|moment| *moment > now).min()
}

/// Whether `cert_pem` names the CA `ca_pem` as its issuer (how the decisions tell CAs apart:
/// each CA we make has a name of its own).
pub fn issued_by(cert_pem: &str, ca_pem: &str) -> bool {
    match (Parsed::from_pem(cert_pem), Parsed::from_pem(ca_pem)) {
        (Ok(cert), Ok(ca)) => cert.issuer == ca.subject,
        _ => false,
    }
}

/// A certificate's notAfter, if it parses.
pub fn not_after(cert_pem: &str) -> Option<SystemTime> {
    Parsed::from_pem(cert_pem).ok().map(|parsed| parsed.not_after)
}

/// The names a serving certificate for a Service covers, as kube-apiserver and in-cluster
/// clients may address it: `<svc>.<ns>.svc` (what the aggregator and admission plugins verify),
/// `<svc>.<ns>.svc.cluster.local`, `<svc>` and `<svc>.<ns>`.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        service.to_owned(),
        format!("{service}.{namespace}"),
    ]
}

/// The facts of a certificate the decisions need.
struct Parsed {
    subject: String,
    /// basicConstraints CA:TRUE.
    is_ca: bool,
    issuer: String,
    not_before: SystemTime,
    not_after: SystemTime,
    names: Vec<String>,
}

impl Parsed {
    fn from_pem(text: &str) -> Result<Self, Error> {
        let der = pem::certificates(text.as_bytes(), "certificate")?.swap_remove(0);
        let (_, cert) = x509_parser::parse_x509_certificate(&der)
            .map_err(|err| Error::MalformedCertificate { origin: "certificate".to_owned(), reason: err.to_string() })?;
        let names = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|name| match name {
                        GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            subject: cert.subject().to_string(),
            is_ca: cert.basic_constraints().ok().flatten().is_some_and(|constraints| constraints.value.ca),
            issuer: cert.issuer().to_string(),
            not_before: crate::tls::time::from_unix_seconds(cert.validity().not_before.timestamp()),
            not_after: crate::tls::time::from_unix_seconds(cert.validity().not_after.timestamp()),
            names,
        })
    }

    /// When it was issued: our certificates are backdated by a fixed amount.
    fn issued_at(&self) -> SystemTime {
        self.not_before.checked_add(crate::tls::generate::BACKDATE).unwrap_or(self.not_before)
    }
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs()
}

#[cfg(test)]
#[path = "rotation_tests.rs"]
mod tests;
