//! A bound on every wait, rustls clients and their connections to `localhost`, and a Secret
//! mounted the kubelet's way: what the TLS tests and benches of the runtime, the webhook and the
//! exporter's metrics share.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use numaresources_runtime::tls::PemPair;
use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The bound on every wait in these tests; reaching it means something is stuck.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test if it takes longer than [`PATIENCE`].
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future).await.unwrap_or_else(|_| panic!("{what} took too long: likely deadlocked"))
}

/// A rustls client trusting `roots_pem`, presenting `identity` if given, offering `alpn`.
pub fn client(roots_pem: &str, identity: Option<&PemPair>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    client_with_versions(roots_pem, identity, alpn, rustls::DEFAULT_VERSIONS)
}

pub fn client_with_versions(
    roots_pem: &str,
    identity: Option<&PemPair>,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(roots_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(pair) => {
            let chain =
                CertificateDer::pem_slice_iter(pair.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
            let key = PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Arc::new(config)
}

pub async fn connect(addr: SocketAddr, config: Arc<ClientConfig>) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    TlsConnector::from(config).connect(ServerName::try_from("localhost").unwrap(), tcp).await
}

/// Lays out a directory the way the kubelet mounts a Secret: `tls.crt -> ..data/tls.crt`,
/// `..data -> ..<version>`.
pub fn kubelet_mount(dir: &Path, version: &str, pair: &PemPair) {
    let data = dir.join(version);
    std::fs::create_dir(&data).unwrap();
    pair.write(&data.join("tls.crt"), &data.join("tls.key")).unwrap();
    std::os::unix::fs::symlink(version, dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/tls.crt", dir.join("tls.crt")).unwrap();
    std::os::unix::fs::symlink("..data/tls.key", dir.join("tls.key")).unwrap();
}

/// The kubelet's atomic update: a new version directory, a `..data_tmp` symlink to it renamed
/// over `..data`, then the old version removed.
pub fn kubelet_swap(dir: &Path, old: &str, new: &str, pair: &PemPair) {
    let data = dir.join(new);
    std::fs::create_dir(&data).unwrap();
    pair.write(&data.join("tls.crt"), &data.join("tls.key")).unwrap();
    std::os::unix::fs::symlink(new, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    std::fs::remove_dir_all(dir.join(old)).unwrap();
}
