//! Several replicas of the API server holding the same store, in memory, with the same
//! resourceVersions.
//!
//! ```text
//!            Lease (coordination.k8s.io): holder, peer address, in-sync followers
//!                 ▲ renew                         ▲ read, take when eligible
//!   ┌─────────────┴──────┐   stream (watch events, ┌─┴──────────────────┐
//!   │ leader             │── leader's RVs) ───────►│ follower           │ serves reads,
//!   │ applies writes,    │◄── ack (applied RV) ────│ applies the stream │ forwards writes
//!   │ acks a write once  │◄── forwarded writes ────│ (mutual TLS)       │ with the caller's
//!   │ in-sync followers  │                         └────────────────────┘ identity
//!   │ have it            │
//!   └────────────────────┘
//! ```
//!
//! - **One leader**, elected on a Lease ([`numaresources_runtime::leader`]): it alone assigns
//!   resourceVersions. On promotion it moves its sequence past the current time in
//!   microseconds, so no revision a former leader handed out (even one it never acknowledged)
//!   is ever used again for something else.
//! - **Followers** replicate the leader's store through the peer listener: after a (re)connect
//!   they check their state against the leader's (exact LISTs) and keep it up to the last
//!   revision both agree on, else take the leader's LIST whole; then they apply the leader's stream of
//!   watch events, which carries its resourceVersions unchanged. A watch on any replica can thus
//!   resume on any other from its last resourceVersion.
//! - **Semi-synchronous acknowledgement**: the leader answers a write once every in-sync
//!   follower has it. A follower that does not acknowledge within [`ACK_TIMEOUT`] leaves the
//!   in-sync set, and the Lease says so before the write is answered: only in-sync followers
//!   may take the Lease, so a new leader holds every acknowledged write. A write the in-sync
//!   followers hold is answered only once the Lease names one of them (a Lease naming none lets
//!   any replica holding data take over). Followers acknowledge only what the leader's stream
//!   brought. With no follower in sync the leader acknowledges alone (a metric and `/readyz`
//!   detail say so).
//! - **Writes on a follower** are forwarded to the leader with the caller's identity, which the
//!   follower authenticated and authorized; the leader trusts forwarded identities only on its
//!   peer listener, where every client presents a certificate of the peer CA.

#[cfg(test)]
mod ack_tests;
mod election;
mod follower;
mod forwarding;
mod leader;
mod peer;
#[cfg(test)]
mod resync_tests;
mod route;
#[cfg(test)]
mod store_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod warm_tests;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use numaresources_runtime::leader::LeaderLease;
use tokio::sync::watch;

use crate::Store;
use crate::health::Readiness;

pub use election::run;
pub use peer::router as peer_router;
pub use route::route;

/// How long the leader waits for in-sync followers to acknowledge a write before it drops the
/// laggards from the in-sync set.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a consistent LIST on a follower waits to reach the leader's revision before it is
/// forwarded to the leader instead (kube-apiserver's consistent reads from its cache wait 3 s).
pub const CONSISTENT_READ_WAIT: Duration = Duration::from_secs(3);
/// How long a forwarded write waits for the follower's own store to show it, so the caller
/// reads its own write on the replica it wrote through.
pub const READ_YOUR_WRITE_WAIT: Duration = Duration::from_secs(1);
/// The leader's stream sends a bookmark at least this often, so followers know it is alive and
/// how far it is.
pub const STREAM_HEARTBEAT: Duration = Duration::from_millis(250);
/// A follower that heard nothing from the leader for this long reconnects.
pub const STREAM_SILENCE: Duration = Duration::from_secs(2);
/// A follower that lost its leader keeps serving reads (and stays Ready) this long after it
/// last heard from it: the data is as fresh as any replica's while an election runs.
pub const FRESH_AFTER_LEADER_LOSS: Duration = Duration::from_secs(15);

