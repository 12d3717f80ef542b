//! The election loop: follow whoever leads, take the Lease when it is ours to take, lead until
//! the Lease is lost (then follow again) or the process stops (then hand the Lease to an
//! in-sync follower, so a rolling update has no window without a leader).
//!
//! Who may take a free or expired Lease: a replica that holds data and that the Lease names as
//! in sync (or any replica that holds data when the leader had no follower in sync). Replicas
//! that hold nothing (new ones, or all of them at a cold start) wait until the followers the
//! Lease names have not answered for a whole lease duration, or until the Lease is orphaned.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use numaresources_runtime::leader::{Decision, Expiry, LeaderLease, decide};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{FOLLOWER_LAG_ANNOTATION, IN_SYNC_ANNOTATION, PEER_ADDRESS_ANNOTATION, Replication, Role};

/// How often readiness is re-evaluated (it decays when the leader goes silent).
const READINESS_REFRESH: Duration = Duration::from_millis(200);
/// The first pause before reconnecting to a leader; doubled up to a second.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);
/// The Lease annotation with the leader's head revision at its last renewal.
pub const REVISION_ANNOTATION: &str = "nodetopology.openshift.io/revision";
/// How far past the last published head revision a new leader starts: more revisions than a
/// leader can hand out between two renewals and its renew deadline.
const REVISION_MARGIN: u64 = 100_000_000;

/// Runs the election for `replication` on `lease` until `shutdown` completes; a leader hands
/// the Lease over before returning.
pub async fn run(replication: Arc<Replication>, lease: LeaderLease, shutdown: impl Future<Output = ()>) {
    let lease = lease
        .with_annotations({
            let replication = replication.clone();
            move || replication.lease_annotations()
        })
        .with_written({
            let replication = replication.clone();
            move |annotations| {
                replication.lease_written(&in_sync_list(annotations.get(IN_SYNC_ANNOTATION).map(String::as_str)));
            }
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
            biased;
            () = replication.campaign(&lease) => replication.promote(),
            () = &mut shutdown => {
                // A follower keeps forwarding writes until its listener stops. A campaign cut
                // short may have taken the Lease after all: give it back (only if ours).
                lease.release().await;
                break;
            }
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

/// What a candidate can tell of the Lease's holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// Nothing to ask (no holder, this replica, or it follows a leader it has caught up with).
    Unknown,
    /// Its peer address answers as the holder.
    Answers,
    /// Its peer address does not answer: gone, or only cut off from this replica.
    Silent,
    /// Certainly gone: its address is this replica's own, or answers as another process.
    Gone,
}

/// The followers a Lease names as in sync.
fn in_sync_of(lease: Option<&Lease>) -> Vec<String> {
    in_sync_list(annotation(lease, IN_SYNC_ANNOTATION).map(String::as_str))
}

/// The identities in an in-sync annotation's value.
fn in_sync_list(annotation: Option<&str>) -> Vec<String> {
    annotation.unwrap_or_default().split(',').filter(|id| !id.is_empty()).map(str::to_owned).collect()
}

fn annotation<'a>(lease: Option<&'a Lease>, key: &str) -> Option<&'a String> {
    lease?.metadata.annotations.as_ref()?.get(key)
}

/// The peer address in an identity (`<host>_<IP:PORT>_<suffix>`, see the binary).
fn peer_address_of(identity: &str) -> Option<String> {
    let mut parts = identity.rsplitn(3, '_');
    let (_suffix, address) = (parts.next()?, parts.next()?);
    parts.next()?;
    Some(format!("https://{address}"))
}

/// The peer address of the replica holding `lease`, when someone else holds it and it is live.
fn live_leader(lease: Option<&Lease>, me: &str, expiry: Expiry) -> Option<String> {
    let spec = lease?.spec.as_ref()?;
    spec.holder_identity.as_deref().filter(|h| !h.is_empty() && *h != me)?;
    if expiry.expired {
        return None;
    }
    annotation(lease, PEER_ADDRESS_ANNOTATION).cloned()
}

