//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does it:
//! take the Lease when it is free or expired, renew it every [`LeaseTimings::retry`], and give up
//! (stop acting) when it could not be renewed within [`LeaseTimings::renew_deadline`], so two
//! leaders never act for longer than the lease's duration. Writes carry the Lease's
//! resourceVersion: of two candidates racing for it, the API server lets exactly one win.
//!
//! A renewal is one or more attempts, every [`LeaseTimings::retry`], until one succeeds or the
//! renew deadline passes; each request is cut off at the time left, so a hung connection cannot
//! keep a leader acting past its lease. A write conflict (someone touched the Lease between our
//! read and our write) is just another failed attempt: the next one reads the Lease again, and
//! only a Lease held by someone else ends leadership at once.
//!
//! Two additions over client-go, both optional, for leaders whose state followers replicate
//! (the NRT API server):
//! - the holder publishes annotations on the Lease with every write ([`LeaderLease::with_annotations`]):
//!   where followers reach it, and which followers hold every acknowledged write;
//! - a candidate may be ineligible ([`LeaderLease::with_eligibility`]): it takes a free or expired
//!   Lease only when eligible, or once the Lease has been expired for [`ORPHANED_AFTER_LEASES`]
//!   lease durations with nobody eligible taking it (availability wins over the last writes then).
//!   A holder may hand the Lease to a chosen successor ([`LeaderLease::hand_over`]).
//!
//! The decision is the pure [`decide`]; [`LeaderLease`] is the I/O around it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

/// A Lease request that failed.
#[derive(Debug, thiserror::Error)]
#[error("{action} Lease {name}: {source}")]
pub struct LeaseError {
    action: &'static str,
    name: String,
    #[source]
    source: kube::Error,
}

/// How long a Lease lasts and how often it is renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// A holder that has not renewed for this long has lost the Lease.
    pub duration: Duration,
    /// The leader stops when it could not renew for this long (less than `duration`).
    pub renew_deadline: Duration,
    /// How often to renew, and to retry acquiring.
    pub retry: Duration,
}

impl Default for LeaseTimings {
    /// client-go's defaults (15 s, 10 s, 2 s).
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// An expired Lease that no eligible candidate took for this many lease durations may be taken
/// by any candidate: a leader with an incomplete store beats no leader at all.
pub const ORPHANED_AFTER_LEASES: i64 = 3;

/// What a candidate does with the Lease it sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No Lease: create it, holding it.
    Create,
    /// Ours (held, or handed to us): renew it.
    Renew,
    /// Free or expired: take it over (one more transition).
    Take,
    /// Someone else holds it, or we may not take it yet.
    Wait,
}

/// Whether the holder's Lease has run out, judged as client-go judges it: by how long ago this
/// candidate saw the Lease last change (its own clock only), never by the holder's timestamps,
/// so clock skew between replicas cannot make two leaders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Expiry {
    /// Not renewed for a lease duration since it was last seen to change.
    pub expired: bool,
    /// Not renewed for [`ORPHANED_AFTER_LEASES`] more lease durations.
    pub orphaned: bool,
}

/// The decision for candidate `me`, given how long the Lease has gone unrenewed; `eligible`
/// says whether `me` may take a free or expired Lease (see the module's notes).
pub fn decide(lease: Option<&Lease>, me: &str, expiry: Expiry, eligible: bool) -> Decision {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return match lease {
            None if eligible => Decision::Create,
            None => Decision::Wait,
            Some(_) => Decision::Take,
        };
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == me {
        return Decision::Renew;
    }
    let free = holder.is_empty() || expiry.expired;
    if !free {
        return Decision::Wait;
    }
    if eligible || expiry.orphaned { Decision::Take } else { Decision::Wait }
}

/// The Lease as last seen to change, and when (this process's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    record: (Option<String>, Option<String>, Option<i32>),
    at: tokio::time::Instant,
}

