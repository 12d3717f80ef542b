//! `numaresources rte`: the resource topology exporter, one per node.

use anyhow::Context;

/// Runs the agent until SIGTERM or Ctrl-C.
pub fn run(args: numaresources_rte::config::Args) -> anyhow::Result<()> {
    // A node agent needs little: two workers keep gRPC, the API client and the scans apart.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(numaresources_rte::agent::run(args, crate::shutdown::signal())).context("the exporter stopped")
}
