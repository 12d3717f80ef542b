//! The agent's command line (`numaresources rte`) and its validated configuration.
//!
//! Flag names follow upstream's resource-topology-exporter where it has them (nro.md §4.2), so
//! the operator's DaemonSet arguments read the same. [`Args::resolve`] gathers the flags, the
//! environment and the two optional files (the kubelet's configuration and the operator's
//! ConfigMap) and reports every problem at once. The gathering is behind [`Environment`] so the
//! rules are tested without touching the process.
//!
//! Topology manager precedence, per field: `--topology-manager-policy/-scope` (or env
//! `TOPOLOGY_MANAGER_POLICY/SCOPE`), then the kubelet configuration file (a field it leaves out
//! is the kubelet's default, because that is what the kubelet runs with), then the operator's
//! ConfigMap (`kubelet.topologyManagerPolicy/Scope`), then the kubelet defaults `none`/`container`.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use numaresources_api::GoDuration;
use numaresources_api::exporter::{
    CONFIG_DIR, CONFIG_FILE, ExporterConfig, METRICS_CERTS_DIR, METRICS_PORT, TopologyManager,
};
use numaresources_api::nrt::well_known::{TOPOLOGY_MANAGER_POLICIES, TOPOLOGY_MANAGER_SCOPES};
use numaresources_api::selector::check_dns1123_subdomain;

use crate::agent::allocations::{DEFAULT_ALLOCATION_POLL, MIN_ALLOCATION_POLL};
use crate::fingerprint::Method;
use crate::podreadiness::OwnPod;
use crate::podresources::middleware::{ContainerRef, PodExclude};
use crate::podresources::{DEFAULT_SOCKET, SocketPath};
use crate::sysfs::DEFAULT_SYSFS_ROOT;

/// Where the operator mounts its ConfigMap's file; a missing file there is not an error.
pub fn default_operator_config() -> PathBuf {
    Path::new(CONFIG_DIR).join(CONFIG_FILE)
}

/// The `numaresources rte` flags.
#[derive(Debug, Clone, clap::Args)]
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
    pub podresources_socket: String,

    /// With `--oneshot`: print the topology (`yaml` or `json`) on stdout.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<OutputFormat>,

    /// How often to rescan, as a Go duration (`10s`, `1m30s`); `0` disables periodic scans.
    #[arg(long, env = "NUMARESOURCES_RTE_SLEEP_INTERVAL", default_value = "10s")]
    pub sleep_interval: String,

    /// A file whose modification triggers a scan (created empty, with its directory, if missing),
    /// for nodes with a hook that touches it; not needed for reactivity (see
    /// --podresources-poll-interval).
    #[arg(long, env = "NUMARESOURCES_RTE_NOTIFY_FILE")]
    pub notify_file: Option<PathBuf>,

    /// How often to ask the kubelet's podresources List for a change of allocations, which
    /// triggers a scan at once (works on any node, no hook needed); a Go duration of at least
    /// 100ms, `0` turns it off.
    #[arg(long, env = "NUMARESOURCES_RTE_PODRESOURCES_POLL_INTERVAL", default_value = "500ms")]
    pub podresources_poll_interval: String,

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
    pub pods_fingerprint_method: String,

    /// Where to dump the fingerprint status after each scan (env PFP_STATUS_FILE too).
    #[arg(long, env = "NUMARESOURCES_RTE_PODS_FINGERPRINT_STATUS_FILE")]
    pub pods_fingerprint_status_file: Option<PathBuf>,

    /// The shared-pool reference container, `namespace/pod/container` (env REFERENCE_NAMESPACE,
    /// REFERENCE_POD_NAME and REFERENCE_CONTAINER_NAME too).
    #[arg(long, env = "NUMARESOURCES_RTE_REFERENCE_CONTAINER")]
    pub reference_container: Option<String>,

    /// Scan, but never write the NodeResourceTopology (own-pod conditions are still set, so a
    /// paused agent's pod becomes ready).
    #[arg(long, env = "NUMARESOURCES_RTE_NO_PUBLISH")]
    pub no_publish: bool,

    /// Make the Node the owner of its NodeResourceTopology (`--add-nrt-owner=false` turns it off).
    #[arg(long, env = "NUMARESOURCES_RTE_ADD_NRT_OWNER", default_value_t = true,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub add_nrt_owner: bool,

    /// At most this many scans per second; a burst of triggers becomes one scan.
    #[arg(long, env = "NUMARESOURCES_RTE_MAX_EVENTS_PER_SECOND", default_value_t = 1)]
    pub max_events_per_second: u32,

    /// Republish an unchanged topology this often, as a Go duration; `0` never does.
    #[arg(long, env = "NUMARESOURCES_RTE_HEARTBEAT", default_value = "60s")]
    pub heartbeat: String,

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

    /// How to serve `/metrics`: `http` (plain HTTP), `httptls` (HTTPS with the certificate in
    /// `--metrics-certs-dir`, reloaded when it changes) or `disabled`.
    #[arg(long, env = "NUMARESOURCES_RTE_METRICS_MODE", default_value = "http")]
    pub metrics_mode: String,

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
    pub metrics_address: String,

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

    /// The direct write path to our API server.
    #[command(flatten)]
    pub direct: crate::direct::DirectArgs,
}

