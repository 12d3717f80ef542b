//! What `/readyz` of `numaresources controllers` reports.
//!
//! Ready means the process can do its job: the API server answered (discovery went through),
//! and, once this replica leads, every controller has listed what it watches (its cache is
//! synced, so it acts on the cluster as it is, not on an empty view). A standby replica that
//! reached the API server and waits for the Lease is ready too: it is healthy, and a rollout
//! must not stall on it. Liveness (`/healthz`) stays a plain "the process answers".

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use kube::api::DynamicObject;
use kube::runtime::reflector::Store;

/// The controllers whose caches must sync: operator, scheduler, kubeletconfig.
pub const CONTROLLERS: usize = 3;

/// Shared readiness flags; clones share state.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    inner: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    api_reachable: AtomicBool,
    leading: AtomicBool,
    synced: AtomicUsize,
}

impl Readiness {
    /// The API server answered.
    pub fn api_reachable(&self) {
        self.inner.api_reachable.store(true, Ordering::SeqCst);
    }

    /// This replica holds the Lease (or runs without an election) and starts its controllers.
    pub fn leading(&self) {
        self.inner.leading.store(true, Ordering::SeqCst);
    }

    /// One controller listed everything it watches.
    pub fn controller_synced(&self) {
        self.inner.synced.fetch_add(1, Ordering::SeqCst);
    }

    /// `Ok` with a short description when ready, else why not.
    pub fn check(&self) -> Result<&'static str, String> {
        let flags = &self.inner;
        if !flags.api_reachable.load(Ordering::SeqCst) {
            return Err("the Kubernetes API server has not answered yet".into());
        }
        if !flags.leading.load(Ordering::SeqCst) {
            return Ok("standby: waiting for the leader Lease");
        }
        let synced = flags.synced.load(Ordering::SeqCst);
        if synced < CONTROLLERS {
            return Err(format!("leading; {synced} of {CONTROLLERS} controllers have synced their caches"));
        }
        Ok("leading; every controller is synced")
    }
}

/// Marks one controller synced once its main watch has listed everything (the store of
/// [`kube::runtime::Controller::store`]); returns early, unmarked, if the controller stops first.
pub async fn mark_when_synced(store: Store<DynamicObject>, readiness: Readiness) {
    if store.wait_until_ready().await.is_ok() {
        readiness.controller_synced();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_the_api_answers_and_a_leader_has_synced_every_controller() {
        let readiness = Readiness::default();
        assert!(readiness.check().is_err(), "nothing known yet");
        readiness.api_reachable();
        assert_eq!(readiness.check(), Ok("standby: waiting for the leader Lease"));
        readiness.leading();
        readiness.controller_synced();
        readiness.controller_synced();
        assert_eq!(readiness.check(), Err("leading; 2 of 3 controllers have synced their caches".into()));
        readiness.clone().controller_synced();
        assert!(readiness.check().is_ok(), "clones share state");
    }
}
