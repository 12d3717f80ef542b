//! The API server as a component: [`ApiServer::new`] from a checked [`Config`] and the
//! kube-apiserver clients, then [`ApiServer::router`] to serve, [`ApiServer::readiness`] for the
//! probes and [`ApiServer::run`] for its background work (the store's warm-up, the Node deletions,
//! the authentication ConfigMap) until shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use numaresources_runtime::tls::ClientCaVerifier;
use numaresources_runtime::{KubeClientError, kube_client};

use crate::auth::{Auth, Delegated, NodeRestriction};
use crate::config::{Authentication, Config};
use crate::exporter_pods::ExporterPods;
use crate::replication::{Replication, Role, STORE_WARM_CHECK};
use crate::{AppState, Readiness, Store};

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
    /// The clients delegated authentication needs, from `config`'s kubeconfigs (standalone
    /// mode: none).
    pub async fn connect(config: &Config) -> Result<Option<Self>, KubeClientError> {
        let Authentication::Delegated(delegation) = &config.authentication else { return Ok(None) };
        let main = kube_client(config.kubeconfig.as_deref()).await?;
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
    /// Delegated authentication without a client.
    #[error("delegated authentication needs a kube-apiserver client")]
    NoClient,
    /// The client CAs do not make a verifier.
    #[error("the client CAs: {0}")]
    ClientCas(#[from] numaresources_runtime::tls::Error),
    /// [`ApiServer::replicate`] after [`ApiServer::router`].
    #[error("replication must be set up before the router is made")]
    AlreadyServing,
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
    /// Keeps the authentication settings current, when delegated.
    delegated: Option<(Arc<Delegated>, Duration)>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").field("state", &self.state).finish_non_exhaustive()
    }
}

impl ApiServer {
    /// The server of `config`, its store empty, reporting `version` and `commit` on `/version`.
    /// `clients` are needed for delegated authentication (standalone mode needs none).
    pub fn new(config: Config, clients: Option<Clients>, version: &str, commit: &str) -> Result<Self, ServerError> {
        let store = Store::new(config.watch_history).with_history_bytes(config.watch_history_bytes);
        let mut state = AppState::new(Arc::new(store), version, commit);
        state.limits = config.limits;
        let exporters = Arc::new(ExporterPods::new(&config.exporters.namespace));
        let (client_cas, delegated, main_client) = match config.authentication {
            Authentication::Standalone(standalone) => {
                tracing::warn!(
                    "standalone mode: static tokens and client certificates, with a permissive authorizer \
                     (system:masters may write, every other authenticated user may read); not for a cluster"
                );
                let client_cas = Arc::new(ClientCaVerifier::new(&standalone.client_cas())?);
                state.auth = Auth::Standalone(Arc::new(standalone));
                (client_cas, None, None)
            }
            Authentication::Delegated(delegation) => {
                let clients = clients.ok_or(ServerError::NoClient)?;
                let client_cas = Arc::new(ClientCaVerifier::new(&[])?);
                // One watch of the exporter pods serves the warm-up and the node restriction.
                let restriction = NodeRestriction::new(&config.exporters.namespace, &config.exporters.service_account)
                    .with_pods(exporters.clone());
                let mut delegated =
                    Delegated::new(clients.authentication, Some(client_cas.clone())).with_node_restriction(restriction);
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
                (client_cas, Some((delegated, delegation.refresh)), Some(clients.main))
            }
        };
        Ok(Self {
            state: Arc::new(state),
            client_cas,
            exporters,
            exporter_selector: config.exporters.selector,
            store_warmup: config.store_warmup,
            warm_up_client: main_client.clone(),
            nodes_client: main_client,
            delegated,
        })
    }

    /// Makes this server one of several replicas. Replicas reach a kube-apiserver for the Lease
    /// (`client`), so standalone ones warm up from its exporter pods as a cluster's replicas do.
    pub fn replicate(&mut self, replication: Arc<Replication>, client: kube::Client) -> Result<(), ServerError> {
        let state = Arc::get_mut(&mut self.state).ok_or(ServerError::AlreadyServing)?;
        replication.metrics().register(state.metrics.registry_mut().ok_or(ServerError::AlreadyServing)?);
        state.replication = Some(replication);
        state.readiness.set(STORE_WARM_CHECK, false);
        self.warm_up_client.get_or_insert(client);
        Ok(())
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

    /// The named checks `/readyz` reports.
    pub fn readiness(&self) -> Arc<Readiness> {
        self.state.readiness.clone()
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
        if let Some((delegated, refresh)) = self.delegated {
            let readiness = state.readiness.clone();
            tasks.spawn(async move {
                delegated.keep_config_current(refresh, |ok| readiness.set(AUTHENTICATION_CONFIG_CHECK, ok)).await;
            });
        }
        shutdown.await;
        tasks.shutdown().await;
    }
}
