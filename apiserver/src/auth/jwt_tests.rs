//! Tokens signed here as kube-apiserver signs them (RS256 with an RSA key, ES256 with a P-256
//! key), each refusal named by its rule.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};

use super::*;

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const OURS: &str = "nodetopology.openshift.io";
const NOW: u64 = 1_800_000_000;

/// The test keys: an RSA key (`testdata/`) and a P-256 key made for this run.
struct Signer {
    rsa: RsaKeyPair,
    ec: EcdsaKeyPair,
}

impl Signer {
    fn new() -> Self {
        let rsa = RsaKeyPair::from_der(include_bytes!("testdata/rsa-2048.der")).unwrap();
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random).unwrap();
        let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &random).unwrap();
        Self { rsa, ec }
    }

    /// The key set as kube-apiserver serves it on `/openid/v1/jwks`: `rsa-1` and `ec-1`.
    fn jwks(&self) -> Vec<u8> {
        let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
        let (n, e) = modulus_and_exponent(self.rsa.public().as_ref());
        let point = self.ec.public_key().as_ref();
        serde_json::to_vec(&json!({"keys": [
            {"use": "sig", "kty": "RSA", "kid": "rsa-1", "alg": "RS256", "n": b64(n), "e": b64(e)},
            {"use": "sig", "kty": "EC", "kid": "ec-1", "alg": "ES256", "crv": "P-256",
             "x": b64(&point[1..33]), "y": b64(&point[33..65])},
        ]}))
        .unwrap()
    }

    fn keys(&self) -> IssuerKeys {
        IssuerKeys::from_jwks(ISSUER, &self.jwks()).unwrap()
    }

    /// A compact JWS of `claims` with header `{"alg", "kid"}`, signed by the key `alg` names.
    fn sign(&self, alg: &str, kid: &str, claims: &Value) -> String {
        let encode = |value: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap());
        let signed = format!("{}.{}", encode(&json!({"alg": alg, "kid": kid})), encode(claims));
        let random = SystemRandom::new();
        let signature = match alg {
            "RS256" => {
                let mut signature = vec![0; self.rsa.public().modulus_len()];
                self.rsa.sign(&RSA_PKCS1_SHA256, &random, signed.as_bytes(), &mut signature).unwrap();
                signature
            }
            _ => self.ec.sign(&random, signed.as_bytes()).unwrap().as_ref().to_vec(),
        };
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
    }
}

/// `n` and `e` of a DER `RSAPublicKey` (`SEQUENCE { INTEGER n, INTEGER e }`), without the
/// leading zero byte DER puts before a high bit, as a JWK writes them.
fn modulus_and_exponent(der: &[u8]) -> (&[u8], &[u8]) {
    /// One TLV at the start of `input`: its tag, its value and what follows.
    fn tlv(input: &[u8]) -> (u8, &[u8], &[u8]) {
        let (tag, first) = (input[0], input[1]);
        let (length, header) = match first {
            short if short < 0x80 => (usize::from(short), 2),
            long => {
                let count = usize::from(long & 0x7f);
                (input[2..2 + count].iter().fold(0, |length, byte| length << 8 | usize::from(*byte)), 2 + count)
            }
        };
        (tag, &input[header..header + length], &input[header + length..])
    }
    let (_, sequence, _) = tlv(der);
    let (_, n, rest) = tlv(sequence);
    let (_, e, _) = tlv(rest);
    (n.strip_prefix(&[0]).unwrap_or(n), e)
}

/// The claims of an exporter's projected token, as kube-apiserver 1.30+ writes them.
fn exporter_claims() -> Value {
    json!({
        "aud": [OURS], "exp": NOW + 3600, "iat": NOW - 60, "nbf": NOW - 60, "iss": ISSUER,
        "jti": "0c6fa8a4", "sub": "system:serviceaccount:numaresources:numaresources-rte",
        "kubernetes.io": {
            "namespace": "numaresources",
            "node": {"name": "worker-0", "uid": "node-uid"},
            "pod": {"name": "numaresources-rte-x7k2p", "uid": "pod-uid"},
            "serviceaccount": {"name": "numaresources-rte", "uid": "sa-uid"},
        },
    })
}

