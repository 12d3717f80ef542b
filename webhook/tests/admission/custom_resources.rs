//! The webhooks for our own objects on the bodies a real kube-apiserver sent: the exact object
//! after the defaults patch, validation in kube-apiserver's words, warnings, and what passes.

use numaresources_webhook::{MUTATE_NODETOPOLOGY_PATH, VALIDATE_NODETOPOLOGY_PATH};
use serde_json::{Value, json};

use crate::support::{Answered, fixture, object, post, webhook_with};

const NODE_GROUP_DEFAULTS: &str = r#"{"podsFingerprinting": "EnabledExclusiveResources", "infoRefreshMode": "Periodic",
    "infoRefreshPeriod": "10s", "infoRefreshPause": "Disabled", "unmanagedMemory": "NodeLevel"}"#;

async fn send(path: &str, review: &Value) -> Answered {
    let (webhook, _feeds) = webhook_with(None);
    let answer = post(&webhook, path, review).await;
    answer.assert_answers(review);
    answer
}

/// Runs the mutating webhook again on its own output, as `reinvocationPolicy: IfNeeded` does.
async fn reinvoke(review: &Value, patched: &Value) -> Answered {
    let mut again = review.clone();
    again["request"]["object"] = patched.clone();
    send(MUTATE_NODETOPOLOGY_PATH, &again).await
}

#[tokio::test]
async fn operator_create_gets_exactly_the_missing_defaults() {
    let review = fixture("nro-create.json");
    let answer = send(MUTATE_NODETOPOLOGY_PATH, &review).await;
    assert!(answer.allowed() && answer.warnings().is_empty(), "the mutating webhook does not warn");
    let mut expected = object(&review);
    expected["spec"]["nodeGroups"][0]["config"]["infoRefreshPause"] = json!("Disabled");
    expected["spec"]["nodeGroups"][0]["config"]["unmanagedMemory"] = json!("NodeLevel");
    expected["spec"]["nodeGroups"][1]["config"] = serde_json::from_str(NODE_GROUP_DEFAULTS).unwrap();
    let patched = answer.patched(&object(&review));
    assert_eq!(patched, expected);
    assert!(reinvoke(&review, &patched).await.patch().is_none(), "a second pass yields no patch");
}

#[tokio::test]
async fn scheduler_create_gets_defaults_but_not_platform_or_autodetected_ones() {
    let review = fixture("nrs-create.json");
    let answer = send(MUTATE_NODETOPOLOGY_PATH, &review).await;
    let mut expected = object(&review);
    let spec = expected["spec"].as_object_mut().unwrap();
    spec.insert("cacheResyncDebug".into(), json!("DumpJSONFile"));
    spec.insert("cacheResyncDetection".into(), json!("Relaxed"));
    spec.insert("scoringStrategy".into(), json!({"type": "LeastAllocated"}));
    spec.insert("podRouting".into(), json!({"mode": "Disabled"}));
    let patched = answer.patched(&object(&review));
    assert_eq!(patched, expected, "no schedulerInformer, replicas or preemptionMode");
    assert!(reinvoke(&review, &patched).await.patch().is_none());
}

#[tokio::test]
async fn an_update_is_defaulted_and_validated_on_the_new_object() {
    let review = fixture("nro-update.json");
    assert_eq!(review["request"]["oldObject"]["spec"]["logLevel"], "Normal");
    let answer = send(MUTATE_NODETOPOLOGY_PATH, &review).await;
    let patched = answer.patched(&object(&review));
    assert_eq!(patched["spec"]["logLevel"], "Debug", "the user's change stays");
    assert_eq!(patched["spec"]["nodeGroups"][1]["config"]["infoRefreshPause"], "Disabled");
    let validated = send(VALIDATE_NODETOPOLOGY_PATH, &fixture("validating/nro-update.json")).await;
    assert!(validated.allowed() && validated.patch().is_none());
}

