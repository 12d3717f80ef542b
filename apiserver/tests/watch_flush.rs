//! A watch's writes, on tokio's paused clock: changes that come within the flush interval after
//! a write wait for it and go out together, as one piece of the body (one chunk on the wire),
//! and a change after a quiet spell goes out alone, at once.
//!
//! The clock only moves when every task waits, so the three changes made one after the other
//! surely come within the interval, and the quiet spell is exact; nothing here depends on how
//! fast the machine is.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, BodyDataStream};
use futures_util::StreamExt;
use http::{Method, Request};
use numaresources_apiserver::{Limits, router};
use support::in_process::{call, state};
use support::{BASE, nrt};
use tokio::time::Instant;
use tower::ServiceExt;

const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

async fn create(app: &Router, name: &str) {
    let answer = call(app, Method::POST, BASE, &[("content-type", "application/json")], Some(nrt(name, 30))).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
}

/// The next piece of the watch's body, as text.
async fn next_piece(pieces: &mut BodyDataStream) -> String {
    let piece = pieces.next().await.expect("the watch ended").unwrap();
    String::from_utf8(piece.to_vec()).unwrap()
}

/// The object names of a piece's lines, each line checked to be an ADDED event.
fn added_names(piece: &str) -> Vec<String> {
    piece
        .lines()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(event["type"], "ADDED", "{line}");
            event["object"]["metadata"]["name"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn changes_within_the_flush_interval_go_out_in_one_piece() {
    let mut state = state();
    state.limits = Limits { watch_flush_interval: FLUSH_INTERVAL, ..Limits::default() };
    let app = router(Arc::new(state));
    create(&app, "before").await;
    let request = Request::get(format!("{BASE}?watch=true")).body(Body::empty()).unwrap();
    let mut pieces = app.clone().oneshot(request).await.unwrap().into_body().into_data_stream();

    // The current state, written at once (nothing was written before).
    assert_eq!(added_names(&next_piece(&mut pieces).await), ["before"]);
    let state_written = Instant::now();

    // Three changes right after that write: they wait for the interval and go out together.
    for name in ["b-1", "b-2", "b-3"] {
        create(&app, name).await;
    }
    assert_eq!(added_names(&next_piece(&mut pieces).await), ["b-1", "b-2", "b-3"]);
    assert!(state_written.elapsed() >= FLUSH_INTERVAL, "the batch waited for the interval after the last write");

    // After a quiet spell longer than the interval, a change goes out alone, without waiting.
    tokio::time::sleep(FLUSH_INTERVAL + FLUSH_INTERVAL / 2).await;
    let quiet_until = Instant::now();
    create(&app, "after").await;
    assert_eq!(added_names(&next_piece(&mut pieces).await), ["after"]);
    assert_eq!(quiet_until.elapsed(), Duration::ZERO, "a change after a quiet spell is not held back");
}
