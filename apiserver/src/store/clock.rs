//! The store's two revisions: the head (the last one handed out) and the visible one (what
//! clients may see: a replicated leader holds back what its followers do not have yet), and
//! waiting for a revision to become visible. Watchers are woken through [`super::wakeups`].

use std::sync::atomic::Ordering;

use tokio::sync::watch;

use super::{State, Store};

impl Store {
    pub(super) fn visible_in(&self, state: &State) -> u64 {
        state.revision.min(self.visible.load(Ordering::Acquire))
    }

    /// The last revision clients may see (the last one handed out, unless a replicated leader
    /// holds changes back until its followers have them).
    pub fn visible_revision(&self) -> u64 {
        let state = self.read();
        self.visible_in(&state)
    }

    /// Waits until clients may see `revision`, for at most `wait`. True when they may.
    pub async fn wait_visible(&self, revision: u64, wait: std::time::Duration) -> bool {
        let mut changes = self.revisions.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Marked seen before the check, so a change after it ends the wait below; the
            // borrow ends with the statement, before `visible_revision()` takes the state lock.
            changes.borrow_and_update();
            if self.visible_revision() >= revision {
                return true;
            }
            if !matches!(tokio::time::timeout_at(deadline, changes.changed()).await, Ok(Ok(()))) {
                return self.visible_revision() >= revision;
            }
        }
    }

    /// Tells of the changes to the object named `name` (and of changes to the store as a whole),
    /// not of others: what a watch whose selector pins the name waits on.
    pub fn subscribe_named(&self, name: &str) -> watch::Receiver<u64> {
        // Under the lock, so every event after the index's start is indexed.
        let state = self.read();
        self.revisions.subscribe_named(name, state.revision)
    }
}
