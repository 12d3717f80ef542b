//! The rustls `ServerConfig` every server of ours uses.

use std::fmt;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::crypto::ring::Ticketer;
use rustls::server::{NoServerSessionStorage, ProducesTickets, ResolvesServerCert};

use crate::tls::{ClientCaVerifier, Error, TlsPolicy};

/// The ring provider, passed explicitly everywhere so nothing depends on a process-wide default,
/// with its cipher suites in Go's order of preference on hardware with AES instructions: AES-128
/// before AES-256, then ChaCha20, in each TLS version. ring's own order puts
/// TLS_AES_256_GCM_SHA384 first, whose SHA-384 (the handshake's hash, and the ticket's) has no
/// hardware support on x86, where SHA-256 runs on the SHA extensions: a resumed handshake costs
/// less with AES-128 (BENCHMARKS.md, the fleet defaults, "What a connection costs").
pub(crate) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: LazyLock<Arc<CryptoProvider>> = LazyLock::new(|| {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites.sort_by_key(|suite| (suite.tls13().is_none(), cipher_rank(*suite)));
        Arc::new(provider)
    });
    Arc::clone(&PROVIDER)
}

/// A suite's place within its TLS version: AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305.
fn cipher_rank(suite: rustls::SupportedCipherSuite) -> u8 {
    use rustls::CipherSuite as Suite;
    match suite.suite() {
        Suite::TLS13_AES_128_GCM_SHA256
        | Suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | Suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
        Suite::TLS13_AES_256_GCM_SHA384
        | Suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | Suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 1,
        _ => 2,
    }
}

/// TLS 1.3 session tickets sent after each handshake, full or resumed (rustls sends 2).
pub(crate) const SESSION_TICKETS_PER_HANDSHAKE: usize = 1;

/// Builds a `ServerConfig`: TLS 1.2 and 1.3 only (narrowed by a [`TlsPolicy`]), ALPN `h2` then `http/1.1`, the certificate
/// from a resolver (usually a [`crate::tls::ReloadingCertificate`]), and optionally client
/// certificates verified against replaceable CA bundles.
///
/// ```no_run
/// # fn main() -> Result<(), numaresources_runtime::tls::Error> {
/// use std::sync::Arc;
/// use numaresources_runtime::tls::{CaBundle, ClientCaVerifier, ReloadingCertificate, ServerConfigBuilder};
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
    /// A resumed TLS session keeps the certificate verified when it started, so replacing the
    /// bundles also renews the session tickets: no session from before resumes, and a replaced
    /// bundle applies to every new connection.
    pub fn client_cas(mut self, verifier: Arc<ClientCaVerifier>) -> Self {
        self.client_cas = Some(verifier);
        self
    }

    /// The configuration, ready for [`crate::serve`] or a `tokio_rustls::TlsAcceptor`.
    pub fn build(self) -> Result<Arc<ServerConfig>, Error> {
        let builder = ServerConfig::builder_with_provider(self.policy.provider(&provider()))
            .with_protocol_versions(self.policy.versions())?;
        let tickets = match &self.client_cas {
            Some(verifier) => verifier.session_tickets(),
            None => Arc::new(SessionTickets::new()),
        };
        let builder = match self.client_cas {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(self.certificate);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // Our order of suites, not the client's, as Go's servers (kube-apiserver's) choose when
        // the client prefers AES-GCM (Go gives a client that prefers ChaCha20, one without AES
        // instructions, ChaCha20; this order gives it AES-128-GCM).
        config.ignore_client_order = true;
        // One ticket per handshake, as Go's servers send: a client that reconnects (an exporter
        // after each publish) spends one and gets the next; each ticket costs a key derivation,
        // an encryption and a record.
        config.send_tls13_tickets = SESSION_TICKETS_PER_HANDSHAKE;
        // Resumption by stateless tickets only: nothing kept per session, however many clients
        // reconnect (exporters close their idle connections and come back every few seconds).
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.ticketer = tickets;
        Ok(Arc::new(config))
    }
}

/// TLS session tickets (TLS 1.3, and TLS 1.2 for clients that ask), so a client that reconnects
/// resumes its session instead of making a full handshake. The tickets are stateless (the
/// session travels encrypted in the ticket), so the server keeps nothing per client however many
/// reconnect; rustls' ticketer rotates its keys every 6 hours (a ticket lasts at most 12).
///
/// [`Self::renew`] throws the keys away: no ticket issued before resumes. A resumed session keeps
/// the client certificate verified when it started, so a server verifying client certificates
/// renews its tickets whenever its CA bundles are replaced ([`crate::tls::ClientCaVerifier::replace`]).
pub(crate) struct SessionTickets {
    /// `None` when no keys could be made (no randomness): no tickets, every handshake full.
    keys: RwLock<Option<Arc<dyn ProducesTickets>>>,
}

