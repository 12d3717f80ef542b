//! TLS for the `local` mode: a self-signed serving certificate kept in the state directory
//! (reused across runs while valid), hot-reloaded like every server of ours, and a kubeconfig
//! that trusts it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use numaresources_runtime::serve;
use numaresources_runtime::tls::{
    CertificateWatcher, ReloadingCertificate, ServerConfigBuilder, WatchOptions, ensure_self_signed,
};

/// The local server's certificate and TLS configuration.
pub struct LocalTls {
    cert_pem: String,
    config: Arc<rustls::ServerConfig>,
    _watcher: CertificateWatcher,
}

impl std::fmt::Debug for LocalTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTls").finish_non_exhaustive()
    }
}

impl LocalTls {
    /// Generates (or reuses) the certificate under `<state_dir>/certs` and builds the TLS config.
    pub fn prepare(state_dir: &Path) -> anyhow::Result<Self> {
        let files = ensure_self_signed(&state_dir.join("certs"), &["localhost".to_owned()])?;
        let cert_pem = std::fs::read_to_string(&files.cert_path)
            .with_context(|| format!("reading {}", files.cert_path.display()))?;
        let certificate = ReloadingCertificate::load(&files.cert_path, &files.key_path)?;
        let watcher = certificate.watch(WatchOptions::default())?;
        let config = ServerConfigBuilder::new(Arc::new(certificate)).build()?;
        Ok(Self { cert_pem, config, _watcher: watcher })
    }

    /// Writes a kubeconfig at `path` pointing kubectl at `address`, trusting our certificate and
    /// presenting `token`.
    pub fn write_kubeconfig(&self, path: &Path, address: SocketAddr, token: &str) -> anyhow::Result<PathBuf> {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.cert_pem);
        let server = format!("https://{address}");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: numaresources-local\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n    tls-server-name: localhost\ncontexts:\n- name: numaresources-local\n  context:\n    cluster: numaresources-local\n    user: numaresources-local\ncurrent-context: numaresources-local\nusers:\n- name: numaresources-local\n  user:\n    token: {token}\n"
        );
        write_private(path, kubeconfig.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
        Ok(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()))
    }

    /// Serves `app` until `shutdown` completes.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        app: axum::Router,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        serve(listener, self.config.clone(), app, shutdown).await
    }
}

/// Writes a file only its owner can read (it holds a bearer token).
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(contents)
}
