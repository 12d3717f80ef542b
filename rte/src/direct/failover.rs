//! Which path a publish takes: our API server directly while that works, kube-apiserver
//! whenever it does not, and our server again after a growing delay.
//!
//! Every publish that may use the direct path tries it first, starting with a merge patch (a
//! cold replica refuses reads until the exporters have reported, but takes their writes). A failure that the other path
//! might not share (no connection, TLS, a timeout, 401/403, 429, a 5xx such as a cold
//! replica's 503) makes the same publish go through kube-apiserver at once, and the direct path
//! is not tried again before [`FailoverOptions::delay`] has passed: 10 s, doubling up to 5
//! minutes, each node spread by up to half as much again so a fleet that lost the server does
//! not come back in step. Answers about the object itself (invalid, its Node missing) would be
//! the same on both paths and are returned as they are.
//!
//! When kube-apiserver's path fails as well (a cold start: kube-apiserver cannot reach a
//! replica that is not Ready either), the roles swap: our server is tried at every publish (the
//! agent retries within seconds), and kube-apiserver only on the same growing delay, so a fleet
//! waiting for a cold server does not load kube-apiserver with publishes it cannot deliver.
//!
//! The switch is logged once at info in each direction; the retries between are at debug.
//! Whether the agent publishes through kube-apiserver is also published on a channel, which the
//! own-object watch follows ([`crate::agent::own_object::follow`]): it watches through
//! kube-apiserver while the agent publishes there, and not at all while the direct path works
//! (there the answers to the agent's own writes tell it that its object is gone).

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
use tokio::sync::watch;
use tokio::time::Instant;
use xxhash_rust::xxh64::xxh64;

use super::DirectServer;
use super::bearer::BearerFile;
use super::client::direct_client;
use crate::metrics::DirectPathMetrics;
use crate::publish::{KubePublisher, Outcome, PublishError, Publisher};

/// The first delay before the direct path is tried again after a failure.
pub const DIRECT_RETRY_INITIAL: Duration = Duration::from_secs(10);
/// The longest delay between two tries of the direct path (before the per-node spread).
pub const DIRECT_RETRY_MAX: Duration = Duration::from_secs(5 * 60);
/// How long one publish on the direct path may take before kube-apiserver is used instead (a
/// server that accepts connections but does not answer). A merge patch takes milliseconds.
pub const DIRECT_PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// The failover's timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverOptions {
    /// [`DIRECT_RETRY_INITIAL`].
    pub retry_initial: Duration,
    /// [`DIRECT_RETRY_MAX`].
    pub retry_max: Duration,
    /// [`DIRECT_PUBLISH_TIMEOUT`].
    pub publish_timeout: Duration,
}

impl Default for FailoverOptions {
    fn default() -> Self {
        Self {
            retry_initial: DIRECT_RETRY_INITIAL,
            retry_max: DIRECT_RETRY_MAX,
            publish_timeout: DIRECT_PUBLISH_TIMEOUT,
        }
    }
}

impl FailoverOptions {
    /// The delay after `failures` failed tries in a row of `node`: doubling from
    /// `retry_initial` to `retry_max`, then stretched by a fraction in [0, ½) fixed by the node
    /// and the count, so nodes spread out without a random source.
    pub fn delay(&self, failures: u32, node: &str) -> Duration {
        let doubled = self.retry_initial.saturating_mul(1 << failures.saturating_sub(1).min(16));
        let base = doubled.min(self.retry_max);
        let hash = xxh64(node.as_bytes(), u64::from(failures));
        // The top 16 bits as a fraction of ½.
        let spread = (hash >> 48) as f64 / f64::from(1u32 << 17);
        base.mul_f64(1.0 + spread)
    }
}

/// A change of path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// The path stays.
    Stay,
    /// The direct path failed: publishing through kube-apiserver from now on.
    ToKubeApiserver,
    /// The direct path works again.
    ToDirect,
}

/// The direct path's state: in use, or failed and when to try it again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    failures: u32,
    retry_at: Option<Instant>,
}

