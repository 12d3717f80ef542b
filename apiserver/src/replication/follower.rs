//! The follower's side: synchronize with the leader, then apply its stream and acknowledge.
//!
//! Synchronizing keeps what can be kept: the follower finds the last revision at which its
//! state is the leader's (exact LISTs: its own head first, else a binary search over the tail
//! it holds beyond what it knows as committed), drops the changes after it (an earlier leader
//! never committed them), and resumes the stream from there, so no watch on this replica
//! notices a thing. Nothing is dropped before the leader answered. Only when that fails (this
//! replica fell behind the leader's history, or never held anything) does it take a snapshot
//! that starts the stream, and its earlier watches get 410 and relist.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::AsyncBufReadExt;
use numaresources_api::nrt::NodeResourceTopology;
use serde::Deserialize;
use tokio::sync::watch;

use super::peer::{
    Ack, Bookmark, COMMITTED_ANNOTATION, OBJECTS_ANNOTATION, PeerStatus, SNAPSHOT, StreamEvent, WARM_ANNOTATION,
    WARM_REVISION_ANNOTATION, event_type,
};
use numaresources_runtime::tls::own_client::{Connections, own_server_client};

use super::{PeerClient, Replication, STREAM_SILENCE};

/// How long a peer request other than the stream may take (status, acknowledgement, the exact
/// LIST of a resynchronization).
pub(super) const PEER_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The most objects a snapshot may announce (far above any cluster's node count).
const SNAPSHOT_OBJECTS_LIMIT: usize = 1_000_000;

/// Why following stopped (the election loop reconnects, or follows someone else).
#[derive(Debug, thiserror::Error)]
pub(super) enum FollowError {
    #[error("talking to the leader: {0}")]
    Client(#[from] kube::Error),
    #[error("building the peer client: {0}")]
    PeerClient(#[from] numaresources_runtime::tls::own_client::OwnClientError),
    #[error("the leader's address: {0}")]
    Address(#[from] http::uri::InvalidUri),
    #[error("building a request: {0}")]
    Request(#[from] http::Error),
    #[error("decoding the leader's answer: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("reading the leader's stream: {0}")]
    Read(#[from] std::io::Error),
    #[error("the leader did not answer within {0:?}")]
    Silent(Duration),
    #[error("the leader ended the stream")]
    Ended,
    #[error("the leader's stream is malformed: {0}")]
    Malformed(String),
    #[error(transparent)]
    Replica(#[from] crate::store::ReplicaError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// A LIST as the leader answers it.
#[derive(Debug, Deserialize)]
struct List {
    items: Vec<NodeResourceTopology>,
}

fn collection() -> String {
    format!(
        "/apis/{}/{}/{}",
        numaresources_api::nrt::GROUP,
        numaresources_api::nrt::VERSION,
        numaresources_api::nrt::PLURAL
    )
}

/// Aborts the acknowledging task when following stops, whichever way.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A random name for one stream.
fn stream_token() -> String {
    format!("{:016x}", numaresources_runtime::random_word(0))
}

impl Replication {
    /// A client of the leader's peer listener at `address` (cached per address; built anew when
    /// the peer certificate or the peer CA on disk changed, so a rotated certificate or CA is
    /// used).
    pub(super) fn peer_client(&self, address: &str) -> Result<kube::Client, FollowError> {
        let modified_at = |path: &std::path::Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let modified = [modified_at(&self.tls.cert_file), modified_at(&self.tls.ca_file)];
        let mut cached = self.peer_clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cached) = cached.as_ref()
            && cached.address == address
            && cached.modified == modified
        {
            return Ok(cached.client.clone());
        }
        let uri: http::Uri = address.parse()?;
        let mut config = kube::Config::new(uri);
        config.auth_info.client_certificate = Some(self.tls.cert_file.display().to_string());
        config.auth_info.client_key = Some(self.tls.key_file.display().to_string());
        config.tls_server_name = Some(self.tls.server_name.clone());
        // Trusting the peer CA alone (never the system's roots), logging nothing per request:
        // the election logs a lost leader once. No read timeout: the stream is long-lived (its
        // silence is watched instead), and every other peer request has its own timeout.
        let connections = Connections { connect_timeout: PEER_REQUEST_TIMEOUT, idle_timeout: None, max_idle: 1 };
        let client = own_server_client(config, &self.tls.ca_file, connections, |request| request)?;
        *cached = Some(PeerClient { address: address.to_owned(), modified, client: client.clone() });
        Ok(client)
    }

    /// The status of the replica at `address` (the leader, or one a candidate probes).
    pub(super) async fn peer_status(&self, address: &str) -> Result<PeerStatus, FollowError> {
        let client = self.peer_client(address)?;
        let request = http::Request::get("/replication/v1/status").body(Vec::new())?;
        let text = tokio::time::timeout(PEER_REQUEST_TIMEOUT, client.request_text(request))
            .await
            .map_err(|_| FollowError::Silent(PEER_REQUEST_TIMEOUT))??;
        Ok(serde_json::from_str(&text)?)
    }

    /// Follows the leader at `address` until its stream ends or fails.
    pub(super) async fn follow(self: &Arc<Self>, address: &str) -> Result<(), FollowError> {
        let client = self.peer_client(address)?;
        self.following.caught_up.store(false, Ordering::Release);
        self.refresh_readiness();
        let resume = if self.following.synced.load(Ordering::Acquire) { self.resumable(&client).await } else { None };
        let token = stream_token();
        let query = match resume {
            Some(after) => format!("after={after}"),
            None => "snapshot=true".to_owned(),
        };
        let request = http::Request::get(format!(
            "/replication/v1/stream?{query}&token={token}&identity={}",
            crate::auth::authn::percent_encode(&self.identity)
        ))
        .body(Vec::new())?;
        let reader = tokio::time::timeout(PEER_REQUEST_TIMEOUT, client.request_stream(request))
            .await
            .map_err(|_| FollowError::Silent(PEER_REQUEST_TIMEOUT))??;
        // What this stream has brought into the store: where it resumes (the leader agreed
        // this replica's state there), else nothing until the snapshot is in.
        let (applied, applied_changes) = watch::channel(resume.unwrap_or(0));
        let _acks = AbortOnDrop(tokio::spawn(acknowledge(self.clone(), client.clone(), token, applied_changes)));
        let result = self.apply_stream(reader, resume.is_none(), &applied).await;
        self.refresh_readiness();
        result
    }

    /// Where the stream may resume without disturbing this replica's watches: the last revision
    /// at which this replica's state is the leader's (checked with exact LISTs), once the changes
    /// after it (the leader lacks them: an earlier leader never committed them) are dropped.
    /// None: take a snapshot.
    ///
    /// Nothing is dropped before the leader has answered. This replica learns that a change was
    /// committed only after the leader acknowledged it to the client, so what it holds beyond
    /// the revision it knows as committed may be acknowledged writes; were it to drop them while
    /// its leader is gone (every reconnect comes here), it could then win the election without
    /// them.
    pub(super) async fn resumable(&self, client: &kube::Client) -> Option<u64> {
        let head = self.store.replica().head_revision();
        if self.leader_agrees_at(client, head).await? {
            tracing::info!(
                revision = head,
                objects = self.store.len(),
                "this replica agrees with the leader; resuming"
            );
            return Some(head);
        }
        // The leader lacks part of this replica's tail. Both hold a prefix of the same history
        // (revisions are never reused), so they agree up to some revision and differ after it:
        // a binary search over the tail finds it.
        let committed = self.store.visible_revision();
        let tail = self.store.replica().replication_events_after(committed, usize::MAX).ok()?.events;
        // The head was asked about already (it is also the committed revision when nothing is
        // uncommitted).
        let candidates: Vec<u64> =
            std::iter::once(committed).chain(tail.iter().map(|e| e.revision)).filter(|r| *r < head).collect();
        let agreed = last_agreeing(&candidates, |revision| self.leader_agrees_at(client, revision)).await;
        let Some(revision) = agreed else {
            tracing::warn!(head, committed, "this replica's state differs from the leader's; taking a snapshot");
            return None;
        };
        if !self.store.replica().truncate_to(revision) {
            return None;
        }
        tracing::info!(revision, dropped_after = head, "dropped the changes the leader lacks; resuming");
        Some(revision)
    }

    /// Whether the leader's state at `revision` is this replica's: None when the leader did not
    /// answer, false when it refused (a revision it no longer or not yet serves) or differs.
    async fn leader_agrees_at(&self, client: &kube::Client, revision: u64) -> Option<bool> {
        let exact =
            http::Request::get(format!("{}?resourceVersion={revision}&resourceVersionMatch=Exact", collection()))
                .body(Vec::new())
                .ok()?;
        let answer = tokio::time::timeout(PEER_REQUEST_TIMEOUT * 5, client.request_text(exact)).await.ok()?;
        let list = match answer {
            Ok(text) => serde_json::from_str::<List>(&text).ok()?,
            Err(kube::Error::Api(_)) => return Some(false),
            Err(_) => return None,
        };
        let Ok(mine) = self.store.snapshot_at(revision) else { return Some(false) };
        let mine: HashMap<&str, u64> = mine.items.iter().map(|s| (s.name(), s.revision)).collect();
        Some(same_state(&mine, &list.items))
    }

    /// Applies the leader's stream to the store, and says in `applied` up to which revision the
    /// store holds what the stream carried (never what it held before: that is not the
    /// leader's to count).
    pub(super) async fn apply_stream(
        &self,
        reader: impl futures_util::AsyncBufRead + Unpin,
        snapshot: bool,
        applied: &watch::Sender<u64>,
    ) -> Result<(), FollowError> {
        let applied_to = |revision: u64| {
            applied.send_if_modified(|current| {
                let later = revision > *current;
                *current = (*current).max(revision);
                later
            });
        };
        let mut lines = reader.lines();
        if snapshot {
            let header = next_event(&mut lines).await?;
            if header.kind != SNAPSHOT {
                return Err(FollowError::Malformed(format!("expected {SNAPSHOT}, got {}", header.kind)));
            }
            let header: Bookmark = serde_json::from_str(header.object.get())?;
            let revision = parse_revision(&header.metadata.resource_version)?;
            let count = header
                .metadata
                .annotations
                .get(OBJECTS_ANNOTATION)
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= SNAPSHOT_OBJECTS_LIMIT)
                .ok_or_else(|| FollowError::Malformed("a snapshot without a sane object count".into()))?;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                items.push(serde_json::from_str::<NodeResourceTopology>(next_event(&mut lines).await?.object.get())?);
            }
            tracing::info!(revision, objects = items.len(), "taking the leader's snapshot");
            self.metrics.resyncs.inc();
            self.store.replica().set_visible(Some(revision));
            self.store.replica().reset(items, revision)?;
            self.following.synced.store(true, Ordering::Release);
            applied_to(revision);
        }
        loop {
            let event = next_event(&mut lines).await?;
            if event.kind == "BOOKMARK" {
                let bookmark: Bookmark = serde_json::from_str(event.object.get())?;
                let head = parse_revision(&bookmark.metadata.resource_version)?;
                let annotations = &bookmark.metadata.annotations;
                let warm = annotations.get(WARM_ANNOTATION).is_some_and(|w| w == "true");
                let warm_at = warm.then(|| annotations.get(WARM_REVISION_ANNOTATION).and_then(|r| r.parse().ok()));
                let committed = annotations.get(COMMITTED_ANNOTATION).and_then(|c| c.parse().ok()).unwrap_or(head);
                self.store.replica().advance_to(head);
                applied_to(head);
                self.store.replica().set_visible(Some(committed));
                self.heard_from_leader(head, warm_at.map(Option::unwrap_or_default));
                if !self.following.caught_up.swap(true, Ordering::AcqRel) {
                    tracing::info!(revision = head, objects = self.store.len(), "caught up with the leader");
                    self.refresh_readiness();
                }
                continue;
            }
            let Some(kind) = event_type(&event.kind) else {
                // An ERROR event (a Status) or anything else: resynchronize.
                return Err(FollowError::Ended);
            };
            let object: NodeResourceTopology = serde_json::from_str(event.object.get())?;
            applied_to(self.store.replica().apply_replicated(kind, object)?);
        }
    }
}

/// The next line of the stream, within [`STREAM_SILENCE`].
async fn next_event<R: futures_util::AsyncBufRead + Unpin>(
    lines: &mut futures_util::io::Lines<R>,
) -> Result<StreamEvent, FollowError> {
    match tokio::time::timeout(STREAM_SILENCE, futures_util::StreamExt::next(lines)).await {
        Err(_) => Err(FollowError::Silent(STREAM_SILENCE)),
        Ok(None) => Err(FollowError::Ended),
        Ok(Some(line)) => Ok(serde_json::from_str::<StreamEvent>(&line?)?),
    }
}

fn parse_revision(text: &str) -> Result<u64, FollowError> {
    text.parse().map_err(|_| FollowError::Malformed(format!("resourceVersion {text:?} is not a number")))
}

fn same_state(mine: &HashMap<&str, u64>, theirs: &[NodeResourceTopology]) -> bool {
    mine.len() == theirs.len()
        && theirs.iter().all(|object| {
            let name = object.metadata.name.as_deref().unwrap_or_default();
            let revision = object.metadata.resource_version.as_deref().and_then(|rv| rv.parse::<u64>().ok());
            revision.is_some() && mine.get(name).copied() == revision
        })
}

/// Most exact LISTs a resynchronization asks the leader for while it looks for the last revision
/// both agree on: a tail of up to 2^12 - 1 changes; a longer one takes a snapshot instead.
pub(super) const RESYNC_PROBES: u32 = 12;

/// The last of `candidates` (ascending revisions) the leader agrees on, found by binary search:
/// agreeing on a revision means agreeing on every earlier one. None when it agrees on none, did
/// not answer, or there are too many candidates for [`RESYNC_PROBES`].
pub(super) async fn last_agreeing<F, Fut>(candidates: &[u64], mut agrees: F) -> Option<u64>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Option<bool>>,
{
    if candidates.len() >= 1 << RESYNC_PROBES {
        return None;
    }
    // Every candidate before `agreed` agrees; none from `differs` on does.
    let (mut agreed, mut differs) = (0, candidates.len());
    while agreed < differs {
        let middle = agreed + (differs - agreed) / 2;
        if agrees(candidates[middle]).await? {
            agreed = middle + 1;
        } else {
            differs = middle;
        }
    }
    agreed.checked_sub(1).map(|last| candidates[last])
}

/// Tells the leader how far this replica has applied on stream `token` (`applied`), whenever
/// that changes (coalesced: one acknowledgement in flight at a time), and takes the leader's
/// committed revision from the answer.
///
/// Only what the stream brought counts: the store's own head before a snapshot replaced it
/// (a later clock of its own, or an earlier leader's uncommitted tail) acknowledged and never
/// taken back once made every acknowledgement after the snapshot look old, so the leader never
/// counted this follower in sync and acknowledged writes alone.
async fn acknowledge(
    replication: Arc<Replication>,
    client: kube::Client,
    token: String,
    mut applied: watch::Receiver<u64>,
) {
    let mut acked = 0;
    loop {
        let revision = *applied.borrow_and_update();
        if revision > acked {
            let ack = Ack { identity: replication.identity.clone(), token: token.clone(), revision };
            let request = serde_json::to_vec(&ack).map_err(|e| e.to_string()).and_then(|body| {
                http::Request::post("/replication/v1/ack")
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(body)
                    .map_err(|e| e.to_string())
            });
            let request = match request {
                Ok(request) => request,
                Err(error) => {
                    tracing::error!(%error, "building an acknowledgement");
                    return;
                }
            };
            match tokio::time::timeout(PEER_REQUEST_TIMEOUT, client.request_text(request)).await {
                Ok(Ok(text)) => {
                    if let Ok(status) = serde_json::from_str::<PeerStatus>(&text) {
                        replication.store.replica().set_visible(Some(status.committed));
                        replication.heard_from_leader(status.revision, status.warm_at());
                    }
                    acked = revision;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, "acknowledging to the leader failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(_) => {
                    tracing::debug!("acknowledging to the leader timed out");
                    continue;
                }
            }
        }
        if applied.changed().await.is_err() {
            return;
        }
    }
}
