//! The follower's side: synchronize with the leader, then apply its stream and acknowledge.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::AsyncBufReadExt;
use numaresources_api::nrt::NodeResourceTopology;
use serde::Deserialize;

use super::peer::{Ack, Bookmark, PeerStatus, StreamEvent, WARM_ANNOTATION, event_type};
use super::{Replication, STREAM_SILENCE};

/// Why following stopped (the election loop reconnects, or follows someone else).
#[derive(Debug, thiserror::Error)]
pub(super) enum FollowError {
    #[error("talking to the leader: {0}")]
    Client(#[from] kube::Error),
    #[error("the leader's address: {0}")]
    Address(#[from] http::uri::InvalidUri),
    #[error("building a request: {0}")]
    Request(#[from] http::Error),
    #[error("decoding the leader's answer: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("reading the leader's stream: {0}")]
    Read(#[from] std::io::Error),
    #[error("the leader said nothing for {0:?}")]
    Silent(std::time::Duration),
    #[error("the leader ended the stream")]
    Ended,
    #[error(transparent)]
    Replica(#[from] crate::store::ReplicaError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// A LIST as the leader answers it.
#[derive(Debug, Deserialize)]
struct List {
    metadata: ListMeta,
    items: Vec<NodeResourceTopology>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    resource_version: String,
}

fn collection() -> String {
    format!("/apis/{}/{}/{}", numaresources_api::nrt::GROUP, crate::discovery::VERSION, numaresources_api::nrt::PLURAL)
}

impl Replication {
    /// A client of the leader's peer listener at `address` (cached per address).
    pub(super) fn peer_client(&self, address: &str) -> Result<kube::Client, FollowError> {
        let mut cached = self.peer_clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cached) = cached.as_ref()
            && cached.address == address
        {
            return Ok(cached.client.clone());
        }
        let uri: http::Uri = address.parse()?;
        let mut config = kube::Config::new(uri);
        config.root_cert_file = Some(self.tls.ca_file.clone());
        config.auth_info.client_certificate = Some(self.tls.cert_file.display().to_string());
        config.auth_info.client_key = Some(self.tls.key_file.display().to_string());
        config.tls_server_name = Some(self.tls.server_name.clone());
        config.read_timeout = None;
        config.connect_timeout = Some(std::time::Duration::from_secs(2));
        let client = kube::Client::try_from(config)?;
        *cached = Some(super::PeerClient { address: address.to_owned(), client: client.clone() });
        Ok(client)
    }

    /// The leader's status.
    pub(super) async fn leader_status(&self, address: &str) -> Result<PeerStatus, FollowError> {
        let client = self.peer_client(address)?;
        let request = http::Request::get("/replication/v1/status").body(Vec::new())?;
        let text = client.request_text(request).await?;
        let status: PeerStatus = serde_json::from_str(&text)?;
        self.heard_from_leader(status.revision, status.warm);
        Ok(status)
    }

    /// Follows the leader at `address` until its stream ends or fails.
    pub(super) async fn follow(self: &Arc<Self>, address: &str) -> Result<(), FollowError> {
        let client = self.peer_client(address)?;
        self.following.caught_up.store(false, Ordering::Release);
        self.refresh_readiness();
        self.synchronize(&client).await?;
        self.following.synced.store(true, Ordering::Release);

        let after = self.store.head_revision();
        let request = http::Request::get(format!(
            "/replication/v1/stream?after={after}&identity={}",
            super::peer::percent_encode(&self.identity)
        ))
        .body(Vec::new())?;
        let reader = client.request_stream(request).await?;
        let acks = tokio::spawn(acknowledge(self.clone(), client.clone()));
        let result = self.apply_stream(reader).await;
        acks.abort();
        self.refresh_readiness();
        result
    }

    async fn apply_stream(&self, reader: impl futures_util::AsyncBufRead + Unpin) -> Result<(), FollowError> {
        let mut lines = reader.lines();
        loop {
            let line = match tokio::time::timeout(STREAM_SILENCE, futures_util::StreamExt::next(&mut lines)).await {
                Err(_) => return Err(FollowError::Silent(STREAM_SILENCE)),
                Ok(None) => return Err(FollowError::Ended),
                Ok(Some(line)) => line?,
            };
            if line.is_empty() {
                continue;
            }
            let event: StreamEvent = serde_json::from_str(&line)?;
            if event.kind == "BOOKMARK" {
                let bookmark: Bookmark = serde_json::from_str(event.object.get())?;
                let revision = bookmark.metadata.resource_version.parse().unwrap_or(0);
                let warm = bookmark.metadata.annotations.get(WARM_ANNOTATION).is_some_and(|w| w == "true");
                self.store.advance_to(revision);
                self.heard_from_leader(revision, warm);
                if !self.following.caught_up.swap(true, Ordering::AcqRel) {
                    tracing::info!(revision, objects = self.store.len(), "caught up with the leader");
                    self.refresh_readiness();
                }
                continue;
            }
            let Some(kind) = event_type(&event.kind) else {
                // An ERROR event (a Status) or anything else: resynchronize.
                return Err(FollowError::Ended);
            };
            let object: NodeResourceTopology = serde_json::from_str(event.object.get())?;
            self.store.apply_replicated(kind, object)?;
        }
    }

    /// Makes this store agree with the leader's: kept when it matches the leader's state at this
    /// store's revision (no watch on this replica notices a thing), else replaced by the
    /// leader's current state (watches from before get 410 and relist).
    async fn synchronize(&self, client: &kube::Client) -> Result<(), FollowError> {
        let (mine, revision) = self.store.revisions_by_name();
        if self.following.synced.load(Ordering::Acquire) {
            let exact =
                http::Request::get(format!("{}?resourceVersion={revision}&resourceVersionMatch=Exact", collection()))
                    .body(Vec::new())?;
            if let Ok(text) = client.request_text(exact).await
                && let Ok(list) = serde_json::from_str::<List>(&text)
                && same_state(&mine, &list.items)
            {
                tracing::info!(revision, objects = mine.len(), "this replica agrees with the leader; resuming");
                return Ok(());
            }
        }
        let text = client.request_text(http::Request::get(collection()).body(Vec::new())?).await?;
        let list: List = serde_json::from_str(&text)?;
        let leader_revision = list.metadata.resource_version.parse().unwrap_or(0);
        if self.following.synced.load(Ordering::Acquire) && leader_revision < revision {
            tracing::warn!(
                from = revision,
                to = leader_revision,
                "going back to the leader's earlier revision: this replica held changes no leader acknowledged"
            );
        }
        tracing::info!(
            from = revision,
            to = leader_revision,
            objects = list.items.len(),
            "taking the leader's state whole"
        );
        self.metrics.resyncs.inc();
        self.store.reset(list.items, leader_revision)?;
        Ok(())
    }
}

fn same_state(mine: &HashMap<String, u64>, theirs: &[NodeResourceTopology]) -> bool {
    mine.len() == theirs.len()
        && theirs.iter().all(|object| {
            let name = object.metadata.name.as_deref().unwrap_or_default();
            let revision = object.metadata.resource_version.as_deref().and_then(|rv| rv.parse::<u64>().ok());
            revision.is_some() && mine.get(name).copied() == revision
        })
}

/// Tells the leader how far this replica has applied, whenever that changes (coalesced: one
/// acknowledgement in flight at a time).
async fn acknowledge(replication: Arc<Replication>, client: kube::Client) {
    let mut changes = match replication.store.watch(None) {
        Ok(start) => start.changes,
        Err(_) => return,
    };
    let mut acked = 0;
    loop {
        let revision = replication.store.head_revision();
        if revision > acked {
            let ack = Ack { identity: replication.identity.clone(), revision };
            let request = serde_json::to_vec(&ack).map_err(|e| e.to_string()).and_then(|body| {
                http::Request::post("/replication/v1/ack")
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(body)
                    .map_err(|e| e.to_string())
            });
            match request {
                Ok(request) => match client.request_text(request).await {
                    Ok(text) => {
                        if let Ok(status) = serde_json::from_str::<PeerStatus>(&text) {
                            replication.heard_from_leader(status.revision, status.warm);
                        }
                        acked = revision;
                    }
                    Err(error) => {
                        tracing::debug!(%error, "acknowledging to the leader failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                },
                Err(error) => tracing::error!(%error, "building an acknowledgement"),
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}
