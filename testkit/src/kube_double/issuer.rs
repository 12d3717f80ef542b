//! The cluster's ServiceAccount token issuer, as kube-apiserver publishes it for anyone who
//! verifies its tokens (the `system:service-account-issuer-discovery` ClusterRole grants it):
//! `/.well-known/openid-configuration` (the issuer and where its keys are) and `/openid/v1/jwks`
//! (its public keys). The double signs with a P-256 key (ES256) made when it is made (and another
//! at each [`KubeDouble::rotate_signing_key`]), so the tokens it signs ([`KubeDouble::signed_exporter_token`]) verify against what it publishes, and
//! TokenReview accepts them too, as kube-apiserver's does.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use super::pods::{EXPORTER_ACCOUNT, EXPORTER_NAMESPACE};
use super::reviews::KUBE_AUDIENCE;
use super::{KubeDouble, Shared};

/// The issuer kube-apiserver names by default (`--service-account-issuer`).
pub const ISSUER: &str = KUBE_AUDIENCE;
/// How long the tokens the double signs last (the kubelet's projected tokens: an hour).
const TOKEN_SECONDS: u64 = 3600;

/// The signing keys, the last one signing: a rotation adds a key and keeps the earlier ones
/// published, as kube-apiserver does while tokens signed with them may still be in use.
#[derive(Debug)]
pub(super) struct Issuer {
    keys: std::sync::Mutex<Vec<SigningKey>>,
}

#[derive(Debug)]
struct SigningKey {
    id: String,
    key: EcdsaKeyPair,
}

impl SigningKey {
    fn generate() -> Self {
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random).expect("a P-256 key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &random).expect("the key");
        // kube-apiserver's key ids are a digest of the public key; any stable text does here.
        let id = URL_SAFE_NO_PAD.encode(&key.public_key().as_ref()[1..17]);
        Self { id, key }
    }

    fn jwk(&self) -> Value {
        let point = self.key.public_key().as_ref();
        json!({"use": "sig", "kty": "EC", "kid": self.id, "alg": "ES256", "crv": "P-256",
               "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..65])})
    }
}

impl Issuer {
    pub(super) fn new() -> Self {
        Self { keys: std::sync::Mutex::new(vec![SigningKey::generate()]) }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Vec<SigningKey>> {
        self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn jwks(&self) -> Value {
        json!({"keys": self.keys().iter().map(SigningKey::jwk).collect::<Vec<_>>()})
    }

    fn signing_key_id(&self) -> String {
        self.keys().last().map(|key| key.id.clone()).unwrap_or_default()
    }

    /// A compact JWS of `claims`, signed with the current key.
    fn sign(&self, claims: &Value) -> String {
        let keys = self.keys();
        let current = keys.last().expect("the issuer always has a key");
        let encode = |value: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap_or_default());
        let signed = format!("{}.{}", encode(&json!({"alg": "ES256", "kid": current.id})), encode(claims));
        let signature = current.key.sign(&SystemRandom::new(), signed.as_bytes()).expect("signing");
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

impl KubeDouble {
    /// The id of the key the double signs with now.
    pub fn signing_key_id(&self) -> String {
        self.store.issuer.signing_key_id()
    }

    /// Rotates the issuer's signing key: tokens signed from now on name a new key id, which the
    /// key set publishes beside the earlier keys.
    pub fn rotate_signing_key(&self) {
        self.store.issuer.keys().push(SigningKey::generate());
    }

    /// A projected token of the exporters' ServiceAccount bound to the existing pod `pod`, for
    /// `audiences`, signed as kube-apiserver signs it (claims of 1.30+: the pod and its node).
    pub fn signed_exporter_token(&self, pod: &str, audiences: &[&str]) -> String {
        let (uid, node) = self.store.pods.uid_and_node(pod).expect("a token is bound to an existing pod");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let claims = json!({
            "aud": audiences, "iss": ISSUER, "iat": now, "nbf": now, "exp": now + TOKEN_SECONDS,
            "sub": format!("system:serviceaccount:{EXPORTER_NAMESPACE}:{EXPORTER_ACCOUNT}"),
            "kubernetes.io": {
                "namespace": EXPORTER_NAMESPACE,
                "node": {"name": node, "uid": format!("uid-node-{node}")},
                "pod": {"name": pod, "uid": uid},
                "serviceaccount": {"name": EXPORTER_ACCOUNT, "uid": "uid-sa-rte"},
            },
        });
        let token = self.store.issuer.sign(&claims);
        self.issue_bound(&token, pod, audiences);
        token
    }
}

pub(super) fn router() -> Router<Shared> {
    Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(|| async {
                Json(json!({"issuer": ISSUER, "jwks_uri": "https://127.0.0.1:6443/openid/v1/jwks",
                            "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                            "id_token_signing_alg_values_supported": ["ES256"]}))
            }),
        )
        .route("/openid/v1/jwks", get(|store: axum::extract::State<Shared>| async move { Json(store.issuer.jwks()) }))
}
