//! The replication flags of `numaresources apiserver` (leader election named as kube-scheduler
//! names it, peers as kube-apiserver names its peer-proxy flags) and the wiring they select: the
//! election loop and the peer listener.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use numaresources_api::GoDuration;
use numaresources_apiserver::AppState;
use numaresources_apiserver::replication::{PeerTls, ReplicaConfig};
use numaresources_runtime::leader::{LeaderLease, LeaseTimings};
use numaresources_runtime::tls::{CaBundle, ClientCaVerifier, ReloadingCertificate, ServerConfigBuilder, WatchOptions};

/// Replication options.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplicationArgs {
    /// Run as one of several replicas: elect a leader on a Lease, replicate its store, forward
    /// writes to it. Needs a kube-apiserver for the Lease (`--kubeconfig` or in-cluster), also in
    /// standalone mode, and the `--peer-*` flags.
    #[arg(long, env = "NUMARESOURCES_APISERVER_LEADER_ELECT", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// The leader-election Lease's name.
    #[arg(long, env = "NUMARESOURCES_APISERVER_LEADER_ELECT_RESOURCE_NAME", default_value = "numaresources-apiserver")]
    leader_elect_resource_name: String,
    /// The leader-election Lease's namespace.
    #[arg(long, env = "NUMARESOURCES_APISERVER_LEADER_ELECT_RESOURCE_NAMESPACE", default_value = "numaresources")]
    leader_elect_resource_namespace: String,
    /// A leader that has not renewed the Lease for this long has lost it: the longest a failover
    /// takes (plus one retry period).
    #[arg(long, env = "NUMARESOURCES_APISERVER_LEADER_ELECT_LEASE_DURATION", default_value = "4s", value_parser = parse_short)]
    leader_elect_lease_duration: Duration,
    /// The leader stops leading when it could not renew for this long (less than the duration).
    #[arg(long, env = "NUMARESOURCES_APISERVER_LEADER_ELECT_RENEW_DEADLINE", default_value = "3s", value_parser = parse_short)]
    leader_elect_renew_deadline: Duration,
    /// How often the leader renews and the others look at the Lease.
    #[arg(long, env = "NUMARESOURCES_APISERVER_LEADER_ELECT_RETRY_PERIOD", default_value = "500ms", value_parser = parse_short)]
    leader_elect_retry_period: Duration,
    /// The address peers reach this replica's peer listener at (the pod IP).
    #[arg(long, env = "NUMARESOURCES_APISERVER_PEER_ADVERTISE_IP")]
    peer_advertise_ip: Option<IpAddr>,
    /// The port of the peer listener (mutual TLS with the peer CA), on `--bind-address`.
    #[arg(long, env = "NUMARESOURCES_APISERVER_PEER_ADVERTISE_PORT", default_value_t = 6444)]
    peer_advertise_port: u16,
    /// The CA that signs every replica's peer certificate.
    #[arg(long, env = "NUMARESOURCES_APISERVER_PEER_CA_FILE", default_value = "/etc/numaresources/peer/ca.crt")]
    peer_ca_file: PathBuf,
    /// This replica's peer certificate (serverAuth and clientAuth).
    #[arg(
        long,
        env = "NUMARESOURCES_APISERVER_PEER_CLIENT_CERT_FILE",
        default_value = "/etc/numaresources/peer/tls.crt"
    )]
    peer_client_cert_file: PathBuf,
    /// The key of the peer certificate.
    #[arg(
        long,
        env = "NUMARESOURCES_APISERVER_PEER_CLIENT_KEY_FILE",
        default_value = "/etc/numaresources/peer/tls.key"
    )]
    peer_client_key_file: PathBuf,
    /// The name peer certificates are issued for.
    #[arg(long, env = "NUMARESOURCES_APISERVER_PEER_SERVER_NAME", default_value = "numaresources-apiserver-peer")]
    peer_server_name: String,
}

/// The Lease's timings: Go durations of at least 100ms.
fn parse_short(text: &str) -> Result<Duration, String> {
    numaresources_runtime::flags::at_least(text, GoDuration::from_nanos(100_000_000))
}

/// What `--leader-elect` starts.
pub struct Replicas {
    replica: ReplicaConfig,
    lease: LeaderLease,
    peer_addr: SocketAddr,
    peer_tls: Arc<rustls::ServerConfig>,
    _certificate_watcher: numaresources_runtime::tls::CertificateWatcher,
    _ca_watcher: numaresources_runtime::tls::CertificateWatcher,
}

