//! Where and how the exporter's admin router (`/metrics`, `/healthz`, `/livez`, `/readyz`) is
//! served: on `--metrics-address`:`--metrics-port`, over plain HTTP (`--metrics-mode=http`) or
//! over HTTPS (`httptls`) with a certificate from a mounted Secret that is reloaded when the
//! kubelet swaps the files, the cluster's TLS profile (minimum version, cipher suites) and
//! optionally verified client certificates.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use numaresources_runtime::tls::{CaBundle, ClientCaVerifier, ReloadingCertificate, ServerConfigBuilder, WatchOptions};

use crate::config::{MetricsEndpoint, MetricsTls};

/// A bound metrics listener, ready to serve over plain HTTP or TLS.
pub struct MetricsServer {
    listener: tokio::net::TcpListener,
    tls: Option<TlsServing>,
}

/// What keeps HTTPS going: the configuration and the watcher that reloads its certificate.
struct TlsServing {
    config: Arc<rustls::ServerConfig>,
    _watcher: numaresources_runtime::tls::CertificateWatcher,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("address", &self.listener.local_addr().ok())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Why the metrics endpoint cannot start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsServerError {
    /// The address cannot be listened on.
    #[error("cannot listen for metrics on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate, key, client CA or TLS policy cannot be used.
    #[error("cannot serve metrics over TLS: {0}")]
    Tls(#[from] numaresources_runtime::tls::Error),
}

impl MetricsServer {
    /// Binds the endpoint's address and, for HTTPS, loads and starts watching the certificate.
    pub async fn bind(endpoint: &MetricsEndpoint) -> Result<Self, MetricsServerError> {
        let tls = endpoint.tls.as_ref().map(tls_serving).transpose()?;
        let address = endpoint.address;
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| MetricsServerError::Listen { address, source })?;
        Ok(Self { listener, tls })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `app` (the runtime's admin router) until `shutdown` completes.
    pub async fn serve(
        self,
        app: axum::Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        match self.tls {
            None => numaresources_runtime::admin::serve_plain(self.listener, app, shutdown).await,
            Some(TlsServing { config, _watcher }) => {
                let address = self.listener.local_addr().ok();
                tracing::info!(?address, "serving /metrics, /healthz, /livez and /readyz over HTTPS");
                numaresources_runtime::serve(self.listener, config, app, shutdown).await
            }
        }
    }
}

/// The certificate (followed on disk), the client CAs and the TLS policy.
fn tls_serving(settings: &MetricsTls) -> Result<TlsServing, numaresources_runtime::tls::Error> {
    let certificate = ReloadingCertificate::load(&settings.cert_file, &settings.key_file)?;
    let watcher = certificate.watch(WatchOptions::default())?;
    let mut builder = ServerConfigBuilder::new(Arc::new(certificate)).policy(settings.policy.clone());
    if let Some(ca_file) = &settings.client_ca_file {
        let pem = std::fs::read(ca_file)
            .map_err(|source| numaresources_runtime::tls::Error::Read { path: ca_file.clone(), source })?;
        builder = builder.client_cas(Arc::new(ClientCaVerifier::new(&[CaBundle::from_pem(&pem)?])?));
    }
    Ok(TlsServing { config: builder.build()?, _watcher: watcher })
}