impl fmt::Debug for SessionTickets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionTickets").field("enabled", &self.enabled()).finish_non_exhaustive()
    }
}

impl SessionTickets {
    pub(crate) fn new() -> Self {
        Self { keys: RwLock::new(Self::fresh_keys()) }
    }

    fn fresh_keys() -> Option<Arc<dyn ProducesTickets>> {
        Ticketer::new()
            .inspect_err(
                |error| tracing::warn!(%error, "no TLS session tickets: every connection makes a full handshake"),
            )
            .ok()
    }

    /// New keys: tickets issued until now no longer resume.
    pub(crate) fn renew(&self) {
        *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Self::fresh_keys();
    }

    fn keys(&self) -> Option<Arc<dyn ProducesTickets>> {
        self.keys.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl ProducesTickets for SessionTickets {
    fn enabled(&self) -> bool {
        self.keys().is_some()
    }

    fn lifetime(&self) -> u32 {
        self.keys().map_or(0, |keys| keys.lifetime())
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.keys()?.encrypt(plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.keys()?.decrypt(cipher)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use rustls::{ClientConfig, HandshakeKind, RootCertStore};
    use rustls_pki_types::ServerName;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::tls::{CaBundle, CertificateAuthority, ReloadingCertificate};

    /// A TLS listener with `config` that sends `ok` on each connection and closes it.
    async fn listen(config: Arc<ServerConfig>) -> SocketAddr {
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tls.write_all(b"ok").await;
                    let _ = tls.shutdown().await;
                }
            }
        });
        address
    }

    /// Connects, reads until the server closes (the session tickets come after the handshake),
    /// and says how the TLS session started.
    async fn connect(client: &tokio_rustls::TlsConnector, address: SocketAddr) -> HandshakeKind {
        let tcp = TcpStream::connect(address).await.unwrap();
        let mut tls = client.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
        let mut received = Vec::new();
        tls.read_to_end(&mut received).await.unwrap();
        assert_eq!(received, b"ok");
        tls.get_ref().1.handshake_kind().unwrap()
    }

    /// A serving certificate for `localhost` (its files in `dir`), and the bundle of the CA that
    /// issued it.
    fn serving_certificate(dir: &tempfile::TempDir) -> (Arc<ReloadingCertificate>, CaBundle) {
        let hour = Duration::from_secs(3600);
        let ca = CertificateAuthority::generate("ca", hour).unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        ca.issue_serving(&["localhost".to_owned()], hour).unwrap().write(&cert, &key).unwrap();
        let certificate = Arc::new(ReloadingCertificate::load(cert, key).unwrap());
        (certificate, CaBundle::from_pem(ca.cert_pem().as_bytes()).unwrap())
    }

