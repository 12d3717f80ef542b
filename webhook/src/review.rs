//! `admission.k8s.io/v1` AdmissionReview on the wire.
//!
//! Requests are read into kube's [`AdmissionRequest`] inside our own envelope; answers are our
//! own [`Answer`]. kube's `AdmissionResponse` is unfit for answers: it writes `patch` as a JSON
//! array of numbers rather than the base64 string of the API, and keeps `patchType` private.
//! Its `AdmissionReview` flattens the type fields, which makes serde buffer the whole body a
//! second time; our envelope reads the same JSON in one pass.

use base64::Engine;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{GroupVersionKind, Resource, Status};
use numaresources_api::operator::{GROUP, VERSION};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The only AdmissionReview version served (`admissionReviewVersions: [v1]`).
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// The kind of the request and answer bodies.
pub const KIND: &str = "AdmissionReview";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<T: Resource> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<AdmissionRequest<T>>,
}

/// One answered review, with what the metrics need to know about it.
#[derive(Debug)]
pub(crate) struct Reviewed {
    pub answer: Answer,
    /// The metric label of the request's kind (see [`kind_label`]).
    pub kind: &'static str,
    pub operation: &'static str,
    pub dry_run: bool,
}

impl Reviewed {
    /// A request that could not be read.
    pub fn unreadable(answer: Answer) -> Self {
        Self { answer, kind: "unknown", operation: "unknown", dry_run: false }
    }
}

/// The kinds this webhook knows, as metric labels; anything else is `other`.
pub(crate) fn kind_label(kind: &GroupVersionKind) -> &'static str {
    match (kind.group.as_str(), kind.version.as_str(), kind.kind.as_str()) {
        ("", "v1", "Pod") => "Pod",
        (GROUP, VERSION, "NUMAResourcesOperator") => "NUMAResourcesOperator",
        (GROUP, VERSION, "NUMAResourcesScheduler") => "NUMAResourcesScheduler",
        _ => "other",
    }
}

/// A body that is not a usable AdmissionReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// `request.uid`, when the body holds one, so the answer can still be matched.
    pub uid: Option<String>,
    /// True when the envelope is a proper v1 review and only `object`/`oldObject` (or another
    /// field of the request) failed to decode as the expected type.
    pub envelope_ok: bool,
    /// What is wrong, for a person.
    pub reason: String,
}

/// Decodes an AdmissionReview v1 request whose objects are `T`.
pub fn decode<T: Resource + DeserializeOwned>(body: &[u8]) -> Result<AdmissionRequest<T>, Malformed> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Malformed { uid: None, envelope_ok: false, reason: "the request body is empty".into() });
    }
    let envelope: Envelope<T> = match serde_json::from_slice(body) {
        Ok(envelope) => envelope,
        Err(error) => return Err(diagnose(body, &error)),
    };
    let uid = envelope.request.as_ref().map(|r| r.uid.clone()).filter(|uid| !uid.is_empty());
    if envelope.api_version != API_VERSION || envelope.kind != KIND {
        let reason = format!(
            "expected apiVersion {API_VERSION:?} and kind {KIND:?}, got {:?} and {:?}",
            envelope.api_version, envelope.kind
        );
        return Err(Malformed { uid, envelope_ok: false, reason });
    }
    let Some(request) = envelope.request else {
        return Err(Malformed { uid: None, envelope_ok: false, reason: "the AdmissionReview has no request".into() });
    };
    if uid.is_none() {
        return Err(Malformed { uid: None, envelope_ok: false, reason: "request.uid is empty".into() });
    }
    Ok(request)
}

/// Why a body did not decode, keeping its uid when the JSON itself is readable.
fn diagnose(body: &[u8], error: &serde_json::Error) -> Malformed {
    let reason = format!("malformed AdmissionReview: {error}");
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return Malformed { uid: None, envelope_ok: false, reason };
    };
    let request = &value["request"];
    let uid = request["uid"].as_str().filter(|uid| !uid.is_empty()).map(str::to_owned);
    let envelope_ok = value["apiVersion"] == API_VERSION
        && value["kind"] == KIND
        && uid.is_some()
        && serde_json::from_value::<Envelope<kube::core::DynamicObject>>(value.clone()).is_ok();
    Malformed { uid, envelope_ok, reason }
}