impl Route {
    /// True while the path is in use (it has not failed since it last worked).
    pub(crate) fn works(&self) -> bool {
        self.failures == 0
    }

    /// How many tries of the path failed in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// True when a publish at `now` may try the path (no failure, or its retry is due).
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|at| now >= at)
    }

    /// The direct path failed at `now`; it is tried again after `delay`.
    pub fn failed(&mut self, now: Instant, delay: Duration) -> Switch {
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(now + delay);
        if self.failures == 1 { Switch::ToKubeApiserver } else { Switch::Stay }
    }

    /// The direct path answered.
    pub(crate) fn worked(&mut self) -> Switch {
        let was_down = !self.works();
        *self = Self::default();
        if was_down { Switch::ToDirect } else { Switch::Stay }
    }
}

/// True when `error` on the direct path may not happen on kube-apiserver's, so the publish is
/// made there instead.
pub(crate) fn falls_back(error: &PublishError) -> bool {
    !matches!(error, PublishError::Invalid { .. } | PublishError::NodeNotFound(_))
}

struct State {
    route: Route,
    /// The path through kube-apiserver: while it fails too, our server is tried at every
    /// publish (the agent retries within seconds), and kube-apiserver only as often as
    /// [`FailoverOptions::delay`] says, so a fleet waiting for a cold API server does not
    /// hammer kube-apiserver with publishes it cannot deliver.
    fallback: Route,
    /// Why the path through kube-apiserver last failed.
    fallback_error: String,
    /// Built on first use and kept (it follows its CA file and token file by itself); not
    /// built while the CA bundle cannot be read.
    direct: Option<(KubePublisher, kube::Client)>,
}

/// Publishes to our API server directly, through kube-apiserver when that fails.
pub struct FailoverPublisher {
    server: DirectServer,
    node: String,
    bearer: Arc<BearerFile>,
    add_owner: bool,
    options: FailoverOptions,
    /// kube-apiserver's client (also used for the Node owner lookup: our server serves no Nodes).
    kube: kube::Client,
    fallback: KubePublisher,
    state: Mutex<State>,
    /// kube-apiserver's client while the agent publishes through it, none while it publishes
    /// directly: what the own-object watch uses.
    watched: watch::Sender<Option<kube::Client>>,
    metrics: DirectPathMetrics,
}

impl std::fmt::Debug for FailoverPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailoverPublisher")
            .field("server", &self.server)
            .field("node", &self.node)
            .field("route", &self.route())
            .finish_non_exhaustive()
    }
}

impl FailoverPublisher {
    /// Publishes `node`'s object to `server`, through `kube` (kube-apiserver) when it cannot.
    pub fn new(server: DirectServer, node: &str, kube: kube::Client, add_owner: bool) -> Self {
        Self::with_options(server, node, kube, add_owner, FailoverOptions::default())
    }

    /// [`Self::new`] with other timings.
    pub fn with_options(
        server: DirectServer,
        node: &str,
        kube: kube::Client,
        add_owner: bool,
        options: FailoverOptions,
    ) -> Self {
        let bearer = Arc::new(BearerFile::new(server.token_file.clone()));
        let (watched, _) = watch::channel(Some(kube.clone()));
        let publisher = Self {
            fallback: KubePublisher::new(kube.clone(), add_owner),
            server,
            node: node.to_owned(),
            bearer,
            add_owner,
            options,
            kube,
            state: Mutex::new(State {
                route: Route::default(),
                fallback: Route::default(),
                fallback_error: String::new(),
                direct: None,
            }),
            watched,
            metrics: DirectPathMetrics::default(),
        };
        // Built now so that no own-object watch starts when the direct path is there; a CA bundle
        // that is not there yet switches to kube-apiserver at once.
        if publisher.direct_if_due().is_some() {
            publisher.watched.send_replace(None);
        }
        publisher
    }

    /// Reports the path in use and the fallbacks to `metrics` (the agent's).
    #[must_use]
    pub fn with_metrics(mut self, metrics: DirectPathMetrics) -> Self {
        metrics.set_in_use(self.route().works());
        self.metrics = metrics;
        self
    }