/// The Lease annotation with the leader's peer address (`https://IP:PORT`).
pub const PEER_ADDRESS_ANNOTATION: &str = "nodetopology.openshift.io/peer-address";
/// The Lease annotation listing the followers that hold every acknowledged write.
pub const IN_SYNC_ANNOTATION: &str = "nodetopology.openshift.io/in-sync-replicas";
/// The Lease annotation with how many revisions each connected follower had not acknowledged
/// when the leader last wrote the Lease (`id=3,id=0`): replication lag, for `kubectl numa doctor`.
pub const FOLLOWER_LAG_ANNOTATION: &str = "nodetopology.openshift.io/follower-lag";

/// The readiness check that store warm-up reports (see the binary's warm-up task).
pub const STORE_WARM_CHECK: &str = "store-warm";
/// The readiness check replication reports.
pub const REPLICATION_CHECK: &str = "replication";

/// Headers carrying a forwarded request's caller, trusted on the peer listener only.
pub(crate) const FORWARDED_USER: &str = "x-numaresources-forwarded-user";
pub(crate) const FORWARDED_UID: &str = "x-numaresources-forwarded-uid";
pub(crate) const FORWARDED_GROUP: &str = "x-numaresources-forwarded-group";
pub(crate) const FORWARDED_EXTRA_PREFIX: &str = "x-numaresources-forwarded-extra-";
/// The leader's revision after a forwarded request, for the follower's read-your-write wait.
pub(crate) const LEADER_REVISION: &str = "x-numaresources-leader-revision";

/// How replicas reach and trust each other.
#[derive(Debug, Clone)]
pub struct PeerTls {
    /// The CA that signs every replica's peer certificate.
    pub ca_file: PathBuf,
    /// This replica's peer certificate (serverAuth and clientAuth) and key.
    pub cert_file: PathBuf,
    /// The key of `cert_file`.
    pub key_file: PathBuf,
    /// The name peer certificates are issued for (checked when connecting to the leader).
    pub server_name: String,
}

/// One replica's part in a replicated store: what [`crate::ApiServer::new`] makes its
/// [`Replication`] of.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// This replica's identity (the Lease holder name when it leads).
    pub identity: String,
    /// Where peers reach this replica's peer listener (`https://IP:PORT`).
    pub advertise: String,
    /// How replicas reach and trust each other.
    pub tls: PeerTls,
}

/// What a replica is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// No leader known: an election is under way. Writes are refused (503).
    Candidate,
    /// This replica leads.
    Leader,
    /// Another replica leads, at this peer address.
    Follower {
        /// `https://IP:PORT` of the leader's peer listener.
        address: String,
    },
    /// Stopping (a leader hands the Lease over first). Writes are refused (503).
    Stopping,
}

/// The replication state of one replica, shared by the election loop, the follower, the peer
/// listener and the request middleware.
#[derive(Debug)]
pub struct Replication {
    identity: String,
    advertise: String,
    tls: PeerTls,
    store: Arc<Store>,
    readiness: Arc<Readiness>,
    role: watch::Sender<Role>,
    lease: OnceLock<LeaderLease>,
    /// A client of the leader's peer listener, with the address it is for.
    peer_clients: Mutex<Option<PeerClient>>,
    /// The follower's view.
    following: Following,
    /// Set by the campaign when none of the followers the Lease names as in sync answers: the
    /// Lease is then anyone's to take (they are all gone, as at a cold start).
    in_sync_gone: AtomicBool,
    /// The highest head revision a leader published on the Lease: a new leader starts past it.
    high_water: AtomicU64,
    /// The revision from which this replica's store is warm (0: not yet known): a follower
    /// that has reached a warm leader's counts from there too, so that, once it leads, its own
    /// followers need reach no further.
    warm_at: AtomicU64,
    /// The leader's view of its followers.
    in_sync: leader::InSync,
    metrics: Metrics,
}

/// A client of a leader's peer listener, with the address it is for.
struct PeerClient {
    address: String,
    /// When the peer certificate and CA files last changed, as the client was built.
    modified: [Option<std::time::SystemTime>; 2],
    client: kube::Client,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient").field("address", &self.address).finish_non_exhaustive()
    }
}