/// How `--output` prints the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// YAML, as `kubectl get -o yaml` shows an object.
    Yaml,
    /// Indented JSON.
    Json,
}

/// The `--podresources-socket` value that means "no kubelet".
pub const NO_KUBELET: &str = "none";

/// Where and how `/metrics` is served.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsEndpoint {
    /// The listen address.
    pub address: SocketAddr,
    /// HTTPS settings; `None`: plain HTTP.
    pub tls: Option<MetricsTls>,
}

/// The HTTPS settings of the metrics endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsTls {
    /// The serving certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Its key (PEM).
    pub key_file: PathBuf,
    /// Client certificates are verified against this bundle when given.
    pub client_ca_file: Option<PathBuf>,
    /// Minimum version and TLS 1.2 cipher suites.
    pub policy: numaresources_certs::TlsPolicy,
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

impl Default for Args {
    /// The defaults the command line has when no flag is given.
    fn default() -> Self {
        Self {
            hostname: None,
            sysfs: PathBuf::from(DEFAULT_SYSFS_ROOT),
            podresources_socket: DEFAULT_SOCKET.to_owned(),
            output: None,
            sleep_interval: "10s".to_owned(),
            notify_file: None,
            podresources_poll_interval: "500ms".to_owned(),
            kubelet_config_file: None,
            topology_manager_policy: None,
            topology_manager_scope: None,
            config: None,
            pods_fingerprint: true,
            pods_fingerprint_method: Method::WithExclusiveResources.as_str().to_owned(),
            pods_fingerprint_status_file: None,
            reference_container: None,
            no_publish: false,
            add_nrt_owner: true,
            max_events_per_second: 1,
            heartbeat: "60s".to_owned(),
            podreadiness: true,
            exclude_terminal_pods: false,
            metrics_mode: "http".to_owned(),
            metrics_certs_dir: PathBuf::from(METRICS_CERTS_DIR),
            metrics_cert_file: "tls.crt".to_owned(),
            metrics_key_file: "tls.key".to_owned(),
            metrics_want_cli_auth: false,
            metrics_client_ca_file: None,
            metrics_tls_min_version: None,
            metrics_tls_cipher_suites: None,
            metrics_port: METRICS_PORT,
            metrics_address: "0.0.0.0".to_owned(),
            oneshot: false,
            verbosity: None,
            refresh_node_resources: false,
            direct: crate::direct::DirectArgs::default(),
        }
    }
}

/// The validated configuration the agent runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The node's name (and the object's).
    pub node_name: String,
    /// The sysfs root.
    pub sysfs: PathBuf,
    /// The podresources socket.
    pub podresources_socket: Option<SocketPath>,
    /// The periodic scan interval; `None` when periodic scans are off.
    pub sleep_interval: Option<Duration>,
    /// The notify file, if event-driven scans are on.
    pub notify_file: Option<PathBuf>,
    /// How often `List` is polled for a change of allocations; `None` when off.
    pub allocation_poll: Option<Duration>,
    /// Topology manager settings to publish.
    pub topology_manager: TopologyManager,
    /// Pods left out of the accounting and the fingerprint.
    pub pod_excludes: Vec<PodExclude>,
    /// Resource names never published.
    pub resource_excludes: Vec<String>,
    /// The fingerprint method; `None` when fingerprinting is off.
    pub fingerprint: Option<Method>,
    /// The fingerprint status dump.
    pub fingerprint_status_file: Option<PathBuf>,
    /// The shared-pool reference container.
    pub reference_container: Option<ContainerRef>,
    /// Whether to write to the API server.
    pub publish: bool,
    /// Whether to set the Node as the owner.
    pub add_nrt_owner: bool,
    /// The scan rate limit.
    pub max_events_per_second: NonZeroU32,
    /// How often to republish an unchanged topology; `None`: never.
    pub heartbeat: Option<Duration>,
    /// Whether to set the own-pod conditions.
    pub pod_readiness: bool,
    /// The agent's own Pod, when the environment names it.
    pub own_pod: Option<OwnPod>,
    /// Whether to leave terminal pods out.
    pub exclude_terminal_pods: bool,
    /// Where and how to serve `/metrics`; `None` when disabled.
    pub metrics: Option<MetricsEndpoint>,
    /// Scan and publish once, then exit.
    pub oneshot: bool,
    /// The klog verbosity given, if any.
    pub verbosity: Option<u8>,
    /// `--oneshot`: print the topology so.
    pub output: Option<OutputFormat>,
    /// Our API server, written to directly (`--nrt-server`); `None`: through kube-apiserver.
    pub nrt_server: Option<crate::direct::DirectServer>,
}

