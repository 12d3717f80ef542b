//! A request one replica forwards to the leader: the headers that carry the caller's identity
//! (trusted on the peer listener only, which requires a peer certificate), turning them back
//! into that identity, the marker that stops a forwarded request from being forwarded again,
//! and the leader's revision on the answer.

use std::collections::BTreeMap;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderMap;
use http::header::HeaderValue;

use super::{FORWARDED_EXTRA_PREFIX, FORWARDED_GROUP, FORWARDED_UID, FORWARDED_USER, LEADER_REVISION};
use crate::auth::authn::percent_decode;
use crate::auth::{NodeScope, UserInfo};

/// A forwarded request (the middleware must not forward it again).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Forwarded;

/// Turns the forwarding headers back into the caller's identity, as the follower authenticated
/// and authorized it.
pub(super) async fn forwarded_identity(mut request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Some(name) = header(headers, FORWARDED_USER) {
        let user = UserInfo {
            name,
            uid: header(headers, FORWARDED_UID).unwrap_or_default(),
            groups: headers
                .get_all(FORWARDED_GROUP)
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_owned))
                .collect(),
            extra: extras(headers),
        };
        // Handlers read only the node a write is bound to (a forwarded request is never
        // forwarded again, so the identity itself is not put back on it).
        if let Some(node) = user.node_name() {
            request.extensions_mut().insert(NodeScope(node.to_owned()));
        }
    }
    request.extensions_mut().insert(Forwarded);
    next.run(request).await
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

pub(super) fn extras(headers: &HeaderMap) -> BTreeMap<String, Vec<String>> {
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(FORWARDED_EXTRA_PREFIX) else { continue };
        let Ok(value) = value.to_str() else { continue };
        // Keys are percent-encoded (they may hold `/`, which header names cannot).
        extra.entry(percent_decode(key)).or_default().push(value.to_owned());
    }
    extra
}

/// Adds the leader's revision to a forwarded request's answer.
pub(super) fn with_leader_revision(mut response: Response, revision: u64) -> Response {
    if let Ok(value) = HeaderValue::from_str(&revision.to_string()) {
        response.headers_mut().insert(LEADER_REVISION, value);
    }
    response
}
