//! The direct write path: publishing to our API server's Service instead of through
//! kube-apiserver.
//!
//! Through kube-apiserver every write is terminated, authenticated, authorized and proxied by
//! kube-apiserver before our aggregated server sees it; on a large cluster the exporters' writes
//! are the only steady load we put on it. With `--nrt-server` the agent writes to our server
//! itself, over HTTPS verified with `--nrt-server-ca-file`, presenting the projected token in
//! `--nrt-token-file` (an audience of our server's own, so it is useless against kube-apiserver).
//!
//! The direct path is an optimisation, never a dependency: whenever it cannot be used (the
//! Service does not answer, TLS fails, a cold replica answers 503, the token is refused) the
//! publish goes through kube-apiserver as it would without the flag, and the direct path is
//! tried again later with a growing delay ([`failover`]).
//!
//! - [`bearer`]: the token, re-read when the kubelet rotates the file;
//! - [`client`]: the kube client for our server (its CA, the token, no retries of its own, no
//!   connection kept open between publishes);
//! - [`failover`]: which path a publish takes, and the publisher that switches;
//! - [`held`]: asking the server every few seconds whether it holds this node's object, so a
//!   cold start or a deletion is repaired within seconds.

pub mod bearer;
pub mod client;
pub mod failover;
pub mod held;

use std::path::{Path, PathBuf};

use numaresources_api::direct_write::{
    CA_FILE_NAME, NRT_SERVER_ADMIN_URL_FLAG, NRT_SERVER_CA_FILE_FLAG, NRT_SERVER_FLAG, NRT_SERVER_TLS_NAME_FLAG,
    NRT_TOKEN_FILE_FLAG, TOKEN_FILE_NAME, TOKEN_MOUNT_DIR,
};

pub use failover::{FailoverPublisher, Route, Switch};

/// The environment variable that sets `--nrt-server`.
pub(crate) const NRT_SERVER_ENV: &str = "NUMARESOURCES_NRT_SERVER";

/// The `numaresources rte` flags of the direct write path (flattened into
/// [`crate::config::Args`]).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DirectArgs {
    /// Publish to the NodeResourceTopology API server at this base URL (its Service, e.g.
    /// `https://numaresources-apiserver.numaresources.svc:443`) instead of through
    /// kube-apiserver; kube-apiserver is still used whenever it cannot be reached. Absent or
    /// empty: always through kube-apiserver.
    #[arg(long = flag_name(NRT_SERVER_FLAG), env = NRT_SERVER_ENV, value_name = "URL")]
    pub nrt_server: Option<String>,

    /// The PEM bundle that verifies `--nrt-server`'s certificate (re-read while running)
    /// [default: /var/run/secrets/numaresources/nrt-server/ca.crt].
    #[arg(long = flag_name(NRT_SERVER_CA_FILE_FLAG), env = "NUMARESOURCES_NRT_SERVER_CA_FILE", value_name = "FILE")]
    pub nrt_server_ca_file: Option<PathBuf>,

    /// The host name `--nrt-server`'s certificate is checked against, when not the URL's own
    /// (the controllers point the exporters at the write Service, whose certificate is the
    /// API server's) [default: the URL's host].
    #[arg(long = flag_name(NRT_SERVER_TLS_NAME_FLAG), env = "NUMARESOURCES_NRT_SERVER_TLS_NAME", value_name = "HOST")]
    pub nrt_server_tls_name: Option<String>,

    /// The plain-HTTP base URL of `--nrt-server`'s admin port (e.g.
    /// `http://numaresources-apiserver-writes.numaresources.svc:8081`), asked every few seconds
    /// whether the server holds this node's object: the agent publishes again as soon as it
    /// does not (every replica restarted, or the object was deleted), not at its next heartbeat
    /// [default: none, not asked].
    #[arg(long = flag_name(NRT_SERVER_ADMIN_URL_FLAG), env = "NUMARESOURCES_NRT_SERVER_ADMIN_URL", value_name = "URL")]
    pub nrt_server_admin_url: Option<String>,

    /// The projected ServiceAccount token presented to `--nrt-server` (re-read when it changes:
    /// the kubelet rotates it) [default: /var/run/secrets/numaresources/nrt-server/token].
    #[arg(long = flag_name(NRT_TOKEN_FILE_FLAG), env = "NUMARESOURCES_NRT_TOKEN_FILE", value_name = "FILE")]
    pub nrt_token_file: Option<PathBuf>,
}