/// How one attempt on the Lease went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// We hold it (created, renewed or taken).
    Held,
    /// Someone else holds it and it has not expired (or we may not take it).
    HeldByOther,
    /// Our write lost a race on the resourceVersion; read again.
    Conflict,
}

type Annotations = Arc<dyn Fn() -> BTreeMap<String, String> + Send + Sync>;
type Eligibility = Arc<dyn Fn(Option<&Lease>) -> bool + Send + Sync>;
type Written = Arc<dyn Fn(&BTreeMap<String, String>) + Send + Sync>;

/// One candidate's handle on the Lease.
#[derive(Clone)]
pub struct LeaderLease {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaseTimings,
    annotations: Option<Annotations>,
    written: Option<Written>,
    eligibility: Option<Eligibility>,
    /// One write of the Lease at a time from this candidate: writes land, and [`Self::written`]
    /// hears of them, in the order they were made.
    writing: Arc<tokio::sync::Mutex<()>>,
    observed: Arc<std::sync::Mutex<Option<Observed>>>,
}

impl std::fmt::Debug for LeaderLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLease")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl LeaderLease {
    /// The Lease `namespace/name`, contended for as `identity` (the pod name).
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str, timings: LeaseTimings) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timings,
            annotations: None,
            written: None,
            eligibility: None,
            writing: Arc::default(),
            observed: Arc::default(),
        }
    }

    /// Records `lease` as seen now, and says how long it has gone unrenewed since it last
    /// changed (a Lease first seen counts as just renewed).
    pub fn observe(&self, lease: Option<&Lease>) -> Expiry {
        let now = tokio::time::Instant::now();
        let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else { return Expiry::default() };
        let record = (
            spec.holder_identity.clone(),
            spec.renew_time.as_ref().map(|t| t.0.to_string()),
            spec.lease_duration_seconds,
        );
        let mut observed = self.observed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = match observed.as_ref() {
            Some(seen) if seen.record == record => seen.at,
            _ => {
                *observed = Some(Observed { record, at: now });
                now
            }
        };
        let duration = Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
        let idle = now.saturating_duration_since(at);
        let leases = u32::try_from(ORPHANED_AFTER_LEASES + 1).unwrap_or(u32::MAX);
        Expiry { expired: idle >= duration, orphaned: idle >= duration * leases }
    }

    /// Annotations the holder sets on the Lease with every write (the keys it owns; others kept).
    pub fn with_annotations(
        mut self,
        annotations: impl Fn() -> BTreeMap<String, String> + Send + Sync + 'static,
    ) -> Self {
        self.annotations = Some(Arc::new(annotations));
        self
    }

    /// Called after every write of the Lease that kube-apiserver accepted, in the order they
    /// landed, with the annotations that write set: from then on the Lease says what they say
    /// (until a later write), which a holder may need to know before it acts on them.
    pub fn with_written(mut self, written: impl Fn(&BTreeMap<String, String>) + Send + Sync + 'static) -> Self {
        self.written = Some(Arc::new(written));
        self
    }

    /// Whether this candidate may take a free or expired Lease, given the Lease as it is.
    pub fn with_eligibility(mut self, eligible: impl Fn(Option<&Lease>) -> bool + Send + Sync + 'static) -> Self {
        self.eligibility = Some(Arc::new(eligible));
        self
    }

    /// Our identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The timings.
    pub fn timings(&self) -> LeaseTimings {
        self.timings
    }

    /// The Lease as it is now (None: it does not exist).
    pub async fn read(&self) -> Result<Option<Lease>, LeaseError> {
        self.api.get_opt(&self.name).await.map_err(|source| self.error("get", source))
    }

    /// Tries once; true when we hold the Lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaseError> {
        Ok(self.attempt().await? == Attempt::Held)
    }

    fn error(&self, action: &'static str, source: kube::Error) -> LeaseError {
        LeaseError { action, name: self.name.clone(), source }
    }

    async fn attempt(&self) -> Result<Attempt, LeaseError> {
        let _one_write_at_a_time = self.writing.lock().await;
        let now = Timestamp::now();
        let current = self.read().await?;
        let eligible = self.eligibility.as_ref().is_none_or(|eligible| eligible(current.as_ref()));
        let decision = decide(current.as_ref(), &self.identity, self.observe(current.as_ref()), eligible);
        let seconds = i32::try_from(self.timings.duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let previous = current.as_ref().and_then(|l| l.spec.clone()).unwrap_or_default();
        let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: acquired,
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let ours = self.annotations.as_ref().map(|annotations| annotations()).unwrap_or_default();
        let metadata = || {
            let mut metadata = current
                .clone()
                .map(|l| l.metadata)
                .unwrap_or_else(|| ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() });
            if self.annotations.is_some() {
                metadata.annotations.get_or_insert_default().extend(ours.clone());
            }
            metadata
        };
        let lease = match decision {
            Decision::Wait => return Ok(Attempt::HeldByOther),
            Decision::Create => Lease { metadata: metadata(), spec: Some(spec(0, Some(MicroTime(now)))) },
            Decision::Renew => Lease {
                metadata: metadata(),
                spec: Some(spec(
                    previous.lease_transitions.unwrap_or(0),
                    previous.acquire_time.clone().or(Some(MicroTime(now))),
                )),
            },
            Decision::Take => Lease {
                metadata: metadata(),
                spec: Some(spec(previous.lease_transitions.unwrap_or(0) + 1, Some(MicroTime(now)))),
            },
        };
        let result = match decision {
            Decision::Create => self.api.create(&PostParams::default(), &lease).await,
            // replace carries the resourceVersion we read: a racing writer makes this a 409.
            _ => self.api.replace(&self.name, &PostParams::default(), &lease).await,
        };
        match result {
            Ok(_) => {
                if let Some(written) = &self.written {
                    written(&ours);
                }
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(self.error("write", e)),
        }
    }

    /// Waits until we hold the Lease.
    pub async fn acquire(&self) {
        loop {
            match tokio::time::timeout(self.timings.renew_deadline, self.attempt()).await {
                Ok(Ok(Attempt::Held)) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return;
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => tracing::warn!(%error, "leader election: cannot acquire the lease"),
                Err(_) => tracing::warn!(lease = %self.name, "leader election: the API server did not answer"),
            }
            tokio::time::sleep(self.timings.retry).await;
        }
    }

    /// Renews every [`LeaseTimings::retry`] until a renewal fails; then returns (leadership is
    /// lost and the caller must stop acting).
    pub async fn hold(&self) {
        loop {
            tokio::time::sleep(self.timings.retry).await;
            if !self.renew().await {
                return;
            }
        }
    }

    /// One renewal: attempts until one succeeds, someone else holds the Lease, or the renew
    /// deadline passes. True when we still hold it. Also what a holder calls to publish changed
    /// annotations at once.
    pub async fn renew(&self) -> bool {
        let deadline = tokio::time::Instant::now() + self.timings.renew_deadline;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                tracing::error!(lease = %self.name, "leader election: could not renew within the deadline");
                return false;
            }
            match tokio::time::timeout(left, self.attempt()).await {
                Ok(Ok(Attempt::Held)) => return true,
                Ok(Ok(Attempt::HeldByOther)) => {
                    tracing::error!(lease = %self.name, "leader election: another candidate holds the lease");
                    return false;
                }
                Ok(Ok(Attempt::Conflict)) => tracing::info!(lease = %self.name, "leader election: write conflict"),
                Ok(Err(error)) => tracing::warn!(%error, "leader election: renewal failed"),
                Err(_) => tracing::warn!(lease = %self.name, "leader election: renewal request timed out"),
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            tokio::time::sleep(self.timings.retry.min(left)).await;
        }
    }

    /// Gives the Lease up at shutdown so the next leader need not wait for it to expire: only if
    /// we still hold it, and with the resourceVersion read, so a Lease another candidate took in
    /// the meantime is never cleared.
    pub async fn release(&self) {
        self.pass_to(None).await;
    }

    /// Gives the Lease straight to `successor` (a follower that holds everything we
    /// acknowledged), so there is no window in which nobody leads; same care as [`Self::release`].
    /// True when the Lease was handed over.
    pub async fn hand_over(&self, successor: &str) -> bool {
        self.pass_to(Some(successor)).await
    }

    async fn pass_to(&self, successor: Option<&str>) -> bool {
        let _one_write_at_a_time = self.writing.lock().await;
        let current = match self.read().await {
            Ok(Some(lease)) => lease,
            Ok(None) => return false,
            Err(error) => {
                tracing::warn!(%error, "leader election: cannot read the lease to release it");
                return false;
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            tracing::info!(lease = %self.name, "leader election: the lease is no longer ours; nothing to release");
            return false;
        }
        let now = MicroTime(Timestamp::now());
        let passed = Lease {
            metadata: current.metadata,
            spec: Some(LeaseSpec {
                holder_identity: successor.map(str::to_owned),
                // Released: expires at once. Handed over: the successor's to renew.
                lease_duration_seconds: Some(if successor.is_some() {
                    i32::try_from(self.timings.duration.as_secs().max(1)).unwrap_or(i32::MAX)
                } else {
                    1
                }),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(successor.is_some())),
                ..spec
            }),
        };
        match self.api.replace(&self.name, &PostParams::default(), &passed).await {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(%error, "leader election: cannot release the lease");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed: &str, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.to_owned()),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn decisions() {
        let fresh = Expiry::default();
        let expired = Expiry { expired: true, orphaned: false };
        let orphaned = Expiry { expired: true, orphaned: true };
        let rows = [
            ("no lease", None, fresh, true, Decision::Create),
            ("no lease, not eligible", None, fresh, false, Decision::Wait),
            ("ours", Some(lease("me", "2026-01-01T00:00:00Z", 15)), expired, false, Decision::Renew),
            ("theirs, fresh", Some(lease("them", "2026-01-01T00:00:20Z", 15)), fresh, true, Decision::Wait),
            ("theirs, expired", Some(lease("them", "2026-01-01T00:00:10Z", 15)), expired, true, Decision::Take),
            (
                "theirs, expired, not eligible",
                Some(lease("them", "2026-01-01T00:00:10Z", 15)),
                expired,
                false,
                Decision::Wait,
            ),
            ("theirs, orphaned", Some(lease("them", "2026-01-01T00:00:20Z", 2)), orphaned, false, Decision::Take),
            ("released", Some(lease("", "2026-01-01T00:00:29Z", 1)), fresh, true, Decision::Take),
            ("released, not eligible", Some(lease("", "2026-01-01T00:00:29Z", 1)), fresh, false, Decision::Wait),
            ("no spec", Some(Lease::default()), fresh, true, Decision::Take),
        ];
        for (name, lease, expiry, eligible, expected) in rows {
            assert_eq!(decide(lease.as_ref(), "me", expiry, eligible), expected, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_is_judged_by_this_process_clock_from_the_last_change_seen() {
        let (service, _handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let candidate =
            LeaderLease::new(kube::Client::new(service, "default"), "ns", "l", "me", LeaseTimings::default());
        // A holder whose clock runs an hour behind: its renewTime looks long expired.
        let held = lease("them", "2000-01-01T00:00:00Z", 4);
        assert!(!candidate.observe(Some(&held)).expired, "first seen: as good as just renewed");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(!candidate.observe(Some(&held)).expired);
        let renewed = lease("them", "2000-01-01T00:00:03Z", 4);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(!candidate.observe(Some(&renewed)).expired, "a renewal restarts the count");
        tokio::time::advance(Duration::from_secs(4)).await;
        let expiry = candidate.observe(Some(&renewed));
        assert!(expiry.expired && !expiry.orphaned);
        tokio::time::advance(Duration::from_secs(12)).await;
        assert!(candidate.observe(Some(&renewed)).orphaned);
    }
}
