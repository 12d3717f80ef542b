//! What a server in delegated mode asks of kube-apiserver, answered as kube-apiserver answers it:
//! - TokenReview: a token the test issued is authenticated for the audiences it was issued for
//!   that the review also names (kube-apiserver's own when the review names none);
//!   `status.audiences` is that intersection, and an empty one is `authenticated: false`. A
//!   pod-bound token is valid only while its pod exists with the uid it was bound to, and carries
//!   the `pod-name` and `pod-uid` extras, plus `node-name` when the double is built to name nodes
//!   (kube-apiserver 1.30+; before, the server must place the token through its pod). Unknown
//!   tokens are `authenticated: false`.
//! - SubjectAccessReview: allows members of `system:masters`, the user `kubernetes-admin` and
//!   service accounts, denies the rest and the users a test denies (this endpoint's RBAC
//!   stand-in); what each review asked is recorded.
//! - `kube-system/extension-apiserver-authentication`: read by name, listed (kube-rs' watcher
//!   lists it with a field selector first) and watched (the watch stays open without events, as
//!   while nothing changes). Its data is empty: no front proxy and no client CA, so bearer
//!   tokens are the only credentials.
//!
//! Tokens are issued two ways: under a string the test chooses, for identities known by name
//! ([`KubeDouble::issue_exporter_token`] and its siblings), or generated, about as long as a
//! projected token (a signed JWT), for identities the double derives
//! ([`KubeDouble::exporter_token`], [`KubeDouble::user_token`]).

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use numaresources_api::direct_write::{EXTRA_NODE_NAME, EXTRA_POD_NAME, EXTRA_POD_UID, TOKEN_AUDIENCE};
use serde_json::{Value, json};

use super::pods::{EXPORTER_ACCOUNT, EXPORTER_NAMESPACE, exporter_pod_on};
use super::{KubeDouble, ListOptions, Shared, decode, json_stream, list_options, lock, method_not_allowed, status};

/// kube-apiserver's own audience (`--api-audiences`, default the issuer).
pub const KUBE_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// The audience our server asks for.
pub const OUR_AUDIENCE: &str = TOKEN_AUDIENCE;

/// The ConfigMap a delegated server reads its authentication settings from.
const AUTH_CONFIGMAP: &str = "extension-apiserver-authentication";

/// Who an issued token stands for.
#[derive(Clone, Debug)]
pub(super) struct Issued {
    user: String,
    groups: Vec<String>,
    audiences: Vec<String>,
    pod: Option<BoundPod>,
}

/// The pod a token is bound to.
#[derive(Clone, Debug)]
struct BoundPod {
    name: String,
    uid: String,
    node: String,
}

impl Issued {
    /// A token of `user`, a person, in `groups`.
    fn person(user: &str, groups: &[&str], audiences: Vec<String>) -> Self {
        let mut groups: Vec<String> = groups.iter().map(|group| (*group).to_owned()).collect();
        groups.push("system:authenticated".to_owned());
        Self { user: user.to_owned(), groups, audiences, pod: None }
    }

    /// A token of `account` in `namespace`, bound to `pod` if any.
    fn service_account(namespace: &str, account: &str, audiences: Vec<String>, pod: Option<BoundPod>) -> Self {
        Self {
            user: format!("system:serviceaccount:{namespace}:{account}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
            audiences,
            pod,
        }
    }

    /// A projected token of the exporters' service account, bound to `pod`.
    fn exporter(pod: BoundPod, audiences: Vec<String>) -> Self {
        Self::service_account(EXPORTER_NAMESPACE, EXPORTER_ACCOUNT, audiences, Some(pod))
    }
}

fn owned(audiences: &[&str]) -> Vec<String> {
    audiences.iter().map(|audience| (*audience).to_owned()).collect()
}

impl KubeDouble {
    /// Issues `token` to the exporter pod on `node` that [`KubeDouble::set_exporter_pods`]
    /// serves, for our server's audience: a projected token of the exporters' service account,
    /// valid while that pod exists.
    pub fn issue_exporter_token(&self, token: &str, node: &str) {
        let (name, uid) = exporter_pod_on(node);
        let pod = BoundPod { name, uid, node: node.to_owned() };
        self.issue(token.to_owned(), Issued::exporter(pod, vec![OUR_AUDIENCE.to_owned()]));
    }

    /// Issues `token` to `user`, a member of `system:masters`, for our server's audience.
    pub fn issue_admin_token(&self, token: &str, user: &str) {
        self.issue(token.to_owned(), Issued::person(user, &["system:masters"], vec![OUR_AUDIENCE.to_owned()]));
    }

    /// Issues `token` to the ServiceAccount `account` in `namespace` for kube-apiserver's own
    /// audience: the ordinary token a pod (a Prometheus, say) has mounted.
    pub fn issue_kube_token(&self, token: &str, namespace: &str, account: &str) {
        let issued = Issued::service_account(namespace, account, vec![KUBE_AUDIENCE.to_owned()], None);
        self.issue(token.to_owned(), issued);
    }

    /// A token of the exporters' service account bound to the existing pod `pod`, as the
    /// kubelet projects it, for `audiences`.
    pub fn exporter_token(&self, pod: &str, audiences: &[&str]) -> String {
        let (uid, node) = self.store.pods.uid_and_node(pod).expect("a token is bound to an existing pod");
        self.issue_generated(Issued::exporter(BoundPod { name: pod.to_owned(), uid, node }, owned(audiences)))
    }

