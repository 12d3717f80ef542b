//! The rustls `ServerConfig` every server of ours uses.

use std::fmt;
use std::sync::{Arc, LazyLock};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, ResolvesServerCert};

use crate::{ClientCaVerifier, Error, TlsPolicy};

/// The ring provider, passed explicitly everywhere so nothing depends on a process-wide default.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: LazyLock<Arc<CryptoProvider>> =
        LazyLock::new(|| Arc::new(rustls::crypto::ring::default_provider()));
    Arc::clone(&PROVIDER)
}

/// Builds a `ServerConfig`: TLS 1.2 and 1.3 only (narrowed by a [`TlsPolicy`]), ALPN `h2` then `http/1.1`, the certificate
/// from a resolver (usually a [`crate::ReloadingCertificate`]), and optionally client
/// certificates verified against replaceable CA bundles.
///
/// ```no_run
/// # fn main() -> Result<(), numaresources_certs::Error> {
/// use std::sync::Arc;
/// use numaresources_certs::{CaBundle, ClientCaVerifier, ReloadingCertificate, ServerConfigBuilder};
///
/// let certificate = ReloadingCertificate::load("tls.crt", "tls.key")?;
/// let front_proxy = CaBundle::from_pem(&std::fs::read("requestheader-ca.crt").unwrap_or_default())?;
/// let client_cas = Arc::new(ClientCaVerifier::new(&[front_proxy])?);
/// let config = ServerConfigBuilder::new(Arc::new(certificate)).client_cas(client_cas.clone()).build()?;
/// # Ok(()) }
/// ```
pub struct ServerConfigBuilder {
    certificate: Arc<dyn ResolvesServerCert>,
    client_cas: Option<Arc<ClientCaVerifier>>,
    policy: TlsPolicy,
}

impl fmt::Debug for ServerConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfigBuilder")
            .field("certificate", &self.certificate)
            .field("client_cas", &self.client_cas)
            .field("policy", &self.policy)
            .finish()
    }
}

impl ServerConfigBuilder {
    /// Serves whatever `certificate` resolves at each handshake; no client certificates.
    pub fn new(certificate: Arc<dyn ResolvesServerCert>) -> Self {
        Self { certificate, client_cas: None, policy: TlsPolicy::default() }
    }

    /// Applies a minimum TLS version and TLS 1.2 cipher suites (the default: TLS 1.2+, every
    /// suite the ring provider implements).
    pub fn policy(mut self, policy: TlsPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Asks clients for a certificate and verifies any they present against the CA bundles
    /// installed in `verifier` at handshake time; clients without one still connect (anonymous,
    /// for `/healthz` and token callers). Keep a clone of the `Arc` to replace the bundles.
    ///
    /// TLS session resumption is turned off with this option, so that a replaced bundle applies
    /// to every new connection instead of being bypassed by a resumed session.
    pub fn client_cas(mut self, verifier: Arc<ClientCaVerifier>) -> Self {
        self.client_cas = Some(verifier);
        self
    }

    /// The configuration, ready for [`crate::serve`] or a `tokio_rustls::TlsAcceptor`.
    pub fn build(self) -> Result<Arc<ServerConfig>, Error> {
        let builder = ServerConfig::builder_with_provider(self.policy.provider(&provider()))
            .with_protocol_versions(self.policy.versions())?;
        let resumable = self.client_cas.is_none();
        let builder = match self.client_cas {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(self.certificate);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        if !resumable {
            config.session_storage = Arc::new(NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(Arc::new(config))
    }
}
