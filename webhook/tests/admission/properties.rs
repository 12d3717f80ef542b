//! Whatever arrives, every webhook path answers with an AdmissionReview and a 2xx/4xx status,
//! never a 5xx or a panic (the `admission_review` fuzz target explores the same decoder for
//! longer, under libFuzzer; this runs in CI).

use http::StatusCode;
use numaresources_api::operator::PodRoutingMode;
use numaresources_webhook::WEBHOOK_PATHS;
use proptest::prelude::*;
use serde_json::Value;

use crate::support::{fixture, post_raw, scheduler, webhook_with};

/// Posts `body` to every webhook path and checks the shape of each answer.
fn answers_every_path(body: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let (webhook, _feeds) = webhook_with(Some(scheduler(PodRoutingMode::All, None)));
    let app = webhook.router();
    for path in WEBHOOK_PATHS {
        let answered = runtime.block_on(post_raw(&app, path, Some("application/json"), body.to_vec()));
        assert!(!answered.status.is_server_error(), "{path}: {}", answered.status);
        assert_eq!(answered.review["kind"], "AdmissionReview", "{path}");
        if answered.status == StatusCode::OK {
            assert!(answered.review["response"]["uid"].is_string(), "{path}: {}", answered.review);
        }
    }
}

/// Real review bodies, one per webhook path's kinds.
fn captured_bodies() -> Vec<Vec<u8>> {
    ["pod-create-guaranteed-integral.json", "nro-update.json"]
        .iter()
        .map(|name| serde_json::to_vec(&fixture(name)).unwrap())
        .collect()
}

/// Replaces the value at a JSON pointer of a review (when it exists) with `value`.
fn with_value_at(review: &mut Value, pointer: &str, value: Value) {
    if let Some(slot) = review.pointer_mut(pointer) {
        *slot = value;
    }
}

fn any_json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-zA-Z0-9 ./-]{0,12}".prop_map(Value::from),
        Just(Value::Array(vec![])),
        Just(serde_json::json!({})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_an_answer(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        answers_every_path(&data);
    }

    #[test]
    fn truncated_or_corrupted_reviews_get_an_answer(which in 0usize..2, cut in 0.0f64..1.0, flip in any::<(usize, u8)>()) {
        let mut body = captured_bodies().swap_remove(which);
        let at = flip.0 % body.len();
        body[at] = flip.1;
        body.truncate(((body.len() as f64) * cut) as usize + 1);
        answers_every_path(&body);
    }

    #[test]
    fn reviews_with_a_field_of_the_wrong_type_get_an_answer(
        which in 0usize..2,
        pointer in prop::sample::select(vec![
            "/apiVersion", "/kind", "/request", "/request/uid", "/request/kind", "/request/operation",
            "/request/object", "/request/object/spec", "/request/object/metadata",
            "/request/object/spec/containers", "/request/object/spec/nodeGroups", "/request/oldObject",
            "/request/dryRun", "/request/subResource", "/request/userInfo",
        ]),
        value in any_json_value(),
    ) {
        let mut review: Value = serde_json::from_slice(&captured_bodies().swap_remove(which)).unwrap();
        with_value_at(&mut review, pointer, value);
        answers_every_path(&serde_json::to_vec(&review).unwrap());
    }
}
