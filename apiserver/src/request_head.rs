//! Bounds on a request's head (its URI and headers), answered with a `metav1.Status` before any
//! routing or authentication.
//!
//! hyper refuses heads past its own limits itself, with an empty body, before any service runs:
//! over HTTP/1.1 a URI above 65,534 bytes (414, fixed in hyper), a head above the connection's
//! read buffer (256 KiB, `runtime/src/serve.rs`) or more than 100 headers (431); over HTTP/2 a header
//! list above 1 MiB (431). Our bounds sit just under the HTTP/1.1 ones, so a head between the
//! two gets a Status a client can show, and over HTTP/2 (what client-go and kubectl speak over
//! TLS) so does every head up to 1 MiB. Past hyper's limits the answer stays hyper's: it is
//! written before a request exists. kube-apiserver (Go's net/http) answers those in plain text
//! too.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use crate::status::ApiError;

/// The longest request URI (path and query) answered: 414 past it. Just under hyper's fixed
/// HTTP/1.1 limit (65,534 bytes), far above any real client's (a long label selector is a few KiB).
pub const MAX_REQUEST_URI_BYTES: usize = 60 * 1024;

/// The most bytes of URI and headers (names, values and their separators) a request may carry:
/// 431 past it. Under the HTTP/1.1 read buffer of 256 KiB, which also holds the request line.
pub const MAX_REQUEST_HEAD_BYTES: usize = 240 * 1024;

/// The bytes a header line adds besides its name and value (`: ` and CRLF).
const HEADER_LINE_OVERHEAD: usize = 4;

/// Refuses a request whose head is past [`MAX_REQUEST_URI_BYTES`] or [`MAX_REQUEST_HEAD_BYTES`].
pub async fn check(request: Request, next: impl AsyncFnOnce(Request) -> Response) -> Response {
    let uri_bytes = request.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_bytes > MAX_REQUEST_URI_BYTES {
        tracing::debug!(uri_bytes, "refusing a request: URI too long");
        return ApiError::uri_too_long(uri_bytes, MAX_REQUEST_URI_BYTES).into_response();
    }
    let head_bytes = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + HEADER_LINE_OVERHEAD)
        .sum::<usize>()
        + uri_bytes;
    if head_bytes > MAX_REQUEST_HEAD_BYTES {
        tracing::debug!(head_bytes, "refusing a request: headers too large");
        return ApiError::header_fields_too_large(head_bytes, MAX_REQUEST_HEAD_BYTES).into_response();
    }
    next(request).await
}