/// What a follower knows of the leader it follows.
#[derive(Debug, Default)]
struct Following {
    /// The store has been synchronized with a leader at least once (an empty new store has
    /// not, and must never lead while a synchronized replica could).
    synced: AtomicBool,
    /// The current stream reached the leader's head at least once.
    caught_up: AtomicBool,
    /// The leader's revision, as last heard.
    leader_revision: AtomicU64,
    /// The revision from which the leader's store is warm, as last heard (0: it is not warm;
    /// one value, so that whether and from where are always read together).
    leader_warm_at: AtomicU64,
    /// This replica has reached a warm leader's warm revision (the leader's store was warm
    /// and this one holds at least what the leader's held then). Once true, it stays true: the
    /// store keeps everything it reached.
    warm: AtomicBool,
    /// When the follower last heard from a leader.
    last_heard: Mutex<Option<Instant>>,
}

/// Replication's Prometheus metrics.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    /// 1 on the leader.
    pub is_leader: prometheus_client::metrics::gauge::Gauge,
    /// Leadership changes this replica saw.
    pub leader_changes: prometheus_client::metrics::counter::Counter,
    /// Writes the leader acknowledged with no follower in sync.
    pub acknowledged_alone: prometheus_client::metrics::counter::Counter,
    /// Followers in sync (on the leader).
    pub in_sync_followers: prometheus_client::metrics::gauge::Gauge,
    /// Revisions the follower is behind the leader, as last heard.
    pub lag_revisions: prometheus_client::metrics::gauge::Gauge,
    /// Full resynchronizations (the follower's state did not match the leader's).
    pub resyncs: prometheus_client::metrics::counter::Counter,
}

impl Metrics {
    /// Registers the metrics under `<registry prefix>_replication_*`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let sub = registry.sub_registry_with_prefix("replication");
        sub.register("is_leader", "1 when this replica leads", self.is_leader.clone());
        sub.register("leader_changes", "Leadership changes this replica saw", self.leader_changes.clone());
        sub.register(
            "acknowledged_alone",
            "Writes the leader acknowledged with no follower in sync",
            self.acknowledged_alone.clone(),
        );
        sub.register("in_sync_followers", "Followers holding every acknowledged write", self.in_sync_followers.clone());
        sub.register("lag_revisions", "Revisions this follower is behind the leader", self.lag_revisions.clone());
        sub.register("resyncs", "Full resynchronizations from the leader", self.resyncs.clone());
    }
}

impl Replication {
    /// The replication state of replica `identity`, whose peer listener peers reach at
    /// `advertise` (`https://IP:PORT`).
    pub fn new(
        identity: String,
        advertise: String,
        tls: PeerTls,
        store: Arc<Store>,
        readiness: Arc<Readiness>,
    ) -> Self {
        readiness.set(REPLICATION_CHECK, false);
        Self {
            identity,
            advertise,
            tls,
            store,
            readiness,
            role: watch::Sender::new(Role::Candidate),
            lease: OnceLock::new(),
            peer_clients: Mutex::new(None),
            following: Following::default(),
            in_sync_gone: AtomicBool::new(false),
            high_water: AtomicU64::new(0),
            warm_at: AtomicU64::new(0),
            in_sync: leader::InSync::default(),
            metrics: Metrics::default(),
        }
    }

    /// This replica's identity (the Lease holder name when it leads).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The role now.
    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// Tells of every role change.
    pub fn roles(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// The metrics, to register.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn set_role(&self, role: Role) {
        let changed = self.role.send_if_modified(|current| {
            if *current == role {
                return false;
            }
            *current = role.clone();
            true
        });
        if changed {
            self.metrics.is_leader.set(i64::from(role == Role::Leader));
            self.metrics.leader_changes.inc();
            self.refresh_readiness();
        }
    }

    /// True when this replica's own store is warm (or nothing decides warmth).
    fn locally_warm(&self) -> bool {
        self.readiness.get(STORE_WARM_CHECK).unwrap_or(true)
    }

