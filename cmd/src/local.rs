//! `numaresources local`: the NodeResourceTopology API server with an embedded exporter for
//! this machine, on loopback, so a newcomer can `kubectl get noderesourcetopologies` with no
//! cluster.
//!
//! It writes a CA, a serving certificate and a kubeconfig into `--state-dir`; the exporter scans
//! sysfs (and the kubelet's podresources socket, when this machine runs a kubelet) every
//! `--refresh-period` and writes the node's object straight into the store.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use numaresources_api::GoDuration;
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_apiserver::auth::{Auth, Standalone};
use numaresources_apiserver::store::{Preconditions, StoreError};
use numaresources_apiserver::{AppState, Store, router};
use numaresources_rte::accounting::KubeletView;
use numaresources_rte::fingerprint::Method;
use numaresources_rte::podresources::{KUBELET_SOCKET, PodResourcesClient};
use numaresources_rte::sysfs;
use numaresources_rte::topology::{Scan, TopologyManager, node_topology};

/// Options of `numaresources local`.
#[derive(Debug, clap::Args)]
pub struct LocalArgs {
    /// Address to listen on. Loopback only: the local mode has no authentication.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: IpAddr,
    /// Port to listen on (0 picks a free one and logs it).
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// Where the serving certificate (reused across runs) and unpacked fixtures are kept.
    #[arg(long, default_value = ".numaresources-local")]
    state_dir: PathBuf,
    /// Where to write the kubeconfig for kubectl (a new token every run).
    #[arg(long, default_value = "numaresources.kubeconfig")]
    kubeconfig: PathBuf,
    /// Also publish this many synthetic nodes, built from the real machines in our test
    /// fixtures with varied allocations, to try a fleet (and benchmark against one).
    #[arg(long, default_value_t = 0)]
    simulate_nodes: usize,
    /// The sysfs root to read the machine from.
    #[arg(long, default_value = "/sys")]
    sysfs: PathBuf,
    /// The node name to publish (default: this machine's host name).
    #[arg(long, env = "NODE_NAME")]
    hostname: Option<String>,
    /// How often the exporter rescans.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    refresh_period: GoDuration,
    /// The kubelet podresources socket; used only if it exists.
    #[arg(long, default_value = KUBELET_SOCKET)]
    podresources_socket: String,
    /// The kubelet configuration file to read the topology manager policy and scope from, if
    /// it exists (else the kubelet defaults `none`/`container`).
    #[arg(long, default_value = "/var/lib/kubelet/config.yaml")]
    kubelet_config: PathBuf,
    /// Which pods the fingerprint covers: `all` or `with-exclusive-resources`.
    #[arg(long, default_value = "with-exclusive-resources")]
    pods_fingerprint_method: Method,
}

fn parse_duration(text: &str) -> Result<GoDuration, String> {
    let duration = GoDuration::parse(text).map_err(|e| e.to_string())?;
    if duration.as_nanos() < 1_000_000_000 {
        return Err("the refresh period must be at least 1s".into());
    }
    Ok(duration)
}