    /// Registers `token` as the exporters' ServiceAccount's, bound to the existing pod `pod`, so
    /// that TokenReview accepts it (the issuer's signed tokens, [`KubeDouble::signed_exporter_token`]).
    pub(super) fn issue_bound(&self, token: &str, pod: &str, audiences: &[&str]) {
        let (uid, node) = self.store.pods.uid_and_node(pod).expect("a token is bound to an existing pod");
        self.issue(token.to_owned(), Issued::exporter(BoundPod { name: pod.to_owned(), uid, node }, owned(audiences)));
    }

    /// A token of `user`, a person in no group, for `audiences`.
    pub fn user_token(&self, user: &str, audiences: &[&str]) -> String {
        self.issue_generated(Issued::person(user, &[], owned(audiences)))
    }

    fn issue_generated(&self, issued: Issued) -> String {
        let token = format!("eyJhbGciOiJSUzI1NiJ9.{:06}.{}", self.store.next_sequence(), "x".repeat(900));
        self.issue(token.clone(), issued);
        token
    }

    fn issue(&self, token: String, issued: Issued) {
        lock(&self.store.tokens).insert(token, issued);
    }
}

pub(super) fn router() -> Router<Shared> {
    Router::new()
        .route("/apis/authentication.k8s.io/v1/tokenreviews", post(token_review).fallback(method_not_allowed))
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(subject_access_review).fallback(method_not_allowed),
        )
        .route("/api/v1/namespaces/kube-system/configmaps", get(configmaps).fallback(method_not_allowed))
        .route(
            &format!("/api/v1/namespaces/kube-system/configmaps/{AUTH_CONFIGMAP}"),
            get(configmap).fallback(method_not_allowed),
        )
}

async fn token_review(State(store): State<Shared>, body: Bytes) -> Response {
    store.token_reviews.fetch_add(1, Ordering::SeqCst);
    let review: Value = match decode(&body) {
        Ok(review) => review,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message, None),
    };
    let status = review_token(&store, &review["spec"]);
    Json(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
                "spec": review["spec"], "status": status}))
    .into_response()
}

fn review_token(store: &Shared, spec: &Value) -> Value {
    let unauthenticated = |error: String| json!({"authenticated": false, "error": error});
    let token = spec["token"].as_str().unwrap_or_default();
    let Some(issued) = lock(&store.tokens).get(token).cloned() else {
        return unauthenticated("invalid bearer token".to_owned());
    };
    let wanted: Vec<String> = match spec["audiences"].as_array() {
        Some(asked) if !asked.is_empty() => asked.iter().filter_map(|a| a.as_str().map(str::to_owned)).collect(),
        _ => vec![KUBE_AUDIENCE.to_owned()],
    };
    let audiences: Vec<&String> = wanted.iter().filter(|audience| issued.audiences.contains(audience)).collect();
    if audiences.is_empty() {
        return unauthenticated(format!(
            "[invalid bearer token, token audiences {:?} is invalid for the target audiences {wanted:?}]",
            issued.audiences
        ));
    }
    let mut extra = serde_json::Map::new();
    if let Some(pod) = &issued.pod {
        let alive = store.pods.uid_and_node(&pod.name).is_some_and(|(uid, _)| uid == pod.uid);
        if !alive {
            return unauthenticated(format!(
                "[invalid bearer token, pod \"{}\" not found or its uid differs]",
                pod.name
            ));
        }
        extra.insert(EXTRA_POD_NAME.to_owned(), json!([pod.name]));
        extra.insert(EXTRA_POD_UID.to_owned(), json!([pod.uid]));
        if store.names_nodes {
            extra.insert(EXTRA_NODE_NAME.to_owned(), json!([pod.node]));
        }
    }
    json!({"authenticated": true, "audiences": audiences,
           "user": {"username": issued.user, "uid": format!("uid-of-{}", issued.user),
                    "groups": issued.groups, "extra": extra}})
}

/// What one SubjectAccessReview asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessAsked {
    /// `spec.user`.
    pub user: String,
    /// The resource verb, or the non-resource one.
    pub verb: String,
    /// The object's name (None: every object, or a non-resource request).
    pub name: Option<String>,
    /// Whether the review carried the caller's extras (a pod-bound token's pod).
    pub extras: bool,
}

async fn subject_access_review(State(store): State<Shared>, body: Bytes) -> Response {
    store.access_reviews.fetch_add(1, Ordering::SeqCst);
    let review: Value = match decode(&body) {
        Ok(review) => review,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message, None),
    };
    let spec = &review["spec"];
    let user = spec["user"].as_str().unwrap_or_default();
    let attributes = if spec["resourceAttributes"].is_object() {
        &spec["resourceAttributes"]
    } else {
        &spec["nonResourceAttributes"]
    };
    lock(&store.access_asked).push(AccessAsked {
        user: user.to_owned(),
        verb: attributes["verb"].as_str().unwrap_or_default().to_owned(),
        name: attributes["name"].as_str().map(str::to_owned),
        extras: spec["extra"].as_object().is_some_and(|extra| !extra.is_empty()),
    });
    let masters = spec["groups"].as_array().into_iter().flatten().any(|group| group == "system:masters");
    let denied = lock(&store.denied_users).contains(user);
    let allowed = !denied && (masters || user == "kubernetes-admin" || user.starts_with("system:serviceaccount:"));
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

/// The ConfigMap listed, or a watch of it that stays open with no event.
async fn configmaps(query: Result<Query<ListOptions>, axum::extract::rejection::QueryRejection>) -> Response {
    match list_options(query) {
        Ok(options) if options.watching() => json_stream(futures_util::stream::pending()),
        Ok(_) => Json(json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "1"},
                             "items": [auth_configmap()]}))
        .into_response(),
        Err(message) => status(StatusCode::BAD_REQUEST, "BadRequest", &message, None),
    }
}
