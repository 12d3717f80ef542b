//! When a replica's store is warm: a follower counts as warm once it holds what a warm leader
//! held when it became warm, not as soon as it hears that the leader is warm.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::test_support::{replicate, synced_follower};
use super::{REPLICATION_CHECK, Replication, Role, STORE_WARM_CHECK};
use crate::health::Readiness;
use crate::store::Store;
use crate::store::tests::nrt;

/// A replica at a cold start (its warm-up holds the store-warm check failing, as the binary's
/// does) that follows a leader and has caught up with its stream once.
fn cold_follower() -> (Replication, Arc<Store>, Arc<Readiness>) {
    let store = Arc::new(Store::starting_at(100, 1000));
    let readiness = Arc::new(Readiness::default());
    readiness.set(STORE_WARM_CHECK, false);
    let replication = synced_follower(store.clone(), readiness.clone());
    replication.following.caught_up.store(true, Ordering::Release);
    (replication, store, readiness)
}

#[test]
fn a_follower_that_lags_the_revision_its_warm_leader_became_warm_at_is_neither_ready_nor_serving() {
    let (replication, store, readiness) = cold_follower();
    // The leader holds a (101) and b (102), both acknowledged, and became warm with b.
    let leader = Store::starting_at(100, 1000);
    leader.create(nrt("a", 1), false).unwrap();
    leader.create(nrt("b", 1), false).unwrap();
    // The follower applied a; an acknowledgement's answer says the leader is warm from 102.
    replicate(&leader, &store, 101);
    store.replica().set_visible(Some(102));
    replication.heard_from_leader(102, Some(102));
    replication.refresh_readiness();
    assert!(!replication.serves_reads(), "b is still on its way: reads would miss it");
    assert_eq!(readiness.get(REPLICATION_CHECK), Some(false));
    assert_eq!(readiness.get(STORE_WARM_CHECK), Some(false));

    // b arrives, and the next word from the leader finds the follower there.
    replicate(&leader, &store, 102);
    replication.heard_from_leader(102, Some(102));
    assert!(replication.serves_reads());
    assert_eq!(readiness.get(REPLICATION_CHECK), Some(true));
    assert_eq!(readiness.get(STORE_WARM_CHECK), Some(true), "as warm as the leader, also once it leads");
    assert_eq!(replication.warm_revision(), Some(102), "its followers need reach no further");

    // Warm it stays, whatever a later leader's warm revision (one that noticed its warmth
    // after taking over); it serves reads only while the leader it hears is warm.
    replication.heard_from_leader(9_000, Some(9_000));
    assert!(replication.serves_reads());
    replication.heard_from_leader(9_000, None);
    assert!(!replication.serves_reads());
}

#[test]
fn a_leader_tells_from_which_revision_its_store_is_warm() {
    let (replication, store, readiness) = cold_follower();
    replication.set_role(Role::Leader);
    store.create(nrt("a", 1), false).unwrap();
    assert_eq!(replication.warm_revision(), None, "not warm yet");
    readiness.set(STORE_WARM_CHECK, true);
    assert_eq!(replication.warm_revision(), Some(101));
    store.create(nrt("b", 1), false).unwrap();
    assert_eq!(replication.warm_revision(), Some(101), "the revision it became warm at, not the current one");
    // A leader from before warm revisions were told: warm alone counts, as it did.
    let (replication, _, _) = cold_follower();
    replication.heard_from_leader(100, Some(0));
    assert!(replication.serves_reads());
}

/// During a cold start no replica is Ready, yet the exporters must learn that their objects are
/// missing: a follower tracking the leader tells them, one that lost the leader cannot.
#[test]
fn a_cold_follower_that_tracks_the_leader_says_which_objects_are_missing() {
    use crate::held::{Held, held};

    let (replication, store, readiness) = cold_follower();
    store.create(nrt("a", 1), false).unwrap();
    replication.heard_from_leader(store.visible_revision(), None);
    let mut state = crate::AppState::new(store, "test", "test");
    state.readiness = readiness.clone();
    let replication = Arc::new(replication);
    state.replication = Some(replication.clone());
    assert!(!replication.serves_reads(), "cold: no reads");
    assert_eq!((held(&state, "a"), held(&state, "b")), (Held::Yes, Held::No));

    // A new stream that has not reached the leader's head yet: its store may lag.
    replication.following.caught_up.store(false, Ordering::Release);
    assert_eq!(held(&state, "b"), Held::CannotTell);
}

/// A follower that started after the leader starts its store at its own, later clock; if its
/// first acknowledgement (sent before the leader's snapshot replaced that store) counted, every
/// later write would count as acknowledged by it, and a write it lacks could be lost when it
/// takes over. The leader ignores an acknowledgement ahead of its own head.
#[test]
fn an_acknowledgement_ahead_of_the_leader_does_not_stand_for_writes_to_come() {
    let (leader, store, _) = cold_follower();
    leader.set_role(Role::Leader);
    leader.stream_started("late-follower", "stream");
    let its_own_clock = store.replica().head_revision() + 1_000_000;
    assert!(!leader.acknowledge("late-follower", "stream", its_own_clock), "not in sync on its word alone");
    store.create(nrt("a", 1), false).unwrap();
    let written = store.replica().head_revision();
    let acked = leader.in_sync.acked_by("late-follower");
    assert!(acked.is_none_or(|acked| acked < written), "the write must still wait for the follower: {acked:?}");
    assert!(leader.acknowledge("late-follower", "stream", written), "it joins once it holds what the leader wrote");
}
