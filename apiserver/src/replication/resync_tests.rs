//! Where a follower resumes the leader's stream after a reconnect: it keeps everything until the
//! leader has answered, then drops only what the leader lacks.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};

use super::Replication;
use super::follower::{RESYNC_PROBES, last_agreeing};
use super::test_support::{replicate, synced_follower};
use crate::health::Readiness;
use crate::status::ApiError;
use crate::store::Store;
use crate::store::tests::nrt;

fn follower(store: Arc<Store>) -> Replication {
    synced_follower(store, Arc::new(Readiness::default()))
}

/// What the store holds, committed or not, by name.
fn names_and_revisions(store: &Store) -> Vec<(String, u64)> {
    let mut held: Vec<(String, u64)> = store.replica().revisions_by_name().0.into_iter().collect();
    held.sort();
    held
}

#[derive(serde::Deserialize)]
struct ExactQuery {
    #[serde(rename = "resourceVersion")]
    resource_version: u64,
}

/// The leader's exact LIST, as its collection answers one: the state at that revision, 504 for
/// a revision clients may not see yet, 410 for one the history no longer reaches.
async fn exact_list(State(leader): State<Arc<Store>>, Query(query): Query<ExactQuery>) -> Response {
    let visible = leader.visible_revision();
    if query.resource_version > visible {
        return ApiError::too_large_resource_version(query.resource_version, visible).into_response();
    }
    match leader.snapshot_at(query.resource_version) {
        Ok(snapshot) => {
            let items: Vec<serde_json::Value> =
                snapshot.items.iter().map(|s| serde_json::from_slice(&s.json).unwrap()).collect();
            axum::Json(serde_json::json!({ "items": items })).into_response()
        }
        Err(oldest) => ApiError::expired(format!("too old resource version ({oldest})")).into_response(),
    }
}

/// A client of a leader serving `leader`'s exact LISTs on a loopback port.
async fn leader_client(leader: Arc<Store>) -> kube::Client {
    let path = format!(
        "/apis/{}/{}/{}",
        numaresources_api::nrt::GROUP,
        numaresources_api::nrt::VERSION,
        numaresources_api::nrt::PLURAL
    );
    let router = axum::Router::new().route(&path, axum::routing::get(exact_list)).with_state(leader);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    kube::Client::try_from(kube::Config::new(format!("http://{address}").parse().unwrap())).unwrap()
}

/// A leader and a follower that both applied a (101) and b (102); the follower heard only that
/// 101 is committed (the leader acknowledged b after its last word to this follower).
fn leader_and_follower() -> (Arc<Store>, Arc<Store>) {
    let leader = Arc::new(Store::starting_at(100, 1000));
    let follower = Arc::new(Store::starting_at(100, 1000));
    leader.create(nrt("a", 1), false).unwrap();
    leader.create(nrt("b", 1), false).unwrap();
    replicate(&leader, &follower, 101);
    replicate(&leader, &follower, 102);
    follower.replica().set_visible(Some(101));
    (leader, follower)
}

#[tokio::test]
async fn a_follower_whose_leader_is_gone_keeps_what_it_does_not_know_is_committed() {
    let (_leader, store) = leader_and_follower();
    let replication = follower(store.clone());
    // Nothing listens there: the leader was killed.
    let gone = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
    assert_eq!(replication.resumable(&gone).await, None);
    assert_eq!(store.replica().head_revision(), 102, "b may be an acknowledged write, and this replica may lead next");
    assert_eq!(names_and_revisions(&store), [("a".to_owned(), 101), ("b".to_owned(), 102)]);
}

#[tokio::test]
async fn a_follower_resumes_from_its_head_when_the_leader_holds_all_of_it() {
    let (leader, store) = leader_and_follower();
    let replication = follower(store.clone());
    assert_eq!(replication.resumable(&leader_client(leader).await).await, Some(102));
    assert_eq!(names_and_revisions(&store), [("a".to_owned(), 101), ("b".to_owned(), 102)]);
}

#[tokio::test]
async fn a_follower_drops_only_the_changes_a_new_leader_lacks() {
    let (old_leader, store) = leader_and_follower();
    // The old leader wrote c (103) and d (104) and died before acknowledging them; this
    // follower got both. The new leader got neither, took over past every revision handed out
    // and wrote e.
    old_leader.create(nrt("c", 1), false).unwrap();
    old_leader.update(nrt("a", 7), &crate::store::Preconditions::default(), false).unwrap();
    replicate(&old_leader, &store, 103);
    replicate(&old_leader, &store, 104);
    let new_leader = Arc::new(Store::starting_at(100, 1000));
    replicate(&old_leader, &new_leader, 101);
    replicate(&old_leader, &new_leader, 102);
    new_leader.replica().advance_to(1_000_000);
    new_leader.create(nrt("e", 1), false).unwrap();

    let replication = follower(store.clone());
    assert_eq!(replication.resumable(&leader_client(new_leader).await).await, Some(102));
    assert_eq!(store.replica().head_revision(), 102);
    assert_eq!(names_and_revisions(&store), [("a".to_owned(), 101), ("b".to_owned(), 102)]);
}

#[tokio::test]
async fn the_last_agreeing_revision_is_found_by_binary_search_within_the_probe_bound() {
    let candidates: Vec<u64> = (100..164).collect();
    for last in [None, Some(100), Some(131), Some(163)] {
        let mut probes = 0;
        let found = last_agreeing(&candidates, |revision| {
            probes += 1;
            std::future::ready(Some(last.is_some_and(|last| revision <= last)))
        })
        .await;
        assert_eq!(found, last);
        assert!(probes <= 7, "{probes} probes for 64 candidates");
    }
    // A leader that stops answering ends the search: the follower takes a snapshot.
    assert_eq!(last_agreeing(&candidates, |_| std::future::ready(None)).await, None);
    let too_many: Vec<u64> = (0..1 << RESYNC_PROBES).collect();
    assert_eq!(last_agreeing(&too_many, |_| std::future::ready(Some(true))).await, None);
}