#[tokio::test]
async fn valid_objects_pass_validation_and_deletes_always_pass() {
    for name in ["validating/nro-create.json", "validating/nrs-create.json", "nro-create.json", "nrs-create.json"] {
        let answer = send(VALIDATE_NODETOPOLOGY_PATH, &fixture(name)).await;
        assert!(answer.allowed(), "{name}: {}", answer.message());
        assert!(answer.patch().is_none(), "{name}: the validating webhook never patches");
    }
    for (path, name) in
        [(MUTATE_NODETOPOLOGY_PATH, "nro-delete.json"), (VALIDATE_NODETOPOLOGY_PATH, "validating/nro-delete.json")]
    {
        let review = fixture(name);
        assert!(review["request"]["object"].is_null() && review["request"]["oldObject"].is_object());
        let answer = send(path, &review).await;
        assert!(answer.allowed() && answer.patch().is_none(), "{name}");
    }
}

#[tokio::test]
async fn the_wrong_singleton_name_is_denied_like_kube_apiserver_says_it() {
    let answer = send(VALIDATE_NODETOPOLOGY_PATH, &fixture("nrs-create-wrong-name.json")).await;
    assert!(!answer.allowed());
    let status = &answer.response()["status"];
    assert_eq!((status["code"].as_u64(), status["reason"].as_str()), (Some(422), Some("Invalid")));
    assert_eq!(
        answer.message(),
        "NUMAResourcesScheduler.nodetopology.openshift.io \"something-else\" is invalid: metadata.name: Invalid value: \
         \"something-else\": this is a singleton resource and the object name must be 'numaresourcesscheduler'"
    );
}

#[tokio::test]
async fn every_problem_is_listed_in_one_message_with_its_field_path() {
    let mut review = fixture("validating/nro-create.json");
    let spec = &mut review["request"]["object"]["spec"];
    spec["logLevel"] = json!("Loud");
    spec["nodeGroups"][1]["poolName"] = json!("cnf");
    spec["nodeGroups"][0]["config"]["infoRefreshMode"] = json!("Sometimes");
    let answer = send(VALIDATE_NODETOPOLOGY_PATH, &review).await;
    assert!(!answer.allowed());
    let message = answer.message();
    assert!(
        message.starts_with("NUMAResourcesOperator.nodetopology.openshift.io \"numaresourcesoperator\" is invalid: [")
    );
    for part in [
        "spec.logLevel: Unsupported value: \"Loud\"",
        "spec.nodeGroups[0].config.infoRefreshMode: Unsupported value: \"Sometimes\"",
        "spec.nodeGroups[1]: Forbidden: must have only a single specifier set",
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
    let causes = answer.response()["status"]["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 3);
    assert_eq!(answer.response()["status"]["details"]["kind"], "NUMAResourcesOperator");

    // The mutating webhook does not judge what it can still read: validation does.
    assert!(send(MUTATE_NODETOPOLOGY_PATH, &review).await.allowed());
}

#[tokio::test]
async fn a_value_the_types_cannot_hold_is_denied_by_both_webhooks() {
    for path in [MUTATE_NODETOPOLOGY_PATH, VALIDATE_NODETOPOLOGY_PATH] {
        let mut review = fixture("nro-create.json");
        review["request"]["object"]["spec"]["nodeGroups"][0]["config"]["infoRefreshPeriod"] = json!("every minute");
        let answer = send(path, &review).await;
        assert!(!answer.allowed(), "{path}");
        assert_eq!(answer.response()["status"]["code"], 422);
        assert!(
            answer.message().contains("is invalid: spec.nodeGroups[0].config.infoRefreshPeriod: Invalid value: "),
            "{path}: {}",
            answer.message()
        );
    }
}

#[tokio::test]
async fn warnings_for_deprecated_fields_and_regrettable_settings() {
    let mut review = fixture("validating/nro-create.json");
    let spec = &mut review["request"]["object"]["spec"];
    spec["imageSpec"] = json!("quay.io/openshift-kni/resource-topology-exporter:4.18");
    spec["nodeGroups"][1] = json!({"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/cnf": ""}}});
    spec["nodeGroups"][0]["config"]["infoRefreshPeriod"] = json!("250ms");
    let answer = send(VALIDATE_NODETOPOLOGY_PATH, &review).await;
    assert!(answer.allowed(), "{}", answer.message());
    let warnings = answer.warnings();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings[0].starts_with("spec.imageSpec is deprecated"));
    assert!(warnings[1].starts_with("spec.nodeGroups[0].config.infoRefreshPeriod 250ms is under 1s"));
    assert!(warnings[2].starts_with("spec.nodeGroups[1].nodeSelector selects no node"));

    let mut all = fixture("validating/nrs-create.json");
    all["request"]["object"]["spec"]["podRouting"] = json!({"mode": "All"});
    let answer = send(VALIDATE_NODETOPOLOGY_PATH, &all).await;
    assert!(answer.allowed());
    assert!(answer.warnings()[0].starts_with("spec.podRouting.mode All sends every pod"), "{:?}", answer.warnings());
}

