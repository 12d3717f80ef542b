//! `numaresources`: one binary, one subcommand per component.

use std::process::ExitCode;

use clap::Parser;

mod apiserver;
mod apiserver_replication;
mod bundle;
mod cli;
mod controllers;
mod crds;
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

/// 64 random bits (a token, an identity's suffix), from the std hasher's per-process random keys
/// and the clock, told apart by `salt`.
fn random_word(salt: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(salt);
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}
