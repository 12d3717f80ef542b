//! The router called in process (no sockets): one request and its whole answer, or a watch's
//! events as they come.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, BodyDataStream};
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use numaresources_apiserver::{AppState, Store};
use serde_json::Value;
use tower::ServiceExt;

use super::PATIENCE;

/// A new server's state: an empty store at revision 1000 that keeps 100 changes.
pub fn state() -> AppState {
    AppState::new(Arc::new(Store::starting_at(1000, 100)), "0.1.0", "test")
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON: `Null` when empty, a string when it is not JSON.
    pub body: Value,
    pub bytes: Bytes,
}

impl Answer {
    /// A header's value, empty when it is missing.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }
}

/// Sends one request through `app` and reads the whole answer.
pub async fn call<M>(app: &Router, method: M, uri: &str, headers: &[(&str, &str)], body: Option<Value>) -> Answer
where
    Method: TryFrom<M>,
    <Method as TryFrom<M>>::Error: Into<http::Error>,
{
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(serde_json::to_vec(&b).unwrap()));
    let response = tokio::time::timeout(PATIENCE, app.clone().oneshot(request.body(body).unwrap()))
        .await
        .expect("the request hung; likely deadlocked")
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    Answer { status, headers, body, bytes }
}

/// A plain `GET` of `uri`.
pub async fn get(app: &Router, uri: &str) -> Answer {
    call(app, Method::GET, uri, &[], None).await
}

/// The next `count` events of a watch's `stream`, one JSON object a line (fewer if it ends).
pub async fn events(stream: &mut BodyDataStream, count: usize) -> Vec<Value> {
    let mut buffer = Vec::new();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        while out.len() < count {
            let Some(chunk) = stream.next().await else { break };
            buffer.extend_from_slice(&chunk.unwrap());
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                out.push(serde_json::from_slice(&line).unwrap());
            }
        }
    })
    .await
    .expect("watch events did not arrive; likely deadlocked");
    out
}
