//! The API server's HTTP contract, exercised in process through the router (no sockets): what
//! kubectl, client-go informers, the scheduler plugin and the exporters send, and what they must
//! get back.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, BodyDataStream};
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use http::{Method, Request, StatusCode};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_apiserver::{AppState, Limits, Store, router};
use serde_json::{Value, json};
use support::in_process::{Answer, call, events, get};
use support::{BASE, nrt};
use tower::ServiceExt;

const TABLE: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

fn app() -> (Router, Arc<AppState>) {
    app_with_history(100)
}

/// A server whose watch history keeps `history` changes.
fn app_with_history(history: usize) -> (Router, Arc<AppState>) {
    let mut state = AppState::new(Arc::new(Store::starting_at(1000, history)), "0.1.0", "test");
    state.limits =
        Limits { max_body_bytes: 64 * 1024, bookmark_interval: Duration::from_millis(200), ..Limits::default() };
    let state = Arc::new(state);
    (router(state.clone()), state)
}

async fn create(app: &Router, object: Value) -> Answer {
    call(app, Method::POST, BASE, &[("content-type", "application/json")], Some(object)).await
}

#[tokio::test]
async fn discovery_answers_the_aggregator_and_kubectl() {
    let (app, _) = app();
    let probe = get(&app, "/apis/topology.node.k8s.io/v1alpha2").await;
    assert_eq!(probe.status, StatusCode::OK);
    assert_eq!(probe.body["kind"], "APIResourceList");
    assert_eq!(probe.body["resources"][0]["shortNames"], json!(["node-res-topo", "nrt"]));

    let legacy = call(&app, Method::GET, "/apis", &[("accept", "application/json")], None).await;
    assert_eq!(legacy.body["kind"], "APIGroupList");
    assert_eq!(legacy.body["groups"][0]["preferredVersion"]["version"], "v1alpha2");

    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let aggregated = call(&app, Method::GET, "/apis", &[("accept", accept)], None).await;
    assert_eq!(aggregated.status, StatusCode::OK);
    assert_eq!(
        aggregated.headers["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(aggregated.body["apiVersion"], "apidiscovery.k8s.io/v2");
    let etag = aggregated.headers["etag"].to_str().unwrap().to_owned();
    let again = call(&app, Method::GET, "/apis", &[("accept", accept), ("if-none-match", &etag)], None).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);

    let version = get(&app, "/version").await;
    assert_eq!(version.body["major"], "1");
}

#[tokio::test]
async fn objects_can_be_created_read_listed_and_tabled() {
    let (app, _) = app();
    let created = create(&app, nrt("worker-0", 22)).await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.body["metadata"]["resourceVersion"], "1001");
    assert_eq!(created.body["zones"][0]["resources"][0]["capacity"], "32", "quantities are written as strings");
    assert!(created.body["metadata"]["uid"].is_string());

    let duplicate = create(&app, nrt("worker-0", 22)).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(duplicate.body["reason"], "AlreadyExists");

    let got = get(&app, &format!("{BASE}/worker-0")).await;
    assert_eq!(got.body, created.body);
    let missing = get(&app, &format!("{BASE}/worker-9")).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.body["kind"], "Status");
    assert_eq!(missing.body["message"], "noderesourcetopologies.topology.node.k8s.io \"worker-9\" not found");

    create(&app, nrt("worker-1", 30)).await;
    let list = get(&app, &format!("{BASE}?limit=500")).await;
    assert_eq!(list.body["kind"], "NodeResourceTopologyList");
    assert_eq!(list.body["metadata"]["resourceVersion"], "1002");
    assert_eq!(list.body["items"].as_array().unwrap().len(), 2);
    assert!(list.body.get("continue").is_none() && list.body["metadata"].get("continue").is_none());

    let table = call(&app, Method::GET, BASE, &[("accept", TABLE)], None).await;
    assert_eq!(table.body["kind"], "Table");
    assert_eq!(table.body["columnDefinitions"][0]["name"], "Name");
    let row = &table.body["rows"][0];
    assert_eq!(row["cells"][0], "worker-0");
    assert_eq!(row["cells"][2], "single-numa-node");
    assert_eq!(row["cells"][3], "22/30");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");

    let metadata = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    let partial = call(&app, Method::GET, BASE, &[("accept", metadata)], None).await;
    assert_eq!(partial.body["kind"], "PartialObjectMetadataList");
    assert!(partial.body["items"][0].get("zones").is_none());

    let protobuf_first =
        call(&app, Method::GET, BASE, &[("accept", "application/vnd.kubernetes.protobuf, */*")], None).await;
    assert_eq!(protobuf_first.status, StatusCode::OK);
    let impossible = call(&app, Method::GET, BASE, &[("accept", "application/vnd.kubernetes.protobuf")], None).await;
    assert_eq!(impossible.status, StatusCode::NOT_ACCEPTABLE);
}

