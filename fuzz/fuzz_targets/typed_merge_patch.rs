//! The exporters' merge patch decoded straight from the bytes (`TypedMergePatch::from_slice`)
//! against the generic path, whatever the bytes: never a panic, and whenever the decoding from the
//! bytes takes a body, the generic path must find nothing to report in it (no repeated key, no
//! unknown field), type it the same way and give the same object.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_apiserver::body::DEFAULT_MAX_NESTING_DEPTH;
use numaresources_apiserver::merge_patch::TypedMergePatch;
use numaresources_apiserver::validate::{parse_body, unknown_fields};
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Some(from_bytes) = TypedMergePatch::from_slice(data, DEFAULT_MAX_NESTING_DEPTH) else { return };
    let parsed = parse_body(&Bytes::copy_from_slice(data), Some("application/json"), DEFAULT_MAX_NESTING_DEPTH)
        .expect("a body the typed decoding takes is JSON within the nesting bound");
    assert!(parsed.duplicates.is_empty(), "repeated keys taken without a report: {:?}", parsed.duplicates);
    let unknown = unknown_fields(&parsed.value);
    assert!(unknown.is_empty(), "unknown fields taken without a report: {unknown:?}");
    let generic = TypedMergePatch::decode(&parsed.value).expect("the generic path types the same shape");
    let current: NodeResourceTopology = serde_json::from_value(json!({
        "metadata": {"name": "node-0", "labels": {"a": "b", "c": "d"}, "annotations": {"x": "y"}},
        "topologyPolicies": ["None"],
        "zones": [{"name": "node-0", "type": "Node", "resources": [
            {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "2"}]}],
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}]
    }))
    .expect("the fixed object decodes");
    let (fast, slow) = (from_bytes.apply(&current), generic.apply(&current));
    assert_eq!(serde_json::to_value(&fast).ok(), serde_json::to_value(&slow).ok(), "the two paths disagree");
});
