//! Bodies kube-apiserver would never send still get an AdmissionReview answer: never a 500, a
//! panic or a hang.

use http::StatusCode;
use numaresources_webhook::{MAX_BODY_BYTES, WEBHOOK_PATHS};
use serde_json::json;

use crate::support::{fixture, post_raw, webhook_with};

#[tokio::test]
async fn malformed_reviews_get_an_invalid_answer_with_the_uid_when_readable() {
    let (webhook, _feeds) = webhook_with(None);
    let app = webhook.router();
    let uid = fixture("pod-create-guaranteed-integral.json")["request"]["uid"].clone();
    let edited = |edit: fn(&mut serde_json::Value)| {
        let mut review = fixture("pod-create-guaranteed-integral.json");
        edit(&mut review);
        serde_json::to_vec(&review).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, serde_json::Value, &str)> = vec![
        ("empty body", Vec::new(), json!(""), "empty"),
        ("whitespace", b" \n".to_vec(), json!(""), "empty"),
        ("not JSON", b"<AdmissionReview/>".to_vec(), json!(""), "malformed AdmissionReview"),
        ("truncated", edited(|_| {})[..300].to_vec(), json!(""), "malformed AdmissionReview"),
        ("a JSON string", b"\"hello\"".to_vec(), json!(""), "malformed AdmissionReview"),
        ("v1beta1", edited(|r| r["apiVersion"] = json!("admission.k8s.io/v1beta1")), uid.clone(), "v1beta1"),
        ("wrong kind", edited(|r| r["kind"] = json!("ConversionReview")), uid.clone(), "ConversionReview"),
        (
            "no apiVersion or kind",
            edited(|r| {
                r.as_object_mut().unwrap().retain(|k, _| k == "request");
            }),
            uid.clone(),
            "expected apiVersion",
        ),
        (
            "missing request",
            edited(|r| {
                r.as_object_mut().unwrap().remove("request");
            }),
            json!(""),
            "no request",
        ),
        ("request of the wrong type", edited(|r| r["request"] = json!([1, 2])), json!(""), "malformed AdmissionReview"),
        (
            "uid missing",
            edited(|r| {
                r["request"].as_object_mut().unwrap().remove("uid");
            }),
            json!(""),
            "missing field `uid`",
        ),
        ("unknown operation", edited(|r| r["request"]["operation"] = json!("PATCH")), uid.clone(), "unknown variant"),
    ];
    for path in WEBHOOK_PATHS {
        for (name, body, want_uid, needle) in &cases {
            let answer = post_raw(&app, path, Some("application/json"), body.clone()).await;
            assert_eq!(answer.status, StatusCode::OK, "{path} {name}");
            assert_eq!(answer.review["apiVersion"], "admission.k8s.io/v1", "{path} {name}");
            assert_eq!(answer.review["kind"], "AdmissionReview", "{path} {name}");
            assert_eq!(&answer.response()["uid"], want_uid, "{path} {name}");
            assert!(!answer.allowed(), "{path} {name}");
            assert_eq!(answer.response()["status"]["code"], 400, "{path} {name}");
            assert!(answer.message().contains(needle), "{path} {name}: {}", answer.message());
        }
    }
}

#[tokio::test]
async fn a_pod_that_is_not_a_pod_fails_open_like_the_pod_webhook_configuration() {
    let (webhook, _feeds) = webhook_with(None);
    let mut review = fixture("pod-create-guaranteed-integral.json");
    review["request"]["object"]["spec"]["containers"] = json!("app");
    let body = serde_json::to_vec(&review).unwrap();
    let answer =
        post_raw(&webhook.router(), numaresources_webhook::MUTATE_PODS_PATH, Some("application/json"), body).await;
    answer.assert_answers(&review);
    assert!(answer.allowed() && answer.patch().is_none());
    assert!(answer.warnings()[0].contains("could not read this pod"));
}

#[tokio::test]
async fn transport_problems_get_their_http_status_and_an_invalid_review() {
    let (webhook, _feeds) = webhook_with(None);
    let app = webhook.router();
    let review = serde_json::to_vec(&fixture("nro-create.json")).unwrap();
    let huge = {
        let mut review = fixture("nro-create.json");
        review["request"]["object"]["metadata"]["annotations"] = json!({"padding": "x".repeat(MAX_BODY_BYTES)});
        serde_json::to_vec(&review).unwrap()
    };
    type Case = (&'static str, Option<&'static str>, Vec<u8>, StatusCode, &'static str);
    let cases: Vec<Case> = vec![
        ("no content type", None, review.clone(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "application/json"),
        ("YAML", Some("application/yaml"), review.clone(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "application/yaml"),
        ("text", Some("text/plain; charset=utf-8"), review.clone(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "text/plain"),
        ("over the size cap", Some("application/json"), huge, StatusCode::PAYLOAD_TOO_LARGE, "larger than"),
    ];
    for path in WEBHOOK_PATHS {
        for (name, content_type, body, status, needle) in &cases {
            let answer = post_raw(&app, path, *content_type, body.clone()).await;
            assert_eq!(answer.status, *status, "{path} {name}");
            assert_eq!(answer.review["kind"], "AdmissionReview", "{path} {name}");
            // The review inside says the same as the HTTP status, with metav1's reason for it.
            assert_eq!(answer.response()["status"]["code"], status.as_u16(), "{path} {name}");
            let reason =
                if *status == StatusCode::PAYLOAD_TOO_LARGE { "RequestEntityTooLarge" } else { "UnsupportedMediaType" };
            assert_eq!(answer.response()["status"]["reason"], reason, "{path} {name}");
            assert!(!answer.allowed());
            assert!(answer.message().contains(needle), "{path} {name}: {}", answer.message());
        }
        // Parameters and case in the media type are fine.
        let answer = post_raw(&app, path, Some("Application/JSON; charset=utf-8"), review.clone()).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn a_body_over_the_cap_without_a_length_is_cut_off_not_buffered() {
    use axum::body::Body;
    use futures_util::stream;
    use tower::ServiceExt;

    let (webhook, _feeds) = webhook_with(None);
    // A chunked body that never says how long it is: reading stops at the cap.
    let chunk = bytes::Bytes::from(vec![b' '; 1024 * 1024]);
    let chunks = stream::iter((0..64).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    let request = http::Request::post(numaresources_webhook::MUTATE_PODS_PATH)
        .header("content-type", "application/json")
        .body(Body::from_stream(chunks))
        .unwrap();
    let response = webhook.router().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_arrives_times_out_instead_of_hanging() {
    use axum::body::Body;
    use tower::ServiceExt;

    let (webhook, _feeds) = webhook_with(None);
    // Headers, then nothing: the clock (paused, so no real waiting) runs out the read timeout.
    let never = futures_util::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
    let request = http::Request::post(numaresources_webhook::VALIDATE_NODETOPOLOGY_PATH)
        .header("content-type", "application/json")
        .body(Body::from_stream(never))
        .unwrap();
    let response = webhook.router().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["response"]["status"]["code"], 408);
    assert_eq!(review["response"]["status"]["reason"], "Timeout");
}