#[tokio::test]
async fn selectors_filter_lists() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await;
    let mut other = nrt("worker-1", 1);
    other["metadata"]["labels"] = json!({"pool": "infra"});
    create(&app, other).await;
    let names = |answer: Answer| -> Vec<String> {
        answer.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(get(&app, &format!("{BASE}?labelSelector=pool%3Dinfra")).await), ["worker-1"]);
    assert_eq!(names(get(&app, &format!("{BASE}?labelSelector=pool%20notin%20(infra)")).await), ["worker-0"]);
    assert_eq!(names(get(&app, &format!("{BASE}?fieldSelector=metadata.name%3Dworker-0")).await), ["worker-0"]);
    let bad = get(&app, &format!("{BASE}?fieldSelector=spec.x%3D1")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn updates_and_patches_keep_optimistic_concurrency() {
    let (app, _) = app();
    let created = create(&app, nrt("worker-0", 22)).await.body;

    // A stale resourceVersion is a conflict.
    let mut stale = nrt("worker-0", 20);
    stale["metadata"]["resourceVersion"] = json!("1");
    let answer = call(&app, Method::PUT, &format!("{BASE}/worker-0"), &[], Some(stale)).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.body["reason"], "Conflict");

    // The current one works, and an identical write changes nothing.
    let mut fresh = nrt("worker-0", 20);
    fresh["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let updated = call(&app, Method::PUT, &format!("{BASE}/worker-0"), &[], Some(fresh.clone())).await;
    assert_eq!(updated.status, StatusCode::OK);
    assert_eq!(updated.body["metadata"]["resourceVersion"], "1002");
    assert_eq!(updated.body["metadata"]["uid"], created["metadata"]["uid"]);
    fresh["metadata"]["resourceVersion"] = json!("1002");
    let same = call(&app, Method::PUT, &format!("{BASE}/worker-0"), &[], Some(fresh)).await;
    assert_eq!(same.body["metadata"]["resourceVersion"], "1002", "a no-op write keeps the resourceVersion");

    // Merge patch, as the exporter sends it.
    let patch = json!({"zones": [{"name": "node-0", "type": "Node",
        "resources": [{"name": "cpu", "capacity": "32", "allocatable": "30", "available": "18"}]}]});
    let merge = [("content-type", "application/merge-patch+json")];
    let patched = call(&app, Method::PATCH, &format!("{BASE}/worker-0"), &merge, Some(patch)).await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.body);
    assert_eq!(patched.body["zones"][0]["resources"][0]["available"], "18");
    assert_eq!(patched.body["metadata"]["labels"]["pool"], "cnf", "labels survive a merge patch");

    // JSON patch.
    let ops = json!([{"op": "replace", "path": "/attributes/0/value", "value": "restricted"}]);
    let json_patch = [("content-type", "application/json-patch+json")];
    let patched = call(&app, Method::PATCH, &format!("{BASE}/worker-0"), &json_patch, Some(ops)).await;
    assert_eq!(patched.body["attributes"][0]["value"], "restricted");
    let bad_ops = json!([{"op": "replace", "path": "/nope/0", "value": 1}]);
    let failed = call(&app, Method::PATCH, &format!("{BASE}/worker-0"), &json_patch, Some(bad_ops)).await;
    assert_eq!(failed.status, StatusCode::UNPROCESSABLE_ENTITY);

    // Strategic merge and server-side apply are refused clearly.
    for media in ["application/strategic-merge-patch+json", "application/apply-patch+yaml"] {
        let refused =
            call(&app, Method::PATCH, &format!("{BASE}/worker-0"), &[("content-type", media)], Some(json!({}))).await;
        assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{media}");
        assert_eq!(refused.body["reason"], "UnsupportedMediaType");
    }

    let missing = call(&app, Method::PATCH, &format!("{BASE}/worker-9"), &merge, Some(json!({}))).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_input_gets_a_status_never_a_crash() {
    let (app, _) = app();
    let garbage = Request::post(BASE).header("content-type", "application/json").body(Body::from("{not json")).unwrap();
    let response = app.clone().oneshot(garbage).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    let wrong_kind = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}});
    assert_eq!(create(&app, wrong_kind).await.status, StatusCode::BAD_REQUEST);

    let mut invalid = nrt("worker-0", 1);
    invalid["zones"][0]["resources"][0]["available"] = json!("a lot");
    let answer = create(&app, invalid).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer.body["reason"], "Invalid");

    let huge = json!({"metadata": {"name": "x"}, "zones": [], "pad": "x".repeat(100 * 1024)});
    let answer = create(&app, huge).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.body["reason"], "RequestEntityTooLarge");

    let dry = call(&app, Method::POST, &format!("{BASE}?dryRun=All"), &[], Some(nrt("worker-5", 1))).await;
    assert_eq!(dry.status, StatusCode::CREATED);
    assert_eq!(get(&app, &format!("{BASE}/worker-5")).await.status, StatusCode::NOT_FOUND);

    let nowhere = get(&app, "/apis/topology.node.k8s.io/v1alpha2/namespaces/x/noderesourcetopologies").await;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND);
    assert_eq!(nowhere.body["kind"], "Status");
    let not_allowed = call(&app, Method::PUT, BASE, &[], Some(json!({}))).await;
    assert_eq!(not_allowed.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn deletes_honour_preconditions_and_collections() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await;
    create(&app, nrt("worker-1", 1)).await;
    let wrong_uid = json!({"preconditions": {"uid": "not-it"}});
    let refused = call(&app, Method::DELETE, &format!("{BASE}/worker-0"), &[], Some(wrong_uid)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    let deleted = call(&app, Method::DELETE, &format!("{BASE}/worker-0"), &[], None).await;
    assert_eq!(deleted.status, StatusCode::OK);
    assert_eq!(deleted.body["metadata"]["name"], "worker-0");
    assert_eq!(call(&app, Method::DELETE, &format!("{BASE}/worker-0"), &[], None).await.status, StatusCode::NOT_FOUND);
    let collection = call(&app, Method::DELETE, &format!("{BASE}?labelSelector=pool%3Dcnf"), &[], None).await;
    assert_eq!(collection.body["items"].as_array().unwrap().len(), 1);
    let list = get(&app, BASE).await;
    assert!(list.body["items"].as_array().unwrap().is_empty());
}

/// Reads watch events from a streaming response until `count` arrived (bounded wait).
async fn watch(app: &Router, query: &str, accept: &str) -> BodyDataStream {
    let request =
        Request::get(format!("{BASE}?watch=true&{query}")).header("accept", accept).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body().into_data_stream()
}

#[tokio::test]
async fn watches_replay_state_then_stream_changes() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await;
    let mut body = watch(&app, "", "application/json").await;
    create(&app, nrt("worker-1", 1)).await;
    let merge = [("content-type", "application/merge-patch+json")];
    call(&app, Method::PATCH, &format!("{BASE}/worker-0"), &merge, Some(json!({"metadata": {"labels": {"x": "y"}}})))
        .await;
    call(&app, Method::DELETE, &format!("{BASE}/worker-1"), &[], None).await;
    let seen = events(&mut body, 4).await;
    let summary: Vec<(String, String)> = seen
        .iter()
        .map(|e| (e["type"].as_str().unwrap().to_owned(), e["object"]["metadata"]["name"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        summary,
        [
            ("ADDED".into(), "worker-0".into()),
            ("ADDED".into(), "worker-1".into()),
            ("MODIFIED".into(), "worker-0".into()),
            ("DELETED".into(), "worker-1".into()),
        ]
    );
}

fn names(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect()
}

fn continue_query(list: &Value) -> String {
    let token = list["metadata"]["continue"].as_str().expect("a continue token");
    format!("continue={token}")
}

#[tokio::test]
async fn lists_page_through_one_consistent_snapshot() {
    let (app, _) = app();
    for i in 0..5 {
        create(&app, nrt(&format!("worker-{i}"), 10)).await; // 1001..=1005
    }
    let first = get(&app, &format!("{BASE}?limit=2")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(names(&first.body), ["worker-0", "worker-1"]);
    assert_eq!(first.body["metadata"]["resourceVersion"], "1005");
    assert_eq!(first.body["metadata"]["remainingItemCount"], 3);

    // Changes between pages do not show: the pages come from the first page's snapshot.
    call(&app, Method::DELETE, &format!("{BASE}/worker-2"), &[], None).await;
    let patch = [("content-type", "application/merge-patch+json")];
    let patched = call(
        &app,
        Method::PATCH,
        &format!("{BASE}/worker-3"),
        &patch,
        Some(json!({"metadata": {"labels": {"pool": "gpu"}}})),
    )
    .await;
    assert_eq!(patched.status, StatusCode::OK);
    create(&app, nrt("worker-20", 10)).await;

    let second = get(&app, &format!("{BASE}?limit=2&{}", continue_query(&first.body))).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    assert_eq!(names(&second.body), ["worker-2", "worker-3"]);
    assert_eq!(second.body["items"][1]["metadata"]["labels"]["pool"], "cnf", "worker-3 as it was in the snapshot");
    assert_eq!(second.body["metadata"]["resourceVersion"], "1005");
    assert_eq!(second.body["metadata"]["remainingItemCount"], 1);
    let last = get(&app, &format!("{BASE}?limit=2&{}", continue_query(&second.body))).await;
    assert_eq!(names(&last.body), ["worker-4"]);
    assert!(last.body["metadata"].get("continue").is_none());
    assert!(last.body["metadata"].get("remainingItemCount").is_none());

    // Selectors page too, without a remaining count (kube-apiserver cannot know it either).
    let selected = get(&app, &format!("{BASE}?limit=1&labelSelector=pool%3Dcnf")).await;
    assert_eq!(names(&selected.body), ["worker-0"]);
    assert!(selected.body["metadata"]["continue"].is_string());
    assert!(selected.body["metadata"].get("remainingItemCount").is_none());

    // kubectl --chunk-size pages through Tables.
    let table = call(&app, Method::GET, &format!("{BASE}?limit=1"), &[("accept", TABLE)], None).await;
    assert_eq!(table.body["rows"].as_array().unwrap().len(), 1);
    let next = call(
        &app,
        Method::GET,
        &format!("{BASE}?limit=10&{}", continue_query(&table.body)),
        &[("accept", TABLE)],
        None,
    )
    .await;
    let rows: Vec<&str> =
        next.body["rows"].as_array().unwrap().iter().map(|r| r["cells"][0].as_str().unwrap()).collect();
    assert_eq!(rows, ["worker-1", "worker-20", "worker-3", "worker-4"], "a new list sees the changes");
}

#[tokio::test]
async fn a_continue_token_older_than_the_history_is_expired() {
    let (app, _) = app_with_history(2);
    for i in 0..3 {
        create(&app, nrt(&format!("worker-{i}"), 10)).await;
    }
    let first = get(&app, &format!("{BASE}?limit=1")).await;
    for i in 3..6 {
        create(&app, nrt(&format!("worker-{i}"), 10)).await;
    }
    let expired = get(&app, &format!("{BASE}?limit=1&{}", continue_query(&first.body))).await;
    assert_eq!(expired.status, StatusCode::GONE);
    assert_eq!(expired.body["reason"], "Expired");
    assert!(expired.body["message"].as_str().unwrap().starts_with("The provided continue parameter is too old"));
    // The Status carries a token for the rest of the list, from the latest state.
    let rest = get(&app, &format!("{BASE}?{}", continue_query(&expired.body))).await;
    assert_eq!(rest.status, StatusCode::OK);
    assert_eq!(names(&rest.body), ["worker-1", "worker-2", "worker-3", "worker-4", "worker-5"]);
}

#[tokio::test]
async fn bad_list_parameters_get_a_status() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await; // 1001
    create(&app, nrt("worker-1", 1)).await; // 1002
    for (query, code) in [
        ("limit=x", StatusCode::BAD_REQUEST),
        ("limit=99999999999999999999", StatusCode::BAD_REQUEST),
        ("limit=1.5", StatusCode::BAD_REQUEST),
        ("resourceVersion=abc", StatusCode::BAD_REQUEST),
        ("resourceVersion=-3", StatusCode::BAD_REQUEST),
        ("continue=garbage", StatusCode::BAD_REQUEST),
        ("continue=bm90IGpzb24", StatusCode::BAD_REQUEST), // "not json"
        ("resourceVersionMatch=Sometimes&resourceVersion=1", StatusCode::BAD_REQUEST),
        ("timeoutSeconds=-1", StatusCode::BAD_REQUEST),
        ("gracePeriodSeconds=soon", StatusCode::BAD_REQUEST),
    ] {
        let answer = get(&app, &format!("{BASE}?{query}")).await;
        assert_eq!(answer.status, code, "{query}: {}", answer.body);
        assert_eq!(answer.body["kind"], "Status", "{query}");
        assert_eq!(answer.body["code"], code.as_u16(), "{query}");
    }
    let bogus_get = get(&app, &format!("{BASE}/worker-0?resourceVersion=abc")).await;
    assert_eq!(bogus_get.body["kind"], "Status");
    assert_eq!(bogus_get.status, StatusCode::BAD_REQUEST);

    // A continue token with a resourceVersion is refused, as kube-apiserver refuses it.
    let first = get(&app, &format!("{BASE}?limit=1")).await;
    let with_rv = get(&app, &format!("{BASE}?resourceVersion=1002&{}", continue_query(&first.body))).await;
    assert_eq!(with_rv.status, StatusCode::BAD_REQUEST);

    // Zero and negative limits, and absurdly large ones that still fit in int64, do not page.
    for limit in ["0", "-5", "9223372036854775807"] {
        let answer = get(&app, &format!("{BASE}?limit={limit}")).await;
        assert_eq!(answer.status, StatusCode::OK, "limit={limit}");
        assert_eq!(names(&answer.body), ["worker-0", "worker-1"], "limit={limit}");
        assert!(answer.body["metadata"].get("continue").is_none());
    }
    // Unknown parameters are ignored, as kube-apiserver ignores them.
    let unknown = get(&app, &format!("{BASE}?shardSelector=x&frobnicate=%00&=&a")).await;
    assert_eq!(unknown.status, StatusCode::OK);
    assert_eq!(names(&unknown.body).len(), 2);
    let unknown_write = call(
        &app,
        Method::POST,
        &format!("{BASE}?frobnicate=1"),
        &[("content-type", "application/json")],
        Some(nrt("worker-2", 1)),
    )
    .await;
    assert_eq!(unknown_write.status, StatusCode::CREATED);
}

#[tokio::test]
async fn a_resource_version_from_the_future_is_too_large_as_client_go_knows_it() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await; // 1001
    for query in [
        "resourceVersion=5000",
        "resourceVersion=5000&resourceVersionMatch=NotOlderThan",
        "resourceVersion=5000&resourceVersionMatch=Exact",
    ] {
        let answer = get(&app, &format!("{BASE}?{query}")).await;
        // apierrors.IsTimeout (504, reason Timeout) and a ResourceVersionTooLarge cause.
        assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT, "{query}");
        assert_eq!(answer.body["reason"], "Timeout");
        assert_eq!(answer.body["details"]["causes"][0]["type"], "ResourceVersionTooLarge");
        assert_eq!(answer.body["message"], "Timeout: Too large resource version: 5000, current: 1001");
        assert_eq!(answer.headers["retry-after"], "1");
    }
    // An exact list of an earlier state is served while the history reaches it.
    create(&app, nrt("worker-1", 1)).await; // 1002
    let exact = get(&app, &format!("{BASE}?resourceVersion=1001&resourceVersionMatch=Exact")).await;
    assert_eq!(exact.status, StatusCode::OK);
    assert_eq!(names(&exact.body), ["worker-0"]);
    assert_eq!(exact.body["metadata"]["resourceVersion"], "1001");
    let gone = get(&app, &format!("{BASE}?resourceVersion=7&resourceVersionMatch=Exact")).await;
    assert_eq!(gone.status, StatusCode::GONE);
}

