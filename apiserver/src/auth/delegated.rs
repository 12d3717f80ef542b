//! Delegation to kube-apiserver: TokenReview for bearer tokens and SubjectAccessReview for every
//! request. A bearer token presented to us directly is accepted when it is meant for us or for
//! kube-apiserver itself, as every aggregated API server accepts it (k8s.io/apiserver's
//! delegating authenticator asks TokenReview without audiences; Prometheus scrapes
//! metrics-server with its ServiceAccount's ordinary token): the review first asks for our
//! audience ([`TOKEN_AUDIENCE`], the exporters' projected tokens, whose answer must name it in
//! `status.audiences`), then, for a token that is not ours, without audiences (kube-apiserver's
//! own). Which token it was changes nothing after that: the node restriction binds an exporter
//! by its identity, whatever audience its token had, and every request is authorized by
//! SubjectAccessReview.
//!
//! Answers are remembered as long as kube-apiserver remembers its own webhooks' ([`CacheLifetimes`]:
//! a token's identity 2 minutes, never past the token's expiry; an allowed decision 5 minutes,
//! a denied one 30 s), negative ones too (an unknown token, for 10 s at most), so a client
//! retrying a bad token does not become a TokenReview storm. A review that fails (kube-apiserver
//! unreachable, a 5xx) is not an answer and is never cached: the request fails (401 for
//! authentication, 503 for authorization) and the next request asks again, so the server
//! recovers as soon as kube-apiserver is back.
//!
//! The exporters cost kube-apiserver next to nothing: their tokens are verified here (see
//! [`super::jwt`]), and an exporter bound to its node through a live pod may get, create, update
//! and patch its own node's object once one SubjectAccessReview per ServiceAccount and verb
//! (not per pod, not per object) says RBAC grants its account that verb on every object; the
//! node restriction does the rest, as kube-apiserver's Node authorizer does for kubelets.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use numaresources_api::direct_write::TOKEN_AUDIENCE;
use numaresources_api::nrt::{GROUP, PLURAL};
use numaresources_runtime::tls::{CaBundle, ClientCaVerifier};

use super::authn::{AuthenticationConfig, RequestHeaderConfig, TokenDigest, UserInfo};
use super::issuer_keys::IssuerKeysSource;
use super::jwt::{self, ServiceAccountToken};
use super::node_restriction::NodeRestriction;
use crate::exporter_pods::{ExporterPods, Lookup};
use crate::request_info::Attributes;
use numaresources_api::nrt::VERSION;

/// How long reviews' answers are remembered (`--authentication-token-webhook-cache-ttl`,
/// `--authorization-webhook-cache-authorized-ttl`, `--authorization-webhook-cache-unauthorized-ttl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLifetimes {
    /// A token's identity (never past the token's own expiry).
    pub token: Duration,
    /// A decision that allowed.
    pub authorized: Duration,
    /// A decision that denied.
    pub unauthorized: Duration,
}

impl Default for CacheLifetimes {
    /// kube-apiserver's defaults for its own webhook token authenticator and authorizer.
    fn default() -> Self {
        Self {
            token: Duration::from_secs(120),
            authorized: Duration::from_secs(300),
            unauthorized: Duration::from_secs(30),
        }
    }
}

/// The longest a refused token is remembered: enough that a client retrying a bad token is not a
/// review storm, short enough that a token refused for a passing reason is soon asked about again.
const REFUSED_TOKEN_TTL: Duration = Duration::from_secs(10);

/// The verbs an exporter uses on its own node's object, decided here (see the module's notes).
const OWN_OBJECT_VERBS: [&str; 4] = ["get", "create", "update", "patch"];

/// A token's identity (None: refused) and when the token expires, if it says.
#[derive(Debug, Clone)]
struct TokenAnswer {
    user: Option<Arc<UserInfo>>,
    expires_at: Option<u64>,
}

/// How long each answer is remembered.
struct Lifetimes(CacheLifetimes);

