//! The store's behaviour through its public methods.

use numaresources_api::nrt::{AttributeInfo, ResourceInfo, Zone};
use numaresources_api::quantity::Quantity;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use bytes::Bytes;
use k8s_openapi::jiff::Timestamp;

use super::history::{history_index, history_index_after};
use super::stored::Content;
use super::*;
use crate::row_parts::RowParts;

#[test]
fn the_history_index_finds_what_a_bisection_finds() {
    let object = Arc::new(stored(nrt("n", 1), 1, Arc::new(AtomicU64::new(0))).unwrap());
    let event =
        |revision| Arc::new(Event { kind: EventType::Modified, revision, object: object.clone(), previous: None });
    // Consecutive revisions, then gaps (a bookmark, a new leader's jump), at the start, the
    // middle and the end, and the empty history.
    let histories: [&[u64]; 5] = [&[], &[7], &[3, 4, 5, 6], &[3, 4, 9, 10, 11, 40], &[2, 5, 6, 7, 8]];
    for revisions in histories {
        let history: VecDeque<Arc<Event>> = revisions.iter().copied().map(event).collect();
        for revision in 0..45 {
            let bisected = history.partition_point(|e| e.revision < revision);
            assert_eq!(history_index(&history, revision), bisected, "{revisions:?} at {revision}");
            let after = history.partition_point(|e| e.revision <= revision);
            assert_eq!(history_index_after(&history, revision), after, "{revisions:?} after {revision}");
        }
        assert_eq!(history_index_after(&history, u64::MAX), history.len());
    }
}

/// A one-zone object with `cpus` CPUs (the replication tests use it too).
pub(crate) fn nrt(name: &str, cpus: i64) -> NodeResourceTopology {
    let mut object = NodeResourceTopology::new(name);
    object.zones = vec![Zone {
        name: "node-0".into(),
        zone_type: "Node".into(),
        resources: vec![ResourceInfo {
            name: "cpu".into(),
            capacity: Quantity::from_i64(cpus),
            allocatable: Quantity::from_i64(cpus),
            available: Quantity::from_i64(cpus),
        }],
        ..Zone::default()
    }];
    object.attributes = vec![AttributeInfo::new("topologyManagerPolicy", "single-numa-node")];
    object
}

#[test]
fn a_get_shows_only_what_clients_may_see() {
    let store = Store::starting_at(0, 100);
    store.create(nrt("kept", 1), false).unwrap();
    store.create(nrt("changed", 1), false).unwrap();
    store.create(nrt("deleted", 1), false).unwrap();
    let visible = store.replica().head_revision();
    store.replica().set_visible(Some(visible));
    store.update(nrt("changed", 8), &Preconditions::default(), false).unwrap();
    store.delete("deleted", &Preconditions::default(), false).unwrap();
    store.create(nrt("added", 1), false).unwrap();

    let version = |stored: Option<Arc<Stored>>| stored.map(|s| s.revision);
    assert_eq!(version(store.get_visible("changed")), Some(2), "the held-back update is not shown");
    assert!(store.get_visible("deleted").is_some(), "the held-back deletion is not shown");
    assert!(store.get_visible("added").is_none(), "the held-back creation is not shown");
    assert_eq!(version(store.get_visible("kept")), Some(1));
    store.replica().set_visible(None);
    assert!(store.get_visible("changed").unwrap().revision > visible);
    assert!(store.get_visible("deleted").is_none());
    assert!(store.get_visible("added").is_some());
}

/// Waiting for a revision while writes publish: a waiter that took the state lock while
/// holding the change channel deadlocked a replica (the writer holds them the other way).
#[test]
fn waiting_for_a_revision_while_writes_publish_never_deadlocks() {
    const WRITES: i64 = 3_000;
    let store = Arc::new(Store::starting_at(0, 100));
    let (done, finished) = std::sync::mpsc::channel();
    let run = {
        let store = store.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
            runtime.block_on(async {
                let waiters: Vec<_> = (0..8)
                    .map(|_| {
                        let store = store.clone();
                        tokio::spawn(async move {
                            while store.visible_revision() < WRITES as u64 {
                                let next = store.visible_revision() + 1;
                                store.wait_visible(next, std::time::Duration::from_secs(1)).await;
                            }
                        })
                    })
                    .collect();
                for i in 0..WRITES {
                    store.create(nrt(&format!("worker-{i}"), 4), false).unwrap();
                }
                for waiter in waiters {
                    waiter.await.unwrap();
                }
            });
            let _ = done.send(());
        })
    };
    // Not a timing assertion: a deadlock never ends (its threads, timers included, stay
    // blocked), and this bound, kept outside them, turns it into a failure.
    finished.recv_timeout(std::time::Duration::from_secs(120)).expect("waiters and the writer deadlocked");
    run.join().unwrap();
    assert_eq!(store.visible_revision(), WRITES as u64);
}

