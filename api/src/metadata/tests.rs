use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::*;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() }
}

fn messages(errors: Vec<FieldError>) -> Vec<String> {
    errors.into_iter().map(|e| e.to_string()).collect()
}

#[test]
fn a_valid_object_has_no_errors() {
    let mut valid = meta("worker-0");
    valid.labels = Some(BTreeMap::from([("topology.node.k8s.io/pool".into(), "cnf".into()), ("a".into(), "".into())]));
    valid.annotations = Some(BTreeMap::from([("Example.com/Note".into(), "anything at all".into())]));
    valid.finalizers = Some(vec!["example.com/keep".into(), "orphan".into()]);
    valid.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "worker-0".into(),
        uid: "u".into(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    assert_eq!(messages(validate_create(&valid, false)), Vec::<String>::new());
    assert_eq!(messages(validate_update(&valid, &valid)), Vec::<String>::new());
}

#[test]
fn a_bad_generate_name_is_reported_with_the_name_made_of_it() {
    let mut bad = meta("BAD_cdgsn");
    bad.generate_name = Some("BAD_".into());
    let found = messages(validate_create(&bad, false));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("metadata.generateName: Invalid value: \"BAD_\": a lowercase RFC 1123 subdomain"));
    assert!(found[1].starts_with("metadata.name: Invalid value: \"BAD_cdgsn\": a lowercase RFC 1123 subdomain"));
    assert_eq!(
        messages(validate_create(&ObjectMeta::default(), false)),
        ["metadata.name: Required value: name or generateName is required"]
    );
}

#[test]
fn bad_labels_annotations_and_finalizers_are_each_reported() {
    let mut bad = meta("a");
    bad.labels = Some(BTreeMap::from([("bad key!".into(), "v".repeat(100))]));
    bad.annotations = Some(BTreeMap::from([("a/b/c".into(), "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_BYTES))]));
    bad.finalizers = Some(vec!["not a name".into(), "orphan".into(), "foregroundDeletion".into()]);
    let found = messages(validate_create(&bad, false));
    let starts = [
        "metadata.labels: Invalid value: \"bad key!\": name part must consist of",
        "metadata.labels: Invalid value: \"vvvv",
        "metadata.annotations: Invalid value: \"a/b/c\": a qualified name must consist of",
        "metadata.annotations: Too long: may not be more than 262144 bytes",
        "metadata.finalizers: Invalid value: \"not a name\": name part must consist of",
        "metadata.finalizers: Invalid value: \"[]string{\\\"not a name\\\", \\\"orphan\\\", \\\"foregroundDeletion\\\"}\": finalizer orphan and foregroundDeletion cannot be both set",
    ];
    assert_eq!(found.len(), starts.len(), "{found:#?}");
    for (found, start) in found.iter().zip(starts) {
        assert!(found.starts_with(start), "{found}\n  should start with\n{start}");
    }
    assert!(found[1].ends_with("must be no more than 63 characters"), "{}", found[1]);
}

#[test]
fn namespaces_follow_the_scope() {
    let mut namespaced = meta("a");
    namespaced.namespace = Some("default".into());
    assert_eq!(
        messages(validate_create(&namespaced, false)),
        ["metadata.namespace: Forbidden: not allowed on this type"]
    );
    assert!(validate_create(&namespaced, true).is_empty());
    assert_eq!(messages(validate_create(&meta("a"), true)), ["metadata.namespace: Required value"]);
}

#[test]
fn owner_references_need_every_part_and_one_controller_at_most() {
    let owner = |name: &str| OwnerReference {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: name.into(),
        uid: "u".into(),
        controller: Some(true),
        ..OwnerReference::default()
    };
    let mut bad = meta("a");
    bad.owner_references = Some(vec![owner("x"), owner("y"), OwnerReference::default()]);
    let found = messages(validate_create(&bad, false));
    assert_eq!(
        found,
        [
            "metadata.ownerReferences: Invalid value: \"[...]\": Only one reference can have Controller set to true. Found \"true\" in references for DaemonSet/x and DaemonSet/y",
            "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty",
            "metadata.ownerReferences.kind: Invalid value: \"\": must not be empty",
            "metadata.ownerReferences.name: Invalid value: \"\": must not be empty",
            "metadata.ownerReferences.uid: Invalid value: \"\": must not be empty",
        ]
    );
}

#[test]
fn updates_keep_immutable_fields_and_add_no_finalizer_during_deletion() {
    let mut old = meta("a");
    old.uid = Some("u-1".into());
    old.finalizers = Some(vec!["example.com/keep".into()]);
    let mut new = old.clone();
    new.finalizers = Some(vec!["example.com/keep".into(), "example.com/more".into()]);
    assert!(validate_update(&new, &old).is_empty(), "finalizers may be added before deletion");

    old.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    new.deletion_timestamp = old.deletion_timestamp.clone();
    assert_eq!(
        messages(validate_update(&new, &old)),
        [
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/more\"}"
        ]
    );
    new.finalizers = None;
    assert!(validate_update(&new, &old).is_empty(), "removing them is how deletion completes");

    let mut renamed = old.clone();
    renamed.name = Some("b".into());
    renamed.uid = Some("u-2".into());
    assert_eq!(
        messages(validate_update(&renamed, &old)),
        [
            "metadata.name: Invalid value: \"b\": field is immutable",
            "metadata.uid: Invalid value: \"u-2\": field is immutable"
        ]
    );
}