impl Replication {
    /// What the holder writes on the Lease.
    fn lease_annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (PEER_ADDRESS_ANNOTATION.to_owned(), self.advertise.clone()),
            (IN_SYNC_ANNOTATION.to_owned(), self.published_in_sync().join(",")),
            (REVISION_ANNOTATION.to_owned(), self.store.replica().head_revision().to_string()),
            (FOLLOWER_LAG_ANNOTATION.to_owned(), self.follower_lag()),
        ])
    }

    /// Whether this replica may take a free or expired Lease (see the module's notes).
    fn eligible(&self, lease: Option<&Lease>) -> bool {
        let synced = self.following.synced.load(Ordering::Acquire);
        let in_sync = in_sync_of(lease);
        let named = synced && (in_sync.is_empty() || in_sync.contains(&self.identity));
        named || self.in_sync_gone.load(Ordering::Acquire)
    }

    /// Watches, while this replica may not take the Lease, whether the followers the Lease
    /// names are alive: none answering for a whole lease duration (a cold start: every
    /// replica is new) makes the Lease anyone's.
    async fn probe_in_sync(&self, lease: Option<&Lease>, duration: Duration, gone_since: &mut Option<Instant>) {
        let synced = self.following.synced.load(Ordering::Acquire);
        let in_sync = in_sync_of(lease);
        if synced && (in_sync.is_empty() || in_sync.contains(&self.identity)) {
            *gone_since = None;
            self.in_sync_gone.store(false, Ordering::Release);
            return;
        }
        // Whether some named follower might still be alive, unheard.
        let mut unheard = false;
        for identity in &in_sync {
            let Some(address) = peer_address_of(identity) else { continue };
            if address == self.advertise {
                continue; // An earlier process of this replica: this one listens there now.
            }
            match self.peer_status(&address).await {
                Ok(status) if status.identity == *identity => {
                    *gone_since = None;
                    self.in_sync_gone.store(false, Ordering::Release);
                    return;
                }
                // Its address answers as another process: the one the Lease names is gone.
                Ok(_) => {}
                Err(_) => unheard = true,
            }
        }
        let since = *gone_since.get_or_insert_with(Instant::now);
        if (!unheard || since.elapsed() >= duration) && !self.in_sync_gone.swap(true, Ordering::AcqRel) {
            tracing::info!(
                ?in_sync,
                "no follower the Lease names is there any more (gone, or silent for a lease duration); \
                 the Lease is anyone's"
            );
        }
    }

    /// What this replica can tell of the process the Lease names as its holder. Asked only
    /// while this replica is not following a leader it has caught up with.
    async fn holder(&self, lease: Option<&Lease>) -> Holder {
        let Some(holder) = lease.and_then(|l| l.spec.as_ref()).and_then(|s| s.holder_identity.as_deref()) else {
            return Holder::Unknown;
        };
        if holder.is_empty() || holder == self.identity || self.following.caught_up.load(Ordering::Acquire) {
            return Holder::Unknown;
        }
        let Some(address) = annotation(lease, PEER_ADDRESS_ANNOTATION) else { return Holder::Unknown };
        if *address == self.advertise {
            return Holder::Gone;
        }
        match self.peer_status(address).await {
            Ok(status) if status.identity == holder => Holder::Answers,
            Ok(_) => Holder::Gone,
            Err(_) => Holder::Silent,
        }
    }

    /// Follows the live leader until this replica holds the Lease.
    async fn campaign(self: &Arc<Self>, lease: &LeaderLease) {
        let wake = Arc::new(Notify::new());
        let mut following: Option<(String, JoinHandle<()>)> = None;
        let mut gone_since = None;
        let stop_following = |following: &mut Option<(String, JoinHandle<()>)>| {
            if let Some((_, task)) = following.take() {
                task.abort();
            }
        };
        loop {
            match lease.read().await {
                Ok(current) => {
                    let mut expiry = lease.observe(current.as_ref());
                    let holder = if expiry.expired { Holder::Unknown } else { self.holder(current.as_ref()).await };
                    if holder == Holder::Answers {
                        // A silence that ended counts for nothing later.
                        gone_since = None;
                        self.in_sync_gone.store(false, Ordering::Release);
                    }
                    if holder == Holder::Gone {
                        // Nobody renews it: waiting out the lease duration would only delay the
                        // election.
                        expiry.expired = true;
                    }
                    if let Some(revision) =
                        annotation(current.as_ref(), REVISION_ANNOTATION).and_then(|r| r.parse().ok())
                    {
                        self.high_water.fetch_max(revision, Ordering::AcqRel);
                    }
                    // Probed from the first sign of a silent holder, not from its expiry, so that
                    // when the Lease expires the followers it names have been silent as long.
                    if expiry.expired || holder == Holder::Silent || current.as_ref().is_none_or(|l| l.spec.is_none()) {
                        self.probe_in_sync(current.as_ref(), lease.timings().duration, &mut gone_since).await;
                    }
                    let eligible = self.eligible(current.as_ref());
                    if decide(current.as_ref(), &self.identity, expiry, eligible) != Decision::Wait {
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
                    } else if let Some(address) = live_leader(current.as_ref(), &self.identity, expiry) {
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

    /// Takes over: the sequence jumps past every revision a former leader may have handed out
    /// (the last one it published on the Lease, with a margin, and the current time in
    /// microseconds), so none is used again for something else; then writes are served.
    fn promote(&self) {
        let now_micros = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let published = self.high_water.load(Ordering::Acquire).saturating_add(REVISION_MARGIN);
        self.store.replica().advance_to(now_micros.max(published));
        self.following.synced.store(true, Ordering::Release);
        self.in_sync_gone.store(false, Ordering::Release);
        // What this replica holds now counts as committed: the followers it had resync to it.
        self.commit_floor(self.store.replica().head_revision());
        self.set_role(Role::Leader);
        self.update_visibility();
        tracing::info!(
            revision = self.store.replica().head_revision(),
            objects = self.store.len(),
            "leading the store"
        );
    }

    /// At shutdown: stop taking writes, give the Lease to an in-sync follower that holds
    /// everything (or release it when none does), then forward to that follower until the
    /// listeners stop.
    async fn hand_over(&self, lease: &LeaderLease) {
        self.set_role(Role::Stopping);
        let revision = self.store.replica().head_revision();
        match self.successor(revision).await {
            Some(successor) if lease.hand_over(&successor).await => {
                tracing::info!(%successor, revision, "handed the Lease over");
                if let Some(address) = peer_address_of(&successor) {
                    self.set_role(Role::Follower { address });
                }
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
    // A leader that is gone fails every redial until the election ends: said once at info,
    // the redials at debug.
    let mut said = false;
    loop {
        let started = Instant::now();
        if let Err(error) = replication.follow(&address).await {
            if said {
                tracing::debug!(%error, leader = %address, "still cannot follow the leader");
            } else {
                tracing::info!(%error, leader = %address, "following the leader stopped; redialling");
                said = true;
            }
        }
        wake.notify_one();
        if started.elapsed() > Duration::from_secs(10) {
            backoff = RECONNECT_BACKOFF;
            said = false;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