#[tokio::test]
async fn a_paged_list_at_a_resource_version_without_a_match_is_exact() {
    // kube-apiserver's legacy paging semantics: a specific resourceVersion with a limit and no
    // resourceVersionMatch reads exactly that state.
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await; // 1001
    create(&app, nrt("worker-1", 1)).await; // 1002
    let paged = get(&app, &format!("{BASE}?resourceVersion=1001&limit=10")).await;
    assert_eq!(paged.status, StatusCode::OK);
    assert_eq!(names(&paged.body), ["worker-0"]);
    assert_eq!(paged.body["metadata"]["resourceVersion"], "1001");
    let gone = get(&app, &format!("{BASE}?resourceVersion=7&limit=10")).await;
    assert_eq!(gone.status, StatusCode::GONE);
    assert_eq!(gone.body["reason"], "Expired");
    // Without a limit, or with NotOlderThan, the resourceVersion is a lower bound: the latest serves.
    for query in ["resourceVersion=1001", "resourceVersion=1001&limit=10&resourceVersionMatch=NotOlderThan"] {
        let latest = get(&app, &format!("{BASE}?{query}")).await;
        assert_eq!(latest.status, StatusCode::OK, "{query}");
        assert_eq!(names(&latest.body), ["worker-0", "worker-1"], "{query}");
        assert_eq!(latest.body["metadata"]["resourceVersion"], "1002", "{query}");
    }
}

