//! The configuration of `numaresources apiserver`: its flags ([`Args`], named as kube-apiserver and
//! metrics-server name them, each default written once, durations and addresses parsed by clap)
//! and the [`Config`] they make once checked ([`Args::config`] reports every problem at once).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use numaresources_runtime::InvalidConfig;
use numaresources_runtime::flags::{TlsServingDefaults, TlsServingFlags, period};
use numaresources_runtime::tls::CaBundle;

use crate::Limits;
use crate::auth::{CacheLifetimes, RequestHeaderConfig, Standalone};

/// Options of `numaresources apiserver`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, env = "NUMARESOURCES_APISERVER_BIND_ADDRESS", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// Port to listen on (0 picks a free one and logs it).
    #[arg(long, env = "NUMARESOURCES_APISERVER_SECURE_PORT", default_value_t = 6443)]
    secure_port: u16,
    /// The serving certificate.
    #[command(flatten)]
    tls: numaresources_runtime::flags::TlsServingFlags<ServingCertificate>,
    /// A kubeconfig for talking to kube-apiserver (default: in-cluster configuration, then
    /// `$KUBECONFIG`/`~/.kube/config`).
    #[arg(long, env = "NUMARESOURCES_APISERVER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig for TokenReviews and the authentication ConfigMap (default: `--kubeconfig`).
    #[arg(long, env = "NUMARESOURCES_APISERVER_AUTHENTICATION_KUBECONFIG")]
    authentication_kubeconfig: Option<PathBuf>,
    /// The kubeconfig for SubjectAccessReviews (default: `--kubeconfig`).
    #[arg(long, env = "NUMARESOURCES_APISERVER_AUTHORIZATION_KUBECONFIG")]
    authorization_kubeconfig: Option<PathBuf>,
    /// The CA bundle that signs the front proxy's client certificate. Given, the
    /// `--requestheader-*` flags replace the front-proxy settings of the
    /// `kube-system/extension-apiserver-authentication` ConfigMap.
    #[arg(long, env = "NUMARESOURCES_APISERVER_REQUESTHEADER_CLIENT_CA_FILE")]
    requestheader_client_ca_file: Option<PathBuf>,
    /// Common names the front proxy's certificate may have (empty: any the CA signed).
    #[arg(long, value_delimiter = ',', env = "NUMARESOURCES_APISERVER_REQUESTHEADER_ALLOWED_NAMES")]
    requestheader_allowed_names: Vec<String>,
    /// Headers naming the user.
    #[arg(
        long,
        value_delimiter = ',',
        env = "NUMARESOURCES_APISERVER_REQUESTHEADER_USERNAME_HEADERS",
        default_value = "X-Remote-User"
    )]
    requestheader_username_headers: Vec<String>,
    /// Headers naming the user's groups.
    #[arg(
        long,
        value_delimiter = ',',
        env = "NUMARESOURCES_APISERVER_REQUESTHEADER_GROUP_HEADERS",
        default_value = "X-Remote-Group"
    )]
    requestheader_group_headers: Vec<String>,
    /// Prefixes of headers carrying extra user attributes.
    #[arg(
        long,
        value_delimiter = ',',
        env = "NUMARESOURCES_APISERVER_REQUESTHEADER_EXTRA_HEADERS_PREFIX",
        default_value = "X-Remote-Extra-"
    )]
    requestheader_extra_headers_prefix: Vec<String>,
    /// Headers naming the user's uid.
    #[arg(
        long,
        value_delimiter = ',',
        env = "NUMARESOURCES_APISERVER_REQUESTHEADER_UID_HEADERS",
        default_value = "X-Remote-Uid"
    )]
    requestheader_uid_headers: Vec<String>,
    /// Standalone mode (no kube-apiserver): static bearer tokens, kube-apiserver's CSV format
    /// `token,user,uid,"group1,group2"`. Members of `system:masters` may write; every other
    /// authenticated user may read.
    #[arg(long, env = "NUMARESOURCES_APISERVER_TOKEN_AUTH_FILE")]
    token_auth_file: Option<PathBuf>,
    /// Accept client certificates issued by this CA (CN is the user, O the groups). Delegated
    /// mode: replaces the ConfigMap's `client-ca-file`; requests are still authorized by
    /// SubjectAccessReview. With `--token-auth-file`: the standalone users' certificates.
    #[arg(long, env = "NUMARESOURCES_APISERVER_CLIENT_CA_FILE")]
    client_ca_file: Option<PathBuf>,
    /// The authentication ConfigMap is watched; this is how often it is re-read as well, in case
    /// a watch stalls unnoticed.
    #[arg(long, env = "NUMARESOURCES_APISERVER_AUTHENTICATION_CONFIG_REFRESH", default_value = "5m", value_parser = period)]
    authentication_config_refresh: Duration,
    /// How long the identity of a bearer token is remembered (TokenReview's answer, or the
    /// exporter token verified here): kube-apiserver's default for its own webhook token
    /// authenticator. Never past the token's expiry; a refused token is remembered 10 s at most.
    #[arg(long, env = "NUMARESOURCES_APISERVER_AUTHENTICATION_TOKEN_WEBHOOK_CACHE_TTL", default_value = "2m", value_parser = cache_lifetime)]
    authentication_token_webhook_cache_ttl: Duration,
    /// How long a SubjectAccessReview that allowed is remembered: kube-apiserver's default for
    /// its own webhook authorizer.
    #[arg(long, env = "NUMARESOURCES_APISERVER_AUTHORIZATION_WEBHOOK_CACHE_AUTHORIZED_TTL", default_value = "5m", value_parser = cache_lifetime)]
    authorization_webhook_cache_authorized_ttl: Duration,
    /// How long a SubjectAccessReview that denied is remembered (kube-apiserver's default).
    #[arg(long, env = "NUMARESOURCES_APISERVER_AUTHORIZATION_WEBHOOK_CACHE_UNAUTHORIZED_TTL", default_value = "30s", value_parser = cache_lifetime)]
    authorization_webhook_cache_unauthorized_ttl: Duration,
    /// After a start, `/readyz` fails and discovery and reads answer 503 until every node that
    /// runs an exporter has reported its topology, or this long at most (an empty store makes
    /// every node look unconstrained to the scheduler). Longer than the exporters' heartbeat
    /// (60 s), by which each of them has published once even on a node that does not change.
    #[arg(long, env = "NUMARESOURCES_APISERVER_STORE_WARMUP", default_value = "90s", value_parser = period)]
    store_warmup: Duration,
    /// Where the exporter pods run (the warm-up waits for each of their nodes' reports).
    #[arg(long, env = "NUMARESOURCES_APISERVER_EXPORTER_NAMESPACE", default_value = "numaresources")]
    exporter_namespace: String,
    /// Which pods are the exporters.
    #[arg(
        long,
        env = "NUMARESOURCES_APISERVER_EXPORTER_SELECTOR",
        default_value = "app.kubernetes.io/component=rte,app.kubernetes.io/part-of=numaresources"
    )]
    exporter_selector: String,
    /// The exporters' service account: its identities may write only their own node's
    /// NodeResourceTopology (as may any identity whose token is bound to an exporter pod).
    #[arg(
        long,
        env = "NUMARESOURCES_APISERVER_EXPORTER_SERVICE_ACCOUNT",
        default_value = crate::auth::node_restriction::DEFAULT_EXPORTER_SERVICE_ACCOUNT
    )]
    exporter_service_account: String,
    /// How many changes the watch history keeps for resuming watches.
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_HISTORY", default_value_t = crate::store::DEFAULT_HISTORY)]
    watch_history: usize,
    /// How many bytes of object versions the watch history may hold; the oldest events go first
    /// (a watch from before them gets 410 and relists).
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_HISTORY_BYTES", default_value_t = crate::store::DEFAULT_HISTORY_BYTES)]
    watch_history_bytes: usize,
    /// What one watch may queue for a client that reads slower than changes come, in bytes (one
    /// change always goes out, however large).
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_BUFFER_BYTES", default_value_t = crate::DEFAULT_WATCH_BUFFER_BYTES)]
    watch_buffer_bytes: usize,
    /// How long a watch may wait for its client to read before it is ended (the client resumes
    /// from the last change it read).
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_BLOCKED_TIMEOUT", default_value = crate::DEFAULT_WATCH_BLOCKED_TIMEOUT, value_parser = period)]
    watch_blocked_timeout: Duration,
    /// The shortest time between two writes of one watch: changes that come sooner go out
    /// together, in one write, at most this much later (0s: each change as it comes). A change
    /// after a quiet spell goes out at once.
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_FLUSH_INTERVAL", default_value = crate::DEFAULT_WATCH_FLUSH_INTERVAL, value_parser = watch_flush_interval)]
    watch_flush_interval: Duration,
    /// Request bodies above this many bytes are refused (413), and so are writes whose object
    /// would be larger, by patching for instance; it also caps what a JSON patch's copies add.
    #[arg(long, env = "NUMARESOURCES_APISERVER_MAX_REQUEST_BODY_BYTES", default_value_t = crate::DEFAULT_MAX_BODY_BYTES)]
    max_request_body_bytes: usize,
    /// How deep a JSON or YAML body may nest (objects and arrays).
    #[arg(long, env = "NUMARESOURCES_APISERVER_MAX_NESTING_DEPTH", default_value_t = crate::body::DEFAULT_MAX_NESTING_DEPTH as u16,
          value_parser = clap::value_parser!(u16).range(1..=crate::body::DEFAULT_MAX_NESTING_DEPTH as i64))]
    max_nesting_depth: u16,
    /// The most operations a JSON patch may have (413 above).
    #[arg(long, env = "NUMARESOURCES_APISERVER_MAX_JSON_PATCH_OPERATIONS", default_value_t = crate::patch_limits::MAX_JSON_PATCH_OPERATIONS)]
    max_json_patch_operations: usize,
}

