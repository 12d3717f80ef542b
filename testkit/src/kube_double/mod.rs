//! A small, faithful stand-in for the parts of kube-apiserver our components talk to, each
//! answered as kube-apiserver answers it, every error as a metav1.Status:
//! - Leases (`coordination.k8s.io/v1`), the verbs leader election uses (`leases.rs`);
//! - the exporter pods, listed and watched from an event log (`pods.rs`);
//! - TokenReview, SubjectAccessReview and the `kube-system/extension-apiserver-authentication`
//!   ConfigMap, what a server in delegated mode asks (`reviews.rs`);
//! - the ServiceAccount token issuer's discovery document and public keys, and tokens signed
//!   with them (`issuer.rs`).
//!
//! One [`Router`] over one shared store serves all of it, reached two ways: in process
//! ([`KubeDouble::client`]: the router is the kube client's service, no socket), or on a loopback
//! port ([`KubeDouble::start`], for a process given [`KubeDouble::write_kubeconfig`]). Both see
//! the same state, so a test may stage pods and tokens through the handle while the server runs.
//!
//! Two failures can be staged. [`KubeDouble::set_available`]`(false)` answers 503 to every
//! request, as a kube-apiserver behind a load balancer with no healthy backend.
//! [`KubeDouble::set_down`]`(true)` fails every request of the in-process client as a refused
//! connection, as a kube-apiserver that is gone.
//!
//! Every write, of a Lease or a pod, takes its resourceVersion from one counter, as every object
//! in etcd takes the store's one revision.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tower::ServiceExt as _;

mod issuer;
mod leases;
mod pods;
mod reviews;

pub use issuer::ISSUER;
pub use pods::{EXPORTER_ACCOUNT, EXPORTER_NAMESPACE, EXPORTER_SELECTOR, exporter_pod_name};
pub use reviews::{AccessAsked, KUBE_AUDIENCE, OUR_AUDIENCE};

/// What the double holds, shared by its handles, its router and the clients built on it.
#[derive(Debug)]
struct Store {
    /// Whether reviewed pod-bound tokens carry the `node-name` extra (kube-apiserver 1.30+).
    names_nodes: bool,
    /// The last resourceVersion handed out.
    revision: AtomicU64,
    /// Every request answers 503 while set.
    unavailable: AtomicBool,
    /// Every request of the in-process client fails to connect while set.
    down: AtomicBool,
    leases: Mutex<leases::Leases>,
    pods: pods::Pods,
    tokens: Mutex<HashMap<String, reviews::Issued>>,
    /// Numbers the generated tokens and pod uids, so that each is unique.
    sequence: AtomicUsize,
    token_reviews: AtomicUsize,
    access_reviews: AtomicUsize,
    /// What each SubjectAccessReview asked, in order.
    access_asked: Mutex<Vec<reviews::AccessAsked>>,
    /// Users the SubjectAccessReview policy denies although it would allow them (an account
    /// whose RBAC binding is missing).
    denied_users: Mutex<std::collections::HashSet<String>>,
    /// Every request that reached the double.
    requests: AtomicUsize,
    /// The ServiceAccount token issuer's signing key.
    issuer: issuer::Issuer,
}

impl Store {
    /// The resourceVersion of the next write.
    fn next_revision(&self) -> u64 {
        self.revision.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn next_sequence(&self) -> usize {
        self.sequence.fetch_add(1, Ordering::SeqCst) + 1
    }
}

type Shared = Arc<Store>;

/// A handler that panicked cannot have left a map half-written (every change is one insert or
/// remove), so a poisoned lock is taken as it is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A handle on the double. Clones share it; once served, the listener stops with the last.
#[derive(Clone, Debug)]
pub struct KubeDouble {
    store: Shared,
    served: Option<Arc<Served>>,
}

/// The loopback listener's task. Only the handles hold it and the task holds only the store, so
/// dropping the last handle drops this and stops the task (were the task to hold a handle, the
/// two would keep each other alive for ever).
#[derive(Debug)]
struct Served {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KubeDouble {
    /// A double reached in process only; `names_nodes` as a kube-apiserver 1.30+ whose reviewed
    /// pod-bound tokens name their node, or an older one whose tokens name their pod only.
    pub fn new(names_nodes: bool) -> Self {
        let store = Store {
            names_nodes,
            revision: AtomicU64::new(0),
            unavailable: AtomicBool::new(false),
            down: AtomicBool::new(false),
            leases: Mutex::default(),
            pods: pods::Pods::default(),
            tokens: Mutex::default(),
            sequence: AtomicUsize::new(0),
            token_reviews: AtomicUsize::new(0),
            access_reviews: AtomicUsize::new(0),
            access_asked: Mutex::default(),
            denied_users: Mutex::default(),
            requests: AtomicUsize::new(0),
            issuer: issuer::Issuer::new(),
        };
        Self { store: Arc::new(store), served: None }
    }

    /// A double served on a free loopback port, whose tokens name their pod only.
    pub async fn start() -> std::io::Result<Self> {
        Self::new(false).serve().await
    }

    /// This double, also served on a free loopback port.
    pub async fn serve(self) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let app = router(self.store.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { served: Some(Arc::new(Served { address, task })), ..self })
    }

    /// How many requests reached the double so far, of any kind.
    pub fn requests(&self) -> usize {
        self.store.requests.load(Ordering::SeqCst)
    }

