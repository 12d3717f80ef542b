//! `numaresources rte`: the resource topology exporter, one per node.
//!
//! The component recipe: flags → checked configuration → the exporter with its kube client →
//! its admin router (`/metrics`, probes) on the metrics endpoint while it runs, until shutdown.

use anyhow::Context;
use numaresources_rte::agent::BLOCKING_TASKS_GRACE;
use numaresources_rte::config::Args;
use numaresources_rte::exporter::Exporter;
use numaresources_rte::metrics_endpoint::MetricsServer;
use numaresources_runtime::admin;
use numaresources_runtime::kube_client;
use numaresources_runtime::shutdown::Shutdown;

/// Runs the exporter until SIGTERM or Ctrl-C (or once, with `--oneshot`).
pub fn run(args: Args) -> anyhow::Result<()> {
    let config = args.resolve().context("the exporter stopped")?;
    // A node agent needs little: two workers keep gRPC, the API client and the scans apart.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = runtime.block_on(async {
        let shutdown = Shutdown::on_signals();
        let client = match config.needs_kube_client() {
            true => Some(kube_client(args.kubeconfig.as_deref()).await?),
            false => None,
        };
        let exporter = Exporter::new(config, client);
        // A one-off run ends before anything could scrape it: it opens no listener at all.
        let admin = match exporter.config().metrics.as_ref().filter(|_| !exporter.config().flags.oneshot) {
            Some(endpoint) => {
                let app = admin::component_router(exporter.readiness(), |registry| exporter.register_metrics(registry));
                let serving = MetricsServer::bind(endpoint).await?.serve(app, shutdown.signaled());
                Some(tokio::spawn(async move {
                    if let Err(error) = serving.await {
                        tracing::error!(%error, "the metrics server stopped");
                    }
                }))
            }
            None => None,
        };
        let result = exporter.run(shutdown.signaled()).await;
        if let Some(admin) = admin {
            admin.abort();
        }
        anyhow::Ok(result?)
    });
    // Dropping the runtime would wait for every blocking task, a sysfs read stalled in the
    // kernel included; the process must exit within its grace period whatever that read does.
    runtime.shutdown_timeout(BLOCKING_TASKS_GRACE);
    result.context("the exporter stopped")
}
