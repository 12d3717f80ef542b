//! The peer listener's routes: the leader's replication stream, followers' acknowledgements,
//! a status probe, and forwarded API requests with the caller's identity.
//!
//! Only peers reach this router: the listener requires a client certificate of the peer CA
//! (checked again here), so the identity headers of a forwarded request are trusted here and
//! nowhere else.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use numaresources_runtime::PeerInfo;
use serde::{Deserialize, Serialize};
use tokio_stream::wrappers::ReceiverStream;

use super::forwarding::forwarded_identity;
use super::{Role, STREAM_HEARTBEAT};
use crate::AppState;
use crate::status::ApiError;
use crate::store::{EventType, WatchRefusal};

/// Events the stream sends per read of the history.
const STREAM_CHUNK: usize = 256;
/// Chunks the stream buffers for a follower that reads slowly before the sender waits.
const STREAM_BUFFER: usize = 16;

/// The router of the peer listener.
pub fn router(state: Arc<AppState>) -> Router {
    let api = crate::routes()
        .layer(axum::middleware::from_fn_with_state(state.clone(), super::route))
        .layer(axum::middleware::from_fn(forwarded_identity))
        .with_state(state.clone());
    Router::new()
        .route("/replication/v1/stream", get(stream))
        .route("/replication/v1/ack", post(ack))
        .route("/replication/v1/status", get(status))
        .with_state(state)
        .fallback_service(api)
        .layer(axum::middleware::from_fn(require_peer_certificate))
}

/// Refuses any connection without a verified peer certificate (the listener's verifier checked
/// the chain against the peer CA; an absent one is refused here).
async fn require_peer_certificate(request: Request, next: Next) -> Response {
    let verified = request.extensions().get::<PeerInfo>().is_some_and(|peer| peer.client_certificate().is_some());
    if !verified {
        return ApiError::unauthorized("peer endpoints need a peer certificate").into_response();
    }
    next.run(request).await
}

#[derive(Debug, Deserialize)]
struct StreamParams {
    /// Where the follower stands (ignored with `snapshot`).
    #[serde(default)]
    after: u64,
    identity: String,
    /// The follower's name for this stream: its acknowledgements carry it, and the leader
    /// counts only those of a follower's live stream.
    token: String,
    /// Start with every object (a follower that synchronizes from nothing).
    #[serde(default)]
    snapshot: bool,
}

/// One line of the replication stream: a watch event.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct StreamEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub object: Box<serde_json::value::RawValue>,
}

