//! The command line: global options and one subcommand per entry point.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::apiserver::ApiserverArgs;
use crate::bundle::BundleArgs;
use crate::controllers::ControllersArgs;
use crate::crds::CrdsArgs;
use crate::extender::ExtenderArgs;
use crate::local::LocalArgs;
use crate::numa::NumaArgs;
use crate::webhook::WebhookArgs;

/// The version line: crate version and the git commit the binary was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("NUMARESOURCES_GIT_COMMIT"), ")");

/// NUMA-aware scheduling for Kubernetes: the NodeResourceTopology API server, the node agent,
/// the admission webhook and the controllers, in one binary.
#[derive(Debug, Parser)]
#[command(name = "numaresources", version = VERSION, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    command: Command,
}

/// Logging options shared by every subcommand.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log filter, in `tracing` EnvFilter syntax (e.g. `info`, `numaresources=debug`) [default:
    /// info, or what `rte -v=N` means in klog terms].
    #[arg(long, global = true, env = "NUMARESOURCES_LOG")]
    pub log_level: Option<String>,
    /// Log line format.
    #[arg(long, global = true, env = "NUMARESOURCES_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the NodeResourceTopology API behind an APIService, with authentication and
    /// authorization delegated to kube-apiserver.
    Apiserver(Box<ApiserverArgs>),
    /// Print, write or check the CustomResourceDefinitions of the operator API.
    Crds(CrdsArgs),
    /// Write or check the OLM bundle (ClusterServiceVersion, CRDs, metadata).
    Bundle(BundleArgs),
    /// Run the resource topology exporter for this node (the per-node DaemonSet agent).
    Rte(Box<numaresources_rte::config::Args>),
    /// Serve the NodeResourceTopology API for this machine on loopback, with an embedded
    /// exporter: `kubectl get noderesourcetopologies` with no cluster.
    Local(LocalArgs),
    /// Serve the admission webhooks: defaults and validation of NUMAResourcesOperator and
    /// NUMAResourcesScheduler, and routing of pods to the NUMA-aware scheduler.
    Webhook(Box<WebhookArgs>),
    /// Serve kube-scheduler's extender (filter, prioritize, bind): NUMA placement by the
    /// kubelet's own Topology Manager rules, for every policy, never stale.
    SchedulerExtender(Box<ExtenderArgs>),
    /// Run the operator, scheduler and kubeletconfig controllers (leader-elected).
    Controllers(Box<ControllersArgs>),
    /// Where NUMA headroom is left and whether a pod would fit (also `kubectl numa`, with the
    /// binary on the PATH as `kubectl-numa`).
    Numa(NumaArgs),
    /// Sleep until stopped (the exporter pod's shared-pool reference container).
    #[command(hide = true)]
    Pause,
}

impl Cli {
    /// The log filter: `--log-level` when given, else the klog verbosity an upstream `rte`
    /// command line carries (`-v=4`), else `info`.
    pub fn log_filter(&self) -> String {
        if let Some(level) = &self.log.log_level {
            return level.clone();
        }
        match &self.command {
            Command::Rte(args) => args.verbosity.map_or("info", numaresources_rte::config::klog_log_level).to_owned(),
            // A command-line tool: its output is the answer, logs only when something is wrong.
            Command::Numa(_) => "warn".to_owned(),
            _ => "info".to_owned(),
        }
    }

    /// Runs the chosen subcommand.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            Command::Apiserver(args) => crate::apiserver::run(*args).map(|()| ExitCode::SUCCESS),
            Command::Crds(args) => crate::crds::run(&args),
            Command::Bundle(args) => crate::bundle::run(&args),
            Command::Rte(args) => crate::rte::run(*args).map(|()| ExitCode::SUCCESS),
            Command::Local(args) => crate::local::run(args).map(|()| ExitCode::SUCCESS),
            Command::Webhook(args) => crate::webhook::run(*args).map(|()| ExitCode::SUCCESS),
            Command::SchedulerExtender(args) => crate::extender::run(*args).map(|()| ExitCode::SUCCESS),
            Command::Controllers(args) => crate::controllers::run(*args).map(|()| ExitCode::SUCCESS),
            Command::Numa(args) => crate::numa::run(args),
            Command::Pause => crate::controllers::pause().map(|()| ExitCode::SUCCESS),
        }
    }
}