/// The environment variables and defaults of the serving-certificate flags.
#[derive(Debug, Clone)]
pub struct ServingCertificate;

impl TlsServingDefaults for ServingCertificate {
    const CERT_FILE_ENV: &'static str = "NUMARESOURCES_APISERVER_TLS_CERT_FILE";
    const KEY_FILE_ENV: &'static str = "NUMARESOURCES_APISERVER_TLS_PRIVATE_KEY_FILE";
    const CERT_DIR_ENV: &'static str = "NUMARESOURCES_APISERVER_CERT_DIR";
    const SNI_NAMES_ENV: &'static str = "NUMARESOURCES_APISERVER_TLS_SNI_NAMES";
    const CERT_FILE: &'static str = "/apiserver.local.config/certificates/apiserver.crt";
    const KEY_FILE: &'static str = "/apiserver.local.config/certificates/apiserver.key";
    const CERT_DIR: &'static str = "/tmp/numaresources-apiserver";
}

/// What the flags make, checked: what [`crate::ApiServer::new`] runs.
#[derive(Debug)]
pub struct Config {
    /// Where the API is served.
    pub listen: SocketAddr,
    /// The serving certificate: mounted files, followed as they change, or until they exist a
    /// self-signed pair generated into `--cert-dir`.
    pub tls: TlsServingFlags<ServingCertificate>,
    /// The kubeconfig of every kube-apiserver client but the delegated ones' own (None: in-cluster,
    /// then `$KUBECONFIG`/`~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// Who may do what.
    pub authentication: Authentication,
    /// The exporters: whose reports the warm-up waits for, and whose writes are node-bound.
    pub exporters: Exporters,
    /// The longest the store waits for the exporters after a start.
    pub store_warmup: Duration,
    /// How many changes the watch history keeps.
    pub watch_history: usize,
    /// How many bytes of object versions the watch history may hold.
    pub watch_history_bytes: usize,
    /// The bounds of requests and watches.
    pub limits: Limits,
    /// This replica's part in a replicated store (None: the only replica).
    pub replication: Option<crate::replication::ReplicaConfig>,
    /// What `/version` reports.
    pub build: BuildInfo,
}