#[test]
fn create_sets_server_owned_metadata_and_bumps_the_revision() {
    let store = Store::starting_at(100, 10);
    let mut object = nrt("worker-0", 4);
    object.metadata.uid = Some("client-chosen".into());
    object.metadata.namespace = Some("default".into());
    let created = store.create(object, false).unwrap();
    let meta = &created.object().unwrap().metadata;
    assert_eq!(meta.resource_version.as_deref(), Some("101"));
    assert_eq!(meta.generation, Some(1));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.namespace, None);
    let uid = meta.uid.as_deref().unwrap();
    assert_ne!(uid, "client-chosen");
    assert_eq!(uid.len(), 36);
    assert_eq!(&uid[14..15], "4");
    assert!(matches!(store.create(nrt("worker-0", 4), false), Err(StoreError::AlreadyExists)));
    assert_eq!(store.visible_revision(), 101);
}

#[test]
fn unchanged_writes_keep_the_revision_and_emit_nothing() {
    let store = Store::starting_at(0, 10);
    store.create(nrt("n", 4), false).unwrap();
    let mut reordered = nrt("n", 4);
    reordered.zones[0].resources[0].capacity = Quantity::parse("4").unwrap();
    let (stored, changed) = store.update(reordered, &Preconditions::default(), false).unwrap();
    assert!(!changed);
    assert_eq!(stored.revision, 1);
    assert_eq!(store.visible_revision(), 1);
    assert!(store.events_after(1, usize::MAX).unwrap().is_empty());
}

#[test]
fn real_changes_bump_revision_and_generation_and_are_watched() {
    let store = Store::starting_at(0, 10);
    store.create(nrt("n", 4), false).unwrap();
    let start = store.watch(Some(1)).unwrap();
    let (stored, changed) = store.update(nrt("n", 3), &Preconditions::default(), false).unwrap();
    assert!(start.changes.has_changed().unwrap());
    assert!(changed);
    assert_eq!(stored.revision, 2);
    assert_eq!(stored.object().unwrap().metadata.generation, Some(2));
    let event = store.events_after(start.revision, 1).unwrap().remove(0);
    assert_eq!((event.kind, event.revision), (EventType::Modified, 2));
    assert_eq!(event.previous.as_ref().unwrap().revision, 1);

    // A label change is a change, but not a new generation.
    let mut labelled = nrt("n", 3);
    labelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
    let (stored, changed) = store.update(labelled, &Preconditions::default(), false).unwrap();
    assert!(changed);
    assert_eq!(stored.object().unwrap().metadata.generation, Some(2));
}

fn last_change(stored: &Stored) -> String {
    stored.object().unwrap().metadata.annotations.as_ref().and_then(|a| a.get(LAST_CHANGE_ANNOTATION)).unwrap().clone()
}