impl Config {
    /// A configuration with the flag defaults for `node_name`, for tests and embedding.
    pub fn for_node(node_name: &str) -> Self {
        Self {
            node_name: node_name.to_owned(),
            sysfs: PathBuf::from(DEFAULT_SYSFS_ROOT),
            // The default is a valid `unix://` address; parsing it cannot fail.
            podresources_socket: Some(DEFAULT_SOCKET.parse().unwrap_or_else(|_| unreachable!("valid default socket"))),
            sleep_interval: Some(Duration::from_secs(10)),
            notify_file: None,
            allocation_poll: Some(DEFAULT_ALLOCATION_POLL),
            topology_manager: TopologyManager::kubelet_defaults(),
            pod_excludes: Vec::new(),
            resource_excludes: Vec::new(),
            fingerprint: Some(Method::WithExclusiveResources),
            fingerprint_status_file: None,
            reference_container: None,
            publish: true,
            add_nrt_owner: true,
            max_events_per_second: NonZeroU32::MIN,
            heartbeat: Some(Duration::from_secs(60)),
            pod_readiness: true,
            own_pod: None,
            exclude_terminal_pods: false,
            metrics: Some(MetricsEndpoint { address: SocketAddr::from(([0, 0, 0, 0], METRICS_PORT)), tls: None }),
            oneshot: false,
            verbosity: None,
            output: None,
            nrt_server: None,
        }
    }
}

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The flag, variable or file it is about (`--sleep-interval`, `--config podExclude[1]`).
    pub source: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.message)
    }
}

/// Every problem found in the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rte configuration: {}", join(.problems))]
pub struct ConfigError {
    /// The problems, in flag order.
    pub problems: Vec<Problem>,
}

