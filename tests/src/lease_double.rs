//! A small, faithful stand-in for kube-apiserver's `coordination.k8s.io/v1` Leases: the verbs
//! client-go's (and our) leader election uses, answered as kube-apiserver answers them, on plain
//! HTTP on loopback. It is a double of the Lease endpoint only, never of our own replication.
//!
//! What it does as kube-apiserver does (its generic registry store with the Lease strategy):
//! - `GET …/namespaces/{ns}/leases/{name}`: the Lease, or 404 `NotFound`;
//! - `POST …/namespaces/{ns}/leases`: 201 with `metadata.uid`, `creationTimestamp` and
//!   `resourceVersion` set by the server, or 409 `AlreadyExists`;
//! - `PUT …/namespaces/{ns}/leases/{name}`: 200, the resourceVersion bumped (one counter for every
//!   write, as etcd's revision), uid and creationTimestamp kept; 409 `Conflict` with the registry's
//!   optimistic-lock message when the body's resourceVersion is not the stored one; 422 `Invalid`
//!   without a resourceVersion (Leases do not allow unconditional updates); an absent Lease is
//!   created (Leases allow create-on-update);
//! - a body whose name or namespace disagrees with the URL: 400 `BadRequest`; unknown paths 404,
//!   other verbs 405, as metav1.Status bodies.
//!
//! Beside the Leases it lists the exporter pods an API server replica watches to decide when its
//! store is warm (`GET /api/v1/namespaces/{ns}/pods`, [`LeaseDouble::set_exporter_pods`]: each a
//! Running pod on its node; none by default, so a replica has no exporter to wait for), and holds
//! a watch of them open without events, as kube-apiserver does while nothing changes.
//!
//! For replicas in delegated mode it also answers TokenReviews (of the tokens a test issues:
//! [`LeaseDouble::issue_exporter_token`], [`LeaseDouble::issue_admin_token`]),
//! SubjectAccessReviews, and the authentication ConfigMap (`lease_double/delegation.rs`).
//!
//! Nothing needs discovery: kube-rs' `Api<Lease>` goes straight to these paths. Tests can read
//! the Lease as stored ([`LeaseDouble::lease`]) and make the endpoint unavailable
//! ([`LeaseDouble::set_available`]: every request then answers 503, as an unreachable
//! kube-apiserver behind a load balancer would), e.g. to watch a leader step down.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

mod delegation;

/// The group of Leases, as it appears in Status details and messages.
const GROUP: &str = "coordination.k8s.io";
/// The resource, as it appears in Status details (kube-apiserver puts the resource in `kind`).
const RESOURCE: &str = "leases";
/// The generic registry's optimistic-lock message.
const OPTIMISTIC_LOCK: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// The stored Leases and the revision counter.
#[derive(Debug, Default)]
struct Leases {
    by_key: BTreeMap<(String, String), Lease>,
    /// The last resourceVersion handed out (every write bumps it).
    revision: u64,
    /// Uids handed out so far (each is unique).
    uids: u64,
    unavailable: bool,
    /// The nodes that run a Running exporter pod.
    exporter_nodes: Vec<String>,
    /// Whether those exporters write to our server directly.
    exporters_write_directly: bool,
}

type Shared = Arc<Mutex<Leases>>;

