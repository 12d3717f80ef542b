//! `numaresources apiserver`: the aggregated NodeResourceTopology API server, as deployed behind
//! an `APIService`. Authentication and authorization are delegated to kube-apiserver; serving
//! certificates come from the OLM-mounted files (or any other mount) and are hot-reloaded; until
//! the files exist a pair generated into `--cert-dir` is served.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use numaresources_api::GoDuration;
use numaresources_apiserver::auth::NodeRestriction;
use numaresources_apiserver::auth::{Auth, Delegated, RequestHeaderConfig, Standalone};
use numaresources_apiserver::exporter_pods::ExporterPods;
use numaresources_apiserver::replication::{Role, STORE_WARM_CHECK};
use numaresources_apiserver::warmup::warm_up;
use numaresources_apiserver::{AppState, Store, router};
use numaresources_certs::{CaBundle, ClientCaVerifier, ServeOptions, ServerConfigBuilder, WatchOptions, serve_with};

use crate::kube_client::kube_client;

/// Options of `numaresources apiserver` (named as kube-apiserver and metrics-server name them).
#[derive(Debug, clap::Args)]
pub struct ApiserverArgs {
    /// Address to listen on.
    #[arg(long, env = "NUMARESOURCES_APISERVER_BIND_ADDRESS", default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// Port to listen on (0 picks a free one and logs it).
    #[arg(long, env = "NUMARESOURCES_APISERVER_SECURE_PORT", default_value_t = 6443)]
    secure_port: u16,
    /// Serving certificate (PEM). The default is where OLM mounts it.
    #[arg(
        long,
        env = "NUMARESOURCES_APISERVER_TLS_CERT_FILE",
        default_value = "/apiserver.local.config/certificates/apiserver.crt"
    )]
    tls_cert_file: PathBuf,
    /// Serving key (PEM: PKCS#8, PKCS#1 or SEC1). The default is where OLM mounts it.
    #[arg(
        long,
        env = "NUMARESOURCES_APISERVER_TLS_PRIVATE_KEY_FILE",
        default_value = "/apiserver.local.config/certificates/apiserver.key"
    )]
    tls_private_key_file: PathBuf,
    /// When the certificate files do not exist: generate a self-signed pair here.
    #[arg(long, env = "NUMARESOURCES_APISERVER_CERT_DIR", default_value = "/tmp/numaresources-apiserver")]
    cert_dir: PathBuf,
    /// Names the generated certificate covers (e.g. `numaresources-apiserver.numaresources.svc`).
    #[arg(long, value_delimiter = ',', env = "NUMARESOURCES_APISERVER_TLS_SNI_NAMES")]
    tls_sni_names: Vec<String>,
    /// A kubeconfig for talking to kube-apiserver (default: in-cluster configuration, then
    /// `$KUBECONFIG`/`~/.kube/config`).
    #[arg(long, env = "NUMARESOURCES_APISERVER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
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
    #[arg(long, env = "NUMARESOURCES_APISERVER_AUTHENTICATION_CONFIG_REFRESH", default_value = "5m", value_parser = parse_period)]
    authentication_config_refresh: GoDuration,
    /// After a start, `/readyz` fails and discovery and reads answer 503 until every node that
    /// runs an exporter has reported its topology, or this long at most (an empty store makes
    /// every node look unconstrained to the scheduler).
    #[arg(long, env = "NUMARESOURCES_APISERVER_STORE_WARMUP", default_value = "60s", value_parser = parse_period)]
    store_warmup: GoDuration,
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
        default_value = numaresources_apiserver::auth::node_restriction::DEFAULT_EXPORTER_SERVICE_ACCOUNT
    )]
    exporter_service_account: String,
    /// How many changes the watch history keeps for resuming watches.
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_HISTORY", default_value_t = numaresources_apiserver::store::DEFAULT_HISTORY)]
    watch_history: usize,
    /// How many bytes of object versions the watch history may hold; the oldest events go first
    /// (a watch from before them gets 410 and relists).
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_HISTORY_BYTES", default_value_t = numaresources_apiserver::store::DEFAULT_HISTORY_BYTES)]
    watch_history_bytes: usize,
    /// What one watch may queue for a client that reads slower than changes come, in bytes (one
    /// change always goes out, however large).
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_BUFFER_BYTES", default_value_t = numaresources_apiserver::DEFAULT_WATCH_BUFFER_BYTES)]
    watch_buffer_bytes: usize,
    /// How long a watch may wait for its client to read before it is ended (the client resumes
    /// from the last change it read).
    #[arg(long, env = "NUMARESOURCES_APISERVER_WATCH_BLOCKED_TIMEOUT", default_value = "10s", value_parser = parse_period)]
    watch_blocked_timeout: GoDuration,
    /// Request bodies above this many bytes are refused (413), and so are writes whose object
    /// would be larger, by patching for instance; it also caps what a JSON patch's copies add.
    #[arg(long, env = "NUMARESOURCES_APISERVER_MAX_REQUEST_BODY_BYTES", default_value_t = numaresources_apiserver::DEFAULT_MAX_BODY_BYTES)]
    max_request_body_bytes: usize,
    /// How deep a JSON or YAML body may nest (objects and arrays).
    #[arg(long, env = "NUMARESOURCES_APISERVER_MAX_NESTING_DEPTH", default_value_t = numaresources_apiserver::body::DEFAULT_MAX_NESTING_DEPTH as u16,
          value_parser = clap::value_parser!(u16).range(1..=numaresources_apiserver::body::DEFAULT_MAX_NESTING_DEPTH as i64))]
    max_nesting_depth: u16,
    /// The most operations a JSON patch may have (413 above).
    #[arg(long, env = "NUMARESOURCES_APISERVER_MAX_JSON_PATCH_OPERATIONS", default_value_t = numaresources_apiserver::patch_limits::MAX_JSON_PATCH_OPERATIONS)]
    max_json_patch_operations: usize,
    /// Bounds of the HTTPS listener.
    #[command(flatten)]
    connections: ConnectionFlags,
    /// Replication across replicas.
    #[command(flatten)]
    replication: crate::apiserver_replication::ReplicationArgs,
}

