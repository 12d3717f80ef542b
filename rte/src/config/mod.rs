//! The agent's command line (`numaresources rte`) and its validated configuration.
//!
//! [`Args`] are the typed flags (clap parses each value and holds each default).
//! [`Args::resolve`] adds the environment and the two optional files (the kubelet's
//! configuration and the operator's ConfigMap, [`numaresources_api::exporter::ExporterConfig`])
//! and reports every problem at once. The gathering is behind [`Environment`] so the rules are
//! tested without touching the process.
//!
//! Topology manager precedence, per field: `--topology-manager-policy/-scope` (or env
//! `TOPOLOGY_MANAGER_POLICY/SCOPE`), then the kubelet configuration file (a field it leaves out
//! is the kubelet's default, because that is what the kubelet runs with), then the operator's
//! ConfigMap (`kubelet.topologyManagerPolicy/Scope`), then the kubelet defaults `none`/`container`.

mod args;
mod environment;
mod resolve;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use numaresources_api::exporter::TopologyManager;

pub use args::{
    Args, DEFAULT_HEARTBEAT, HEARTBEAT_ENV, Interval, Kubelet, MIN_ALLOCATION_POLL, MetricsMode, NO_KUBELET,
    OutputFormat, UnmanagedMemory, klog_log_level,
};
pub use environment::{Environment, ProcessEnvironment, default_operator_config};

use crate::fingerprint::Method;
use crate::podreadiness::OwnPod;
use crate::podresources::middleware::{ContainerRef, PodExclude};

/// The validated configuration the agent runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The node's name (and the object's).
    pub node_name: String,
    /// The sysfs root.
    pub sysfs: PathBuf,
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
    /// The scan rate limit.
    pub max_events_per_second: NonZeroU32,
    /// How often to republish an unchanged topology; `None`: never.
    pub heartbeat: Option<Duration>,
    /// The agent's own Pod, when the environment names it.
    pub own_pod: Option<OwnPod>,
    /// Where and how to serve `/metrics`; `None` when disabled.
    pub metrics: Option<MetricsEndpoint>,
    /// Our API server, written to directly (`--nrt-server`); `None`: through kube-apiserver.
    pub nrt_server: Option<crate::direct::DirectServer>,
    /// The flags it was resolved from: resolved again when a file they name changes, and read
    /// as given for what only the exporter's wiring uses (the socket, publishing, `--oneshot`…).
    pub flags: Args,
}

impl Config {
    /// Whether the agent talks to kube-apiserver: to publish, to set its own pod's conditions or
    /// to watch terminal pods.
    pub fn needs_kube_client(&self) -> bool {
        let flags = &self.flags;
        !flags.no_publish || (flags.podreadiness && self.own_pod.is_some()) || flags.exclude_terminal_pods
    }

    /// The flag defaults for `node_name`, with no environment and no file read: for tests and
    /// embedding.
    ///
    /// # Panics
    /// When `node_name` cannot name an object (not a DNS-1123 subdomain).
    pub fn for_node(node_name: &str) -> Self {
        let args = Args { hostname: Some(node_name.to_owned()), ..Args::default() };
        args.resolve_with(&environment::Nothing)
            .unwrap_or_else(|error| panic!("Config::for_node({node_name:?}): {error}"))
    }
}

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
    pub policy: numaresources_runtime::tls::TlsPolicy,
}
