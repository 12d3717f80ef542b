//! The controllers' leader election (the runtime's Lease loop, [`numaresources_runtime::leader`])
//! against the controllers' fake API.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use numaresources_runtime::leader::{LeaderLease, LeaseTimings};

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/numaresources/leases/numaresources-controllers";

#[tokio::test]
async fn one_of_two_candidates_leads_and_the_other_takes_over_after_release() {
    let (fake, client) = crate::fake::start();
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
    let (fake, client) = crate::fake::start();
    let a = LeaderLease::new(client, "numaresources", "numaresources-controllers", "a", LeaseTimings::default());
    assert!(a.try_acquire_or_renew().await.unwrap());
    fake.edit(LEASE, |lease| lease["spec"]["holderIdentity"] = serde_json::json!("b"));
    a.release().await;
    let lease: Lease = fake.typed(LEASE);
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

#[tokio::test]
async fn a_racing_write_loses_on_the_resource_version() {
    let (fake, client) = crate::fake::start();
    let a = LeaderLease::new(client, "numaresources", "numaresources-controllers", "a", LeaseTimings::default());
    assert!(a.try_acquire_or_renew().await.unwrap());
    // Someone else's write lands between our read and our write.
    fake.fail(http::Method::PUT, "/leases/", 409, 1);
    assert!(!a.try_acquire_or_renew().await.unwrap(), "a conflict is not leadership");
    assert!(a.try_acquire_or_renew().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_conflict_while_renewing_is_retried_and_leadership_kept() {
    let (fake, client) = crate::fake::start();
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
