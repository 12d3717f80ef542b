//! The request middleware: where a request is served given this replica's role.
//!
//! | request                       | leader                           | follower                          | no leader (election) |
//! |-------------------------------|----------------------------------|-----------------------------------|----------------------|
//! | write                         | applied, answered once replicated | forwarded to the leader          | 503, Retry-After     |
//! | LIST without resourceVersion  | served                           | served once caught up to the leader's revision (else forwarded) | served |
//! | other reads, discovery        | served                           | served                            | served               |
//!
//! Before that, the cold-start rule: a replica that cannot answer reads correctly (its store is
//! not warm, or it has not caught up with a warm leader) answers discovery and reads with 503,
//! since kube-apiserver's availability check calls discovery, not `/readyz`. Writes still go
//! through: they are how a cold store fills.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{ACCEPT, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER, WARNING};
use http::{HeaderName, HeaderValue};
use http_body_util::BodyExt;
use numaresources_api::direct_write::EXTRA_NODE_NAME;

use super::forwarding::{Forwarded, with_leader_revision};
use super::{
    CONSISTENT_READ_WAIT, FORWARDED_EXTRA_PREFIX, FORWARDED_GROUP, FORWARDED_UID, FORWARDED_USER, LEADER_REVISION,
    READ_YOUR_WRITE_WAIT, Replication, Role, STORE_WARM_CHECK,
};
use crate::AppState;
use crate::auth::authn::percent_encode;
use crate::auth::{Authenticated, UserInfo};
use crate::request_info::Attributes;
use crate::status::ApiError;

/// What a request is, for routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    ConsistentList,
    Read,
    Discovery,
    Other,
}

fn classify(request: &Request) -> Kind {
    let path = request.uri().path();
    match Attributes::of(request.method(), path, request.uri().query()) {
        attributes if attributes.is_write() => Kind::Write,
        Attributes::Resource { verb: "list", .. } if !has_resource_version(request.uri().query()) => {
            Kind::ConsistentList
        }
        Attributes::Resource { .. } => Kind::Read,
        Attributes::NonResource { .. } if is_discovery(path) => Kind::Discovery,
        Attributes::NonResource { .. } => Kind::Other,
    }
}

fn has_resource_version(query: Option<&str>) -> bool {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .any(|pair| pair.strip_prefix("resourceVersion=").is_some_and(|value| !value.is_empty()))
}

fn is_discovery(path: &str) -> bool {
    let group = numaresources_api::nrt::GROUP;
    let trimmed = path.trim_end_matches('/');
    trimmed == "/apis"
        || trimmed == format!("/apis/{group}")
        || trimmed == format!("/apis/{group}/{}", numaresources_api::nrt::VERSION)
}

/// The middleware.
pub async fn route(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let kind = classify(&request);
    let forwarded = request.extensions().get::<Forwarded>().is_some();
    let serves_reads = match &state.replication {
        Some(replication) => replication.serves_reads(),
        None => state.readiness.get(STORE_WARM_CHECK).unwrap_or(true),
    };
    if matches!(kind, Kind::Read | Kind::ConsistentList | Kind::Discovery) && !serves_reads && !forwarded {
        return ApiError::unavailable(
            "the NodeResourceTopology store is not warm yet: this replica cannot answer reads correctly",
            1,
        )
        .into_response();
    }
    let Some(replication) = state.replication.clone() else { return next.run(request).await };
    match (kind, replication.role()) {
        (Kind::Write, Role::Leader) => {
            let response = next.run(request).await;
            if !response.status().is_success() {
                return response;
            }
            let revision = state.store.replica().head_revision();
            match replication.replicated(revision).await {
                Ok(()) => with_leader_revision(response, revision),
                Err(error) => error.into_response(),
            }
        }
        (Kind::Write, Role::Follower { address }) if !forwarded => {
            replication.forward(&address, request, state.limits.max_body_bytes).await
        }
        (Kind::Write, _) => ApiError::unavailable(
            "no replica leads the NodeResourceTopology store right now (an election is under way); retry",
            1,
        )
        .into_response(),
        (Kind::ConsistentList, Role::Follower { address }) if !forwarded => {
            match replication.peer_status(&address).await {
                Ok(leader) if replication.reached(leader.committed, CONSISTENT_READ_WAIT).await => {
                    next.run(request).await
                }
                Ok(_) => replication.forward(&address, request, state.limits.max_body_bytes).await,
                Err(error) => {
                    // Without the leader this replica cannot know what was acknowledged since.
                    tracing::debug!(%error, "consistent read: the leader is unreachable");
                    ApiError::unavailable(
                        "the leader of the NodeResourceTopology store cannot be reached for a consistent read; \
                         retry, or list with resourceVersion=0 for this replica's state",
                        1,
                    )
                    .into_response()
                }
            }
        }
        _ => next.run(request).await,
    }
}

