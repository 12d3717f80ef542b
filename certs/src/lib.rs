//! The shared runtime of every numaresources component (the role kubert plays for linkerd's policy
//! controller): TLS for every server, the admin router, the kube client and shutdown.
//!
//! A component is wired the same way each time (ARCHITECTURE.md, "Component shape"):
//!
//! - [`kube_client`] makes the client from `--kubeconfig`, else in-cluster, else
//!   `$KUBECONFIG`/`~/.kube/config`;
//! - [`shutdown::Shutdown::on_signals`] turns SIGTERM/SIGINT into one signal every server and task
//!   waits on;
//! - [`admin::router`] serves the component's readiness [`admin::Checks`] as `/healthz`, `/livez`,
//!   `/readyz` in kube-apiserver's format, and `/metrics` from the process's one prometheus-client
//!   registry, over plain HTTP ([`admin::serve_plain`]);
//! - the component's own router is served over TLS by [`serve`];
//! - [`InvalidConfig`] reports every problem of a component's configuration at once;
//! - [`flags`] holds the flags components share, and [`flags::defaults`] a component's flag
//!   defaults without the environment.
//!
//! TLS: one code path serves certificates from any source (OLM-mounted files, cert-manager or
//! service-ca Secrets, or certificates we generate ourselves):
//!
//! - [`ServingCertificate`] loads a PEM chain and key (PKCS#8, PKCS#1 or SEC1) and checks that
//!   they belong together;
//! - [`ReloadingCertificate`] serves the current pair from disk and follows changes without a
//!   restart (directory watch for the kubelet's `..data` swap, plus polling), keeping the old
//!   pair when a new one does not load; until the files exist it can serve a generated
//!   fallback ([`ReloadingCertificate::load_or_fallback`]) and switches once they appear;
//! - [`ClientCaVerifier`] and [`CaBundle`] verify optional client certificates against CA
//!   bundles that can be replaced at runtime (front proxy and client CAs);
//! - [`ServerConfigBuilder`] assembles the rustls `ServerConfig` (TLS 1.2+, ALPN, ring provider
//!   passed explicitly);
//! - [`serve`] runs an axum `Router` over it, with the peer's identity ([`PeerInfo`]) on every
//!   request;
//! - [`CertificateAuthority`], [`self_signed`] and [`ensure_self_signed`] generate certificates
//!   with rcgen;
//! - [`rotation`] decides, for self-managed certificates, when to create, renew and rotate them so
//!   that no handshake fails while new bundles and Secrets propagate.
//!
//! ```no_run
//! # async fn run(app: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use numaresources_certs::{ReloadingCertificate, ServerConfigBuilder, WatchOptions, serve};
//!
//! let certificate = ReloadingCertificate::load("/certs/tls.crt", "/certs/tls.key")?;
//! let _watcher = certificate.watch(WatchOptions::default())?;
//! let tls = ServerConfigBuilder::new(Arc::new(certificate)).build()?;
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8443").await?;
//! serve(listener, tls, app, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

pub mod admin;
mod certificate;
mod client_auth;
mod config;
mod error;
pub mod flags;
mod generate;
mod invalid;
mod kube_client;
pub mod leader;
pub mod own_client;
mod pem;
mod policy;
mod random;
mod reload;
pub mod rotation;
mod serve;
pub mod shutdown;
mod time;

pub use certificate::{ServingCertificate, Validity};
pub use client_auth::{CaBundle, ClientCaVerifier};
pub use config::ServerConfigBuilder;
pub use error::Error;
pub use generate::{
    CertificateAuthority, PemPair, SELF_SIGNED_MIN_REMAINING, SELF_SIGNED_VALIDITY, SelfSignedFiles,
    ensure_self_signed, load_self_signed, self_signed,
};
pub use invalid::InvalidConfig;
pub use kube_client::{KubeClientError, kube_client};
pub use policy::{TlsPolicy, TlsVersion};
pub use random::random_word;
pub use reload::{CertificateWatcher, Reloaded, ReloadingCertificate, WatchOptions, follow_files};
pub use serve::{
    DEFAULT_HTTP2_KEEP_ALIVE_INTERVAL, DEFAULT_HTTP2_KEEP_ALIVE_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT, DEFAULT_WRITE_STALL_TIMEOUT, PeerInfo, ServeOptions, serve, serve_with,
};
