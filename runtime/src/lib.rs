//! The shared runtime of every numaresources component (the role kubert plays for linkerd's policy
//! controller): TLS for every server, the admin router, leader election, the kube client and
//! shutdown.
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
//!   defaults without the environment;
//! - [`tls`] holds TLS and PKI for every server and client of ours;
//! - [`leader`] is client-go's Lease-based leader election.
//!
//! ```no_run
//! # async fn run(app: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use numaresources_runtime::serve;
//! use numaresources_runtime::tls::{ReloadingCertificate, ServerConfigBuilder, WatchOptions};
//!
//! let certificate = ReloadingCertificate::load("/certs/tls.crt", "/certs/tls.key")?;
//! let _watcher = certificate.watch(WatchOptions::default())?;
//! let tls = ServerConfigBuilder::new(Arc::new(certificate)).build()?;
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8443").await?;
//! serve(listener, tls, app, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod flags;
mod invalid;
mod kube_client;
pub mod leader;
mod random;
mod serve;
pub mod shutdown;
pub mod tls;

pub use invalid::InvalidConfig;
pub use kube_client::{KubeClientError, kube_client};
pub use random::random_word;
pub use serve::{
    DEFAULT_HTTP2_KEEP_ALIVE_INTERVAL, DEFAULT_HTTP2_KEEP_ALIVE_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT, DEFAULT_WRITE_STALL_TIMEOUT, PeerInfo, ServeOptions, serve, serve_with,
};
