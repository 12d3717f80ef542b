//! The leader's side: which followers are in sync, and the wait that makes a write's
//! acknowledgement semi-synchronous.
//!
//! Two sets, on purpose: `waiting` is what a write waits for, `published` is what the Lease
//! says (who may take over). A follower joins `waiting` as soon as it has caught up (stricter
//! at once, and safe before the Lease says so) and `published` with the next Lease write. It
//! leaves `published` first, with a Lease write, and only then `waiting`: no write is ever
//! acknowledged without a follower the Lease still names as a possible successor.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{ACK_TIMEOUT, Replication};
use crate::status::ApiError;

#[derive(Debug, Default)]
pub(super) struct InSync {
    state: Mutex<Followers>,
    /// Bumped on every acknowledgement and membership change: wakes waiting writes.
    progress: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Followers {
    /// What counts as committed whatever the followers say (the state a new leader took over).
    floor: u64,
    /// Each follower's highest acknowledged revision.
    acked: HashMap<String, u64>,
    waiting: BTreeSet<String>,
    published: BTreeSet<String>,
}

impl InSync {
    fn lock(&self) -> std::sync::MutexGuard<'_, Followers> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.progress.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The revision every followers writes wait for holds (None: no follower is waited for).
    fn committed(&self) -> Option<u64> {
        let followers = self.lock();
        let slowest = followers.waiting.iter().map(|id| followers.acked.get(id).copied().unwrap_or(0)).min()?;
        Some(slowest.max(followers.floor))
    }
}

impl Replication {
    /// A new leader starts with the followers the previous leader's Lease named: they hold every
    /// write acknowledged so far, and writes wait for them until they acknowledge or time out.
    pub(super) fn start_leading_with(&self, previous: impl IntoIterator<Item = String>) {
        let mut followers = self.in_sync.lock();
        let previous: BTreeSet<String> = previous.into_iter().filter(|id| *id != self.identity).collect();
        followers.acked.clear();
        followers.waiting = previous.clone();
        followers.published = previous;
        self.metrics.in_sync_followers.set(i64::try_from(followers.waiting.len()).unwrap_or(i64::MAX));
        drop(followers);
        self.in_sync.bump();
    }

    /// Counts everything up to `revision` as committed (a new leader's state).
    pub(super) fn commit_floor(&self, revision: u64) {
        self.in_sync.lock().floor = revision;
    }

    /// Lets clients see what every in-sync follower holds (a leader's business only).
    pub(super) fn update_visibility(&self) {
        if matches!(self.role(), super::Role::Leader | super::Role::Stopping) {
            self.store.set_visible(self.in_sync.committed());
        }
    }

    /// The followers the Lease names as in sync.
    pub(super) fn published_in_sync(&self) -> Vec<String> {
        self.in_sync.lock().published.iter().cloned().collect()
    }

    /// Follower `identity` has applied everything up to `revision`. Returns whether it just
    /// joined the in-sync set.
    pub(super) fn acknowledge(&self, identity: &str, revision: u64) -> bool {
        let head = self.store.head_revision();
        let mut guard = self.in_sync.lock();
        let followers = &mut *guard;
        let acked = followers.acked.entry(identity.to_owned()).or_default();
        *acked = (*acked).max(revision);
        let joined = revision >= head && followers.waiting.insert(identity.to_owned());
        if joined {
            followers.published.insert(identity.to_owned());
            self.metrics.in_sync_followers.set(i64::try_from(followers.waiting.len()).unwrap_or(i64::MAX));
        }
        drop(guard);
        self.in_sync.bump();
        self.update_visibility();
        if joined {
            tracing::info!(follower = identity, revision, "a follower is in sync");
        }
        joined
    }

    /// Writes the in-sync list on the Lease (after a follower joined).
    pub(super) async fn publish_in_sync(&self) {
        if let Some(lease) = self.lease.get()
            && self.role() == super::Role::Leader
            && !lease.renew().await
        {
            tracing::warn!("could not record the in-sync followers on the Lease");
        }
    }

    /// A follower's stream ended: it no longer receives writes, so writes stop waiting for it
    /// (the Lease first).
    pub(super) async fn follower_gone(&self, identity: &str) {
        if self.in_sync.lock().waiting.contains(identity) {
            tracing::info!(follower = identity, "a follower disconnected; it leaves the in-sync set");
            self.drop_from_sync(&[identity.to_owned()]).await;
        }
    }

    /// Waits until every in-sync follower has `revision` (the leader's semi-synchronous
    /// acknowledgement). Followers that do not acknowledge within [`ACK_TIMEOUT`] leave the
    /// in-sync set. Fails only when leadership is lost meanwhile: the write was applied here but
    /// may be lost, so the caller gets kube-apiserver's "may or may not have happened".
    pub(super) async fn replicated(&self, revision: u64) -> Result<(), ApiError> {
        let deadline = Instant::now() + ACK_TIMEOUT;
        let mut progress = self.in_sync.progress.subscribe();
        loop {
            let missing: Vec<String> = {
                let followers = self.in_sync.lock();
                if followers.waiting.is_empty() {
                    self.metrics.acknowledged_alone.inc();
                    return Ok(());
                }
                followers
                    .waiting
                    .iter()
                    .filter(|id| followers.acked.get(*id).copied().unwrap_or(0) < revision)
                    .cloned()
                    .collect()
            };
            if missing.is_empty() {
                return Ok(());
            }
            if self.role() != super::Role::Leader && self.role() != super::Role::Stopping {
                return Err(ApiError::timeout(
                    "leadership was lost before the write was replicated; it may or may not have been applied",
                    1,
                ));
            }
            if tokio::time::timeout_at(deadline, progress.changed()).await.is_err() {
                tracing::warn!(?missing, revision, "followers did not acknowledge in time; they leave the in-sync set");
                self.drop_from_sync(&missing).await;
            }
        }
    }

    /// Removes `identities` from the Lease's in-sync list (a Lease write), then from what writes
    /// wait for.
    async fn drop_from_sync(&self, identities: &[String]) {
        {
            let mut followers = self.in_sync.lock();
            for identity in identities {
                followers.published.remove(identity);
            }
        }
        if let Some(lease) = self.lease.get()
            && self.role() == super::Role::Leader
            && !lease.renew().await
        {
            tracing::error!("could not record the in-sync followers on the Lease");
        }
        let mut followers = self.in_sync.lock();
        for identity in identities {
            followers.waiting.remove(identity);
        }
        self.metrics.in_sync_followers.set(i64::try_from(followers.waiting.len()).unwrap_or(i64::MAX));
        drop(followers);
        self.in_sync.bump();
        self.update_visibility();
    }

    /// An in-sync follower holding `revision`, to hand the Lease to at shutdown (waits for one up
    /// to [`ACK_TIMEOUT`]).
    pub(super) async fn successor(&self, revision: u64) -> Option<String> {
        let deadline = Instant::now() + ACK_TIMEOUT;
        let mut progress = self.in_sync.progress.subscribe();
        loop {
            {
                let followers = self.in_sync.lock();
                let ready = followers.published.iter().find(|id| {
                    followers.waiting.contains(*id) && followers.acked.get(*id).is_some_and(|r| *r >= revision)
                });
                if let Some(id) = ready {
                    return Some(id.clone());
                }
            }
            if tokio::time::timeout_at(deadline, progress.changed()).await.is_err() {
                return None;
            }
        }
    }
}