fn lock(shared: &Shared) -> MutexGuard<'_, Leases> {
    // A panicking handler cannot leave the map half-written (every write is one insert).
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running Lease double; stops when dropped.
#[derive(Debug)]
pub struct LeaseDouble {
    address: SocketAddr,
    leases: Shared,
    tokens: delegation::Tokens,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LeaseDouble {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LeaseDouble {
    /// Serves on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let leases = Shared::default();
        let tokens = delegation::Tokens::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let app = router(leases.clone(), tokens.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { address, leases, tokens, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The Lease as stored, if any.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Lease> {
        lock(&self.leases).by_key.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// The holder of the Lease, if any (an empty holder, a released Lease, is None).
    pub fn holder(&self, namespace: &str, name: &str) -> Option<String> {
        let lease = self.lease(namespace, name)?;
        lease.spec?.holder_identity.filter(|holder| !holder.is_empty())
    }

    /// Serves one Running exporter pod on each of `nodes` from now on, as a stock exporter
    /// (publishing through kube-apiserver only).
    pub fn set_exporter_pods(&self, nodes: Vec<String>) {
        let mut leases = lock(&self.leases);
        leases.exporter_nodes = nodes;
        leases.exporters_write_directly = false;
    }

    /// [`LeaseDouble::set_exporter_pods`], each pod as the controllers render an exporter that
    /// writes to our server directly (a projected token of its audience).
    pub fn set_direct_exporter_pods(&self, nodes: Vec<String>) {
        let mut leases = lock(&self.leases);
        leases.exporter_nodes = nodes;
        leases.exporters_write_directly = true;
    }

    /// Issues `token` to the exporter pod on `node` (the one [`LeaseDouble::set_exporter_pods`]
    /// serves there), for our server's audience: a projected token of the exporters' service
    /// account bound to that pod, naming the pod and not the node (clusters before 1.30).
    pub fn issue_exporter_token(&self, token: &str, node: &str) {
        let (pod, uid) = exporter_pod(node);
        let issued = delegation::Issued::pod_bound(
            EXPORTER_NAMESPACE,
            EXPORTER_SERVICE_ACCOUNT,
            (&pod, &uid),
            numaresources_api::direct_write::TOKEN_AUDIENCE,
        );
        self.issue(token, issued);
    }

    /// Issues `token` to `user`, a member of `system:masters`, for our server's audience.
    pub fn issue_admin_token(&self, token: &str, user: &str) {
        self.issue(token, delegation::Issued::master(user, numaresources_api::direct_write::TOKEN_AUDIENCE));
    }

    /// Issues `token` to the ServiceAccount `account` in `namespace` for kube-apiserver's own
    /// audience: the ordinary token a pod (a Prometheus, say) has mounted.
    pub fn issue_kube_token(&self, token: &str, namespace: &str, account: &str) {
        self.issue(token, delegation::Issued::service_account(namespace, account, delegation::KUBE_AUDIENCE));
    }

    fn issue(&self, token: &str, issued: delegation::Issued) {
        self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(token.to_owned(), issued);
    }

    /// Makes every request answer 503 (false) or be served again (true).
    pub fn set_available(&self, available: bool) {
        lock(&self.leases).unavailable = !available;
    }

    /// Writes a kubeconfig that points at the double (no credentials: it authenticates nobody),
    /// with `namespace` as the context's namespace.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) -> std::io::Result<()> {
        std::fs::write(path, kubeconfig(&self.url(), namespace))
    }

    /// A kube-rs client for the double.
    pub async fn client(&self) -> Result<kube::Client, kube::Error> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig(&self.url(), "default"))
            .map_err(kube::Error::InferKubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(kube::Error::InferKubeconfig)?;
        kube::Client::try_from(config)
    }
}

/// A kubeconfig for `server` with no credentials.
fn kubeconfig(server: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lease-double\n  cluster:\n    server: {server}\n\
         contexts:\n- name: lease-double\n  context: {{cluster: lease-double, user: lease-double, namespace: {namespace}}}\n\
         current-context: lease-double\nusers:\n- name: lease-double\n  user: {{}}\n"
    )
}

/// The namespace and service account the replicas take the exporters' to be (their flags'
/// defaults).
const EXPORTER_NAMESPACE: &str = "numaresources";
const EXPORTER_SERVICE_ACCOUNT: &str = "numaresources-rte";

/// The name and uid of the exporter pod on `node`.
fn exporter_pod(node: &str) -> (String, String) {
    (format!("numaresources-rte-{node}"), format!("uid-{node}"))
}

fn router(leases: Shared, tokens: delegation::Tokens) -> Router {
    let base = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases";
    Router::new()
        .route(base, post(create).fallback(method_not_allowed))
        .route(&format!("{base}/{{name}}"), get(read).put(replace).fallback(method_not_allowed))
        .route("/api/v1/namespaces/{namespace}/pods", get(pods).fallback(method_not_allowed))
        .merge(delegation::router(tokens))
        .fallback(not_found_path)
        .layer(axum::middleware::from_fn_with_state(leases.clone(), availability))
        .with_state(leases)
}

/// The exporter pods (a list), or a watch of them that stays open with no event.
async fn pods(
    State(leases): State<Shared>,
    UrlPath(namespace): UrlPath<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    if query.unwrap_or_default().split('&').any(|pair| pair == "watch=true" || pair == "watch=1") {
        let quiet = futures_util::stream::pending::<Result<Bytes, std::convert::Infallible>>();
        return ([(axum::http::header::CONTENT_TYPE, "application/json")], axum::body::Body::from_stream(quiet))
            .into_response();
    }
    let leases = lock(&leases);
    let items: Vec<Value> = leases
        .exporter_nodes
        .iter()
        .map(|node| {
            let (name, uid) = exporter_pod(node);
            // An exporter that writes to our server directly carries a projected token of its
            // audience, as the controllers render it.
            let volumes = if leases.exporters_write_directly {
                json!([{"name": "nrt-server", "projected": {"sources": [{"serviceAccountToken": {
                    "path": "token", "expirationSeconds": 3600,
                    "audience": numaresources_api::direct_write::TOKEN_AUDIENCE}}]}}])
            } else {
                json!([])
            };
            json!({
                "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1",
                             "labels": {"app.kubernetes.io/component": "rte", "app.kubernetes.io/part-of": "numaresources"}},
                "spec": {"nodeName": node, "containers": [], "volumes": volumes},
                "status": {"phase": "Running"},
            })
        })
        .collect();
    axum::Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}))
        .into_response()
}

