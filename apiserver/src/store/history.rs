//! The watch history: every change as an event, bounded by count and by bytes, oldest first;
//! where a watch may start, which events a watcher reads next, and the objects as they were at
//! an earlier revision (rebuilt from the current ones by undoing later events).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::watch;

use super::wakeups::NameEvents;
use super::{Snapshot, State, Store, Stored};

/// How many events the watch history keeps by default.
pub const DEFAULT_HISTORY: usize = 10_000;
/// How many bytes of object versions the watch history may hold by default: with objects of
/// ≈1.5 KB, ≈2,400 changes (each holds the new and the replaced version), which keeps a server
/// with 5,000 such objects within its 64 MiB (BENCHMARKS.md).
pub const DEFAULT_HISTORY_BYTES: usize = 8 * 1024 * 1024;
/// What one history entry costs beside the JSON it holds (the event and the slim version).
const ENTRY_OVERHEAD: usize = std::mem::size_of::<Event>() + std::mem::size_of::<Stored>() + 64;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The watch event type as the API spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers see it.
#[derive(Debug)]
pub struct Event {
    /// What happened.
    pub kind: EventType,
    /// The resourceVersion of the change.
    pub revision: u64,
    /// The object after the change (for a deletion: the last state, at the deletion's revision).
    pub object: Arc<Stored>,
    /// The object before the change, for modifications (selector-filtered watches need it).
    pub previous: Option<Arc<Stored>>,
}

impl Event {
    /// What the history charges for this event against its byte bound: the versions it holds.
    /// A version created by one retained event and replaced by the next is counted by both, so
    /// the bound errs on the safe side.
    pub(super) fn charge(&self) -> usize {
        let version = |stored: &Stored| stored.json.len() + stored.kept_parts_size() + ENTRY_OVERHEAD;
        version(&self.object) + self.previous.as_deref().map_or(0, version)
    }
}

/// Why a watch cannot start where it was asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchRefusal {
    /// The history no longer reaches back that far (or the version is from before a restart);
    /// watches may resume from `oldest` on.
    TooOld {
        /// The oldest revision a watch may resume from.
        oldest: u64,
    },
    /// The version is newer than any this store has handed out.
    TooLarge {
        /// The store's current revision.
        current: u64,
    },
}

/// A point from which a watch starts.
///
/// Watchers read changes from the history ([`Store::events_after`]) rather than from a channel
/// of their own: a watcher that stops reading holds no versions, so what the history holds,
/// which its bounds cover, is all that changes keep alive. One that falls behind the history
/// is told to relist.
#[derive(Debug)]
pub struct WatchStart {
    /// Synthetic `ADDED` events for the current state, when the watch starts with it.
    pub backlog: Vec<Arc<Event>>,
    /// Where the watch stands once the backlog is sent: the changes after this revision follow.
    pub revision: u64,
    /// Tells of every new revision.
    pub changes: watch::Receiver<u64>,
}

impl Store {
    /// Every object as it was at `revision`, sorted by name, rebuilt from the current state and
    /// the watch history (what a continue token needs to page through one consistent list).
    /// `Err(oldest)` when the history no longer reaches back that far, or `revision` is not ours.
    pub fn snapshot_at(&self, revision: u64) -> Result<Snapshot, u64> {
        let state = self.read();
        if revision < state.oldest_resumable || revision > state.revision {
            return Err(state.oldest_resumable);
        }
        let objects = rebuild(&state, revision);
        drop(state);
        let mut items: Vec<Arc<Stored>> = objects.into_values().collect();
        items.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        Ok(Snapshot { items, revision })
    }

    /// Starts a watch after `from` (None: from now). Refused when `from` is older than the
    /// history reaches back (or not one of ours: the client must relist), or newer than the
    /// store's revision.
    pub fn watch(&self, from: Option<u64>) -> Result<WatchStart, WatchRefusal> {
        let state = self.read();
        let visible = self.visible_in(&state);
        let revision = match from {
            None => visible,
            Some(from) if from < state.oldest_resumable => {
                return Err(WatchRefusal::TooOld { oldest: state.oldest_resumable });
            }
            Some(from) if from > visible => return Err(WatchRefusal::TooLarge { current: visible }),
            Some(from) => from,
        };
        Ok(WatchStart { backlog: Vec::new(), revision, changes: self.revisions.subscribe() })
    }

    /// Up to `max` events after revision `after` that clients may see, oldest first. Refused
    /// when the history no longer reaches back that far: the watcher fell behind and must relist.
    pub fn events_after(&self, after: u64, max: usize) -> Result<Vec<Arc<Event>>, WatchRefusal> {
        let state = self.read();
        let visible = self.visible_in(&state);
        Self::events_in(&state, after, max, visible)
    }

    /// Up to `max` events of the object named `name` after revision `after` that clients may
    /// see, oldest first, and the revision read through: the watcher has seen every event of
    /// that name up to it. Refused when one of them left the history: the watcher fell behind.
    /// A watcher that has read everything of its name is not behind when other objects' changes
    /// push the history past it.
    pub fn named_events_after(
        &self,
        name: &str,
        after: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), WatchRefusal> {
        let state = self.read();
        let visible = self.visible_in(&state);
        let oldest = state.oldest_resumable;
        let revisions = match self.revisions.events_of(name, after, oldest) {
            NameEvents::At(revisions) => revisions,
            NameEvents::Lost => return Err(WatchRefusal::TooOld { oldest }),
            NameEvents::Unknown if after < oldest => return Err(WatchRefusal::TooOld { oldest }),
            NameEvents::Unknown => return Ok(scan_named(&state, name, after, max, visible)),
        };
        let mut events: Vec<Arc<Event>> = revisions
            .into_iter()
            .filter(|&revision| revision <= visible)
            .filter_map(|revision| event_at(&state, revision))
            .filter(|event| event.object.name() == name)
            .cloned()
            .collect();
        events.sort_unstable_by_key(|event| event.revision);
        events.dedup_by_key(|event| event.revision);
        if events.len() > max {
            events.truncate(max);
            let through = events.last().map_or(after, |event| event.revision);
            return Ok((events, through));
        }
        Ok((events, visible.max(after)))
    }