/// How long a stopping leader may take to hand the Lease over (well inside the pod's grace).
const HAND_OVER_GRACE: Duration = Duration::from_secs(5);

fn parse_period(text: &str) -> Result<GoDuration, String> {
    let duration = GoDuration::parse(text).map_err(|e| e.to_string())?;
    if duration.as_nanos() < 1_000_000_000 {
        return Err("must be at least 1s".into());
    }
    Ok(duration)
}

/// Runs until SIGTERM or Ctrl-C.
pub fn run(args: ApiserverArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(serve_api(args))
}

/// Starts following the exporter pods and holds the store-warm check until the store is warm
/// (see [`warm_up`]); returns both tasks.
fn start_warm_up(
    args: &ApiserverArgs,
    state: &AppState,
    client: kube::Client,
    exporters: Arc<ExporterPods>,
) -> (Option<tokio::task::JoinHandle<()>>, Option<tokio::task::JoinHandle<()>>) {
    let warmup = args.store_warmup.to_std().unwrap_or(Duration::from_secs(60));
    state.readiness.set(STORE_WARM_CHECK, false);
    let (follower, selector) = (exporters.clone(), args.exporter_selector.clone());
    let pods = tokio::spawn(async move { follower.follow(client, &selector).await });
    let warm = tokio::spawn(warm_up(state.store.clone(), state.readiness.clone(), exporters, warmup));
    (Some(pods), Some(warm))
}