impl moka::Expiry<TokenDigest, TokenAnswer> for Lifetimes {
    fn expire_after_create(&self, _: &TokenDigest, answer: &TokenAnswer, _: std::time::Instant) -> Option<Duration> {
        if answer.user.is_none() {
            return Some(self.0.token.min(REFUSED_TOKEN_TTL));
        }
        let left = answer.expires_at.map(|expires_at| Duration::from_secs(expires_at.saturating_sub(unix_now())));
        Some(left.map_or(self.0.token, |left| left.min(self.0.token)))
    }
}

impl moka::Expiry<DecisionKey, bool> for Lifetimes {
    fn expire_after_create(&self, _: &DecisionKey, allowed: &bool, _: std::time::Instant) -> Option<Duration> {
        Some(if *allowed { self.0.authorized } else { self.0.unauthorized })
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
/// Where kube-apiserver publishes the authentication settings for extension API servers.
const AUTH_CONFIGMAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");

/// What went wrong asking kube-apiserver.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DelegationError {
    /// The review request failed.
    #[error("{what} failed: {source}")]
    Request {
        /// Which review.
        what: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// How the caches hash their keys, on every request (a token's digest, an identity with its
/// groups and extras and the request's attributes): aHash is several times faster than SipHash
/// (the standard library's) and, keyed at random per process, as resistant to keys chosen to
/// collide.
type KeyHasher = ahash::RandomState;

/// What a SubjectAccessReview decision depends on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DecisionKey {
    user: Arc<UserInfo>,
    attributes: Attributes,
}

/// Delegated authentication and authorization.
pub struct Delegated {
    /// Reads the authentication ConfigMap and sends TokenReviews (`--authentication-kubeconfig`).
    client: kube::Client,
    /// Sends SubjectAccessReviews (`--authorization-kubeconfig`).
    authorization_client: kube::Client,
    /// Front-proxy settings from flags, which take precedence over the ConfigMap's.
    request_header_override: Option<RequestHeaderConfig>,
    /// The client-certificate CA from `--client-ca-file`, which takes precedence over the
    /// ConfigMap's `client-ca-file`.
    client_ca_override: Option<CaBundle>,
    config: RwLock<Option<Arc<AuthenticationConfig>>>,
    /// Identities by token digest, shared with the requests that present them.
    tokens: moka::sync::Cache<TokenDigest, TokenAnswer, KeyHasher>,
    /// Decisions by identity and request attributes (hashed as they are: no encoding per
    /// request).
    decisions: moka::sync::Cache<DecisionKey, bool, KeyHasher>,
    verifier: Option<Arc<ClientCaVerifier>>,
    node_restriction: NodeRestriction,
    /// Verifies the exporters' tokens in process (None: every token goes to TokenReview).
    local_tokens: Option<LocalTokens>,
}

/// What verifying an exporter's token in process needs: the issuer's keys, and the exporter pods
/// a token must be bound to (a pod this cache does not hold with the token's uid is left to
/// TokenReview, which asks etcd).
#[derive(Debug)]
struct LocalTokens {
    keys: Arc<IssuerKeysSource>,
    pods: Arc<ExporterPods>,
}

impl std::fmt::Debug for Delegated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delegated").finish_non_exhaustive()
    }
}

impl Delegated {
    /// Delegates to the cluster `client` talks to. `verifier` is the TLS client-certificate
    /// verifier whose CA bundles follow the ConfigMap.
    pub fn new(client: kube::Client, verifier: Option<Arc<ClientCaVerifier>>) -> Self {
        Self {
            authorization_client: client.clone(),
            client,
            request_header_override: None,
            client_ca_override: None,
            config: RwLock::new(None),
            tokens: token_cache(CacheLifetimes::default()),
            decisions: decision_cache(CacheLifetimes::default()),
            verifier,
            node_restriction: NodeRestriction::default(),
            local_tokens: None,
        }
    }

    /// Remembers answers as long as `lifetimes` says.
    #[must_use]
    pub fn with_cache_lifetimes(mut self, lifetimes: CacheLifetimes) -> Self {
        self.tokens = token_cache(lifetimes);
        self.decisions = decision_cache(lifetimes);
        self
    }

