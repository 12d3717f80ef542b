//! The API server as a component, in the shape every component has: [`ApiServer::new`] from a
//! checked [`Config`] and the kube-apiserver clients, [`ApiServer::router`] to serve,
//! [`ApiServer::readiness`] and [`ApiServer::register_metrics`] for the admin port, and
//! [`ApiServer::run`] for its background work (the store's warm-up, the Node deletions, the
//! authentication ConfigMap) until shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use numaresources_runtime::admin::{Checks, Registry};
use numaresources_runtime::tls::ClientCaVerifier;
use numaresources_runtime::{KubeClientError, kube_client};

use crate::auth::issuer_keys::IssuerKeysSource;
use crate::auth::{Auth, Delegated, NodeRestriction};
use crate::config::{Authentication, Config};
use crate::exporter_pods::ExporterPods;
use crate::replication::{Replication, Role, STORE_WARM_CHECK};
use crate::{AppState, Store};

/// How often the ServiceAccount token issuer's keys are read again besides when a token names
/// a key they lack (kube-apiserver rotates them rarely, and new keys come in before they sign).
const ISSUER_KEYS_REFRESH: Duration = Duration::from_secs(600);

/// The readiness check that passes once the authentication ConfigMap has been read.
pub(crate) const AUTHENTICATION_CONFIG_CHECK: &str = "authentication-config";

/// The kube-apiserver clients of delegated authentication.
#[derive(Clone)]
pub struct Clients {
    /// Nodes, exporter pods (and the Lease, for replication).
    pub main: kube::Client,
    /// TokenReviews and the authentication ConfigMap.
    pub authentication: kube::Client,
    /// SubjectAccessReviews (None: `authentication`'s).
    pub authorization: Option<kube::Client>,
}

impl Clients {
    /// The clients `config` needs, from its kubeconfigs: delegated authentication's, or a
    /// replica's Lease client (a standalone replica uses `main` alone). A standalone server that
    /// is the only replica needs none.
    pub async fn connect(config: &Config) -> Result<Option<Self>, KubeClientError> {
        let delegation = match &config.authentication {
            Authentication::Delegated(delegation) => Some(delegation),
            Authentication::Standalone(_) if config.replication.is_some() => None,
            Authentication::Standalone(_) => return Ok(None),
        };
        let main = kube_client(config.kubeconfig.as_deref()).await?;
        let Some(delegation) = delegation else {
            return Ok(Some(Self { authentication: main.clone(), main, authorization: None }));
        };
        let authentication = match &delegation.authentication_kubeconfig {
            Some(path) => kube_client(Some(path)).await?,
            None => main.clone(),
        };
        let authorization = match &delegation.authorization_kubeconfig {
            Some(path) => Some(kube_client(Some(path)).await?),
            None => None,
        };
        Ok(Some(Self { main, authentication, authorization }))
    }
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").finish_non_exhaustive()
    }
}

/// Why the server cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Delegated authentication or replication without a client.
    #[error("delegated authentication and replication need a kube-apiserver client")]
    NoClient,
    /// The client CAs do not make a verifier.
    #[error("the client CAs: {0}")]
    ClientCas(#[from] numaresources_runtime::tls::Error),
}

/// The API server of one [`Config`].
pub struct ApiServer {
    state: Arc<AppState>,
    client_cas: Arc<ClientCaVerifier>,
    exporters: Arc<ExporterPods>,
    exporter_selector: String,
    store_warmup: Duration,
    /// Follows the exporter pods for the warm-up (and the node restriction), when set.
    warm_up_client: Option<kube::Client>,
    /// Follows Node deletions, when set.
    nodes_client: Option<kube::Client>,
    /// Keeps the authentication settings and the token issuer's keys current, when delegated.
    delegated: Option<(Arc<Delegated>, Duration, Arc<IssuerKeysSource>)>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").field("state", &self.state).finish_non_exhaustive()
    }
}

