//! Command-line flags every component shares.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use numaresources_api::GoDuration;

use crate::tls::{Error, ReloadingCertificate, load_self_signed};
use crate::{DEFAULT_MAX_CONNECTIONS_PER_CLIENT, ServeOptions};

/// A component's flags at their declared defaults, no environment variable read: what a
/// component that composes another (`local`, a test) starts from.
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> Result<T, clap::Error> {
    let command = T::augment_args(clap::Command::new("defaults")).mut_args(|arg| arg.env(None));
    T::from_arg_matches(&command.try_get_matches_from(["defaults"])?)
}

/// The serving-certificate flags of a TLS server (`--tls-cert-file`, `--tls-private-key-file`,
/// `--cert-dir`, `--tls-sni-names`, named as kube-apiserver names them), each component with its
/// own environment variables and defaults ([`TlsServingDefaults`]).
#[derive(Debug, Clone, clap::Args)]
pub struct TlsServingFlags<D: TlsServingDefaults> {
    /// Serving certificate (PEM). The default is where OLM mounts it.
    #[arg(long, env = D::CERT_FILE_ENV, default_value = D::CERT_FILE)]
    pub tls_cert_file: PathBuf,
    /// Serving key (PEM: PKCS#8, PKCS#1 or SEC1). The default is where OLM mounts it.
    #[arg(long, env = D::KEY_FILE_ENV, default_value = D::KEY_FILE)]
    pub tls_private_key_file: PathBuf,
    /// When the certificate files do not exist: generate a self-signed pair here.
    #[arg(long, env = D::CERT_DIR_ENV, default_value = D::CERT_DIR)]
    pub cert_dir: PathBuf,
    /// Names the generated certificate covers (e.g. the Service's `<name>.<namespace>.svc`).
    #[arg(long, value_delimiter = ',', env = D::SNI_NAMES_ENV)]
    pub tls_sni_names: Vec<String>,
    #[arg(skip)]
    defaults: PhantomData<D>,
}

/// A component's environment variables (`*_ENV`) and defaults of [`TlsServingFlags`], each
/// named after its flag (`--tls-sni-names` has no default).
pub trait TlsServingDefaults: Clone + std::fmt::Debug + Send + Sync + 'static {
    const CERT_FILE_ENV: &'static str;
    const KEY_FILE_ENV: &'static str;
    const CERT_DIR_ENV: &'static str;
    const SNI_NAMES_ENV: &'static str;
    const CERT_FILE: &'static str;
    const KEY_FILE: &'static str;
    const CERT_DIR: &'static str;
}

impl<D: TlsServingDefaults> TlsServingFlags<D> {
    /// The certificate files, followed as they change; until they exist (an optional Secret
    /// volume whose Secret is not written yet), a self-signed pair for `--tls-sni-names`
    /// generated in `--cert-dir`, with a warning that ends with `hint` (who can reach us
    /// meanwhile).
    pub fn certificate(&self, hint: &str) -> Result<ReloadingCertificate, Error> {
        let fallback = || {
            tracing::warn!("generating a self-signed serving certificate in {} ({hint})", self.cert_dir.display());
            load_self_signed(&self.cert_dir, &self.tls_sni_names)
        };
        ReloadingCertificate::load_or_fallback(&self.tls_cert_file, &self.tls_private_key_file, fallback)
    }
}

/// A period flag: a Go duration of at least one second.
pub fn period(text: &str) -> Result<Duration, String> {
    at_least(text, GoDuration::from_secs(1))
}

/// A duration flag: a Go duration of at least `min`.
pub fn at_least(text: &str, min: GoDuration) -> Result<Duration, String> {
    let duration = GoDuration::parse(text).map_err(|e| e.to_string())?;
    match duration.to_std() {
        Some(std) if duration.as_nanos() >= min.as_nanos() => Ok(std),
        _ => Err(format!("must be at least {min}")),
    }
}

