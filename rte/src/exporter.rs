//! The exporter component (`numaresources rte`), in the shape every component has: a validated
//! [`Config`] and a kube client from the caller → [`Exporter::new`] → its metrics
//! ([`Exporter::register_metrics`]) and readiness ([`Exporter::readiness`]) for the runtime's
//! admin router → [`Exporter::run`] until shutdown (or after one refresh with `--oneshot`).
//!
//! It picks the kubelet source (the podresources socket, or none), the publisher (kube-apiserver,
//! the direct path to our API server with kube-apiserver as fallback, or a dry run with
//! `--no-publish`) and the background tasks (the own-object watch that republishes a lost object,
//! the terminal pods watch), and runs the [`Agent`] with them.

use std::future::Future;
use std::sync::Arc;

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_runtime::admin::{Checks, Registry};
use tokio::sync::watch;

use crate::agent::notify_file::NotifyFileError;
use crate::agent::{Agent, DryRun, ScanError, own_object};
use crate::config::{Config, OutputFormat, klog_log_level};
use crate::direct::FailoverPublisher;
use crate::metrics::Metrics;
use crate::podreadiness::PodConditions;
use crate::podresources::{ClientConfig, KubeletIfPresent, PodResourcesClient, PodResourcesSource};
use crate::publish::{KubePublisher, Outcome, PublishError, Publisher};
use crate::terminal::TerminalPods;
use crate::trigger::Trigger;

/// The readiness check that passes once a topology was published (or, with `--no-publish`,
/// would have been).
pub const PUBLISHED_CHECK: &str = "topology-published";

/// Why the exporter could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The notify file cannot be used.
    #[error(transparent)]
    NotifyFile(#[from] NotifyFileError),
    /// `--oneshot`: the one scan or publish failed. (Not a `source`: the text carries it, and
    /// the binary prints the chain, which would repeat it.)
    #[error("the one refresh (--oneshot) failed: {0}")]
    Oneshot(ScanError),
    /// `--output`: the topology could not be printed.
    #[error("cannot print the topology: {0}")]
    Output(String),
}

/// The exporter of one node.
pub struct Exporter {
    config: Config,
    client: Option<kube::Client>,
    metrics: Arc<Metrics>,
    /// Whether the kubelet's socket is looked for at every scan instead of required.
    kubelet_if_present: bool,
    /// True once a topology was published.
    published: watch::Sender<bool>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("node", &self.config.node_name)
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl Exporter {
    /// An exporter for `config`, talking to kube-apiserver through `client`: needed when
    /// [`Config::needs_kube_client`], else it may be `None`.
    pub fn new(config: Config, client: Option<kube::Client>) -> Self {
        Self {
            config,
            client,
            metrics: Arc::default(),
            kubelet_if_present: false,
            published: watch::Sender::new(false),
        }
    }

    /// Looks for the kubelet's podresources socket at every scan: until it exists there is no
    /// kubelet (allocatable = capacity, nothing allocated); once it has appeared, a kubelet that
    /// fails gets nothing published, as in a cluster. For a machine that may or may not run one.
    #[must_use]
    pub fn with_kubelet_if_present(mut self) -> Self {
        self.kubelet_if_present = true;
        self
    }

    /// Completes once a topology was published (or, with `--no-publish`, would have been).
    pub fn first_publish(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut published = self.published.subscribe();
        async move {
            // An error means the exporter is gone, and with it any publish to wait for.
            let _ = published.wait_for(|published| *published).await;
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Registers its metrics (upstream's names, each labelled with the node) into `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.metrics.register(registry, &self.config.node_name);
    }

    /// Its readiness: a topology was published.
    pub fn readiness(&self) -> Checks {
        let published = self.published.subscribe();
        Checks::new().with(PUBLISHED_CHECK, move || match *published.borrow() {
            true => Ok(()),
            false => Err("no topology published yet".to_owned()),
        })
    }

    /// Runs until `shutdown` completes (or after one refresh with `--oneshot`, failing when it
    /// failed).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let client = self.config.flags.podresources_socket.0.clone().map(|socket| {
            if self.kubelet_if_present && !socket.path().exists() {
                tracing::info!(
                    socket = %socket,
                    "no kubelet here: allocatable = capacity, nothing allocated (the socket is looked for at every scan)"
                );
            }
            PodResourcesClient::new(ClientConfig::new(socket))
        });
        if self.kubelet_if_present {
            self.run_with(client.map(KubeletIfPresent::new), shutdown).await
        } else {
            self.run_with(client, shutdown).await
        }
    }