#[tokio::test]
async fn watches_resume_from_a_resource_version_or_expire() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await; // 1001
    create(&app, nrt("worker-1", 1)).await; // 1002
    let seen = events(&mut watch(&app, "resourceVersion=1001", "application/json").await, 1).await;
    assert_eq!(seen[0]["type"], "ADDED");
    assert_eq!(seen[0]["object"]["metadata"]["name"], "worker-1");

    let seen = events(&mut watch(&app, "resourceVersion=5", "application/json").await, 1).await;
    assert_eq!(seen[0]["type"], "ERROR");
    assert_eq!(seen[0]["object"]["code"], 410);
    assert_eq!(seen[0]["object"]["reason"], "Expired");

    // A version this server has not reached is too large, answered as a LIST answers it.
    let future = get(&app, &format!("{BASE}?watch=true&resourceVersion=5000")).await;
    assert_eq!(future.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(future.body["reason"], "Timeout");
    assert_eq!(future.body["details"]["causes"][0]["type"], "ResourceVersionTooLarge");
    assert_eq!(future.body["message"], "Timeout: Too large resource version: 5000, current: 1002");
    assert_eq!(future.headers["retry-after"], "1");
}

#[tokio::test]
async fn a_watcher_that_falls_behind_the_history_is_told_to_relist() {
    // The test runtime has one thread: the watch's task first runs when the test awaits its
    // body, after the writes below have pushed its position out of a three-event history.
    let (app, state) = app_with_history(3);
    create(&app, nrt("worker-0", 1)).await; // 1001
    let mut behind = watch(&app, "resourceVersion=1001", "application/json").await;
    for available in 2..7 {
        write(&state.store, typed("worker-0", available));
    }
    let seen = events(&mut behind, 1).await;
    assert_eq!(seen[0]["type"], "ERROR");
    assert_eq!(seen[0]["object"]["code"], 410);
    assert_eq!(seen[0]["object"]["reason"], "Expired");
}