impl ReplicationArgs {
    /// This replica's election and peer listener, when `--leader-elect` is on.
    pub async fn replicas(
        &self,
        bind: IpAddr,
        kubeconfig: Option<&std::path::Path>,
    ) -> anyhow::Result<Option<Replicas>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let timings = LeaseTimings {
            duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry: self.leader_elect_retry_period,
        };
        anyhow::ensure!(
            timings.retry < timings.renew_deadline && timings.renew_deadline < timings.duration,
            "--leader-elect-retry-period < --leader-elect-renew-deadline < --leader-elect-lease-duration must hold"
        );
        let ip = self.peer_advertise_ip.context("--leader-elect needs --peer-advertise-ip (the pod IP)")?;
        let peer = SocketAddr::new(ip, self.peer_advertise_port);
        let advertise = format!("https://{peer}");
        let identity = format!("{}_{peer}_{}", host_name(), random_suffix());
        let tls = PeerTls {
            ca_file: self.peer_ca_file.clone(),
            cert_file: self.peer_client_cert_file.clone(),
            key_file: self.peer_client_key_file.clone(),
            server_name: self.peer_server_name.clone(),
        };
        let (client_cas, ca_watcher) = follow_peer_ca(&tls.ca_file)?;
        let certificate = ReloadingCertificate::load(&tls.cert_file, &tls.key_file)
            .with_context(|| format!("loading the peer certificate {}", tls.cert_file.display()))?;
        let watcher = certificate.watch(WatchOptions::default())?;
        let peer_tls = ServerConfigBuilder::new(Arc::new(certificate)).client_cas(client_cas).build()?;
        let client = numaresources_runtime::kube_client(kubeconfig).await?;
        let lease = LeaderLease::new(
            client,
            &self.leader_elect_resource_namespace,
            &self.leader_elect_resource_name,
            &identity,
            timings,
        );
        tracing::info!(%identity, %advertise, lease = %self.leader_elect_resource_name, "replicated: electing a leader");
        Ok(Some(Replicas {
            replica: ReplicaConfig { identity, advertise, tls },
            lease,
            peer_addr: SocketAddr::new(bind, self.peer_advertise_port),
            peer_tls,
            _certificate_watcher: watcher,
            _ca_watcher: ca_watcher,
        }))
    }
}

/// The peer listener's client CAs: the peer CA file's bundle, trusted anew for the next
/// handshakes whenever the file changes (a CA rotation writes both CAs first, then the new
/// certificates, then drops the old CA). A bundle that does not parse leaves the previous one in
/// force.
fn follow_peer_ca(
    path: &std::path::Path,
) -> anyhow::Result<(Arc<ClientCaVerifier>, numaresources_runtime::tls::CertificateWatcher)> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let ca = CaBundle::from_pem(&pem).with_context(|| path.display().to_string())?;
    let verifier = Arc::new(ClientCaVerifier::new(&[ca])?);
    let (owned, following, last) = (path.to_path_buf(), verifier.clone(), std::sync::Mutex::new(pem));
    let watcher = numaresources_runtime::tls::follow_files(
        &[path],
        WatchOptions::default(),
        "the peer CA",
        move |why| {
            let Ok(pem) = std::fs::read(&owned) else { return };
            let mut last = last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if *last == pem {
                return;
            }
            match CaBundle::from_pem(&pem).map_err(anyhow::Error::from).and_then(|ca| Ok(following.replace(&[ca])?)) {
                Ok(()) => {
                    tracing::info!(file = %owned.display(), trigger = why, "the peer CA changed; trusting the new bundle");
                    *last = pem;
                }
                Err(error) => tracing::warn!(file = %owned.display(), "keeping the previous peer CA: {error:#}"),
            }
        },
    )?;
    Ok((verifier, watcher))
}

impl Replicas {
    /// What the server makes this replica's replication of.
    pub fn replica(&self) -> ReplicaConfig {
        self.replica.clone()
    }

    /// Starts the peer listener (until `state.stopping`) and the election (until `shutdown`; a
    /// leader hands the Lease over first). The handle completes when the election has ended.
    pub async fn start(
        self,
        state: Arc<AppState>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let replication =
            state.replication.clone().context("the server was made without this replica's replication")?;
        let listener = tokio::net::TcpListener::bind(self.peer_addr)
            .await
            .with_context(|| format!("listening for peers on {}", self.peer_addr))?;
        tracing::info!(address = %self.peer_addr, "serving peers");
        let stopping = state.stopping.clone();
        let peer_tls = self.peer_tls;
        tokio::spawn(async move {
            let router = numaresources_apiserver::replication::peer_router(state);
            let stopped = async move { stopping.cancelled().await };
            if let Err(error) = numaresources_runtime::serve(listener, peer_tls, router, stopped).await {
                tracing::error!(%error, "the peer listener failed");
            }
        });
        let (lease, watcher) = (self.lease, self._certificate_watcher);
        Ok(tokio::spawn(async move {
            numaresources_apiserver::replication::run(replication, lease, shutdown).await;
            drop(watcher);
        }))
    }
}

fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_owned()))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "apiserver".to_owned())
}

/// A per-process suffix, so a restarted replica is a new identity (it holds nothing yet).
fn random_suffix() -> String {
    format!("{:08x}", numaresources_runtime::random_word(0) as u32)
}
