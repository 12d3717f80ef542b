//! A TLS client for the webhook: it trusts `ca` only and offers one ALPN protocol. Shared by the
//! admission tests and the TLS bench (`benches/admission_tls.rs`, through `#[path]`).

use std::sync::Arc;

use numaresources_certs::CertificateAuthority;
use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

pub fn client(ca: &CertificateAuthority, alpn: &[u8]) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap()).unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}
