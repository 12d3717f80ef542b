//! DELETE as kube-apiserver does it for a custom resource: DeleteOptions from the body or, with
//! no body, the query; `propagationPolicy` / `orphanDependents` set the garbage collector's
//! finalizers (`orphan`, `foregroundDeletion`) and leave the object, marked, until the
//! collector removes them; the last finalizer's removal deletes it with a DELETED event. Before,
//! an Orphan delete removed the object at once and the collector then deleted the dependents
//! the caller asked to keep.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use axum::Router;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use numaresources_apiserver::router;
use serde_json::{Value, json};
use support::{BASE, in_process, nrt};
use tower::ServiceExt;

fn app() -> Router {
    router(std::sync::Arc::new(in_process::state()))
}

async fn call(app: &Router, method: Method, uri: &str, content_type: &str, body: Option<Value>) -> (StatusCode, Value) {
    let answer = in_process::call(app, method, uri, &[("content-type", content_type)], body).await;
    (answer.status, answer.body)
}

async fn create(app: &Router, name: &str, finalizers: &[&str]) {
    let mut object = nrt(name, 4);
    object["metadata"]["finalizers"] = json!(finalizers);
    let (status, body) = call(app, Method::POST, BASE, "application/json", Some(object)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

async fn delete(app: &Router, path: &str, options: Option<Value>) -> (StatusCode, Value) {
    call(app, Method::DELETE, &format!("{BASE}/{path}"), "application/json", options).await
}

async fn get(app: &Router, name: &str) -> (StatusCode, Value) {
    call(app, Method::GET, &format!("{BASE}/{name}"), "application/json", None).await
}

fn finalizers(object: &Value) -> Vec<&str> {
    object["metadata"]["finalizers"]
        .as_array()
        .map_or_else(Vec::new, |f| f.iter().map(|v| v.as_str().unwrap()).collect())
}

#[tokio::test]
async fn orphan_and_foreground_deletions_leave_the_object_to_the_garbage_collector() {
    let app = app();
    // kubectl delete --cascade=orphan / --cascade=foreground send these bodies.
    let cases = [
        (
            "orphan-body",
            Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"})),
            "",
            "orphan",
        ),
        ("foreground-body", Some(json!({"propagationPolicy": "Foreground"})), "", "foregroundDeletion"),
        ("orphan-query", None, "?propagationPolicy=Orphan", "orphan"),
        ("orphan-deprecated", Some(json!({"orphanDependents": true})), "", "orphan"),
        ("orphan-deprecated-query", None, "?orphanDependents=true", "orphan"),
    ];
    for (name, body, query, finalizer) in cases {
        create(&app, name, &[]).await;
        let (status, marked) = delete(&app, &format!("{name}{query}"), body).await;
        assert_eq!(status, StatusCode::OK, "{name}: {marked}");
        assert!(marked["metadata"]["deletionTimestamp"].is_string(), "{name}: {marked}");
        assert_eq!(finalizers(&marked), [finalizer], "{name}");
        let (status, kept) = get(&app, name).await;
        assert_eq!(status, StatusCode::OK, "{name}: the object stays until the collector is done");
        assert_eq!(kept["metadata"]["resourceVersion"], marked["metadata"]["resourceVersion"]);
    }
}

#[tokio::test]
async fn removing_the_last_finalizer_deletes_the_object_with_a_deleted_event() {
    let app = app();
    create(&app, "worker-0", &[]).await;
    let (_, marked) = delete(&app, "worker-0", Some(json!({"propagationPolicy": "Orphan"}))).await;
    let revision = marked["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let watch = Request::get(format!("{BASE}?watch=true&resourceVersion={revision}")).body(Body::empty()).unwrap();
    let mut watch = app.clone().oneshot(watch).await.unwrap().into_body().into_data_stream();
    // The collector, done orphaning, removes its finalizer with a patch.
    let release = json!({"metadata": {"finalizers": null}});
    let (status, _) =
        call(&app, Method::PATCH, &format!("{BASE}/worker-0"), "application/merge-patch+json", Some(release)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(get(&app, "worker-0").await.0, StatusCode::NOT_FOUND);
    let event = &in_process::events(&mut watch, 1).await[0];
    assert_eq!(event["type"], "DELETED", "{event}");
    assert_eq!(event["object"]["metadata"]["name"], "worker-0");
}

#[tokio::test]
async fn background_and_the_default_follow_the_objects_own_finalizers() {
    let app = app();
    // No options: an object without finalizers goes at once.
    create(&app, "plain", &[]).await;
    assert_eq!(delete(&app, "plain", None).await.0, StatusCode::OK);
    assert_eq!(get(&app, "plain").await.0, StatusCode::NOT_FOUND);
    // No options: an `orphan` finalizer set earlier (e.g. by a client) keeps deciding.
    create(&app, "carries-orphan", &["orphan"]).await;
    let (_, marked) = delete(&app, "carries-orphan", None).await;
    assert_eq!(finalizers(&marked), ["orphan"]);
    // Background on an object held for orphaning releases it: it goes now.
    let (status, _) = delete(&app, "carries-orphan", Some(json!({"propagationPolicy": "Background"}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(get(&app, "carries-orphan").await.0, StatusCode::NOT_FOUND);
    // Another finalizer still holds the object; the policy only swaps the collector's.
    create(&app, "held", &["example.com/keep"]).await;
    let (_, marked) = delete(&app, "held", Some(json!({"propagationPolicy": "Orphan"}))).await;
    assert_eq!(finalizers(&marked), ["example.com/keep", "orphan"]);
    let (_, swapped) = delete(&app, "held", Some(json!({"propagationPolicy": "Foreground"}))).await;
    assert_eq!(finalizers(&swapped), ["example.com/keep", "foregroundDeletion"]);
    assert_eq!(swapped["metadata"]["deletionTimestamp"], marked["metadata"]["deletionTimestamp"]);
    // orphanDependents=false on an object that stays: 202, as kube-apiserver answers.
    create(&app, "accepted", &["example.com/keep"]).await;
    let (status, _) = delete(&app, "accepted", Some(json!({"orphanDependents": false}))).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // A dry run marks nothing.
    create(&app, "dry", &[]).await;
    let (status, would) = delete(&app, "dry?dryRun=All", Some(json!({"propagationPolicy": "Orphan"}))).await;
    assert_eq!((status, finalizers(&would)), (StatusCode::OK, vec!["orphan"]));
    assert!(get(&app, "dry").await.1["metadata"]["deletionTimestamp"].is_null());
}

#[tokio::test]
async fn a_body_wins_over_the_query_as_in_kube_apiserver() {
    let app = app();
    create(&app, "worker-0", &[]).await;
    let (status, _) =
        delete(&app, "worker-0?propagationPolicy=Orphan", Some(json!({"propagationPolicy": "Background"}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(get(&app, "worker-0").await.0, StatusCode::NOT_FOUND, "the body's Background applied");
}

#[tokio::test]
async fn contradicting_or_unknown_delete_options_are_422() {
    let app = app();
    create(&app, "worker-0", &[]).await;
    let (status, both) =
        delete(&app, "worker-0", Some(json!({"orphanDependents": true, "propagationPolicy": "Orphan"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        both["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \"Orphan\": orphanDependents and deletionPropagation cannot be both set"
    );
    assert_eq!(both["details"]["kind"], "DeleteOptions");
    let (status, unknown) = delete(&app, "worker-0?propagationPolicy=Sometimes", None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        unknown["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sometimes\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );
    let (status, _) = delete(&app, "worker-0?orphanDependents=maybe", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(get(&app, "worker-0").await.0, StatusCode::OK, "nothing was deleted");
}

#[tokio::test]
async fn deletecollection_applies_the_same_options_to_each_object() {
    let app = app();
    for name in ["a", "b"] {
        create(&app, name, &[]).await;
    }
    let (status, list) = call(
        &app,
        Method::DELETE,
        &format!("{BASE}?labelSelector=pool%3Dcnf"),
        "application/json",
        Some(json!({"propagationPolicy": "Orphan"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|item| finalizers(item) == ["orphan"]), "{list}");
    for name in ["a", "b"] {
        let (status, kept) = get(&app, name).await;
        assert_eq!(status, StatusCode::OK);
        assert!(kept["metadata"]["deletionTimestamp"].is_string());
    }
    // From the query too.
    create(&app, "c", &[]).await;
    let (_, list) = call(
        &app,
        Method::DELETE,
        &format!("{BASE}?fieldSelector=metadata.name%3Dc&propagationPolicy=Foreground"),
        "application/json",
        None,
    )
    .await;
    assert_eq!(finalizers(&list["items"][0]), ["foregroundDeletion"]);
    // Its list options are validated as a list's are (kube-apiserver's DeleteCollection).
    let (status, refused) =
        call(&app, Method::DELETE, &format!("{BASE}?sendInitialEvents=true"), "application/json", None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["details"]["kind"], "ListOptions");
}