/// A bookmark's (or a snapshot header's) object: the leader's revision, and in annotations
/// what it has committed, whether its store is warm, and how many objects a snapshot holds.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Bookmark {
    pub metadata: BookmarkMetadata,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BookmarkMetadata {
    pub resource_version: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// The bookmark annotation saying the leader's store is warm.
pub(super) const WARM_ANNOTATION: &str = "nodetopology.openshift.io/warm";
/// The bookmark annotation with the revision from which the leader's store is warm (a follower
/// is warm once it reached it).
pub(super) const WARM_REVISION_ANNOTATION: &str = "nodetopology.openshift.io/warm-revision";
/// The bookmark annotation with the leader's committed revision (what clients may see).
pub(super) const COMMITTED_ANNOTATION: &str = "nodetopology.openshift.io/committed";
/// The snapshot header's annotation with the number of objects that follow it.
pub(super) const OBJECTS_ANNOTATION: &str = "nodetopology.openshift.io/objects";
/// The type of the line that starts a snapshot.
pub(super) const SNAPSHOT: &str = "SNAPSHOT";

/// The leader's changes after `after` (or, with `snapshot`, every object and then the changes
/// after them), as newline-delimited watch events carrying its resourceVersions, with a
/// bookmark whenever the stream has caught up, whenever the committed revision moves, and at
/// least every [`STREAM_HEARTBEAT`].
async fn stream(State(state): State<Arc<AppState>>, Query(params): Query<StreamParams>) -> Response {
    let Some(replication) = state.replication.clone() else {
        return ApiError::no_such_path("/replication/v1/stream").into_response();
    };
    if replication.role() != Role::Leader {
        return ApiError::unavailable("this replica does not lead", 1).into_response();
    }
    let mut changes = match state.store.watch(None) {
        Ok(start) => start.changes,
        Err(_) => return ApiError::unavailable("the store is not ready", 1).into_response(),
    };
    let mut first = Vec::new();
    let mut after = params.after;
    if params.snapshot {
        let (objects, revision) = state.store.replica().replication_snapshot();
        let annotations = BTreeMap::from([(OBJECTS_ANNOTATION.to_owned(), objects.len().to_string())]);
        line(&mut first, SNAPSHOT, &bookmark_object(revision, annotations));
        for object in &objects {
            line(&mut first, "ADDED", &object.json);
        }
        after = revision;
    } else if let Err(WatchRefusal::TooOld { oldest }) = state.store.replica().replication_events_after(after, 0) {
        return ApiError::expired(format!("too old resource version: {after} ({oldest})")).into_response();
    }
    tracing::info!(follower = %params.identity, after, snapshot = params.snapshot, "a follower is streaming");
    replication.stream_started(&params.identity, &params.token);
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(STREAM_BUFFER);
    let stopping = state.stopping.clone();
    let (identity, token) = (params.identity, params.token);
    tokio::spawn(async move {
        let mut chunk = first;
        loop {
            let batch = match state.store.replica().replication_events_after(after, STREAM_CHUNK) {
                Ok(batch) => batch,
                Err(_) => break, // fell behind the history: the follower resynchronizes
            };
            for event in &batch.events {
                line(&mut chunk, event.kind.as_str(), &event.object.json);
                after = event.revision;
            }
            // The events and the head come from one look at the store: with fewer events than
            // asked for, none is missing up to the head, and the bookmark may say so.
            let caught_up = batch.events.len() < STREAM_CHUNK;
            if caught_up {
                after = after.max(batch.head);
                let mut annotations = BTreeMap::from([
                    (WARM_ANNOTATION.to_owned(), replication.locally_warm().to_string()),
                    (COMMITTED_ANNOTATION.to_owned(), batch.visible.to_string()),
                ]);
                if let Some(warm_at) = replication.warm_revision() {
                    annotations.insert(WARM_REVISION_ANNOTATION.to_owned(), warm_at.to_string());
                }
                line(&mut chunk, "BOOKMARK", &bookmark_object(batch.head, annotations));
            }
            let leading = matches!(replication.role(), Role::Leader | Role::Stopping);
            if sender.send(Ok(Bytes::from(std::mem::take(&mut chunk)))).await.is_err() || !leading {
                break;
            }
            if caught_up {
                tokio::select! {
                    _ = changes.changed() => {}
                    () = tokio::time::sleep(STREAM_HEARTBEAT) => {}
                    () = stopping.cancelled() => break,
                }
            }
        }
        replication.follower_gone(&identity, &token).await;
    });
    let mut response = axum::body::Body::from_stream(ReceiverStream::new(receiver)).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json;stream=watch"));
    response
}

/// Appends one stream line.
pub(super) fn line(chunk: &mut Vec<u8>, kind: &str, object: &[u8]) {
    chunk.extend_from_slice(b"{\"type\":\"");
    chunk.extend_from_slice(kind.as_bytes());
    chunk.extend_from_slice(b"\",\"object\":");
    chunk.extend_from_slice(object);
    chunk.extend_from_slice(b"}\n");
}

/// A bookmark's object at `revision`.
pub(super) fn bookmark_object(revision: u64, annotations: BTreeMap<String, String>) -> Vec<u8> {
    let bookmark = Bookmark { metadata: BookmarkMetadata { resource_version: revision.to_string(), annotations } };
    // A struct of strings always serializes.
    serde_json::to_vec(&bookmark).unwrap_or_default()
}

/// A follower's acknowledgement.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Ack {
    pub identity: String,
    pub token: String,
    pub revision: u64,
}

/// The leader's answer to an acknowledgement, and the status probe's answer.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct PeerStatus {
    pub identity: String,
    pub leading: bool,
    pub revision: u64,
    /// What clients may see (the leader's committed revision).
    #[serde(default)]
    pub committed: u64,
    pub warm: bool,
    /// The revision from which the store is warm, when it is (absent from older replicas: a
    /// follower then counts the leader's warmth alone, as they did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_revision: Option<u64>,
}

impl PeerStatus {
    /// From which revision the replica's store is warm (None: it is not).
    pub fn warm_at(&self) -> Option<u64> {
        self.warm.then_some(self.warm_revision.unwrap_or(0))
    }
}

async fn ack(State(state): State<Arc<AppState>>, axum::Json(ack): axum::Json<Ack>) -> Response {
    let Some(replication) = state.replication.clone() else {
        return ApiError::no_such_path("/replication/v1/ack").into_response();
    };
    if !matches!(replication.role(), Role::Leader | Role::Stopping) {
        return ApiError::unavailable("this replica does not lead", 1).into_response();
    }
    if replication.acknowledge(&ack.identity, &ack.token, ack.revision) {
        let replication = replication.clone();
        tokio::spawn(async move { replication.publish_in_sync().await });
    }
    axum::Json(peer_status(&state, &replication)).into_response()
}

async fn status(State(state): State<Arc<AppState>>) -> Response {
    match state.replication.clone() {
        Some(replication) => axum::Json(peer_status(&state, &replication)).into_response(),
        None => ApiError::no_such_path("/replication/v1/status").into_response(),
    }
}

fn peer_status(state: &AppState, replication: &super::Replication) -> PeerStatus {
    PeerStatus {
        identity: replication.identity.clone(),
        leading: replication.role() == Role::Leader,
        revision: state.store.replica().head_revision(),
        committed: state.store.visible_revision(),
        warm: replication.locally_warm(),
        warm_revision: replication.warm_revision(),
    }
}

/// A stream line's event type.
pub(super) fn event_type(kind: &str) -> Option<EventType> {
    match kind {
        "ADDED" => Some(EventType::Added),
        "MODIFIED" => Some(EventType::Modified),
        "DELETED" => Some(EventType::Deleted),
        _ => None,
    }
}
