//! The HTTP edge: the body is checked (content type, size, read time) before any decoding, the
//! endpoint's module answers, and every answer is counted.
//!
//! A readable review always gets HTTP 200 with an AdmissionReview, denials included. A body that
//! is JSON but not a usable review gets 200 with an "invalid" answer (400 in `status`). A body
//! never read as JSON (wrong content type 415, larger than [`MAX_BODY_BYTES`] 413, too slow 408)
//! gets that HTTP status with an invalid review as the body: kube-apiserver never sends such a
//! request, and a non-200 makes it apply the webhook's failurePolicy to an object we never saw.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::custom_resources::{self, Mode};
use crate::metrics::Admission;
use crate::pods::{self, Decision, SkipReason};
use crate::review::{Answer, Reviewed, Unread, Verdict};
use crate::{MAX_BODY_BYTES, Webhook};

/// How long a client may take to send the body (kube-apiserver's own timeout is at most 30 s).
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) async fn mutate_pods(State(webhook): State<Arc<Webhook>>, request: Request) -> Response {
    let start = Instant::now();
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refusal) => return refuse(&webhook, refusal, start),
    };
    let (reviewed, decision) = pods::review(&webhook, &body);
    // A dry run creates no pod: it shows in the admissions (labelled dry_run) but not among the
    // pods routed or skipped.
    match &decision {
        _ if reviewed.dry_run => {}
        Some(Decision::Route { reason, .. }) => {
            webhook.metrics.routed(reason.mode());
            webhook.activity.routed();
        }
        Some(Decision::Leave(reason)) => {
            webhook.metrics.skipped(reason.label());
            match reason {
                SkipReason::NotSynced => webhook.activity.not_synced(),
                _ => webhook.activity.left(),
            }
        }
        None => {}
    }
    answer(&webhook, reviewed, start)
}

pub(crate) async fn mutate_custom_resources(State(webhook): State<Arc<Webhook>>, request: Request) -> Response {
    custom_resources_review(webhook, request, Mode::Mutate).await
}

pub(crate) async fn validate_custom_resources(State(webhook): State<Arc<Webhook>>, request: Request) -> Response {
    custom_resources_review(webhook, request, Mode::Validate).await
}

async fn custom_resources_review(webhook: Arc<Webhook>, request: Request, mode: Mode) -> Response {
    let start = Instant::now();
    match read_body(request).await {
        Ok(body) => {
            let reviewed = custom_resources::review(&webhook, &body, mode);
            answer(&webhook, reviewed, start)
        }
        Err(refusal) => refuse(&webhook, refusal, start),
    }
}

fn answer(webhook: &Webhook, reviewed: Reviewed, start: Instant) -> Response {
    let admission = Admission {
        kind: reviewed.kind,
        operation: reviewed.operation,
        verdict: reviewed.answer.verdict(),
        dry_run: reviewed.dry_run,
    };
    let body = reviewed.answer.to_json();
    webhook.metrics.admitted(admission, start.elapsed());
    json(StatusCode::OK, body)
}

/// Why a body was not read.
#[derive(Debug)]
enum Refusal {
    ContentType(String),
    TooLarge,
    TooSlow,
    Unreadable(String),
}

async fn read_body(request: Request) -> Result<Bytes, Refusal> {
    let headers = request.headers();
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return Err(Refusal::ContentType(content_type.to_owned()));
    }
    let declared = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Err(Refusal::TooLarge);
    }
    let limited = Limited::new(request.into_body(), MAX_BODY_BYTES);
    match tokio::time::timeout(BODY_READ_TIMEOUT, limited.collect()).await {
        Err(_) => Err(Refusal::TooSlow),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => Err(Refusal::TooLarge),
        Ok(Err(error)) => Err(Refusal::Unreadable(error.to_string())),
    }
}

fn refuse(webhook: &Webhook, refusal: Refusal, start: Instant) -> Response {
    let (why, message) = match &refusal {
        Refusal::ContentType(given) => {
            (Unread::UnsupportedMediaType, format!("an AdmissionReview is sent as application/json, not {given:?}"))
        }
        Refusal::TooLarge => (Unread::TooLarge, format!("the request body is larger than {MAX_BODY_BYTES} bytes")),
        Refusal::TooSlow => {
            (Unread::Timeout, format!("the request body took longer than {}s to arrive", BODY_READ_TIMEOUT.as_secs()))
        }
        Refusal::Unreadable(error) => (Unread::BadRequest, format!("reading the request body: {error}")),
    };
    // Per request, so at debug: the activity summary counts refusals.
    tracing::debug!(status = why.code(), "refusing an admission request: {message}");
    webhook.activity.refused();
    let reviewed = Reviewed::unreadable(Answer::unread(None, why, &message));
    let body = reviewed.answer.to_json();
    let admission =
        Admission { kind: reviewed.kind, operation: reviewed.operation, verdict: Verdict::Invalid, dry_run: false };
    webhook.metrics.admitted(admission, start.elapsed());
    let status = StatusCode::from_u16(why.code()).unwrap_or(StatusCode::BAD_REQUEST);
    json(status, body)
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, Body::from(body)).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
