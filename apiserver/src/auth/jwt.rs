//! ServiceAccount tokens verified in process: the projected tokens kube-apiserver signs for pods
//! are JWTs (compact JWS, RS256 or ES256) that anyone holding the issuer's public keys can check,
//! so a token we can verify here needs no TokenReview.
//!
//! What is checked, as kube-apiserver's own ServiceAccount authenticator checks it: the signature
//! by a key of the issuer's key set (by key id), the issuer, that our audience is among the
//! token's, expiry and not-before with kube-apiserver's one minute of leeway, and the claims of a
//! token bound to a pod (namespace, ServiceAccount, pod name and uid). What it cannot check alone
//! (that the pod still exists with that uid) is the caller's, against its pod cache. A token this
//! verifier refuses for not being one of ours to judge ([`Refusal::is_for_token_review`]: another
//! issuer, a key we do not hold, a token bound to no pod) goes to TokenReview as before.
//!
//! Tokens come from the network: every size is bounded ([`MAX_TOKEN_BYTES`]) and nothing is
//! decoded before the token's shape is known.

use std::collections::HashMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;

/// The longest token looked at (a projected token is about 1 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// How far expiry and not-before may be off, as kube-apiserver allows (go-jose's default).
pub const CLOCK_LEEWAY_SECONDS: u64 = 60;

/// One public key of the issuer.
#[derive(Clone)]
enum PublicKey {
    /// RS256: modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// ES256: the uncompressed P-256 point (`0x04 || x || y`).
    EcP256(Vec<u8>),
}

/// The issuer and its keys by key id, from its OpenID discovery document and key set.
#[derive(Clone)]
pub struct IssuerKeys {
    issuer: String,
    keys: HashMap<String, PublicKey>,
}

impl fmt::Debug for IssuerKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&String> = self.keys.keys().collect();
        ids.sort();
        f.debug_struct("IssuerKeys").field("issuer", &self.issuer).field("key_ids", &ids).finish()
    }
}

/// Why a key set could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwksError {
    /// Not a JSON Web Key Set.
    #[error("not a JSON Web Key Set: {0}")]
    Malformed(String),
    /// No key we can verify with (RSA, or EC on P-256, each with a key id).
    #[error("the key set holds no RSA or P-256 signing key with a key id")]
    NoUsableKey,
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl Jwk {
    fn public_key(&self) -> Option<PublicKey> {
        if self.usage.as_deref().is_some_and(|usage| usage != "sig") {
            return None;
        }
        let field = |value: &Option<String>| URL_SAFE_NO_PAD.decode(value.as_deref()?).ok();
        match (self.kty.as_str(), self.crv.as_deref()) {
            ("RSA", _) => Some(PublicKey::Rsa { n: field(&self.n)?, e: field(&self.e)? }),
            ("EC", Some("P-256")) => {
                let (x, y) = (field(&self.x)?, field(&self.y)?);
                (x.len() == 32 && y.len() == 32).then(|| PublicKey::EcP256([&[4u8][..], &x, &y].concat()))
            }
            _ => None,
        }
    }
}

impl IssuerKeys {
    /// The keys of `issuer` from its key set (`jwks_uri`'s document); keys of other types, or
    /// without a key id, are skipped (kube-apiserver names each of its keys).
    pub fn from_jwks(issuer: &str, jwks: &[u8]) -> Result<Self, JwksError> {
        let set: JwkSet = serde_json::from_slice(jwks).map_err(|error| JwksError::Malformed(error.to_string()))?;
        let keys: HashMap<String, PublicKey> =
            set.keys.iter().filter_map(|jwk| Some((jwk.kid.clone()?, jwk.public_key()?))).collect();
        if keys.is_empty() {
            return Err(JwksError::NoUsableKey);
        }
        Ok(Self { issuer: issuer.to_owned(), keys })
    }

    /// The issuer whose tokens these keys verify.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Whether the set holds key `kid`.
    pub fn has_key(&self, kid: &str) -> bool {
        self.keys.contains_key(kid)
    }
}

/// A pod (or node) a token is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BoundObject {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

/// Who a verified token stands for: a ServiceAccount, bound to a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountToken {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount.
    pub service_account: BoundObject,
    /// The pod the token was issued for.
    pub pod: BoundObject,
    /// The pod's node (kube-apiserver 1.30+ names it).
    pub node: Option<BoundObject>,
    /// Expiry, in seconds since the epoch.
    pub expires_at: u64,
}

impl ServiceAccountToken {
    /// The user name kube-apiserver gives the ServiceAccount.
    pub fn user_name(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.service_account.name)
    }
}