    /// [`Exporter::run`] with the kubelet `source`.
    async fn run_with<S: PodResourcesSource + Sync>(
        self,
        source: Option<S>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), Error> {
        let Self { config, client, metrics, published, .. } = self;
        if let Some(verbosity) = config.flags.verbosity {
            tracing::debug!(
                verbosity,
                matching_log_level = klog_log_level(verbosity),
                "klog verbosity given; it sets the log filter unless --log-level (NUMARESOURCES_LOG) does"
            );
        }
        if config.flags.refresh_node_resources {
            tracing::debug!("--refresh-node-resources is always in effect: every scan re-reads the node's resources");
        }
        // No readiness wait here: the first scan dials, and a failed scan is retried with backoff.
        if source.is_none() {
            tracing::warn!(
                "--podresources-socket none: no kubelet, so allocatable = capacity and nothing is allocated; \
                 the topology is this machine's own view, not what a kubelet would admit"
            );
        }
        let own_pod = if config.flags.podreadiness { config.own_pod.clone() } else { None };
        if config.flags.podreadiness && own_pod.is_none() {
            tracing::warn!(
                "--podreadiness is on but neither POD_NAMESPACE/POD_NAME nor REFERENCE_NAMESPACE/REFERENCE_POD_NAME \
                 name the agent's pod: not setting pod conditions"
            );
        }
        let mut background = tokio::task::JoinSet::new();
        let terminal = client.as_ref().filter(|_| config.flags.exclude_terminal_pods).map(|client| {
            let terminal = TerminalPods::default();
            background.spawn(terminal.clone().watch(client.clone(), config.node_name.clone()));
            terminal
        });
        let conditions = client.clone().zip(own_pod).map(|(client, pod)| PodConditions::new(client, pod));
        let unused = config.flags.direct.unused_file_flags();
        if !unused.is_empty() {
            tracing::warn!(flags = ?unused, "given without --nrt-server, so unused: publishing through kube-apiserver");
        }
        if config.nrt_server.as_ref().is_some_and(|server| server.admin_url.is_none()) && config.heartbeat.is_none() {
            // The direct path holds no own-object watch: without the held question, the
            // heartbeat is what recreates an object lost (deleted by hand, or every replica
            // restarted) on a node whose topology does not change.
            tracing::warn!(
                "--heartbeat=0 with --nrt-server and without --nrt-server-admin-url: an object the server loses \
                 while the node's topology does not change is created again only at its next change"
            );
        }

        let options = Options { conditions, terminal, metrics: metrics.clone(), published };
        // Reported when the API server no longer holds what was published.
        let lost = own_object::Lost::new();
        let (oneshot, node, owned) = (config.flags.oneshot, config.node_name.clone(), config.flags.add_nrt_owner);
        let result = match (client.filter(|_| !config.flags.no_publish), config.nrt_server.clone()) {
            (Some(client), Some(server)) => {
                let admin_url = server.admin_url.clone();
                let publisher =
                    FailoverPublisher::new(server, &node, client, owned).with_metrics(metrics.direct_path().clone());
                if !oneshot {
                    if let Some(url) = admin_url {
                        let interval = crate::direct::held::HELD_INTERVAL;
                        background.spawn(crate::direct::held::follow(url, node.clone(), lost.clone(), interval));
                    }
                    background.spawn(own_object::follow(publisher.own_object_client(), node, lost.clone()));
                }
                drive(config, source, publisher, Some(lost), options, shutdown).await
            }
            (Some(client), None) => {
                let publisher = KubePublisher::new(client.clone(), owned);
                if !oneshot {
                    background.spawn(own_object::watch(client, node, lost.clone()));
                }
                drive(config, source, publisher, Some(lost), options, shutdown).await
            }
            (None, _) => drive(config, source, DryRun, None, options, shutdown).await,
        };
        background.shutdown().await;
        result
    }
}

/// What [`Exporter::run`] wires around the agent.
struct Options {
    conditions: Option<PodConditions>,
    terminal: Option<TerminalPods>,
    metrics: Arc<Metrics>,
    /// Told after each publish.
    published: watch::Sender<bool>,
}

/// Publishes through `inner` and tells `published` after each success.
#[derive(Debug)]
struct Announce<P> {
    inner: P,
    published: watch::Sender<bool>,
}

impl<P: Publisher + Sync> Publisher for Announce<P> {
    async fn publish(&self, desired: NodeResourceTopology) -> Result<Outcome, PublishError> {
        let outcome = self.inner.publish(desired).await?;
        self.published.send_replace(true);
        Ok(outcome)
    }
}

/// Runs the agent publishing through `publisher` with `options`, republishing whenever `lost` is
/// notified, once (`--oneshot`) or until `shutdown`.
async fn drive<S: PodResourcesSource + Sync, P: Publisher + Sync>(
    config: Config,
    source: Option<S>,
    publisher: P,
    lost: Option<Arc<own_object::Lost>>,
    options: Options,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let oneshot = config.flags.oneshot;
    let publisher = Announce { inner: publisher, published: options.published };
    let mut agent = Agent::new(config, source, publisher).with_metrics(options.metrics).with_config_reload();
    if let Some(lost) = lost {
        agent = agent.with_republish(lost);
    }
    if let Some(conditions) = options.conditions {
        agent = agent.with_pod_conditions(conditions);
    }
    if let Some(terminal) = options.terminal {
        agent = agent.with_terminal_pods(terminal);
    }
    if !oneshot {
        return agent.run(shutdown).await.map_err(Error::NotifyFile);
    }
    tokio::select! {
        biased;
        () = shutdown => Ok(()),
        refreshed = agent.refresh(Trigger::Periodic) => match refreshed {
            Ok(outcome) => {
                tracing::info!(?outcome, "--oneshot: refreshed once; exiting");
                match (agent.config().flags.output, agent.last_published()) {
                    (Some(format), Some(published)) => print_topology(published, format),
                    _ => Ok(()),
                }
            }
            Err(error) => Err(Error::Oneshot(error)),
        },
    }
}

/// Writes `nrt` to stdout as `kubectl get -o yaml|json` would show it.
fn print_topology(nrt: &NodeResourceTopology, format: OutputFormat) -> Result<(), Error> {
    use std::io::Write;
    let text = match format {
        OutputFormat::Yaml => serde_norway::to_string(nrt).map_err(|e| e.to_string()),
        OutputFormat::Json => serde_json::to_string_pretty(nrt).map(|t| t + "\n").map_err(|e| e.to_string()),
    }
    .map_err(Error::Output)?;
    std::io::stdout().lock().write_all(text.as_bytes()).map_err(|e| Error::Output(e.to_string()))
}
