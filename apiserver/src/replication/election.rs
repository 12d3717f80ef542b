//! The election loop: follow whoever leads, take the Lease when it is ours to take, lead until
//! the Lease is lost (then follow again) or the process stops (then hand the Lease to an
//! in-sync follower, so a rolling update has no window without a leader).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use numaresources_certs::leader::{Decision, LeaderLease, decide};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{IN_SYNC_ANNOTATION, PEER_ADDRESS_ANNOTATION, Replication, Role};

/// How often readiness is re-evaluated (it decays when the leader goes silent).
const READINESS_REFRESH: Duration = Duration::from_millis(200);
/// How long a follower named by the Lease has to answer the probe of a candidate.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// The first pause before reconnecting to a leader; doubled up to the Lease's retry period.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// Runs the election for `replication` on `lease` until `shutdown` completes; a leader hands
/// the Lease over before returning.
pub async fn run(replication: Arc<Replication>, lease: LeaderLease, shutdown: impl Future<Output = ()>) {
    let lease = lease
        .with_annotations({
            let replication = replication.clone();
            move || replication.lease_annotations()
        })
        .with_eligibility({
            let replication = replication.clone();
            move |lease| replication.eligible(lease)
        });
    let _ = replication.lease.set(lease.clone());
    let readiness = tokio::spawn({
        let replication = replication.clone();
        async move {
            loop {
                replication.refresh_readiness();
                tokio::time::sleep(READINESS_REFRESH).await;
            }
        }
    });
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => {
                replication.set_role(Role::Stopping);
                break;
            }
            () = replication.campaign(&lease) => replication.promote(),
        }
        tokio::select! {
            () = lease.hold() => {
                tracing::error!("lost the Lease; following the new leader");
                replication.set_role(Role::Candidate);
            }
            () = &mut shutdown => {
                replication.hand_over(&lease).await;
                break;
            }
        }
    }
    readiness.abort();
}

