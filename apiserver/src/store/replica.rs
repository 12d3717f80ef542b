//! What replication does to a store, and nothing else reaches: the head revision and the
//! events past the visible one, applying the leader's changes as they were made, dropping a
//! follower's uncommitted changes, jumping ahead, starting anew from a snapshot, and holding
//! back what clients see. REST and watch code reach the store through [`Store`]'s own methods,
//! which show clients the visible revision only; replication reaches these through
//! [`Store::replica`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use numaresources_api::nrt::NodeResourceTopology;

use super::history::{history_index_after, rebuild};
use super::semantics::{now, unix_seconds};
use super::stored::stored;
use super::{Event, EventType, Store, StoreError, Stored, WatchRefusal};

/// What a leader streams next to a follower.
#[derive(Debug)]
pub struct ReplicationBatch {
    /// The events after the follower's position, oldest first.
    pub events: Vec<Arc<Event>>,
    /// The head revision when they were read.
    pub head: u64,
    /// The revision up to which clients may see changes (what the followers hold).
    pub visible: u64,
}

/// A replicated change that does not follow from a follower's state: it must resynchronize.
#[derive(Debug, thiserror::Error)]
#[error("replication: {0}")]
pub struct ReplicaError(String);

/// The replication view of a store ([`Store::replica`]).
#[derive(Debug, Clone, Copy)]
pub struct Replica<'a> {
    store: &'a Store,
}

impl Store {
    /// The view replication works through: the head revision and the changes clients may not
    /// see yet.
    pub fn replica(&self) -> Replica<'_> {
        Replica { store: self }
    }
}