fn join(problems: &[Problem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// What [`Args::resolve`] reads besides the flags.
pub trait Environment {
    /// An environment variable, `None` when unset or not UTF-8.
    fn var(&self, name: &str) -> Option<String>;
    /// The machine's host name.
    fn host_name(&self) -> Option<String>;
    /// A file's contents.
    fn read_file(&self, path: &Path) -> io::Result<String>;
}

/// The process's environment and file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn host_name(&self) -> Option<String> {
        // Linux exposes it here; HOSTNAME is what shells export elsewhere.
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
    }

    fn read_file(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
}

impl Args {
    /// The `httptls` settings, or the flag at fault and why.
    fn metrics_tls(&self) -> Result<MetricsTls, (&'static str, String)> {
        let policy = numaresources_certs::TlsPolicy::from_flags(
            self.metrics_tls_min_version.as_deref(),
            self.metrics_tls_cipher_suites.as_deref(),
        )
        .map_err(|error| ("--metrics-tls-min-version/--metrics-tls-cipher-suites", error.to_string()))?;
        let client_ca_file = match (self.metrics_want_cli_auth, &self.metrics_client_ca_file) {
            (false, _) => None,
            (true, Some(file)) => Some(file.clone()),
            (true, None) => {
                return Err(("--metrics-want-cli-auth", "needs --metrics-client-ca-file to verify clients".into()));
            }
        };
        Ok(MetricsTls {
            cert_file: self.metrics_certs_dir.join(&self.metrics_cert_file),
            key_file: self.metrics_certs_dir.join(&self.metrics_key_file),
            client_ca_file,
            policy,
        })
    }
}

impl Args {
    /// Validates the flags against the process's environment and files.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        self.resolve_with(&ProcessEnvironment)
    }

    /// Validates the flags, reading the environment and files through `env`.
    pub fn resolve_with(&self, env: &dyn Environment) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let mut problem = |source: &str, message: String| problems.push(Problem { source: source.to_owned(), message });

        let node_name = self
            .hostname
            .clone()
            .filter(|h| !h.is_empty())
            .or_else(|| env.var("NODE_NAME").filter(|h| !h.is_empty()))
            .or_else(|| env.host_name())
            .unwrap_or_default();
        if node_name.is_empty() {
            problem("--hostname", "no node name: set --hostname or NODE_NAME".into());
        } else if let Err(why) = check_dns1123_subdomain(&node_name) {
            problem("--hostname", format!("{node_name:?} cannot name an object: {why}"));
        }

        if self.sysfs.as_os_str().is_empty() {
            problem("--sysfs", "must not be empty".into());
        }
        let socket = match self.podresources_socket.as_str() {
            NO_KUBELET => Ok(None),
            endpoint => endpoint.parse::<SocketPath>().map(Some).map_err(|e| e.to_string()),
        };
        if self.output.is_some() && !self.oneshot {
            problem("--output", "prints the one topology of --oneshot; add --oneshot".into());
        }
        if let Err(message) = &socket {
            problem("--podresources-socket", message.clone());
        }
        let sleep_interval = parse_interval(&self.sleep_interval).map_err(|m| problem("--sleep-interval", m)).ok();
        let heartbeat = parse_interval(&self.heartbeat).map_err(|m| problem("--heartbeat", m)).ok();
        let allocation_poll = parse_interval(&self.podresources_poll_interval)
            .and_then(|poll| match poll {
                Some(every) if every < MIN_ALLOCATION_POLL => {
                    Err(format!("{every:?} is below the minimum {MIN_ALLOCATION_POLL:?} (or 0 to turn it off)"))
                }
                poll => Ok(poll),
            })
            .map_err(|m| problem("--podresources-poll-interval", m))
            .ok()
            .flatten();

        if let Some(path) = &self.notify_file
            && (path.as_os_str().is_empty() || path.file_name().is_none())
        {
            problem("--notify-file", format!("{} is not a file path", path.display()));
        }

        // The operator's ConfigMap.
        let operator = match &self.config {
            Some(path) => read_yaml::<ExporterConfig>(env, path, true),
            None => read_yaml::<ExporterConfig>(env, &default_operator_config(), false),
        }
        .map_err(|m| problem("--config", m))
        .ok()
        .flatten()
        .unwrap_or_default();

        // The kubelet's configuration file: missing fields are the kubelet's defaults.
        let kubelet = self.kubelet_config_file.as_ref().and_then(|path| match env.read_file(path) {
            Ok(text) => crate::topology::read_kubelet_config(&text)
                .map_err(|e| problem("--kubelet-config-file", format!("{}: {e}", path.display())))
                .ok(),
            Err(e) => {
                problem("--kubelet-config-file", format!("cannot read {}: {e}", path.display()));
                None
            }
        });
        let defaults = TopologyManager::kubelet_defaults();
        let policy = pick(
            &self.topology_manager_policy,
            env.var("TOPOLOGY_MANAGER_POLICY"),
            kubelet.as_ref().map(|k| k.policy.clone()),
            &operator.kubelet.topology_manager_policy,
        )
        .unwrap_or(defaults.policy);
        let scope = pick(
            &self.topology_manager_scope,
            env.var("TOPOLOGY_MANAGER_SCOPE"),
            kubelet.as_ref().map(|k| k.scope.clone()),
            &operator.kubelet.topology_manager_scope,
        )
        .unwrap_or(defaults.scope);
        if !TOPOLOGY_MANAGER_POLICIES.contains(&policy.as_str()) {
            problem(
                "--topology-manager-policy",
                format!("unsupported policy {policy:?}: expected one of {TOPOLOGY_MANAGER_POLICIES:?}"),
            );
        }
        if !TOPOLOGY_MANAGER_SCOPES.contains(&scope.as_str()) {
            problem(
                "--topology-manager-scope",
                format!("unsupported scope {scope:?}: expected one of {TOPOLOGY_MANAGER_SCOPES:?}"),
            );
        }

        let mut pod_excludes = Vec::new();
        for (i, rule) in operator.pod_exclude.iter().enumerate() {
            match PodExclude::new(&rule.namespace_pattern, &rule.name_pattern) {
                Ok(rule) => pod_excludes.push(rule),
                Err(e) => problem(&format!("--config podExclude[{i}]"), e.to_string()),
            }
        }
        let resource_excludes: Vec<String> = ["*", node_name.as_str()]
            .iter()
            .filter_map(|key| operator.resource_exclude.get(*key))
            .flatten()
            .cloned()
            .collect();

        let method = self.pods_fingerprint_method.parse::<Method>().map_err(|e| e.to_string());
        if let Err(message) = &method {
            problem("--pods-fingerprint-method", message.clone());
        }
        let fingerprint_status_file = self
            .pods_fingerprint_status_file
            .clone()
            .or_else(|| env.var("PFP_STATUS_FILE").filter(|f| !f.is_empty()).map(PathBuf::from));
        if let Some(path) = &fingerprint_status_file
            && path.file_name().is_none()
        {
            problem("--pods-fingerprint-status-file", format!("{} is not a file path", path.display()));
        }

        let reference_container = match &self.reference_container {
            Some(text) => {
                text.parse::<ContainerRef>().map_err(|e| problem("--reference-container", e.to_string())).ok()
            }
            None => reference_from_env(env).map_err(|m| problem("REFERENCE_*", m)).ok().flatten(),
        };

        let max_events_per_second = NonZeroU32::new(self.max_events_per_second);
        if max_events_per_second.is_none() {
            problem("--max-events-per-second", "must be at least 1".into());
        }

        let own_pod = own_pod_from_env(env, reference_container.as_ref());
        let metrics_tls = match self.metrics_mode.as_str() {
            "disabled" | "http" => None,
            "httptls" => self.metrics_tls().map_err(|(source, message)| problem(source, message)).ok(),
            other => {
                problem("--metrics-mode", format!("unsupported mode {other:?}: expected http, httptls or disabled"));
                None
            }
        };
        let metrics = match self.metrics_mode.as_str() {
            "http" | "httptls" => match self.metrics_address.parse::<IpAddr>() {
                Ok(ip) => Some(MetricsEndpoint { address: SocketAddr::new(ip, self.metrics_port), tls: metrics_tls }),
                Err(_) => {
                    problem("--metrics-address", format!("{:?} is not an IP address", self.metrics_address));
                    None
                }
            },
            _ => None,
        };

        let nrt_server = self.direct.resolve().map_err(|(source, message)| problem(source, message)).ok().flatten();

        match (socket, sleep_interval, heartbeat, method, max_events_per_second) {
            (
                Ok(podresources_socket),
                Some(sleep_interval),
                Some(heartbeat),
                Ok(method),
                Some(max_events_per_second),
            ) if problems.is_empty() => Ok(Config {
                node_name,
                sysfs: self.sysfs.clone(),
                podresources_socket,
                sleep_interval,
                notify_file: self.notify_file.clone(),
                allocation_poll,
                topology_manager: TopologyManager { policy, scope },
                pod_excludes,
                resource_excludes,
                fingerprint: self.pods_fingerprint.then_some(method),
                fingerprint_status_file,
                reference_container,
                publish: !self.no_publish,
                add_nrt_owner: self.add_nrt_owner,
                max_events_per_second,
                heartbeat,
                pod_readiness: self.podreadiness,
                own_pod,
                exclude_terminal_pods: self.exclude_terminal_pods,
                output: self.output,
                metrics,
                oneshot: self.oneshot,
                verbosity: self.verbosity,
                nrt_server,
            }),
            _ => Err(ConfigError { problems }),
        }
    }
}

