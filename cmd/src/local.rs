//! `numaresources local`: the NodeResourceTopology API server with an embedded exporter for
//! this machine, on loopback, so a newcomer can `kubectl get noderesourcetopologies` with no
//! cluster.
//!
//! It writes a CA, a serving certificate and a kubeconfig (with a token generated for the run)
//! into `--state-dir`, and composes the two components: the API server of `numaresources
//! apiserver` (standalone, that one token) and the exporter of `numaresources rte` (the same
//! scan, accounting, publish decisions and heartbeat), publishing through a Kubernetes client
//! over loopback TLS with that token. Until the kubelet's podresources socket exists there is
//! no kubelet (allocatable = capacity, nothing allocated); once it has appeared, a kubelet that
//! fails gets nothing published, as in a cluster.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use numaresources_apiserver::ApiServer;
use numaresources_apiserver::auth::Standalone;
use numaresources_apiserver::config::{Args as ServerArgs, Authentication};
use numaresources_rte::config::{Args as ExporterArgs, Interval, Kubelet, MetricsMode, NO_KUBELET};
use numaresources_rte::exporter::Exporter;
use numaresources_rte::fingerprint::Method;
use numaresources_rte::podresources::KUBELET_SOCKET;
use numaresources_rte::topology::read_kubelet_config;
use numaresources_runtime::kube_client;
use numaresources_runtime::shutdown::Shutdown;

/// The readiness check that passes once this machine's topology is published.
const FIRST_PUBLISH: &str = "exporter-first-scan";

/// Options of `numaresources local`.
#[derive(Debug, clap::Args)]
pub struct LocalArgs {
    /// Address to listen on. Loopback only: a development server, guarded by one generated token.
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
    #[arg(long, default_value = "10s", value_parser = numaresources_runtime::flags::period)]
    refresh_period: Duration,
    /// The kubelet podresources socket: looked for at every scan until it exists, then the
    /// kubelet's allocations are accounted; `none` never looks.
    #[arg(long, default_value = KUBELET_SOCKET)]
    podresources_socket: Kubelet,
    /// The kubelet configuration file to read the topology manager policy and scope from, if
    /// it exists (else the kubelet defaults `none`/`container`).
    #[arg(long, default_value = "/var/lib/kubelet/config.yaml")]
    kubelet_config: PathBuf,
    /// Which pods the fingerprint covers: `all` or `with-exclusive-resources`.
    #[arg(long, default_value = "with-exclusive-resources")]
    pods_fingerprint_method: Method,
}

/// Runs until Ctrl-C.
pub fn run(args: LocalArgs) -> anyhow::Result<()> {
    if !args.bind_address.is_loopback() {
        bail!(
            "the local mode is a development server (one generated token, no authorization) and only listens on loopback; {} is not",
            args.bind_address
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = runtime.block_on(serve(args));
    // As `rte`: a sysfs read stalled in the kernel must not keep the process alive.
    runtime.shutdown_timeout(numaresources_rte::agent::BLOCKING_TASKS_GRACE);
    result
}

async fn serve(args: LocalArgs) -> anyhow::Result<()> {
    let node_name = match &args.hostname {
        Some(name) => name.clone(),
        None => host_name().context("cannot tell this machine's host name; pass --hostname")?,
    };
    let token = random_token();
    let server = api_server(&format!("{token},admin,local-admin,\"system:masters\"\n"))?;
    server.state().readiness.set(FIRST_PUBLISH, false);
    if args.simulate_nodes > 0 {
        let store = &server.state().store;
        let names = crate::simulate::publish_fleet(store, &args.state_dir, args.simulate_nodes)?;
        tracing::info!(published = names.len(), "published synthetic nodes built from the sysfs fixtures");
        tokio::spawn(crate::simulate::heartbeat(store.clone(), names));
    }

    let tls = crate::tls::LocalTls::prepare(&args.state_dir).context("preparing certificates")?;
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(args.bind_address, args.secure_port))
        .await
        .with_context(|| format!("listening on {}:{}", args.bind_address, args.secure_port))?;
    let address = listener.local_addr()?;
    let kubeconfig = tls.write_kubeconfig(&args.kubeconfig, address, &token).context("writing the kubeconfig")?;
    // The listener is bound: the exporter's first requests wait in its backlog until serving starts.
    let exporter = exporter(&args, node_name, &kubeconfig).await?;
    tracing::info!(%address, "serving the NodeResourceTopology API on https://{address}");
    tracing::info!("try: kubectl --kubeconfig {} get noderesourcetopologies", kubeconfig.display());

    let readiness = server.state().readiness.clone();
    let first_publish = exporter.first_publish();
    tokio::spawn(async move {
        first_publish.await;
        readiness.set(FIRST_PUBLISH, true);
    });
    let stopping = server.state().stopping.clone();
    let exporting = tokio::spawn(exporter.run(stopping.clone().cancelled_owned()));
    let (signaled, stop) = (Shutdown::on_signals().signaled(), stopping.clone());
    let shutdown = async move {
        signaled.await;
        stop.cancel();
    };
    let served = tls.serve(listener, server.router(), shutdown).await;
    // Also when serving failed before any signal.
    stopping.cancel();
    match exporting.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::error!(%error, "the embedded exporter stopped"),
        Err(error) => tracing::error!(%error, "the embedded exporter task failed"),
    }
    served.context("serving")
}