/// The build `/version` reports.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    /// The release (`gitVersion`).
    pub version: String,
    /// The commit (`gitCommit`).
    pub commit: String,
}

impl Default for BuildInfo {
    /// This crate's version, commit unknown (the binary names its own).
    fn default() -> Self {
        Self { version: env!("CARGO_PKG_VERSION").to_owned(), commit: "unknown".to_owned() }
    }
}

/// Who may do what.
#[derive(Debug)]
pub enum Authentication {
    /// `--token-auth-file`: static tokens (and client certificates), no kube-apiserver.
    Standalone(Standalone),
    /// Delegated to kube-apiserver (TokenReview, SubjectAccessReview, its authentication ConfigMap).
    Delegated(Delegation),
}

/// The settings of delegated authentication and authorization.
#[derive(Debug)]
pub struct Delegation {
    /// The kubeconfig for TokenReviews and the ConfigMap (None: the main client's).
    pub authentication_kubeconfig: Option<PathBuf>,
    /// The kubeconfig for SubjectAccessReviews (None: the main client's).
    pub authorization_kubeconfig: Option<PathBuf>,
    /// The `--requestheader-*` flags, when a CA is given: they replace the ConfigMap's.
    pub request_header: Option<RequestHeaderConfig>,
    /// `--client-ca-file`, which replaces the ConfigMap's `client-ca-file`.
    pub client_ca: Option<CaBundle>,
    /// How often the ConfigMap is re-read besides being watched.
    pub refresh: Duration,
    /// How long reviews' answers are remembered.
    pub cache: CacheLifetimes,
}

