//! `numaresources_runtime::leader::LeaderLease` against the kube-apiserver double's Leases
//! (kube-apiserver's answers for the verbs leader election uses): two candidates, one leads; a
//! release lets the other take over; an expired Lease is taken; an ineligible candidate waits
//! until the Lease is orphaned; a hand-over names the successor; a leader that cannot renew
//! stops within its renew deadline.
//!
//! The tests that wait for a Lease to expire run on tokio's paused clock against the double in
//! process (the clock jumps to the next timer once every task waits, so no test sleeps for real);
//! the others reach it over HTTP with kube-rs' whole client. Every wait is bounded by a generous
//! deadline; nothing asserts how long anything took.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::PostParams;
use numaresources_runtime::leader::{LeaderLease, LeaseTimings, ORPHANED_AFTER_LEASES};
use numaresources_testkit::kube_double::KubeDouble;
use numaresources_tests::served::bounded;

const NAMESPACE: &str = "numaresources";
const NAME: &str = "numaresources-apiserver";

/// Short timings so that expiry happens within a test; a second is the Lease's resolution.
const TIMINGS: LeaseTimings = LeaseTimings {
    duration: Duration::from_secs(1),
    renew_deadline: Duration::from_millis(800),
    retry: Duration::from_millis(100),
};

/// A client of the double: over HTTP when it is served, in process otherwise (on a paused clock
/// a socket would let the clock jump while a request is on its way).
async fn client_of(double: &KubeDouble) -> kube::Client {
    if double.is_served() { double.http_client().await.unwrap() } else { double.client() }
}

async fn candidate(double: &KubeDouble, identity: &str) -> LeaderLease {
    LeaderLease::new(client_of(double).await, NAMESPACE, NAME, identity, TIMINGS)
}

fn transitions(double: &KubeDouble) -> i32 {
    double.lease(NAMESPACE, NAME).and_then(|l| l.spec).and_then(|s| s.lease_transitions).unwrap_or(-1)
}

/// Stores a Lease held by `holder`, last renewed `ago`, lasting `seconds`.
async fn held_by(double: &KubeDouble, holder: &str, ago: Duration, seconds: i32) {
    let api: Api<Lease> = Api::namespaced(client_of(double).await, NAMESPACE);
    let renewed = Timestamp::now().checked_sub(SignedDuration::try_from(ago).unwrap()).unwrap();
    let lease = Lease {
        metadata: ObjectMeta { name: Some(NAME.to_owned()), ..ObjectMeta::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(MicroTime(renewed)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(4),
            ..LeaseSpec::default()
        }),
    };
    api.create(&PostParams::default(), &lease).await.unwrap();
}

#[tokio::test]
async fn one_of_two_candidates_leads_and_the_other_takes_over_after_a_release() {
    let double = KubeDouble::start().await.unwrap();
    let (a, b) = (candidate(&double, "a").await, candidate(&double, "b").await);

    bounded("a acquires a free Lease", a.acquire()).await;
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("a"));
    assert!(!b.try_acquire_or_renew().await.unwrap(), "b must not take a Lease a holds");
    assert!(a.try_acquire_or_renew().await.unwrap(), "a renews its own Lease");
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("a"));

    a.release().await;
    assert_eq!(double.holder(NAMESPACE, NAME), None, "a released Lease has no holder");
    bounded("b takes the released Lease", b.acquire()).await;
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("b"));
    assert_eq!(transitions(&double), 1);

    // a's release of a Lease it no longer holds changes nothing.
    a.release().await;
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("b"));
}

/// A little more than the one-second leases these tests write.
const LEASE_SECOND: Duration = Duration::from_millis(1_100);

#[tokio::test]
async fn two_candidates_racing_for_a_free_lease_yield_exactly_one_leader() {
    let double = KubeDouble::start().await.unwrap();
    let candidates = [candidate(&double, "a").await, candidate(&double, "b").await, candidate(&double, "c").await];
    let attempts = candidates.iter().map(LeaderLease::try_acquire_or_renew);
    let won: Vec<bool> = futures_util::future::join_all(attempts).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    let holder = double.holder(NAMESPACE, NAME).unwrap();
    let winner = candidates.iter().zip(&won).find(|(_, w)| **w).unwrap().0;
    assert_eq!(winner.identity(), holder);
}

