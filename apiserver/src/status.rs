//! Errors as `metav1.Status`, with the code and reason kube-apiserver would use, so kubectl and
//! client-go print and classify them as they do for built-in types.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue};
use numaresources_api::FieldErrors;
use numaresources_api::nrt::{GROUP, KIND, PLURAL};
use serde_json::{Value, json};

/// A failed API request.
#[derive(Debug, Clone)]
pub struct ApiError {
    code: StatusCode,
    reason: &'static str,
    message: String,
    details: Option<Value>,
    retry_after: Option<u32>,
    /// `metadata.continue` of the Status (an expired continue token's inconsistent successor).
    list_continue: Option<String>,
}

impl ApiError {
    fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None, retry_after: None, list_continue: None }
    }

    fn with_name(mut self, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": GROUP, "kind": PLURAL}));
        self
    }

    /// 400: the request itself is malformed.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// 401: credentials were presented but are not valid.
    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", message)
    }

    /// 403: the caller may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "Forbidden", message)
    }

    /// 404 for an object.
    pub fn not_found(name: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", format!("{PLURAL}.{GROUP} \"{name}\" not found")).with_name(name)
    }

    /// 404 for a path we do not serve.
    pub(crate) fn no_such_path(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 405.
    pub fn method_not_allowed(method: &str, what: &str) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", format!("{method} is not supported on {what}"))
    }

    /// 406: nothing the client accepts can be produced.
    pub(crate) fn not_acceptable(accept: &str) -> Self {
        Self::not_acceptable_of(
            accept,
            &[
                "application/json",
                "application/json;as=Table;v=v1;g=meta.k8s.io",
                "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
            ],
        )
    }

    /// 406 naming the media types this endpoint offers.
    pub(crate) fn not_acceptable_of(accept: &str, offered: &[&str]) -> Self {
        Self::new(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            format!("only the following media types are accepted: {} (you asked for {accept})", offered.join(", ")),
        )
    }

    /// 409 on create.
    pub(crate) fn already_exists(name: &str) -> Self {
        Self::new(StatusCode::CONFLICT, "AlreadyExists", format!("{PLURAL}.{GROUP} \"{name}\" already exists"))
            .with_name(name)
    }

    /// 409 on a failed precondition or a stale resourceVersion.
    pub fn conflict(name: &str, why: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!("Operation cannot be fulfilled on {PLURAL}.{GROUP} \"{name}\": {why}"),
        )
        .with_name(name)
    }

    /// 410: the resourceVersion or continue token is older than what the server keeps.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, "Expired", message)
    }

    /// 413.
    pub(crate) fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    /// 413 for a request too large in another way than its body's bytes.
    pub(crate) fn entity_too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge", message)
    }

    /// 414 for a request URI longer than `limit`. Kubernetes names no reason for this code: the
    /// reason is left out (`StatusReasonUnknown`), as apimachinery does for such codes.
    pub(crate) fn uri_too_long(length: usize, limit: usize) -> Self {
        Self::new(
            StatusCode::URI_TOO_LONG,
            "",
            format!("the request URI is {length} bytes long, more than the limit of {limit} bytes"),
        )
    }

    /// 431 for a request whose URI and headers together are larger than `limit` (no reason, as
    /// for 414).
    pub(crate) fn header_fields_too_large(size: usize, limit: usize) -> Self {
        Self::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "",
            format!("the request's URI and headers are {size} bytes, more than the limit of {limit} bytes"),
        )
    }

    /// 415.
    pub(crate) fn unsupported_media_type(content_type: &str, supported: &[&str]) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type}); accepted media types include: {}",
                supported.join(", ")
            ),
        )
    }

    /// 422 with one cause per field problem.
    pub fn invalid(name: &str, errors: &FieldErrors) -> Self {
        Self::invalid_of(GROUP, KIND, name, errors)
    }

    /// 422 for request options (`ListOptions`, `DeleteOptions` of `meta.k8s.io`) that
    /// contradict each other, as kube-apiserver's validation of them words it.
    pub(crate) fn invalid_options_of(kind: &str, errors: &FieldErrors) -> Self {
        Self::invalid_of("meta.k8s.io", kind, "", errors)
    }

    /// `NewInvalid(group kind, name, errors)`: one cause per field problem.
    fn invalid_of(group: &str, kind: &str, name: &str, errors: &FieldErrors) -> Self {
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| {
                let message = match &e.value {
                    Some(value) => format!("{}: {value:?}: {}", e.kind.phrase(), e.detail),
                    None => format!("{}: {}", e.kind.phrase(), e.detail),
                };
                json!({"type": e.kind.cause_type(), "message": message.trim_end_matches(": "), "field": e.path.as_str()})
            })
            .collect();
        let mut error = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("{kind}.{group} \"{name}\" is invalid: {errors}"),
        );
        error.details = Some(json!({"name": name, "group": group, "kind": kind, "causes": causes}));
        error
    }

    /// 422 for a patch whose result cannot be computed.
    pub(crate) fn invalid_patch(name: &str, why: &str) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", format!("{KIND}.{GROUP} \"{name}\" is invalid: {why}"))
            .with_name(name)
    }

    /// 422 for request options that contradict each other.
    pub(crate) fn invalid_options(why: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", why)
    }

    /// 504 for a resourceVersion newer than any this server has handed out, shaped as
    /// k8s.io/apiserver's `NewTooLargeResourceVersionError` so client-go's
    /// `IsTooLargeResourceVersion` recognizes it (and reflectors retry after a second, as
    /// kube-apiserver tells them to).
    pub(crate) fn too_large_resource_version(wanted: u64, current: u64) -> Self {
        let mut error = Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            format!("Timeout: Too large resource version: {wanted}, current: {current}"),
        );
        error.details =
            Some(json!({"causes": [{"type": "ResourceVersionTooLarge", "message": "Too large resource version"}]}));
        error.retry_after = Some(1);
        error
    }

    /// Sets `metadata.continue` on the Status.
    pub(crate) fn set_list_continue(&mut self, token: String) {
        self.list_continue = Some(token);
    }

    /// Adds a sentence telling the user what to do instead.
    pub(crate) fn append_message(&mut self, more: &str) {
        self.message = format!("{}; {more}", self.message);
    }

    /// 500, with the details in the log rather than the answer.
    pub fn internal(context: &str, error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", format!("Internal error occurred: {context}"))
    }

    /// 503 with a retry hint.
    pub fn unavailable(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        let mut error = Self::new(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", message);
        error.retry_after = Some(retry_after_seconds);
        error
    }

    /// 504: the request may or may not have taken effect (kube-apiserver's `Timeout`).
    pub fn timeout(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        let mut error = Self::new(StatusCode::GATEWAY_TIMEOUT, "Timeout", message);
        error.retry_after = Some(retry_after_seconds);
        error
    }

    /// The HTTP status.
    pub fn code(&self) -> StatusCode {
        self.code
    }

    /// The Status object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if self.reason.is_empty() {
            // metav1.Status omits an empty (unknown) reason.
            status.as_object_mut().map(|fields| fields.remove("reason"));
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        if let Some(seconds) = self.retry_after {
            status["details"]["retryAfterSeconds"] = json!(seconds);
        }
        if let Some(token) = &self.list_continue {
            status["metadata"]["continue"] = json!(token);
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        let mut response = (self.code, body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(seconds) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
        {
            headers.insert("retry-after", value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use numaresources_api::{FieldError, FieldPath};

    use super::*;

    #[test]
    fn not_found_reads_like_kube_apiserver() {
        let status = ApiError::not_found("worker-9").to_status();
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["message"], "noderesourcetopologies.topology.node.k8s.io \"worker-9\" not found");
        assert_eq!(status["details"]["name"], "worker-9");
    }

    #[test]
    fn invalid_carries_one_cause_per_field() {
        let mut errors = FieldErrors::default();
        errors.push(FieldError::required(FieldPath::new("zones").index(0).child("name"), ""));
        errors.push(FieldError::invalid(FieldPath::new("metadata").child("name"), "A_B", "must be lowercase"));
        let status = ApiError::invalid("A_B", &errors).to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["reason"], "Invalid");
        let causes = status["details"]["causes"].as_array().unwrap();
        assert_eq!(causes.len(), 2);
        assert_eq!(causes[0]["field"], "zones[0].name");
        assert_eq!(causes[0]["type"], "FieldValueRequired");
        assert_eq!(causes[1]["message"], "Invalid value: \"A_B\": must be lowercase");
    }
}