#[test]
fn the_last_change_annotation_is_the_servers_alone() {
    let store = Store::starting_at(0, 10);
    let forged = || {
        let mut object = nrt("n", 4);
        let annotations = [(LAST_CHANGE_ANNOTATION.to_owned(), "1999-01-01T00:00:00Z".to_owned())];
        object.metadata.annotations = Some(annotations.into());
        object
    };
    let created = store.create(forged(), false).unwrap();
    let stamped = last_change(&created);
    assert_ne!(stamped, "1999-01-01T00:00:00Z", "a client cannot set it");
    assert!(stamped.parse::<Timestamp>().is_ok(), "RFC 3339: {stamped}");
    assert!(std::str::from_utf8(&created.json).unwrap().contains(LAST_CHANGE_ANNOTATION));

    // Sending back a stale value, or none, with the same content is no change.
    for same in [forged(), nrt("n", 4)] {
        let (stored, changed) = store.update(same, &Preconditions::default(), false).unwrap();
        assert!(!changed);
        assert_eq!((stored.revision, last_change(&stored)), (1, stamped.clone()));
    }
    // A real change is stamped by the server, whatever the client sent.
    let mut changed_object = forged();
    changed_object.zones[0].resources[0].available = Quantity::from_i64(2);
    let (stored, changed) = store.update(changed_object, &Preconditions::default(), false).unwrap();
    assert!(changed);
    assert_ne!(last_change(&stored), "1999-01-01T00:00:00Z");
    // Other annotations are the user's: changing one is a change.
    let mut annotated = stored.object().unwrap().into_owned();
    annotated.metadata.annotations.get_or_insert_default().insert("team".into(), "a".into());
    assert!(store.update(annotated, &Preconditions::default(), false).unwrap().1);
}

#[test]
fn stale_resource_versions_and_uids_conflict() {
    let store = Store::starting_at(0, 10);
    store.create(nrt("n", 4), false).unwrap();
    let mut stale = nrt("n", 3);
    stale.metadata.resource_version = Some("0".into());
    assert!(matches!(store.update(stale, &Preconditions::default(), false), Err(StoreError::Conflict(_))));
    let mut wrong_uid = nrt("n", 3);
    wrong_uid.metadata.uid = Some("other".into());
    assert!(matches!(store.update(wrong_uid, &Preconditions::default(), false), Err(StoreError::Conflict(_))));
    let pre = Preconditions { uid: Some("other".into()), ..Preconditions::default() };
    assert!(matches!(store.delete("n", &pre, false), Err(StoreError::Conflict(_))));
    assert!(matches!(store.update(nrt("missing", 1), &Preconditions::default(), false), Err(StoreError::NotFound)));
}

#[test]
fn dry_run_never_stores() {
    let store = Store::starting_at(0, 10);
    let created = store.create(nrt("n", 4), true).unwrap();
    assert_eq!(created.revision, 1);
    assert!(store.get("n").is_none());
    store.create(nrt("n", 4), false).unwrap();
    store.update(nrt("n", 2), &Preconditions::default(), true).unwrap();
    store.delete("n", &Preconditions::default(), true).unwrap();
    let kept = store.get("n").unwrap();
    assert_eq!(kept.revision, 1);
}

#[test]
fn finalizers_hold_deletion_until_removed() {
    let store = Store::starting_at(0, 10);
    let mut object = nrt("n", 4);
    object.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    store.create(object, false).unwrap();
    let (marked, gone) = store.delete("n", &Preconditions::default(), false).unwrap();
    assert!(!gone);
    assert!(marked.object().unwrap().metadata.deletion_timestamp.is_some());
    let mut events = store.events_after(1, usize::MAX).unwrap();
    assert_eq!(events.pop().map(|e| (e.kind, e.revision)), Some((EventType::Modified, 2)));
    assert!(events.is_empty());
    let mut released = marked.object().unwrap().into_owned();
    released.metadata.finalizers = None;
    let watch = store.watch(Some(store.visible_revision())).unwrap();
    store.update(released, &Preconditions::default(), false).unwrap();
    assert!(store.get("n").is_none());
    assert_eq!(store.events_after(watch.revision, usize::MAX).unwrap()[0].kind, EventType::Deleted);
}

