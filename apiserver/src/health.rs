//! Non-resource endpoints: discovery, `/version`, OpenAPI, and the health checks.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::extract::{Path, Query, RawQuery as AxumRawQuery, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, ETAG, HeaderValue, IF_NONE_MATCH};
use http::{HeaderMap, StatusCode};

use crate::AppState;
use crate::discovery::{aggregated_media_type, wants_aggregated};
use crate::negotiate::{OPENAPI_V2_PROTOBUF, OpenApiForm, openapi_form};
use crate::query::{FieldTerm, RawQuery};
use crate::rest::json_response;
use crate::status::ApiError;

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

pub async fn apis(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let d = &state.discovery;
    match wants_aggregated(accept) {
        None => json_response(StatusCode::OK, d.group_list.clone()),
        Some(v2beta1) => {
            let body = if v2beta1 { d.aggregated_v2beta1.clone() } else { d.aggregated_v2.clone() };
            with_etag(&headers, body, &d.etag, aggregated_media_type(v2beta1))
        }
    }
}

pub async fn group(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.discovery.group.clone())
}

/// The aggregator's availability probe: never touches the store.
pub async fn resources(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.discovery.resource_list.clone())
}

pub async fn version(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.discovery.version.clone())
}

pub async fn core(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.discovery.core.clone())
}

pub async fn openapi_v2(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let docs = &state.openapi;
    let mut response = match openapi_form(headers.get(ACCEPT).and_then(|v| v.to_str().ok()), true)? {
        OpenApiForm::Json => with_etag(&headers, docs.v2.clone(), &docs.v2_etag, "application/json"),
        OpenApiForm::Protobuf => {
            with_etag(&headers, docs.v2_protobuf.clone(), &docs.v2_protobuf_etag, OPENAPI_V2_PROTOBUF)
        }
    };
    // One URL, two forms: a cache (kubectl keeps one on disk) must key on Accept too.
    response.headers_mut().insert(http::header::VARY, HeaderValue::from_static("Accept"));
    Ok(response)
}

pub async fn openapi_v3_index(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.openapi.v3_index.clone())
}

pub async fn openapi_v3(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    openapi_form(headers.get(ACCEPT).and_then(|v| v.to_str().ok()), false)?;
    let mut response =
        with_etag(&headers, state.openapi.v3_group_version.clone(), &state.openapi.v3_etag, "application/json");
    // The hash in the URL pins the content, so clients may cache it for good.
    response.headers_mut().insert("cache-control", HeaderValue::from_static("public, immutable"));
    Ok(response)
}

/// The legacy `/watch/<plural>` prefix: a watch on the collection.
pub async fn legacy_watch(
    state: State<Arc<AppState>>,
    Query(mut raw): Query<RawQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    raw.force_watch();
    crate::rest::list_or_watch(state, Query(raw), headers).await
}

/// The legacy `/watch/<plural>/<name>` prefix: a watch on one object.
pub async fn legacy_watch_one(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(mut raw): Query<RawQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    raw.force_watch();
    let mut options = crate::query::Options::try_from(raw)?;
    options.fields.push(FieldTerm { value: name, negated: false });
    let representation = crate::negotiate::negotiate(headers.get(ACCEPT).and_then(|v| v.to_str().ok()))?;
    crate::watch::serve(&state, options, representation)
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

/// 304 when the client already has this version, else the body with its ETag.
fn with_etag(headers: &HeaderMap, body: Bytes, etag: &str, content_type: &'static str) -> Response {
    let etag_value = HeaderValue::from_str(etag).unwrap_or(HeaderValue::from_static("\"\""));
    let matches = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*"));
    let mut response =
        if matches { StatusCode::NOT_MODIFIED.into_response() } else { (StatusCode::OK, body).into_response() };
    let out = response.headers_mut();
    out.insert(ETAG, etag_value);
    out.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
