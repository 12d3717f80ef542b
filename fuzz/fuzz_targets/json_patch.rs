//! JSON patches applied within their bounds to a fixed object: never a panic, never more
//! operations, copied bytes or nesting than allowed, and a refused patch is a 4xx.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaresources_apiserver::patch_limits::{PatchBounds, apply};
use serde_json::{Value, json};

const BOUNDS: PatchBounds = PatchBounds { max_operations: 64, max_copy_bytes: 16 * 1024, max_depth: 16 };

fn size(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

fuzz_target!(|data: &[u8]| {
    let Ok(patch) = serde_json::from_slice::<Value>(data) else { return };
    let mut document = json!({
        "metadata": {"name": "n", "labels": {"a": "b"}, "finalizers": ["x/y"]},
        "zones": [{"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "capacity": "4"}]}],
        "attributes": [{"name": "a", "value": "b"}]
    });
    let before = size(&document);
    match apply(&mut document, &patch, &BOUNDS, "n") {
        // Growth comes from the patch's own values (at most its size) and from copies (at most
        // the copy budget, as estimated: allow the estimate's slack on escapes).
        Ok(()) => assert!(size(&document) <= before + 2 * data.len() + 2 * BOUNDS.max_copy_bytes),
        Err(error) => assert!(error.code().is_client_error(), "{:?}", error.to_status()),
    }
});
