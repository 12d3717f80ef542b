//! The `numaresources rte` flags, typed: each value is parsed by clap, and each default is
//! written once, in its `#[arg]` attribute.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use numaresources_api::GoDuration;
use numaresources_api::exporter::{METRICS_CERTS_DIR, METRICS_PORT};

use crate::fingerprint::Method;
use crate::podresources::middleware::ContainerRef;
use crate::podresources::{DEFAULT_SOCKET, SocketPath};
use crate::sysfs::DEFAULT_SYSFS_ROOT;

/// The shortest `--podresources-poll-interval`: 10 calls a second, a tenth of the kubelet's
/// podresources rate limit (100 per second for all its clients).
pub const MIN_ALLOCATION_POLL: Duration = Duration::from_millis(100);

/// The `--podresources-socket` value that means "no kubelet".
pub const NO_KUBELET: &str = "none";

/// The `numaresources rte` flags. Flag names follow upstream's resource-topology-exporter where
/// it has them, so the operator's DaemonSet arguments read the same.
#[derive(Debug, Clone, clap::Parser)]
pub struct Args {
    /// The node's name, which is also the NodeResourceTopology object's name [default: env
    /// NODE_NAME, then the host name].
    #[arg(long, env = "NUMARESOURCES_RTE_HOSTNAME")]
    pub hostname: Option<String>,

    /// The sysfs root to discover the machine from (the DaemonSet mounts the host's at /host-sys).
    #[arg(long, env = "NUMARESOURCES_RTE_SYSFS", default_value = DEFAULT_SYSFS_ROOT)]
    pub sysfs: PathBuf,

    /// The kubelet podresources socket, `unix:///path`; `none` runs without a kubelet
    /// (allocatable = capacity, nothing allocated: for trying the agent on any machine).
    #[arg(long, env = "NUMARESOURCES_RTE_PODRESOURCES_SOCKET", default_value = DEFAULT_SOCKET)]
    pub podresources_socket: Kubelet,

    /// With `--oneshot`: print the topology (`yaml` or `json`) on stdout.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<OutputFormat>,

    /// How often to rescan, as a Go duration (`10s`, `1m30s`); `0` disables periodic scans.
    #[arg(long, env = "NUMARESOURCES_RTE_SLEEP_INTERVAL", default_value = "10s")]
    pub sleep_interval: Interval,

    /// A file whose modification triggers a scan (created empty, with its directory, if missing),
    /// for nodes with a hook that touches it; not needed for reactivity (see
    /// --podresources-poll-interval).
    #[arg(long, env = "NUMARESOURCES_RTE_NOTIFY_FILE")]
    pub notify_file: Option<PathBuf>,