    pub(super) fn events_in(
        state: &State,
        after: u64,
        max: usize,
        up_to: u64,
    ) -> Result<Vec<Arc<Event>>, WatchRefusal> {
        if after < state.oldest_resumable {
            return Err(WatchRefusal::TooOld { oldest: state.oldest_resumable });
        }
        let first = history_index_after(&state.history, after);
        Ok(state.history.range(first..).take_while(|e| e.revision <= up_to).take(max).cloned().collect())
    }

    /// Starts a watch with every current object as a synthetic `ADDED` event, then every change;
    /// the backlog holds only the object named `name` when one is given (a watch whose selector
    /// pins the name: it would drop every other one).
    pub fn watch_with_snapshot_of(&self, name: Option<&str>) -> WatchStart {
        let state = self.read();
        let revision = self.visible_in(&state);
        let visible_objects;
        let all = if revision < state.revision {
            visible_objects = rebuild(&state, revision);
            &visible_objects
        } else {
            &state.objects
        };
        let mut objects: Vec<&Arc<Stored>> = match name {
            Some(name) => all.get(name).into_iter().collect(),
            None => all.values().collect(),
        };
        objects.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        let backlog = objects
            .into_iter()
            .map(|object| {
                Arc::new(Event {
                    kind: EventType::Added,
                    revision: object.revision,
                    object: object.clone(),
                    previous: None,
                })
            })
            .collect();
        WatchStart { backlog, revision, changes: self.revisions.subscribe() }
    }
}

/// The objects as they were at `revision` (not older than the history reaches): the current
/// ones with the later events undone, newest first, so each name ends up as it was before its
/// earliest later event (absent if that event created it).
pub(super) fn rebuild(state: &State, revision: u64) -> HashMap<String, Arc<Stored>> {
    let mut objects = state.objects.clone();
    let first_later = history_index_after(&state.history, revision);
    for event in state.history.range(first_later..).rev() {
        let name = event.object.name().to_owned();
        match &event.previous {
            Some(previous) => objects.insert(name, previous.clone()),
            None => objects.remove(&name),
        };
    }
    objects
}

/// The history's event at exactly `revision`.
fn event_at(state: &State, revision: u64) -> Option<&Arc<Event>> {
    let at = history_index(&state.history, revision);
    state.history.get(at).filter(|event| event.revision == revision)
}

/// [`Store::named_events_after`] without the index: every visible event after `after` read in
/// turn (a watcher that resumes from before the index followed its name).
fn scan_named(state: &State, name: &str, after: u64, max: usize, visible: u64) -> (Vec<Arc<Event>>, u64) {
    let first = history_index_after(&state.history, after);
    let mut events = Vec::new();
    for event in state.history.range(first..).take_while(|event| event.revision <= visible) {
        if event.object.name() == name {
            events.push(event.clone());
            if events.len() == max {
                return (events, event.revision);
            }
        }
    }
    (events, visible.max(after))
}

/// The index of the first event in `history` at `revision` or later (its length when there is
/// none). Revisions in the history are increasing and nearly always consecutive (only a bookmark
/// or a new leader's jump skips some), so the offset from the oldest one finds it at once; a
/// binary search, which reads an event behind a pointer at every step (a cache miss each: ≈3% of
/// a write's CPU, run at every write and every watcher's wake-up), is only the fallback.
pub(super) fn history_index(history: &VecDeque<Arc<Event>>, revision: u64) -> usize {
    let (Some(oldest), Some(newest)) = (history.front(), history.back()) else { return 0 };
    if revision <= oldest.revision {
        return 0;
    }
    if revision > newest.revision {
        return history.len();
    }
    let guess = usize::try_from(revision - oldest.revision).unwrap_or(usize::MAX);
    if history.get(guess).is_some_and(|event| event.revision == revision) {
        return guess;
    }
    history.partition_point(|event| event.revision < revision)
}

/// The index of the first event in `history` after `revision` (its length when there is none).
pub(super) fn history_index_after(history: &VecDeque<Arc<Event>>, revision: u64) -> usize {
    revision.checked_add(1).map_or(history.len(), |next| history_index(history, next))
}

/// Swaps the history's reference to `current`, the version a write is replacing, for a slim
/// copy, and returns that copy for the new event's `previous`: once the map lets go of `current`,
/// nothing holds its typed object.
pub(super) fn retire(state: &mut State, current: &Arc<Stored>) -> Arc<Stored> {
    let slim = Arc::new(current.replaced(false));
    let at = history_index(&state.history, current.revision);
    if let Some(event) = state.history.get_mut(at)
        && Arc::ptr_eq(&event.object, current)
    {
        // The slim copy may keep parts the current version had rendered: charge them.
        state.history_bytes += slim.kept_parts_size();
        *event = Arc::new(Event {
            kind: event.kind,
            revision: event.revision,
            object: slim.clone(),
            previous: event.previous.clone(),
        });
    }
    slim
}