/// A flag's name for clap, from the contract's `--name` spelling.
fn flag_name(flag: &'static str) -> &'static str {
    flag.trim_start_matches('-')
}

/// Where and how to reach our API server directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectServer {
    /// The base URL (`https://host[:port]`).
    pub url: http::Uri,
    /// The PEM bundle verifying its certificate.
    pub ca_file: PathBuf,
    /// The bearer token file.
    pub token_file: PathBuf,
    /// The name its certificate is checked against, when not the URL's host.
    pub tls_server_name: Option<String>,
    /// Its admin port's base URL, asked whether it holds this node's object ([`held`]).
    pub admin_url: Option<http::Uri>,
}

impl DirectArgs {
    /// The direct server, `None` without `--nrt-server`; or the flag at fault and why.
    pub fn resolve(&self) -> Result<Option<DirectServer>, (&'static str, String)> {
        let Some(text) = self.nrt_server.as_deref().map(str::trim).filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let url = parse_url(text).map_err(|why| (NRT_SERVER_FLAG, format!("{text:?} {why}")))?;
        let admin_url = match self.nrt_server_admin_url.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            Some(text) => {
                Some(parse_admin_url(text).map_err(|why| (NRT_SERVER_ADMIN_URL_FLAG, format!("{text:?} {why}")))?)
            }
            None => None,
        };
        let mount = Path::new(TOKEN_MOUNT_DIR);
        Ok(Some(DirectServer {
            url,
            ca_file: self.nrt_server_ca_file.clone().unwrap_or_else(|| mount.join(CA_FILE_NAME)),
            token_file: self.nrt_token_file.clone().unwrap_or_else(|| mount.join(TOKEN_FILE_NAME)),
            tls_server_name: self
                .nrt_server_tls_name
                .as_deref()
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned),
            admin_url,
        }))
    }

    /// The file flags given without `--nrt-server` (they do nothing then).
    pub(crate) fn unused_file_flags(&self) -> Vec<&'static str> {
        if self.nrt_server.as_deref().is_some_and(|t| !t.trim().is_empty()) {
            return Vec::new();
        }
        [
            (NRT_SERVER_CA_FILE_FLAG, self.nrt_server_ca_file.is_some()),
            (NRT_TOKEN_FILE_FLAG, self.nrt_token_file.is_some()),
            (NRT_SERVER_TLS_NAME_FLAG, self.nrt_server_tls_name.is_some()),
            (NRT_SERVER_ADMIN_URL_FLAG, self.nrt_server_admin_url.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
}

/// An `https://host[:port]` base URL: the token must never travel in the clear, and the
/// agent's requests are built from the API paths, so a path prefix would be lost.
fn parse_url(text: &str) -> Result<http::Uri, String> {
    parse_base_url(text, "https", "the token must not be sent in the clear")
}

/// An `http://host[:port]` base URL: the admin port speaks plain HTTP, and the question carries
/// no credential.
fn parse_admin_url(text: &str) -> Result<http::Uri, String> {
    parse_base_url(text, "http", "the admin port speaks plain HTTP")
}

/// A `scheme://host[:port]` URL without a path or query; `why` says why that scheme.
fn parse_base_url(text: &str, scheme: &str, why: &str) -> Result<http::Uri, String> {
    let url: http::Uri = text.parse().map_err(|e| format!("is not a URL: {e}"))?;
    if url.scheme_str() != Some(scheme) {
        return Err(format!("is not an {scheme}:// URL ({why})"));
    }
    if url.host().is_none_or(str::is_empty) {
        return Err("names no host".into());
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() {
        return Err("must be a base URL without a path or query".into());
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(url: &str) -> DirectArgs {
        DirectArgs { nrt_server: Some(url.into()), ..DirectArgs::default() }
    }

    #[test]
    fn without_the_server_flag_there_is_no_direct_path() {
        assert_eq!(DirectArgs::default().resolve(), Ok(None));
        assert_eq!(server("  ").resolve(), Ok(None));
    }

    #[test]
    fn the_files_default_to_where_the_daemonset_mounts_them() {
        let direct = server("https://numaresources-apiserver.numaresources.svc:443").resolve().unwrap().unwrap();
        assert_eq!(direct.url.authority().unwrap().as_str(), "numaresources-apiserver.numaresources.svc:443");
        assert_eq!(direct.ca_file, Path::new("/var/run/secrets/numaresources/nrt-server/ca.crt"));
        assert_eq!(direct.token_file, Path::new("/var/run/secrets/numaresources/nrt-server/token"));

        let given = DirectArgs {
            nrt_server_ca_file: Some("/ca.pem".into()),
            nrt_token_file: Some("/token".into()),
            ..server("https://127.0.0.1:6443/")
        };
        let direct = given.resolve().unwrap().unwrap();
        assert_eq!(
            (direct.ca_file.as_path(), direct.token_file.as_path()),
            (Path::new("/ca.pem"), Path::new("/token"))
        );
    }

    #[test]
    fn only_an_https_base_url_is_accepted() {
        for (url, why) in [
            ("http://apiserver:443", "not an https:// URL"),
            ("apiserver:443", "not an https:// URL"),
            ("https://apiserver/apis", "without a path"),
            ("https://apiserver?x=1", "without a path or query"),
            ("https://", "is not a URL"),
        ] {
            let (flag, message) = server(url).resolve().unwrap_err();
            assert_eq!(flag, "--nrt-server");
            assert!(message.contains(why), "{url}: {message}");
        }
    }

    #[test]
    fn the_admin_url_is_a_plain_http_base_url() {
        let given = DirectArgs {
            nrt_server_admin_url: Some("http://numaresources-apiserver-writes.numaresources.svc:8081".into()),
            ..server("https://a")
        };
        let direct = given.resolve().unwrap().unwrap();
        assert_eq!(direct.admin_url.unwrap().port_u16(), Some(8081));
        assert_eq!(server("https://a").resolve().unwrap().unwrap().admin_url, None);
        for (url, why) in [("https://a:8081", "not an http:// URL"), ("http://a:8081/readyz", "without a path")] {
            let args = DirectArgs { nrt_server_admin_url: Some(url.into()), ..server("https://a") };
            let (flag, message) = args.resolve().unwrap_err();
            assert_eq!(flag, "--nrt-server-admin-url");
            assert!(message.contains(why), "{url}: {message}");
        }
    }

    #[test]
    fn file_flags_without_the_server_are_reported() {
        let args = DirectArgs { nrt_token_file: Some("/t".into()), ..DirectArgs::default() };
        assert_eq!(args.unused_file_flags(), ["--nrt-token-file"]);
        assert!(DirectArgs { nrt_token_file: Some("/t".into()), ..server("https://a") }.unused_file_flags().is_empty());
    }

    #[test]
    fn the_flags_are_spelled_as_the_contract_says() {
        use clap::CommandFactory as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            direct: DirectArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from([
            "rte",
            "--nrt-server",
            "https://a:1",
            "--nrt-server-ca-file",
            "/ca",
            "--nrt-token-file",
            "/t",
        ])
        .unwrap();
        assert_eq!(cli.direct.nrt_server.as_deref(), Some("https://a:1"));
        let command = Cli::command();
        let server = command.get_arguments().find(|a| a.get_long() == Some("nrt-server")).unwrap();
        assert_eq!(server.get_env().unwrap(), "NUMARESOURCES_NRT_SERVER");
    }
}