/// The API server of `numaresources apiserver` with its flag defaults, standalone with `tokens`.
fn api_server(tokens: &str) -> anyhow::Result<ApiServer> {
    let mut config = numaresources_runtime::flags::defaults::<ServerArgs>()?.config()?;
    config.authentication = Authentication::Standalone(Standalone::from_token_file(tokens)?);
    config.build = crate::apiserver::build_info();
    Ok(ApiServer::new(config, None)?)
}

/// The exporter of `numaresources rte`, configured from the same flags, publishing to this server.
async fn exporter(args: &LocalArgs, node_name: String, kubeconfig: &Path) -> anyhow::Result<Exporter> {
    let flags = ExporterArgs {
        hostname: Some(node_name),
        sysfs: args.sysfs.clone(),
        podresources_socket: args.podresources_socket.clone(),
        sleep_interval: Interval(Some(args.refresh_period)),
        kubelet_config_file: usable_kubelet_config(&args.kubelet_config),
        pods_fingerprint_method: args.pods_fingerprint_method,
        // This server holds no Nodes to own the object, and the exporter runs in no Pod.
        add_nrt_owner: false,
        podreadiness: false,
        metrics_mode: MetricsMode::Disabled,
        ..ExporterArgs::default()
    };
    let config = flags.resolve().context("configuring the embedded exporter")?;
    if config.flags.podresources_socket.0.is_none() {
        tracing::info!(
            "no kubelet here: allocatable = capacity, nothing allocated (--podresources-socket {NO_KUBELET})"
        );
    }
    let client = kube_client(Some(kubeconfig)).await.context("building the exporter's API client")?;
    Ok(Exporter::new(config, Some(client)).with_kubelet_if_present())
}

/// `path` if this process can read it and it holds a kubelet configuration (the kubelet's file
/// is often root-only, and may be anything on a laptop): otherwise the kubelet's defaults, with
/// a warning, rather than no server at all.
fn usable_kubelet_config(path: &Path) -> Option<PathBuf> {
    let problem = match std::fs::read_to_string(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => error.to_string(),
        Ok(text) => match read_kubelet_config(&text) {
            Ok(_) => return Some(path.to_path_buf()),
            Err(error) => error.to_string(),
        },
    };
    tracing::warn!("{}: {problem}; using the kubelet defaults none/container", path.display());
    None
}

/// 128 random bits as hex.
fn random_token() -> String {
    use numaresources_runtime::random_word;
    format!("{:016x}{:016x}", random_word(1), random_word(2))
}

fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}
