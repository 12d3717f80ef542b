//! Bad input over a real socket (the router served by hyper on loopback, HTTP/1.1 written by
//! hand): bodies that cost a parser quadratic time, JSON patches that grow without bound, and
//! metadata kube-apiserver would refuse. Each is answered as kube-apiserver answers it, quickly,
//! and nothing invalid is stored.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::net::SocketAddr;

use numaresources_apiserver::Limits;
use serde_json::{Value, json};
use support::{BASE, socket};
/// Below the annotations' own 256 KiB, so that a large annotation meets the body limit first.
const BODY_LIMIT: usize = 128 * 1024;

const JSON: &str = "content-type: application/json\r\n";
const YAML: &str = "content-type: application/yaml\r\n";
const MERGE: &str = "content-type: application/merge-patch+json\r\n";
const JSON_PATCH: &str = "content-type: application/json-patch+json\r\n";

async fn server() -> SocketAddr {
    server_with_body_limit(BODY_LIMIT).await
}

async fn server_with_body_limit(max_body_bytes: usize) -> SocketAddr {
    socket::serve(Limits { max_body_bytes, ..Limits::default() }).await
}

/// An answer read off the socket.
#[derive(Debug)]
struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

impl Answer {
    fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }
}

/// One request on a fresh connection, read to the end.
async fn send(address: SocketAddr, method: &str, path: &str, headers: &str, body: &[u8]) -> Answer {
    let raw = socket::request(address, method, path, headers, body).await;
    let body = serde_json::from_slice(&raw.body).unwrap_or(Value::Null);
    Answer { code: raw.code, warnings: raw.headers("warning"), body }
}

/// The shared object, held by a finalizer and without attributes (a JSON patch adds them).
fn nrt(name: &str) -> Value {
    let mut object = support::nrt(name, 10);
    object["metadata"]["finalizers"] = json!(["example.com/keep"]);
    object.as_object_mut().unwrap().remove("attributes");
    object
}

async fn create(address: SocketAddr, object: &Value) -> Answer {
    send(address, "POST", BASE, JSON, &serde_json::to_vec(object).unwrap()).await
}

