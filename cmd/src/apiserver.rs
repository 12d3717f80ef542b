//! `numaresources apiserver`: the aggregated NodeResourceTopology API server, as deployed behind
//! an `APIService`. Authentication and authorization are delegated to kube-apiserver; serving
//! certificates come from the OLM-mounted files (or any other mount) and are hot-reloaded; until
//! the files exist a pair generated into `--cert-dir` is served.
//!
//! The recipe every component follows: flags → checked configuration → the component from it and
//! its clients → its router served over TLS while it runs its background work, until shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use numaresources_apiserver::config::BuildInfo;
use numaresources_apiserver::{ApiServer, Clients};
use numaresources_runtime::admin;
use numaresources_runtime::serve_with;
use numaresources_runtime::shutdown::Shutdown;
use numaresources_runtime::tls::{ServerConfigBuilder, WatchOptions};

use crate::apiserver_replication::Replicas;

/// Options of `numaresources apiserver`.
#[derive(Debug, clap::Args)]
pub struct ApiserverArgs {
    /// The API server's own options.
    #[command(flatten)]
    server: numaresources_apiserver::config::Args,
    /// Bounds of the HTTPS listener.
    #[command(flatten)]
    connections: numaresources_runtime::flags::ConnectionFlags,
    /// The runtime.
    #[command(flatten)]
    runtime: numaresources_runtime::flags::RuntimeFlags,
    /// The plain-HTTP admin port: `/metrics`, `/healthz`, `/livez`, `/readyz` and the exporters'
    /// question whether their node's object is held, without credentials, on the address of
    /// `--bind-address`; `0` serves none (metrics and probes stay on the HTTPS port as well,
    /// there behind delegated authentication and authorization).
    #[arg(long, env = "NUMARESOURCES_APISERVER_HEALTH_PORT", default_value_t = numaresources_api::direct_write::ADMIN_PORT)]
    health_port: u16,
    /// Replication across replicas.
    #[command(flatten)]
    replication: crate::apiserver_replication::ReplicationArgs,
}

/// How long a stopping leader may take to hand the Lease over (well inside the pod's grace).
const HAND_OVER_GRACE: Duration = Duration::from_secs(5);

/// Runs until SIGTERM or Ctrl-C.
pub fn run(args: ApiserverArgs) -> anyhow::Result<()> {
    args.runtime.runtime()?.block_on(serve_api(args))
}

/// What `/version` reports: this binary's release and commit.
pub(crate) fn build_info() -> BuildInfo {
    BuildInfo { version: env!("CARGO_PKG_VERSION").to_owned(), commit: env!("NUMARESOURCES_GIT_COMMIT").to_owned() }
}

async fn serve_api(args: ApiserverArgs) -> anyhow::Result<()> {
    let mut config = args.server.config().context("invalid options")?;
    config.build = build_info();
    let (listen, files) = (config.listen, config.tls.clone());
    let replicas = args.replication.replicas(listen.ip(), args.server.kubeconfig.as_deref()).await?;
    config.replication = replicas.as_ref().map(Replicas::replica);
    let clients = Clients::connect(&config).await?;
    let server = ApiServer::new(config, clients)?;

    let certificate = files.certificate(
        "kube-apiserver reaches us only with insecureSkipTLSVerify until the mounted certificate appears",
    )?;
    let _watcher = certificate.watch(WatchOptions::default())?;
    let tls = ServerConfigBuilder::new(Arc::new(certificate)).client_cas(server.client_cas()).build()?;
    let (router, admin_app, state) = (server.router(), server.admin_router(), server.state().clone());
    // The background work (warm-up first) starts before the election, and runs until the
    // listener has drained.
    let (served, serving_ended) = Shutdown::manual();
    let background = tokio::spawn(server.run(serving_ended.signaled()));

    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("listening on {listen}"))?;
    let admin = match args.health_port {
        0 => None,
        port => {
            let address = std::net::SocketAddr::new(listen.ip(), port);
            Some(admin::spawn_plain(address, admin_app, std::future::pending()).await?)
        }
    };
    let (stop_election, election_stopped) = Shutdown::manual();
    let election = match replicas {
        Some(replicas) => Some(replicas.start(state.clone(), election_stopped.signaled()).await?),
        None => None,
    };
    let stopping = state.stopping.clone();
    let signaled = Shutdown::on_signals().signaled();
    let shutdown = async move {
        signaled.await;
        // A leader hands the Lease over while both listeners still serve (followers forward to
        // it and stream from it until then).
        stop_election.fire();
        if let Some(election) = election {
            if tokio::time::timeout(HAND_OVER_GRACE, election).await.is_err() {
                tracing::warn!(grace = ?HAND_OVER_GRACE, "the Lease hand-over did not finish in time");
            }
            tracing::info!("the election has ended; ending watches and replication streams");
        }
        stopping.cancel();
    };
    let result = serve_with(listener, tls, router, shutdown, args.connections.serve_options()).await;
    if let Some(admin) = admin {
        admin.abort();
    }
    drop(served);
    let _ = background.await;
    result.context("serving")
}

#[cfg(test)]
mod tests {
    use clap::{Args, Command};

    use super::*;

    #[test]
    fn every_flag_is_settable_by_environment_variable() {
        let command = ApiserverArgs::augment_args(Command::new("apiserver"));
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let variable = long.to_uppercase().replace('-', "_");
            let shared_by = |flags: Command| flags.get_arguments().any(|a| a.get_long() == Some(long));
            let shared = shared_by(numaresources_runtime::flags::ConnectionFlags::augment_args(Command::new("c")))
                || shared_by(numaresources_runtime::flags::RuntimeFlags::augment_args(Command::new("r")));
            let expected = if shared {
                format!("NUMARESOURCES_{variable}")
            } else {
                format!("NUMARESOURCES_APISERVER_{variable}")
            };
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(expected.as_str()), "--{long}");
        }
    }
}