    /// Trusts `bundle`.
    fn trusting(bundle: &CaBundle) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(bundle.certificates()[0].clone()).unwrap();
        roots
    }

    /// A server of ours without client CA bundles (the webhook's), listening as [`listen`] does;
    /// its address, and the trust store that verifies it.
    async fn listening_without_client_cas(dir: &tempfile::TempDir) -> (SocketAddr, RootCertStore) {
        let (certificate, bundle) = serving_certificate(dir);
        (listen(ServerConfigBuilder::new(certificate).build().unwrap()).await, trusting(&bundle))
    }

    #[tokio::test]
    async fn the_server_chooses_aes_128_gcm_sha256_whatever_the_client_prefers() {
        let dir = tempfile::tempdir().unwrap();
        let (address, roots) = listening_without_client_cas(&dir).await;
        // ring's own order, as a rustls client has it unless told otherwise: AES-256 first.
        let preferring_aes_256 = rustls::crypto::ring::default_provider();
        assert_eq!(preferring_aes_256.cipher_suites[0].suite(), rustls::CipherSuite::TLS13_AES_256_GCM_SHA384);
        for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12]] {
            let client = ClientConfig::builder_with_provider(Arc::new(preferring_aes_256.clone()))
                .with_protocol_versions(versions)
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            let client = tokio_rustls::TlsConnector::from(Arc::new(client));
            let tcp = TcpStream::connect(address).await.unwrap();
            let tls = client.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
            let chosen = tls.get_ref().1.negotiated_cipher_suite().map(|suite| suite.suite());
            let expected = if versions[0] == &rustls::version::TLS13 {
                rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
            } else {
                rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            };
            assert_eq!(chosen, Some(expected));
        }
    }

    /// A client session cache that counts the TLS 1.3 tickets it is given.
    #[derive(Debug)]
    struct CountingTickets {
        cache: rustls::client::ClientSessionMemoryCache,
        received: std::sync::atomic::AtomicUsize,
    }

    impl rustls::client::ClientSessionStore for CountingTickets {
        fn set_kx_hint(&self, server: ServerName<'static>, group: rustls::NamedGroup) {
            self.cache.set_kx_hint(server, group);
        }
        fn kx_hint(&self, server: &ServerName<'_>) -> Option<rustls::NamedGroup> {
            self.cache.kx_hint(server)
        }
        fn set_tls12_session(&self, server: ServerName<'static>, value: rustls::client::Tls12ClientSessionValue) {
            self.cache.set_tls12_session(server, value);
        }
        fn tls12_session(&self, server: &ServerName<'_>) -> Option<rustls::client::Tls12ClientSessionValue> {
            self.cache.tls12_session(server)
        }
        fn remove_tls12_session(&self, server: &ServerName<'static>) {
            self.cache.remove_tls12_session(server);
        }
        fn insert_tls13_ticket(&self, server: ServerName<'static>, value: rustls::client::Tls13ClientSessionValue) {
            self.received.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.cache.insert_tls13_ticket(server, value);
        }
        fn take_tls13_ticket(&self, server: &ServerName<'static>) -> Option<rustls::client::Tls13ClientSessionValue> {
            self.cache.take_tls13_ticket(server)
        }
    }

    #[tokio::test]
    async fn each_handshake_full_or_resumed_brings_one_session_ticket() {
        let dir = tempfile::tempdir().unwrap();
        let (address, roots) = listening_without_client_cas(&dir).await;
        let tickets = Arc::new(CountingTickets {
            cache: rustls::client::ClientSessionMemoryCache::new(16),
            received: std::sync::atomic::AtomicUsize::new(0),
        });
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.resumption = rustls::client::Resumption::store(tickets.clone());
        let client = tokio_rustls::TlsConnector::from(Arc::new(client));
        let kinds = [connect(&client, address).await, connect(&client, address).await, connect(&client, address).await];
        assert_eq!(kinds, [HandshakeKind::Full, HandshakeKind::Resumed, HandshakeKind::Resumed]);
        assert_eq!(tickets.received.load(std::sync::atomic::Ordering::SeqCst), 3 * SESSION_TICKETS_PER_HANDSHAKE);
        assert_eq!(SESSION_TICKETS_PER_HANDSHAKE, 1, "Go's servers send one; rustls' default is 2");
    }

    #[tokio::test]
    async fn a_client_resumes_its_session_until_the_client_ca_bundles_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let (certificate, bundle) = serving_certificate(&dir);
        let roots = trusting(&bundle);
        // ring's own order (AES-256 first), as kube's clients, our exporters among them, offer it:
        // the server chooses AES-128, and the session's SHA-256 is what the ticket resumes.
        let client = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let client = tokio_rustls::TlsConnector::from(Arc::new(client));

        // Without client certificates (the webhook). One ticket per handshake is enough for a
        // client that reconnects again and again: each resumption brings the next ticket.
        let address = listen(ServerConfigBuilder::new(certificate.clone()).build().unwrap()).await;
        assert_eq!(connect(&client, address).await, HandshakeKind::Full);
        for _ in 0..3 {
            assert_eq!(connect(&client, address).await, HandshakeKind::Resumed);
        }

        // With client CA bundles (the API server).
        let verifier = Arc::new(ClientCaVerifier::new(std::slice::from_ref(&bundle)).unwrap());
        let address = listen(ServerConfigBuilder::new(certificate).client_cas(verifier.clone()).build().unwrap()).await;
        assert_eq!(connect(&client, address).await, HandshakeKind::Full);
        assert_eq!(connect(&client, address).await, HandshakeKind::Resumed);
        verifier.replace(&[bundle]).unwrap();
        assert_eq!(
            connect(&client, address).await,
            HandshakeKind::Full,
            "a session from before the bundles were replaced"
        );
        assert_eq!(connect(&client, address).await, HandshakeKind::Resumed);
    }
}