/// Why a token was not accepted here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a compact JWS within [`MAX_TOKEN_BYTES`].
    #[error("not a JSON Web Token")]
    Malformed,
    /// An algorithm we do not verify (only RS256 and ES256 are).
    #[error("signed with {0:?}, which is not verified here")]
    Algorithm(String),
    /// Issued by someone else.
    #[error("issued by {0:?}, not by the cluster's ServiceAccount issuer")]
    Issuer(String),
    /// Signed with a key we do not hold (yet: the keys may have rotated).
    #[error("signed with key {0:?}, which the issuer's key set does not hold")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("the signature does not verify")]
    Signature,
    /// Not issued for our audience.
    #[error("not issued for this server's audience")]
    Audience,
    /// Past its expiry.
    #[error("expired")]
    Expired,
    /// Before its not-before.
    #[error("not valid yet")]
    NotYetValid,
    /// A valid token of the issuer, but not a pod's ServiceAccount token.
    #[error("not bound to a pod")]
    NotBoundToAPod,
}

impl Refusal {
    /// Whether TokenReview should judge the token instead: it may be valid in ways this
    /// verifier does not know (another issuer kube-apiserver accepts, a key it rotated in, a
    /// token bound to no pod, a token for kube-apiserver's own audience, which this server
    /// accepts as every aggregated API server does). A token that is ours to judge and fails
    /// (a bad signature, expired) is refused outright.
    pub fn is_for_token_review(&self) -> bool {
        matches!(
            self,
            Self::Malformed
                | Self::Algorithm(_)
                | Self::Issuer(_)
                | Self::UnknownKey(_)
                | Self::Audience
                | Self::NotBoundToAPod
        )
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

/// `aud`: one string or several.
#[derive(Deserialize)]
#[serde(untagged)]
enum Audiences {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    aud: Audiences,
    exp: u64,
    nbf: Option<u64>,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Option<KubernetesClaims>,
}

#[derive(Deserialize)]
struct KubernetesClaims {
    namespace: String,
    serviceaccount: BoundObject,
    pod: Option<BoundObject>,
    node: Option<BoundObject>,
}

/// The key id a token's header names (read without verifying anything: to pick the keys).
pub fn key_id(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let header = URL_SAFE_NO_PAD.decode(token.split('.').next()?).ok()?;
    serde_json::from_slice::<Header>(&header).ok()?.kid
}

/// When a token says it expires, read without verifying anything: only to remember a reviewed
/// token's identity no longer than the token lasts.
pub fn expiry_unverified(token: &str) -> Option<u64> {
    #[derive(Deserialize)]
    struct Expiry {
        exp: Option<u64>,
    }
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let payload = URL_SAFE_NO_PAD.decode(token.split('.').nth(1)?).ok()?;
    serde_json::from_slice::<Expiry>(&payload).ok()?.exp
}

/// Verifies `token` for `audience` against `keys` at `now` (seconds since the epoch).
pub fn verify(keys: &IssuerKeys, token: &str, audience: &str, now: u64) -> Result<ServiceAccountToken, Refusal> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Refusal::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed);
    };
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| Refusal::Malformed);
    let header: Header = serde_json::from_slice(&decode(header)?).map_err(|_| Refusal::Malformed)?;
    let algorithm = match header.alg.as_str() {
        "RS256" | "ES256" => header.alg.as_str(),
        _ => return Err(Refusal::Algorithm(header.alg)),
    };
    let claims: Claims = serde_json::from_slice(&decode(payload)?).map_err(|_| Refusal::Malformed)?;
    if claims.iss != keys.issuer {
        return Err(Refusal::Issuer(claims.iss));
    }
    let kid = header.kid.unwrap_or_default();
    let key = keys.keys.get(&kid).ok_or(Refusal::UnknownKey(kid))?;
    let signed = &token.as_bytes()[..token.len() - signature.len() - 1];
    let signature = decode(signature)?;
    let verified = match (algorithm, key) {
        ("RS256", PublicKey::Rsa { n, e }) => {
            RsaPublicKeyComponents { n, e }.verify(&signature::RSA_PKCS1_2048_8192_SHA256, signed, &signature)
        }
        ("ES256", PublicKey::EcP256(point)) => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(signed, &signature)
        }
        // A key of the other type under that id: the token cannot have been signed with it.
        _ => return Err(Refusal::Signature),
    };
    verified.map_err(|_| Refusal::Signature)?;
    let ours = match &claims.aud {
        Audiences::One(one) => one == audience,
        Audiences::Many(many) => many.iter().any(|a| a == audience),
    };
    if !ours {
        return Err(Refusal::Audience);
    }
    if now >= claims.exp.saturating_add(CLOCK_LEEWAY_SECONDS) {
        return Err(Refusal::Expired);
    }
    if claims.nbf.is_some_and(|nbf| now.saturating_add(CLOCK_LEEWAY_SECONDS) < nbf) {
        return Err(Refusal::NotYetValid);
    }
    let Some(KubernetesClaims { namespace, serviceaccount, pod: Some(pod), node }) = claims.kubernetes else {
        return Err(Refusal::NotBoundToAPod);
    };
    Ok(ServiceAccountToken { namespace, service_account: serviceaccount, pod, node, expires_at: claims.exp })
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