/// How the HTTPS listener bounds its clients (`apiserver` and `webhook`): idle and stalled
/// connections, HTTP/2 keep-alive, connections per client address. Shared by both components,
/// so their environment variables carry no component in their names (`NUMARESOURCES_<FLAG>`;
/// each component runs in its own pod).
#[derive(Debug, clap::Args)]
pub struct ConnectionFlags {
    /// Close a connection with no request open for this long (HTTP/2 gets a GOAWAY; HTTP/1.1
    /// keep-alive connections close after 30 s between requests).
    #[arg(long, env = "NUMARESOURCES_IDLE_CONNECTION_TIMEOUT", default_value = "90s", value_parser = period)]
    idle_connection_timeout: Duration,
    /// Drop a connection whose client has read nothing of what it was sent for this long.
    #[arg(long, env = "NUMARESOURCES_WRITE_STALL_TIMEOUT", default_value = "60s", value_parser = period)]
    write_stall_timeout: Duration,
    /// HTTP/2: ping an idle peer this often.
    #[arg(long, env = "NUMARESOURCES_HTTP2_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = period)]
    http2_keepalive_interval: Duration,
    /// HTTP/2: close the connection when a ping goes unanswered this long.
    #[arg(long, env = "NUMARESOURCES_HTTP2_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = period)]
    http2_keepalive_timeout: Duration,
    /// Connections one client address may hold at once; more are closed on accept.
    #[arg(long, env = "NUMARESOURCES_MAX_CONNECTIONS_PER_CLIENT", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_CLIENT)]
    max_connections_per_client: usize,
}

impl ConnectionFlags {
    /// The listener's options.
    pub fn serve_options(&self) -> ServeOptions {
        ServeOptions::default()
            .idle_timeout(self.idle_connection_timeout)
            .write_stall_timeout(self.write_stall_timeout)
            .http2_keep_alive(self.http2_keepalive_interval, self.http2_keepalive_timeout)
            .max_connections_per_client(self.max_connections_per_client)
    }
}

/// The default of `--worker-threads`: two, so that one long request (the first Table of a large
/// LIST, a burst of full TLS handshakes) leaves a worker for the others, whatever the node's CPU
/// count (the Deployments set no CPU limit).
pub const DEFAULT_WORKER_THREADS: u16 = 2;
/// The most `--worker-threads`.
pub const MAX_WORKER_THREADS: u16 = 64;

/// The async runtime of a long-running component (`--worker-threads`), shared as
/// [`ConnectionFlags`] is, with one environment variable for all (`NUMARESOURCES_WORKER_THREADS`).
#[derive(Debug, Clone, clap::Args)]
pub struct RuntimeFlags {
    /// The runtime's worker threads, which serve every request, watch and reconcile. Not one per
    /// CPU of the node: each worker with nothing to do costs wake-ups and memory (a replica of
    /// the API server serving a 5,000-node fleet needs under half a core).
    #[arg(long, env = "NUMARESOURCES_WORKER_THREADS", default_value_t = DEFAULT_WORKER_THREADS,
          value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_WORKER_THREADS)))]
    worker_threads: u16,
}

impl RuntimeFlags {
    /// `--worker-threads`.
    pub fn worker_threads(&self) -> usize {
        usize::from(self.worker_threads)
    }

    /// A multi-threaded runtime with [`Self::worker_threads`] workers, I/O and timers enabled.
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_multi_thread().worker_threads(self.worker_threads()).enable_all().build()
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args as _, FromArgMatches as _};

    use super::*;

    #[test]
    fn durations_are_go_durations_of_a_minimum() {
        assert_eq!(period("1m30s"), Ok(Duration::from_secs(90)));
        assert!(period("500ms").is_err() && period("-5s").is_err() && period("5").is_err());
        let tenth = GoDuration::from_nanos(100_000_000);
        assert_eq!(at_least("100ms", tenth), Ok(Duration::from_millis(100)));
        assert_eq!(at_least("99ms", tenth), Err("must be at least 100ms".to_owned()));
    }

    #[test]
    fn worker_threads_are_two_unless_set_from_one_to_sixty_four() {
        let command = || RuntimeFlags::augment_args(clap::Command::new("component")).mut_args(|arg| arg.env(None));
        let parse = |args: &[&str]| {
            let matches = command().try_get_matches_from(std::iter::once("component").chain(args.iter().copied()));
            matches.and_then(|matches| RuntimeFlags::from_arg_matches(&matches)).map(|flags| flags.worker_threads())
        };
        assert_eq!(parse(&[]).unwrap(), 2);
        assert_eq!(parse(&["--worker-threads", "1"]).unwrap(), 1);
        assert_eq!(parse(&["--worker-threads", "64"]).unwrap(), 64);
        for refused in ["0", "65", "-1", "two"] {
            assert!(parse(&["--worker-threads", refused]).is_err(), "--worker-threads {refused}");
        }
        let runtime = defaults::<RuntimeFlags>().unwrap().runtime().unwrap();
        assert_eq!(runtime.metrics().num_workers(), 2);
    }
}
