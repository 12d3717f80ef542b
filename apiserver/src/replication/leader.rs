//! The leader's side: which followers are in sync, and the wait that makes a write's
//! acknowledgement semi-synchronous.
//!
//! Three sets, on purpose: `waiting` is what a write waits for, `published` is what the next
//! Lease write says (who may take over), `recorded` what a Lease write kube-apiserver accepted
//! said and the Lease still says. A follower joins `waiting` and `published` as soon as it has
//! caught up, and `recorded` once a Lease write named it. It leaves `published` and `recorded`
//! first, then the Lease says so, and only once that write succeeded it leaves `waiting`. So
//! the Lease never names a follower that writes do not wait for.
//!
//! A write waits for every follower in `waiting`, and, when there is one, for the Lease to name
//! one (`recorded` not empty): a Lease that names no follower lets any replica that holds data
//! take over (the leader was alone), so a write that only the followers hold is safe only
//! once the Lease names them, and then only they may take over.
//!
//! Acknowledgements count only when they come with the token of the follower's live stream: an
//! acknowledgement meant for an earlier leader, or sent after the stream ended, says nothing
//! about what this leader sent.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{ACK_TIMEOUT, Replication, Role};

/// How long writes wait for the last connected in-sync followers before the leader goes on
/// acknowledging alone (a follower whose stream ends leaves at once).
pub(super) const ALONE_AFTER: std::time::Duration = std::time::Duration::from_secs(10);
use crate::status::ApiError;

