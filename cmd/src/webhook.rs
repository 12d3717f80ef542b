//! `numaresources webhook`: the admission webhook (defaults and validation of our custom
//! resources, pod routing to the NUMA-aware scheduler) over HTTPS, with a plain-HTTP health and
//! metrics port. Serving certificates come from the OLM mount (or any other mount) and are
//! hot-reloaded; until the files exist a pair generated into `--cert-dir` is served.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use numaresources_runtime::admin;
use numaresources_runtime::flags::TlsServingDefaults;
use numaresources_runtime::shutdown::Shutdown;
use numaresources_runtime::tls::{ServerConfigBuilder, WatchOptions};
use numaresources_runtime::{kube_client, serve_with};
use numaresources_webhook::{Config, Webhook};

/// Options of `numaresources webhook` (named as the apiserver subcommand names them).
#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    /// Address to listen on (both ports).
    #[arg(long, env = "NUMARESOURCES_WEBHOOK_BIND_ADDRESS", default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// HTTPS port kube-apiserver calls (0 picks a free one and logs it).
    #[arg(long, env = "NUMARESOURCES_WEBHOOK_SECURE_PORT", default_value = "9443")]
    secure_port: u16,
    /// Plain-HTTP port for `/healthz`, `/livez`, `/readyz` and `/metrics` (0 picks a free one
    /// and logs it).
    #[arg(long, env = "NUMARESOURCES_WEBHOOK_HEALTH_PORT", default_value = "8081")]
    health_port: u16,
    /// The serving certificate.
    #[command(flatten)]
    tls: numaresources_runtime::flags::TlsServingFlags<ServingCertificate>,
    /// A kubeconfig for talking to kube-apiserver (default: in-cluster configuration, then
    /// `$KUBECONFIG`/`~/.kube/config`).
    #[arg(long, env = "NUMARESOURCES_WEBHOOK_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The namespace the components run in: its pods are never routed.
    #[arg(long, env = "POD_NAMESPACE", default_value = numaresources_api::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Bounds of the HTTPS listener.
    #[command(flatten)]
    connections: numaresources_runtime::flags::ConnectionFlags,
    /// The runtime.
    #[command(flatten)]
    runtime: numaresources_runtime::flags::RuntimeFlags,
}

/// The environment variables and defaults of the serving-certificate flags.
#[derive(Debug, Clone)]
struct ServingCertificate;

impl TlsServingDefaults for ServingCertificate {
    const CERT_FILE_ENV: &'static str = "NUMARESOURCES_WEBHOOK_TLS_CERT_FILE";
    const KEY_FILE_ENV: &'static str = "NUMARESOURCES_WEBHOOK_TLS_PRIVATE_KEY_FILE";
    const CERT_DIR_ENV: &'static str = "NUMARESOURCES_WEBHOOK_CERT_DIR";
    const SNI_NAMES_ENV: &'static str = "NUMARESOURCES_WEBHOOK_TLS_SNI_NAMES";
    const CERT_FILE: &'static str = "/tmp/k8s-webhook-server/serving-certs/tls.crt";
    const KEY_FILE: &'static str = "/tmp/k8s-webhook-server/serving-certs/tls.key";
    const CERT_DIR: &'static str = "/tmp/numaresources-webhook";
}

/// Runs until SIGTERM or Ctrl-C.
pub fn run(args: WebhookArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    args.runtime.runtime()?.block_on(serve_webhook(args, config))
}

impl WebhookArgs {
    fn config(&self) -> Result<Config, numaresources_runtime::InvalidConfig> {
        Config::new(self.namespace.clone())
    }
}

async fn serve_webhook(args: WebhookArgs, config: Config) -> anyhow::Result<()> {
    let shutdown = Shutdown::on_signals();
    let certificate = args
        .tls
        .certificate("kube-apiserver calls us only once the webhook configurations' caBundle trusts what we serve")?;
    let _watcher = certificate.watch(WatchOptions::default())?;
    let tls = ServerConfigBuilder::new(Arc::new(certificate)).build()?;
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let webhook = Webhook::new(config, client);

    let admin_app = admin::component_router(webhook.readiness(), |registry| webhook.register_metrics(registry));
    let admin_address = SocketAddr::new(args.bind_address, args.health_port);
    let admin = admin::spawn_plain(admin_address, admin_app, shutdown.signaled()).await?;
    let running = tokio::spawn(webhook.clone().run(shutdown.signaled()));
    let address = SocketAddr::new(args.bind_address, args.secure_port);
    let listener = tokio::net::TcpListener::bind(address).await.with_context(|| format!("listening on {address}"))?;
    let served =
        serve_with(listener, tls, webhook.router(), shutdown.signaled(), args.connections.serve_options()).await;
    admin.abort();
    running.abort();
    served.context("serving")
}
