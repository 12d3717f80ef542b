//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does it:
//! take the Lease when it is free or expired, renew it every [`LeaseTimings::retry`], and give up
//! (stop reconciling) when it could not be renewed within [`LeaseTimings::renew_deadline`], so
//! two leaders never act for longer than the lease's duration. Writes carry the Lease's
//! resourceVersion: of two candidates racing for it, the API server lets exactly one win.
//!
//! A renewal is one or more attempts, every [`LeaseTimings::retry`], until one succeeds or the
//! renew deadline passes; each request is cut off at the time left, so a hung connection cannot
//! keep a leader acting past its lease. A write conflict (someone touched the Lease between our
//! read and our write) is just another failed attempt: the next one reads the Lease again, and
//! only a Lease held by someone else ends leadership at once.
//!
//! The decision is the pure [`decide`]; [`LeaderLease`] is the I/O around it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::PostParams;

use crate::context::{Error, Result};

/// How long a Lease lasts and how often it is renewed (client-go's defaults).
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
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// What a candidate does with the Lease it sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No Lease: create it, holding it.
    Create,
    /// Ours: renew it.
    Renew,
    /// Free or expired: take it over (one more transition).
    Take,
    /// Someone else holds it.
    Wait,
}

/// The decision for candidate `me` at `now`.
pub fn decide(lease: Option<&Lease>, me: &str, now: Timestamp) -> Decision {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return if lease.is_some() { Decision::Take } else { Decision::Create };
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == me {
        return Decision::Renew;
    }
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()).map(|t| t.0);
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    let expired = renewed.is_none_or(|t| t.checked_add(duration).is_ok_and(|end| end < now));
    if holder.is_empty() || expired { Decision::Take } else { Decision::Wait }
}

/// How one attempt on the Lease went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// We hold it (created, renewed or taken).
    Held,
    /// Someone else holds it and it has not expired.
    HeldByOther,
    /// Our write lost a race on the resourceVersion; read again.
    Conflict,
}

