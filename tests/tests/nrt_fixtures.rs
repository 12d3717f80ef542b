//! Real NodeResourceTopology objects read into our types and written back: the JSON must be
//! semantically equal to the input (quantities compared by value, since we print the canonical
//! string where upstream YAML may carry an integer).

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use numaresources_api::nrt::{self, NodeResourceTopology, v1alpha1, well_known};
use numaresources_api::quantity::Quantity;
use numaresources_tests::read_fixture;
use serde_json::Value;

const QUANTITY_FIELDS: [&str; 3] = ["capacity", "allocatable", "available"];

/// Equal as JSON, with quantity fields compared by value.
fn assert_semantically_equal(ours: &Value, theirs: &Value, path: &str) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let here = format!("{path}.{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) if QUANTITY_FIELDS.contains(&key.as_str()) => {
                        assert_eq!(quantity(x), quantity(y), "{here}: {x} vs {y}");
                        assert!(x.is_string(), "{here}: we must write quantities as strings, wrote {x}");
                    }
                    (Some(x), Some(y)) => assert_semantically_equal(x, y, &here),
                    (x, y) => panic!("{here}: present on one side only: ours {x:?}, input {y:?}"),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}: lengths differ");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_semantically_equal(x, y, &format!("{path}[{i}]"));
            }
        }
        (x, y) => assert_eq!(x, y, "{path}"),
    }
}

fn quantity(value: &Value) -> Quantity {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{value} is not a quantity: {e}"))
}

#[test]
fn v1alpha2_worker_round_trips_semantically() {
    let text = read_fixture("nrt/worker-0-2numa-v1alpha2.yaml");
    let input: Value = serde_norway::from_str(&text).unwrap();
    let nrt: NodeResourceTopology = serde_norway::from_str(&text).unwrap();
    let output = serde_json::to_value(&nrt).unwrap();
    assert_semantically_equal(&output, &input, "$");

    // And what it says is read right.
    assert_eq!(nrt.metadata.name.as_deref(), Some("worker-0"));
    assert_eq!(nrt.attribute(well_known::ATTR_TOPOLOGY_MANAGER_POLICY), Some("single-numa-node"));
    assert_eq!(nrt.attribute(well_known::ATTR_PODS_FINGERPRINT), Some("pfp0v001a9cddfe43845cd3a"));
    assert_eq!(nrt.zones.len(), 2);
    let node0 = &nrt.zones[0];
    assert_eq!((node0.name.as_str(), node0.zone_type.as_str()), ("node-0", well_known::ZONE_TYPE_NODE));
    assert_eq!(node0.costs.iter().map(|c| c.value).collect::<Vec<_>>(), [10, 21]);
    let cpu = node0.resources.iter().find(|r| r.name == "cpu").unwrap();
    assert_eq!(
        (cpu.capacity.as_i64(), cpu.allocatable.as_i64(), cpu.available.as_i64()),
        (Some(32), Some(30), Some(22))
    );
    let hugepages = node0.resources.iter().find(|r| r.name == "hugepages-1Gi").unwrap();
    assert_eq!(hugepages.available.as_i64(), Some(12 << 30));
}

#[test]
fn v1alpha1_example_round_trips_and_converts_up() {
    let text = read_fixture("nrt/upstream-example.yaml");
    let input: Value = serde_norway::from_str(&text).unwrap();
    let old: v1alpha1::NodeResourceTopology = serde_norway::from_str(&text).unwrap();
    let output = serde_json::to_value(&old).unwrap();
    assert_semantically_equal(&output, &input, "$");
    assert_eq!(output["zones"][0]["resources"][0]["capacity"], "20");

    let new: NodeResourceTopology = old.clone().into();
    assert_eq!(new.topology_policies, ["SingleNUMANode"]);
    assert_eq!(new.zones, old.zones);
    let json = serde_json::to_value(&new).unwrap();
    assert_eq!(json["apiVersion"], "topology.node.k8s.io/v1alpha2");
    let down: v1alpha1::NodeResourceTopology = new.into();
    assert_eq!(down, old);
}