/// The exporter pods.
#[derive(Debug, Clone)]
pub struct Exporters {
    /// Their namespace.
    pub namespace: String,
    /// Their label selector.
    pub selector: String,
    /// Their service account (node-bound writes).
    pub service_account: String,
}

/// A cache lifetime flag: a Go duration, 0 to remember nothing.
fn cache_lifetime(text: &str) -> Result<Duration, String> {
    numaresources_runtime::flags::at_least(text, numaresources_api::GoDuration::from_secs(0))
}

impl Args {
    /// The configuration, or every problem it has (files that cannot be read or parsed).
    pub fn config(&self) -> Result<Config, InvalidConfig> {
        let mut problems = Vec::new();
        let mut ca = |path: &Path| read_ca(path).map_err(|problem| problems.push(problem)).ok();
        let client_ca = self.client_ca_file.as_deref().and_then(&mut ca);
        // `--client-ca-file` alone keeps delegated authorization: it only adds client-certificate
        // authentication, as in kube-apiserver.
        let authentication = match &self.token_auth_file {
            Some(path) => standalone(path)
                .map(|standalone| match client_ca {
                    Some(ca) => Authentication::Standalone(standalone.with_client_ca(ca)),
                    None => Authentication::Standalone(standalone),
                })
                .map_err(|problem| problems.push(problem))
                .ok(),
            None => Some(Authentication::Delegated(Delegation {
                authentication_kubeconfig: self.authentication_kubeconfig.clone(),
                authorization_kubeconfig: self.authorization_kubeconfig.clone(),
                request_header: self.requestheader_client_ca_file.as_deref().map(|path| RequestHeaderConfig {
                    client_ca: ca(path),
                    allowed_names: self.requestheader_allowed_names.clone(),
                    username_headers: self.requestheader_username_headers.clone(),
                    group_headers: self.requestheader_group_headers.clone(),
                    extra_header_prefixes: self.requestheader_extra_headers_prefix.clone(),
                    uid_headers: self.requestheader_uid_headers.clone(),
                }),
                client_ca,
                refresh: self.authentication_config_refresh,
                cache: CacheLifetimes {
                    token: self.authentication_token_webhook_cache_ttl,
                    authorized: self.authorization_webhook_cache_authorized_ttl,
                    unauthorized: self.authorization_webhook_cache_unauthorized_ttl,
                },
            })),
        };
        let (Some(authentication), true) = (authentication, problems.is_empty()) else {
            return Err(InvalidConfig(problems));
        };
        Ok(Config {
            listen: SocketAddr::new(self.bind_address, self.secure_port),
            tls: self.tls.clone(),
            kubeconfig: self.kubeconfig.clone(),
            authentication,
            exporters: Exporters {
                namespace: self.exporter_namespace.clone(),
                selector: self.exporter_selector.clone(),
                service_account: self.exporter_service_account.clone(),
            },
            store_warmup: self.store_warmup,
            watch_history: self.watch_history,
            watch_history_bytes: self.watch_history_bytes,
            limits: Limits {
                max_body_bytes: self.max_request_body_bytes,
                watch_buffer_bytes: self.watch_buffer_bytes,
                watch_blocked_timeout: self.watch_blocked_timeout,
                watch_flush_interval: self.watch_flush_interval,
                max_nesting_depth: usize::from(self.max_nesting_depth),
                max_json_patch_operations: self.max_json_patch_operations,
                ..Limits::default()
            },
            replication: None,
            build: BuildInfo::default(),
        })
    }
}

/// The longest `--watch-flush-interval`: changes held longer would read as a stalled watch.
const MAX_WATCH_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// `--watch-flush-interval`: a Go duration from 0 to [`MAX_WATCH_FLUSH_INTERVAL`].
pub(crate) fn watch_flush_interval(text: &str) -> Result<Duration, String> {
    let interval = numaresources_runtime::flags::at_least(text, numaresources_api::GoDuration::from_nanos(0))?;
    if interval > MAX_WATCH_FLUSH_INTERVAL {
        return Err(format!("must be at most {MAX_WATCH_FLUSH_INTERVAL:?}"));
    }
    Ok(interval)
}