async fn stored(address: SocketAddr, name: &str) -> Value {
    send(address, "GET", &format!("{BASE}/{name}"), "", b"").await.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_yaml_is_refused_at_once_and_health_keeps_answering() {
    let address = server().await;
    assert_eq!(create(address, &nrt("worker-0")).await.code, 201);
    let attack = format!("a: {}", "[".repeat(100_000));
    let map_attack = format!("a: {}", "{a: ".repeat(30_000));
    // Two in flight at once, as the issue's attack had them, and a health check beside them.
    let item = format!("{BASE}/worker-0");
    let (post, put, health) = tokio::join!(
        send(address, "POST", BASE, YAML, attack.as_bytes()),
        send(address, "PUT", &item, YAML, map_attack.as_bytes()),
        send(address, "GET", "/healthz", "", b""),
    );
    for answer in [&post, &put] {
        assert_eq!(answer.code, 400, "{answer:?}");
        assert_eq!(answer.body["reason"], "BadRequest");
        assert!(answer.message().starts_with("the body of the request is not valid YAML: "), "{answer:?}");
    }
    assert_eq!(health.code, 200);

    // Nesting within the bound is fine in YAML as in JSON (JSON is YAML's flow style); past it,
    // refused.
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    for (name, depth, want) in [("worker-1", 100, 201), ("worker-2", 200, 400)] {
        let body = serde_json::to_string(&nrt(name))
            .unwrap()
            .replace(r#""zones""#, &format!(r#""extra": {}, "zones""#, nested(depth)));
        let answer = send(address, "POST", &format!("{BASE}?fieldValidation=Ignore"), YAML, body.as_bytes()).await;
        assert_eq!(answer.code, want, "{depth}: {answer:?}");
    }
}

#[tokio::test]
async fn yaml_alias_bombs_are_refused() {
    let address = server().await;
    let mut bomb = String::from("apiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\n");
    bomb.push_str("metadata: {name: bomb}\nzones: []\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for (name, previous) in
        ["b", "c", "d", "e", "f", "g", "h", "i"].iter().zip(["a", "b", "c", "d", "e", "f", "g", "h"])
    {
        bomb.push_str(&format!("{name}: &{name} [{}]\n", vec![format!("*{previous}"); 9].join(",")));
    }
    let answer = send(address, "POST", BASE, YAML, bomb.as_bytes()).await;
    assert_eq!(answer.code, 400, "{answer:?}");
    assert_eq!(stored(address, "bomb").await["code"], 404);
}

#[tokio::test]
async fn a_json_patch_cannot_grow_the_object_past_its_bounds() {
    // Room in a body for 10,001 small operations.
    let address = server_with_body_limit(1024 * 1024).await;
    assert_eq!(create(address, &nrt("worker-0")).await.code, 201);
    let item = format!("{BASE}/worker-0");

    // The issue's attack: a 1 KB annotation, then copies that double it each time.
    let mut doubling = vec![json!({"op": "add", "path": "/metadata/annotations", "value": {"zz": "x".repeat(1024)}})];
    doubling.push(json!({"op": "add", "path": "/zz", "value": {"s": "x".repeat(1024)}}));
    doubling.extend((0..18).map(|n| json!({"op": "copy", "from": "/zz", "path": format!("/zz/c{n}")})));
    let answer = send(address, "PATCH", &item, JSON_PATCH, &serde_json::to_vec(&doubling).unwrap()).await;
    assert_eq!(answer.code, 422, "{answer:?}");
    assert!(
        answer.message().contains("Unable to complete the copy, the accumulated size increase of copy is"),
        "{answer:?}"
    );

    // A linear variant: each copy within the copy budget, the object in the end past the body
    // limit (attributes are kept when the object is decoded; unknown fields would be pruned).
    let mut linear =
        vec![json!({"op": "add", "path": "/attributes", "value": [{"name": "a", "value": "x".repeat(200 * 1024)}]})];
    linear.extend((0..5).map(|_| json!({"op": "copy", "from": "/attributes/0", "path": "/attributes/-"})));
    let answer = send(address, "PATCH", &item, JSON_PATCH, &serde_json::to_vec(&linear).unwrap()).await;
    assert_eq!(answer.code, 413, "{answer:?}");

    // More operations than kube-apiserver allows: 413 before any applies.
    let many = vec![json!({"op": "test", "path": "/kind", "value": "NodeResourceTopology"}); 10_001];
    let answer = send(address, "PATCH", &item, JSON_PATCH, &serde_json::to_vec(&many).unwrap()).await;
    assert_eq!(answer.code, 413, "{answer:?}");
    assert_eq!(answer.message(), "The allowed maximum operations in a JSON patch is 10000, got 10001");

    // None of it was stored.
    let object = stored(address, "worker-0").await;
    assert!(object["metadata"]["annotations"].get("zz").is_none(), "{object}");
    assert!(object.get("attributes").is_none(), "{object}");
    assert_eq!(object["metadata"]["resourceVersion"], "1001");
}

#[tokio::test]
async fn a_merge_patch_cannot_make_the_object_larger_than_a_body() {
    let address = server().await;
    assert_eq!(create(address, &nrt("worker-0")).await.code, 201);
    let item = format!("{BASE}/worker-0");
    // Each patch fits in a body; the second would make the object twice as large.
    for (n, want) in [(0, 200), (1, 413)] {
        let patch = json!({"metadata": {"annotations": {format!("a{n}"): "x".repeat(BODY_LIMIT * 2 / 3)}}});
        let answer = send(address, "PATCH", &item, MERGE, &serde_json::to_vec(&patch).unwrap()).await;
        assert_eq!(answer.code, want, "{n}: {:?}", answer.body["message"]);
    }
}

#[tokio::test]
async fn a_create_or_update_cannot_make_the_object_larger_than_a_body() {
    let address = server().await;
    assert_eq!(create(address, &nrt("worker-0")).await.code, 201);
    let item = format!("{BASE}/worker-0");
    // YAML says `a00001: v, ` in 11 bytes where the stored JSON takes 13: a body that fits can
    // make an object that does not.
    let object = |name: &str, entries: usize| {
        let annotations: Vec<String> = (0..entries).map(|n| format!("a{n:05}: v")).collect();
        format!(
            "apiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\n\
             metadata: {{name: {name}, annotations: {{{}}}}}\nzones: []\n",
            annotations.join(", ")
        )
    };
    for (entries, want) in [(BODY_LIMIT / 26, 200), (BODY_LIMIT / 12, 413)] {
        let body = object("worker-0", entries);
        assert!(body.len() < BODY_LIMIT);
        let answer = send(address, "PUT", &item, YAML, body.as_bytes()).await;
        assert_eq!(answer.code, want, "{entries}: {:?}", answer.body["message"]);
    }
    let answer = send(address, "POST", BASE, YAML, object("worker-1", BODY_LIMIT / 12).as_bytes()).await;
    assert_eq!(answer.code, 413, "{:?}", answer.body["message"]);
    assert_eq!(stored(address, "worker-1").await["code"], 404);
    let annotations = &stored(address, "worker-0").await["metadata"]["annotations"];
    // The first update is stored, none of the second.
    assert!(annotations.get(format!("a{:05}", BODY_LIMIT / 26 - 1)).is_some(), "{annotations}");
    assert!(annotations.get(format!("a{:05}", BODY_LIMIT / 26)).is_none(), "{annotations}");
}

#[tokio::test]
async fn invalid_metadata_is_refused_on_every_write_path() {
    let address = server().await;
    // generateName: both the prefix and the name made of it, as kube-apiserver reports them.
    let mut generated = nrt("");
    generated["metadata"] = json!({"generateName": "BAD_"});
    let answer = create(address, &generated).await;
    assert_eq!(answer.code, 422, "{answer:?}");
    let fields: Vec<&str> =
        answer.body["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["metadata.generateName", "metadata.name"], "{answer:?}");

    let mut bad_label = nrt("worker-0");
    bad_label["metadata"]["labels"] = json!({"bad key!": "v"});
    let answer = create(address, &bad_label).await;
    assert_eq!(answer.code, 422, "{answer:?}");
    assert!(
        answer.message().contains("metadata.labels: Invalid value: \"bad key!\": name part must consist of"),
        "{answer:?}"
    );

    assert_eq!(create(address, &nrt("worker-0")).await.code, 201);
    let item = format!("{BASE}/worker-0");
    let long_value = "v".repeat(100);
    // The exporters' typed merge path, the generic merge path, a JSON patch and a PUT.
    let writes = [
        ("PATCH", MERGE, json!({"metadata": {"labels": {"pool": long_value}}})),
        ("PATCH", MERGE, json!({"metadata": {"labels": {"pool": long_value}, "finalizers": ["example.com/keep"]}})),
        ("PATCH", JSON_PATCH, json!([{"op": "add", "path": "/metadata/labels/pool", "value": long_value}])),
        ("PATCH", JSON_PATCH, json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "not a name"}])),
        ("PATCH", MERGE, json!({"metadata": {"annotations": {"a/b/c": "x"}}})),
        ("PUT", JSON, {
            let mut object = nrt("worker-0");
            object["metadata"]["labels"] = json!({"pool": long_value});
            object
        }),
    ];
    for (method, content_type, body) in writes {
        let answer = send(address, method, &item, content_type, &serde_json::to_vec(&body).unwrap()).await;
        assert_eq!(answer.code, 422, "{method} {body}: {answer:?}");
        assert_eq!(answer.body["reason"], "Invalid");
    }
    assert_eq!(stored(address, "worker-0").await["metadata"]["labels"], json!({"pool": "cnf"}));
}

#[tokio::test]
async fn patches_cannot_drop_the_name_or_wipe_the_metadata() {
    let address = server().await;
    assert_eq!(create(address, &nrt("worker-0")).await.code, 201);
    let item = format!("{BASE}/worker-0");
    let answer = send(address, "PATCH", &item, MERGE, br#"{"metadata": null}"#).await;
    assert_eq!(answer.code, 400, "{answer:?}");
    assert_eq!(answer.message(), "the name of the object () does not match the name on the URL (worker-0)");
    let answer = send(address, "PATCH", &item, JSON_PATCH, br#"[{"op": "remove", "path": "/metadata/name"}]"#).await;
    assert_eq!(answer.code, 400, "{answer:?}");
    let answer = send(address, "PATCH", &item, MERGE, br#"{"metadata": {"name": "worker-1"}}"#).await;
    assert_eq!(answer.code, 400, "{answer:?}");
    let object = stored(address, "worker-0").await;
    assert_eq!(object["metadata"]["labels"], json!({"pool": "cnf"}));
    assert_eq!(object["metadata"]["finalizers"], json!(["example.com/keep"]));
}

#[tokio::test]
async fn no_finalizer_may_be_added_once_deletion_began() {
    let address = server().await;
    assert_eq!(create(address, &nrt("worker-0")).await.code, 201);
    let item = format!("{BASE}/worker-0");
    assert!([200, 202].contains(&send(address, "DELETE", &item, "", b"").await.code));
    assert!(stored(address, "worker-0").await["metadata"]["deletionTimestamp"].is_string(), "the finalizer holds it");
    let patch = json!({"metadata": {"finalizers": ["example.com/keep", "example.com/more"]}});
    let answer = send(address, "PATCH", &item, MERGE, &serde_json::to_vec(&patch).unwrap()).await;
    assert_eq!(answer.code, 422, "{answer:?}");
    assert!(
        answer.message().contains(
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, \
             found new finalizers []string{\"example.com/more\"}"
        ),
        "{answer:?}"
    );
    // Removing the last one completes the deletion, as before.
    let answer = send(address, "PATCH", &item, MERGE, br#"{"metadata": {"finalizers": null}}"#).await;
    assert_eq!(answer.code, 200, "{answer:?}");
    assert_eq!(stored(address, "worker-0").await["code"], 404);
}

#[tokio::test]
async fn repeated_keys_are_reported_as_strict_decoding_errors_or_warnings() {
    let address = server().await;
    let body = br#"{"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": "worker-0", "name": "worker-0"}, "zones": [], "zones": []}"#;
    let answer = send(address, "POST", &format!("{BASE}?fieldValidation=Strict"), JSON, body).await;
    assert_eq!(answer.code, 400, "{answer:?}");
    assert_eq!(answer.message(), r#"strict decoding error: duplicate field "metadata.name", duplicate field "zones""#);

    let answer = send(address, "POST", &format!("{BASE}?fieldValidation=Warn"), JSON, body).await;
    assert_eq!(answer.code, 201, "{answer:?}");
    assert_eq!(
        answer.warnings,
        [r#"299 - "duplicate field \"metadata.name\"""#, r#"299 - "duplicate field \"zones\"""#]
    );

    let yaml = b"apiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\nmetadata:\n  name: worker-1\nzones: []\nkind: NodeResourceTopology\n";
    let answer = send(address, "POST", &format!("{BASE}?fieldValidation=Strict"), YAML, yaml).await;
    assert_eq!(answer.code, 400, "{answer:?}");
    assert_eq!(answer.message(), r#"strict decoding error: duplicate field "kind""#);

    let item = format!("{BASE}/worker-0");
    let patch = br#"{"metadata": {"labels": {"a": "b", "a": "c"}}}"#;
    let answer = send(address, "PATCH", &format!("{item}?fieldValidation=Strict"), MERGE, patch).await;
    assert_eq!(answer.code, 422, "{answer:?}");
    assert!(answer.message().ends_with(r#"strict decoding error: duplicate field "metadata.labels.a""#), "{answer:?}");
    let answer = send(address, "PATCH", &format!("{item}?fieldValidation=Ignore"), MERGE, patch).await;
    assert_eq!(answer.code, 200, "{answer:?}");
    assert_eq!(answer.body["metadata"]["labels"], json!({"a": "c"}), "the last one wins");
}