    /// Verifies tokens of the issuer `keys` reads, bound to a pod `pods` holds, in process:
    /// no TokenReview for them (see [`jwt`] for what is checked).
    #[must_use]
    pub fn with_local_tokens(mut self, keys: Arc<IssuerKeysSource>, pods: Arc<ExporterPods>) -> Self {
        self.local_tokens = Some(LocalTokens { keys, pods });
        self
    }

    /// Binds exporters as `restriction` says (default: the exporter service account of the
    /// default namespace, without a pod cache).
    #[must_use]
    pub fn with_node_restriction(mut self, restriction: NodeRestriction) -> Self {
        self.node_restriction = restriction;
        self
    }

    /// Who is node-bound.
    pub(crate) fn node_restriction(&self) -> &NodeRestriction {
        &self.node_restriction
    }

    /// Sends SubjectAccessReviews through `client` instead (`--authorization-kubeconfig`).
    #[must_use]
    pub fn with_authorization_client(mut self, client: kube::Client) -> Self {
        self.authorization_client = client;
        self
    }

    /// Uses these front-proxy settings (`--requestheader-*` flags) whatever the ConfigMap says,
    /// as kube-apiserver's delegated authentication does when the flags are given.
    #[must_use]
    pub fn with_request_header(mut self, request_header: RequestHeaderConfig) -> Self {
        self.request_header_override = Some(request_header);
        self
    }

    /// Authenticates client certificates signed by `client_ca` (`--client-ca-file`) whatever
    /// the ConfigMap's `client-ca-file` says, as kube-apiserver's delegated authentication does.
    #[must_use]
    pub fn with_client_ca(mut self, client_ca: CaBundle) -> Self {
        self.client_ca_override = Some(client_ca);
        self
    }

    /// The authentication settings, once loaded.
    pub fn config(&self) -> Option<Arc<AuthenticationConfig>> {
        self.config.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Installs new settings (and their CAs for new TLS connections).
    pub fn set_config(&self, mut config: AuthenticationConfig) {
        if let Some(request_header) = &self.request_header_override {
            config.request_header = request_header.clone();
        }
        if let Some(client_ca) = &self.client_ca_override {
            config.client_ca = Some(client_ca.clone());
        }
        if let Some(verifier) = &self.verifier
            && let Err(error) = verifier.replace(&config.bundles())
        {
            tracing::error!("installing the client CAs for TLS: {error}");
        }
        *self.config.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(config));
    }