    /// The revision from which this replica's store is warm, once it is (see [`Replication::warm_at`]);
    /// when its own warm-up decided, the revision clients saw when that was first noticed (a
    /// little later than the decision: followers then wait a little longer, never too little).
    fn warm_revision(&self) -> Option<u64> {
        if !self.locally_warm() {
            return None;
        }
        let noticed = self.store.visible_revision();
        match self.warm_at.compare_exchange(0, noticed, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(noticed),
            Err(recorded) => Some(recorded),
        }
    }

    /// Whether this replica can answer reads correctly now: the leader once warm; a follower
    /// whose store reached what a warm leader's held when it became warm, and that heard from
    /// a warm leader recently. A follower that lags the leader it heard is warm is not: at a
    /// cold start, the last objects the leader waited for may still be on their way.
    pub fn serves_reads(&self) -> bool {
        match self.role() {
            Role::Leader | Role::Stopping => self.locally_warm(),
            Role::Follower { .. } | Role::Candidate => {
                self.following.synced.load(Ordering::Acquire)
                    && self.following.warm.load(Ordering::Acquire)
                    && self.following.leader_warm_at.load(Ordering::Acquire) != 0
                    && self.heard_recently()
            }
        }
    }

    /// Whether this replica's store follows the leader's closely enough to say which objects
    /// exist, warm or not: the leader; a follower whose current stream reached the leader's
    /// head and that heard from it recently. During a cold start no replica serves reads, but
    /// these can tell an exporter that its object is missing ([`crate::held`]).
    pub(crate) fn tracks_the_leader(&self) -> bool {
        match self.role() {
            Role::Leader => true,
            Role::Stopping => false,
            Role::Follower { .. } | Role::Candidate => {
                self.following.caught_up.load(Ordering::Acquire) && self.heard_recently()
            }
        }
    }

    fn heard_recently(&self) -> bool {
        let last = *self.following.last_heard.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        last.is_some_and(|at| at.elapsed() < FRESH_AFTER_LEADER_LOSS)
    }

    /// The leader said its head `revision`, and from which revision its store is warm (None:
    /// it is not). Call after this replica applied what came with it.
    fn heard_from_leader(&self, revision: u64, warm_at: Option<u64>) {
        self.following.leader_revision.fetch_max(revision, Ordering::AcqRel);
        // Revisions start at the time in microseconds: 0 is never one, and means "not warm".
        let warm_at = warm_at.map(|at| at.max(1)).unwrap_or(0);
        self.following.leader_warm_at.store(warm_at, Ordering::Release);
        *self.following.last_heard.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        let behind = revision.saturating_sub(self.store.replica().head_revision());
        self.metrics.lag_revisions.set(i64::try_from(behind).unwrap_or(i64::MAX));
        let reached = warm_at != 0 && self.store.visible_revision() >= warm_at;
        if reached && !self.following.warm.swap(true, Ordering::AcqRel) {
            let _ = self.warm_at.compare_exchange(0, warm_at, Ordering::AcqRel, Ordering::Acquire);
            tracing::info!(
                revision = self.store.visible_revision(),
                leader_warm_at = warm_at,
                objects = self.store.len(),
                "reached the warm leader's state: the store is warm"
            );
            // This store is as warm as the leader's was: also once it leads.
            self.readiness.set(STORE_WARM_CHECK, true);
            self.refresh_readiness();
        }
    }

    /// Publishes [`REPLICATION_CHECK`] from the current state.
    fn refresh_readiness(&self) {
        let ready = match self.role() {
            Role::Leader => true,
            Role::Stopping => false,
            Role::Follower { .. } | Role::Candidate => {
                self.serves_reads() && self.following.caught_up.load(Ordering::Acquire)
            }
        };
        self.readiness.set(REPLICATION_CHECK, ready);
    }

    /// Waits until clients of this replica see `revision`, for at most `wait`. True when they
    /// do.
    async fn reached(&self, revision: u64, wait: Duration) -> bool {
        self.store.wait_visible(revision, wait).await
    }
}
