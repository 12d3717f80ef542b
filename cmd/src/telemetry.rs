//! Logging, set up once for every subcommand.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::{LogArgs, LogFormat};

/// Sends log lines to stderr (stdout is for command output), filtered by `filter`.
pub fn init(args: &LogArgs, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|error| {
        eprintln!("invalid --log-level {filter:?} ({error}); using \"info\"");
        EnvFilter::new("info")
    });
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    let result = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    if let Err(error) = result {
        eprintln!("logging was already set up: {error}");
    }
}