    /// How often to ask the kubelet's podresources List for a change of allocations, which
    /// triggers a scan at once (works on any node, no hook needed): a change shows within this
    /// period plus one scan; a Go duration of at least 100ms, `0` turns it off.
    #[arg(long, env = "NUMARESOURCES_RTE_PODRESOURCES_POLL_INTERVAL", default_value = "500ms",
          value_parser = parse_poll_interval)]
    pub podresources_poll_interval: Interval,

    /// The kubelet's configuration file (KubeletConfiguration), read for the topology manager
    /// policy and scope.
    #[arg(long, env = "NUMARESOURCES_RTE_KUBELET_CONFIG_FILE")]
    pub kubelet_config_file: Option<PathBuf>,

    /// Overrides the topology manager policy (env TOPOLOGY_MANAGER_POLICY too).
    #[arg(long, env = "NUMARESOURCES_RTE_TOPOLOGY_MANAGER_POLICY")]
    pub topology_manager_policy: Option<String>,

    /// Overrides the topology manager scope (env TOPOLOGY_MANAGER_SCOPE too).
    #[arg(long, env = "NUMARESOURCES_RTE_TOPOLOGY_MANAGER_SCOPE")]
    pub topology_manager_scope: Option<String>,

    /// The operator's ConfigMap file (podExclude, resourceExclude, kubelet topology manager
    /// settings) [default: /etc/resource-topology-exporter/config.yaml, if present].
    #[arg(long, env = "NUMARESOURCES_RTE_CONFIG")]
    pub config: Option<PathBuf>,

    /// Publish the pods fingerprint (`--pods-fingerprint=false` turns it off).
    #[arg(long, env = "NUMARESOURCES_RTE_PODS_FINGERPRINT", default_value_t = true,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub pods_fingerprint: bool,

    /// Which pods the fingerprint covers: `with-exclusive-resources` or `all`.
    #[arg(long, env = "NUMARESOURCES_RTE_PODS_FINGERPRINT_METHOD", default_value = "with-exclusive-resources")]
    pub pods_fingerprint_method: Method,

    /// Where to dump the fingerprint status after each scan (env PFP_STATUS_FILE too).
    #[arg(long, env = "NUMARESOURCES_RTE_PODS_FINGERPRINT_STATUS_FILE")]
    pub pods_fingerprint_status_file: Option<PathBuf>,

    /// The shared-pool reference container, `namespace/pod/container` (env REFERENCE_NAMESPACE,
    /// REFERENCE_POD_NAME and REFERENCE_CONTAINER_NAME too).
    #[arg(long, env = "NUMARESOURCES_RTE_REFERENCE_CONTAINER")]
    pub reference_container: Option<ContainerRef>,

    /// Scan, but never write the NodeResourceTopology (own-pod conditions are still set, so a
    /// paused agent's pod becomes ready).
    #[arg(long, env = "NUMARESOURCES_RTE_NO_PUBLISH")]
    pub no_publish: bool,

    /// Make the Node the owner of its NodeResourceTopology (`--add-nrt-owner=false` turns it off).
    #[arg(long, env = "NUMARESOURCES_RTE_ADD_NRT_OWNER", default_value_t = true,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub add_nrt_owner: bool,

    /// At most this many scans per second; a burst of triggers becomes one scan.
    #[arg(long, env = "NUMARESOURCES_RTE_MAX_EVENTS_PER_SECOND", default_value = "1")]
    pub max_events_per_second: NonZeroU32,

    /// Republish an unchanged topology this often, as a Go duration; `0` never does.
    #[arg(long, env = HEARTBEAT_ENV, default_value = DEFAULT_HEARTBEAT)]
    pub heartbeat: Interval,

    /// Set the conditions `PodresourcesFetched` and `NodeTopologyUpdated` on the agent's own Pod
    /// (named by env POD_NAMESPACE/POD_NAME, else REFERENCE_NAMESPACE/REFERENCE_POD_NAME)
    /// (`--podreadiness=false` turns it off).
    #[arg(long, env = "NUMARESOURCES_RTE_PODREADINESS", default_value_t = true,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub podreadiness: bool,

    /// Leave this node's pods in phase Succeeded or Failed out of the accounting and the
    /// fingerprint (watches Pods).
    #[arg(long, env = "NUMARESOURCES_RTE_EXCLUDE_TERMINAL_PODS", default_value_t = false,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub exclude_terminal_pods: bool,

    /// What to publish for memory and hugepages when the kubelet does not manage them per NUMA
    /// node (its memory manager is not Static: it reports no memory per NUMA node):
    /// `node-level` (every zone gets the node's totals and the attribute
    /// `memoryNUMAManaged=false`, so the scheduler's per-zone check refuses nothing the kubelet
    /// would admit) or `omit` (none, as the upstream exporter: the scheduler plugin then refuses
    /// every pod that requests memory).
    #[arg(long, env = "NUMARESOURCES_RTE_UNMANAGED_MEMORY", value_enum, default_value_t = UnmanagedMemory::NodeLevel)]
    pub unmanaged_memory: UnmanagedMemory,

    /// How to serve `/metrics`: `http` (plain HTTP), `httptls` (HTTPS with the certificate in
    /// `--metrics-certs-dir`, reloaded when it changes) or `disabled`.
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_MODE", value_enum, default_value_t = MetricsMode::Http)]
    pub metrics_mode: MetricsMode,

    /// `httptls`: the directory holding the serving certificate and key (a mounted Secret).
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_CERTS_DIR", default_value = METRICS_CERTS_DIR)]
    pub metrics_certs_dir: PathBuf,

    /// `httptls`: the certificate's file name in `--metrics-certs-dir`.
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_CERT_FILE", default_value = "tls.crt")]
    pub metrics_cert_file: String,

    /// `httptls`: the key's file name in `--metrics-certs-dir` (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_KEY_FILE", default_value = "tls.key")]
    pub metrics_key_file: String,

    /// `httptls`: verify the client certificates scrapers present against
    /// `--metrics-client-ca-file` (clients without one are still served).
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_WANT_CLI_AUTH", default_value_t = false,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub metrics_want_cli_auth: bool,

    /// `httptls`: the CA bundle client certificates are verified against.
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_CLIENT_CA_FILE")]
    pub metrics_client_ca_file: Option<PathBuf>,

    /// `httptls`: the oldest TLS version served (`VersionTLS12`, `VersionTLS13`); empty: TLS 1.2.
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_TLS_MIN_VERSION")]
    pub metrics_tls_min_version: Option<String>,

    /// `httptls`: the TLS 1.2 cipher suites allowed, comma-separated IANA names (a cluster TLS
    /// profile's list); empty: every suite implemented.
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_TLS_CIPHER_SUITES")]
    pub metrics_tls_cipher_suites: Option<String>,

    /// The metrics port.
    #[arg(long, env = "METRICS_PORT", default_value_t = METRICS_PORT)]
    pub metrics_port: u16,

    /// The metrics listen address.
    #[arg(long, alias = "metrics-ip", env = "METRICS_ADDRESS", default_value = "0.0.0.0")]
    pub metrics_address: IpAddr,

    /// Scan and publish once, then exit (non-zero when either failed).
    #[arg(long, env = "NUMARESOURCES_RTE_ONESHOT", default_value_t = false,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub oneshot: bool,

    /// klog verbosity (`-v=2`), as upstream arguments carry it: it sets the log filter (see
    /// [`klog_log_level`]) unless the binary's `--log-level` is given.
    #[arg(short = 'v', long = "v", value_name = "LEVEL")]
    pub verbosity: Option<u8>,

    /// Accepted for upstream compatibility and always in effect: every scan re-reads sysfs and
    /// the kubelet's allocatable resources.
    #[arg(long, env = "NUMARESOURCES_RTE_REFRESH_NODE_RESOURCES", default_value_t = false,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub refresh_node_resources: bool,

    /// A kubeconfig for talking to kube-apiserver [default: in-cluster configuration, then
    /// `$KUBECONFIG`/`~/.kube/config`].
    #[arg(long, env = "NUMARESOURCES_RTE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// The direct write path to our API server.
    #[command(flatten)]
    pub direct: crate::direct::DirectArgs,
}

