//! A bearer token and a key set as the API server's local ServiceAccount token verifier reads
//! them: any bytes give a refusal or a verified token, never a panic; any bytes as a key set give
//! keys or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaresources_apiserver::auth::jwt::{IssuerKeys, MAX_TOKEN_BYTES, verify};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// An RSA key and a P-256 key (the generator point), as kube-apiserver serves its key set.
const JWKS: &str = r#"{"keys":[
 {"use":"sig","kty":"RSA","kid":"rsa-1","alg":"RS256","e":"AQAB",
  "n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw"},
 {"use":"sig","kty":"EC","kid":"ec-1","alg":"ES256","crv":"P-256",
  "x":"axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY","y":"T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU"}]}"#;

fuzz_target!(|data: &[u8]| {
    let keys = IssuerKeys::from_jwks(ISSUER, JWKS.as_bytes()).expect("the fixed key set");
    let token = String::from_utf8_lossy(data);
    if verify(&keys, &token, "nodetopology.openshift.io", 1_800_000_000).is_ok() {
        assert!(token.len() <= MAX_TOKEN_BYTES);
    }
    let _ = IssuerKeys::from_jwks(ISSUER, data);
});
