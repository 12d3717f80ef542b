//! Watch timeouts and list options over a real socket (the router served by hyper on loopback,
//! HTTP/1.1 written by hand): a `timeoutSeconds` too large to add to a clock panicked the
//! handler and dropped the connection with no answer; `timeoutSeconds=0` ended the watch at
//! once where kube-apiserver reads it as "no timeout given"; options kube-apiserver refuses on
//! a list were accepted.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use numaresources_apiserver::{AppState, Store, router};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BASE: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";
const LEGACY_WATCH: &str = "/apis/topology.node.k8s.io/v1alpha2/watch/noderesourcetopologies";
/// How long a read may wait for what must come before the test fails (a hang guard, not a
/// figure: everything here happens within milliseconds).
const PATIENCE: Duration = Duration::from_secs(30);

async fn server() -> (SocketAddr, Arc<AppState>) {
    let state = Arc::new(AppState::new(Arc::new(Store::starting_at(1000, 100)), "0.1.0", "test"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, state)
}

/// One HTTP/1.1 exchange whose answer is read as it streams.
struct Exchange {
    stream: TcpStream,
    received: Vec<u8>,
    closed: bool,
}

impl Exchange {
    async fn send(address: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Self {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        Self { stream, received: Vec::new(), closed: false }
    }

    /// Reads until what was received contains `needle` (true) or the server closes the
    /// connection without sending it (false).
    async fn read_until(&mut self, needle: &str) -> bool {
        let found = |received: &[u8]| String::from_utf8_lossy(received).contains(needle);
        while !found(&self.received) && !self.closed {
            let mut buffer = [0u8; 4096];
            let read = tokio::time::timeout(PATIENCE, self.stream.read(&mut buffer))
                .await
                .unwrap_or_else(|_| panic!("nothing more within {PATIENCE:?}; waiting for {needle:?}"))
                .unwrap_or(0);
            self.closed = read == 0;
            self.received.extend_from_slice(&buffer[..read]);
        }
        found(&self.received)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.received).into_owned()
    }
}

fn nrt(name: &str) -> Value {
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "zones": [{"name": "node-0", "type": "Node",
                   "resources": [{"name": "cpu", "capacity": 4, "allocatable": 4, "available": 4}]}]
    })
}

async fn create(address: SocketAddr, name: &str) {
    let mut exchange = Exchange::send(address, "POST", BASE, Some(&nrt(name))).await;
    assert!(exchange.read_until("HTTP/1.1 201").await, "{}", exchange.text());
}

/// A watch that answers 200 and streams the current state, then a change made after it began.
async fn assert_watch_streams(address: SocketAddr, path: &str, change: &str) {
    let mut watch = Exchange::send(address, "GET", path, None).await;
    assert!(watch.read_until("HTTP/1.1 200").await, "{path}: no answer: {:?}", watch.text());
    assert!(watch.read_until("\"type\":\"ADDED\"").await, "{path}: {}", watch.text());
    create(address, change).await;
    let change = format!("\"name\":\"{change}\"");
    assert!(watch.read_until(&change).await, "{path}: the watch ended before the change: {}", watch.text());
}

#[tokio::test]
async fn a_timeout_too_large_for_the_clock_is_clamped_never_a_panic() {
    let (address, _) = server().await;
    create(address, "existing").await;
    for (path, change) in [
        (format!("{BASE}?watch=1&timeoutSeconds=9223372036854775807"), "after-huge"),
        (format!("{BASE}?watch=true&timeoutSeconds=18446744073709551615"), "after-u64-max"),
        (format!("{LEGACY_WATCH}?timeoutSeconds=9223372036854775807"), "after-legacy"),
    ] {
        assert_watch_streams(address, &path, change).await;
    }
    // The legacy single-object watch takes the same path.
    let one = format!("{LEGACY_WATCH}/existing?timeoutSeconds=9223372036854775807");
    let mut watch = Exchange::send(address, "GET", &one, None).await;
    assert!(watch.read_until("HTTP/1.1 200").await, "{one}: no answer: {:?}", watch.text());
    assert!(watch.read_until("\"name\":\"existing\"").await, "{one}: {}", watch.text());
    // Beyond any integer: a 400 Status naming the parameter, as kube-apiserver answers.
    let mut refused = Exchange::send(address, "GET", &format!("{BASE}?watch=1&timeoutSeconds=1e99"), None).await;
    assert!(refused.read_until("HTTP/1.1 400").await, "{}", refused.text());
    assert!(refused.read_until("timeoutSeconds").await, "{}", refused.text());
}

#[tokio::test]
async fn timeout_seconds_zero_means_no_timeout_given() {
    let (address, _) = server().await;
    create(address, "existing").await;
    assert_watch_streams(address, &format!("{BASE}?watch=true&timeoutSeconds=0"), "after-zero").await;
    assert_watch_streams(address, &format!("{LEGACY_WATCH}?timeoutSeconds=0"), "after-zero-legacy").await;
}

/// kube-apiserver's `ValidateListOptions`: 422 `ListOptions.meta.k8s.io "" is invalid`.
#[tokio::test]
async fn lists_refuse_send_initial_events_and_an_exact_match_at_zero() {
    let (address, _) = server().await;
    for (query, message) in [
        ("sendInitialEvents=true", "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"),
        ("sendInitialEvents=false", "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            "resourceVersionMatch: Forbidden: resourceVersionMatch \\\"exact\\\" is forbidden for resourceVersion \\\"0\\\"",
        ),
        (
            "resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
    ] {
        let mut list = Exchange::send(address, "GET", &format!("{BASE}?{query}"), None).await;
        assert!(list.read_until("HTTP/1.1 422").await, "{query}: {}", list.text());
        let whole = format!("ListOptions.meta.k8s.io \\\"\\\" is invalid: {message}");
        assert!(list.read_until(&whole).await, "{query}: {}", list.text());
        assert!(list.text().contains("\"reason\":\"Invalid\""), "{}", list.text());
    }
    // The same options are fine where kube-apiserver takes them.
    let streaming =
        format!("{BASE}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan");
    let mut watch = Exchange::send(address, "GET", &streaming, None).await;
    assert!(watch.read_until("HTTP/1.1 200").await, "{}", watch.text());
    let mut list =
        Exchange::send(address, "GET", &format!("{BASE}?resourceVersion=0&resourceVersionMatch=NotOlderThan"), None)
            .await;
    assert!(list.read_until("HTTP/1.1 200").await, "{}", list.text());
}