/// The operation as the API names it.
pub fn operation_name(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// What a webhook answers: allowed or not, with an optional patch and warnings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// How an answer is counted in the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed unchanged.
    Allowed,
    /// Allowed with a patch.
    Patched,
    /// Denied for what the object says.
    Denied,
    /// The request itself could not be read.
    Invalid,
}

impl Verdict {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Patched => "patched",
            Self::Denied => "denied",
            Self::Invalid => "invalid",
        }
    }
}

/// The `status.reason` of an answer to a request that could not be read.
const BAD_REQUEST: &str = "BadRequest";

/// Why a request body was never read, each with the HTTP status the answer is sent with and
/// the `status.reason` metav1 gives that code; the review inside carries the same code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// 400: the body could not be read off the connection.
    BadRequest,
    /// 408: the body took too long to arrive.
    Timeout,
    /// 413: the body is larger than the cap.
    TooLarge,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
}

impl Unread {
    const ALL: [Self; 4] = [Self::BadRequest, Self::Timeout, Self::TooLarge, Self::UnsupportedMediaType];

    /// The HTTP status code (also `status.code` in the review).
    pub fn code(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::Timeout => 408,
            Self::TooLarge => 413,
            Self::UnsupportedMediaType => 415,
        }
    }

    /// metav1's `StatusReason` for that code.
    pub fn reason(self) -> &'static str {
        match self {
            Self::BadRequest => BAD_REQUEST,
            Self::Timeout => "Timeout",
            Self::TooLarge => "RequestEntityTooLarge",
            Self::UnsupportedMediaType => "UnsupportedMediaType",
        }
    }
}

impl Answer {
    /// Allows the request unchanged.
    pub fn allow(uid: &str) -> Self {
        Self { uid: uid.to_owned(), allowed: true, status: None, patch: None, patch_type: None, warnings: Vec::new() }
    }

    /// Denies the request with `status` (its code and message reach the user).
    pub fn deny(uid: &str, status: Status) -> Self {
        Self { allowed: false, status: Some(status), ..Self::allow(uid) }
    }

    /// Refuses a request that could not be read (400, `BadRequest`). The uid is empty when the
    /// body did not hold one; kube-apiserver then treats the call as failed.
    pub fn invalid(uid: Option<&str>, reason: &str) -> Self {
        Self::unread(uid, Unread::BadRequest, reason)
    }

    /// Refuses a request whose body was never read: `status.code` and `status.reason` match the
    /// HTTP status the answer is sent with.
    pub fn unread(uid: Option<&str>, why: Unread, message: &str) -> Self {
        let status = Status::failure(message, why.reason()).with_code(why.code());
        Self::deny(uid.unwrap_or_default(), status)
    }

    /// Adds a JSONPatch; an empty one is left out (no `patch`, no `patchType`).
    pub fn with_patch(mut self, patch: &json_patch::Patch) -> Result<Self, serde_json::Error> {
        if patch.0.is_empty() {
            return Ok(self);
        }
        let json = serde_json::to_vec(patch)?;
        self.patch = Some(base64::engine::general_purpose::STANDARD.encode(json));
        self.patch_type = Some("JSONPatch");
        Ok(self)
    }