async fn availability(
    State(leases): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if lock(&leases).unavailable {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            None,
        );
    }
    next.run(request).await
}

async fn read(State(leases): State<Shared>, UrlPath((namespace, name)): UrlPath<(String, String)>) -> Response {
    match lock(&leases).by_key.get(&(namespace, name.clone())) {
        Some(lease) => (StatusCode::OK, axum::Json(typed(lease))).into_response(),
        None => not_found(&name),
    }
}

async fn create(State(leases): State<Shared>, UrlPath(namespace): UrlPath<String>, body: Bytes) -> Response {
    let mut lease = match decode(&body) {
        Ok(lease) => lease,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message, None),
    };
    let name = lease.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        let cause = ("metadata.name", "FieldValueRequired", "Required value: name or generateName is required");
        return invalid("", cause);
    }
    if let Some(response) = namespace_mismatch(&lease, &namespace) {
        return response;
    }
    if lease.metadata.resource_version.as_deref().is_some_and(|rv| !rv.is_empty()) {
        // What the storage layer answers (an internal error, not a validation error).
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "resourceVersion should not be set on objects to be created",
            None,
        );
    }
    let mut leases = lock(&leases);
    let key = (namespace.clone(), name.clone());
    if leases.by_key.contains_key(&key) {
        let message = format!("{RESOURCE}.{GROUP} \"{name}\" already exists");
        return status(StatusCode::CONFLICT, "AlreadyExists", &message, Some(&name));
    }
    store_new(&mut leases, key, &mut lease);
    (StatusCode::CREATED, axum::Json(typed(&lease))).into_response()
}

async fn replace(
    State(leases): State<Shared>,
    UrlPath((namespace, name)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let mut lease = match decode(&body) {
        Ok(lease) => lease,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message, None),
    };
    let in_body = lease.metadata.name.clone().unwrap_or_default();
    if in_body != name {
        let message = format!("the name of the object ({in_body}) does not match the name on the URL ({name})");
        return status(StatusCode::BAD_REQUEST, "BadRequest", &message, None);
    }
    if let Some(response) = namespace_mismatch(&lease, &namespace) {
        return response;
    }
    let mut leases = lock(&leases);
    let key = (namespace, name.clone());
    let Some(stored) = leases.by_key.get(&key) else {
        // Leases allow create-on-update: a PUT of an absent Lease creates it.
        store_new(&mut leases, key, &mut lease);
        return (StatusCode::CREATED, axum::Json(typed(&lease))).into_response();
    };
    let given = lease.metadata.resource_version.clone().unwrap_or_default();
    if given.is_empty() || given == "0" {
        let cause =
            ("metadata.resourceVersion", "FieldValueInvalid", "Invalid value: 0: must be specified for an update");
        return invalid(&name, cause);
    }
    if stored.metadata.resource_version.as_deref() != Some(given.as_str()) {
        let message = format!("Operation cannot be fulfilled on {RESOURCE}.{GROUP} \"{name}\": {OPTIMISTIC_LOCK}");
        return status(StatusCode::CONFLICT, "Conflict", &message, Some(&name));
    }
    if let Some(uid) = lease.metadata.uid.as_deref().filter(|uid| !uid.is_empty())
        && stored.metadata.uid.as_deref() != Some(uid)
    {
        let cause = ("metadata.uid", "FieldValueInvalid", &*format!("Invalid value: \"{uid}\": field is immutable"));
        return invalid(&name, cause);
    }
    lease.metadata.uid.clone_from(&stored.metadata.uid);
    lease.metadata.creation_timestamp.clone_from(&stored.metadata.creation_timestamp);
    lease.metadata.namespace.clone_from(&stored.metadata.namespace);
    leases.revision += 1;
    lease.metadata.resource_version = Some(leases.revision.to_string());
    leases.by_key.insert(key, lease.clone());
    (StatusCode::OK, axum::Json(typed(&lease))).into_response()
}

