//! The health checks: `/healthz`, `/livez`, `/readyz` (kube's `[+]`/`[-]` format) and named
//! readiness checks.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::extract::{Path, RawQuery as AxumRawQuery, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue};

use crate::AppState;

/// Named readiness checks: `/readyz` is 200 only when every one passes. A check that was never
/// set counts as passing, so components register theirs as failing until they are ready.
#[derive(Debug, Default)]
pub struct Readiness {
    checks: RwLock<BTreeMap<String, bool>>,
}

impl Readiness {
    /// Records the state of a check.
    pub fn set(&self, name: &str, ok: bool) {
        self.checks.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.to_owned(), ok);
    }

    /// The state of one check (None: never set, which counts as passing).
    pub fn get(&self, name: &str) -> Option<bool> {
        self.checks.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(name).copied()
    }

    fn snapshot(&self) -> BTreeMap<String, bool> {
        self.checks.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

pub async fn healthz(query: AxumRawQuery) -> Response {
    checks_response(&BTreeMap::new(), query.0.as_deref())
}

pub async fn livez(query: AxumRawQuery) -> Response {
    checks_response(&BTreeMap::new(), query.0.as_deref())
}

pub async fn readyz(State(state): State<Arc<AppState>>, query: AxumRawQuery) -> Response {
    checks_response(&state.readiness.snapshot(), query.0.as_deref())
}

/// `/<endpoint>/<check>`: one check.
pub async fn check(State(state): State<Arc<AppState>>, Path(check): Path<String>) -> Response {
    let checks = state.readiness.snapshot();
    match (check.as_str(), checks.get(&check)) {
        ("ping", _) | (_, Some(true)) => text(StatusCode::OK, "ok".into()),
        (_, Some(false)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("[-]{check} failed: not ready\n")),
        (_, None) => text(StatusCode::NOT_FOUND, format!("no check named {check:?}\n")),
    }
}

fn checks_response(checks: &BTreeMap<String, bool>, query: Option<&str>) -> Response {
    let verbose = query.is_some_and(|q| q.split('&').any(|p| p == "verbose" || p.starts_with("verbose=")));
    let healthy = checks.values().all(|ok| *ok);
    let status = if healthy { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR };
    if !verbose && healthy {
        return text(status, "ok".into());
    }
    let mut body = String::from("[+]ping ok\n");
    for (name, ok) in checks {
        if *ok {
            body.push_str(&format!("[+]{name} ok\n"));
        } else {
            body.push_str(&format!("[-]{name} failed: not ready\n"));
        }
    }
    body.push_str(if healthy { "check passed\n" } else { "check failed\n" });
    text(status, body)
}

fn text(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}