impl ApiServer {
    /// The server of `config`, its store empty. `clients` are needed for delegated
    /// authentication and for replication ([`Clients::connect`]); a standalone server that is the
    /// only replica needs none.
    pub fn new(config: Config, clients: Option<Clients>) -> Result<Self, ServerError> {
        let store = Arc::new(Store::new(config.watch_history).with_history_bytes(config.watch_history_bytes));
        let mut state = AppState::new(store.clone(), &config.build.version, &config.build.commit);
        state.limits = config.limits;
        let exporters = Arc::new(ExporterPods::new(&config.exporters.namespace));
        let main_client = clients.as_ref().map(|clients| clients.main.clone());
        let (client_cas, delegated) = match config.authentication {
            Authentication::Standalone(standalone) => {
                tracing::warn!(
                    "standalone mode: static tokens and client certificates, with a permissive authorizer \
                     (system:masters may write, every other authenticated user may read); not for a cluster"
                );
                let client_cas = Arc::new(ClientCaVerifier::new(&standalone.client_cas())?);
                state.auth = Auth::Standalone(Arc::new(standalone));
                (client_cas, None)
            }
            Authentication::Delegated(delegation) => {
                let clients = clients.ok_or(ServerError::NoClient)?;
                let client_cas = Arc::new(ClientCaVerifier::new(&[])?);
                // One watch of the exporter pods serves the warm-up and the node restriction.
                let restriction = NodeRestriction::new(&config.exporters.namespace, &config.exporters.service_account)
                    .with_pods(exporters.clone());
                // The exporters' tokens, verified in process against the issuer's keys.
                let issuer_keys = Arc::new(IssuerKeysSource::new(clients.authentication.clone()));
                let mut delegated = Delegated::new(clients.authentication, Some(client_cas.clone()))
                    .with_node_restriction(restriction)
                    .with_local_tokens(issuer_keys.clone(), exporters.clone())
                    .with_cache_lifetimes(delegation.cache);
                if let Some(client) = clients.authorization {
                    delegated = delegated.with_authorization_client(client);
                }
                if let Some(request_header) = delegation.request_header {
                    delegated = delegated.with_request_header(request_header);
                }
                if let Some(client_ca) = delegation.client_ca {
                    delegated = delegated.with_client_ca(client_ca);
                }
                let delegated = Arc::new(delegated);
                state.auth = Auth::Delegated(delegated.clone());
                state.readiness.set(AUTHENTICATION_CONFIG_CHECK, false);
                state.readiness.set(STORE_WARM_CHECK, false);
                (client_cas, Some((delegated, delegation.refresh, issuer_keys)))
            }
        };
        // Replicas reach a kube-apiserver for the Lease, so standalone ones warm up from the
        // exporter pods as a cluster's replicas do.
        let warm_up_client = match (&config.replication, &delegated) {
            (Some(_), _) => Some(main_client.clone().ok_or(ServerError::NoClient)?),
            (None, Some(_)) => main_client.clone(),
            (None, None) => None,
        };
        let nodes_client = delegated.as_ref().and(main_client);
        if let Some(replica) = config.replication {
            let replication =
                Replication::new(replica.identity, replica.advertise, replica.tls, store, state.readiness.clone());
            state.replication = Some(Arc::new(replication));
            state.readiness.set(STORE_WARM_CHECK, false);
        }
        Ok(Self {
            state: Arc::new(state.with_metrics_registry()),
            client_cas,
            exporters,
            exporter_selector: config.exporters.selector,
            store_warmup: config.store_warmup,
            warm_up_client,
            nodes_client,
            delegated,
        })
    }

    /// What handlers share (the replication's peer listener serves it too).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// The CAs client certificates are verified against (delegated authentication replaces them
    /// as kube-apiserver's change): the TLS listener's.
    pub fn client_cas(&self) -> Arc<ClientCaVerifier> {
        self.client_cas.clone()
    }

    /// Every route the server answers.
    pub fn router(&self) -> Router {
        crate::router(self.state.clone())
    }

    /// The replication of this replica, when it is one of several.
    pub fn replication(&self) -> Option<Arc<Replication>> {
        self.state.replication.clone()
    }

    /// The named checks `/readyz` reports: the store warm, and when they apply, the
    /// authentication settings read and the replica in sync.
    pub fn readiness(&self) -> Checks {
        self.state.readiness.checks()
    }

    /// Registers the server's series (`numaresources_apiserver_*`) in the process's registry.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.state.register_metrics(registry);
    }

    /// The admin port's routes, over plain HTTP without credentials as every component serves
    /// them: the probes of [`ApiServer::readiness`], `/metrics` (a registry of its own holding
    /// [`ApiServer::register_metrics`]'s series), and the exporters' question whether their
    /// node's object is held. Probes and scrapes need no token there (through the HTTPS port, a
    /// scrape needs one that kube-apiserver's SubjectAccessReview allows `get` on `/metrics`).
    pub fn admin_router(&self) -> Router {
        numaresources_runtime::admin::component_router(self.readiness(), |registry| self.register_metrics(registry))
            .merge(crate::held::router(self.state.clone()))
    }
    /// Runs the background work until `shutdown` completes: the warm-up (the exporter pods
    /// followed, the store-warm check held until each has reported), the Node deletions, the
    /// authentication ConfigMap.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut tasks = tokio::task::JoinSet::new();
        let state = &self.state;
        if let Some(client) = self.warm_up_client {
            tasks.spawn(crate::warmup::follow_and_warm_up(
                client,
                self.exporter_selector,
                state.store.clone(),
                state.readiness.clone(),
                self.exporters,
                self.store_warmup,
            ));
        }
        if let Some(client) = self.nodes_client {
            let replication = state.replication.clone();
            let writable = move || replication.as_ref().is_none_or(|r| r.role() == Role::Leader);
            tasks.spawn(crate::nodes::follow_node_deletions(client, state.store.clone(), writable));
        }
        if let Some((delegated, refresh, issuer_keys)) = self.delegated {
            let readiness = state.readiness.clone();
            tasks.spawn(async move {
                delegated.keep_config_current(refresh, |ok| readiness.set(AUTHENTICATION_CONFIG_CHECK, ok)).await;
            });
            tasks.spawn(async move { issuer_keys.keep_current(ISSUER_KEYS_REFRESH).await });
        }
        shutdown.await;
        tasks.shutdown().await;
    }
}