async fn serve_api(args: ApiserverArgs) -> anyhow::Result<()> {
    let certificate = crate::tls::serving_certificate(
        &args.tls_cert_file,
        &args.tls_private_key_file,
        &args.cert_dir,
        &args.tls_sni_names,
        "kube-apiserver reaches us only with insecureSkipTLSVerify until the mounted certificate appears",
    )?;
    let _watcher = certificate.watch(WatchOptions::default())?;
    let standalone = standalone(&args)?;
    let client_cas = Arc::new(ClientCaVerifier::new(&standalone.as_ref().map(|s| s.client_cas()).unwrap_or_default())?);
    let tls = ServerConfigBuilder::new(Arc::new(certificate)).client_cas(client_cas.clone()).build()?;

    let mut state = AppState::new(
        Arc::new(Store::new(args.watch_history).with_history_bytes(args.watch_history_bytes)),
        env!("CARGO_PKG_VERSION"),
        env!("NUMARESOURCES_GIT_COMMIT"),
    );
    state.limits.watch_buffer_bytes = args.watch_buffer_bytes;
    state.limits.watch_blocked_timeout =
        args.watch_blocked_timeout.to_std().unwrap_or(numaresources_apiserver::DEFAULT_WATCH_BLOCKED_TIMEOUT);
    state.limits.max_body_bytes = args.max_request_body_bytes;
    state.limits.max_nesting_depth = usize::from(args.max_nesting_depth);
    state.limits.max_json_patch_operations = args.max_json_patch_operations;
    let replicas = args.replication.replicas(args.bind_address, args.kubeconfig.as_deref(), &state).await?;
    if let Some(replicas) = &replicas {
        let replication = replicas.replication();
        replication.metrics().register(state.metrics.registry_mut());
        state.replication = Some(replication);
    }
    let mut background = None;
    let mut nodes_task = None;
    let mut warm_task = None;
    let mut pods_task = None;
    match standalone {
        Some(standalone) => {
            tracing::warn!(
                "standalone mode: static tokens and client certificates, with a permissive authorizer \
                 (system:masters may write, every other authenticated user may read); not for a cluster"
            );
            state.auth = Auth::Standalone(Arc::new(standalone));
            // Replicated standalone replicas (a test bed) reach a kube-apiserver for the Lease: they
            // warm up from its exporter pods as a cluster's replicas do.
            if state.replication.is_some() {
                let client = kube_client(args.kubeconfig.as_deref()).await?;
                let exporters = Arc::new(ExporterPods::new(&args.exporter_namespace));
                (pods_task, warm_task) = start_warm_up(&args, &state, client, exporters);
            }
        }
        None => {
            let client = kube_client(args.kubeconfig.as_deref()).await?;
            nodes_task = Some(tokio::spawn(numaresources_apiserver::nodes::follow_node_deletions(
                client.clone(),
                state.store.clone(),
                {
                    let replication = state.replication.clone();
                    move || replication.as_ref().is_none_or(|r| r.role() == Role::Leader)
                },
            )));
            // One watch of the exporter pods serves the warm-up and the node restriction.
            let exporters = Arc::new(ExporterPods::new(&args.exporter_namespace));
            (pods_task, warm_task) = start_warm_up(&args, &state, client.clone(), exporters.clone());
            let authentication_client = match &args.authentication_kubeconfig {
                Some(path) => kube_client(Some(path)).await?,
                None => client.clone(),
            };
            let restriction =
                NodeRestriction::new(&args.exporter_namespace, &args.exporter_service_account).with_pods(exporters);
            let mut delegated =
                Delegated::new(authentication_client, Some(client_cas)).with_node_restriction(restriction);
            if let Some(path) = &args.authorization_kubeconfig {
                delegated = delegated.with_authorization_client(kube_client(Some(path)).await?);
            }
            if let Some(request_header) = request_header_flags(&args)? {
                delegated = delegated.with_request_header(request_header);
            }
            if let Some(path) = &args.client_ca_file {
                delegated = delegated.with_client_ca(read_ca(path)?);
            }
            let delegated = Arc::new(delegated);
            state.auth = Auth::Delegated(delegated.clone());
            state.readiness.set("authentication-config", false);
            let readiness = state.readiness.clone();
            let refresh = args.authentication_config_refresh.to_std().unwrap_or(Duration::from_secs(30));
            background = Some(tokio::spawn(async move {
                delegated.keep_config_current(refresh, |ok| readiness.set("authentication-config", ok)).await;
            }));
        }
    }
    let state = Arc::new(state);

    let listener = tokio::net::TcpListener::bind(SocketAddr::new(args.bind_address, args.secure_port))
        .await
        .with_context(|| format!("listening on {}:{}", args.bind_address, args.secure_port))?;
    let (stop_election, election_stopped) = tokio::sync::oneshot::channel::<()>();
    let election = match replicas {
        Some(replicas) => Some(
            replicas
                .start(state.clone(), async move {
                    let _ = election_stopped.await;
                })
                .await?,
        ),
        None => None,
    };
    let stopping = state.stopping.clone();
    let shutdown = async move {
        crate::shutdown::signal().await;
        // A leader hands the Lease over while both listeners still serve (followers forward to
        // it and stream from it until then).
        let _ = stop_election.send(());
        if let Some(election) = election
            && tokio::time::timeout(HAND_OVER_GRACE, election).await.is_err()
        {
            tracing::warn!(grace = ?HAND_OVER_GRACE, "the Lease hand-over did not finish in time");
        }
        tracing::info!("the election has ended; ending watches and replication streams");
        stopping.cancel();
    };
    let served = serve_with(listener, tls, router(state), shutdown, args.connections.serve_options()).await;
    for task in [background, nodes_task, warm_task, pods_task].into_iter().flatten() {
        task.abort();
    }
    served.context("serving")
}

/// The front-proxy settings of the `--requestheader-*` flags, when a CA is given.
fn request_header_flags(args: &ApiserverArgs) -> anyhow::Result<Option<RequestHeaderConfig>> {
    let Some(path) = &args.requestheader_client_ca_file else { return Ok(None) };
    Ok(Some(RequestHeaderConfig {
        client_ca: Some(read_ca(path)?),
        allowed_names: args.requestheader_allowed_names.clone(),
        username_headers: args.requestheader_username_headers.clone(),
        group_headers: args.requestheader_group_headers.clone(),
        extra_header_prefixes: args.requestheader_extra_headers_prefix.clone(),
        uid_headers: args.requestheader_uid_headers.clone(),
    }))
}

