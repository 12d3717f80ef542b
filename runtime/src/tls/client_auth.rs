//! Optional client certificates, verified against CA bundles that can be replaced at runtime.
//!
//! kube-apiserver's front proxy presents a certificate signed by the requestheader client CA, and
//! direct callers may present one signed by the client CA; both bundles come from the ConfigMap
//! `kube-system/extension-apiserver-authentication`, which changes when the control plane rotates
//! them. Clients without a certificate (kubelet probes, token callers) must still connect.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::tls::Error;
use crate::tls::config::SessionTickets;

/// One PEM bundle of trusted CA certificates, parsed and checked.
///
/// Besides feeding a [`ClientCaVerifier`], a bundle answers "was this verified chain issued by
/// *me*?", which the API server needs per request: the TLS layer accepts a certificate from any
/// installed bundle, but only the requestheader bundle may vouch for `X-Remote-*` headers.
#[derive(Clone)]
pub struct CaBundle {
    certificates: Arc<[CertificateDer<'static>]>,
    verifier: Arc<dyn ClientCertVerifier>,
}

impl fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaBundle").field("certificates", &self.certificates.len()).finish_non_exhaustive()
    }
}

impl CaBundle {
    /// Parses every `CERTIFICATE` in `pem`; fails if there is none or one is not a usable trust
    /// anchor.
    pub fn from_pem(pem: &[u8]) -> Result<Self, Error> {
        let certificates = crate::tls::pem::certificates(pem, "CA bundle").map_err(|err| match err {
            Error::NoCertificate { .. } => Error::InvalidCaBundle { reason: "it holds no PEM certificate".to_owned() },
            other => Error::InvalidCaBundle { reason: other.to_string() },
        })?;
        let verifier = verifier_for(&certificates)?;
        Ok(Self { certificates: certificates.into(), verifier })
    }

    /// The CA certificates, in the bundle's order.
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.certificates
    }

    /// Whether `chain` (end entity first, as [`crate::PeerInfo::client_chain`] gives it) is a
    /// currently valid client certificate issued by one of this bundle's CAs.
    pub fn verifies_client(&self, chain: &[CertificateDer<'_>]) -> bool {
        let Some((end_entity, intermediates)) = chain.split_first() else {
            return false;
        };
        self.verifier.verify_client_cert(end_entity, intermediates, UnixTime::now()).is_ok()
    }
}