/// Every line a watch stream carries until it ends (bounded: a stream that never ends fails).
async fn all_events(stream: BodyDataStream) -> Vec<Value> {
    let chunks: Vec<Bytes> = tokio::time::timeout(Duration::from_secs(3600), stream.try_collect())
        .await
        .expect("the watch stream never ended")
        .unwrap();
    let bytes = chunks.concat();
    bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect()
}

/// A watch whose client stops reading while 300 changes queue up, then (once `end` has run)
/// reads what is left: the watch must have ended at `end`, not after sending everything.
async fn a_stalled_watch_ends(end: impl AsyncFnOnce(&AppState)) -> usize {
    let (app, state) = app_with_history(1000);
    let created = create(&app, nrt("worker-0", 0)).await;
    let from = created.body["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let stalled = watch(&app, &format!("resourceVersion={from}&timeoutSeconds=60"), "application/json").await;
    for available in 1..=300 {
        let mut object = typed("worker-0", available);
        // 8 KiB events: 300 of them are far more than a watch may queue.
        object.attributes = vec![numaresources_api::nrt::AttributeInfo::new("filler", "x".repeat(8 * 1024))];
        state.store.update(object, &Default::default(), false).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // the watch fills its queue and waits
    end(&state).await;
    let seen = all_events(stalled).await;
    assert!(!seen.is_empty());
    seen.len()
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_never_holds_a_watch_past_its_timeout_or_a_shutdown() {
    // At most the queue (64 KiB: 8 events) plus the events in hand: the rest of the 300
    // changes never went out.
    let timed_out = a_stalled_watch_ends(async |_| tokio::time::sleep(Duration::from_secs(120)).await).await;
    assert!(timed_out <= 65, "{timed_out} events: the watch outlived its timeoutSeconds");
    let stopped = a_stalled_watch_ends(async |state| {
        state.stopping.cancel();
        tokio::time::sleep(Duration::from_secs(1)).await; // still not reading while the server stops
    })
    .await;
    assert!(stopped <= 65, "{stopped} events: the watch outlived the shutdown");
}

/// `nrt` as the store takes it.
fn typed(name: &str, available: i64) -> NodeResourceTopology {
    serde_json::from_value(nrt(name, available)).unwrap()
}

fn write(store: &Store, object: NodeResourceTopology) {
    store.update(object, &Default::default(), false).unwrap();
}

fn summary(event: &Value) -> (String, String) {
    let name = event["object"]["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    (event["type"].as_str().unwrap().to_owned(), name)
}

/// A watch pinned to one name sees exactly that object's events, its deletion and
/// re-creation included, never another's; others' changes push the history far past where
/// it last read without making it relist; its bookmarks carry the current revision.
#[tokio::test]
async fn a_watch_of_one_name_sees_exactly_its_objects_events_and_current_bookmarks() {
    let (app, state) = app_with_history(4);
    let store = &state.store;
    store.create(typed("mine", 1), false).unwrap(); // 1001
    store.create(typed("other", 1), false).unwrap(); // 1002
    let mut mine = watch(
        &app,
        "resourceVersion=1002&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dmine",
        "application/json",
    )
    .await;
    let mut pinned_from_now = watch(&app, "fieldSelector=metadata.name%3Dmine", "application/json").await;
    // Ten changes of another object: the four-event history no longer reaches 1001.
    for cpus in 2..12 {
        write(store, typed("other", cpus));
    }
    write(store, typed("mine", 2)); // 1013
    store.delete("mine", &Default::default(), false).unwrap(); // 1014
    store.create(typed("mine", 3), false).unwrap(); // 1015
    let seen: Vec<_> = events(&mut mine, 3).await.iter().map(summary).collect();
    let mine_events = [("MODIFIED", "mine"), ("DELETED", "mine"), ("ADDED", "mine")];
    assert_eq!(seen, mine_events.map(|(kind, name)| (kind.to_owned(), name.to_owned())));
    for cpus in 12..20 {
        write(store, typed("other", cpus));
    }
    let bookmark = events(&mut mine, 1).await.remove(0);
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["metadata"]["resourceVersion"], store.visible_revision().to_string());
    // The one started with the state sees it first, then the same changes.
    let seen: Vec<_> = events(&mut pinned_from_now, 4).await.iter().map(summary).collect();
    assert_eq!(seen[0], ("ADDED".to_owned(), "mine".to_owned()));
    assert_eq!(seen[1..], mine_events.map(|(kind, name)| (kind.to_owned(), name.to_owned())));
}

/// A pinned watch resuming from before the index followed its name reads its events from
/// the history, and one from before the history reaches is told to relist.
#[tokio::test]
async fn a_pinned_watch_resumes_from_the_history_or_expires() {
    let (app, state) = app_with_history(4);
    let store = &state.store;
    store.create(typed("mine", 1), false).unwrap(); // 1001
    write(store, typed("mine", 2)); // 1002
    store.create(typed("other", 1), false).unwrap(); // 1003
    let mut resumed = watch(&app, "resourceVersion=1001&fieldSelector=metadata.name%3Dmine", "application/json").await;
    let seen = events(&mut resumed, 1).await;
    assert_eq!(summary(&seen[0]), ("MODIFIED".to_owned(), "mine".to_owned()));
    assert_eq!(seen[0]["object"]["metadata"]["resourceVersion"], "1002");
    for cpus in 2..8 {
        write(store, typed("other", cpus));
    }
    let mut expired = watch(&app, "resourceVersion=1001&fieldSelector=metadata.name%3Dmine", "application/json").await;
    let seen = events(&mut expired, 1).await;
    assert_eq!(seen[0]["type"], "ERROR");
    assert_eq!(seen[0]["object"]["code"], 410);
}

#[tokio::test]
async fn metadata_watchers_see_a_deletion_with_its_full_metadata() {
    let (app, _) = app();
    let created = create(&app, nrt("worker-0", 1)).await; // 1001
    let metadata = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let mut body = watch(&app, "resourceVersion=1001", metadata).await;
    let deleted = call(&app, Method::DELETE, &format!("{BASE}/worker-0"), &[], None).await;
    assert_eq!(deleted.status, StatusCode::OK);
    let seen = events(&mut body, 1).await;
    assert_eq!(seen[0]["type"], "DELETED");
    assert_eq!(seen[0]["object"]["kind"], "PartialObjectMetadata");
    let meta = &seen[0]["object"]["metadata"];
    assert_eq!(meta["uid"], created.body["metadata"]["uid"]);
    assert_eq!(meta["resourceVersion"], "1002");
    assert_eq!(meta["labels"]["pool"], "cnf");
}

#[tokio::test]
async fn streaming_lists_end_their_initial_events_with_a_bookmark() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await;
    create(&app, nrt("worker-1", 1)).await;
    let query = "sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
    let seen = events(&mut watch(&app, query, "application/json").await, 4).await;
    assert_eq!(seen[0]["type"], "ADDED");
    assert_eq!(seen[1]["type"], "ADDED");
    assert_eq!(seen[2]["type"], "BOOKMARK");
    assert_eq!(seen[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert_eq!(seen[2]["object"]["metadata"]["resourceVersion"], "1002");
    // Then periodic bookmarks (every 200 ms in this test setup).
    assert_eq!(seen[3]["type"], "BOOKMARK");
    assert!(seen[3]["object"]["metadata"].get("annotations").is_none());

    let wrong = get(&app, &format!("{BASE}?watch=true&sendInitialEvents=true")).await;
    assert_eq!(wrong.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn selector_watches_see_objects_enter_and_leave() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await;
    let mut body = watch(&app, "resourceVersion=1001&labelSelector=pool%3Dinfra", "application/json").await;
    let merge = [("content-type", "application/merge-patch+json")];
    let uri = format!("{BASE}/worker-0");
    call(&app, Method::PATCH, &uri, &merge, Some(json!({"metadata": {"labels": {"pool": "infra"}}}))).await;
    call(&app, Method::PATCH, &uri, &merge, Some(json!({"metadata": {"labels": {"pool": "cnf"}}}))).await;
    let seen = events(&mut body, 2).await;
    assert_eq!(seen[0]["type"], "ADDED");
    assert_eq!(seen[1]["type"], "DELETED");
}

#[tokio::test]
async fn kubectl_get_watch_gets_table_events() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await;
    let mut body = watch(&app, "", TABLE).await;
    create(&app, nrt("worker-1", 1)).await;
    let seen = events(&mut body, 2).await;
    assert_eq!(seen[0]["object"]["kind"], "Table");
    assert!(!seen[0]["object"]["columnDefinitions"].as_array().unwrap().is_empty());
    assert!(seen[1]["object"]["columnDefinitions"].as_array().unwrap().is_empty());
    assert_eq!(seen[1]["object"]["rows"][0]["cells"][0], "worker-1");
}

#[tokio::test]
async fn health_endpoints_report_checks() {
    let (app, state) = app();
    assert_eq!(get(&app, "/healthz").await.status, StatusCode::OK);
    state.readiness.set("store-warm", false);
    let ready = get(&app, "/readyz?verbose").await;
    assert_eq!(ready.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(ready.body.as_str().unwrap().contains("[-]store-warm failed"));
    // One check answers on its own path.
    let one = get(&app, "/readyz/store-warm").await;
    assert_eq!(
        (one.status, one.body.as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, Some("internal server error: not ready\n"))
    );
    assert_eq!(get(&app, "/readyz/ping").await.body, "ok");
    let nothing = get(&app, "/readyz/nothing").await;
    assert_eq!((nothing.status, nothing.body["kind"].as_str()), (StatusCode::NOT_FOUND, Some("Status")));
    state.readiness.set("store-warm", true);
    let ready = get(&app, "/readyz?verbose").await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.body, "[+]ping ok\n[+]store-warm ok\nreadyz check passed\n");
    let one = get(&app, "/readyz/store-warm").await;
    assert_eq!((one.status, one.body.as_str()), (StatusCode::OK, Some("ok")));
    assert_eq!(get(&app, "/livez").await.status, StatusCode::OK);
}

#[tokio::test]
async fn openapi_documents_are_served_with_etags() {
    let (app, _) = app();
    let index = get(&app, "/openapi/v3").await;
    let url =
        index.body["paths"]["apis/topology.node.k8s.io/v1alpha2"]["serverRelativeURL"].as_str().unwrap().to_owned();
    let document = get(&app, &url).await;
    assert_eq!(document.status, StatusCode::OK);
    assert_eq!(document.body["openapi"], "3.0.0");
    let etag = document.headers["etag"].to_str().unwrap().to_owned();
    assert_eq!(call(&app, Method::GET, &url, &[("if-none-match", &etag)], None).await.status, StatusCode::NOT_MODIFIED);
    let v2 = get(&app, "/openapi/v2").await;
    assert_eq!(v2.body["swagger"], "2.0");
}

#[tokio::test]
async fn unknown_fields_follow_field_validation() {
    let (app, _) = app();
    let mut object = nrt("worker-0", 1);
    object["spec"] = json!({"oops": true});
    let strict = call(&app, Method::POST, &format!("{BASE}?fieldValidation=Strict"), &[], Some(object.clone())).await;
    assert_eq!(strict.status, StatusCode::BAD_REQUEST);
    assert!(strict.body["message"].as_str().unwrap().contains("unknown field \".spec\""));
    let warned = call(&app, Method::POST, BASE, &[], Some(object)).await;
    assert_eq!(warned.status, StatusCode::CREATED);
    assert_eq!(warned.headers["warning"], "299 - \"unknown field \\\".spec\\\"\"");
    assert!(warned.body.get("spec").is_none(), "unknown fields are dropped");
    let bad = call(&app, Method::POST, &format!("{BASE}?fieldValidation=Loose"), &[], Some(nrt("worker-1", 1))).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn exporter_shaped_merge_patches_are_checked_like_any_other() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await;
    let merge = [("content-type", "application/merge-patch+json")];
    let patch = json!({"metadata": {"labels": {"pool": null}},
        "zones": [{"name": "node-0", "type": "Node", "typo": 1,
                   "resources": [{"name": "cpu", "capacity": 32, "allocatable": 30, "available": 3}]}]});
    let url = |name: &str, query: &str| format!("{BASE}/{name}?fieldValidation={query}");
    // The missing object is reported before anything wrong with the patch.
    let missing = call(&app, Method::PATCH, &url("worker-9", "Strict"), &merge, Some(patch.clone())).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let strict = call(&app, Method::PATCH, &url("worker-0", "Strict"), &merge, Some(patch.clone())).await;
    assert_eq!(strict.status, StatusCode::BAD_REQUEST);
    assert!(strict.body["message"].as_str().unwrap().contains("unknown field \".zones[0].typo\""), "{}", strict.body);
    let warned = call(&app, Method::PATCH, &url("worker-0", "Warn"), &merge, Some(patch)).await;
    assert_eq!(warned.status, StatusCode::OK);
    assert_eq!(warned.headers["warning"], "299 - \"unknown field \\\".zones[0].typo\\\"\"");
    assert_eq!(warned.body["zones"][0]["resources"][0]["available"], "3");
    assert_eq!(warned.body["metadata"]["labels"], json!({}), "null removes a label");
    assert_eq!(warned.body["metadata"]["generation"], 2);
    let bad = json!({"zones": [{"name": "node-0", "type": "Node",
        "resources": [{"name": "cpu", "capacity": 32, "allocatable": 30, "available": "a lot"}]}]});
    let invalid = call(&app, Method::PATCH, &format!("{BASE}/worker-0"), &merge, Some(bad)).await;
    assert_eq!(invalid.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(invalid.body["details"]["causes"][0]["field"], "zones[0].resources[0].available", "{}", invalid.body);
}

#[tokio::test]
async fn metrics_count_requests_watches_and_report_ages() {
    let (app, _) = app();
    create(&app, nrt("worker-0", 1)).await;
    get(&app, &format!("{BASE}/worker-9")).await;
    let _watch = watch(&app, "", "application/json").await;
    let metrics = get(&app, "/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    let text = metrics.body.as_str().unwrap();
    assert!(
        text.contains(
            "numaresources_apiserver_requests_total{verb=\"create\",resource=\"noderesourcetopologies\",code=\"201\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "numaresources_apiserver_requests_total{verb=\"get\",resource=\"noderesourcetopologies\",code=\"404\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("numaresources_apiserver_watches 1"), "{text}");
    assert!(text.contains("numaresources_apiserver_objects 1"), "{text}");
    assert!(text.contains("numaresources_apiserver_node_report_age_seconds{node=\"worker-0\"}"), "{text}");
    assert!(text.contains("numaresources_apiserver_request_duration_seconds_bucket{"), "{text}");
}

#[tokio::test]
async fn metrics_give_the_fleet_headroom_per_zone_without_a_per_node_series() {
    let (app, _) = app();
    for (name, available) in [("worker-0", 1), ("worker-1", 9), ("worker-2", 30)] {
        create(&app, nrt(name, available)).await;
    }
    let text = get(&app, "/metrics").await.body.as_str().unwrap().to_owned();
    for line in [
        "numaresources_apiserver_fleet_numa_zones 3",
        "numaresources_apiserver_fleet_numa_zones_free_cpus{at_least=\"1\"} 3",
        "numaresources_apiserver_fleet_numa_zones_free_cpus{at_least=\"8\"} 2",
        "numaresources_apiserver_fleet_numa_zones_free_cpus{at_least=\"16\"} 1",
        "numaresources_apiserver_fleet_numa_zones_free_cpus{at_least=\"64\"} 0",
        "numaresources_apiserver_fleet_numa_available{resource=\"cpu\"} 40",
        "numaresources_apiserver_fleet_numa_allocatable{resource=\"cpu\"} 90",
    ] {
        assert!(text.lines().any(|l| l == line || l.starts_with(&format!("{line}.0"))), "{line}:\n{text}");
    }
    let headroom_series = text.lines().filter(|l| l.starts_with("numaresources_apiserver_fleet_")).count();
    assert_eq!(headroom_series, 1 + 7 + 9 + 5 + 5, "fixed label sets only: {text}");
    assert!(!text.lines().any(|l| l.starts_with("numaresources_apiserver_fleet_") && l.contains("worker-")), "{text}");
}

#[tokio::test]
async fn stopping_ends_watches_with_a_final_bookmark() {
    let (app, state) = app();
    create(&app, nrt("worker-0", 1)).await;
    let mut stream = watch(&app, "resourceVersion=1001&allowWatchBookmarks=true", "application/json").await;
    state.stopping.cancel();
    let mut text = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = stream.next().await {
            text.extend_from_slice(&chunk.unwrap());
        }
    })
    .await
    .expect("the watch did not end on shutdown; likely deadlocked");
    let last: Value = serde_json::from_slice(text.split(|b| *b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap();
    assert_eq!(last["type"], "BOOKMARK");
    assert_eq!(last["object"]["metadata"]["resourceVersion"], "1001");
}
