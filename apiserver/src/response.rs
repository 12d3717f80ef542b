//! Building answers every handler shares (discovery, OpenAPI and the REST handlers).

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue};

/// A JSON body with the right content type.
pub fn json_response(status: StatusCode, body: Bytes) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
