//! The admin surface of every component, on its plain-HTTP health port: `/healthz`, `/livez` and
//! `/readyz` in kube-apiserver's format, and `/metrics` from the process's one prometheus-client
//! [`Registry`].
//!
//! The format is kube-apiserver's (`k8s.io/apiserver/pkg/server/healthz`), so the same probes,
//! scripts and habits work on every component:
//! - every endpoint runs `ping` and then its named checks, in order; `/healthz` and `/livez` have
//!   `ping` only (the process answers), `/readyz` adds the component's [`Checks`];
//! - all pass: `200 ok`, or with `?verbose` (any value) one line per check, `[+]name ok`, then
//!   `readyz check passed`;
//! - one fails: `500` with every line, the failing ones as `[-]name failed: reason withheld`,
//!   then `readyz check failed` (the reason is logged at debug, since the endpoint is public);
//! - `?exclude=name` (repeatable) skips a check (`[+]name excluded: ok`); a name that matches
//!   none adds `warn: some health checks cannot be excluded: no matches for "name"`;
//! - `/readyz/<name>` runs one check: `ok`, or `500 internal server error: <reason>`.
//!
//! ```
//! use numaresources_runtime::admin::{self, Checks, Flag};
//!
//! let synced = Flag::default();
//! let readiness = Checks::new().with_flag("cache", &synced, "the cache has not listed yet");
//! let app: axum::Router = admin::router(readiness, Default::default());
//! synced.set(); // once the cache listed: /readyz answers 200
//! ```

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::StatusCode;
use http::header::{CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
/// The process's one metrics registry: each component registers its series in it.
pub use prometheus_client::registry::Registry;

/// The check every endpoint has: the process answers.
const PING: &str = "ping";

type CheckFn = dyn Fn() -> Result<(), String> + Send + Sync;

/// Named checks, reported in the order they were added. Each answers `Ok(())` or why not.
#[derive(Clone, Default)]
pub struct Checks {
    named: Vec<(Cow<'static, str>, Arc<CheckFn>)>,
}

impl std::fmt::Debug for Checks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.named.iter().map(|(name, _)| name)).finish()
    }
}

impl Checks {
    /// No check (the endpoint then only has `ping`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the check `name`.
    #[must_use]
    pub fn with(
        mut self,
        name: impl Into<Cow<'static, str>>,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.named.push((name.into(), Arc::new(check)));
        self
    }

    /// Adds the check `name`, passing once `flag` is set, else failing with `why_not`.
    #[must_use]
    pub fn with_flag(self, name: impl Into<Cow<'static, str>>, flag: &Flag, why_not: &'static str) -> Self {
        let flag = flag.clone();
        self.with(name, move || if flag.is_set() { Ok(()) } else { Err(why_not.to_owned()) })
    }

    /// Runs the check `name` (`None`: there is none).
    pub fn run(&self, name: &str) -> Option<Result<(), String>> {
        self.named.iter().find(|(named, _)| named == name).map(|(_, check)| check())
    }

    /// Runs every check: `Ok`, or the name and reason of each that failed.
    pub fn run_all(&self) -> Result<(), Vec<(String, String)>> {
        let failed: Vec<_> = self
            .named
            .iter()
            .filter_map(|(name, check)| check().err().map(|reason| (name.to_string(), reason)))
            .collect();
        if failed.is_empty() { Ok(()) } else { Err(failed) }
    }
}

/// A condition that becomes true once and stays true (a cache's first list, a first answer from
/// kube-apiserver). Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Flag(Arc<AtomicBool>);