    /// Reads `kube-system/extension-apiserver-authentication` once.
    pub(crate) async fn load_config(&self) -> Result<AuthenticationConfig, String> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), AUTH_CONFIGMAP.0);
        let configmap = api.get(AUTH_CONFIGMAP.1).await.map_err(|error| explain_configmap_error(&error))?;
        AuthenticationConfig::from_configmap(&configmap.data.unwrap_or_default()).map_err(|e| e.to_string())
    }

    /// Keeps the settings current: watches the ConfigMap, so a CA rotation on a control-plane
    /// upgrade reaches new connections at once, and re-reads it every `resync` as well, in case a
    /// watch stalls unnoticed. Failures keep the last good settings. Calls `ready(true)` once
    /// settings are in place.
    pub async fn keep_config_current(&self, resync: Duration, ready: impl Fn(bool)) {
        tokio::join!(self.watch_config(&ready), self.poll_config(resync, &ready));
    }

    /// Applies every change of the ConfigMap as the watch delivers it.
    async fn watch_config(&self, ready: &impl Fn(bool)) {
        use futures_util::StreamExt;
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event};
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), AUTH_CONFIGMAP.0);
        // The reader Role grants list/watch on this one name, which a field selector satisfies.
        let config = watcher::Config::default().fields(&format!("metadata.name={}", AUTH_CONFIGMAP.1));
        let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(configmap) | Event::InitApply(configmap)) => {
                    self.apply_configmap(&configmap, ready);
                }
                Ok(Event::Delete(_)) => tracing::error!(
                    "{}/{} was deleted; keeping the last settings until it is back",
                    AUTH_CONFIGMAP.0,
                    AUTH_CONFIGMAP.1
                ),
                Ok(Event::Init | Event::InitDone) => {}
                Err(error) => {
                    tracing::warn!("watching {}/{}: {error}; retrying", AUTH_CONFIGMAP.0, AUTH_CONFIGMAP.1);
                    ready(self.config().is_some());
                }
            }
        }
    }

    /// Re-reads the ConfigMap now and every `period`.
    async fn poll_config(&self, period: Duration, ready: &impl Fn(bool)) {
        loop {
            match self.load_config().await {
                Ok(config) => {
                    self.set_config(config);
                    ready(true);
                }
                Err(error) => {
                    tracing::error!("{error}");
                    ready(self.config().is_some());
                }
            }
            tokio::time::sleep(period).await;
        }
    }

    /// Installs the settings of one version of the ConfigMap, or keeps the last good ones.
    fn apply_configmap(&self, configmap: &ConfigMap, ready: &impl Fn(bool)) {
        let empty = BTreeMap::new();
        match AuthenticationConfig::from_configmap(configmap.data.as_ref().unwrap_or(&empty)) {
            Ok(config) => {
                tracing::info!(
                    resource_version = configmap.metadata.resource_version.as_deref().unwrap_or_default(),
                    "authentication settings loaded from {}/{}",
                    AUTH_CONFIGMAP.0,
                    AUTH_CONFIGMAP.1
                );
                self.set_config(config);
                ready(true);
            }
            Err(error) => {
                tracing::error!("{}/{}: {error}; keeping the last settings", AUTH_CONFIGMAP.0, AUTH_CONFIGMAP.1);
                ready(self.config().is_some());
            }
        }
    }

    /// The identity a bearer token stands for (`None`: not a valid token for our audience nor
    /// for kube-apiserver's), via TokenReview.
    pub(crate) async fn token_review(&self, token: &str) -> Result<Option<Arc<UserInfo>>, DelegationError> {
        let digest = TokenDigest::of(token);
        if let Some(cached) = self.tokens.get(&digest) {
            return Ok(cached.user);
        }
        let answer = match self.verify_locally(token).await {
            Some(judged) => judged,
            None => {
                let user = match self.review(token, Some(TOKEN_AUDIENCE)).await? {
                    Some(user) => Some(user),
                    None => self.review(token, None).await?,
                };
                TokenAnswer { user, expires_at: jwt::expiry_unverified(token) }
            }
        };
        self.tokens.insert(digest, answer.clone());
        Ok(answer.user)
    }

    /// The identity of an exporter's token verified in process (an answer without a user:
    /// refused, as TokenReview would refuse it); `None` when TokenReview must judge it (no keys yet, another
    /// issuer or audience, a pod this server does not follow or has not seen yet).
    async fn verify_locally(&self, token: &str) -> Option<TokenAnswer> {
        let local = self.local_tokens.as_ref()?;
        let keys = local.keys.keys_holding(&jwt::key_id(token)?).await?;
        match jwt::verify(&keys, token, TOKEN_AUDIENCE, unix_now()) {
            Ok(verified) => {
                let alive = verified.namespace == local.pods.namespace()
                    && matches!(local.pods.lookup(&verified.pod.name), Lookup::Found(pod) if pod.uid == verified.pod.uid);
                let user = Some(Arc::new(service_account_user(&verified)));
                alive.then_some(TokenAnswer { user, expires_at: Some(verified.expires_at) })
            }
            Err(refusal) if refusal.is_for_token_review() => None,
            Err(refusal) => {
                tracing::debug!(%refusal, "a ServiceAccount token refused without a TokenReview");
                Some(TokenAnswer { user: None, expires_at: None })
            }
        }
    }

    /// One TokenReview of `token` for `audience` (`None`: kube-apiserver's own audiences).
    async fn review(&self, token: &str, audience: Option<&str>) -> Result<Option<Arc<UserInfo>>, DelegationError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: audience.map(|audience| vec![audience.to_owned()]),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| DelegationError::Request { what: "TokenReview", source })?;
        let user = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            // Asked for ours, the answer must say it is ours (an audience-unaware
            // authenticator answers for kube-apiserver's).
            .filter(|s| audience.is_none_or(|ours| s.audiences.iter().flatten().any(|a| a == ours)))
            .and_then(|s| s.user)
            .map(|user| {
                UserInfo {
                    name: user.username.unwrap_or_default(),
                    uid: user.uid.unwrap_or_default(),
                    groups: user.groups.unwrap_or_default(),
                    extra: user.extra.unwrap_or_default().into_iter().collect::<BTreeMap<_, _>>(),
                }
                .authenticated()
            })
            .map(Arc::new);
        Ok(user)
    }

    /// Whether `user` may do `attributes`, via SubjectAccessReview.
    pub(crate) async fn authorize(
        &self,
        user: &Arc<UserInfo>,
        attributes: &Attributes,
    ) -> Result<bool, DelegationError> {
        let key = DecisionKey { user: user.clone(), attributes: attributes.clone() };
        if let Some(allowed) = self.decisions.get(&key) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview { spec: review_spec(user, attributes), ..SubjectAccessReview::default() };
        let api: Api<SubjectAccessReview> = Api::all(self.authorization_client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| DelegationError::Request { what: "SubjectAccessReview", source })?;
        let allowed = answer.status.is_some_and(|s| s.allowed && s.denied != Some(true));
        self.decisions.insert(key, allowed);
        Ok(allowed)
    }
}

