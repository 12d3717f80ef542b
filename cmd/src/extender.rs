//! `numaresources scheduler-extender`: the NUMA placement engine beside the stock kube-scheduler
//! (its `extenders` stanza calls `filter`, `prioritize` and `bind` on loopback).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use numaresources_api::fit::kubelet::{DEFAULT_MAX_ALLOWABLE_NUMA_NODES, PolicyOptions};
use numaresources_api::operator::ScoringStrategyType;
use numaresources_extender::engine::Engine;
use numaresources_extender::server::{Shared, health_router, router};
use numaresources_runtime::kube_client;
use numaresources_runtime::shutdown::Shutdown;

/// Options of `numaresources scheduler-extender`.
#[derive(Debug, clap::Args)]
pub struct ExtenderArgs {
    /// Address to listen on: loopback, beside kube-scheduler in its pod.
    #[arg(long, env = "NUMARESOURCES_EXTENDER_BIND_ADDRESS", default_value = "127.0.0.1")]
    bind_address: IpAddr,
    /// Port to listen on (plain HTTP; 0 picks a free one and logs it).
    #[arg(long, env = "NUMARESOURCES_EXTENDER_PORT", default_value_t = numaresources_api::extender::DEFAULT_PORT)]
    port: u16,
    /// Address of `/healthz` and `/readyz` (the kubelet probes them over the pod's IP).
    #[arg(long, env = "NUMARESOURCES_EXTENDER_HEALTH_BIND_ADDRESS", default_value = "0.0.0.0")]
    health_bind_address: IpAddr,
    /// Port of `/healthz` and `/readyz` (0 picks a free one and logs it).
    #[arg(long, env = "NUMARESOURCES_EXTENDER_HEALTH_PORT", default_value_t = numaresources_api::extender::HEALTH_PORT)]
    health_port: u16,
    /// A kubeconfig for talking to kube-apiserver (default: in-cluster configuration, then
    /// `$KUBECONFIG`/`~/.kube/config`).
    #[arg(long, env = "NUMARESOURCES_EXTENDER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The scheduler name of the pods this extender places (its holds are rebuilt from them after
    /// a restart).
    #[arg(long, default_value = numaresources_api::operator::DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// How nodes are scored: LeastAllocated, MostAllocated, BalancedAllocation or LeastNUMANodes.
    #[arg(long, default_value = "LeastAllocated")]
    scoring_strategy: String,
    /// The kubelets run the Topology Manager with `prefer-closest-numa-nodes=true`.
    #[arg(long)]
    prefer_closest_numa_nodes: bool,
    /// The kubelets' `max-allowable-numa-nodes`.
    #[arg(long, default_value_t = DEFAULT_MAX_ALLOWABLE_NUMA_NODES)]
    max_allowable_numa_nodes: usize,
    /// The runtime.
    #[command(flatten)]
    runtime: numaresources_runtime::flags::RuntimeFlags,
}

/// Runs until SIGTERM or Ctrl-C.
pub fn run(args: ExtenderArgs) -> anyhow::Result<()> {
    args.runtime.runtime()?.block_on(serve(args))
}

async fn serve(args: ExtenderArgs) -> anyhow::Result<()> {
    let strategy = ScoringStrategyType::from(args.scoring_strategy.as_str());
    if let ScoringStrategyType::Unknown(other) = &strategy {
        anyhow::bail!(
            "--scoring-strategy {other:?}: LeastAllocated, MostAllocated, BalancedAllocation or LeastNUMANodes"
        );
    }
    let options = PolicyOptions {
        prefer_closest_numa_nodes: args.prefer_closest_numa_nodes,
        max_allowable_numa_nodes: args.max_allowable_numa_nodes,
    };
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let shared = Shared::new(Engine::new(options, Some(strategy)), Some(client.clone()));
    let shutdown = Shutdown::on_signals();
    let following = tokio::spawn(numaresources_extender::watch::follow(client, shared.clone(), args.scheduler_name));
    let health_address = SocketAddr::new(args.health_bind_address, args.health_port);
    let health = tokio::net::TcpListener::bind(health_address)
        .await
        .with_context(|| format!("listening on {health_address}"))?;
    tracing::info!(address = %health.local_addr()?, "serving /healthz and /readyz");
    let probes = tokio::spawn(axum::serve(health, health_router(shared.clone())).into_future());
    let address = SocketAddr::new(args.bind_address, args.port);
    let listener = tokio::net::TcpListener::bind(address).await.with_context(|| format!("listening on {address}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving the scheduler extender");
    let served = axum::serve(listener, router(shared)).with_graceful_shutdown(shutdown.signaled()).await;
    following.abort();
    probes.abort();
    served.context("serving")
}