impl Default for Args {
    /// The flags' defaults, as declared above, with no environment variable read.
    fn default() -> Self {
        // Every default above parses (a unit test runs this).
        numaresources_runtime::flags::defaults()
            .unwrap_or_else(|error| unreachable!("the rte flag defaults do not parse: {error}"))
    }
}

/// `--podresources-socket`: the kubelet's socket, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubelet(pub Option<SocketPath>);

impl FromStr for Kubelet {
    type Err = crate::podresources::SocketPathError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            NO_KUBELET => Ok(Self(None)),
            endpoint => endpoint.parse().map(|socket| Self(Some(socket))),
        }
    }
}

/// A period given as a Go duration, `0` meaning off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval(pub Option<Duration>);

/// The environment variable that sets the heartbeat (`--heartbeat`), as `numa doctor` reads it
/// off an exporter's DaemonSet.
pub const HEARTBEAT_ENV: &str = "NUMARESOURCES_RTE_HEARTBEAT";
/// The heartbeat when neither `--heartbeat` nor [`HEARTBEAT_ENV`] sets one.
pub const DEFAULT_HEARTBEAT: &str = "60s";

impl Interval {
    /// Every `period`; a zero period is off.
    pub fn every(period: Duration) -> Self {
        Self(Some(period).filter(|p| !p.is_zero()))
    }
}

impl FromStr for Interval {
    type Err = String;

    /// A Go duration that is zero (off) or positive.
    fn from_str(text: &str) -> Result<Self, String> {
        let duration = GoDuration::parse(text).map_err(|e| e.to_string())?;
        if duration.is_negative() {
            return Err(format!("{text:?} is negative; use 0 to turn it off"));
        }
        Ok(duration.to_std().map_or(Self(None), Self::every))
    }
}

/// `--podresources-poll-interval`: an [`Interval`] of at least [`MIN_ALLOCATION_POLL`], or off.
fn parse_poll_interval(text: &str) -> Result<Interval, String> {
    match text.parse::<Interval>()? {
        Interval(Some(every)) if every < MIN_ALLOCATION_POLL => {
            Err(format!("{every:?} is below the minimum {MIN_ALLOCATION_POLL:?} (or 0 to turn it off)"))
        }
        poll => Ok(poll),
    }
}

/// How `--output` prints the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// YAML, as `kubectl get -o yaml` shows an object.
    Yaml,
    /// Indented JSON.
    Json,
}

/// `--unmanaged-memory`: memory and hugepages on a node whose kubelet does not manage them per
/// NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UnmanagedMemory {
    /// The node's totals in every zone, marked `memoryNUMAManaged=false`.
    NodeLevel,
    /// Nothing (upstream's output).
    Omit,
}

/// `--metrics-mode`: how `/metrics` is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsMode {
    /// Plain HTTP.
    Http,
    /// HTTPS with the certificate in `--metrics-certs-dir`.
    #[value(name = "httptls")]
    HttpTls,
    /// Not served.
    Disabled,
}

/// The `tracing` level matching a klog verbosity: up to 2 (klog's usual) `info`, 3 and 4
/// `debug`, above `trace`.
pub fn klog_log_level(verbosity: u8) -> &'static str {
    match verbosity {
        0..=2 => "info",
        3..=4 => "debug",
        _ => "trace",
    }
}
