//! Watch timeouts and list options over a real socket (the router served by hyper on loopback,
//! HTTP/1.1 written by hand): a `timeoutSeconds` too large to add to a clock panicked the
//! handler and dropped the connection with no answer; `timeoutSeconds=0` ended the watch at
//! once where kube-apiserver reads it as "no timeout given"; options kube-apiserver refuses on
//! a list were accepted.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use numaresources_apiserver::Limits;
use support::BASE;
use support::socket::{Exchange, create, serve};

const LEGACY_WATCH: &str = "/apis/topology.node.k8s.io/v1alpha2/watch/noderesourcetopologies";

/// A watch that answers 200 and streams the current state, then a change made after it began.
async fn assert_watch_streams(address: std::net::SocketAddr, path: &str, change: &str) {
    let mut watch = Exchange::get(address, path).await;
    assert!(watch.read_until("HTTP/1.1 200").await, "{path}: no answer: {:?}", watch.text());
    assert!(watch.read_until("\"type\":\"ADDED\"").await, "{path}: {}", watch.text());
    create(address, change).await;
    let change = format!("\"name\":\"{change}\"");
    assert!(watch.read_until(&change).await, "{path}: the watch ended before the change: {}", watch.text());
}

#[tokio::test]
async fn a_timeout_too_large_for_the_clock_is_clamped_never_a_panic() {
    let address = serve(Limits::default()).await;
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
    let mut watch = Exchange::get(address, &one).await;
    assert!(watch.read_until("HTTP/1.1 200").await, "{one}: no answer: {:?}", watch.text());
    assert!(watch.read_until("\"name\":\"existing\"").await, "{one}: {}", watch.text());
    // Beyond any integer: a 400 Status naming the parameter, as kube-apiserver answers.
    let mut refused = Exchange::get(address, &format!("{BASE}?watch=1&timeoutSeconds=1e99")).await;
    assert!(refused.read_until("HTTP/1.1 400").await, "{}", refused.text());
    assert!(refused.read_until("timeoutSeconds").await, "{}", refused.text());
}

#[tokio::test]
async fn timeout_seconds_zero_means_no_timeout_given() {
    let address = serve(Limits::default()).await;
    create(address, "existing").await;
    assert_watch_streams(address, &format!("{BASE}?watch=true&timeoutSeconds=0"), "after-zero").await;
    assert_watch_streams(address, &format!("{LEGACY_WATCH}?timeoutSeconds=0"), "after-zero-legacy").await;
}

/// kube-apiserver's `ValidateListOptions`: 422 `ListOptions.meta.k8s.io "" is invalid`.
#[tokio::test]
async fn lists_refuse_send_initial_events_and_an_exact_match_at_zero() {
    let address = serve(Limits::default()).await;
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
        let mut list = Exchange::get(address, &format!("{BASE}?{query}")).await;
        assert!(list.read_until("HTTP/1.1 422").await, "{query}: {}", list.text());
        let whole = format!("ListOptions.meta.k8s.io \\\"\\\" is invalid: {message}");
        assert!(list.read_until(&whole).await, "{query}: {}", list.text());
        assert!(list.text().contains("\"reason\":\"Invalid\""), "{}", list.text());
    }
    // The same options are fine where kube-apiserver takes them.
    let streaming =
        format!("{BASE}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan");
    let mut watch = Exchange::get(address, &streaming).await;
    assert!(watch.read_until("HTTP/1.1 200").await, "{}", watch.text());
    let mut list = Exchange::get(address, &format!("{BASE}?resourceVersion=0&resourceVersionMatch=NotOlderThan")).await;
    assert!(list.read_until("HTTP/1.1 200").await, "{}", list.text());
}
