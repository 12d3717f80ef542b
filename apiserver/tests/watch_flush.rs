//! A watch's writes over a real socket (the router served by hyper on loopback, HTTP/1.1 read
//! by hand, chunk by chunk): changes that come within the flush interval after a write go out
//! together in one chunk, and a change after a quiet spell goes out alone, at once.
//!
//! The flush interval is set to its largest (1 s) so that the three changes made one after the
//! other surely come within it; nothing asserts how long anything took.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::time::Duration;

use numaresources_apiserver::Limits;
use support::BASE;
use support::socket::{Exchange, create, serve};

/// The chunks of a chunked HTTP/1.1 answer received so far (complete ones), as text.
fn chunks(raw: &[u8]) -> Vec<String> {
    let Some(start) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { return Vec::new() };
    let mut rest = &raw[start + 4..];
    let mut chunks = Vec::new();
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 || rest.len() < end + 2 + size {
            break;
        }
        chunks.push(String::from_utf8_lossy(&rest[end + 2..end + 2 + size]).into_owned());
        rest = &rest[end + 4 + size..];
    }
    chunks
}

fn chunk_naming<'a>(chunks: &'a [String], name: &str) -> &'a str {
    let needle = format!("\"name\":\"{name}\"");
    chunks.iter().find(|chunk| chunk.contains(&needle)).map_or("", String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_within_the_flush_interval_go_out_in_one_chunk() {
    let limits = Limits { watch_flush_interval: Duration::from_secs(1), ..Limits::default() };
    let address = serve(limits).await;
    create(address, "before").await;
    let mut watch = Exchange::get(address, &format!("{BASE}?watch=true")).await;
    // The current state, written at once (nothing was written before).
    assert!(watch.read_until("\"name\":\"before\"").await, "{}", watch.text());

    // Three changes right after that write: they wait for the interval and go out together.
    for name in ["b-1", "b-2", "b-3"] {
        create(address, name).await;
    }
    assert!(watch.read_until("\"name\":\"b-3\"").await, "{}", watch.text());
    let received = chunks(watch.text().as_bytes());
    let batch = chunk_naming(&received, "b-1");
    assert!(
        batch.contains("\"name\":\"b-2\"") && batch.contains("\"name\":\"b-3\""),
        "one chunk holds the three changes: {received:#?}"
    );
    assert_eq!(batch.lines().count(), 3, "one line per change: {batch}");
    assert!(batch.lines().all(|line| line.starts_with("{\"type\":\"ADDED\"")), "{batch}");

    // After a quiet spell longer than the interval, a change goes out alone.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    create(address, "after").await;
    assert!(watch.read_until("\"name\":\"after\"").await, "{}", watch.text());
    let received = chunks(watch.text().as_bytes());
    assert_eq!(chunk_naming(&received, "after").lines().count(), 1, "{received:#?}");
}
