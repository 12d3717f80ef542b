//! `numaresources controllers`: the operator, scheduler and kubeletconfig controllers in one
//! leader-elected process (`numaresources_controllers::Controllers`), plus a plain-HTTP health
//! and metrics port.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use numaresources_controllers::{ApiserverDeployment, CertificateMode, Config, Controllers, LeaderElection, Settings};
use numaresources_runtime::admin;
use numaresources_runtime::kube_client;
use numaresources_runtime::shutdown::Shutdown;

/// Options of `numaresources controllers`.
#[derive(Debug, clap::Args)]
pub struct ControllersArgs {
    /// A kubeconfig (default: in-cluster configuration, then `$KUBECONFIG`/`~/.kube/config`).
    #[arg(long, env = "NUMARESOURCES_CONTROLLERS_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The namespace the operands (exporters, API server, scheduler) run in.
    #[arg(long, env = "POD_NAMESPACE", default_value = numaresources_api::DEFAULT_NAMESPACE)]
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
    /// The runtime.
    #[command(flatten)]
    runtime: numaresources_runtime::flags::RuntimeFlags,
}

/// Runs the controllers until SIGTERM.
pub fn run(args: ControllersArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    args.runtime.runtime()?.block_on(run_async(args.kubeconfig, args.health_port, config))
}

impl ControllersArgs {
    fn config(&self) -> Result<Config, numaresources_runtime::InvalidConfig> {
        let mut settings = Settings::kubernetes(&self.namespace, &self.image);
        settings.allow_custom_rte_image = self.allow_custom_exporter_image;
        settings.certificate_mode = self.certificate_mode;
        settings.apiserver_deployment = self.apiserver_deployment;
        let leader = self.leader_elect.then(|| LeaderElection {
            namespace: self.leader_election_namespace.clone().unwrap_or_else(|| self.namespace.clone()),
            identity: self
                .identity
                .clone()
                .filter(|i| !i.is_empty())
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| format!("numaresources-controllers-{}", std::process::id())),
        });
        Config::new(settings, leader)
    }
}

async fn run_async(kubeconfig: Option<PathBuf>, health_port: u16, config: Config) -> anyhow::Result<()> {
    let shutdown = Shutdown::on_signals();
    let client = kube_client(kubeconfig.as_deref()).await?;
    let controllers = Controllers::new(config, client);
    if health_port != 0 {
        let app = admin::component_router(controllers.readiness(), |registry| controllers.register_metrics(registry));
        admin::spawn_plain(SocketAddr::from((Ipv4Addr::UNSPECIFIED, health_port)), app, shutdown.signaled()).await?;
    }
    controllers.run(shutdown.signaled()).await?;
    Ok(())
}

/// `numaresources pause`: sleeps until SIGTERM. The exporter pod's shared-pool reference
/// container runs it: it never gets exclusive CPUs, so its cpuset is the shared pool, and the
/// image needs no shell.
pub fn pause() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async { Shutdown::on_signals().signaled().await });
    Ok(())
}