#[tokio::test]
async fn subresources_unknown_versions_and_unknown_kinds_pass_unchanged() {
    let mut status = fixture("nro-update.json");
    status["request"]["subResource"] = json!("status");
    status["request"]["object"]["spec"]["logLevel"] = json!("Loud");
    for path in [MUTATE_NODETOPOLOGY_PATH, VALIDATE_NODETOPOLOGY_PATH] {
        let answer = send(path, &status).await;
        assert!(answer.allowed() && answer.patch().is_none() && answer.warnings().is_empty(), "{path}");
    }

    let mut v1alpha1 = fixture("nro-create.json");
    v1alpha1["request"]["kind"]["version"] = json!("v1alpha1");
    let mut configmap = fixture("nro-create.json");
    configmap["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    for (review, needle) in
        [(v1alpha1, "nodetopology.openshift.io/v1alpha1 NUMAResourcesOperator"), (configmap, "/v1 ConfigMap")]
    {
        for path in [MUTATE_NODETOPOLOGY_PATH, VALIDATE_NODETOPOLOGY_PATH] {
            let answer = send(path, &review).await;
            assert!(answer.allowed() && answer.patch().is_none(), "{path}");
            assert!(answer.warnings()[0].contains(needle), "{:?}", answer.warnings());
        }
    }
}

#[tokio::test]
async fn dry_run_reviews_get_the_same_answers() {
    let mut review = fixture("nro-create.json");
    review["request"]["dryRun"] = json!(true);
    let dry = send(MUTATE_NODETOPOLOGY_PATH, &review).await;
    let wet = send(MUTATE_NODETOPOLOGY_PATH, &fixture("nro-create.json")).await;
    assert_eq!(dry.patch(), wet.patch());
}

/// The one name an object of `kind` may have.
fn singleton(kind: &str) -> &'static str {
    if kind == "NUMAResourcesOperator" { "numaresourcesoperator" } else { "numaresourcesscheduler" }
}

/// A review of `kind` named `name` with `spec`, built from the captured CREATE.
fn review_of(kind: &str, name: &str, spec: Value) -> Value {
    let file =
        if kind == "NUMAResourcesOperator" { "validating/nro-create.json" } else { "validating/nrs-create.json" };
    let mut review = fixture(file);
    review["request"]["object"]["metadata"]["name"] = json!(name);
    review["request"]["object"]["spec"] = spec;
    review
}

/// The validating webhook on `kind` named `name` with `spec`: denied as kube-apiserver denies
/// an invalid object, the message holding `needle`.
async fn assert_denied(kind: &str, rule: &str, name: &str, spec: Value, needle: &str) {
    let answer = send(VALIDATE_NODETOPOLOGY_PATH, &review_of(kind, name, spec)).await;
    assert!(!answer.allowed(), "{kind} {rule}: allowed");
    assert_eq!(answer.response()["status"]["code"], 422, "{kind} {rule}");
    let prefix = format!("{kind}.nodetopology.openshift.io \"{name}\" is invalid: ");
    assert!(answer.message().starts_with(&prefix), "{kind} {rule}: {}", answer.message());
    assert!(answer.message().contains(needle), "{kind} {rule}: {needle} not in {}", answer.message());
}