/// The first non-empty of: the flag, the upstream env variable, the kubelet file, the ConfigMap.
fn pick(
    flag: &Option<String>,
    env: Option<String>,
    kubelet: Option<String>,
    operator: &Option<String>,
) -> Option<String> {
    [flag.clone(), env, kubelet, operator.clone()].into_iter().flatten().find(|v| !v.is_empty())
}

/// A Go duration that is zero (off) or positive.
fn parse_interval(text: &str) -> Result<Option<Duration>, String> {
    let duration = GoDuration::parse(text).map_err(|e| e.to_string())?;
    if duration.is_negative() {
        return Err(format!("{text:?} is negative; use 0 to turn it off"));
    }
    Ok(duration.to_std().filter(|d| !d.is_zero()))
}

/// Reads a YAML file; `Ok(None)` for a missing file that was not asked for explicitly.
fn read_yaml<T: serde::de::DeserializeOwned>(
    env: &dyn Environment,
    path: &Path,
    required: bool,
) -> Result<Option<T>, String> {
    match env.read_file(path) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => {
            serde_norway::from_str(&text).map(Some).map_err(|e| format!("{}: not valid YAML: {e}", path.display()))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && !required => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// The reference container from the three variables the DaemonSet sets; all or none.
fn reference_from_env(env: &dyn Environment) -> Result<Option<ContainerRef>, String> {
    let names = ["REFERENCE_NAMESPACE", "REFERENCE_POD_NAME", "REFERENCE_CONTAINER_NAME"];
    let values: Vec<Option<String>> = names.iter().map(|n| env.var(n).filter(|v| !v.is_empty())).collect();
    match values.as_slice() {
        [Some(namespace), Some(pod), Some(container)] => {
            Ok(Some(ContainerRef { namespace: namespace.clone(), pod: pod.clone(), container: container.clone() }))
        }
        [None, None, None] => Ok(None),
        _ => {
            let missing: Vec<&str> = names.iter().zip(&values).filter(|(_, v)| v.is_none()).map(|(n, _)| *n).collect();
            Err(format!("set all three of {names:?} or none; missing {missing:?}"))
        }
    }
}

/// The agent's own Pod: POD_NAMESPACE/POD_NAME, else REFERENCE_NAMESPACE/REFERENCE_POD_NAME
/// (upstream's source), else the reference container's pod (it is a sidecar of the agent's pod).
fn own_pod_from_env(env: &dyn Environment, reference: Option<&ContainerRef>) -> Option<OwnPod> {
    let pair = |namespace: &str, name: &str| match (env.var(namespace), env.var(name)) {
        (Some(namespace), Some(name)) if !namespace.is_empty() && !name.is_empty() => Some(OwnPod { namespace, name }),
        _ => None,
    };
    pair("POD_NAMESPACE", "POD_NAME")
        .or_else(|| pair("REFERENCE_NAMESPACE", "REFERENCE_POD_NAME"))
        .or_else(|| reference.map(|r| OwnPod { namespace: r.namespace.clone(), name: r.pod.clone() }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use super::*;

    /// A fake environment: variables, a host name and files.
    #[derive(Default)]
    struct Fake {
        vars: BTreeMap<&'static str, &'static str>,
        host: Option<&'static str>,
        files: BTreeMap<&'static str, &'static str>,
    }

    impl Environment for Fake {
        fn var(&self, name: &str) -> Option<String> {
            self.vars.get(name).map(|v| (*v).to_owned())
        }
        fn host_name(&self) -> Option<String> {
            self.host.map(str::to_owned)
        }
        fn read_file(&self, path: &Path) -> io::Result<String> {
            let path = path.to_str().unwrap();
            self.files.get(path).map(|t| (*t).to_owned()).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
    }

    fn host(name: &'static str) -> Fake {
        Fake { host: Some(name), ..Fake::default() }
    }

    fn sources(error: &ConfigError) -> Vec<&str> {
        error.problems.iter().map(|p| p.source.as_str()).collect()
    }

    #[test]
    fn defaults_give_the_upstream_behaviour_with_our_fixes() {
        let config = Args::default().resolve_with(&host("worker-0")).unwrap();
        assert_eq!(config.node_name, "worker-0");
        assert_eq!(config.sysfs, Path::new("/sys"));
        assert_eq!(config.podresources_socket.unwrap().path(), Path::new("/podresources/kubelet.sock"));
        assert_eq!(config.sleep_interval, Some(Duration::from_secs(10)));
        assert_eq!(config.heartbeat, Some(Duration::from_secs(60)));
        assert_eq!(config.topology_manager, TopologyManager::kubelet_defaults());
        assert_eq!(config.fingerprint, Some(Method::WithExclusiveResources));
        assert!(config.publish && config.add_nrt_owner);
        assert_eq!(config.max_events_per_second.get(), 1);
        assert!(config.reference_container.is_none() && config.pod_excludes.is_empty());
    }

    #[test]
    fn the_node_name_comes_from_the_flag_then_node_name_then_the_host_name() {
        type Case = (Option<&'static str>, Option<&'static str>, Option<&'static str>, &'static str);
        let cases: [Case; 4] = [
            (Some("flag-node"), Some("env-node"), Some("host"), "flag-node"),
            (None, Some("env-node"), Some("host"), "env-node"),
            (Some(""), Some(""), Some("host"), "host"),
            (None, None, Some("host.example.com"), "host.example.com"),
        ];
        for (flag, env, hostname, want) in cases {
            let mut fake = Fake { host: hostname, ..Fake::default() };
            if let Some(env) = env {
                fake.vars.insert("NODE_NAME", env);
            }
            let args = Args { hostname: flag.map(str::to_owned), ..Args::default() };
            assert_eq!(args.resolve_with(&fake).unwrap().node_name, want);
        }
    }

    #[test]
    fn every_invalid_flag_is_reported_at_once() {
        let args = Args {
            hostname: Some("Worker_0".into()),
            podresources_socket: "tcp://kubelet:10250".into(),
            sleep_interval: "10 seconds".into(),
            heartbeat: "-1s".into(),
            pods_fingerprint_method: "some".into(),
            reference_container: Some("ns/pod".into()),
            max_events_per_second: 0,
            topology_manager_policy: Some("numa-please".into()),
            topology_manager_scope: Some("node".into()),
            sysfs: PathBuf::new(),
            ..Args::default()
        };
        let error = args.resolve_with(&Fake::default()).unwrap_err();
        assert_eq!(
            sources(&error),
            [
                "--hostname",
                "--sysfs",
                "--podresources-socket",
                "--sleep-interval",
                "--heartbeat",
                "--topology-manager-policy",
                "--topology-manager-scope",
                "--pods-fingerprint-method",
                "--reference-container",
                "--max-events-per-second",
            ]
        );
        let text = error.to_string();
        assert!(
            text.starts_with("invalid rte configuration: --hostname: \"Worker_0\" cannot name an object"),
            "{text}"
        );
        assert!(text.contains("unsupported policy \"numa-please\""), "{text}");
    }

    #[test]
    fn a_missing_node_name_is_an_error() {
        let error = Args::default().resolve_with(&Fake::default()).unwrap_err();
        assert_eq!(sources(&error), ["--hostname"]);
    }

    #[test]
    fn zero_turns_periodic_scans_and_heartbeats_off() {
        let args = Args { sleep_interval: "0".into(), heartbeat: "0s".into(), ..Args::default() };
        let config = args.resolve_with(&host("n")).unwrap();
        assert_eq!((config.sleep_interval, config.heartbeat), (None, None));
        let args = Args { podresources_poll_interval: "0".into(), ..Args::default() };
        assert_eq!(args.resolve_with(&host("n")).unwrap().allocation_poll, None);
        let args = Args { podresources_poll_interval: "50ms".into(), ..Args::default() };
        assert_eq!(sources(&args.resolve_with(&host("n")).unwrap_err()), ["--podresources-poll-interval"]);
        assert_eq!(Args::default().resolve_with(&host("n")).unwrap().allocation_poll, Some(Duration::from_millis(500)));
        let args = Args { sleep_interval: "1m30s".into(), ..Args::default() };
        assert_eq!(args.resolve_with(&host("n")).unwrap().sleep_interval, Some(Duration::from_secs(90)));
    }

    #[test]
    fn topology_manager_settings_follow_flag_then_kubelet_file_then_configmap_then_defaults() {
        let kubelet = "kind: KubeletConfiguration\ntopologyManagerPolicy: restricted\n";
        let configmap = "kubelet:\n  topologyManagerPolicy: best-effort\n  topologyManagerScope: pod\n";
        let files = BTreeMap::from([("/kubelet.yaml", kubelet), ("/cm.yaml", configmap)]);
        type Case = (Option<&'static str>, Option<&'static str>, bool, bool, (&'static str, &'static str));
        let cases: [Case; 6] = [
            (None, None, false, false, ("none", "container")),
            (None, None, false, true, ("best-effort", "pod")),
            // The kubelet file is complete: a field it omits is the kubelet's default.
            (None, None, true, true, ("restricted", "container")),
            (Some("single-numa-node"), None, true, true, ("single-numa-node", "container")),
            (None, Some("pod"), true, false, ("restricted", "pod")),
            (Some("single-numa-node"), Some("pod"), false, false, ("single-numa-node", "pod")),
        ];
        for (policy, scope, with_kubelet, with_configmap, want) in cases {
            let fake = Fake { host: Some("n"), files: files.clone(), ..Fake::default() };
            let args = Args {
                topology_manager_policy: policy.map(str::to_owned),
                topology_manager_scope: scope.map(str::to_owned),
                kubelet_config_file: with_kubelet.then(|| PathBuf::from("/kubelet.yaml")),
                config: with_configmap.then(|| PathBuf::from("/cm.yaml")),
                ..Args::default()
            };
            let tm = args.resolve_with(&fake).unwrap().topology_manager;
            assert_eq!(
                (tm.policy.as_str(), tm.scope.as_str()),
                want,
                "{policy:?} {scope:?} {with_kubelet} {with_configmap}"
            );
        }
    }

    #[test]
    fn upstream_topology_manager_variables_count_as_flags() {
        let mut fake = host("n");
        fake.vars.insert("TOPOLOGY_MANAGER_POLICY", "single-numa-node");
        fake.vars.insert("TOPOLOGY_MANAGER_SCOPE", "pod");
        let tm = Args::default().resolve_with(&fake).unwrap().topology_manager;
        assert_eq!((tm.policy.as_str(), tm.scope.as_str()), ("single-numa-node", "pod"));
    }

    #[test]
    fn the_operator_configmap_gives_pod_and_resource_excludes() {
        let configmap = "podExclude:\n- namespacePattern: kube-*\n  namePattern: '*'\n- namePattern: canary-*\nresourceExclude:\n  '*': [example.com/gpu]\n  n: [hugepages-2Mi]\n  other: [memory]\nunknownKey: 1\n";
        let fake = Fake {
            host: Some("n"),
            files: BTreeMap::from([("/etc/resource-topology-exporter/config.yaml", configmap)]),
            ..Fake::default()
        };
        let config = Args::default().resolve_with(&fake).unwrap();
        assert_eq!(config.pod_excludes.len(), 2);
        assert!(
            config.pod_excludes[0].matches("kube-system", "x") && config.pod_excludes[1].matches("any", "canary-1")
        );
        assert_eq!(config.resource_excludes, ["example.com/gpu", "hugepages-2Mi"]);
    }

    #[test]
    fn configmap_and_kubelet_file_problems_name_the_file() {
        let files = BTreeMap::from([
            ("/cm.yaml", "podExclude:\n- namespacePattern: 'kube-['\n"),
            ("/bad.yaml", "{ nope"),
            ("/kubelet.yaml", "topologyManagerScope: node\n"),
        ]);
        let cases: [(Option<&str>, Option<&str>, &[&str]); 5] = [
            (Some("/cm.yaml"), None, &["--config podExclude[0]"]),
            (Some("/bad.yaml"), None, &["--config"]),
            (Some("/missing.yaml"), None, &["--config"]),
            (None, Some("/kubelet.yaml"), &["--kubelet-config-file"]),
            (None, Some("/missing.yaml"), &["--kubelet-config-file"]),
        ];
        for (configmap, kubelet, want) in cases {
            let fake = Fake { host: Some("n"), files: files.clone(), ..Fake::default() };
            let args = Args {
                config: configmap.map(PathBuf::from),
                kubelet_config_file: kubelet.map(PathBuf::from),
                ..Args::default()
            };
            let error = args.resolve_with(&fake).unwrap_err();
            assert_eq!(sources(&error), want, "{error}");
        }
    }

    #[test]
    fn the_reference_container_comes_from_the_flag_or_all_three_variables() {
        let mut fake = host("n");
        fake.vars.extend([
            ("REFERENCE_NAMESPACE", "rte"),
            ("REFERENCE_POD_NAME", "rte-x"),
            ("REFERENCE_CONTAINER_NAME", "shared"),
        ]);
        let config = Args::default().resolve_with(&fake).unwrap();
        assert_eq!(config.reference_container.unwrap().to_string(), "rte/rte-x/shared");
        let args = Args { reference_container: Some("a/b/c".into()), ..Args::default() };
        assert_eq!(args.resolve_with(&fake).unwrap().reference_container.unwrap().to_string(), "a/b/c");
        fake.vars.remove("REFERENCE_POD_NAME");
        let error = Args::default().resolve_with(&fake).unwrap_err();
        assert!(error.to_string().contains("missing [\"REFERENCE_POD_NAME\"]"), "{error}");
    }

    #[test]
    fn fingerprinting_can_be_turned_off_and_its_status_file_set_by_pfp_status_file() {
        let mut fake = host("n");
        fake.vars.insert("PFP_STATUS_FILE", "/run/pfpstatus/dump.json");
        let args = Args { pods_fingerprint: false, pods_fingerprint_method: "all".into(), ..Args::default() };
        let config = args.resolve_with(&fake).unwrap();
        assert_eq!(config.fingerprint, None);
        assert_eq!(config.fingerprint_status_file.unwrap(), Path::new("/run/pfpstatus/dump.json"));
        let args =
            Args { pods_fingerprint_method: "all".into(), no_publish: true, add_nrt_owner: false, ..Args::default() };
        let config = args.resolve_with(&fake).unwrap();
        assert_eq!(config.fingerprint, Some(Method::All));
        assert!(!config.publish && !config.add_nrt_owner);
    }

    #[test]
    fn the_operator_daemonset_arguments_parse() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::try_parse_from([
            "rte",
            "--sleep-interval=10s",
            "--sysfs=/host-sys",
            "--podresources-socket=unix:///host-podresources/kubelet.sock",
            "--notify-file=/run/rte/notify",
            "--pods-fingerprint",
            "--pods-fingerprint-method=all",
            "--add-nrt-owner=false",
            "--no-publish",
        ])
        .unwrap();
        let config = cli.args.resolve_with(&host("worker-1")).unwrap();
        assert_eq!(config.sysfs, Path::new("/host-sys"));
        assert_eq!(config.notify_file.unwrap(), Path::new("/run/rte/notify"));
        assert_eq!(config.fingerprint, Some(Method::All));
        assert!(!config.add_nrt_owner && !config.publish);
        let cli = Cli::try_parse_from(["rte", "--pods-fingerprint=false"]).unwrap();
        assert!(!cli.args.pods_fingerprint);
    }

    #[test]
    fn the_operator_render_and_node_group_arguments_parse_too() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::try_parse_from([
            "rte",
            "-v=2",
            "--refresh-node-resources",
            "--exclude-terminal-pods=true",
            "--podreadiness=false",
            "--oneshot",
            "--metrics-ip=127.0.0.1",
            "--metrics-port=9100",
        ])
        .unwrap();
        assert_eq!(cli.args.verbosity, Some(2));
        let config = cli.args.resolve_with(&host("worker-1")).unwrap();
        assert!(config.exclude_terminal_pods && config.oneshot && !config.pod_readiness);
        assert_eq!(config.metrics.unwrap().address, "127.0.0.1:9100".parse().unwrap());
        for args in [&["rte", "--v=4"][..], &["rte", "-v", "4"]] {
            assert_eq!(Cli::try_parse_from(args).unwrap().args.verbosity, Some(4), "{args:?}");
        }
        assert_eq!([0, 2, 3, 4, 5, 10].map(klog_log_level), ["info", "info", "debug", "debug", "trace", "trace"]);
    }

    #[test]
    fn metrics_are_served_over_http_by_default_and_the_mode_is_checked() {
        let config = Args::default().resolve_with(&host("n")).unwrap();
        let endpoint = config.metrics.unwrap();
        assert_eq!((endpoint.address, endpoint.tls), ("0.0.0.0:2112".parse().unwrap(), None));
        let disabled = Args { metrics_mode: "disabled".into(), ..Args::default() };
        assert_eq!(disabled.resolve_with(&host("n")).unwrap().metrics, None);
        // (mode, address, the problem's source)
        let cases = [("https", "0.0.0.0", "--metrics-mode"), ("http", "localhost", "--metrics-address")];
        for (mode, address, source) in cases {
            let args = Args { metrics_mode: mode.into(), metrics_address: address.into(), ..Args::default() };
            let error = args.resolve_with(&host("n")).unwrap_err();
            assert_eq!(sources(&error), [source], "{mode} {address}");
        }
    }

    #[test]
    fn httptls_takes_the_operator_arguments_and_reports_bad_tls_flags() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        // What the operator renders per node group from an Intermediate cluster TLS profile.
        let cli = Cli::try_parse_from([
            "rte",
            "--metrics-mode=httptls",
            "--metrics-tls-min-version=VersionTLS12",
            "--metrics-tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ])
        .unwrap();
        let tls = cli.args.resolve_with(&host("n")).unwrap().metrics.unwrap().tls.unwrap();
        assert_eq!(tls.cert_file, Path::new("/etc/secrets/rte/tls.crt"));
        assert_eq!(tls.key_file, Path::new("/etc/secrets/rte/tls.key"));
        assert_eq!(tls.client_ca_file, None);
        // A TLS 1.3 profile renders an empty cipher list.
        let cli = Cli::try_parse_from([
            "rte",
            "--metrics-mode=httptls",
            "--metrics-certs-dir=/certs",
            "--metrics-cert-file=serving.pem",
            "--metrics-tls-min-version=VersionTLS13",
            "--metrics-tls-cipher-suites=",
        ])
        .unwrap();
        let tls = cli.args.resolve_with(&host("n")).unwrap().metrics.unwrap().tls.unwrap();
        assert_eq!(tls.cert_file, Path::new("/certs/serving.pem"));
        assert_eq!(tls.policy.min_version(), numaresources_certs::TlsVersion::Tls13);
        // (flags, the problem's source)
        let cases: [(&[&str], &str); 3] = [
            (&["--metrics-tls-min-version=VersionTLS10"], "--metrics-tls-min-version/--metrics-tls-cipher-suites"),
            (&["--metrics-tls-cipher-suites=TLS_NOPE"], "--metrics-tls-min-version/--metrics-tls-cipher-suites"),
            (&["--metrics-want-cli-auth"], "--metrics-want-cli-auth"),
        ];
        for (flags, source) in cases {
            let argv = ["rte", "--metrics-mode=httptls"].into_iter().chain(flags.iter().copied());
            let error = Cli::try_parse_from(argv).unwrap().args.resolve_with(&host("n")).unwrap_err();
            assert_eq!(sources(&error), [source], "{flags:?}");
        }
    }

    #[test]
    fn the_own_pod_comes_from_pod_then_reference_variables_then_the_reference_container() {
        type Case = (&'static [(&'static str, &'static str)], Option<&'static str>, Option<&'static str>);
        let cases: [Case; 5] = [
            (
                &[
                    ("POD_NAMESPACE", "rte"),
                    ("POD_NAME", "rte-abc"),
                    ("REFERENCE_NAMESPACE", "x"),
                    ("REFERENCE_POD_NAME", "y"),
                    ("REFERENCE_CONTAINER_NAME", "z"),
                ],
                None,
                Some("rte/rte-abc"),
            ),
            (
                &[("REFERENCE_NAMESPACE", "ns"), ("REFERENCE_POD_NAME", "rte-1"), ("REFERENCE_CONTAINER_NAME", "c")],
                None,
                Some("ns/rte-1"),
            ),
            (&[("POD_NAME", "half")], Some("a/b/c"), Some("a/b")),
            (&[("POD_NAME", "only-name")], None, None),
            (&[], None, None),
        ];
        for (vars, reference, want) in cases {
            let mut fake = host("n");
            fake.vars.extend(vars.iter().copied());
            let args = Args { reference_container: reference.map(str::to_owned), ..Args::default() };
            let own = args.resolve_with(&fake).unwrap().own_pod.map(|p| p.to_string());
            assert_eq!(own.as_deref(), want, "{vars:?}");
        }
    }
}