fn with(mut claims: Value, pointer: &str, value: Value) -> Value {
    *claims.pointer_mut(pointer).unwrap() = value;
    claims
}

#[test]
fn tokens_signed_by_either_key_are_accepted_with_their_pod() {
    let signer = Signer::new();
    for (alg, kid) in [("RS256", "rsa-1"), ("ES256", "ec-1")] {
        let token = signer.sign(alg, kid, &exporter_claims());
        let verified = verify(&signer.keys(), &token, OURS, NOW).unwrap();
        assert_eq!(verified.user_name(), "system:serviceaccount:numaresources:numaresources-rte", "{alg}");
        assert_eq!(verified.pod, BoundObject { name: "numaresources-rte-x7k2p".into(), uid: "pod-uid".into() });
        assert_eq!(verified.node.as_ref().map(|n| n.name.as_str()), Some("worker-0"));
        assert_eq!(verified.expires_at, NOW + 3600);
    }
    // One audience as a plain string, and no node (before 1.30), are accepted too.
    let claims = with(exporter_claims(), "/aud", json!(OURS));
    let claims = with(claims, "/kubernetes.io/node", Value::Null);
    let verified = verify(&signer.keys(), &signer.sign("ES256", "ec-1", &claims), OURS, NOW).unwrap();
    assert_eq!(verified.node, None);
}

#[test]
fn each_rule_refuses_with_its_name() {
    let signer = Signer::new();
    let keys = signer.keys();
    let refused = |token: &str, now: u64| verify(&keys, token, OURS, now).unwrap_err();
    let good = exporter_claims();
    let sign = |claims: &Value| signer.sign("ES256", "ec-1", claims);

    assert_eq!(
        refused(&sign(&with(good.clone(), "/aud", json!(["https://kubernetes.default.svc"]))), NOW),
        Refusal::Audience
    );
    assert_eq!(
        refused(&sign(&with(good.clone(), "/iss", json!("https://elsewhere"))), NOW),
        Refusal::Issuer("https://elsewhere".into())
    );
    assert_eq!(refused(&signer.sign("ES256", "ec-2", &good), NOW), Refusal::UnknownKey("ec-2".into()));
    assert_eq!(refused(&signer.sign("ES256", "rsa-1", &good), NOW), Refusal::Signature, "a key of the other type");
    // Expiry and not-before, each with the minute of leeway.
    assert_eq!(refused(&sign(&good), NOW + 3600 + CLOCK_LEEWAY_SECONDS), Refusal::Expired);
    assert!(verify(&keys, &sign(&good), OURS, NOW + 3600 + CLOCK_LEEWAY_SECONDS - 1).is_ok(), "within the leeway");
    assert_eq!(refused(&sign(&with(good.clone(), "/nbf", json!(NOW + 120))), NOW), Refusal::NotYetValid);
    assert!(verify(&keys, &sign(&with(good.clone(), "/nbf", json!(NOW + 30))), OURS, NOW).is_ok(), "within the leeway");
    // A ServiceAccount token bound to no pod (a legacy Secret-based one, a TokenRequest without a pod).
    assert_eq!(refused(&sign(&with(good.clone(), "/kubernetes.io/pod", Value::Null)), NOW), Refusal::NotBoundToAPod);
}

#[test]
fn a_token_changed_after_signing_is_refused() {
    let signer = Signer::new();
    let keys = signer.keys();
    for (alg, kid) in [("RS256", "rsa-1"), ("ES256", "ec-1")] {
        let token = signer.sign(alg, kid, &exporter_claims());
        let parts: Vec<&str> = token.split('.').collect();
        // Another pod's name in the payload, the signature kept.
        let forged = with(exporter_claims(), "/kubernetes.io/pod/name", json!("someone-else"));
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        let tampered = format!("{}.{payload}.{}", parts[0], parts[2]);
        assert_eq!(verify(&keys, &tampered, OURS, NOW).unwrap_err(), Refusal::Signature, "{alg}");
        // A signature of another token.
        let other = signer.sign(alg, kid, &with(exporter_claims(), "/jti", json!("other")));
        let swapped = format!("{}.{}.{}", parts[0], parts[1], other.split('.').nth(2).unwrap());
        assert_eq!(verify(&keys, &swapped, OURS, NOW).unwrap_err(), Refusal::Signature, "{alg}");
    }
}