    /// The client the own-object watch uses, changing with the path: kube-apiserver's while the
    /// agent publishes through it, none while it publishes directly.
    pub fn own_object_client(&self) -> watch::Receiver<Option<kube::Client>> {
        self.watched.subscribe()
    }

    /// The direct path's state.
    pub fn route(&self) -> Route {
        self.lock().route.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The direct publisher when a publish now should try it (building its client if needed):
    /// when its retry is due, or whenever kube-apiserver's path is failing too.
    fn direct_if_due(&self) -> Option<(KubePublisher, kube::Client)> {
        let mut state = self.lock();
        if !state.route.due(Instant::now()) && state.fallback.works() {
            return None;
        }
        if state.direct.is_none() {
            match direct_client(&self.server, Arc::clone(&self.bearer)) {
                Ok(client) => {
                    let publisher = KubePublisher::with_node_client(client.clone(), self.kube.clone(), self.add_owner)
                        .patch_first();
                    state.direct = Some((publisher, client));
                }
                Err(error) => {
                    self.failed(&mut state, &error.to_string());
                    return None;
                }
            }
        }
        state.direct.clone()
    }

    fn failed(&self, state: &mut State, reason: &str) {
        let delay = self.options.delay(state.route.failures().saturating_add(1), &self.node);
        match state.route.failed(Instant::now(), delay) {
            Switch::ToKubeApiserver => {
                tracing::info!(
                    server = %self.server.url,
                    %reason,
                    retry_in = ?delay,
                    "cannot publish to the NRT API server directly; publishing through kube-apiserver until it can"
                );
                self.watched.send_replace(Some(self.kube.clone()));
                self.metrics.set_in_use(false);
            }
            _ => {
                tracing::debug!(server = %self.server.url, %reason, retry_in = ?delay, "the NRT API server still cannot be used directly")
            }
        }
    }

    fn worked(&self) {
        let mut state = self.lock();
        if state.route.worked() == Switch::ToDirect {
            tracing::info!(server = %self.server.url, "publishing to the NRT API server directly again");
            self.metrics.set_in_use(true);
            self.watched.send_replace(None);
        }
    }

    async fn publish_inner(&self, desired: NodeResourceTopology) -> Result<Outcome, PublishError> {
        let mut direct_failure = None;
        if let Some((direct, _)) = self.direct_if_due() {
            let timeout = self.options.publish_timeout;
            let reason = match tokio::time::timeout(timeout, direct.publish(desired.clone())).await {
                Ok(Ok(outcome)) => {
                    self.worked();
                    return Ok(outcome);
                }
                Ok(Err(error)) if !falls_back(&error) => {
                    // The server answered about the object: the path works.
                    self.worked();
                    return Err(error);
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer within {timeout:?}"),
            };
            self.failed(&mut self.lock(), &reason);
            direct_failure = Some(reason);
        }
        {
            let state = self.lock();
            if !state.fallback.due(Instant::now()) {
                return Err(PublishError::NoPath {
                    direct: direct_failure.unwrap_or_else(|| "not tried".to_owned()),
                    fallback: state.fallback_error.clone(),
                });
            }
        }
        self.metrics.fell_back();
        // Bounded like the direct path: a kube-apiserver that takes the connection and never
        // answers must not hold the agent (kube's own read timeout is minutes).
        let timeout = self.options.publish_timeout;
        let published = match tokio::time::timeout(timeout, self.fallback.publish(desired)).await {
            Ok(published) => published,
            Err(_) => Err(PublishError::NoPath {
                direct: direct_failure.clone().unwrap_or_else(|| "not tried".to_owned()),
                fallback: format!("kube-apiserver did not answer within {timeout:?}"),
            }),
        };
        let mut state = self.lock();
        match &published {
            Err(error) if falls_back(error) => {
                let delay = self.options.delay(state.fallback.failures().saturating_add(1), &self.node);
                state.fallback.failed(Instant::now(), delay);
                state.fallback_error = error.to_string();
                tracing::debug!(%error, retry_in = ?delay, "publishing through kube-apiserver failed too");
            }
            _ => {
                state.fallback.worked();
            }
        }
        published
    }
}

impl Publisher for FailoverPublisher {
    fn publish(&self, desired: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send {
        self.publish_inner(desired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_switches_once_each_way_and_waits_before_trying_again() {
        let start = Instant::now();
        let mut route = Route::default();
        assert!(route.works() && route.due(start));
        assert_eq!(route.failed(start, Duration::from_secs(10)), Switch::ToKubeApiserver);
        assert!(!route.due(start + Duration::from_secs(9)));
        assert!(route.due(start + Duration::from_secs(10)));
        // Failing again while already on kube-apiserver is no switch.
        assert_eq!(route.failed(start + Duration::from_secs(10), Duration::from_secs(20)), Switch::Stay);
        assert_eq!(route.failures(), 2);
        assert!(!route.due(start + Duration::from_secs(29)));
        assert_eq!(route.worked(), Switch::ToDirect);
        assert!(route.works() && route.due(start));
        assert_eq!(route.worked(), Switch::Stay);
    }

    #[test]
    fn retries_double_to_the_cap_and_each_node_is_spread_by_less_than_half() {
        let options = FailoverOptions::default();
        for node in ["worker-0", "worker-1", "a-much-longer-node-name.example.com"] {
            for (failures, base) in [(1, 10), (2, 20), (3, 40), (6, 300), (40, 300), (u32::MAX, 300)] {
                let delay = options.delay(failures, node);
                let base = Duration::from_secs(base);
                assert!(delay >= base && delay < base.mul_f64(1.5), "{node} {failures}: {delay:?}");
            }
        }
        let spread: std::collections::BTreeSet<Duration> =
            (0..50).map(|n| options.delay(1, &format!("worker-{n}"))).collect();
        assert!(spread.len() > 40, "nodes come back at different times: {spread:?}");
    }

    /// A kube-apiserver that takes the connection and never answers holds a publish no longer
    /// than the direct path's bound (kube's own read timeout is minutes).
    #[tokio::test]
    async fn a_silent_kube_apiserver_holds_a_publish_no_longer_than_the_bound() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = silent.local_addr().unwrap();
        let _holding = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = silent.accept().await {
                held.push(connection);
            }
        });
        let kube = kube::Client::try_from(kube::Config::new(format!("http://{address}").parse().unwrap())).unwrap();
        // No CA bundle: the direct path cannot even be built, so the publish goes to kube-apiserver.
        let server = DirectServer {
            url: "https://127.0.0.1:1".parse().unwrap(),
            ca_file: "/nonexistent/ca.crt".into(),
            token_file: "/nonexistent/token".into(),
            tls_server_name: None,
            admin_url: None,
        };
        let options = FailoverOptions { publish_timeout: Duration::from_millis(200), ..FailoverOptions::default() };
        let publisher = FailoverPublisher::with_options(server, "worker-0", kube, false, options);
        let error = publisher.publish(NodeResourceTopology::new("worker-0")).await.unwrap_err();
        assert!(error.to_string().contains("kube-apiserver did not answer within 200ms"), "{error}");
    }

    #[test]
    fn only_answers_about_the_object_itself_stay_on_the_direct_path() {
        let api = |code: u16| PublishError::Api {
            verb: "patch",
            what: "noderesourcetopologies/worker-0".into(),
            code,
            reason: String::new(),
            message: String::new(),
        };
        for code in [401, 429, 500, 503, 504] {
            assert!(falls_back(&api(code)), "{code}");
        }
        let forbidden =
            PublishError::Forbidden { verb: "patch", what: String::new(), rbac: "", message: String::new() };
        assert!(falls_back(&forbidden));
        assert!(!falls_back(&PublishError::Invalid { what: String::new(), message: String::new() }));
        assert!(!falls_back(&PublishError::NodeNotFound("worker-0".into())));
    }
}
