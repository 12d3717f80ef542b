//! Conditional GETs of the documents rendered once (discovery, OpenAPI): an ETag per document.

use std::hash::{DefaultHasher, Hash, Hasher};

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, ETAG, HeaderValue, IF_NONE_MATCH};
use http::{HeaderMap, StatusCode};

/// The hash of a rendered document, in hex: its ETag's text.
pub(crate) fn hash(bytes: &Bytes) -> String {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// 304 when the client already has this version, else the body with its ETag.
pub(crate) fn with_etag(headers: &HeaderMap, body: Bytes, etag: &str, content_type: &'static str) -> Response {
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