#[test]
fn unsigned_and_malformed_tokens_are_refused_without_a_panic() {
    let signer = Signer::new();
    let keys = signer.keys();
    let encode = |value: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap());
    let unsigned = format!("{}.{}.", encode(&json!({"alg": "none"})), encode(&exporter_claims()));
    assert_eq!(verify(&keys, &unsigned, OURS, NOW).unwrap_err(), Refusal::Algorithm("none".into()));
    let hmac = format!("{}.{}.c2ln", encode(&json!({"alg": "HS256", "kid": "rsa-1"})), encode(&exporter_claims()));
    assert_eq!(verify(&keys, &hmac, OURS, NOW).unwrap_err(), Refusal::Algorithm("HS256".into()));
    let good = signer.sign("ES256", "ec-1", &exporter_claims());
    let oversized = format!("{good}{}", "A".repeat(MAX_TOKEN_BYTES));
    for token in ["", "a.b", "a.b.c.d", "!!.??.**", "e30.e30.", &oversized, &good.replace('.', "..")] {
        assert_eq!(verify(&keys, token, OURS, NOW).unwrap_err(), Refusal::Malformed, "{token:.40}");
    }
    // Which refusals send the token on to TokenReview, and which end it here.
    assert!(Refusal::UnknownKey("k".into()).is_for_token_review() && Refusal::Issuer("i".into()).is_for_token_review());
    assert!(Refusal::Audience.is_for_token_review(), "kube-apiserver's own audience is accepted through TokenReview");
    assert!(!Refusal::Signature.is_for_token_review() && !Refusal::Expired.is_for_token_review());
    assert_eq!(key_id(&good).as_deref(), Some("ec-1"));
    assert_eq!(key_id("not a token"), None);
}

#[test]
fn key_sets_keep_the_keys_that_can_verify() {
    let signer = Signer::new();
    let keys = signer.keys();
    assert!(keys.has_key("rsa-1") && keys.has_key("ec-1"));
    let only_unusable = json!({"keys": [
        {"kty": "RSA", "n": "AQAB", "e": "AQAB"},
        {"use": "enc", "kty": "RSA", "kid": "enc-1", "n": "AQAB", "e": "AQAB"},
        {"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"},
        {"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "AA"},
    ]});
    let bytes = serde_json::to_vec(&only_unusable).unwrap();
    assert_eq!(IssuerKeys::from_jwks(ISSUER, &bytes).unwrap_err(), JwksError::NoUsableKey);
    assert!(matches!(IssuerKeys::from_jwks(ISSUER, b"<html>"), Err(JwksError::Malformed(_))));
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whatever a client sends as a token, the answer is a refusal, never a panic.
        #[test]
        fn any_text_is_refused_without_a_panic(token in ".{0,600}") {
            let signer = Signer::new();
            prop_assert!(verify(&signer.keys(), &token, OURS, NOW).is_err());
        }

        /// Changing any one byte of a signed token makes it fail: no part goes unchecked.
        #[test]
        fn every_byte_of_a_token_is_covered_by_its_signature(at in any::<prop::sample::Index>(), by in 1u8..=255) {
            let signer = Signer::new();
            let token = signer.sign("ES256", "ec-1", &exporter_claims());
            let mut bytes = token.clone().into_bytes();
            let at = at.index(bytes.len());
            bytes[at] ^= by;
            let changed = String::from_utf8_lossy(&bytes).into_owned();
            prop_assume!(changed != token);
            prop_assert!(verify(&signer.keys(), &changed, OURS, NOW).is_err(), "byte {at} changed");
        }
    }
}
