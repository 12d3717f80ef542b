//! Every client error answer as a `metav1.Status`, including the ones our handlers never see: the
//! router's own 404 and 405, and the extractors' plain-text rejections (a malformed
//! query parameter, a path that does not decode). kubectl and client-go read the message and
//! reason of a Status; from an empty or plain-text body they show only the HTTP code.

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::CONTENT_TYPE;
use http::{Method, StatusCode};
use http_body_util::BodyExt;

use crate::AppState;
use crate::status::ApiError;

/// The most of a plain-text error body kept as the Status message (the rejections' texts are
/// one line).
const MAX_MESSAGE_BYTES: usize = 1024;

/// Replaces an error answer that is not JSON by the Status kube-apiserver would send.
pub(crate) async fn errors_as_status(
    state: &AppState,
    request: Request,
    next: impl AsyncFnOnce(Request) -> Response,
) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next(request).await;
    let status = response.status();
    // Server errors are our handlers' own (already Statuses) or health checks', which answer in
    // plain text as kube-apiserver's do.
    if !status.is_client_error() || is_json(&response) {
        return response;
    }
    let text = message(response.into_body()).await;
    let error = match status {
        StatusCode::NOT_FOUND => ApiError::no_such_path(&path),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::method_not_allowed(method.as_str(), &path),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(state.limits.max_body_bytes),
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::invalid_options(text),
        _ => ApiError::bad_request(if text.is_empty() { default_message(&method, status) } else { text }),
    };
    error.into_response()
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// The body's text, at most [`MAX_MESSAGE_BYTES`] of it.
async fn message(body: Body) -> String {
    let limited = http_body_util::Limited::new(body, MAX_MESSAGE_BYTES);
    match limited.collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).trim().to_owned(),
        Err(_) => String::new(),
    }
}

fn default_message(method: &Method, status: StatusCode) -> String {
    format!("{method} request refused: {status}")
}