impl Replication {
    /// Sends `request` to the leader at `address` with the caller's identity, and answers with
    /// the leader's answer once this replica's store shows the change.
    pub(super) async fn forward(&self, address: &str, request: Request, max_body: usize) -> Response {
        let client = match self.peer_client(address) {
            Ok(client) => client,
            Err(error) => return ApiError::internal("building the client for the leader", &error).into_response(),
        };
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, max_body).await {
            Ok(body) => body,
            Err(_) => return ApiError::too_large(max_body).into_response(),
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut forwarded = http::Request::builder().method(parts.method.clone()).uri(path);
        for name in [CONTENT_TYPE, ACCEPT, CONTENT_ENCODING] {
            if let Some(value) = parts.headers.get(&name) {
                forwarded = forwarded.header(name, value.clone());
            }
        }
        if let Some(Authenticated { user, node_through_pod }) = parts.extensions.get::<Authenticated>() {
            forwarded = with_identity(forwarded, user, node_through_pod.as_deref());
        }
        let forwarded = match forwarded.body(kube::client::Body::from(body.to_vec())) {
            Ok(request) => request,
            Err(error) => return ApiError::internal("forwarding the request", &error).into_response(),
        };
        let sent = tokio::time::timeout(FORWARD_TIMEOUT, client.send(forwarded));
        let answer = match tokio::select! {
            answer = sent => answer,
            () = self.leader_moved_from(address) => {
                return may_have_happened("the leader changed while the request was on its way");
            }
        } {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) if never_sent(&error) => {
                tracing::debug!(%error, leader = address, "the leader cannot be reached");
                return ApiError::unavailable(
                    "the leader of the NodeResourceTopology store cannot be reached; retry",
                    1,
                )
                .into_response();
            }
            Ok(Err(error)) => return may_have_happened(&error.to_string()),
            Err(_) => return may_have_happened(&format!("no answer within {FORWARD_TIMEOUT:?}")),
        };
        let (parts, body) = answer.into_parts();
        let body = match tokio::time::timeout(FORWARD_TIMEOUT, body.collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(error)) => return may_have_happened(&error.to_string()),
            Err(_) => return may_have_happened(&format!("no answer within {FORWARD_TIMEOUT:?}")),
        };
        let revision = parts.headers.get(LEADER_REVISION).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        if let Some(revision) = revision {
            self.reached(revision, READ_YOUR_WRITE_WAIT).await;
        }
        let mut response = (parts.status, body).into_response();
        // The leader's media type, not the one a body of bytes gets: the error middleware reads
        // the first Content-Type, and turned every forwarded 4xx Status (404, 409, 403, 422)
        // into a 400 whose message was the leader's Status as text.
        response.headers_mut().remove(CONTENT_TYPE);
        for name in [CONTENT_TYPE, RETRY_AFTER, WARNING] {
            for value in parts.headers.get_all(&name) {
                response.headers_mut().append(name.clone(), value.clone());
            }
        }
        response
    }
}