#[test]
fn an_orphan_or_foreground_deletion_marks_and_waits_for_the_collector() {
    for (propagation, finalizer) in
        [(Propagation::Orphan, ORPHAN_FINALIZER), (Propagation::Foreground, FOREGROUND_FINALIZER)]
    {
        let store = Store::starting_at(0, 10);
        store.create(nrt("n", 4), false).unwrap(); // 1
        let (marked, gone) = store.delete_with("n", &Preconditions::default(), propagation, false).unwrap(); // 2
        assert!(!gone);
        let meta = marked.object().unwrap().metadata.clone();
        assert!(meta.deletion_timestamp.is_some());
        assert_eq!(meta.finalizers, Some(vec![finalizer.to_owned()]));
        assert_eq!(meta.generation, Some(2), "marking bumps the generation, as kube-apiserver does");
        assert_eq!(store.events_after(1, 10).unwrap()[0].kind, EventType::Modified);
        // Deleting again changes nothing; a different policy swaps the collector finalizer.
        let (again, _) = store.delete("n", &Preconditions::default(), false).unwrap();
        assert_eq!(again.revision, 2);
        // The collector removes its finalizer when done: the object goes, DELETED.
        let mut released = store.get("n").unwrap().object().unwrap().into_owned();
        released.metadata.finalizers = None;
        store.update(released, &Preconditions::default(), false).unwrap(); // 3
        assert!(store.get("n").is_none());
        assert_eq!(store.events_after(2, 10).unwrap()[0].kind, EventType::Deleted);
    }
    // A Background deletion of an object the collector was asked to hold releases it.
    let store = Store::starting_at(0, 10);
    store.create(nrt("n", 4), false).unwrap();
    store.delete_with("n", &Preconditions::default(), Propagation::Orphan, false).unwrap();
    let (_, gone) = store.delete_with("n", &Preconditions::default(), Propagation::Background, false).unwrap();
    assert!(gone && store.get("n").is_none());
    // A dry run marks nothing.
    store.create(nrt("m", 4), false).unwrap();
    store.delete_with("m", &Preconditions::default(), Propagation::Orphan, true).unwrap();
    assert!(store.get("m").unwrap().object().unwrap().metadata.deletion_timestamp.is_none());
}

#[test]
fn marking_for_deletion_stamps_the_last_change() {
    let store = Store::starting_at(0, 10);
    let mut object = nrt("n", 4);
    object.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    store.create(object, false).unwrap();
    // Age the stamp, so the one the marking sets is told apart from it.
    {
        let mut state = store.write();
        let mut aged = state.objects["n"].object().unwrap().into_owned();
        aged.metadata
            .annotations
            .get_or_insert_default()
            .insert(LAST_CHANGE_ANNOTATION.into(), "2000-01-01T00:00:00Z".into());
        let aged = stored(aged, 1, Arc::new(AtomicU64::new(0))).unwrap();
        state.objects.insert("n".into(), Arc::new(aged));
    }
    let (marked, _) = store.delete("n", &Preconditions::default(), false).unwrap();
    let deleted_at = marked.object().unwrap().metadata.deletion_timestamp.clone().unwrap();
    assert_eq!(last_change(&marked), deleted_at.0.to_string());
    assert!(std::str::from_utf8(&marked.json).unwrap().contains(&deleted_at.0.to_string()));
}

#[test]
fn the_history_keeps_replaced_versions_slim_and_shares_current_ones() {
    let store = Store::starting_at(0, 10);
    let mut labelled = nrt("n", 4);
    labelled.metadata.labels = Some([("pool".to_owned(), "a".to_owned())].into());
    store.create(labelled.clone(), false).unwrap(); // 1
    labelled.zones[0].resources[0].available = Quantity::from_i64(3);
    store.update(labelled, &Preconditions::default(), false).unwrap(); // 2
    let state = store.read();
    let (created, modified) = (&state.history[0], &state.history[1]);
    // The current version is one allocation, shared by the map and its event.
    assert!(Arc::ptr_eq(&state.objects["n"], &modified.object));
    assert!(matches!(modified.object.content, Content::Typed(_)));
    // The replaced one is kept once, slim, by both events that refer to it.
    let previous = modified.previous.as_ref().unwrap();
    assert!(Arc::ptr_eq(previous, &created.object));
    assert!(matches!(previous.content, Content::Replaced { .. }));
    assert_eq!((previous.name(), previous.revision), ("n", 1));
    assert_eq!(previous.labels().unwrap()["pool"], "a");
    // The typed object comes back from the JSON when asked for.
    let decoded = previous.object().unwrap();
    assert_eq!(decoded.zones[0].resources[0].available, Quantity::from_i64(4));
    assert_eq!(decoded.metadata.resource_version.as_deref(), Some("1"));
    drop(state);
    // A deletion's last state is history only: slim too.
    store.delete("n", &Preconditions::default(), false).unwrap(); // 3
    let state = store.read();
    assert!(matches!(state.history[2].object.content, Content::Replaced { .. }));
    assert!(matches!(state.history[1].object.content, Content::Replaced { .. }));
}

