//! `numaresources rte`: the resource topology exporter, one per node.

use anyhow::Context;
use numaresources_rte::agent::BLOCKING_TASKS_GRACE;

/// Runs the agent until SIGTERM or Ctrl-C.
pub fn run(args: numaresources_rte::config::Args) -> anyhow::Result<()> {
    // A node agent needs little: two workers keep gRPC, the API client and the scans apart.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = runtime.block_on(numaresources_rte::agent::run(args, crate::shutdown::signal()));
    // Dropping the runtime would wait for every blocking task, a sysfs read stalled in the
    // kernel included; the process must exit within its grace period whatever that read does.
    runtime.shutdown_timeout(BLOCKING_TASKS_GRACE);
    result.context("the exporter stopped")
}
