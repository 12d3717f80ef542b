//! The store operations a follower uses: applying the leader's changes at the leader's
//! revisions, bookmarks, and a reset that ends every earlier watch.

use numaresources_api::nrt::NodeResourceTopology;

use crate::store::tests::nrt;
use crate::store::{EventType, Preconditions, Store, WatchRefusal};

/// What the leader's stream carries for each of its events: the object as stored.
fn replicate(leader: &Store, follower: &Store, after: u64) -> u64 {
    let mut last = after;
    for event in leader.events_after(after, usize::MAX).unwrap() {
        let object: NodeResourceTopology = serde_json::from_slice(&event.object.json).unwrap();
        follower.apply_replicated(event.kind, object).unwrap();
        last = event.revision;
    }
    last
}

#[test]
fn a_follower_holds_the_leaders_objects_at_the_leaders_revisions() {
    let leader = Store::starting_at(100, 1000);
    let follower = Store::starting_at(100, 1000);
    leader.create(nrt("a", 4), false).unwrap();
    leader.create(nrt("b", 8), false).unwrap();
    leader.update(nrt("a", 2), &Preconditions::default(), false).unwrap();
    leader.delete("b", &Preconditions::default(), false).unwrap();
    replicate(&leader, &follower, 100);

    assert_eq!(follower.revision(), leader.revision());
    assert_eq!(follower.revisions_by_name(), leader.revisions_by_name());
    assert_eq!(follower.get("a").unwrap().json, leader.get("a").unwrap().json, "byte for byte");
    assert!(follower.get("b").is_none());
    // The follower's own history serves watches with the leader's revisions.
    let kinds: Vec<(EventType, u64)> =
        follower.events_after(100, usize::MAX).unwrap().iter().map(|e| (e.kind, e.revision)).collect();
    assert_eq!(
        kinds,
        [(EventType::Added, 101), (EventType::Added, 102), (EventType::Modified, 103), (EventType::Deleted, 104)]
    );
}

#[test]
fn changes_that_do_not_follow_are_refused() {
    let leader = Store::starting_at(100, 1000);
    let follower = Store::starting_at(100, 1000);
    leader.create(nrt("a", 4), false).unwrap();
    replicate(&leader, &follower, 100);
    let stale: NodeResourceTopology = serde_json::from_slice(&leader.get("a").unwrap().json).unwrap();
    assert!(follower.apply_replicated(EventType::Modified, stale.clone()).is_err(), "same revision again");
    let mut unknown = stale;
    unknown.metadata.name = Some("b".into());
    unknown.metadata.resource_version = Some("999".into());
    assert!(follower.apply_replicated(EventType::Modified, unknown).is_err(), "an object it does not hold");
}

#[test]
fn bookmarks_move_the_revision_without_an_event() {
    let store = Store::starting_at(100, 1000);
    store.advance_to(500);
    assert_eq!(store.revision(), 500);
    store.advance_to(400);
    assert_eq!(store.revision(), 500, "never backwards");
    assert!(store.events_after(100, 10).unwrap().is_empty());
    assert_eq!(store.create(nrt("a", 1), false).unwrap().revision, 501);
}

#[test]
fn a_reset_takes_the_leaders_state_and_ends_earlier_watches() {
    let follower = Store::starting_at(100, 1000);
    follower.create(nrt("unacknowledged", 1), false).unwrap();
    let leader = Store::starting_at(100, 1000);
    leader.advance_to(5_000);
    leader.create(nrt("a", 4), false).unwrap();
    let items: Vec<NodeResourceTopology> =
        leader.snapshot().items.iter().map(|s| serde_json::from_slice(&s.json).unwrap()).collect();
    follower.reset(items, leader.revision()).unwrap();

    assert_eq!(follower.revisions_by_name(), leader.revisions_by_name());
    assert!(matches!(follower.events_after(101, 10), Err(WatchRefusal::TooOld { .. })), "a watch from before relists");
    assert!(follower.events_after(leader.revision(), 10).unwrap().is_empty(), "one from the reset goes on");
}

#[test]
fn clients_see_only_what_followers_hold() {
    let leader = Store::starting_at(100, 1000);
    leader.create(nrt("a", 4), false).unwrap();
    leader.set_visible(Some(101));
    leader.create(nrt("b", 4), false).unwrap();
    leader.update(nrt("a", 2), &Preconditions::default(), false).unwrap();

    // Clients: the state at 101, and no event after it yet.
    let snapshot = leader.snapshot();
    assert_eq!(snapshot.revision, 101);
    assert_eq!(
        snapshot.items.iter().map(|s| (s.name().to_owned(), s.revision)).collect::<Vec<_>>(),
        [("a".to_owned(), 101)]
    );
    assert_eq!(leader.revision(), 101);
    assert!(leader.events_after(101, 10).unwrap().is_empty());
    assert!(matches!(leader.watch(Some(102)), Err(WatchRefusal::TooLarge { current: 101 })));
    let initial = leader.watch_with_snapshot();
    assert_eq!((initial.backlog.len(), initial.revision), (1, 101));
    // Followers: everything, so that they come to hold it.
    let batch = leader.replication_events_after(101, 10).unwrap();
    assert_eq!((batch.events.len(), batch.head, batch.visible), (2, 103, 101));
    assert_eq!(leader.head_revision(), 103);

    leader.set_visible(None);
    assert_eq!(leader.events_after(101, 10).unwrap().len(), 2);
    assert_eq!(leader.snapshot().revision, 103);
}

#[test]
fn a_follower_drops_its_uncommitted_tail_without_touching_what_clients_saw() {
    let follower = Store::starting_at(100, 1000);
    follower.create(nrt("a", 4), false).unwrap();
    follower.set_visible(Some(101));
    follower.create(nrt("b", 4), false).unwrap();
    follower.update(nrt("a", 2), &Preconditions::default(), false).unwrap();
    assert!(follower.truncate_to(101));
    assert_eq!(follower.head_revision(), 101);
    let names: Vec<(String, u64)> =
        follower.snapshot().items.iter().map(|s| (s.name().to_owned(), s.revision)).collect();
    assert_eq!(names, [("a".to_owned(), 101)]);
    assert!(follower.replication_events_after(101, 10).unwrap().events.is_empty());
    // The history still serves a watch from before the dropped tail.
    assert_eq!(follower.events_after(100, 10).unwrap().len(), 1);
    assert!(!follower.truncate_to(50), "older than the history");
}
