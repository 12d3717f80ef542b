//! What hostile or broken clients send, over a real socket (the router served by hyper on
//! loopback, HTTP/1.1 written by hand so nothing in a client library smooths it over): request
//! metrics stay bounded whatever the method and path, every error answer is a Status, and a
//! watch whose client stops reading is ended rather than buffered without bound.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::time::Duration;

use numaresources_apiserver::Limits;
use serde_json::json;
use support::socket::{create, metrics, request, serve};
use support::{BASE, PATIENCE, nrt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn request_series_stay_bounded_whatever_the_method_and_path() {
    let address = serve(Limits::default()).await;
    // 500 pipelined requests, each with its own made-up method and path, on one connection.
    let mut pipelined = String::new();
    for i in 0..500 {
        pipelined.push_str(&format!("M{i:04}X /x/{i} HTTP/1.1\r\nhost: localhost\r\n\r\n"));
    }
    pipelined.push_str("GET /version HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(pipelined.as_bytes()).await.unwrap();
    let mut answers = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answers)).await.unwrap().unwrap();
    request(address, "BREW", &format!("{BASE}/worker-0"), "", b"").await;

    let text = metrics(address).await;
    let series: Vec<&str> = text.lines().filter(|l| l.starts_with("numaresources_apiserver_requests_total{")).collect();
    assert!(series.len() <= 4, "one series per verb, resource and code: {series:#?}");
    assert!(
        text.contains(r#"numaresources_apiserver_requests_total{verb="other",resource="",code="404"} 500"#),
        "{text}"
    );
    assert!(
        text.contains(r#"numaresources_apiserver_requests_total{verb="other",resource="",code="405"} 1"#),
        "an unknown method on the resource counts as other too: {text}"
    );
    assert!(!text.contains("M0001X"), "{text}");
    let buckets =
        text.lines().filter(|l| l.starts_with("numaresources_apiserver_request_duration_seconds_count{")).count();
    assert!(buckets <= 3, "{text}");
}

#[tokio::test]
async fn every_error_answer_is_a_status() {
    let address = serve(Limits::default()).await;
    create(address, "worker-0").await;
    for (method, path, code, reason) in [
        ("GET", format!("{BASE}?limit=x"), 400, "BadRequest"),
        ("GET", format!("{BASE}?watch=maybe&watch=true"), 400, "BadRequest"),
        ("POST", format!("{BASE}?dryRun=All&dryRun=Maybe"), 400, "BadRequest"),
        ("POST", "/version".to_owned(), 405, "MethodNotAllowed"),
        ("PUT", "/metrics".to_owned(), 405, "MethodNotAllowed"),
        (
            "DELETE",
            "/apis/topology.node.k8s.io/v1alpha2/watch/noderesourcetopologies".to_owned(),
            405,
            "MethodNotAllowed",
        ),
        ("GET", format!("{BASE}/worker-0/status/extra"), 404, "NotFound"),
        ("GET", "/openapi/v3/apis/other/v1".to_owned(), 404, "NotFound"),
    ] {
        let answer = request(address, method, &path, "", b"").await;
        assert_eq!(answer.code, code, "{method} {path}");
        let content_type = answer.headers("content-type").concat();
        assert!(content_type.starts_with("application/json"), "{method} {path}: {content_type}");
        let status = answer.json();
        assert_eq!(status["kind"], "Status", "{method} {path}: {status}");
        assert_eq!(status["code"], code, "{method} {path}: {status}");
        assert_eq!(status["reason"], reason, "{method} {path}: {status}");
        assert!(!status["message"].as_str().unwrap().is_empty(), "{method} {path}: {status}");
    }
}

/// kube-apiserver decodes query parameters with apimachinery's conversions, which take the first
/// value of a single-valued option and every value of `dryRun`: a repeated parameter is no error.
#[tokio::test]
async fn a_repeated_query_parameter_counts_once_with_its_first_value() {
    let address = serve(Limits::default()).await;
    create(address, "worker-0").await;
    create(address, "worker-1").await;
    let list = |query: &'static str| async move {
        let answer = request(address, "GET", &format!("{BASE}?{query}"), "", b"").await;
        assert_eq!(answer.code, 200, "{query}: {:?}", String::from_utf8_lossy(&answer.body));
        answer.json()
    };
    assert_eq!(list("limit=1&limit=2").await["items"].as_array().unwrap().len(), 1);
    assert_eq!(list("limit=2&limit=1").await["items"].as_array().unwrap().len(), 2);
    let named = list("fieldSelector=metadata.name%3Dworker-1&fieldSelector=metadata.name%3Dworker-0").await;
    assert_eq!(named["items"][0]["metadata"]["name"], "worker-1", "{named}");
    assert_eq!(named["items"].as_array().unwrap().len(), 1, "{named}");
    // `watch=false` first: a list, answered at once.
    assert_eq!(list("watch=false&watch=true").await["kind"], "NodeResourceTopologyList");

    // Every dryRun value counts: all `All` is a dry run.
    let body = serde_json::to_vec(&nrt("worker-2", 30)).unwrap();
    let dry =
        request(address, "POST", &format!("{BASE}?dryRun=All&dryRun=All"), "content-type: application/json\r\n", &body)
            .await;
    assert_eq!(dry.code, 201, "{:?}", String::from_utf8_lossy(&dry.body));
    let absent = request(address, "GET", &format!("{BASE}/worker-2"), "", b"").await;
    assert_eq!(absent.code, 404, "a dry run stores nothing");
}

#[tokio::test]
async fn a_foreign_continue_token_is_not_called_malformed_base64() {
    let address = serve(Limits::default()).await;
    // Valid base64 of something that is not a list position (and with trailing bits set, which
    // kube-apiserver's decoder ignores).
    let answer = request(address, "GET", &format!("{BASE}?limit=1&continue=aGVsbG8gd29ybGR"), "", b"").await;
    assert_eq!(answer.code, 400);
    let message = answer.json()["message"].as_str().unwrap().to_owned();
    assert!(message.starts_with("continue key is not valid: "), "{message}");
    assert!(!message.contains("base64"), "{message}");
}

#[tokio::test]
async fn a_watch_whose_client_stops_reading_is_ended() {
    let limits = Limits {
        watch_buffer_bytes: 64 * 1024,
        watch_blocked_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let address = serve(limits).await;
    create(address, "worker-0").await;

    // A watch whose client never reads a byte of the answer.
    let mut stalled = TcpStream::connect(address).await.unwrap();
    stalled.write_all(format!("GET {BASE}?watch=true HTTP/1.1\r\nhost: localhost\r\n\r\n").as_bytes()).await.unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !metrics(address).await.contains("numaresources_apiserver_watches 1") {
        assert!(tokio::time::Instant::now() < deadline, "the watch never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Changes far larger than the socket buffers can absorb: 200 KB each, 200 of them.
    let filler = "x".repeat(200 * 1024);
    for i in 0..200 {
        let patch = json!({"attributes": [{"name": "filler", "value": format!("{i}{filler}")}]});
        let answer = request(
            address,
            "PATCH",
            &format!("{BASE}/worker-0"),
            "content-type: application/merge-patch+json\r\n",
            &serde_json::to_vec(&patch).unwrap(),
        )
        .await;
        assert_eq!(answer.code, 200);
        let text = metrics(address).await;
        if text.contains("numaresources_apiserver_terminated_watches_total 1") {
            break;
        }
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = metrics(address).await;
        if text.contains("numaresources_apiserver_watches 0") {
            assert!(text.contains("numaresources_apiserver_terminated_watches_total 1"), "{text}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the stalled watch is still open: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stalled);
}

/// A URI or headers past our bounds (but inside hyper's own) get a Status, not hyper's empty
/// answer.
#[tokio::test]
async fn an_oversized_uri_or_head_is_answered_with_a_status() {
    use numaresources_apiserver::request_head::{MAX_REQUEST_HEAD_BYTES, MAX_REQUEST_URI_BYTES};
    let address = serve(Limits::default()).await;
    let selector = "a".repeat(MAX_REQUEST_URI_BYTES);
    let long_uri = request(address, "GET", &format!("{BASE}?labelSelector={selector}"), "", b"").await;
    let padding = "b".repeat(MAX_REQUEST_HEAD_BYTES / 2);
    let big_head = request(address, "GET", BASE, &format!("x-pad-1: {padding}\r\nx-pad-2: {padding}\r\n"), b"").await;
    for (answer, code) in [(long_uri, 414), (big_head, 431)] {
        assert_eq!(answer.code, code, "{}", answer.head);
        let status = answer.json();
        assert_eq!(status["kind"], "Status", "{status}");
        assert_eq!(status["code"], code, "{status}");
        assert!(status["message"].as_str().unwrap().contains("more than the limit"), "{status}");
        assert!(status.get("reason").is_none(), "Kubernetes names no reason for {code}: {status}");
    }
    // Just under both bounds, the request is served.
    let fits = "a".repeat(MAX_REQUEST_URI_BYTES - BASE.len() - 100);
    let answer = request(address, "GET", &format!("{BASE}?x={fits}"), "", b"").await;
    assert_eq!(answer.code, 200, "{}", answer.head);
}