impl Flag {
    /// Sets it, for good.
    pub fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether it was set.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
struct Admin {
    readiness: Checks,
    liveness: Checks,
    metrics: Arc<Registry>,
}

/// The probe endpoints, each also as `/<endpoint>/<check>`.
const ENDPOINTS: [&str; 3] = ["healthz", "livez", "readyz"];

/// `/healthz`, `/livez`, `/readyz` (with `readiness`), and `/metrics` (the exposition of
/// `metrics`, in OpenMetrics text).
pub fn router(readiness: Checks, metrics: Arc<Registry>) -> Router {
    routes().route("/metrics", get(exposition)).with_state(admin(readiness, metrics))
}

/// [`router`] over a registry of its own in which `register_metrics` registers the component's
/// series: what every component's recipe serves on its admin port.
pub fn component_router(readiness: Checks, register_metrics: impl FnOnce(&mut Registry)) -> Router {
    let mut registry = Registry::default();
    register_metrics(&mut registry);
    router(readiness, Arc::new(registry))
}

/// Registers in `registry` (a `&mut Registry`) each `"name": "help" => series`, a clone of the
/// series (prometheus-client's clones share their values): a component's metrics as a table, one
/// line each (rustfmt would spread each `register` call over five).
///
/// ```
/// use numaresources_runtime::admin::Registry;
/// use prometheus_client::metrics::counter::Counter;
///
/// let (scans, failures) = (Counter::<u64>::default(), Counter::<u64>::default());
/// let mut registry = Registry::default();
/// numaresources_runtime::register_series!(&mut registry,
///     "scans": "Scans started" => scans,
///     "scan_failures": "Scans that failed" => failures,
/// );
/// ```
#[macro_export]
macro_rules! register_series {
    ($registry:expr, $($name:literal: $help:literal => $series:expr),+ $(,)?) => {{
        let registry: &mut $crate::admin::Registry = $registry;
        $(registry.register($name, $help, ::std::clone::Clone::clone(&$series));)+
    }};
}

/// The probes of [`router`] without `/metrics`: for a component that also answers probes on its
/// TLS port.
pub fn probes(readiness: Checks) -> Router {
    routes().with_state(admin(readiness, Arc::default()))
}

fn routes() -> Router<Arc<Admin>> {
    ENDPOINTS.into_iter().fold(Router::new(), |router, name| {
        router
            .route(
                &format!("/{name}"),
                get(move |admin: State<Arc<Admin>>, query: Query<Vec<(String, String)>>| endpoint(name, admin, query)),
            )
            .route(
                &format!("/{name}/{{check}}"),
                get(move |admin: State<Arc<Admin>>, check: Path<String>| one(name, admin, check)),
            )
    })
}

fn admin(readiness: Checks, metrics: Arc<Registry>) -> Arc<Admin> {
    Arc::new(Admin { readiness, liveness: Checks::new(), metrics })
}

impl Admin {
    fn checks(&self, endpoint: &str) -> &Checks {
        if endpoint == "readyz" { &self.readiness } else { &self.liveness }
    }
}

/// Serves `app` over plain HTTP on `listener` until `shutdown` completes, in-flight requests
/// answered.
pub async fn serve_plain(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(address = %listener.local_addr()?, "serving /healthz, /livez, /readyz and /metrics over plain HTTP");
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// Binds a component's admin port and serves `app` there ([`serve_plain`]) in a task of its
/// own, until `shutdown`.
pub async fn spawn_plain(
    address: std::net::SocketAddr,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| std::io::Error::new(error.kind(), format!("listening on {address}: {error}")))?;
    Ok(tokio::spawn(serve_plain(listener, app, shutdown)))
}

async fn endpoint(
    name: &'static str,
    State(admin): State<Arc<Admin>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let verbose = query.iter().any(|(key, _)| key == "verbose");
    let mut excluded: BTreeSet<&str> =
        query.iter().filter(|(key, _)| key == "exclude").map(|(_, value)| value.as_str()).collect();
    let checks = admin.checks(name);
    let mut body = String::new();
    let mut failed = Vec::new();
    let ping: (Cow<'static, str>, Arc<CheckFn>) = (Cow::Borrowed(PING), Arc::new(|| Ok(())));
    for (check, run) in std::iter::once(&ping).chain(&checks.named) {
        if excluded.remove(check.as_ref()) {
            body.push_str(&format!("[+]{check} excluded: ok\n"));
            continue;
        }
        match run() {
            Ok(()) => body.push_str(&format!("[+]{check} ok\n")),
            Err(reason) => {
                body.push_str(&format!("[-]{check} failed: reason withheld\n"));
                failed.push(format!("{check}: {reason}"));
            }
        }
    }
    if !excluded.is_empty() {
        let names: Vec<String> = excluded.iter().map(|name| format!("{name:?}")).collect();
        body.push_str(&format!("warn: some health checks cannot be excluded: no matches for {}\n", names.join(",")));
    }
    if !failed.is_empty() {
        tracing::debug!(failed = %failed.join("; "), "{name} check failed");
        body.push_str(&format!("{name} check failed\n"));
        return text(StatusCode::INTERNAL_SERVER_ERROR, body);
    }
    if !verbose {
        return text(StatusCode::OK, "ok".to_owned());
    }
    body.push_str(&format!("{name} check passed\n"));
    text(StatusCode::OK, body)
}

async fn one(endpoint: &'static str, State(admin): State<Arc<Admin>>, Path(check): Path<String>) -> Response {
    let result = if check == PING { Some(Ok(())) } else { admin.checks(endpoint).run(&check) };
    match result {
        Some(Ok(())) => text(StatusCode::OK, "ok".to_owned()),
        Some(Err(reason)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("internal server error: {reason}\n")),
        None => text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned()),
    }
}

async fn exposition(State(admin): State<Arc<Admin>>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &admin.metrics) {
        Ok(()) => {
            ([(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
        }
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {error}\n")),
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (status, [(CONTENT_TYPE, "text/plain; charset=utf-8"), (X_CONTENT_TYPE_OPTIONS, "nosniff")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    async fn get(app: &Router, uri: &str) -> (u16, String) {
        let request = http::Request::get(uri).body(axum::body::Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    fn app() -> (Router, Flag) {
        let synced = Flag::default();
        let readiness = Checks::new().with("always", || Ok(())).with_flag("cache", &synced, "not listed yet");
        (router(readiness, Arc::default()), synced)
    }

    /// The answers of kube-apiserver's `healthz` package for the same checks and queries.
    #[tokio::test]
    async fn answers_as_kube_apiserver_does() {
        let (app, synced) = app();
        assert_eq!(
            get(&app, "/readyz").await,
            (500, "[+]ping ok\n[+]always ok\n[-]cache failed: reason withheld\nreadyz check failed\n".into())
        );
        assert_eq!(get(&app, "/readyz/cache").await, (500, "internal server error: not listed yet\n".into()));
        assert_eq!(get(&app, "/readyz/ping").await, (200, "ok".into()));
        assert_eq!(get(&app, "/readyz/nothing").await.0, 404);
        assert_eq!(get(&app, "/readyz?exclude=cache").await, (200, "ok".into()));
        assert_eq!(
            get(&app, "/readyz?verbose&exclude=cache&exclude=gone").await,
            (
                200,
                "[+]ping ok\n[+]always ok\n[+]cache excluded: ok\nwarn: some health checks cannot be excluded: no \
                 matches for \"gone\"\nreadyz check passed\n"
                    .into()
            )
        );
        assert_eq!(get(&app, "/livez").await, (200, "ok".into()), "liveness ignores readiness");
        assert_eq!(get(&app, "/healthz?verbose=false").await, (200, "[+]ping ok\nhealthz check passed\n".into()));
        assert_eq!(get(&app, "/livez/cache").await.0, 404, "not a liveness check");

        synced.set();
        assert_eq!(get(&app, "/readyz").await, (200, "ok".into()));
        assert_eq!(
            get(&app, "/readyz?verbose").await.1,
            "[+]ping ok\n[+]always ok\n[+]cache ok\nreadyz check passed\n"
        );
    }

    #[tokio::test]
    async fn metrics_are_the_registry_in_openmetrics_text() {
        let mut registry = Registry::with_prefix("test");
        let counter = Counter::<u64>::default();
        registry.register("things", "Things", counter.clone());
        counter.inc();
        let app = router(Checks::new(), Arc::new(registry));
        let request = http::Request::get("/metrics").body(axum::body::Body::empty()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers()[CONTENT_TYPE].to_str().unwrap().starts_with("application/openmetrics-text"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(body.contains("test_things_total 1\n") && body.ends_with("# EOF\n"), "{body}");
    }

    #[test]
    fn checks_run_by_name_and_together() {
        let flag = Flag::default();
        let checks = Checks::new().with_flag("a", &flag, "not yet").with("b", || Ok(()));
        assert_eq!(checks.run("a"), Some(Err("not yet".into())));
        assert_eq!(checks.run("c"), None);
        assert_eq!(checks.run_all(), Err(vec![("a".into(), "not yet".into())]));
        flag.clone().set();
        assert_eq!(checks.run_all(), Ok(()), "clones share the flag");
    }
}