#[test]
fn replaced_versions_keep_rendered_parts_and_deletions_render_them() {
    let store = Store::starting_at(0, 10);
    let mut labelled = nrt("n", 4);
    labelled.metadata.labels = Some([("pool".to_owned(), "a".to_owned())].into());
    let created = store.create(labelled.clone(), false).unwrap(); // 1
    let rendered = created.metadata_json().unwrap().into_owned();
    labelled.zones[0].resources[0].available = Quantity::from_i64(3);
    store.update(labelled, &Preconditions::default(), false).unwrap(); // 2
    store.delete("n", &Preconditions::default(), false).unwrap(); // 3
    let state = store.read();
    let kept = |stored: &Stored| matches!(&stored.content, Content::Replaced { row_parts: Some(_), .. });
    // Rendered while current (a Table or metadata read did it): carried over, not decoded.
    assert!(kept(&state.history[0].object));
    assert_eq!(state.history[0].object.metadata_json().unwrap(), rendered);
    // Never rendered while current: nothing kept, read from the JSON when asked for, with
    // the same bytes the typed path renders.
    let modified = &state.history[1].object;
    assert!(!kept(modified));
    let typed = RowParts::of(&modified.object().unwrap()).metadata().to_owned();
    assert_eq!(modified.metadata_json().unwrap(), typed);
    // A deletion's last state goes out to metadata watchers as it is: rendered up front,
    // with its uid, resourceVersion and labels.
    let deleted = &state.history[2].object;
    assert!(kept(deleted));
    let metadata: serde_json::Value = serde_json::from_str(&deleted.metadata_json().unwrap()).unwrap();
    assert_eq!(metadata["resourceVersion"], "3");
    assert_eq!(metadata["labels"]["pool"], "a");
    assert_eq!(metadata["uid"], created.object().unwrap().metadata.uid.clone().unwrap());
    // What the kept parts cost is charged, and given back, exactly.
    assert_eq!(state.history_bytes, state.history.iter().map(|e| e.charge()).sum::<usize>());
}

#[test]
fn a_version_that_does_not_decode_is_an_error_never_an_invented_object() {
    let broken = Stored {
        content: Content::Replaced { name: "n".into(), labels: None, row_parts: None },
        json: Bytes::from_static(br#"{"metadata":{"name":"n""#),
        revision: 1,
        last_report: Arc::new(AtomicU64::new(0)),
        row_parts: OnceLock::new(),
    };
    assert!(broken.object().is_err());
    assert!(broken.row_parts().is_err());
    assert!(broken.metadata_json().is_err());
    let version = crate::negotiate::MetaVersion::V1;
    let table = crate::table::table(&[&broken], version, Default::default(), b"{}", crate::table::Columns::Defined);
    assert_eq!(table.unwrap_err().code(), http::StatusCode::INTERNAL_SERVER_ERROR);
    let metadata = crate::table::partial_metadata(&broken, version).unwrap_err();
    assert_eq!(metadata.to_status()["reason"], "InternalError");
}

#[test]
fn a_watcher_that_stops_reading_keeps_no_replaced_version_alive() {
    let store = Store::starting_at(0, 10);
    store.create(nrt("n", 1), false).unwrap();
    let paused = store.watch(Some(1)).unwrap();
    let written = Arc::downgrade(&store.update(nrt("n", 2), &Preconditions::default(), false).unwrap().0);
    for cpus in 3..5 {
        store.update(nrt("n", cpus), &Preconditions::default(), false).unwrap();
    }
    // The typed versions a write replaced are gone, though the watcher has not read them;
    // the history keeps slim copies.
    assert!(written.upgrade().is_none());
    assert!(paused.changes.has_changed().unwrap());
    let kinds: Vec<EventType> = store.events_after(paused.revision, 10).unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventType::Modified; 3]);
}