impl Replica<'_> {
    /// Limits what clients see to the changes up to `revision` (None: every change), and wakes
    /// the watchers that waited for it: those of every object, and the watchers of one name
    /// whose events just became visible, not every watch of one name (a replicated leader calls
    /// this on every acknowledgement).
    pub fn set_visible(&self, revision: Option<u64>) {
        // Under the state lock, as writes publish: an event published while it was not visible
        // (it woke no watcher of its name) is after `previous` here, so this wakes them.
        let state = self.store.read();
        let next = revision.unwrap_or(u64::MAX);
        let previous = self.store.visible.swap(next, Ordering::AcqRel);
        if previous == next {
            return;
        }
        let (from, to) = (previous.min(state.revision), next.min(state.revision));
        if from < state.oldest_resumable {
            // Some of what became visible left the history unseen: every watch of one name
            // looks (those that missed an event of theirs relist).
            self.store.revisions.reveal_to_all(state.revision);
            return;
        }
        let first = history_index_after(&state.history, from);
        let revealed = state.history.range(first..).take_while(|e| e.revision <= to);
        self.store.revisions.reveal(state.revision, revealed.map(|event| event.object.name()));
    }

    /// The last revision handed out, visible to clients or not (replication's own view).
    pub fn head_revision(&self) -> u64 {
        self.store.read().revision
    }

    /// Like [`Store::events_after`], visible or not (what a leader streams to its followers),
    /// with the head revision and the visible one read under the same lock: when fewer than
    /// `max` events come back, nothing happened between the last of them and that head.
    pub fn replication_events_after(&self, after: u64, max: usize) -> Result<ReplicationBatch, WatchRefusal> {
        let state = self.store.read();
        let events = Store::events_in(&state, after, max, u64::MAX)?;
        Ok(ReplicationBatch { events, head: state.revision, visible: self.store.visible_in(&state) })
    }

    /// Every object at the visible (committed) revision, and that revision: where a follower
    /// that synchronizes from nothing starts (the stream carries the events after it, committed
    /// or not).
    pub fn replication_snapshot(&self) -> (Vec<Arc<Stored>>, u64) {
        let state = self.store.read();
        let visible = self.store.visible_in(&state);
        let objects = if visible < state.revision {
            rebuild(&state, visible).into_values().collect()
        } else {
            state.objects.values().cloned().collect()
        };
        (objects, visible)
    }

    /// Drops every change after `revision` (a follower's changes that its new leader never
    /// committed; no client saw them, since clients see committed changes only), so the store
    /// is as it was at `revision`. False when the history does not reach back that far.
    pub fn truncate_to(&self, revision: u64) -> bool {
        let mut state = self.store.write();
        if revision < state.oldest_resumable || revision > state.revision {
            return revision == state.revision;
        }
        state.objects = rebuild(&state, revision);
        let keep = history_index_after(&state.history, revision);
        for dropped in state.history.drain(keep..).collect::<Vec<_>>() {
            state.history_bytes = state.history_bytes.saturating_sub(dropped.charge());
        }
        state.revision = revision;
        self.store.revisions.send_replace(revision);
        true
    }

    /// Applies one change the leader made, at the leader's revision (`object`'s
    /// resourceVersion), exactly as the leader stored it: followers keep the same objects, the
    /// same resourceVersions and the same watch history as the leader. A change that does not
    /// follow from this store's state (out of order, or about an object it does not hold) is
    /// refused: the follower must resynchronize. Returns the revision applied.
    pub fn apply_replicated(&self, kind: EventType, object: NodeResourceTopology) -> Result<u64, ReplicaError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let revision = object
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok())
            .ok_or_else(|| ReplicaError(format!("{name}: the change carries no numeric resourceVersion")))?;
        let mut state = self.store.write();
        if revision <= state.revision {
            return Err(ReplicaError(format!(
                "{name}: revision {revision} is not after this replica's revision {}",
                state.revision
            )));
        }
        let current = state.objects.get(&name).cloned();
        let last_report = Arc::new(AtomicU64::new(unix_seconds(now())));
        let stored = Arc::new(stored(object, revision, last_report).map_err(|e| ReplicaError(e.to_string()))?);
        match (kind, current) {
            (EventType::Added, None) => {
                state.revision = revision;
                state.objects.insert(name, stored.clone());
                self.store.publish(&mut state, EventType::Added, &stored, None);
            }
            (EventType::Modified, Some(current)) => self.store.commit(&mut state, &name, &current, &stored, false),
            (EventType::Deleted, Some(current)) => self.store.commit(&mut state, &name, &current, &stored, true),
            (kind, current) => {
                return Err(ReplicaError(format!(
                    "{name}: {} of an object this replica {}",
                    kind.as_str(),
                    if current.is_some() { "holds already" } else { "does not hold" }
                )));
            }
        }
        Ok(revision)
    }

    /// Moves the revision forward without a change: a leader's bookmark on a follower, or a new
    /// leader's jump past every revision any replica may have handed out.
    pub fn advance_to(&self, revision: u64) {
        let mut state = self.store.write();
        if revision > state.revision {
            state.revision = revision;
            self.store.revisions.send_replace(revision);
        }
    }

    /// Replaces every object with `items`, as the leader holds them at `revision`. The history
    /// starts anew there: a watch from before gets `410 Expired` and relists.
    pub fn reset(&self, items: Vec<NodeResourceTopology>, revision: u64) -> Result<(), StoreError> {
        let report = unix_seconds(now());
        let mut objects = HashMap::with_capacity(items.len());
        for object in items {
            let name = object.metadata.name.clone().unwrap_or_default();
            let object_revision =
                object.metadata.resource_version.as_deref().and_then(|rv| rv.parse().ok()).unwrap_or(revision);
            objects.insert(name, Arc::new(stored(object, object_revision, Arc::new(AtomicU64::new(report)))?));
        }
        let mut state = self.store.write();
        state.objects = objects;
        state.history.clear();
        state.history_bytes = 0;
        state.revision = revision;
        state.oldest_resumable = revision;
        self.store.revisions.send_replace(revision);
        Ok(())
    }

    /// Every object's name and resourceVersion, and the revision they reflect, committed or not
    /// (the replication tests compare stores by it).
    #[cfg(test)]
    pub fn revisions_by_name(&self) -> (HashMap<String, u64>, u64) {
        let state = self.store.read();
        (state.objects.iter().map(|(name, stored)| (name.clone(), stored.revision)).collect(), state.revision)
    }
}
