//! Leases (`coordination.k8s.io/v1`): the verbs client-go's (and our) leader election uses,
//! answered as kube-apiserver's generic registry store with the Lease strategy answers them:
//! - `GET …/namespaces/{ns}/leases/{name}`: the Lease, or 404 `NotFound`;
//! - `POST …/namespaces/{ns}/leases`: 201 with `metadata.uid`, `creationTimestamp` and
//!   `resourceVersion` set by the server, or 409 `AlreadyExists`;
//! - `PUT …/namespaces/{ns}/leases/{name}`: 200, the resourceVersion bumped, uid and
//!   creationTimestamp kept; 409 `Conflict` with the registry's optimistic-lock message when the
//!   body's resourceVersion is not the stored one; 422 `Invalid` without a resourceVersion
//!   (Leases do not allow unconditional updates); an absent Lease is created (Leases allow
//!   create-on-update);
//! - a body whose name or namespace disagrees with the URL: 400 `BadRequest`; other verbs 405.
//!
//! Nothing needs discovery: kube-rs' `Api<Lease>` goes straight to these paths. Tests read the
//! Lease as stored with [`KubeDouble::lease`] and [`KubeDouble::holder`].

use std::collections::BTreeMap;

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

use super::{KubeDouble, Shared, Store, decode, lock, method_not_allowed, status};

/// The group of Leases, as it appears in Status details and messages.
const GROUP: &str = "coordination.k8s.io";
/// The resource, as it appears in Status details (kube-apiserver puts the resource in `kind`).
const RESOURCE: &str = "leases";
/// The generic registry's optimistic-lock message.
const OPTIMISTIC_LOCK: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// The stored Leases by (namespace, name).
#[derive(Debug, Default)]
pub(super) struct Leases {
    by_key: BTreeMap<(String, String), Lease>,
    /// Uids handed out so far (each is unique).
    uids: u64,
}

impl KubeDouble {
    /// The Lease as stored, if any.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Lease> {
        lock(&self.store.leases).by_key.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// The holder of the Lease, if any (an empty holder, a released Lease, is None).
    pub fn holder(&self, namespace: &str, name: &str) -> Option<String> {
        let lease = self.lease(namespace, name)?;
        lease.spec?.holder_identity.filter(|holder| !holder.is_empty())
    }
}

pub(super) fn router() -> Router<Shared> {
    let base = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases";
    Router::new()
        .route(base, post(create).fallback(method_not_allowed))
        .route(&format!("{base}/{{name}}"), get(read).put(replace).fallback(method_not_allowed))
}

async fn read(State(store): State<Shared>, UrlPath((namespace, name)): UrlPath<(String, String)>) -> Response {
    match lock(&store.leases).by_key.get(&(namespace, name.clone())) {
        Some(lease) => (StatusCode::OK, axum::Json(typed(lease))).into_response(),
        None => not_found(&name),
    }
}

async fn create(State(store): State<Shared>, UrlPath(namespace): UrlPath<String>, body: Bytes) -> Response {
    let mut lease: Lease = match decode(&body) {
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
    let mut leases = lock(&store.leases);
    let key = (namespace.clone(), name.clone());
    if leases.by_key.contains_key(&key) {
        let message = format!("{RESOURCE}.{GROUP} \"{name}\" already exists");
        return status(StatusCode::CONFLICT, "AlreadyExists", &message, details(&name));
    }
    store_new(&store, &mut leases, key, &mut lease);
    (StatusCode::CREATED, axum::Json(typed(&lease))).into_response()
}

async fn replace(
    State(store): State<Shared>,
    UrlPath((namespace, name)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let mut lease: Lease = match decode(&body) {
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
    let mut leases = lock(&store.leases);
    let key = (namespace, name.clone());
    let Some(stored) = leases.by_key.get(&key) else {
        // Leases allow create-on-update: a PUT of an absent Lease creates it.
        store_new(&store, &mut leases, key, &mut lease);
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
        return status(StatusCode::CONFLICT, "Conflict", &message, details(&name));
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
    lease.metadata.resource_version = Some(store.next_revision().to_string());
    leases.by_key.insert(key, lease.clone());
    (StatusCode::OK, axum::Json(typed(&lease))).into_response()
}

/// Sets what the server sets on a new object and stores it.
fn store_new(store: &Store, leases: &mut Leases, key: (String, String), lease: &mut Lease) {
    leases.uids += 1;
    lease.metadata.namespace = Some(key.0.clone());
    lease.metadata.resource_version = Some(store.next_revision().to_string());
    lease.metadata.uid = Some(uid(leases.uids));
    // metav1.Time has a resolution of one second.
    let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH);
    lease.metadata.creation_timestamp = Some(Time(now));
    leases.by_key.insert(key, lease.clone());
}

/// A uid in the UUID text form: a random prefix and a counter, so each is unique.
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

/// The details kube-apiserver gives in a Status about the Lease `name`.
fn details(name: &str) -> Option<Value> {
    Some(json!({"name": name, "group": GROUP, "kind": RESOURCE}))
}

fn not_found(name: &str) -> Response {
    let message = format!("{RESOURCE}.{GROUP} \"{name}\" not found");
    status(StatusCode::NOT_FOUND, "NotFound", &message, details(name))
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
        let double = KubeDouble::start().await.unwrap();
        let api: Api<Lease> = Api::namespaced(double.http_client().await.unwrap(), "numaresources");

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
        let double = KubeDouble::start().await.unwrap();
        let api: Api<Lease> = Api::namespaced(double.http_client().await.unwrap(), "numaresources");
        api.create(&PostParams::default(), &lease("leader", "a")).await.unwrap();

        let unconditional = api_error(api.replace("leader", &PostParams::default(), &lease("leader", "b")).await);
        assert_eq!((unconditional.code, unconditional.reason.as_str()), (422, "Invalid"));
        assert!(unconditional.message.contains("metadata.resourceVersion"), "{unconditional:?}");

        let mut renamed = api.get("leader").await.unwrap();
        renamed.metadata.name = Some("other".to_owned());
        let mismatch = api_error(api.replace("leader", &PostParams::default(), &renamed).await);
        assert_eq!((mismatch.code, mismatch.reason.as_str()), (400, "BadRequest"));

        let elsewhere: Api<Lease> = Api::namespaced(double.http_client().await.unwrap(), "kube-system");
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
    async fn raw_get(double: &KubeDouble, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(double.address()).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: double\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn an_unavailable_double_answers_503_until_it_is_back() {
        let double = KubeDouble::start().await.unwrap();
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
