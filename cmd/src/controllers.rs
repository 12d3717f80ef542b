//! `numaresources controllers`: the operator, scheduler and kubeletconfig controllers in one
//! leader-elected process (`numaresources_controllers::run`), plus a plain-HTTP health and
//! metrics port.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::builder::TypedValueParser as _;
use numaresources_controllers::certificates::{ApiserverDeployment, CertificateMode, check_compatible};
use numaresources_controllers::{LeaderElection, Settings};

use crate::kube_client::kube_client;

/// Options of `numaresources controllers`.
#[derive(Debug, clap::Args)]
pub struct ControllersArgs {
    /// A kubeconfig (default: in-cluster configuration, then `$KUBECONFIG`/`~/.kube/config`).
    #[arg(long, env = "NUMARESOURCES_CONTROLLERS_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The namespace the operands (exporters, API server, scheduler) run in.
    #[arg(long, env = "POD_NAMESPACE", default_value = "numaresources")]
    namespace: String,
    /// The image of this binary: the exporters and the API server run it too.
    #[arg(long, env = "NUMARESOURCES_IMAGE")]
    image: String,
    /// Elect one active replica through a Lease (`--leader-elect=false` for a single replica
    /// run by hand).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Where the leader-election Lease lives [default: --namespace].
    #[arg(long, env = "NUMARESOURCES_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// This replica's identity in the election [default: env POD_NAME, then the host name].
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Let `NUMAResourcesOperator.spec.imageSpec` replace the exporter image (upstream's
    /// `EXPORTER_IMAGE_RESTRICTION=false`).
    #[arg(long, env = "NUMARESOURCES_ALLOW_CUSTOM_EXPORTER_IMAGE", default_value_t = false,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    allow_custom_exporter_image: bool,
    /// Plain-HTTP port for `/healthz`, `/readyz` and `/metrics` (Prometheus); 0 disables it.
    #[arg(long, env = "NUMARESOURCES_CONTROLLERS_HEALTH_PORT", default_value_t = 8081)]
    health_port: u16,
    /// Where serving certificates and `caBundle` come from. Only `self-managed` makes the
    /// controllers generate them (CA in Secret `numaresources-ca`, Secrets
    /// `numaresources-apiserver-tls` and `numaresources-webhook-tls`) and inject `caBundle`; with
    /// `olm`, `cert-manager` or `service-ca` that injector owns them and nothing of ours writes them.
    #[arg(long, env = "NUMARESOURCES_CERTIFICATE_MODE", default_value = "self-managed",
          value_parser = clap::builder::PossibleValuesParser::new(CertificateMode::NAMES)
              .try_map(|value| value.parse::<CertificateMode>()))]
    certificate_mode: CertificateMode,
    /// Who creates the NRT API server's Deployment, Service, APIService and RBAC: `operator` (the
    /// NUMAResourcesOperator controller renders them) or `installed` (the kustomize base or the
    /// OLM CSV ships them; the operator only reports them). `--certificate-mode=olm` needs
    /// `installed`.
    #[arg(long, env = "NUMARESOURCES_APISERVER_DEPLOYMENT", default_value = "operator",
          value_parser = clap::builder::PossibleValuesParser::new(ApiserverDeployment::NAMES)
              .try_map(|value| value.parse::<ApiserverDeployment>()))]
    apiserver_deployment: ApiserverDeployment,
}

/// Runs the controllers until SIGTERM.
pub fn run(args: ControllersArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: ControllersArgs) -> anyhow::Result<()> {
    check_compatible(args.certificate_mode, args.apiserver_deployment).map_err(anyhow::Error::msg)?;
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let metrics = numaresources_controllers::metrics::Metrics::default();
    let readiness = numaresources_controllers::health::Readiness::default();
    if args.health_port != 0 {
        let address = SocketAddr::from((Ipv4Addr::UNSPECIFIED, args.health_port));
        let listener = tokio::net::TcpListener::bind(address).await.with_context(|| format!("binding {address}"))?;
        let ok = || async { "ok" };
        let served = metrics.clone();
        let exposition = move || {
            let metrics = served.clone();
            async move {
                match metrics.encode() {
                    Ok(text) => (axum::http::StatusCode::OK, text),
                    Err(_) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, String::new()),
                }
            }
        };
        // Liveness: the process answers. Readiness: the API server answered and, when leading,
        // every controller's cache has synced (numaresources_controllers::health).
        let checked = readiness.clone();
        let ready = move || {
            let readiness = checked.clone();
            async move {
                match readiness.check() {
                    Ok(state) => (axum::http::StatusCode::OK, state.to_owned()),
                    Err(why) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, why),
                }
            }
        };
        let router = axum::Router::new()
            .route("/healthz", axum::routing::get(ok))
            .route("/readyz", axum::routing::get(ready))
            .route("/metrics", axum::routing::get(exposition));
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::error!(%error, "the health endpoint stopped");
            }
        });
    }
    let mut settings = Settings::kubernetes(&args.namespace, &args.image);
    settings.allow_custom_rte_image = args.allow_custom_exporter_image;
    settings.certificate_mode = args.certificate_mode;
    settings.apiserver_deployment = args.apiserver_deployment;
    let leader = args.leader_elect.then(|| LeaderElection {
        namespace: args.leader_election_namespace.clone().unwrap_or_else(|| args.namespace.clone()),
        identity: args
            .identity
            .clone()
            .filter(|i| !i.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("numaresources-controllers-{}", std::process::id())),
    });
    numaresources_controllers::run(client, settings, leader, metrics, readiness, crate::shutdown::signal()).await?;
    Ok(())
}

/// `numaresources pause`: sleeps until SIGTERM. The exporter pod's shared-pool reference
/// container runs it: it never gets exclusive CPUs, so its cpuset is the shared pool, and the
/// image needs no shell.
pub fn pause() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(crate::shutdown::signal());
    Ok(())
}