/// Runs until Ctrl-C.
pub fn run(args: LocalArgs) -> anyhow::Result<()> {
    if !args.bind_address.is_loopback() {
        bail!(
            "the local mode serves without authentication and only listens on loopback; {} is not",
            args.bind_address
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(serve(args))
}

async fn serve(args: LocalArgs) -> anyhow::Result<()> {
    let node_name = match &args.hostname {
        Some(name) => name.clone(),
        None => host_name().context("cannot tell this machine's host name; pass --hostname")?,
    };
    let store = Arc::new(Store::default());
    let mut state = AppState::new(store.clone(), env!("CARGO_PKG_VERSION"), env!("NUMARESOURCES_GIT_COMMIT"));
    let token = random_token();
    let tokens = format!("{token},admin,local-admin,\"system:masters\"\n");
    state.auth = Auth::Standalone(Arc::new(Standalone::from_token_file(&tokens)?));
    let state = Arc::new(state);
    state.readiness.set("exporter-first-scan", false);
    if args.simulate_nodes > 0 {
        let published = crate::simulate::publish_fleet(&store, &args.state_dir, args.simulate_nodes)?;
        tracing::info!(published, "published synthetic nodes built from the sysfs fixtures");
    }

    let tls = crate::tls::LocalTls::prepare(&args.state_dir).context("preparing certificates")?;
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(args.bind_address, args.secure_port))
        .await
        .with_context(|| format!("listening on {}:{}", args.bind_address, args.secure_port))?;
    let address = listener.local_addr()?;
    let kubeconfig = tls.write_kubeconfig(&args.kubeconfig, address, &token).context("writing the kubeconfig")?;
    tracing::info!(%address, "serving the NodeResourceTopology API on https://{address}");
    tracing::info!("try: kubectl --kubeconfig {} get noderesourcetopologies", kubeconfig.display());

    let exporter = tokio::spawn(export_loop(args, node_name, store, state.clone()));
    let stopping = state.stopping.clone();
    let shutdown = async move {
        crate::shutdown::signal().await;
        stopping.cancel();
    };
    let served = tls.serve(listener, router(state), shutdown).await;
    exporter.abort();
    served.context("serving")
}

/// Scans the machine and publishes its topology, every refresh period, forever.
async fn export_loop(args: LocalArgs, node_name: String, store: Arc<Store>, state: Arc<AppState>) {
    let topology_manager = read_topology_manager(&args.kubelet_config);
    let kubelet = Path::new(args.podresources_socket.trim_start_matches("unix://"))
        .exists()
        .then(|| PodResourcesClient::for_socket(&args.podresources_socket))
        .and_then(|client| client.map_err(|e| tracing::warn!("ignoring the podresources socket: {e}")).ok());
    if kubelet.is_none() {
        tracing::info!("no kubelet podresources socket: publishing the machine's own view (allocatable = capacity)");
    }
    let period = args.refresh_period.to_std().unwrap_or(Duration::from_secs(10));
    let mut ticker = tokio::time::interval(period);
    loop {
        ticker.tick().await;
        let root = args.sysfs.clone();
        let discovery = match tokio::task::spawn_blocking(move || sysfs::discover(root)).await {
            Ok(Ok(discovery)) => discovery,
            Ok(Err(error)) => {
                tracing::error!("reading the machine from {}: {error}", args.sysfs.display());
                continue;
            }
            Err(error) => {
                tracing::error!("the sysfs scan failed: {error}");
                continue;
            }
        };
        for skipped in &discovery.skipped {
            tracing::debug!("sysfs: skipped {skipped}");
        }
        let kubelet_state = match &kubelet {
            Some(client) => match tokio::try_join!(client.allocatable(), client.list()) {
                Ok(state) => Some(state),
                Err(error) => {
                    tracing::warn!("kubelet podresources: {error}; publishing without it this time");
                    None
                }
            },
            None => None,
        };
        let nrt = node_topology(&Scan {
            node_name: &node_name,
            machine: &discovery.machine,
            kubelet: kubelet_state.as_ref().map(|(allocatable, pods)| KubeletView { allocatable, pods }),
            topology_manager: &topology_manager,
            fingerprint: Some(args.pods_fingerprint_method),
        });
        match publish(&store, nrt) {
            Ok(changed) => tracing::debug!(changed, "published"),
            Err(error) => tracing::error!("publishing: {error}"),
        }
        state.readiness.set("exporter-first-scan", true);
    }
}

/// Creates the node's object or replaces its content, keeping what others wrote in metadata.
fn publish(store: &Store, nrt: NodeResourceTopology) -> Result<bool, StoreError> {
    let name = nrt.metadata.name.clone().unwrap_or_default();
    let result = store.modify(&name, &Preconditions::default(), false, |current| {
        let mut next = current.clone();
        next.zones = nrt.zones.clone();
        next.attributes = nrt.attributes.clone();
        let annotations = next.metadata.annotations.get_or_insert_default();
        annotations.extend(nrt.metadata.annotations.clone().unwrap_or_default());
        Ok::<_, StoreError>(next)
    });
    match result {
        Ok((_, changed)) => Ok(changed),
        Err(StoreError::NotFound) => store.create(nrt, false).map(|_| true),
        Err(error) => Err(error),
    }
}

fn read_topology_manager(path: &Path) -> TopologyManager {
    match std::fs::read_to_string(path) {
        Ok(text) => TopologyManager::from_kubelet_config(&text).unwrap_or_else(|error| {
            tracing::warn!("{}: {error}; using the kubelet defaults", path.display());
            TopologyManager::default()
        }),
        Err(_) => TopologyManager::default(),
    }
}

/// 128 random bits as hex, from the std hasher's per-process random keys.
fn random_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let seed = std::collections::hash_map::RandomState::new();
    let word = |salt: u64| {
        let mut hasher = seed.build_hasher();
        hasher.write_u64(salt);
        hasher
            .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        hasher.finish()
    };
    format!("{:016x}{:016x}", word(1), word(2))
}

fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}
