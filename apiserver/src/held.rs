//! The exporters' question on the admin port: "do you hold my node's object?"
//!
//! An exporter publishes only when its node changes and at its heartbeat, a minute apart. When
//! every replica restarts (a cluster restart, a bad rollout), the store starts empty and stays
//! not Ready until the exporters have written again; without a way to notice, an unchanged node
//! would come back only at its next heartbeat. So the exporters that write to us directly ask
//! this every few seconds, over plain HTTP on the admin port through the write Service, and
//! publish at once on a `404`. The answer costs a map lookup and tells nothing but whether a
//! node's object exists, so it needs no token (and no TLS handshake per question, which at a
//! fleet's rate would cost more than the answers).
//!
//! A follower that does not track the leader cannot tell (its store may lag or be empty): it
//! answers `503`, and the exporter asks again later rather than republishing for nothing. A
//! follower that does track it answers even while the store is cold, which is when the
//! question matters: it is not Ready then, but its store is the leader's.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use numaresources_api::direct_write::{HELD, NOT_HELD};

use crate::AppState;

/// The longest node name worth a lookup (a DNS subdomain, as Node names are).
const MAX_NODE_NAME_BYTES: usize = 253;

/// What this replica can say about a node's object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    Yes,
    No,
    CannotTell,
}

impl Held {
    fn status(self) -> StatusCode {
        match self {
            Held::Yes => StatusCode::OK,
            Held::No => StatusCode::NOT_FOUND,
            Held::CannotTell => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Held::Yes => HELD,
            Held::No => NOT_HELD,
            Held::CannotTell => "this replica does not track the leader now; ask again later",
        }
    }
}

/// The answer for `node` from `state`.
pub(crate) fn held(state: &AppState, node: &str) -> Held {
    if state.replication.as_ref().is_some_and(|replication| !replication.tracks_the_leader()) {
        return Held::CannotTell;
    }
    if state.store.get_visible(node).is_some() { Held::Yes } else { Held::No }
}

/// `GET <HELD_PATH_PREFIX><node>`, for the admin port.
pub(crate) fn router(state: Arc<AppState>) -> axum::Router {
    let path = format!("{}{{node}}", numaresources_api::direct_write::HELD_PATH_PREFIX);
    axum::Router::new().route(&path, axum::routing::get(answer)).with_state(state)
}

/// `GET <HELD_PATH_PREFIX><node>`.
async fn answer(State(state): State<Arc<AppState>>, Path(node): Path<String>) -> Response {
    if node.is_empty() || node.len() > MAX_NODE_NAME_BYTES {
        return (StatusCode::BAD_REQUEST, "not a node name").into_response();
    }
    let held = held(&state, &node);
    (held.status(), held.text()).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::Request;
    use numaresources_api::direct_write::held_path;
    use numaresources_api::nrt::NodeResourceTopology;
    use tower::ServiceExt;

    use super::*;
    use crate::Store;

    async fn ask(state: &Arc<AppState>, path: &str) -> (u16, String) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = router(state.clone()).oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn the_admin_port_says_whether_a_nodes_object_is_held_even_while_the_store_is_cold() {
        let store = Arc::new(Store::new(16));
        store.create(NodeResourceTopology::new("worker-0"), false).unwrap();
        let state = Arc::new(AppState::new(store, "test", "test"));
        state.readiness.set(crate::replication::STORE_WARM_CHECK, false);
        assert_eq!(ask(&state, &held_path("worker-0")).await, (200, HELD.to_owned()));
        assert_eq!(ask(&state, &held_path("worker-1")).await, (404, NOT_HELD.to_owned()));
        let long = "w".repeat(MAX_NODE_NAME_BYTES + 1);
        assert_eq!(ask(&state, &held_path(&long)).await.0, 400);
    }
}