/// One candidate's handle on the Lease.
#[derive(Clone)]
pub struct LeaderLease {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaseTimings,
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
        Self { api: Api::namespaced(client, namespace), name: name.to_owned(), identity: identity.to_owned(), timings }
    }

    /// Tries once; true when we hold the Lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool> {
        Ok(self.attempt().await? == Attempt::Held)
    }

    async fn attempt(&self) -> Result<Attempt> {
        let now = Timestamp::now();
        let current =
            self.api.get_opt(&self.name).await.map_err(|e| Error::kube(format!("get Lease {}", self.name), e))?;
        let decision = decide(current.as_ref(), &self.identity, now);
        let seconds = i32::try_from(self.timings.duration.as_secs()).unwrap_or(i32::MAX);
        let previous = current.as_ref().and_then(|l| l.spec.clone()).unwrap_or_default();
        let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: acquired,
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let lease = match decision {
            Decision::Wait => return Ok(Attempt::HeldByOther),
            Decision::Create => Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: Some(spec(0, Some(MicroTime(now)))),
            },
            Decision::Renew => Lease {
                metadata: current.clone().map(|l| l.metadata).unwrap_or_default(),
                spec: Some(spec(previous.lease_transitions.unwrap_or(0), previous.acquire_time.clone())),
            },
            Decision::Take => Lease {
                metadata: current.clone().map(|l| l.metadata).unwrap_or_default(),
                spec: Some(spec(previous.lease_transitions.unwrap_or(0) + 1, Some(MicroTime(now)))),
            },
        };
        let result = match decision {
            Decision::Create => self.api.create(&PostParams::default(), &lease).await,
            // replace carries the resourceVersion we read: a racing writer makes this a 409.
            _ => self.api.replace(&self.name, &PostParams::default(), &lease).await,
        };
        match result {
            Ok(_) => Ok(Attempt::Held),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(Error::kube(format!("write Lease {}", self.name), e)),
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
    /// deadline passes. True when we still hold it.
    async fn renew(&self) -> bool {
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
        let current = match self.api.get_opt(&self.name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "leader election: cannot read the lease to release it");
                return;
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            tracing::info!(lease = %self.name, "leader election: the lease is no longer ours; nothing to release");
            return;
        }
        let now = MicroTime(Timestamp::now());
        let released = Lease {
            metadata: current.metadata,
            spec: Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..spec
            }),
        };
        if let Err(error) = self.api.replace(&self.name, &PostParams::default(), &released).await {
            tracing::warn!(%error, "leader election: cannot release the lease");
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

    use crate::fake::FakeApi;

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/numaresources/leases/numaresources-controllers";

    #[tokio::test]
    async fn one_of_two_candidates_leads_and_the_other_takes_over_after_release() {
        let (fake, client) = FakeApi::start();
        let timings = LeaseTimings::default();
        let a = LeaderLease::new(client.clone(), "numaresources", "numaresources-controllers", "a", timings);
        let b = LeaderLease::new(client, "numaresources", "numaresources-controllers", "b", timings);
        assert!(a.try_acquire_or_renew().await.unwrap(), "a creates the lease");
        assert!(!b.try_acquire_or_renew().await.unwrap(), "b waits while a's lease is fresh");
        assert!(a.try_acquire_or_renew().await.unwrap(), "a renews");
        let lease: Lease = fake.typed(LEASE);
        assert_eq!(lease.spec.as_ref().unwrap().holder_identity.as_deref(), Some("a"));
        assert_eq!(lease.spec.as_ref().unwrap().lease_transitions, Some(0));
        a.release().await;
        assert!(b.try_acquire_or_renew().await.unwrap(), "b takes the released lease");
        let lease: Lease = fake.typed(LEASE);
        assert_eq!(lease.spec.as_ref().unwrap().holder_identity.as_deref(), Some("b"));
        assert_eq!(lease.spec.as_ref().unwrap().lease_transitions, Some(1));
        assert!(!a.try_acquire_or_renew().await.unwrap(), "a is now the one waiting");
    }

    #[tokio::test]
    async fn releasing_a_lease_someone_else_took_over_leaves_it_with_them() {
        let (fake, client) = FakeApi::start();
        let a = LeaderLease::new(client, "numaresources", "numaresources-controllers", "a", LeaseTimings::default());
        assert!(a.try_acquire_or_renew().await.unwrap());
        fake.edit(LEASE, |lease| lease["spec"]["holderIdentity"] = serde_json::json!("b"));
        a.release().await;
        let lease: Lease = fake.typed(LEASE);
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn a_racing_write_loses_on_the_resource_version() {
        let (fake, client) = FakeApi::start();
        let a = LeaderLease::new(client, "numaresources", "numaresources-controllers", "a", LeaseTimings::default());
        assert!(a.try_acquire_or_renew().await.unwrap());
        // Someone else's write lands between our read and our write.
        fake.fail(http::Method::PUT, "/leases/", 409, 1);
        assert!(!a.try_acquire_or_renew().await.unwrap(), "a conflict is not leadership");
        assert!(a.try_acquire_or_renew().await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_while_renewing_is_retried_and_leadership_kept() {
        let (fake, client) = FakeApi::start();
        let a = LeaderLease::new(client, "numaresources", "numaresources-controllers", "a", LeaseTimings::default());
        assert!(a.try_acquire_or_renew().await.unwrap());
        fake.fail(http::Method::PUT, "/leases/", 409, 2);
        // Paused clock: a minute of renewals passes instantly; `hold` returning means lost.
        let held = tokio::time::timeout(Duration::from_secs(60), a.hold()).await;
        assert!(held.is_err(), "still the leader after two conflicts");
        let lease: Lease = fake.typed(LEASE);
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("a"));

        // A Lease genuinely held by someone else ends leadership at the next renewal.
        fake.edit(LEASE, |lease| {
            lease["spec"]["holderIdentity"] = serde_json::json!("b");
            lease["spec"]["renewTime"] = serde_json::json!(MicroTime(Timestamp::now()));
        });
        let lost = tokio::time::timeout(Duration::from_secs(60), a.hold()).await;
        assert!(lost.is_ok(), "b holds it: a stops");
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_never_gets_an_answer_gives_leadership_up_by_the_deadline() {
        let (service, _handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let silent = kube::Client::new(service, "default");
        let timings = LeaseTimings::default();
        let a = LeaderLease::new(silent, "numaresources", "numaresources-controllers", "a", timings);
        let started = tokio::time::Instant::now();
        // An hour of (paused) time as a guard: without a deadline on the request this never ends.
        let lost = tokio::time::timeout(Duration::from_secs(3600), a.hold()).await;
        assert!(lost.is_ok(), "the hung request is cut off");
        assert!(started.elapsed() <= timings.retry + timings.renew_deadline, "{:?}", started.elapsed());
    }

    #[test]
    fn decisions() {
        let now: Timestamp = "2026-01-01T00:00:30Z".parse().unwrap();
        let rows = [
            ("no lease", None, Decision::Create),
            ("ours", Some(lease("me", "2026-01-01T00:00:00Z", 15)), Decision::Renew),
            ("theirs, fresh", Some(lease("them", "2026-01-01T00:00:20Z", 15)), Decision::Wait),
            ("theirs, expired", Some(lease("them", "2026-01-01T00:00:10Z", 15)), Decision::Take),
            ("released", Some(lease("", "2026-01-01T00:00:29Z", 1)), Decision::Take),
            ("no spec", Some(Lease::default()), Decision::Take),
        ];
        for (name, lease, expected) in rows {
            assert_eq!(decide(lease.as_ref(), "me", now), expected, "{name}");
        }
    }
}