impl Delegated {
    /// Whether `user` may do `attributes`; `exporter_node` is the node of an exporter bound to
    /// it through a pod the exporter-pod cache holds. Such an exporter's requests on its own
    /// node's object, with a verb its ServiceAccount holds on every object (one review per
    /// account and verb, remembered as any decision), need no review of their own; anything
    /// else is reviewed as any identity's request.
    pub(crate) async fn authorize_bound(
        &self,
        user: &Arc<UserInfo>,
        attributes: &Attributes,
        exporter_node: Option<&str>,
    ) -> Result<bool, DelegationError> {
        if let Some(verb) = exporter_node.and_then(|node| own_object_verb(attributes, node)) {
            // The account alone: neither the pod (its extras) nor the token (its uid) change
            // what RBAC grants.
            let account =
                Arc::new(UserInfo { name: user.name.clone(), groups: user.groups.clone(), ..UserInfo::default() });
            if self.authorize(&account, &Attributes::Resource { verb, name: None }).await? {
                return Ok(true);
            }
        }
        self.authorize(user, attributes).await
    }
}

/// The verb of a request on `node`'s own object that the exporter's account may be trusted with
/// (a create names no object: the node restriction holds its body to the node's name).
fn own_object_verb(attributes: &Attributes, node: &str) -> Option<&'static str> {
    match attributes {
        Attributes::Resource { verb, name: Some(name) } if name == node => {
            OWN_OBJECT_VERBS.contains(verb).then_some(*verb)
        }
        Attributes::Resource { verb: "create", name: None } => Some("create"),
        _ => None,
    }
}

fn token_cache(lifetimes: CacheLifetimes) -> moka::sync::Cache<TokenDigest, TokenAnswer, KeyHasher> {
    moka::sync::Cache::builder()
        .max_capacity(TOKEN_CACHE_ENTRIES)
        .expire_after(Lifetimes(lifetimes))
        .build_with_hasher(KeyHasher::new())
}

fn decision_cache(lifetimes: CacheLifetimes) -> moka::sync::Cache<DecisionKey, bool, KeyHasher> {
    moka::sync::Cache::builder()
        .max_capacity(DECISION_CACHE_ENTRIES)
        .expire_after(Lifetimes(lifetimes))
        .build_with_hasher(KeyHasher::new())
}

/// The most tokens remembered: a fleet's exporters (each a token, replaced hourly) with room.
const TOKEN_CACHE_ENTRIES: u64 = 20_000;
/// The most decisions remembered: every identity's requests but the exporters' own-object ones.
const DECISION_CACHE_ENTRIES: u64 = 100_000;

