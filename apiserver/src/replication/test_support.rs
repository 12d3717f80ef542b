//! What the replication unit tests build their replicas from.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{PeerTls, Replication, Role};
use crate::health::Readiness;
use crate::store::Store;

/// A follower of a leader at a made-up address that has synchronized with it before, holding
/// `store` (no certificate is ever read: the tests do not reach its leader through it).
pub(super) fn synced_follower(store: Arc<Store>, readiness: Arc<Readiness>) -> Replication {
    let tls = PeerTls {
        ca_file: "unused".into(),
        cert_file: "unused".into(),
        key_file: "unused".into(),
        server_name: "unused".into(),
    };
    let replication = Replication::new("me".into(), "https://127.0.0.1:1".into(), tls, store, readiness);
    replication.set_role(Role::Follower { address: "https://127.0.0.1:2".into() });
    replication.following.synced.store(true, Ordering::Release);
    replication
}

/// What the leader's stream carries for its change at `revision`, applied to `follower`.
pub(super) fn replicate(leader: &Store, follower: &Store, revision: u64) {
    let event = leader.events_after(revision - 1, 1).unwrap().remove(0);
    follower.replica().apply_replicated(event.kind, serde_json::from_slice(&event.object.json).unwrap()).unwrap();
}