/// The followers a Lease names as in sync.
fn in_sync_of(lease: Option<&Lease>) -> Vec<String> {
    lease
        .and_then(|l| l.metadata.annotations.as_ref())
        .and_then(|a| a.get(IN_SYNC_ANNOTATION))
        .map(|list| list.split(',').filter(|id| !id.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The peer address in an identity (`<host>_<IP:PORT>_<suffix>`, see the binary).
fn peer_address_of(identity: &str) -> Option<String> {
    let mut parts = identity.rsplitn(3, '_');
    let (_suffix, address) = (parts.next()?, parts.next()?);
    parts.next()?;
    Some(format!("https://{address}"))
}

/// The peer address of the replica holding `lease`, when someone else holds it and it is live.
fn live_leader(lease: Option<&Lease>, me: &str, now: Timestamp) -> Option<String> {
    let lease = lease?;
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty() && *h != me)?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    if renewed.checked_add(duration).is_ok_and(|end| end < now) {
        return None;
    }
    let address = lease.metadata.annotations.as_ref()?.get(PEER_ADDRESS_ANNOTATION)?;
    tracing::trace!(holder, address, "live leader");
    Some(address.clone())
}

impl Replication {
    /// What the holder writes on the Lease.
    fn lease_annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (PEER_ADDRESS_ANNOTATION.to_owned(), self.advertise.clone()),
            (IN_SYNC_ANNOTATION.to_owned(), self.published_in_sync().join(",")),
        ])
    }

    /// Whether this replica may take a free or expired Lease: it must hold every acknowledged
    /// write, which the in-sync followers the Lease names do. With none named (the leader was
    /// alone), any replica that holds data may, and anyone may create a Lease that does not
    /// exist yet.
    fn eligible(&self, lease: Option<&Lease>) -> bool {
        let synced = self.following.synced.load(Ordering::Acquire);
        let in_sync = in_sync_of(lease);
        let named =
            if in_sync.is_empty() { synced || lease.is_none() } else { synced && in_sync.contains(&self.identity) };
        named || self.in_sync_gone.load(Ordering::Acquire)
    }

    /// When the Lease has been free for a while and this replica may not take it: asks each
    /// follower the Lease names whether it is alive. None answering (a cold start: every replica
    /// is new) makes the Lease anyone's, instead of waiting for it to be orphaned.
    async fn probe_in_sync(&self, lease: Option<&Lease>, now: Timestamp, retry: Duration) {
        self.in_sync_gone.store(false, Ordering::Release);
        if self.eligible(lease) || decide(lease, &self.identity, now, true) == Decision::Wait {
            return;
        }
        // Give the named followers, which look at the Lease every retry period, the first go.
        let grace = SignedDuration::try_from(retry * 2).unwrap_or(SignedDuration::ZERO);
        if lease.and_then(|l| l.spec.as_ref()).and_then(|s| s.renew_time.as_ref()).is_some_and(|renewed| {
            let seconds = i64::from(lease.and_then(|l| l.spec.as_ref()?.lease_duration_seconds).unwrap_or(0));
            renewed.0.checked_add(SignedDuration::from_secs(seconds) + grace).is_ok_and(|t| t > now)
        }) {
            return;
        }
        for identity in in_sync_of(lease) {
            let Some(address) = peer_address_of(&identity) else { continue };
            let alive = tokio::time::timeout(PROBE_TIMEOUT, self.leader_status(&address)).await;
            if matches!(alive, Ok(Ok(_))) {
                return;
            }
        }
        tracing::info!("no follower named in sync by the Lease answers; the Lease is anyone's");
        self.in_sync_gone.store(true, Ordering::Release);
    }

    /// Follows the live leader until this replica holds the Lease.
    async fn campaign(self: &Arc<Self>, lease: &LeaderLease) {
        let wake = Arc::new(Notify::new());
        let mut following: Option<(String, JoinHandle<()>)> = None;
        let stop_following = |following: &mut Option<(String, JoinHandle<()>)>| {
            if let Some((_, task)) = following.take() {
                task.abort();
            }
        };
        loop {
            match lease.read().await {
                Ok(current) => {
                    let now = Timestamp::now();
                    self.probe_in_sync(current.as_ref(), now, lease.timings().retry).await;
                    let eligible = self.eligible(current.as_ref());
                    if decide(current.as_ref(), &self.identity, now, eligible) != Decision::Wait {
                        // What the new leader's writes wait for, and what its first Lease
                        // write publishes: the followers the previous leader named.
                        self.start_leading_with(in_sync_of(current.as_ref()));
                        match lease.try_acquire_or_renew().await {
                            Ok(true) => {
                                stop_following(&mut following);
                                return;
                            }
                            Ok(false) => {}
                            Err(error) => tracing::warn!(%error, "leader election"),
                        }
                    } else if let Some(address) = live_leader(current.as_ref(), &self.identity, now) {
                        if following.as_ref().map(|(at, _)| at) != Some(&address) {
                            stop_following(&mut following);
                            tracing::info!(leader = %address, "following the leader");
                            let task = tokio::spawn(follow_loop(self.clone(), address.clone(), wake.clone()));
                            following = Some((address.clone(), task));
                            self.set_role(Role::Follower { address });
                        }
                    } else {
                        stop_following(&mut following);
                        self.set_role(Role::Candidate);
                    }
                }
                Err(error) => tracing::warn!(%error, "leader election: cannot read the Lease"),
            }
            tokio::select! {
                () = tokio::time::sleep(lease.timings().retry) => {}
                () = wake.notified() => {}
            }
        }
    }

    /// Takes over: the sequence jumps past the current time in microseconds (no revision a
    /// former leader handed out, acknowledged or not, is used again), then writes are served.
    fn promote(&self) {
        let now_micros = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        self.store.advance_to(now_micros);
        self.following.synced.store(true, Ordering::Release);
        // What this replica holds now counts as committed: the followers it had resync to it.
        self.commit_floor(self.store.head_revision());
        self.set_role(Role::Leader);
        self.update_visibility();
        tracing::info!(revision = self.store.head_revision(), objects = self.store.len(), "leading the store");
    }

    /// At shutdown: stop taking writes, then give the Lease to an in-sync follower that holds
    /// everything (or release it when none does).
    async fn hand_over(&self, lease: &LeaderLease) {
        self.set_role(Role::Stopping);
        let revision = self.store.head_revision();
        match self.successor(revision).await {
            Some(successor) if lease.hand_over(&successor).await => {
                tracing::info!(%successor, revision, "handed the Lease over");
            }
            _ => {
                tracing::info!("no follower holds everything; releasing the Lease");
                lease.release().await;
            }
        }
    }
}

/// Follows `address`, reconnecting with a short backoff; each failure wakes the campaign, which
/// re-reads the Lease (the leader may be gone).
async fn follow_loop(replication: Arc<Replication>, address: String, wake: Arc<Notify>) {
    let mut backoff = RECONNECT_BACKOFF;
    loop {
        match replication.follow(&address).await {
            Ok(()) => backoff = RECONNECT_BACKOFF,
            Err(error) => tracing::info!(%error, leader = %address, "following the leader stopped"),
        }
        wake.notify_one();
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