    /// Adds warnings for the client (kubectl prints them).
    #[must_use]
    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        self.warnings.extend(warnings);
        self
    }

    /// Whether the request is allowed.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The denial status, if denied.
    pub fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }

    /// The warnings.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// How the metrics count this answer.
    pub fn verdict(&self) -> Verdict {
        match (&self.allowed, &self.patch, &self.status) {
            (true, Some(_), _) => Verdict::Patched,
            (true, None, _) => Verdict::Allowed,
            (false, _, Some(status)) if Unread::ALL.iter().any(|why| why.reason() == status.reason) => Verdict::Invalid,
            (false, _, _) => Verdict::Denied,
        }
    }

    /// The whole AdmissionReview body.
    pub fn to_json(&self) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Out<'a> {
            api_version: &'static str,
            kind: &'static str,
            response: &'a Answer,
        }
        serde_json::to_vec(&Out { api_version: API_VERSION, kind: KIND, response: self }).unwrap_or_else(|error| {
            // Unreachable with the types above; still an answer rather than a 500.
            tracing::error!("encoding an AdmissionReview: {error}");
            format!(
                r#"{{"apiVersion":"{API_VERSION}","kind":"{KIND}","response":{{"uid":"","allowed":false,"status":{{"code":500}}}}}}"#
            )
            .into_bytes()
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    const POD: &str = include_str!("../tests/fixtures/admission/pod-create-guaranteed-integral.json");

    #[test]
    fn a_real_review_decodes() {
        let request = decode::<Pod>(POD.as_bytes()).unwrap();
        assert_eq!(request.uid, "5b3f40f1-f24f-4588-9eb4-e08823b729ae");
        assert_eq!(request.operation, Operation::Create);
        assert!(request.object.is_some() && request.old_object.is_none());
    }

    #[test]
    fn bad_bodies_say_what_is_wrong_and_keep_the_uid_when_they_can() {
        let with = |edit: fn(&mut Value)| {
            let mut value: Value = serde_json::from_str(POD).unwrap();
            edit(&mut value);
            serde_json::to_vec(&value).unwrap()
        };
        let uid = Some("5b3f40f1-f24f-4588-9eb4-e08823b729ae".to_owned());
        type Case = (&'static str, Vec<u8>, Option<String>, bool, &'static str);
        let cases: Vec<Case> = vec![
            ("empty", Vec::new(), None, false, "empty"),
            ("not JSON", b"{\"kind\": Admission".to_vec(), None, false, "malformed AdmissionReview"),
            ("v1beta1", with(|v| v["apiVersion"] = "admission.k8s.io/v1beta1".into()), uid.clone(), false, "v1beta1"),
            ("wrong kind", with(|v| v["kind"] = "ConversionReview".into()), uid.clone(), false, "ConversionReview"),
            ("no request", with(|v| v["request"] = Value::Null), None, false, "no request"),
            ("empty uid", with(|v| v["request"]["uid"] = "".into()), None, false, "uid is empty"),
            (
                "object not a pod",
                with(|v| v["request"]["object"]["spec"] = 7.into()),
                uid.clone(),
                true,
                "invalid type",
            ),
            ("operation unknown", with(|v| v["request"]["operation"] = "PATCH".into()), uid, false, "unknown variant"),
        ];
        for (name, body, uid, envelope_ok, needle) in cases {
            let malformed = decode::<Pod>(&body).unwrap_err();
            assert_eq!(malformed.uid, uid, "{name}");
            assert_eq!(malformed.envelope_ok, envelope_ok, "{name}");
            assert!(malformed.reason.contains(needle), "{name}: {}", malformed.reason);
        }
    }

    #[test]
    fn answers_are_v1_reviews_with_a_base64_patch() {
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::json!([{"op": "add", "path": "/a", "value": 1}])).unwrap();
        let answer = Answer::allow("u-1").with_patch(&patch).unwrap().with_warnings(vec!["careful".into()]);
        assert_eq!(answer.verdict(), Verdict::Patched);
        let body: Value = serde_json::from_slice(&answer.to_json()).unwrap();
        assert_eq!(body["apiVersion"], API_VERSION);
        assert_eq!(body["kind"], KIND);
        assert_eq!(body["response"]["uid"], "u-1");
        assert_eq!(body["response"]["patchType"], "JSONPatch");
        let decoded =
            base64::engine::general_purpose::STANDARD.decode(body["response"]["patch"].as_str().unwrap()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&decoded).unwrap(), serde_json::to_value(&patch).unwrap());
        assert_eq!(body["response"]["warnings"], serde_json::json!(["careful"]));

        let empty = Answer::allow("u-2").with_patch(&json_patch::Patch(Vec::new())).unwrap();
        let body: Value = serde_json::from_slice(&empty.to_json()).unwrap();
        assert_eq!(body["response"], serde_json::json!({"uid": "u-2", "allowed": true}));
        assert_eq!(empty.verdict(), Verdict::Allowed);

        let invalid = Answer::invalid(None, "nope");
        assert_eq!(invalid.verdict(), Verdict::Invalid);
        for why in Unread::ALL {
            let unread = Answer::unread(None, why, "nope");
            assert_eq!(unread.verdict(), Verdict::Invalid, "{why:?}");
            assert_eq!(unread.status().map(|s| s.code), Some(why.code()), "{why:?}");
        }
        let denied = Answer::deny("u-3", Status::failure("bad", "Invalid").with_code(422));
        assert_eq!(denied.verdict(), Verdict::Denied);
        let body: Value = serde_json::from_slice(&denied.to_json()).unwrap();
        assert_eq!(body["response"]["status"]["code"], 422);
        assert_eq!(body["response"]["status"]["status"], "Failure");
    }
}