/// The standalone authenticator of the token file at `path`.
fn standalone(path: &Path) -> Result<Standalone, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Standalone::from_token_file(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_ca(path: &Path) -> Result<CaBundle, String> {
    let pem = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    CaBundle::from_pem(&pem).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use clap::{Command, FromArgMatches};

    use super::*;

    #[test]
    fn the_watch_flush_interval_is_from_zero_to_a_second() {
        assert_eq!(watch_flush_interval("0s"), Ok(Duration::ZERO));
        assert_eq!(watch_flush_interval(crate::DEFAULT_WATCH_FLUSH_INTERVAL), Ok(Duration::from_millis(10)));
        assert_eq!(watch_flush_interval("1s"), Ok(Duration::from_secs(1)));
        assert!(watch_flush_interval("1001ms").is_err(), "longer reads as a stalled watch");
        assert!(watch_flush_interval("-1ms").is_err());
        assert_eq!(
            parse(&["--watch-flush-interval", "0s"]).config().unwrap().limits.watch_flush_interval,
            Duration::ZERO
        );
    }

    fn parse(args: &[&str]) -> Args {
        let command = <Args as clap::Args>::augment_args(Command::new("apiserver"));
        let matches = command.try_get_matches_from(std::iter::once("apiserver").chain(args.iter().copied())).unwrap();
        Args::from_arg_matches(&matches).unwrap()
    }

    #[test]
    fn a_client_ca_alone_keeps_delegated_authorization() {
        let dir = tempfile::tempdir().unwrap();
        let ca =
            numaresources_runtime::tls::CertificateAuthority::generate("clients", Duration::from_secs(3600)).unwrap();
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, ca.cert_pem()).unwrap();
        let ca_path = ca_file.to_str().unwrap();
        let config = parse(&["--client-ca-file", ca_path]).config().unwrap();
        assert!(matches!(config.authentication, Authentication::Delegated(Delegation { client_ca: Some(_), .. })));

        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, "admin-token,admin,1,system:masters\n").unwrap();
        let both = parse(&["--client-ca-file", ca_path, "--token-auth-file", tokens.to_str().unwrap()]);
        let Authentication::Standalone(standalone) = both.config().unwrap().authentication else {
            panic!("a token file selects standalone mode");
        };
        assert_eq!(standalone.client_cas().len(), 1);
    }

    #[test]
    fn reviews_are_remembered_as_long_as_kube_apiserver_remembers_its_webhooks_unless_told() {
        let lifetimes = |args: &[&str]| match parse(args).config().unwrap().authentication {
            Authentication::Delegated(delegation) => delegation.cache,
            Authentication::Standalone(_) => panic!("delegated"),
        };
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(
            lifetimes(&[]),
            CacheLifetimes { token: minutes(2), authorized: minutes(5), unauthorized: Duration::from_secs(30) }
        );
        let told = lifetimes(&[
            "--authentication-token-webhook-cache-ttl=10s",
            "--authorization-webhook-cache-authorized-ttl=1m",
            "--authorization-webhook-cache-unauthorized-ttl=0s",
        ]);
        assert_eq!(
            told,
            CacheLifetimes { token: Duration::from_secs(10), authorized: minutes(1), unauthorized: Duration::ZERO }
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let missing = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
        let (tokens, ca, front_proxy) = (missing("tokens.csv"), missing("ca.crt"), missing("front-proxy.crt"));
        let args = parse(&["--token-auth-file", &tokens, "--client-ca-file", &ca]);
        let InvalidConfig(problems) = args.config().unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains(&ca) && problems[1].contains(&tokens), "{problems:?}");

        let args = parse(&["--requestheader-client-ca-file", &front_proxy, "--client-ca-file", &ca]);
        let InvalidConfig(problems) = args.config().unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn periods_default_as_documented() {
        assert_eq!(parse(&[]).config().unwrap().store_warmup, Duration::from_secs(90));
        let limits = parse(&[]).config().unwrap().limits;
        assert_eq!(limits.watch_blocked_timeout, Limits::default().watch_blocked_timeout, "one default, two readers");
    }
}
