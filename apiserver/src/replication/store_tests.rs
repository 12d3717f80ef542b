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
        follower.replica().apply_replicated(event.kind, object).unwrap();
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

    assert_eq!(follower.visible_revision(), leader.visible_revision());
    assert_eq!(follower.replica().revisions_by_name(), leader.replica().revisions_by_name());
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
    assert!(follower.replica().apply_replicated(EventType::Modified, stale.clone()).is_err(), "same revision again");
    let mut unknown = stale;
    unknown.metadata.name = Some("b".into());
    unknown.metadata.resource_version = Some("999".into());
    assert!(follower.replica().apply_replicated(EventType::Modified, unknown).is_err(), "an object it does not hold");
}

#[test]
fn bookmarks_move_the_revision_without_an_event() {
    let store = Store::starting_at(100, 1000);
    store.replica().advance_to(500);
    assert_eq!(store.visible_revision(), 500);
    store.replica().advance_to(400);
    assert_eq!(store.visible_revision(), 500, "never backwards");
    assert!(store.events_after(100, 10).unwrap().is_empty());
    assert_eq!(store.create(nrt("a", 1), false).unwrap().revision, 501);
}

#[test]
fn a_reset_takes_the_leaders_state_and_ends_earlier_watches() {
    let follower = Store::starting_at(100, 1000);
    follower.create(nrt("unacknowledged", 1), false).unwrap();
    let leader = Store::starting_at(100, 1000);
    leader.replica().advance_to(5_000);
    leader.create(nrt("a", 4), false).unwrap();
    let items: Vec<NodeResourceTopology> =
        leader.snapshot().items.iter().map(|s| serde_json::from_slice(&s.json).unwrap()).collect();
    follower.replica().reset(items, leader.visible_revision()).unwrap();

    assert_eq!(follower.replica().revisions_by_name(), leader.replica().revisions_by_name());
    assert!(matches!(follower.events_after(101, 10), Err(WatchRefusal::TooOld { .. })), "a watch from before relists");
    assert!(follower.events_after(leader.visible_revision(), 10).unwrap().is_empty(), "one from the reset goes on");
}

#[test]
fn clients_see_only_what_followers_hold() {
    let leader = Store::starting_at(100, 1000);
    leader.create(nrt("a", 4), false).unwrap();
    leader.replica().set_visible(Some(101));
    leader.create(nrt("b", 4), false).unwrap();
    leader.update(nrt("a", 2), &Preconditions::default(), false).unwrap();

    // Clients: the state at 101, and no event after it yet.
    let snapshot = leader.snapshot();
    assert_eq!(snapshot.revision, 101);
    assert_eq!(
        snapshot.items.iter().map(|s| (s.name().to_owned(), s.revision)).collect::<Vec<_>>(),
        [("a".to_owned(), 101)]
    );
    assert_eq!(leader.visible_revision(), 101);
    assert!(leader.events_after(101, 10).unwrap().is_empty());
    assert!(matches!(leader.watch(Some(102)), Err(WatchRefusal::TooLarge { current: 101 })));
    let initial = leader.watch_with_snapshot_of(None);
    assert_eq!((initial.backlog.len(), initial.revision), (1, 101));
    // Followers: everything, so that they come to hold it.
    let batch = leader.replica().replication_events_after(101, 10).unwrap();
    assert_eq!((batch.events.len(), batch.head, batch.visible), (2, 103, 101));
    assert_eq!(leader.replica().head_revision(), 103);

    leader.replica().set_visible(None);
    assert_eq!(leader.events_after(101, 10).unwrap().len(), 2);
    assert_eq!(leader.snapshot().revision, 103);
}

#[test]
fn a_follower_drops_its_uncommitted_tail_without_touching_what_clients_saw() {
    let follower = Store::starting_at(100, 1000);
    follower.create(nrt("a", 4), false).unwrap();
    follower.replica().set_visible(Some(101));
    follower.create(nrt("b", 4), false).unwrap();
    follower.update(nrt("a", 2), &Preconditions::default(), false).unwrap();
    assert!(follower.replica().truncate_to(101));
    assert_eq!(follower.replica().head_revision(), 101);
    let names: Vec<(String, u64)> =
        follower.snapshot().items.iter().map(|s| (s.name().to_owned(), s.revision)).collect();
    assert_eq!(names, [("a".to_owned(), 101)]);
    assert!(follower.replica().replication_events_after(101, 10).unwrap().events.is_empty());
    // The history still serves a watch from before the dropped tail.
    assert_eq!(follower.events_after(100, 10).unwrap().len(), 1);
    assert!(!follower.replica().truncate_to(50), "older than the history");
}