#[test]
fn every_fixture_reads_as_v1alpha2() {
    // v1alpha1 objects are v1alpha2 objects without node-wide attributes.
    for file in ["nrt/upstream-example.yaml", "nrt/worker-0-2numa-v1alpha2.yaml"] {
        let nrt: NodeResourceTopology = serde_norway::from_str(&read_fixture(file)).unwrap();
        assert!(!nrt.zones.is_empty(), "{file}");
        let back: NodeResourceTopology = serde_json::from_value(serde_json::to_value(&nrt).unwrap()).unwrap();
        assert_eq!(back, nrt, "{file}");
    }
}

#[test]
fn our_identity_matches_the_upstream_crd() {
    let crd: Value = serde_norway::from_str(&read_fixture("nrt/upstream-crd.yaml")).unwrap();
    assert_eq!(crd["spec"]["group"], nrt::GROUP);
    assert_eq!(crd["spec"]["names"]["plural"], nrt::PLURAL);
    assert_eq!(crd["spec"]["names"]["singular"], nrt::SINGULAR);
    assert_eq!(crd["spec"]["names"]["kind"], nrt::KIND);
    assert_eq!(crd["spec"]["names"]["listKind"], nrt::LIST_KIND);
    assert_eq!(crd["spec"]["scope"], "Cluster");
    for short in crd["spec"]["names"]["shortNames"].as_array().unwrap() {
        assert!(nrt::SHORT_NAMES.contains(&short.as_str().unwrap()), "{short}");
    }
}

#[test]
fn our_schema_has_the_upstream_fields_and_required_lists() {
    // Every property and required list of the upstream v1alpha2 schema is in ours, under the
    // same names (the API server will validate written objects with it).
    let crd: Value = serde_norway::from_str(&read_fixture("nrt/upstream-crd.yaml")).unwrap();
    let upstream = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1alpha2")
        .unwrap()["schema"]["openAPIV3Schema"]
        .clone();
    let ours = serde_json::to_value(
        schemars::generate::SchemaSettings::openapi3().into_generator().into_root_schema_for::<NodeResourceTopology>(),
    )
    .unwrap();
    let ours = inline_refs(&ours, &ours);
    compare_shape(&ours, &upstream, "$");
}

/// Replaces `$ref`s by their definitions so two schemas can be walked side by side.
fn inline_refs(value: &Value, root: &Value) -> Value {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                let pointer = reference.trim_start_matches('#');
                return inline_refs(root.pointer(pointer).unwrap_or(&Value::Null), root);
            }
            Value::Object(map.iter().map(|(k, v)| (k.clone(), inline_refs(v, root))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| inline_refs(v, root)).collect()),
        other => other.clone(),
    }
}

fn compare_shape(ours: &Value, upstream: &Value, path: &str) {
    if let Some(properties) = upstream.get("properties").and_then(Value::as_object) {
        for (name, schema) in properties {
            let here = format!("{path}.{name}");
            let mine = ours.pointer(&format!("/properties/{name}")).unwrap_or_else(|| panic!("{here} missing"));
            compare_shape(mine, schema, &here);
        }
    }
    if let Some(required) = upstream.get("required").and_then(Value::as_array) {
        let mine = ours.get("required").and_then(Value::as_array).cloned().unwrap_or_default();
        for field in required {
            // `metadata` is the only field we read as optional-with-default that upstream
            // leaves to ObjectMeta rules; everything else must match.
            assert!(mine.contains(field), "{path}: {field} should be required");
        }
    }
    if let Some(items) = upstream.get("items") {
        compare_shape(ours.get("items").unwrap_or_else(|| panic!("{path}: no items")), items, &format!("{path}[]"));
    }
    if upstream.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        assert_eq!(ours.get("x-kubernetes-int-or-string"), Some(&Value::Bool(true)), "{path}");
        assert_eq!(ours.get("pattern"), upstream.get("pattern"), "{path}");
    }
}