/// A watch of one name starts with that object alone (at the visible revision), not with
/// every object for the selector to drop.
#[test]
fn a_snapshot_watch_of_one_name_starts_with_that_object_alone() {
    let store = Store::starting_at(0, 10);
    for i in 0..3 {
        store.create(nrt(&format!("n{i}"), 1), false).unwrap();
    }
    let names = |start: WatchStart| start.backlog.iter().map(|e| e.object.name().to_owned()).collect::<Vec<_>>();
    assert_eq!(names(store.watch_with_snapshot_of(Some("n1"))), ["n1"]);
    assert!(names(store.watch_with_snapshot_of(Some("absent"))).is_empty());
    assert_eq!(names(store.watch_with_snapshot_of(None)), ["n0", "n1", "n2"]);
    // Clients see up to revision 1: n1 did not exist yet.
    store.visible.store(1, Ordering::Release);
    assert!(names(store.watch_with_snapshot_of(Some("n1"))).is_empty());
}

/// The size bound is read off the stored encoding: a larger new version is refused (dry run
/// too) and nothing is written; one that fits is written as `modify` writes it.
#[test]
fn a_bounded_modification_refuses_a_version_larger_than_the_bound() {
    let store = Store::starting_at(0, 10);
    let created = store.create(nrt("n", 1), false).unwrap();
    let size = created.json.len();
    for dry_run in [true, false] {
        let refused = store.modify_within("n", &Preconditions::default(), dry_run, size, |_| {
            let mut bigger = nrt("n", 1);
            bigger.metadata.labels = Some(BTreeMap::from([("grown".to_owned(), "x".repeat(64))]));
            Ok::<_, StoreError>(bigger)
        });
        assert!(matches!(refused, Err(StoreError::TooLarge { limit }) if limit == size), "{refused:?}");
    }
    assert_eq!(store.visible_revision(), 1, "nothing was written");
    let (written, changed) = store
        .modify_within("n", &Preconditions::default(), false, size + 16, |_| Ok::<_, StoreError>(nrt("n", 2)))
        .unwrap();
    assert!(changed && written.json.len() <= size + 16);
    // A create is bounded the same way.
    for dry_run in [true, false] {
        let refused = store.create_within(nrt("m", 1), dry_run, size - 16);
        assert!(matches!(refused, Err(StoreError::TooLarge { .. })), "{refused:?}");
    }
    assert!(store.get("m").is_none());
    assert!(store.create_within(nrt("m", 1), false, size + 16).is_ok());
}

/// The fan-out to watches of one name each does not grow with their number: a change wakes
/// its name's watchers and no other, and each reads its own events alone.
#[test]
fn a_change_wakes_only_the_watchers_of_its_name() {
    for watched in [10, 1_000, 5_000] {
        let store = Store::starting_at(0, 100);
        let mut receivers: Vec<_> = (0..watched)
            .map(|i| {
                store.create(nrt(&format!("n{i}"), 1), false).unwrap();
                store.subscribe_named(&format!("n{i}"))
            })
            .collect();
        let after = store.visible_revision();
        for cpus in 2..12 {
            store.update(nrt("n3", cpus), &Preconditions::default(), false).unwrap();
        }
        let woken = receivers.iter_mut().filter(|r| r.has_changed().unwrap()).count();
        assert_eq!(woken, 1, "{watched} watched names");
        let (events, through) = store.named_events_after("n3", after, 64).unwrap();
        assert_eq!(events.len(), 10);
        assert_eq!(through, store.visible_revision());
        let (events, _) = store.named_events_after("n4", after, 64).unwrap();
        assert!(events.is_empty());
        // Read in pieces, each ending at its last event.
        let (events, through) = store.named_events_after("n3", after, 4).unwrap();
        assert_eq!((events.len(), through), (4, after + 4));
    }
}