/// Sets what the server sets on a new object and stores it.
fn store_new(leases: &mut Leases, key: (String, String), lease: &mut Lease) {
    leases.revision += 1;
    leases.uids += 1;
    lease.metadata.namespace = Some(key.0.clone());
    lease.metadata.resource_version = Some(leases.revision.to_string());
    lease.metadata.uid = Some(uid(leases.uids));
    // metav1.Time has a resolution of one second.
    let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH);
    lease.metadata.creation_timestamp = Some(Time(now));
    leases.by_key.insert(key, lease.clone());
}

/// A uid in the UUID text form: a random prefix per double and a counter, so each is unique.
fn uid(sequence: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        random >> 32,
        (random >> 16) & 0xffff,
        random & 0xfff,
        (sequence >> 48) & 0xfff,
        sequence & 0xffff_ffff_ffff
    )
}

/// The Lease in a request body; the message of the 400 otherwise.
fn decode(body: &[u8]) -> Result<Lease, String> {
    serde_json::from_slice(body).map_err(|error| format!("the body of the request was in an unknown format: {error}"))
}

fn namespace_mismatch(lease: &Lease, namespace: &str) -> Option<Response> {
    let in_body = lease.metadata.namespace.as_deref().filter(|ns| !ns.is_empty())?;
    (in_body != namespace).then(|| {
        let message = "the namespace of the provided object does not match the namespace sent on the request";
        status(StatusCode::BAD_REQUEST, "BadRequest", message, None)
    })
}

/// The Lease with its apiVersion and kind, as the server writes it.
fn typed(lease: &Lease) -> Value {
    let mut value = serde_json::to_value(lease).unwrap_or(Value::Null);
    if let Some(object) = value.as_object_mut() {
        object.insert("apiVersion".to_owned(), json!("coordination.k8s.io/v1"));
        object.insert("kind".to_owned(), json!("Lease"));
    }
    value
}

fn not_found(name: &str) -> Response {
    let message = format!("{RESOURCE}.{GROUP} \"{name}\" not found");
    status(StatusCode::NOT_FOUND, "NotFound", &message, Some(name))
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

/// 422 `Invalid` with one field cause: `(field, reason, message)`.
fn invalid(name: &str, (field, reason, message): (&str, &str, &str)) -> Response {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{RESOURCE}.{GROUP} \"{name}\" is invalid: {field}: {message}"),
        "reason": "Invalid",
        "details": {
            "name": name,
            "group": GROUP,
            "kind": RESOURCE,
            "causes": [{"reason": reason, "message": message, "field": field}],
        },
        "code": 422,
    });
    (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(body)).into_response()
}