/// A WebPKI client verifier over these roots that lets anonymous clients through.
fn verifier_for(certificates: &[CertificateDer<'static>]) -> Result<Arc<dyn ClientCertVerifier>, Error> {
    let mut roots = RootCertStore::empty();
    for (index, certificate) in certificates.iter().enumerate() {
        roots.add(certificate.clone()).map_err(|err| Error::InvalidCaBundle {
            reason: format!("certificate {} is not a usable trust anchor: {err}", index + 1),
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crate::tls::config::provider())
        .allow_unauthenticated()
        .build()
        .map_err(|err| Error::InvalidCaBundle { reason: err.to_string() })
}

/// A rustls client-certificate verifier whose trusted CA bundles can be swapped while the server
/// runs; each handshake uses the bundles installed when it starts.
///
/// Client certificates are optional: a client that presents none connects anonymously, one that
/// presents a certificate no installed bundle vouches for fails the handshake. With no bundle
/// installed, the server does not ask for client certificates at all.
///
/// Unlike `WebPkiClientVerifier` this does not send the CAs' names as hints in the
/// CertificateRequest (rustls borrows the hints for the verifier's lifetime, and ours change).
/// Without hints, a client offers the certificate it has, which is what the kube-aggregator and
/// kubectl do anyway.
pub struct ClientCaVerifier {
    provider: Arc<CryptoProvider>,
    current: RwLock<Option<Arc<dyn ClientCertVerifier>>>,
    /// The session tickets of the servers verifying with these bundles, renewed when they are
    /// replaced: a resumed session keeps the certificate verified when it started.
    tickets: Arc<SessionTickets>,
}

impl fmt::Debug for ClientCaVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCaVerifier").field("installed", &self.installed().is_some()).finish_non_exhaustive()
    }
}

impl ClientCaVerifier {
    /// Trusts the union of `bundles` (none: ask no client for a certificate).
    pub fn new(bundles: &[CaBundle]) -> Result<Self, Error> {
        Ok(Self {
            provider: crate::tls::config::provider(),
            current: RwLock::new(combine(bundles)?),
            tickets: Arc::new(SessionTickets::new()),
        })
    }

    /// Replaces the trusted bundles for handshakes that start from now on; connections already
    /// established keep the identity they were verified with, and no TLS session started before
    /// resumes. On error nothing changes.
    pub fn replace(&self, bundles: &[CaBundle]) -> Result<(), Error> {
        let verifier = combine(bundles)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = verifier;
        self.tickets.renew();
        Ok(())
    }

    /// The session tickets a server verifying with these bundles issues.
    pub(crate) fn session_tickets(&self) -> Arc<SessionTickets> {
        Arc::clone(&self.tickets)
    }

    fn installed(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

fn combine(bundles: &[CaBundle]) -> Result<Option<Arc<dyn ClientCertVerifier>>, Error> {
    match bundles {
        [] => Ok(None),
        [one] => Ok(Some(Arc::clone(&one.verifier))),
        many => {
            let all: Vec<_> = many.iter().flat_map(|bundle| bundle.certificates.iter().cloned()).collect();
            verifier_for(&all).map(Some)
        }
    }
}

impl ClientCertVerifier for ClientCaVerifier {
    fn offer_client_auth(&self) -> bool {
        self.installed().is_some()
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match self.installed() {
            Some(verifier) => verifier.verify_client_cert(end_entity, intermediates, now),
            // The bundles were removed after this handshake asked for a certificate.
            None => Err(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tls::CertificateAuthority;

    fn chain_of(pem: &str) -> Vec<CertificateDer<'static>> {
        crate::tls::pem::certificates(pem.as_bytes(), "test").unwrap()
    }

    #[test]
    fn a_bundle_vouches_only_for_clients_of_its_own_cas() {
        let front_proxy = CertificateAuthority::generate("front-proxy-ca", Duration::from_secs(3600)).unwrap();
        let cluster = CertificateAuthority::generate("kubernetes", Duration::from_secs(3600)).unwrap();
        let bundle = CaBundle::from_pem(front_proxy.cert_pem().as_bytes()).unwrap();

        let aggregator = front_proxy.issue_client("front-proxy-client", &[], Duration::from_secs(600)).unwrap();
        let user = cluster.issue_client("jane", &["admins".to_owned()], Duration::from_secs(600)).unwrap();
        assert!(bundle.verifies_client(&chain_of(&aggregator.cert_pem)));
        assert!(!bundle.verifies_client(&chain_of(&user.cert_pem)));
        assert!(!bundle.verifies_client(&[]));
    }

    #[test]
    fn a_serving_certificate_is_not_a_client_certificate() {
        let ca = CertificateAuthority::generate("ca", Duration::from_secs(3600)).unwrap();
        let bundle = CaBundle::from_pem(ca.cert_pem().as_bytes()).unwrap();
        let serving = ca.issue_serving(&["svc.ns.svc".to_owned()], Duration::from_secs(600)).unwrap();
        assert!(!bundle.verifies_client(&chain_of(&serving.cert_pem)));
    }

    #[test]
    fn an_empty_or_broken_bundle_is_refused() {
        let err = CaBundle::from_pem(b"").unwrap_err();
        assert!(matches!(err, Error::InvalidCaBundle { .. }), "{err}");
        let err =
            CaBundle::from_pem(b"-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n").unwrap_err();
        assert!(matches!(err, Error::InvalidCaBundle { .. }), "{err}");
    }

    #[test]
    fn without_bundles_no_client_is_asked_for_a_certificate() {
        let verifier = ClientCaVerifier::new(&[]).unwrap();
        assert!(!verifier.offer_client_auth());
        assert!(!verifier.client_auth_mandatory());

        let ca = CertificateAuthority::generate("ca", Duration::from_secs(3600)).unwrap();
        verifier.replace(&[CaBundle::from_pem(ca.cert_pem().as_bytes()).unwrap()]).unwrap();
        assert!(verifier.offer_client_auth());
        assert!(!verifier.client_auth_mandatory());
    }
}
