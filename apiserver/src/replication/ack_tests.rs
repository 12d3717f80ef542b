//! What a write's acknowledgement rests on: a follower acknowledges only what the leader's
//! stream brought into its store, and a leader acknowledges a write its followers hold only once
//! the Lease names one of them as its successor.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use super::peer::{COMMITTED_ANNOTATION, OBJECTS_ANNOTATION, SNAPSHOT, bookmark_object, line};
use super::test_support::synced_follower;
use super::{Replication, Role};
use crate::health::Readiness;
use crate::store::Store;
use crate::store::tests::nrt;

/// The line of `leader`'s change at `revision`, as its stream carries it.
fn change_line(stream: &mut Vec<u8>, leader: &Store, revision: u64) {
    let event = leader.events_after(revision - 1, 1).unwrap().remove(0);
    line(stream, event.kind.as_str(), &event.object.json);
}

/// A follower that started after its leader: its empty store stands at its own, later clock.
/// Once counted, that head made every later acknowledgement look old, so the leader never
/// counted the follower in sync, acknowledged every write alone, and a kill -9 of the leader
/// lost a write with it.
#[tokio::test]
async fn a_follower_acknowledges_only_what_the_leaders_stream_brought() {
    let leader = Store::starting_at(100, 1000);
    leader.create(nrt("a", 1), false).unwrap();
    let store = Arc::new(Store::starting_at(5_000, 1000));
    let follower = synced_follower(store.clone(), Arc::new(Readiness::default()));
    let (applied, acknowledgeable) = watch::channel(0);

    let mut stream = Vec::new();
    let header = BTreeMap::from([(OBJECTS_ANNOTATION.to_owned(), "1".to_owned())]);
    line(&mut stream, SNAPSHOT, &bookmark_object(101, header));
    assert!(follower.apply_stream(&stream[..], true, &applied).await.is_err(), "cut inside the snapshot");
    assert_eq!(*acknowledgeable.borrow(), 0, "its own head is not the leader's to count");

    change_line(&mut stream, &leader, 101);
    leader.create(nrt("b", 1), false).unwrap();
    change_line(&mut stream, &leader, 102);
    follower.apply_stream(&stream[..], true, &applied).await.unwrap_err();
    assert_eq!(*acknowledgeable.borrow(), 102, "the snapshot and the change after it");

    leader.create(nrt("c", 1), false).unwrap();
    let mut after = Vec::new();
    change_line(&mut after, &leader, 103);
    let bookmark = BTreeMap::from([(COMMITTED_ANNOTATION.to_owned(), "102".to_owned())]);
    line(&mut after, "BOOKMARK", &bookmark_object(110, bookmark));
    follower.apply_stream(&after[..], false, &applied).await.unwrap_err();
    assert_eq!(*acknowledgeable.borrow(), 110, "a bookmark: nothing happened up to the leader's head");
    assert_eq!(store.replica().head_revision(), 110);
}

fn leader_with_follower(follower: &str) -> (Arc<Replication>, Arc<Store>) {
    let store = Arc::new(Store::starting_at(100, 1000));
    let leader = Arc::new(synced_follower(store.clone(), Arc::new(Readiness::default())));
    leader.set_role(Role::Leader);
    leader.start_leading_with([]);
    leader.stream_started(follower, "stream");
    assert!(leader.acknowledge(follower, "stream", 100), "it holds everything: it joins");
    (leader, store)
}

/// Writes at `revision` (applied and acknowledged by `follower` already) and checks that the
/// leader does not answer it until the Lease names the follower (`why`), then that it does.
async fn answered_once_named(leader: &Arc<Replication>, follower: &str, revision: u64, why: &str) {
    leader.acknowledge(follower, "stream", revision);
    let write = tokio::spawn({
        let leader = leader.clone();
        async move { leader.replicated(revision).await }
    });
    // Every ready task runs (the tests' runtime has one thread).
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(!write.is_finished(), "{why}");
    leader.lease_written(&[follower.to_owned()]);
    tokio::time::timeout(std::time::Duration::from_secs(30), write).await.unwrap().unwrap().unwrap();
}

/// While the Lease names no follower, any replica that holds data may take over (the leader
/// was alone): a write only the in-sync followers hold is not safe until the Lease names them.
#[tokio::test]
async fn a_write_is_acknowledged_once_the_lease_names_a_follower_that_holds_it() {
    let (leader, store) = leader_with_follower("f");
    // A Lease write built before the follower left and came back says nothing of it now.
    leader.lease_written(&[]);
    store.create(nrt("a", 1), false).unwrap();
    answered_once_named(&leader, "f", 101, "the follower holds it, but the Lease does not name it yet").await;
    assert_eq!(leader.metrics.acknowledged_alone.get(), 0);
}

/// A follower that leaves is out of what the Lease is known to say at once, before the Lease
/// write that drops it: a Lease write that named it and lands late does not bring it back.
#[tokio::test]
async fn a_follower_that_left_is_not_counted_as_named_by_a_late_lease_write() {
    let (leader, store) = leader_with_follower("f");
    leader.lease_written(&["f".to_owned()]);
    leader.follower_gone("f", "stream").await;
    leader.lease_written(&["f".to_owned()]);

    leader.stream_started("f", "stream");
    assert!(leader.acknowledge("f", "stream", 100), "back, and in sync again");
    store.create(nrt("a", 1), false).unwrap();
    answered_once_named(&leader, "f", 101, "named only by a write from before it left").await;
}
