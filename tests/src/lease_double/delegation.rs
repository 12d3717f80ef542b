//! What a replica in delegated mode asks of kube-apiserver besides its Lease, answered as
//! kube-apiserver answers it:
//! - `kube-system/extension-apiserver-authentication`: read by name, listed by a field selector
//!   and watched (the watch stays open without events, as while nothing changes). Its data is
//!   empty: no front proxy and no client CA, so bearer tokens are the only credentials.
//! - TokenReview: a token the test issued is authenticated for the audiences it was issued for
//!   that the review also names, kube-apiserver's own when it names none (`status.audiences`,
//!   their intersection; none in common is
//!   `authenticated: false`); an exporter's token is bound to its pod (the `pod-name` and
//!   `pod-uid` extras, without `node-name`, as before Kubernetes 1.30, so the replica must place
//!   it through the pod). Unknown tokens are `authenticated: false`.
//! - SubjectAccessReview: allows service accounts and members of `system:masters`, denies the
//!   rest (this endpoint's RBAC stand-in).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use numaresources_api::direct_write::{EXTRA_POD_NAME, EXTRA_POD_UID};
use serde_json::{Value, json};

/// kube-apiserver's own audience (`--api-audiences`, default the issuer).
pub const KUBE_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The ConfigMap a delegated replica reads its authentication settings from.
const AUTH_CONFIGMAP: &str = "extension-apiserver-authentication";

/// Who an issued token stands for.
#[derive(Clone, Debug)]
pub(super) struct Issued {
    user: String,
    groups: Vec<String>,
    audiences: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
}

impl Issued {
    /// A token of `user`, a member of `system:masters`.
    pub(super) fn master(user: &str, audience: &str) -> Self {
        Self {
            user: user.to_owned(),
            groups: vec!["system:masters".to_owned(), "system:authenticated".to_owned()],
            audiences: vec![audience.to_owned()],
            extra: BTreeMap::new(),
        }
    }

    /// A token of `service_account` in `namespace`, bound to no pod.
    pub(super) fn service_account(namespace: &str, service_account: &str, audience: &str) -> Self {
        Self {
            user: format!("system:serviceaccount:{namespace}:{service_account}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
            audiences: vec![audience.to_owned()],
            extra: BTreeMap::new(),
        }
    }

    /// A token of `service_account` in `namespace` bound to the pod `(name, uid)`.
    pub(super) fn pod_bound(namespace: &str, service_account: &str, pod: (&str, &str), audience: &str) -> Self {
        let mut issued = Self::service_account(namespace, service_account, audience);
        issued.extra = BTreeMap::from([
            (EXTRA_POD_NAME.to_owned(), vec![pod.0.to_owned()]),
            (EXTRA_POD_UID.to_owned(), vec![pod.1.to_owned()]),
        ]);
        issued
    }
}

pub(super) type Tokens = Arc<Mutex<BTreeMap<String, Issued>>>;

pub(super) fn router<S: Clone + Send + Sync + 'static>(tokens: Tokens) -> Router<S> {
    Router::new()
        .route("/apis/authentication.k8s.io/v1/tokenreviews", post(token_review))
        .route("/apis/authorization.k8s.io/v1/subjectaccessreviews", post(subject_access_review))
        .route("/api/v1/namespaces/kube-system/configmaps", get(configmaps))
        .route(&format!("/api/v1/namespaces/kube-system/configmaps/{AUTH_CONFIGMAP}"), get(configmap))
        .with_state(tokens)
}

async fn token_review(State(tokens): State<Tokens>, Json(review): Json<Value>) -> Response {
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let mut asked: Vec<&str> =
        review["spec"]["audiences"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if asked.is_empty() {
        asked.push(KUBE_AUDIENCE); // A review naming none asks for kube-apiserver's own.
    }
    let issued = tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(token).cloned();
    let status = match issued {
        Some(issued) => {
            let common: Vec<&String> = issued.audiences.iter().filter(|a| asked.contains(&a.as_str())).collect();
            if common.is_empty() {
                json!({"authenticated": false, "error": "token audiences are invalid"})
            } else {
                json!({"authenticated": true, "audiences": common,
                       "user": {"username": issued.user, "uid": format!("uid-{}", issued.user),
                                "groups": issued.groups, "extra": issued.extra}})
            }
        }
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    Json(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
                "spec": review["spec"], "status": status}))
    .into_response()
}

async fn subject_access_review(Json(review): Json<Value>) -> Response {
    let spec = &review["spec"];
    let user = spec["user"].as_str().unwrap_or_default();
    let masters = spec["groups"].as_array().into_iter().flatten().any(|g| g == "system:masters");
    let allowed = masters || user.starts_with("system:serviceaccount:");
    let reason = if allowed { "allowed by the double's policy" } else { "denied by the double's policy" };
    Json(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
                "spec": spec, "status": {"allowed": allowed, "reason": reason}}))
    .into_response()
}

fn auth_configmap() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": AUTH_CONFIGMAP, "namespace": "kube-system", "resourceVersion": "1", "uid": "uid-auth"},
           "data": {}})
}

async fn configmap() -> Response {
    Json(auth_configmap()).into_response()
}

/// The ConfigMap listed (kube-rs' watcher lists with a field selector first), or a watch that
/// stays open with no event.
async fn configmaps(RawQuery(query): RawQuery) -> Response {
    if query.unwrap_or_default().split('&').any(|pair| pair == "watch=true" || pair == "watch=1") {
        let quiet = futures_util::stream::pending::<Result<axum::body::Bytes, std::convert::Infallible>>();
        return ([(axum::http::header::CONTENT_TYPE, "application/json")], axum::body::Body::from_stream(quiet))
            .into_response();
    }
    Json(json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "1"},
                "items": [auth_configmap()]}))
    .into_response()
}