/// A replicated leader lets clients see more on every acknowledgement. That wakes the watchers
/// of every object and those of the names whose events became visible, never every watch of
/// one name (5,000 exporters' own-object watches), and a watch of one name that read all of its
/// own events is not sent to relist by it when other objects' changes push the history past it.
#[test]
fn an_acknowledgement_wakes_only_the_watchers_of_the_names_it_reveals() {
    for watched in [10, 1_000, 5_000] {
        let leader = Store::starting_at(0, 100);
        let mut receivers: Vec<_> = (0..watched)
            .map(|i| {
                leader.create(nrt(&format!("n{i}"), 1), false).unwrap();
                leader.subscribe_named(&format!("n{i}"))
            })
            .collect();
        let mut every = leader.watch(None).unwrap().changes;
        let after = leader.visible_revision();
        // A follower is in sync: clients see what it holds.
        leader.replica().set_visible(Some(after));
        receivers.iter_mut().for_each(|r| drop(r.borrow_and_update()));
        for cpus in 2..152 {
            leader.update(nrt("n3", cpus), &Preconditions::default(), false).unwrap();
            if cpus == 2 {
                assert!(!receivers[3].has_changed().unwrap(), "nothing its watchers may read yet");
                every.borrow_and_update();
            }
            // The follower acknowledges the write.
            leader.replica().set_visible(Some(leader.replica().head_revision()));
            if cpus == 2 {
                assert!(every.has_changed().unwrap(), "watches of every object wake on it");
            }
        }
        let woken: Vec<usize> =
            receivers.iter_mut().enumerate().filter(|(_, r)| r.has_changed().unwrap()).map(|(i, _)| i).collect();
        assert_eq!(woken, [3], "{watched} watched names");
        // The history (100 events) no longer reaches `after`: n3's watcher missed events of its
        // own and relists; n4's missed nothing of its own and goes on.
        assert!(matches!(leader.named_events_after("n3", after, 64), Err(WatchRefusal::TooOld { .. })));
        let (events, through) = leader.named_events_after("n4", after, 64).unwrap();
        assert!(events.is_empty());
        assert_eq!(through, leader.visible_revision());
    }
}

/// A follower decodes the leader's stream from its text, where every list grows by doubling
/// from four elements; the versions it keeps hold no spare room (they took 11–13 % more memory
/// than the leader's, which decodes requests through a `serde_json::Value`).
#[test]
fn a_replicated_object_keeps_no_spare_room_in_its_lists() {
    let leader = Store::starting_at(100, 1000);
    let mut object = nrt("a", 4);
    object.zones.push(object.zones[0].clone());
    object.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    leader.create(object, false).unwrap();
    let follower = Store::starting_at(100, 1000);
    let text = String::from_utf8(leader.get("a").unwrap().json.to_vec()).unwrap();
    let decoded: NodeResourceTopology = serde_json::from_str(&text).unwrap();
    assert!(decoded.zones.capacity() > decoded.zones.len(), "decoding from text leaves room (what this is about)");
    follower.replica().apply_replicated(EventType::Added, decoded).unwrap();

    let kept = follower.get("a").unwrap();
    let kept = kept.object().unwrap();
    let exact = |capacity: usize, len: usize| capacity == len;
    assert!(exact(kept.zones.capacity(), kept.zones.len()));
    assert!(exact(kept.attributes.capacity(), kept.attributes.len()));
    for zone in &kept.zones {
        assert!(exact(zone.resources.capacity(), zone.resources.len()));
    }
    let finalizers = kept.metadata.finalizers.as_ref().unwrap();
    assert!(exact(finalizers.capacity(), finalizers.len()));
}
