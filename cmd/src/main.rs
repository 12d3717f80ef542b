//! `numaresources`: one binary, one subcommand per component.

use std::process::ExitCode;

use clap::Parser;

mod apiserver;
mod apiserver_replication;
mod bundle;
mod cli;
mod controllers;
mod crds;
mod extender;
mod generated;
mod local;
mod numa;
mod rte;
mod simulate;
mod telemetry;
mod tls;
mod webhook;

fn main() -> ExitCode {
    let cli = cli::Cli::parse_from(numa::plugin_args(std::env::args_os().collect()));
    telemetry::init(&cli.log, &cli.log_filter());
    match cli.run() {
        Ok(code) => code,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}
