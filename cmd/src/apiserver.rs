//! `numaresources apiserver`: the aggregated NodeResourceTopology API server, as deployed behind
//! an `APIService`. Authentication and authorization are delegated to kube-apiserver; serving
//! certificates come from the OLM-mounted files (or any other mount) and are hot-reloaded, or are
//! generated into `--cert-dir` when no files are given.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use numaresources_api::GoDuration;
use numaresources_apiserver::auth::{Auth, Delegated, RequestHeaderConfig, Standalone};
use numaresources_apiserver::{AppState, Store, router};
use numaresources_certs::{
    CaBundle, ClientCaVerifier, ReloadingCertificate, ServerConfigBuilder, WatchOptions, ensure_self_signed, serve,
};

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
    #[arg(long, default_value = "/apiserver.local.config/certificates/apiserver.crt")]
    tls_cert_file: PathBuf,
    /// Serving key (PEM: PKCS#8, PKCS#1 or SEC1). The default is where OLM mounts it.
    #[arg(long, default_value = "/apiserver.local.config/certificates/apiserver.key")]
    tls_private_key_file: PathBuf,
    /// When the certificate files do not exist: generate a self-signed pair here.
    #[arg(long, default_value = "/tmp/numaresources-apiserver")]
    cert_dir: PathBuf,
    /// Names the generated certificate covers (e.g. `numaresources-apiserver.numaresources.svc`).
    #[arg(long, value_delimiter = ',')]
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
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-User")]
    requestheader_username_headers: Vec<String>,
    /// Headers naming the user's groups.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Group")]
    requestheader_group_headers: Vec<String>,
    /// Prefixes of headers carrying extra user attributes.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Extra-")]
    requestheader_extra_headers_prefix: Vec<String>,
    /// Headers naming the user's uid.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Uid")]
    requestheader_uid_headers: Vec<String>,
    /// Standalone mode (no kube-apiserver): static bearer tokens, kube-apiserver's CSV format
    /// `token,user,uid,"group1,group2"`. Members of `system:masters` may write; every other
    /// authenticated user may read.
    #[arg(long, env = "NUMARESOURCES_APISERVER_TOKEN_AUTH_FILE")]
    token_auth_file: Option<PathBuf>,
    /// Standalone mode: accept client certificates issued by this CA (CN is the user, O the groups).
    #[arg(long, env = "NUMARESOURCES_APISERVER_CLIENT_CA_FILE")]
    client_ca_file: Option<PathBuf>,
    /// The authentication ConfigMap is watched; this is how often it is re-read as well, in case
    /// a watch stalls unnoticed.
    #[arg(long, default_value = "5m", value_parser = parse_period)]
    authentication_config_refresh: GoDuration,
    /// After a start, `/readyz` waits until every Node has reported its topology, or this long at
    /// most (an empty store makes every node look unconstrained to the scheduler).
    #[arg(long, default_value = "60s", value_parser = parse_period)]
    store_warmup: GoDuration,
    /// How many changes the watch history keeps for resuming watches.
    #[arg(long, default_value_t = numaresources_apiserver::store::DEFAULT_HISTORY)]
    watch_history: usize,
}

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