    /// Whether the double is served on a port ([`KubeDouble::start`], [`KubeDouble::serve`]).
    pub fn is_served(&self) -> bool {
        self.served.is_some()
    }

    fn address(&self) -> SocketAddr {
        self.served.as_ref().expect("the double is served (KubeDouble::start)").address
    }

    /// `http://127.0.0.1:<port>` of a served double.
    pub fn url(&self) -> String {
        format!("http://{}", self.address())
    }

    /// A kube-rs client calling the router in process, in namespace `default`.
    pub fn client(&self) -> kube::Client {
        let (store, app) = (self.store.clone(), router(self.store.clone()));
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (store, app) = (store.clone(), app.clone());
            async move {
                if store.down.load(Ordering::SeqCst) {
                    return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
                }
                Ok(app.oneshot(request).await.unwrap_or_else(|never| match never {}))
            }
        });
        kube::Client::new(service, "default")
    }

    /// A kube-rs client of a served double, built from its kubeconfig as a process builds its
    /// own (kube-rs' retries included).
    pub async fn http_client(&self) -> Result<kube::Client, kube::Error> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig(&self.url(), "default"))
            .map_err(kube::Error::InferKubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(kube::Error::InferKubeconfig)?;
        kube::Client::try_from(config)
    }

    /// Writes a kubeconfig that points at the served double, with `namespace` as the context's
    /// namespace and no credentials (the double authenticates nobody).
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) -> std::io::Result<()> {
        std::fs::write(path, kubeconfig(&self.url(), namespace))
    }

    /// Makes every request answer 503 (false) or be served again (true).
    pub fn set_available(&self, available: bool) {
        self.store.unavailable.store(!available, Ordering::SeqCst);
    }

    /// Makes every request of the in-process client fail as a refused connection (true), or
    /// reach the double again (false).
    pub fn set_down(&self, down: bool) {
        self.store.down.store(down, Ordering::SeqCst);
    }

    /// How many TokenReviews the double has been asked.
    pub fn token_reviews(&self) -> usize {
        self.store.token_reviews.load(Ordering::SeqCst)
    }

    /// How many SubjectAccessReviews the double has been asked.
    pub fn access_reviews(&self) -> usize {
        self.store.access_reviews.load(Ordering::SeqCst)
    }

    /// What each SubjectAccessReview asked, in order.
    pub fn access_asked(&self) -> Vec<AccessAsked> {
        lock(&self.store.access_asked).clone()
    }

    /// Denies every SubjectAccessReview of `user` from now on (its RBAC binding removed).
    pub fn deny_user(&self, user: &str) {
        lock(&self.store.denied_users).insert(user.to_owned());
    }
}

/// A kubeconfig for `server` with no credentials.
fn kubeconfig(server: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-double\n  cluster:\n    server: {server}\n\
         contexts:\n- name: kube-double\n  context: {{cluster: kube-double, user: kube-double, namespace: {namespace}}}\n\
         current-context: kube-double\nusers:\n- name: kube-double\n  user: {{}}\n"
    )
}

fn router(store: Shared) -> Router {
    Router::new()
        .merge(leases::router())
        .merge(pods::router())
        .merge(reviews::router())
        .merge(issuer::router())
        .fallback(not_found_path)
        .layer(axum::middleware::from_fn_with_state(store.clone(), availability))
        .with_state(store)
}

async fn availability(
    State(store): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    store.requests.fetch_add(1, Ordering::SeqCst);
    if store.unavailable.load(Ordering::SeqCst) {
        let message = "the server is currently unable to handle the request";
        return status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", message, None);
    }
    next.run(request).await
}

/// The query parameters of a list or a watch that the double reads (others are ignored).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListOptions {
    watch: Option<String>,
    resource_version: Option<String>,
    label_selector: Option<String>,
    /// The most items of a list page (kube-rs' watcher asks 500 at a time).
    limit: Option<usize>,
    /// Where the page starts: the last name of the page before.
    #[serde(rename = "continue")]
    continue_after: Option<String>,
}

impl ListOptions {
    /// Whether a watch is asked, `watch` spelt as Go's `strconv.ParseBool` accepts true.
    fn watching(&self) -> bool {
        matches!(self.watch.as_deref(), Some("1" | "t" | "T" | "true" | "TRUE" | "True"))
    }
}

/// The query of a list or watch; the message of the 400 a malformed one gets otherwise.
fn list_options(
    query: Result<Query<ListOptions>, axum::extract::rejection::QueryRejection>,
) -> Result<ListOptions, String> {
    query.map(|Query(options)| options).map_err(|rejection| rejection.body_text())
}

/// The object in a request body; the message of the 400 otherwise.
fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|error| format!("the body of the request was in an unknown format: {error}"))
}

/// A stream answer of JSON lines (a watch).
fn json_stream(
    lines: impl futures_util::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send + 'static,
) -> Response {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], axum::body::Body::from_stream(lines)).into_response()
}

async fn not_found_path() -> Response {
    status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource", None)
}

async fn method_not_allowed() -> Response {
    status(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        None,
    )
}

/// A metav1.Status failure; `details` names the object it is about, as kube-apiserver's do.
fn status(code: StatusCode, reason: &str, message: &str, details: Option<Value>) -> Response {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(details) = details {
        body["details"] = details;
    }
    (code, axum::Json(body)).into_response()
}