/// The identity kube-apiserver's TokenReview gives a pod-bound ServiceAccount token.
fn service_account_user(token: &ServiceAccountToken) -> UserInfo {
    use numaresources_api::direct_write::{EXTRA_NODE_NAME, EXTRA_POD_NAME, EXTRA_POD_UID};
    let mut extra = BTreeMap::from([
        (EXTRA_POD_NAME.to_owned(), vec![token.pod.name.clone()]),
        (EXTRA_POD_UID.to_owned(), vec![token.pod.uid.clone()]),
    ]);
    if let Some(node) = &token.node {
        extra.insert(EXTRA_NODE_NAME.to_owned(), vec![node.name.clone()]);
    }
    UserInfo {
        name: token.user_name(),
        uid: token.service_account.uid.clone(),
        groups: vec!["system:serviceaccounts".to_owned(), format!("system:serviceaccounts:{}", token.namespace)],
        extra,
    }
    .authenticated()
}

/// Says what to do about a failed read of the authentication ConfigMap.
fn explain_configmap_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "reading {}/{} is forbidden: bind the Role extension-apiserver-authentication-reader in kube-system to this server's ServiceAccount ({error})",
            AUTH_CONFIGMAP.0, AUTH_CONFIGMAP.1
        ),
        _ => format!("reading {}/{}: {error}", AUTH_CONFIGMAP.0, AUTH_CONFIGMAP.1),
    }
}

/// The SubjectAccessReview spec for a request.
pub(crate) fn review_spec(user: &UserInfo, attributes: &Attributes) -> SubjectAccessReviewSpec {
    let mut spec = SubjectAccessReviewSpec {
        user: Some(user.name.clone()),
        uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
        groups: Some(user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
        ..SubjectAccessReviewSpec::default()
    };
    match attributes {
        Attributes::Resource { verb, name } => {
            spec.resource_attributes = Some(ResourceAttributes {
                group: Some(GROUP.to_owned()),
                version: Some(VERSION.to_owned()),
                resource: Some(PLURAL.to_owned()),
                verb: Some((*verb).to_owned()),
                name: name.clone(),
                ..ResourceAttributes::default()
            });
        }
        Attributes::NonResource { verb, path } => {
            spec.non_resource_attributes =
                Some(NonResourceAttributes { path: Some(path.clone()), verb: Some(verb.clone()) });
        }
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_remembered_no_longer_than_it_lasts_and_a_refused_one_briefly() {
        let lifetimes = Lifetimes(CacheLifetimes::default());
        let digest = TokenDigest::of("a token");
        let lasts = |user: Option<Arc<UserInfo>>, expires_at| {
            let answer = TokenAnswer { user, expires_at };
            moka::Expiry::expire_after_create(&lifetimes, &digest, &answer, std::time::Instant::now()).unwrap()
        };
        let someone = || Some(Arc::new(UserInfo::default()));
        assert_eq!(lasts(someone(), None), Duration::from_secs(120), "an opaque token: the lifetime");
        assert_eq!(lasts(someone(), Some(unix_now() + 3600)), Duration::from_secs(120));
        let expiring = lasts(someone(), Some(unix_now() + 30));
        assert!(expiring <= Duration::from_secs(30), "{expiring:?}");
        assert_eq!(lasts(someone(), Some(unix_now() - 5)), Duration::ZERO, "expired already");
        assert_eq!(lasts(None, None), REFUSED_TOKEN_TTL);
    }

    #[test]
    fn only_the_own_objects_usual_verbs_are_decided_here() {
        let resource = |verb, name: Option<&str>| Attributes::Resource { verb, name: name.map(str::to_owned) };
        for verb in OWN_OBJECT_VERBS {
            assert_eq!(own_object_verb(&resource(verb, Some("worker-a")), "worker-a"), Some(verb));
            assert_eq!(own_object_verb(&resource(verb, Some("worker-b")), "worker-a"), None);
        }
        assert_eq!(
            own_object_verb(&resource("create", None), "worker-a"),
            Some("create"),
            "its body is held to the node"
        );
        for verb in ["delete", "list", "watch", "deletecollection"] {
            assert_eq!(own_object_verb(&resource(verb, Some("worker-a")), "worker-a"), None, "{verb}");
        }
        assert_eq!(own_object_verb(&resource("get", None), "worker-a"), None);
    }
}
