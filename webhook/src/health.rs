//! Probes and metrics. `/readyz` means "answers are correct": the caches routing reads (the
//! scheduler, the namespaces) have completed their first list. `/healthz` and `/livez` only say the process serves.

use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue};

use crate::Webhook;

/// `/healthz`, `/livez`, `/readyz`.
pub(crate) fn probes() -> Router<Arc<Webhook>> {
    Router::new().route("/healthz", get(alive)).route("/livez", get(alive)).route("/readyz", get(readyz))
}

async fn alive() -> Response {
    text(StatusCode::OK, "ok".to_owned())
}

/// kube-apiserver's format: `ok`, or one `[+]`/`[-]` line per check (always with `?verbose`).
async fn readyz(State(webhook): State<Arc<Webhook>>, RawQuery(query): RawQuery) -> Response {
    let checks = webhook.cluster.sync_state();
    let ready = checks.iter().all(|(_, ok)| *ok);
    let verbose = query.is_some_and(|q| q.split('&').any(|p| p == "verbose" || p.starts_with("verbose=")));
    let status = if ready { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR };
    if ready && !verbose {
        return text(status, "ok".to_owned());
    }
    let mut body = String::from("[+]ping ok\n");
    for (name, ok) in checks {
        body.push_str(&if ok { format!("[+]{name} ok\n") } else { format!("[-]{name} failed: not synced yet\n") });
    }
    body.push_str(if ready { "readyz check passed\n" } else { "readyz check failed\n" });
    text(status, body)
}

pub(crate) async fn metrics(State(webhook): State<Arc<Webhook>>) -> Response {
    match webhook.metrics.encode() {
        Ok(body) => {
            let mut response = body.into_response();
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            );
            response
        }
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {error}\n")),
    }
}

fn text(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}