/// The standalone authenticator, when `--token-auth-file` is given (`--client-ca-file` alone
/// keeps delegated authorization: it only adds client-certificate authentication, as in
/// kube-apiserver).
fn standalone(args: &ApiserverArgs) -> anyhow::Result<Option<Standalone>> {
    let Some(path) = &args.token_auth_file else { return Ok(None) };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut standalone = Standalone::from_token_file(&text).with_context(|| path.display().to_string())?;
    if let Some(path) = &args.client_ca_file {
        standalone = standalone.with_client_ca(read_ca(path)?);
    }
    Ok(Some(standalone))
}

fn read_ca(path: &Path) -> anyhow::Result<CaBundle> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    CaBundle::from_pem(&pem).with_context(|| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use clap::{Args, Command, FromArgMatches};

    use super::*;

    fn parse(args: &[&str]) -> ApiserverArgs {
        let command = ApiserverArgs::augment_args(Command::new("apiserver"));
        let matches = command.try_get_matches_from(std::iter::once("apiserver").chain(args.iter().copied())).unwrap();
        ApiserverArgs::from_arg_matches(&matches).unwrap()
    }

    #[test]
    fn every_flag_is_settable_by_environment_variable() {
        let command = ApiserverArgs::augment_args(Command::new("apiserver"));
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let variable = long.to_uppercase().replace('-', "_");
            let shared =
                ConnectionFlags::augment_args(Command::new("c")).get_arguments().any(|a| a.get_long() == Some(long));
            let expected = if shared {
                format!("NUMARESOURCES_{variable}")
            } else {
                format!("NUMARESOURCES_APISERVER_{variable}")
            };
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(expected.as_str()), "--{long}");
        }
    }

    #[test]
    fn a_client_ca_alone_keeps_delegated_authorization() {
        let dir = tempfile::tempdir().unwrap();
        let ca = numaresources_certs::CertificateAuthority::generate("clients", Duration::from_secs(3600)).unwrap();
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, ca.cert_pem()).unwrap();
        let ca_path = ca_file.to_str().unwrap();
        assert!(standalone(&parse(&["--client-ca-file", ca_path])).unwrap().is_none());

        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, "admin-token,admin,1,system:masters\n").unwrap();
        let both = parse(&["--client-ca-file", ca_path, "--token-auth-file", tokens.to_str().unwrap()]);
        let standalone = standalone(&both).unwrap().expect("a token file selects standalone mode");
        assert_eq!(standalone.client_cas().len(), 1);
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
    #[arg(long, env = "NUMARESOURCES_IDLE_CONNECTION_TIMEOUT", default_value = "90s", value_parser = parse_period)]
    idle_connection_timeout: GoDuration,
    /// Drop a connection whose client has read nothing of what it was sent for this long.
    #[arg(long, env = "NUMARESOURCES_WRITE_STALL_TIMEOUT", default_value = "60s", value_parser = parse_period)]
    write_stall_timeout: GoDuration,
    /// HTTP/2: ping an idle peer this often.
    #[arg(long, env = "NUMARESOURCES_HTTP2_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = parse_period)]
    http2_keepalive_interval: GoDuration,
    /// HTTP/2: close the connection when a ping goes unanswered this long.
    #[arg(long, env = "NUMARESOURCES_HTTP2_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = parse_period)]
    http2_keepalive_timeout: GoDuration,
    /// Connections one client address may hold at once; more are closed on accept.
    #[arg(long, env = "NUMARESOURCES_MAX_CONNECTIONS_PER_CLIENT", default_value_t = numaresources_certs::DEFAULT_MAX_CONNECTIONS_PER_CLIENT)]
    max_connections_per_client: usize,
}

impl ConnectionFlags {
    /// The listener's options.
    pub fn serve_options(&self) -> ServeOptions {
        let std = |d: GoDuration, default: Duration| d.to_std().unwrap_or(default);
        ServeOptions::default()
            .idle_timeout(std(self.idle_connection_timeout, numaresources_certs::DEFAULT_IDLE_TIMEOUT))
            .write_stall_timeout(std(self.write_stall_timeout, numaresources_certs::DEFAULT_WRITE_STALL_TIMEOUT))
            .http2_keep_alive(
                std(self.http2_keepalive_interval, numaresources_certs::DEFAULT_HTTP2_KEEP_ALIVE_INTERVAL),
                std(self.http2_keepalive_timeout, numaresources_certs::DEFAULT_HTTP2_KEEP_ALIVE_TIMEOUT),
            )
            .max_connections_per_client(self.max_connections_per_client)
    }
}