/// A metav1.Status failure; `name` (a Lease) adds the details kube-apiserver gives.
fn status(code: StatusCode, reason: &str, message: &str, name: Option<&str>) -> Response {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(name) = name {
        body["details"] = json!({"name": name, "group": GROUP, "kind": RESOURCE});
    }
    (code, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::Api;
    use kube::api::PostParams;

    use super::*;

    fn lease(name: &str, holder: &str) -> Lease {
        Lease {
            metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
            spec: Some(LeaseSpec { holder_identity: Some(holder.to_owned()), ..LeaseSpec::default() }),
        }
    }

    fn api_error(result: Result<Lease, kube::Error>) -> kube::core::Status {
        match result {
            Err(kube::Error::Api(status)) => *status,
            other => panic!("expected an API error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn create_get_replace_and_conflict_as_kube_apiserver_answers_them() {
        let double = LeaseDouble::start().await.unwrap();
        let api: Api<Lease> = Api::namespaced(double.client().await.unwrap(), "numaresources");

        let absent = api_error(api.get("leader").await);
        assert_eq!((absent.code, absent.reason.as_str()), (404, "NotFound"));
        assert_eq!(absent.message, "leases.coordination.k8s.io \"leader\" not found");
        assert_eq!(api.get_opt("leader").await.unwrap(), None);

        let created = api.create(&PostParams::default(), &lease("leader", "a")).await.unwrap();
        let meta = &created.metadata;
        assert_eq!(meta.namespace.as_deref(), Some("numaresources"));
        assert!(meta.uid.as_deref().is_some_and(|uid| uid.len() == 36), "{meta:?}");
        assert!(meta.creation_timestamp.is_some() && meta.resource_version.is_some(), "{meta:?}");
        let again = api_error(api.create(&PostParams::default(), &lease("leader", "b")).await);
        assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
        assert_eq!(again.message, "leases.coordination.k8s.io \"leader\" already exists");

        let read = api.get("leader").await.unwrap();
        assert_eq!(read, created);

        // A replace from what was read: the version moves on, uid and creation time stay.
        let mut renewed = read.clone();
        renewed.spec.as_mut().unwrap().holder_identity = Some("b".to_owned());
        let replaced = api.replace("leader", &PostParams::default(), &renewed).await.unwrap();
        assert_ne!(replaced.metadata.resource_version, read.metadata.resource_version);
        assert_eq!(replaced.metadata.uid, read.metadata.uid);
        assert_eq!(replaced.metadata.creation_timestamp, read.metadata.creation_timestamp);
        assert_eq!(double.holder("numaresources", "leader").as_deref(), Some("b"));

        // The same stale read again: the optimistic lock refuses it.
        let stale = api_error(api.replace("leader", &PostParams::default(), &renewed).await);
        assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
        assert_eq!(
            stale.message,
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"leader\": the object has been modified; \
             please apply your changes to the latest version and try again"
        );
        let details = stale.details.unwrap();
        assert_eq!((details.name.as_str(), details.group.as_str(), details.kind.as_str()), ("leader", GROUP, RESOURCE));
        assert_eq!(double.holder("numaresources", "leader").as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn an_update_needs_a_resource_version_and_the_names_of_the_url() {
        let double = LeaseDouble::start().await.unwrap();
        let api: Api<Lease> = Api::namespaced(double.client().await.unwrap(), "numaresources");
        api.create(&PostParams::default(), &lease("leader", "a")).await.unwrap();

        let unconditional = api_error(api.replace("leader", &PostParams::default(), &lease("leader", "b")).await);
        assert_eq!((unconditional.code, unconditional.reason.as_str()), (422, "Invalid"));
        assert!(unconditional.message.contains("metadata.resourceVersion"), "{unconditional:?}");

        let mut renamed = api.get("leader").await.unwrap();
        renamed.metadata.name = Some("other".to_owned());
        let mismatch = api_error(api.replace("leader", &PostParams::default(), &renamed).await);
        assert_eq!((mismatch.code, mismatch.reason.as_str()), (400, "BadRequest"));

        let elsewhere: Api<Lease> = Api::namespaced(double.client().await.unwrap(), "kube-system");
        let mut moved = lease("leader", "a");
        moved.metadata.namespace = Some("numaresources".to_owned());
        let wrong_namespace = api_error(elsewhere.create(&PostParams::default(), &moved).await);
        assert_eq!((wrong_namespace.code, wrong_namespace.reason.as_str()), (400, "BadRequest"));

        // Leases allow create-on-update; the other namespace's Lease is a different object.
        let created = elsewhere.replace("leader", &PostParams::default(), &lease("leader", "z")).await.unwrap();
        assert_eq!(created.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(double.holder("numaresources", "leader").as_deref(), Some("a"));
    }

    /// One raw HTTP/1.1 GET (kube-rs' client retries 503s on its own, which would hide them).
    async fn raw_get(double: &LeaseDouble, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(double.address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: double\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn an_unavailable_double_answers_503_until_it_is_back() {
        let double = LeaseDouble::start().await.unwrap();
        let path = "/apis/coordination.k8s.io/v1/namespaces/numaresources/leases/leader";
        double.set_available(false);
        let refused = raw_get(&double, path).await;
        assert!(
            refused.starts_with("HTTP/1.1 503") && refused.contains("\"reason\":\"ServiceUnavailable\""),
            "{refused}"
        );
        double.set_available(true);
        let absent = raw_get(&double, path).await;
        assert!(absent.starts_with("HTTP/1.1 404") && absent.contains("\"reason\":\"NotFound\""), "{absent}");
        let unknown = raw_get(&double, "/api/v1/namespaces").await;
        assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");
    }
}