async fn serve_api(args: ApiserverArgs) -> anyhow::Result<()> {
    let (cert, key) = serving_files(&args)?;
    let certificate = ReloadingCertificate::load(&cert, &key)?;
    let _watcher = certificate.watch(WatchOptions::default())?;
    let standalone = standalone(&args)?;
    let client_cas = Arc::new(ClientCaVerifier::new(&standalone.as_ref().map(|s| s.client_cas()).unwrap_or_default())?);
    let tls = ServerConfigBuilder::new(Arc::new(certificate)).client_cas(client_cas.clone()).build()?;

    let mut state = AppState::new(
        Arc::new(Store::new(args.watch_history)),
        env!("CARGO_PKG_VERSION"),
        env!("NUMARESOURCES_GIT_COMMIT"),
    );
    let mut background = None;
    let mut nodes_task = None;
    let mut warm_task = None;
    match standalone {
        Some(standalone) => {
            tracing::warn!(
                "standalone mode: static tokens and client certificates, with a permissive authorizer \
                 (system:masters may write, every other authenticated user may read); not for a cluster"
            );
            state.auth = Auth::Standalone(Arc::new(standalone));
        }
        None => {
            let client = kube_client(args.kubeconfig.as_deref()).await?;
            state.readiness.set("store-warm", false);
            let nodes = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
            let listed = nodes.clone();
            nodes_task = Some(tokio::spawn(numaresources_apiserver::nodes::follow_node_deletions(
                client.clone(),
                state.store.clone(),
                move |count| listed.store(count, std::sync::atomic::Ordering::Relaxed),
            )));
            let (store, readiness) = (state.store.clone(), state.readiness.clone());
            let warmup = args.store_warmup.to_std().unwrap_or(Duration::from_secs(60));
            warm_task = Some(tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + warmup;
                while tokio::time::Instant::now() < deadline
                    && store.len() < nodes.load(std::sync::atomic::Ordering::Relaxed)
                {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                tracing::info!(objects = store.len(), "the store is warm");
                readiness.set("store-warm", true);
            }));
            let authentication_client = match &args.authentication_kubeconfig {
                Some(path) => kube_client(Some(path)).await?,
                None => client.clone(),
            };
            let mut delegated = Delegated::new(authentication_client, Some(client_cas));
            if let Some(path) = &args.authorization_kubeconfig {
                delegated = delegated.with_authorization_client(kube_client(Some(path)).await?);
            }
            if let Some(request_header) = request_header_flags(&args)? {
                delegated = delegated.with_request_header(request_header);
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
    let stopping = state.stopping.clone();
    let shutdown = async move {
        crate::shutdown::signal().await;
        stopping.cancel();
    };
    let served = serve(listener, tls, router(state), shutdown).await;
    for task in [background, nodes_task, warm_task].into_iter().flatten() {
        task.abort();
    }
    served.context("serving")
}

/// The front-proxy settings of the `--requestheader-*` flags, when a CA is given.
fn request_header_flags(args: &ApiserverArgs) -> anyhow::Result<Option<RequestHeaderConfig>> {
    let Some(path) = &args.requestheader_client_ca_file else { return Ok(None) };
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let client_ca = CaBundle::from_pem(&pem).with_context(|| path.display().to_string())?;
    Ok(Some(RequestHeaderConfig {
        client_ca: Some(client_ca),
        allowed_names: args.requestheader_allowed_names.clone(),
        username_headers: args.requestheader_username_headers.clone(),
        group_headers: args.requestheader_group_headers.clone(),
        extra_header_prefixes: args.requestheader_extra_headers_prefix.clone(),
        uid_headers: args.requestheader_uid_headers.clone(),
    }))
}

/// The standalone authenticator, when `--token-auth-file` or `--client-ca-file` is given.
fn standalone(args: &ApiserverArgs) -> anyhow::Result<Option<Standalone>> {
    if args.token_auth_file.is_none() && args.client_ca_file.is_none() {
        return Ok(None);
    }
    let mut standalone = match &args.token_auth_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Standalone::from_token_file(&text).with_context(|| path.display().to_string())?
        }
        None => Standalone::default(),
    };
    if let Some(path) = &args.client_ca_file {
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        standalone = standalone.with_client_ca(CaBundle::from_pem(&pem).with_context(|| path.display().to_string())?);
    }
    Ok(Some(standalone))
}

/// The configured certificate files, or a generated pair when they do not exist.
fn serving_files(args: &ApiserverArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
    if args.tls_cert_file.exists() || args.tls_private_key_file.exists() {
        return Ok((args.tls_cert_file.clone(), args.tls_private_key_file.clone()));
    }
    tracing::warn!(
        cert = %args.tls_cert_file.display(),
        "no serving certificate mounted; generating a self-signed one in {} (kube-apiserver will only reach us with insecureSkipTLSVerify)",
        args.cert_dir.display()
    );
    let files = ensure_self_signed(&args.cert_dir, &args.tls_sni_names)?;
    Ok((files.cert_path, files.key_path))
}

pub(crate) async fn kube_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await.context("finding a kube-apiserver (in-cluster or kubeconfig)")?,
    };
    Ok(kube::Client::try_from(config)?)
}
