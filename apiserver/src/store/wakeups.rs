//! Who a change wakes.
//!
//! A watch of every object wakes on every change. A watch whose field selector pins
//! `metadata.name` (an exporter watching its own object) wakes only on changes to that name:
//! with 5,000 such watches, waking them all on every change cost ≈2.5 million wake-ups and
//! selector checks per second at 500 changes/s, half the server's CPU (BENCHMARKS.md).
//!
//! For the names that have watchers, the index keeps the revisions of their events still in the
//! history, so such a watcher reads its own events by bisection instead of scanning every event
//! since it last read. Changes to the store as a whole (a truncation, a reset, a revision jump:
//! [`Wakeups::send_replace`]) wake every watch, and the index then starts over from that
//! revision: a watcher reading from before it scans the history once. A replicated leader's
//! acknowledgements, which let clients see more of the history, are not such changes: they wake
//! the watchers of the names whose events just became visible ([`Wakeups::reveal`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

/// The wake-up channels of the store's watchers.
#[derive(Debug)]
pub struct Wakeups {
    /// Every change, for the watchers of every object (and replication).
    all: watch::Sender<u64>,
    /// The watchers of one name each, by name.
    named: Mutex<Named>,
}

#[derive(Debug, Default)]
struct Named {
    by_name: HashMap<String, NameWatchers>,
    /// How many names the index held after its last sweep of names nobody watches any more.
    swept_at: usize,
}

/// The watchers of one name, and that name's events since the index started following it.
#[derive(Debug)]
struct NameWatchers {
    wake: watch::Sender<u64>,
    /// The index holds every event of the name after this revision that the history still holds.
    since: u64,
    /// The revisions of those events (in publication order; stale ones, after a truncation, are
    /// checked against the history by the reader).
    revisions: VecDeque<u64>,
    /// The newest of the name's events that left the history: a reader from before it missed it.
    dropped_through: u64,
}

/// What the index knows of one name's events after a revision.
#[derive(Debug, PartialEq, Eq)]
pub enum NameEvents {
    /// The index does not reach back that far (or nobody watches the name): scan the history.
    Unknown,
    /// One of them left the history already: the reader fell behind and must relist.
    Lost,
    /// Their revisions, perhaps with stale ones the history no longer holds under this name.
    At(Vec<u64>),
}

/// Below this many names the index is not swept: a sweep costs more than the few entries.
const SWEEP_FLOOR: usize = 64;

impl Wakeups {
    /// Channels whose first value is `start`.
    pub fn new(start: u64) -> Self {
        Self { all: watch::Sender::new(start), named: Mutex::new(Named::default()) }
    }