#[tokio::test(start_paused = true)]
async fn an_expired_lease_is_taken_and_counts_a_transition() {
    let double = KubeDouble::new(false);
    held_by(&double, "gone", Duration::from_secs(5), 1).await;
    let c = candidate(&double, "c").await;
    // Expiry is judged as client-go judges it: by this candidate's clock since it first saw the
    // Lease unchanged, never by the holder's timestamps (which may be skewed).
    assert!(!c.try_acquire_or_renew().await.unwrap(), "first seen: as good as just renewed");
    tokio::time::sleep(LEASE_SECOND).await;
    assert!(c.try_acquire_or_renew().await.unwrap());
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("c"));
    assert_eq!(transitions(&double), 5);
}

#[tokio::test]
async fn a_fresh_lease_of_another_holder_is_left_alone() {
    let double = KubeDouble::start().await.unwrap();
    held_by(&double, "alive", Duration::ZERO, 3600).await;
    let c = candidate(&double, "c").await;
    assert!(!c.try_acquire_or_renew().await.unwrap());
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("alive"));
}

#[tokio::test(start_paused = true)]
async fn an_ineligible_candidate_waits_while_an_eligible_one_takes_the_lease() {
    let double = KubeDouble::new(false);
    // Expired (1 s lease, renewed 2 s ago) but not orphaned.
    held_by(&double, "gone", Duration::from_secs(2), 1).await;
    let behind = candidate(&double, "behind").await.with_eligibility(|_| false);
    let in_sync = candidate(&double, "in-sync").await.with_eligibility(|lease| {
        let annotations = lease.and_then(|l| l.metadata.annotations.as_ref());
        annotations.and_then(|a| a.get("in-sync")).is_none_or(|list| list.split(',').any(|id| id == "in-sync"))
    });
    // Both see the Lease first, then it stays unrenewed for its duration.
    assert!(!behind.try_acquire_or_renew().await.unwrap());
    assert!(!in_sync.try_acquire_or_renew().await.unwrap());
    tokio::time::sleep(LEASE_SECOND).await;
    assert!(!behind.try_acquire_or_renew().await.unwrap(), "a candidate that is behind must not lead");
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("gone"));
    assert!(in_sync.try_acquire_or_renew().await.unwrap());
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("in-sync"));
}

#[tokio::test(start_paused = true)]
async fn an_ineligible_candidate_takes_an_orphaned_lease() {
    let double = KubeDouble::new(false);
    let orphaned = u64::try_from(ORPHANED_AFTER_LEASES + 2).unwrap();
    held_by(&double, "gone", Duration::from_secs(orphaned), 1).await;
    let behind = candidate(&double, "behind").await.with_eligibility(|_| false);
    assert!(!behind.try_acquire_or_renew().await.unwrap(), "first seen");
    tokio::time::sleep(LEASE_SECOND * (u32::try_from(ORPHANED_AFTER_LEASES).unwrap() + 1)).await;
    assert!(behind.try_acquire_or_renew().await.unwrap(), "nobody took it: availability wins");
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("behind"));
}

#[tokio::test]
async fn the_holder_publishes_its_annotations_and_hands_over_to_a_successor() {
    let double = KubeDouble::start().await.unwrap();
    let a = candidate(&double, "a").await.with_annotations(|| {
        BTreeMap::from([("nodetopology.openshift.io/peer-address".to_owned(), "https://127.0.0.1:1".to_owned())])
    });
    bounded("a acquires", a.acquire()).await;
    let annotations = double.lease(NAMESPACE, NAME).unwrap().metadata.annotations.unwrap();
    assert_eq!(annotations["nodetopology.openshift.io/peer-address"], "https://127.0.0.1:1");

    assert!(a.hand_over("b").await);
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("b"));
    let b = candidate(&double, "b").await;
    assert!(b.try_acquire_or_renew().await.unwrap(), "the successor renews the Lease handed to it");
    assert!(!a.try_acquire_or_renew().await.unwrap(), "the former holder does not take it back");
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_stops_and_another_takes_over_once_it_expired() {
    let double = KubeDouble::new(false);
    let (a, b) = (candidate(&double, "a").await, candidate(&double, "b").await);
    bounded("a acquires", a.acquire()).await;
    double.set_available(false);
    // The renewal gives up at its deadline however the requests fail or hang.
    assert!(!bounded("a's renewal ends", a.renew()).await, "a must stop leading");
    double.set_available(true);
    bounded("b takes the expired Lease", b.acquire()).await;
    assert_eq!(double.holder(NAMESPACE, NAME).as_deref(), Some("b"));
}