#[tokio::test]
async fn every_validation_rule_through_the_webhook() {
    let nro = "NUMAResourcesOperator";
    let nrs = "NUMAResourcesScheduler";
    let pool = |extra: Value| {
        let mut group = json!({"poolName": "worker"});
        group.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        group
    };
    let image = "quay.io/s:1";
    assert_denied(nro, "singleton name", "nro", json!({}), "metadata.name: Invalid value: \"nro\"").await;
    assert_denied(nrs, "singleton name", "nrs", json!({"imageSpec": image}), "metadata.name: Invalid value: \"nrs\"")
        .await;
    let rows: Vec<(&str, &str, Value, &str)> = vec![
        (nro, "log level", json!({"logLevel": "Loud"}), "spec.logLevel: Unsupported value"),
        (nro, "no selection method", json!({"nodeGroups": [{}]}), "spec.nodeGroups[0]: Required value"),
        (
            nro,
            "two selection methods",
            json!({"nodeGroups": [pool(json!({"nodeSelector": {}}))]}),
            "spec.nodeGroups[0]: Forbidden",
        ),
        (
            nro,
            "empty pool name",
            json!({"nodeGroups": [{"poolName": ""}]}),
            "spec.nodeGroups[0].poolName: Required value",
        ),
        (
            nro,
            "duplicate pool",
            json!({"nodeGroups": [{"poolName": "w"}, {"poolName": "w"}]}),
            "spec.nodeGroups[1].poolName: Duplicate value",
        ),
        (
            nro,
            "bad selector",
            json!({"nodeGroups": [{"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]}),
            "spec.nodeGroups[0].nodeSelector.matchExpressions[0].operator: Unsupported value",
        ),
        (
            nro,
            "annotation key",
            json!({"nodeGroups": [pool(json!({"annotations": {"-bad": "x"}}))]}),
            "spec.nodeGroups[0].annotations: Invalid value: \"-bad\"",
        ),
        (
            nro,
            "fingerprinting enum",
            json!({"nodeGroups": [pool(json!({"config": {"podsFingerprinting": "Maybe"}}))]}),
            "spec.nodeGroups[0].config.podsFingerprinting: Unsupported value",
        ),
        (
            nro,
            "negative period",
            json!({"nodeGroups": [pool(json!({"config": {"infoRefreshPeriod": "-1s"}}))]}),
            "spec.nodeGroups[0].config.infoRefreshPeriod: Invalid value",
        ),
        (
            nro,
            "toleration",
            json!({"nodeGroups": [pool(json!({"config": {"tolerations": [{"operator": "Equal", "value": "x"}]}}))]}),
            "spec.nodeGroups[0].config.tolerations[0].operator: Invalid value",
        ),
        (nro, "empty pod exclude", json!({"podExcludes": [{}]}), "spec.podExcludes[0]: Required value"),
        (nrs, "image required", json!({}), "spec.imageSpec: Required value"),
        (
            nrs,
            "scheduler name",
            json!({"imageSpec": image, "schedulerName": "Not_DNS"}),
            "spec.schedulerName: Invalid value",
        ),
        (
            nrs,
            "negative resync",
            json!({"imageSpec": image, "cacheResyncPeriod": "-5s"}),
            "spec.cacheResyncPeriod: Invalid value",
        ),
        (
            nrs,
            "informer enum",
            json!({"imageSpec": image, "schedulerInformer": "Both"}),
            "spec.schedulerInformer: Unsupported value",
        ),
        (
            nrs,
            "scoring duplicate",
            json!({"imageSpec": image, "scoringStrategy": {"resources": [{"name": "cpu"}, {"name": "cpu"}]}}),
            "spec.scoringStrategy.resources[1].name: Duplicate value",
        ),
        (
            nrs,
            "negative weight",
            json!({"imageSpec": image, "scoringStrategy": {"resources": [{"name": "cpu", "weight": -1}]}}),
            "spec.scoringStrategy.resources[0].weight: Invalid value",
        ),
        (nrs, "negative replicas", json!({"imageSpec": image, "replicas": -1}), "spec.replicas: Invalid value"),
        (
            nrs,
            "routing mode",
            json!({"imageSpec": image, "podRouting": {"mode": "Some"}}),
            "spec.podRouting.mode: Unsupported value",
        ),
        (
            nrs,
            "routing selector",
            json!({"imageSpec": image, "podRouting": {"mode": "All", "namespaceSelector": {"matchLabels": {"a": "-"}}}}),
            "spec.podRouting.namespaceSelector.matchLabels[a]: Invalid value",
        ),
    ];
    for (kind, rule, spec, needle) in rows {
        assert_denied(kind, rule, singleton(kind), spec, needle).await;
    }
}

#[tokio::test]
async fn every_default_through_the_webhook() {
    let nro = "NUMAResourcesOperator";
    let nrs = "NUMAResourcesScheduler";
    let defaults: Value = serde_json::from_str(NODE_GROUP_DEFAULTS).unwrap();
    let image = json!("quay.io/s:1");
    let scheduler_defaults = json!({"imageSpec": image, "logLevel": "Normal", "cacheResyncPeriod": "5s",
        "cacheResyncDebug": "DumpJSONFile", "cacheResyncDetection": "Relaxed",
        "scoringStrategy": {"type": "LeastAllocated"}, "podRouting": {"mode": "Disabled"}});
    let rows: Vec<(&str, &str, Value, Value)> = vec![
        (nro, "empty spec", json!({}), json!({"logLevel": "Normal"})),
        (nro, "empty log level", json!({"logLevel": ""}), json!({"logLevel": "Normal"})),
        (
            nro,
            "a group without config",
            json!({"nodeGroups": [{"poolName": "w"}]}),
            json!({"logLevel": "Normal", "nodeGroups": [{"poolName": "w", "config": defaults}]}),
        ),
        (
            nro,
            "a group with a partial config",
            json!({"logLevel": "Debug", "nodeGroups": [{"poolName": "w", "config": {"infoRefreshMode": "Events", "tolerations": [{"operator": "Exists"}]}}]}),
            json!({"logLevel": "Debug", "nodeGroups": [{"poolName": "w", "config": {"infoRefreshMode": "Events", "tolerations": [{"operator": "Exists"}],
                "podsFingerprinting": "EnabledExclusiveResources", "infoRefreshPeriod": "10s", "infoRefreshPause": "Disabled",
                "unmanagedMemory": "NodeLevel"}}]}),
        ),
        (
            nro,
            "zero period stays zero",
            json!({"logLevel": "Normal", "nodeGroups": [{"poolName": "w", "config": {"podsFingerprinting": "Disabled", "infoRefreshMode": "Periodic", "infoRefreshPeriod": "0s", "infoRefreshPause": "Enabled", "unmanagedMemory": "Omit"}}]}),
            json!({"logLevel": "Normal", "nodeGroups": [{"poolName": "w", "config": {"podsFingerprinting": "Disabled", "infoRefreshMode": "Periodic", "infoRefreshPeriod": "0s", "infoRefreshPause": "Enabled", "unmanagedMemory": "Omit"}}]}),
        ),
        (nrs, "image only", json!({"imageSpec": image}), scheduler_defaults.clone()),
        (
            nrs,
            "informer, replicas and preemption are kept, never added",
            json!({"imageSpec": image, "schedulerInformer": "Shared", "replicas": 2, "preemptionMode": "Enabled"}),
            {
                let mut s = scheduler_defaults.clone();
                s["schedulerInformer"] = json!("Shared");
                s["replicas"] = json!(2);
                s["preemptionMode"] = json!("Enabled");
                s
            },
        ),
        (
            nrs,
            "a selector gets the mode",
            json!({"imageSpec": image, "podRouting": {"namespaceSelector": {"matchLabels": {"numa": "true"}}}}),
            {
                let mut s = scheduler_defaults.clone();
                s["podRouting"] = json!({"mode": "Disabled", "namespaceSelector": {"matchLabels": {"numa": "true"}}});
                s
            },
        ),
        (
            nrs,
            "scoring resources without a type stay so",
            json!({"imageSpec": image, "scoringStrategy": {"resources": [{"name": "cpu", "weight": 2}]}}),
            {
                let mut s = scheduler_defaults.clone();
                s["scoringStrategy"] = json!({"resources": [{"name": "cpu", "weight": 2}]});
                s
            },
        ),
    ];
    for (kind, rule, spec, want) in rows {
        let review = review_of(kind, singleton(kind), spec);
        let answer = send(MUTATE_NODETOPOLOGY_PATH, &review).await;
        assert!(answer.allowed(), "{kind} {rule}");
        let patched = answer.patched(&object(&review));
        assert_eq!(patched["spec"], want, "{kind} {rule}");
        assert!(reinvoke(&review, &patched).await.patch().is_none(), "{kind} {rule}: not idempotent");
    }
}