#[test]
fn the_history_is_bounded_by_bytes_oldest_first() {
    let size = |store: &Store| store.read().history.iter().map(|e| e.charge()).sum::<usize>();
    let one = {
        let store = Store::starting_at(0, 100);
        store.create(nrt("n0", 1), false).unwrap();
        size(&store)
    };
    // Room for three creations' worth of bytes, whatever the count bound allows.
    let store = Store::starting_at(0, 100).with_history_bytes(3 * one + one / 2);
    for i in 0..5 {
        store.create(nrt(&format!("n{i}"), 1), false).unwrap();
    }
    let retained: Vec<u64> = store.read().history.iter().map(|e| e.revision).collect();
    assert_eq!(retained, [3, 4, 5]);
    assert_eq!(store.read().history_bytes, size(&store));
    assert!(size(&store) <= 3 * one + one / 2);
    assert_eq!(store.events_after(2, usize::MAX).unwrap().len(), 3);
    assert_eq!(store.watch(Some(1)).unwrap_err(), WatchRefusal::TooOld { oldest: 2 });
    // A modification holds two versions, so it costs about twice as much: older events go.
    store.update(nrt("n4", 2), &Preconditions::default(), false).unwrap(); // 6
    let retained: Vec<u64> = store.read().history.iter().map(|e| e.revision).collect();
    assert_eq!(retained, [5, 6]);
    assert_eq!(store.read().history_bytes, size(&store));
    // The newest event stays, however large.
    let tiny = Store::starting_at(0, 100).with_history_bytes(1);
    tiny.create(nrt("a", 1), false).unwrap();
    tiny.create(nrt("b", 1), false).unwrap();
    assert_eq!(tiny.events_after(1, usize::MAX).unwrap().len(), 1);
}

#[test]
fn watches_resume_from_history_or_expire() {
    let store = Store::starting_at(0, 3);
    for i in 0..5 {
        store.create(nrt(&format!("n{i}"), 1), false).unwrap();
    }
    // Revisions 1..=5; the history keeps 3..=5, so resuming after 2 still works.
    let start = store.watch(Some(2)).unwrap();
    let revisions: Vec<u64> =
        store.events_after(start.revision, usize::MAX).unwrap().iter().map(|e| e.revision).collect();
    assert_eq!(revisions, [3, 4, 5]);
    let first_two: Vec<u64> = store.events_after(2, 2).unwrap().iter().map(|e| e.revision).collect();
    assert_eq!(first_two, [3, 4]);
    // A watcher that fell behind what the history keeps is told to relist.
    assert_eq!(store.events_after(1, 1).unwrap_err(), WatchRefusal::TooOld { oldest: 2 });
    assert_eq!(store.watch(Some(1)).unwrap_err(), WatchRefusal::TooOld { oldest: 2 });
    // A revision from the future is too large, not too old: the client may retry.
    assert_eq!(store.watch(Some(99)).unwrap_err(), WatchRefusal::TooLarge { current: 5 });
    assert!(store.watch(None).unwrap().backlog.is_empty());
}

#[test]
fn snapshots_of_earlier_revisions_are_rebuilt_from_the_history() {
    let store = Store::starting_at(0, 4);
    store.create(nrt("a", 1), false).unwrap(); // 1
    store.create(nrt("b", 1), false).unwrap(); // 2
    store.update(nrt("a", 2), &Preconditions::default(), false).unwrap(); // 3
    store.delete("b", &Preconditions::default(), false).unwrap(); // 4
    store.create(nrt("c", 1), false).unwrap(); // 5
    let at = |revision| {
        let snapshot = store.snapshot_at(revision).unwrap();
        snapshot.items.iter().map(|s| (s.name().to_owned(), s.revision)).collect::<Vec<_>>()
    };
    assert_eq!(at(5), [("a".to_owned(), 3), ("c".to_owned(), 5)]);
    assert_eq!(at(3), [("a".to_owned(), 3), ("b".to_owned(), 2)]);
    assert_eq!(at(2), [("a".to_owned(), 1), ("b".to_owned(), 2)]);
    // The history keeps the changes 2..=5: the state at 1 is the oldest it can rebuild;
    // 6 is not ours yet.
    assert_eq!(at(1), [("a".to_owned(), 1)]);
    assert_eq!(store.snapshot_at(0).unwrap_err(), 1);
    assert!(store.snapshot_at(6).is_err());
}

#[test]
fn a_restarted_store_starts_above_any_earlier_revision() {
    // A store starts at the wall clock in microseconds: at or after the instant it is made.
    let micros = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
    let before = micros();
    let restarted = Store::new(10);
    assert!(restarted.visible_revision() >= before);
    // A store of an earlier process (started a second before, then written to) handed out
    // revisions below that, so its clients' resourceVersions are too old to resume from.
    let earlier = Store::starting_at(before - 1_000_000, 10);
    earlier.create(nrt("n", 1), false).unwrap();
    let old_revision = earlier.visible_revision();
    assert!(restarted.visible_revision() > old_revision);
    assert!(restarted.watch(Some(old_revision)).is_err());
}