    /// Tells of every change from now on.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.all.subscribe()
    }

    /// A change to the store as a whole, at `revision`: wakes every watcher, and the index
    /// starts over (what it knew may no longer match the history).
    pub fn send_replace(&self, revision: u64) {
        self.all.send_replace(revision);
        let mut named = self.lock();
        for watchers in named.by_name.values_mut() {
            watchers.since = watchers.since.max(revision);
            watchers.revisions.clear();
            watchers.wake.send_replace(revision);
        }
    }

    /// The event at `revision` changed `name`: wakes the watchers of every object and, when
    /// clients may see it already (`visible`), those of `name`; one that clients may not see yet
    /// is indexed now and wakes its name's watchers when it becomes visible ([`Wakeups::reveal`]).
    /// `oldest` is where the history now starts: older revisions leave the index.
    pub fn publish(&self, revision: u64, name: &str, oldest: u64, visible: bool) {
        self.all.send_replace(revision);
        let mut named = self.lock();
        let Some(watchers) = named.by_name.get_mut(name) else {
            return;
        };
        if watchers.wake.receiver_count() == 0 {
            named.by_name.remove(name);
            return;
        }
        watchers.forget_before(oldest);
        watchers.revisions.push_back(revision);
        if visible {
            watchers.wake.send_replace(revision);
        }
    }

    /// Clients may now see changes up to `revision`, among them changes to `names`: wakes the
    /// watchers of every object and those of these names alone. The index stays as it is (the
    /// events were indexed as they were published): a replicated leader moves what clients see
    /// on every acknowledgement, and waking every watch of one name each then would undo the
    /// index.
    pub fn reveal<'a>(&self, revision: u64, names: impl IntoIterator<Item = &'a str>) {
        self.all.send_replace(revision);
        let named = self.lock();
        if named.by_name.is_empty() {
            return;
        }
        for name in names {
            if let Some(watchers) = named.by_name.get(name) {
                watchers.wake.send_replace(revision);
            }
        }
    }

    /// [`Wakeups::reveal`] for every name watched: what became visible is no longer all in the
    /// history, so which names it changed is not known.
    pub fn reveal_to_all(&self, revision: u64) {
        self.all.send_replace(revision);
        for watchers in self.lock().by_name.values() {
            watchers.wake.send_replace(revision);
        }
    }

    /// Tells of the changes to `name` (and to the store as a whole) from now on. `head` is the
    /// store's last revision: call under the store's lock, so every later event is indexed.
    pub fn subscribe_named(&self, name: &str, head: u64) -> watch::Receiver<u64> {
        let mut named = self.lock();
        if named.by_name.len() >= SWEEP_FLOOR.max(named.swept_at * 2) {
            // Names whose watchers all left, and that saw no change since, go here: the index
            // never grows past twice the names watched.
            named.by_name.retain(|_, watchers| watchers.wake.receiver_count() > 0);
            named.swept_at = named.by_name.len();
        }
        let watchers = named.by_name.entry(name.to_owned()).or_insert_with(|| NameWatchers {
            wake: watch::Sender::new(head),
            since: head,
            revisions: VecDeque::new(),
            dropped_through: 0,
        });
        watchers.wake.subscribe()
    }

    /// What the index knows of the events of `name` after `after`; `oldest` is where the
    /// history starts.
    pub fn events_of(&self, name: &str, after: u64, oldest: u64) -> NameEvents {
        let mut named = self.lock();
        let Some(watchers) = named.by_name.get_mut(name) else {
            return NameEvents::Unknown;
        };
        watchers.forget_before(oldest);
        if after < watchers.since {
            NameEvents::Unknown
        } else if after < watchers.dropped_through {
            NameEvents::Lost
        } else {
            NameEvents::At(watchers.revisions.iter().copied().filter(|&revision| revision > after).collect())
        }
    }

    fn lock(&self) -> MutexGuard<'_, Named> {
        // Every mutation under the lock is a single map or queue operation: a poisoned lock is
        // still consistent.
        self.named.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl NameWatchers {
    /// Drops the revisions the history no longer holds, remembering the newest of them.
    fn forget_before(&mut self, oldest: u64) {
        while let Some(&revision) = self.revisions.front()
            && revision < oldest
        {
            self.dropped_through = self.dropped_through.max(revision);
            self.revisions.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_wakes_the_watchers_of_its_name_alone() {
        let wakeups = Wakeups::new(0);
        let mut every = wakeups.subscribe();
        let mut named: Vec<_> = (0..1_000).map(|i| wakeups.subscribe_named(&format!("n{i}"), 0)).collect();
        wakeups.publish(1, "n7", 0, true);
        assert!(every.has_changed().unwrap());
        let woken: Vec<usize> =
            named.iter_mut().enumerate().filter(|(_, r)| r.has_changed().unwrap()).map(|(i, _)| i).collect();
        assert_eq!(woken, [7], "one name's change wakes its watchers only, however many names are watched");
        assert_eq!(wakeups.events_of("n7", 0, 0), NameEvents::At(vec![1]));
        assert_eq!(wakeups.events_of("n8", 0, 0), NameEvents::At(vec![]));
        every.borrow_and_update();
        // A change to the store as a whole wakes everyone, and the index starts over.
        wakeups.send_replace(5);
        assert!(every.has_changed().unwrap());
        assert!(named.iter().all(|r| r.has_changed().unwrap()));
        assert_eq!(wakeups.events_of("n7", 0, 0), NameEvents::Unknown);
        assert_eq!(wakeups.events_of("n7", 5, 0), NameEvents::At(vec![]));
    }

    #[test]
    fn a_change_clients_may_not_see_yet_wakes_its_name_when_revealed_and_keeps_the_index() {
        let wakeups = Wakeups::new(0);
        let mut every = wakeups.subscribe();
        let mut named: Vec<_> = (0..100).map(|i| wakeups.subscribe_named(&format!("n{i}"), 0)).collect();
        wakeups.publish(1, "n7", 0, false);
        assert!(every.has_changed().unwrap(), "replication reads every change at once");
        assert!(!named[7].has_changed().unwrap(), "nothing to read for its watchers yet");
        every.borrow_and_update();
        wakeups.reveal(1, ["n7"]);
        assert!(every.has_changed().unwrap());
        let woken: Vec<usize> =
            named.iter_mut().enumerate().filter(|(_, r)| r.has_changed().unwrap()).map(|(i, _)| i).collect();
        assert_eq!(woken, [7]);
        // The index did not start over: every name's events are still known from 0.
        assert_eq!(wakeups.events_of("n7", 0, 0), NameEvents::At(vec![1]));
        assert_eq!(wakeups.events_of("n8", 0, 0), NameEvents::At(vec![]));
        wakeups.reveal_to_all(2);
        assert!(named.iter().all(|r| r.has_changed().unwrap()));
        assert_eq!(wakeups.events_of("n8", 0, 0), NameEvents::At(vec![]));
    }

    #[test]
    fn events_that_left_the_history_are_lost_to_readers_from_before_them() {
        let wakeups = Wakeups::new(0);
        let _watching = wakeups.subscribe_named("n", 0);
        wakeups.publish(3, "n", 0, true);
        wakeups.publish(9, "n", 0, true);
        // The history now starts at 5: revision 3 is gone.
        assert_eq!(wakeups.events_of("n", 2, 5), NameEvents::Lost);
        // A reader past it misses nothing, even from before where the history starts.
        assert_eq!(wakeups.events_of("n", 4, 5), NameEvents::At(vec![9]));
    }

    #[test]
    fn names_nobody_watches_leave_the_index() {
        let wakeups = Wakeups::new(0);
        for i in 0..1_000 {
            drop(wakeups.subscribe_named(&format!("n{i}"), 0));
        }
        assert!(wakeups.lock().by_name.len() < 2 * SWEEP_FLOOR);
        let _kept = wakeups.subscribe_named("kept", 0);
        wakeups.publish(1, "n999", 0, true);
        assert_eq!(wakeups.events_of("n999", 0, 0), NameEvents::Unknown);
        assert_eq!(wakeups.events_of("kept", 0, 0), NameEvents::At(vec![]));
    }
}
