//! Asking our server whether it holds this node's object, so that a cold start (every replica
//! restarted, the store empty) or a deletion is repaired within seconds, not at the heartbeat.
//!
//! The agent publishes only on change and at its heartbeat, a minute apart. Holding a watch
//! open on our server per agent would notice a loss at once but cost a replica ≈40 KiB per
//! exporter (see [`crate::agent::own_object`]); a question every [`HELD_INTERVAL`] over plain
//! HTTP on the admin port costs a connection that lives for one round trip and a map lookup.
//! A `404` saying [`NOT_HELD`] reports the object lost, and the agent publishes again at once
//! (unless it has published since the question was asked). Every other answer, or none, says
//! nothing: the write path has its own retries and fallback, and this is only a hint.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use numaresources_api::direct_write::{HELD, NOT_HELD, held_path};
use tokio::time::Instant;

use crate::agent::own_object::Lost;

/// How often an agent asks.
pub const HELD_INTERVAL: Duration = Duration::from_secs(5);

/// How long one question may take: an answer is a lookup, so a slow one means a server too
/// busy to be asked more.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of an answer's body read (the answers are a few words).
const MAX_ANSWER_BYTES: usize = 256;

/// What the server said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Held,
    NotHeld,
    /// Anything else: a replica that cannot tell, a server without the question, no answer.
    CannotTell(String),
}

/// Asks `admin_url` (`http://host:port`) about `node`'s object.
pub async fn ask(client: &Client<HttpConnector, Empty<Bytes>>, admin_url: &http::Uri, node: &str) -> Answer {
    let Ok(uri) = format!("{}{}", admin_url.to_string().trim_end_matches('/'), held_path(node)).parse::<http::Uri>()
    else {
        return Answer::CannotTell(format!("{node:?} makes no URL"));
    };
    let exchange = async {
        let response = client.get(uri).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES).collect().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body.to_bytes()))
    };
    match tokio::time::timeout(ASK_TIMEOUT, exchange).await {
        Err(_) => Answer::CannotTell(format!("no answer within {ASK_TIMEOUT:?}")),
        Ok(Err(error)) => Answer::CannotTell(error),
        Ok(Ok((status, body))) => judge(status, &body),
    }
}

/// The answer an HTTP status and body make.
pub(crate) fn judge(status: http::StatusCode, body: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(body);
    match (status.as_u16(), text.trim()) {
        (200, HELD) => Answer::Held,
        (404, NOT_HELD) => Answer::NotHeld,
        (code, text) => Answer::CannotTell(format!("{code} {text:?}")),
    }
}

/// A client that keeps no connection between questions: a fleet's idle connections would
/// cost the server more than opening one every few seconds.
pub fn client() -> Client<HttpConnector, Empty<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(ASK_TIMEOUT));
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build(connector)
}

/// This node's offset within the interval, so a fleet started together (a rollout) does not
/// ask in one burst.
fn first_delay(node: &str, interval: Duration) -> Duration {
    let hash = xxhash_rust::xxh64::xxh64(node.as_bytes(), 0);
    interval.mul_f64((hash >> 11) as f64 / (1u64 << 53) as f64)
}

/// Asks about `node`'s object every `interval` until dropped, reporting each "not held" to
/// `lost` with the instant the question was asked.
pub async fn follow(admin_url: http::Uri, node: String, lost: Arc<Lost>, interval: Duration) {
    let client = client();
    tokio::time::sleep(first_delay(&node, interval)).await;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let asked = Instant::now();
        match ask(&client, &admin_url, &node).await {
            Answer::Held => {}
            Answer::NotHeld => {
                tracing::debug!(%node, "the API server does not hold this node's topology; publishing again");
                lost.report(asked);
            }
            Answer::CannotTell(why) => {
                tracing::debug!(%node, %why, "could not ask whether this node's topology is held")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn only_the_servers_own_words_count() {
        assert_eq!(judge(StatusCode::OK, b"held"), Answer::Held);
        assert_eq!(judge(StatusCode::NOT_FOUND, b"not held\n"), Answer::NotHeld);
        // A server that predates the question answers a bare 404: no reason to republish.
        assert!(matches!(judge(StatusCode::NOT_FOUND, b""), Answer::CannotTell(_)));
        assert!(matches!(judge(StatusCode::SERVICE_UNAVAILABLE, b"not in sync"), Answer::CannotTell(_)));
        assert!(matches!(judge(StatusCode::OK, b"<html>"), Answer::CannotTell(_)));
    }

    #[test]
    fn a_fleet_asks_spread_over_the_interval() {
        let interval = Duration::from_secs(5);
        let delays: Vec<Duration> = (0..1000).map(|i| first_delay(&format!("worker-{i}"), interval)).collect();
        assert!(delays.iter().all(|d| *d < interval));
        let first_half = delays.iter().filter(|d| **d < interval / 2).count();
        assert!((400..600).contains(&first_half), "{first_half} of 1000 in the first half");
    }
}