#[derive(Debug, Default)]
pub(super) struct InSync {
    state: Mutex<Followers>,
    /// Bumped on every acknowledgement and membership change: wakes waiting writes.
    progress: watch::Sender<u64>,
    /// One change of the Lease's in-sync list at a time (writes that time out together drop
    /// their laggards once, not each).
    dropping: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Followers {
    /// What counts as committed whatever the followers say (the state a new leader took over).
    floor: u64,
    /// Each live stream's token, by follower.
    streams: HashMap<String, String>,
    /// Each follower's highest acknowledged revision (followers with a live stream only).
    acked: HashMap<String, u64>,
    waiting: BTreeSet<String>,
    published: BTreeSet<String>,
    recorded: BTreeSet<String>,
}

impl Followers {
    /// The revision every follower writes wait for holds (None: none is waited for).
    fn committed(&self) -> Option<u64> {
        let slowest = self.waiting.iter().map(|id| self.acked.get(id).copied().unwrap_or(0)).min()?;
        Some(slowest.max(self.floor))
    }
}

impl InSync {
    /// What `identity` is known to hold (tests).
    #[cfg(test)]
    pub(super) fn acked_by(&self, identity: &str) -> Option<u64> {
        self.lock().acked.get(identity).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Followers> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.progress.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Replication {
    /// A new leader starts with the followers the previous leader's Lease named: they hold every
    /// write acknowledged so far, and writes wait for them until they acknowledge or time out.
    pub(super) fn start_leading_with(&self, previous: impl IntoIterator<Item = String>) {
        let mut followers = self.in_sync.lock();
        let previous: BTreeSet<String> = previous.into_iter().filter(|id| *id != self.identity).collect();
        followers.acked.clear();
        followers.streams.clear();
        followers.waiting = previous.clone();
        followers.published = previous;
        // Until this replica's own Lease write names them (its acquisition does).
        followers.recorded.clear();
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
        if matches!(self.role(), Role::Leader | Role::Stopping) {
            // Set under the followers' lock: two acknowledgements that computed their committed
            // revisions in one order must not set them in the other (what clients see would
            // move back).
            let followers = self.in_sync.lock();
            self.store.replica().set_visible(followers.committed());
        }
    }

    /// The followers the Lease names as in sync.
    pub(super) fn published_in_sync(&self) -> Vec<String> {
        self.in_sync.lock().published.iter().cloned().collect()
    }

    /// How many revisions each connected follower has not acknowledged yet: `id=N,...`, sorted.
    pub(super) fn follower_lag(&self) -> String {
        let head = self.store.replica().head_revision();
        let followers = self.in_sync.lock();
        let mut lag: Vec<(&String, u64)> =
            followers.acked.iter().map(|(id, acked)| (id, head.saturating_sub(*acked))).collect();
        lag.sort();
        lag.iter().map(|(id, behind)| format!("{id}={behind}")).collect::<Vec<_>>().join(",")
    }

    /// A Lease write kube-apiserver accepted named `in_sync`: those of them still published are
    /// what the Lease says now (a follower dropped meanwhile stays out).
    pub(super) fn lease_written(&self, in_sync: &[String]) {
        let mut followers = self.in_sync.lock();
        followers.recorded = in_sync.iter().filter(|id| followers.published.contains(*id)).cloned().collect();
        drop(followers);
        self.in_sync.bump();
    }

    /// Writes the in-sync list on the Lease (after a follower joined).
    pub(super) async fn publish_in_sync(&self) {
        if let Some(lease) = self.lease.get()
            && matches!(self.role(), Role::Leader | Role::Stopping)
            && !lease.renew().await
        {
            tracing::warn!("could not record the in-sync followers on the Lease");
        }
    }

    /// A follower opened a stream: from now on only its acknowledgements with `token` count.
    pub(super) fn stream_started(&self, identity: &str, token: &str) {
        let mut followers = self.in_sync.lock();
        followers.streams.insert(identity.to_owned(), token.to_owned());
        followers.acked.remove(identity);
    }

    /// Follower `identity` has applied everything up to `revision` on its stream `token`.
    /// Returns whether it just joined the in-sync set.
    pub(super) fn acknowledge(&self, identity: &str, token: &str, revision: u64) -> bool {
        // A follower's store holds only what this leader sent it, so it can never be ahead of
        // this leader's head. One that says so is telling of a state of its own: a follower that
        // started after this leader starts its store at its own, later clock, and acknowledged
        // that before the snapshot replaced it. Counted (acknowledgements only ever raise what a
        // follower is known to hold), it would stand for every write to come, and writes would
        // stop waiting for that follower: an acknowledged write could then be lost with the
        // leader when that follower, lacking it, took over.
        if revision > self.store.replica().head_revision() {
            tracing::debug!(follower = identity, revision, "an acknowledgement ahead of this leader is ignored");
            return false;
        }
        // A follower joins once it holds everything clients may see.
        let committed = self.store.visible_revision();
        let mut guard = self.in_sync.lock();
        let followers = &mut *guard;
        if followers.streams.get(identity).is_none_or(|live| live != token) {
            return false;
        }
        let acked = followers.acked.entry(identity.to_owned()).or_default();
        *acked = (*acked).max(revision);
        let joined = revision >= committed && followers.waiting.insert(identity.to_owned());
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

    /// A follower's stream `token` ended: it no longer receives writes, so writes stop waiting
    /// for it (the Lease first).
    pub(super) async fn follower_gone(&self, identity: &str, token: &str) {
        let waited_for = {
            let mut followers = self.in_sync.lock();
            if followers.streams.get(identity).is_none_or(|live| live != token) {
                return; // a newer stream of the same follower is live
            }
            followers.streams.remove(identity);
            followers.acked.remove(identity);
            followers.waiting.contains(identity)
        };
        if waited_for {
            tracing::info!(follower = identity, "a follower disconnected; it leaves the in-sync set");
            self.drop_from_sync(&[identity.to_owned()]).await;
        }
    }

    /// Waits until every in-sync follower has `revision` (the leader's semi-synchronous
    /// acknowledgement). Followers that do not acknowledge within [`ACK_TIMEOUT`] leave the
    /// in-sync set. Fails when leadership is lost meanwhile: the write was applied here but may
    /// be lost, so the caller gets kube-apiserver's "may or may not have happened".
    pub(super) async fn replicated(&self, revision: u64) -> Result<(), ApiError> {
        let started = Instant::now();
        let mut deadline = started + ACK_TIMEOUT;
        let mut progress = self.in_sync.progress.subscribe();
        loop {
            if !matches!(self.role(), Role::Leader | Role::Stopping) {
                return Err(ApiError::timeout(
                    "leadership was lost before the write was replicated; it may or may not have been applied",
                    1,
                ));
            }
            let (missing, named) = {
                let followers = self.in_sync.lock();
                if followers.waiting.is_empty() {
                    self.metrics.acknowledged_alone.inc();
                    return Ok(());
                }
                let missing: Vec<String> = followers
                    .waiting
                    .iter()
                    .filter(|id| followers.acked.get(*id).copied().unwrap_or(0) < revision)
                    .cloned()
                    .collect();
                (missing, !followers.recorded.is_empty())
            };
            if missing.is_empty() && named {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, progress.changed()).await.is_err() {
                if missing.is_empty() {
                    // Every follower has it, but the Lease names none of them yet: name them.
                    self.publish_in_sync().await;
                    deadline = Instant::now() + ACK_TIMEOUT;
                    continue;
                }
                tracing::debug!(?missing, revision, waited = ?started.elapsed(), role = ?self.role(),
                    "a write still waits for followers");
                // Dropping every follower would leave the leader acknowledging alone, and a
                // write acknowledged alone is lost with the leader: the last followers, slow but
                // connected, are waited for longer.
                let everyone = missing.len() >= self.in_sync.lock().waiting.len();
                if everyone && started.elapsed() < ALONE_AFTER {
                    deadline = Instant::now() + ACK_TIMEOUT;
                    continue;
                }
                tracing::warn!(?missing, revision, "followers did not acknowledge in time; they leave the in-sync set");
                self.drop_from_sync(&missing).await;
                deadline = Instant::now() + ACK_TIMEOUT;
            }
        }
    }

    /// Removes `identities` from the Lease's in-sync list (a Lease write), then, once the Lease
    /// says so, from what writes wait for. When the Lease cannot be written they stay waited
    /// for: the write waits on, until the Lease is written or leadership is lost.
    async fn drop_from_sync(&self, identities: &[String]) {
        let _one_at_a_time = self.in_sync.dropping.lock().await;
        let dropping: Vec<String> = {
            let mut followers = self.in_sync.lock();
            let dropping: Vec<String> =
                identities.iter().filter(|id| followers.waiting.contains(*id)).cloned().collect();
            for identity in &dropping {
                followers.published.remove(identity);
                followers.recorded.remove(identity);
            }
            dropping
        };
        if dropping.is_empty() {
            return; // another write dropped them meanwhile
        }
        let recorded = match self.lease.get() {
            Some(lease) => lease.renew().await,
            None => true,
        };
        let mut followers = self.in_sync.lock();
        if !recorded {
            tracing::error!(?dropping, "could not record on the Lease that followers left the in-sync set");
            for identity in dropping {
                followers.published.insert(identity);
            }
            return;
        }
        for identity in &dropping {
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