/// How long a forwarded request may take at the leader: a leader answers a write once its
/// followers have it, waiting for the last ones up to [`super::leader::ALONE_AFTER`] and then
/// for a Lease write (bounded by the renew deadline); more than this means the request or its
/// answer is lost (kube-apiserver's own 60 s request timeout would keep the writer waiting a
/// minute).
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a forwarded request may still wait for its answer once this replica follows another
/// leader. A leader that hands over answers what it holds within this; a leader that is gone
/// never answers, and a connection to it may not report that (a request hyper retried on a new
/// connection to a listener that was closing was seen to wait out the whole timeout).
const FORWARD_GRACE_AFTER_LEADER_CHANGE: std::time::Duration = std::time::Duration::from_secs(1);

impl Replication {
    /// Completes [`FORWARD_GRACE_AFTER_LEADER_CHANGE`] after this replica stops following the
    /// leader at `address` (at once if it already has); never while it follows it.
    async fn leader_moved_from(&self, address: &str) {
        let mut roles = self.roles();
        let follows = |role: &Role| matches!(role, Role::Follower { address: leader } if leader == address);
        // `wait_for` checks the current role first; its closure takes no other lock.
        if roles.wait_for(|role| !follows(role)).await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(FORWARD_GRACE_AFTER_LEADER_CHANGE).await;
    }
}

/// Whether forwarding failed before the request could reach the leader (connecting), so that
/// retrying cannot apply a write twice.
fn never_sent(error: &kube::Error) -> bool {
    format!("{error:?}").contains("Connect")
}

/// The request reached the leader, or may have, and no answer came: kube-apiserver's Timeout
/// (504, no Retry-After: a client must not blindly repeat a write that may have happened).
fn may_have_happened(why: &str) -> Response {
    tracing::debug!(why, "a forwarded request got no answer from the leader");
    let mut response = ApiError::timeout(
        format!("the leader did not answer ({why}); the request may or may not have been applied"),
        0,
    )
    .into_response();
    response.headers_mut().remove(RETRY_AFTER);
    response
}

/// The identity headers the leader reads (as kube-apiserver's front proxy sends them), with the
/// node found through the token's pod as the node-name extra: an identity placed through its pod
/// has no such extra of its own.
fn with_identity(
    mut request: http::request::Builder,
    user: &UserInfo,
    node_through_pod: Option<&str>,
) -> http::request::Builder {
    let value = |text: &str| HeaderValue::from_str(text).ok();
    if let Some(name) = value(&user.name) {
        request = request.header(FORWARDED_USER, name);
    }
    if let Some(uid) = value(&user.uid) {
        request = request.header(FORWARDED_UID, uid);
    }
    for group in &user.groups {
        if let Some(group) = value(group) {
            request = request.header(FORWARDED_GROUP, group);
        }
    }
    let extras = user.extra.iter().flat_map(|(key, values)| values.iter().map(move |v| (key.as_str(), v.as_str())));
    for (key, extra) in extras.chain(node_through_pod.map(|node| (EXTRA_NODE_NAME, node))) {
        let name = HeaderName::from_bytes(format!("{FORWARDED_EXTRA_PREFIX}{}", percent_encode(key)).as_bytes());
        if let (Ok(name), Some(extra)) = (name, value(extra)) {
            request = request.header(name, extra);
        }
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::forwarding::extras;

    #[test]
    fn a_write_placed_through_its_pod_reaches_the_leader_bound_to_that_node() {
        let user = UserInfo {
            name: "system:serviceaccount:openshift-numaresources:rte".into(),
            uid: "u-1".into(),
            groups: vec!["system:serviceaccounts".into()],
            extra: [("authentication.kubernetes.io/pod-name".to_owned(), vec!["rte-a".to_owned()])].into(),
        };
        let headers = |node| with_identity(http::Request::builder(), &user, node).body(()).unwrap().headers().clone();
        let on_the_leader = |headers: &http::HeaderMap| UserInfo {
            name: user.name.clone(),
            extra: extras(headers),
            ..UserInfo::default()
        };

        let placed = on_the_leader(&headers(Some("worker-a")));
        assert_eq!(placed.node_name(), Some("worker-a"));
        assert_eq!(placed.extra["authentication.kubernetes.io/pod-name"], ["rte-a"]);
        assert_eq!(on_the_leader(&headers(None)).node_name(), None, "no node is invented for an unplaced identity");
    }
}
