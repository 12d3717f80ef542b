//! `numaresources numa …`, also the kubectl plugin `kubectl numa …` (the binary installed or
//! symlinked as `kubectl-numa`): where NUMA headroom is left (`top`) and whether a pod would fit
//! (`fit`), read with nothing more than get/list/watch on NRTs, Nodes and Pods.
//!
//! ```text
//!   fleet   reading NRTs (with their report age), Nodes and Pods from the cluster
//!   top     one block per node, one row per NUMA zone; --watch redraws on watch events
//!   fit     the scheduler plugin's verdict per node (rules in numaresources_api::fit)
//!   capacity how many more pods of one shape fit, each on one NUMA zone
//!   doctor  the chain from the exporters to the scheduler checked in order
//!   style   bars, colour (terminals only, never with NO_COLOR), quantities for people
//! ```

mod assumed;
mod capacity;
mod doctor;
mod fit;
mod fleet;
mod style;
mod top;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

/// The file name under which kubectl finds the plugin (`kubectl numa` runs `kubectl-numa`).
pub const PLUGIN_NAME: &str = "kubectl-numa";

/// The arguments to parse: `kubectl-numa top …` reads as `numaresources numa top …`.
pub fn plugin_args(args: Vec<OsString>) -> Vec<OsString> {
    let invoked_as_plugin =
        args.first().and_then(|argv0| Path::new(argv0).file_name()).is_some_and(|name| name == PLUGIN_NAME);
    if !invoked_as_plugin {
        return args;
    }
    let mut rewritten = vec![OsString::from("numaresources"), OsString::from("numa")];
    rewritten.extend(args.into_iter().skip(1));
    rewritten
}

/// `numa`: the kubectl plugin's commands.
#[derive(Debug, Args)]
pub struct NumaArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: NumaCommand,
}

/// How to reach the cluster, as kubectl spells it.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Path to the kubeconfig file [default: $KUBECONFIG, else ~/.kube/config, else in-cluster].
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: the current context].
    #[arg(long, global = true)]
    context: Option<String>,
}

#[derive(Debug, Subcommand)]
enum NumaCommand {
    /// Per node and NUMA zone: available/allocatable cpu, memory, hugepages and devices, the
    /// topology manager policy and how old each report is.
    Top(top::TopArgs),
    /// Would this pod fit, and where: the NUMA-aware scheduler's verdict for every node.
    Fit(fit::FitArgs),
    /// How many more Guaranteed pods of one shape can be placed now, each on one NUMA zone, per
    /// node and zone and in total.
    Capacity(capacity::CapacityArgs),
    /// Checks the chain from the exporters to the scheduler, one line per check, each problem
    /// with its fix; exit code 1 when anything failed.
    Doctor(doctor::DoctorArgs),
}

/// Runs a `numa` command.
pub fn run(args: NumaArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let client = client(&args.cluster).await?;
        match args.command {
            NumaCommand::Top(top) => top::run(&client, top).await,
            NumaCommand::Fit(fit) => fit::run(&client, fit).await,
            NumaCommand::Capacity(capacity) => capacity::run(&client, capacity).await,
            NumaCommand::Doctor(doctor) => doctor::run(&client, doctor).await,
        }
    })
}

/// Prints `answer` on standard output: as JSON with `-o json`, else as `text` renders it.
fn print_answer<T: serde::Serialize>(
    output: Option<fit::Output>,
    answer: &T,
    text: impl FnOnce(&T, style::Paint) -> String,
) -> anyhow::Result<()> {
    use std::io::Write;
    let printed = match output {
        Some(fit::Output::Json) => serde_json::to_string_pretty(answer)? + "\n",
        None => text(answer, style::Paint::new(style::colour_wanted())),
    };
    let mut stdout = std::io::stdout();
    stdout.write_all(printed.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// A client for `--kubeconfig`/`--context`, else kubectl's usual places.
async fn client(cluster: &ClusterArgs) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions { context: cluster.context.clone(), ..Default::default() };
    let config = match &cluster.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None if cluster.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await.context("finding a cluster (kubeconfig or in-cluster)")?,
    };
    Ok(kube::Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_name_reads_as_the_numa_subcommand() {
        let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            plugin_args(args(&["/tmp/bin/kubectl-numa", "top", "-l", "a=b"])),
            args(&["numaresources", "numa", "top", "-l", "a=b"])
        );
        assert_eq!(plugin_args(args(&["numaresources", "numa", "top"])), args(&["numaresources", "numa", "top"]));
        assert_eq!(plugin_args(args(&["kubectl-numa-other"])), args(&["kubectl-numa-other"]));
    }
}
