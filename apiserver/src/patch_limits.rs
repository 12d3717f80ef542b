//! JSON patches (RFC 6902) applied within kube-apiserver's bounds, so that a 2 KB patch cannot
//! grow a document (or the work done on it) without limit.
//!
//! * At most [`MAX_JSON_PATCH_OPERATIONS`] operations, counted before any is applied (413, as
//!   kube-apiserver answers).
//! * `copy` duplicates what it names: the bytes all copies of one patch add are capped (422),
//!   kube-apiserver's `JSONPatchMaxCopyBytes`, which is the body limit. Each source is measured
//!   before it is copied, and the measuring stops as soon as the budget is spent, so a copy
//!   chain that doubles the document stops at the budget, never past it.
//! * Nesting stays within the body bound: `add`, `copy` and `move` can each put a subtree
//!   deeper than it was, and a document nested thousands deep would overflow the stack of
//!   whatever walks it next (clone, encode, drop). Each is checked before it is applied.
//!
//! The size of the result is bounded by the caller (the body limit, once encoded).

use json_patch::{Patch, PatchOperation};
use serde::Deserialize;
use serde_json::Value;

use crate::status::ApiError;

/// The most operations one JSON patch may have (kube-apiserver's `maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// `move` sources are walked to learn how deep they are (a move cannot grow a document, so it
/// is not charged as a copy); the bytes walked per patch are capped at this many times the
/// copy budget, so a patch of 10,000 moves of a large subtree still ends quickly.
const MOVE_WALK_FACTOR: usize = 8;

/// What one patch may do.
#[derive(Debug, Clone, Copy)]
pub struct PatchBounds {
    /// The most operations.
    pub max_operations: usize,
    /// The most bytes all `copy` operations together may add.
    pub max_copy_bytes: usize,
    /// The deepest the document may nest.
    pub max_depth: usize,
}

/// Applies `patch` to `document` (a working copy: on error it is left part-patched, and the
/// caller drops it). `name` is the object's, for the Status.
pub fn apply(document: &mut Value, patch: &Value, bounds: &PatchBounds, name: &str) -> Result<(), ApiError> {
    if let Some(operations) = patch.as_array()
        && operations.len() > bounds.max_operations
    {
        return Err(too_many_operations(operations.len(), bounds.max_operations));
    }
    let operations =
        Patch::deserialize(patch).map_err(|e| ApiError::bad_request(format!("the JSON patch is malformed: {e}")))?;
    let mut copied = 0usize;
    let mut walked = 0usize;
    let walk_budget = bounds.max_copy_bytes.saturating_mul(MOVE_WALK_FACTOR);
    for (index, operation) in operations.0.iter().enumerate() {
        let placed_depth = match operation {
            PatchOperation::Add(add) => Some(depth_of(add.path.as_str()) + measure(&add.value, usize::MAX).depth),
            PatchOperation::Replace(replace) => {
                Some(depth_of(replace.path.as_str()) + measure(&replace.value, usize::MAX).depth)
            }
            PatchOperation::Copy(copy) => match document.pointer(copy.from.as_str()) {
                Some(source) => {
                    let left = bounds.max_copy_bytes - copied;
                    let size = measure(source, left);
                    copied = copied.saturating_add(size.bytes);
                    if size.bytes > left {
                        return Err(copy_too_large(name, copied, bounds.max_copy_bytes));
                    }
                    Some(depth_of(copy.path.as_str()) + size.depth)
                }
                None => None, // the patch library words the error
            },
            PatchOperation::Move(moved) => match document.pointer(moved.from.as_str()) {
                Some(source) => {
                    let left = walk_budget - walked;
                    let size = measure(source, left);
                    walked = walked.saturating_add(size.bytes);
                    if size.bytes > left {
                        return Err(ApiError::invalid_patch(
                            name,
                            &format!(
                                "the JSON patch moves more than {walk_budget} bytes in all; split it into smaller patches"
                            ),
                        ));
                    }
                    Some(depth_of(moved.path.as_str()) + size.depth)
                }
                None => None,
            },
            PatchOperation::Remove(_) | PatchOperation::Test(_) => None,
        };
        if let Some(depth) = placed_depth
            && depth > bounds.max_depth
        {
            return Err(ApiError::invalid_patch(
                name,
                &format!(
                    "operation '/{index}' would nest the object {depth} levels deep, more than the limit of {}",
                    bounds.max_depth
                ),
            ));
        }
        json_patch::patch_unsafe(document, std::slice::from_ref(operation)).map_err(|e| {
            ApiError::invalid_patch(
                name,
                &format!(
                    "the JSON patch could not be applied: operation '/{index}' failed at path '{}': {}",
                    e.path, e.kind
                ),
            )
        })?;
    }
    Ok(())
}

/// 413, worded as kube-apiserver words it.
fn too_many_operations(got: usize, max: usize) -> ApiError {
    ApiError::entity_too_large(format!("The allowed maximum operations in a JSON patch is {max}, got {got}"))
}

/// 422, worded as the patch library kube-apiserver uses words it.
fn copy_too_large(name: &str, size: usize, limit: usize) -> ApiError {
    ApiError::invalid_patch(
        name,
        &format!(
            "Unable to complete the copy, the accumulated size increase of copy is {size}, exceeding the limit {limit}"
        ),
    )
}

/// How many levels a JSON pointer goes down (`/a/b` → 2).
fn depth_of(pointer: &str) -> usize {
    pointer.bytes().filter(|b| *b == b'/').count()
}

/// A value's encoded size (an estimate: strings are counted unescaped) and depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Measure {
    bytes: usize,
    depth: usize,
}

/// Measures `value` without recursion (it may be deep), stopping once more than `limit`
/// bytes are counted (the result then only says "more than `limit`").
fn measure(value: &Value, limit: usize) -> Measure {
    let mut stack = vec![(value, 1usize)];
    let mut found = Measure { bytes: 0, depth: 0 };
    while let Some((value, depth)) = stack.pop() {
        found.depth = found.depth.max(depth);
        found.bytes = found.bytes.saturating_add(match value {
            Value::Null => 4,
            Value::Bool(_) => 5,
            Value::Number(_) => 8,
            Value::String(text) => text.len() + 3,
            Value::Array(items) => {
                stack.extend(items.iter().map(|item| (item, depth + 1)));
                items.len() + 2
            }
            Value::Object(fields) => {
                stack.extend(fields.values().map(|item| (item, depth + 1)));
                fields.keys().map(|key| key.len() + 4).sum::<usize>() + 2
            }
        });
        if found.bytes > limit {
            break;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const BOUNDS: PatchBounds = PatchBounds { max_operations: 100, max_copy_bytes: 64 * 1024, max_depth: 32 };

    fn code(document: &mut Value, patch: Value) -> u16 {
        apply(document, &patch, &BOUNDS, "n").map(|()| 200).unwrap_or_else(|e| e.code().as_u16())
    }

    #[test]
    fn ordinary_patches_apply() {
        let mut document = json!({"metadata": {"labels": {"a": "b"}}, "zones": [{"name": "node-0"}]});
        let patch = json!([
            {"op": "test", "path": "/zones/0/name", "value": "node-0"},
            {"op": "add", "path": "/metadata/labels/c", "value": "d"},
            {"op": "copy", "from": "/zones/0", "path": "/zones/-"},
            {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/e"},
            {"op": "replace", "path": "/zones/1/name", "value": "node-1"},
            {"op": "remove", "path": "/metadata/labels/c"}
        ]);
        assert_eq!(code(&mut document, patch), 200);
        assert_eq!(
            document,
            json!({"metadata": {"labels": {"e": "b"}}, "zones": [{"name": "node-0"}, {"name": "node-1"}]})
        );
    }

    #[test]
    fn too_many_operations_are_refused_before_any_applies() {
        let mut document = json!({"a": 0});
        let patch = Value::Array(vec![json!({"op": "replace", "path": "/a", "value": 1}); 101]);
        let error = apply(&mut document, &patch, &BOUNDS, "n").unwrap_err();
        assert_eq!(error.code().as_u16(), 413);
        assert_eq!(error.to_status()["message"], "The allowed maximum operations in a JSON patch is 100, got 101");
        assert_eq!(document, json!({"a": 0}));
    }

    #[test]
    fn copies_that_double_the_document_stop_at_the_copy_budget() {
        let mut document = json!({"zz": {"s": "x".repeat(1024)}});
        let patch: Vec<Value> =
            (0..60).map(|n| json!({"op": "copy", "from": "/zz", "path": format!("/zz/c{n}")})).collect();
        let error = apply(&mut document, &Value::Array(patch), &BOUNDS, "n").unwrap_err();
        assert_eq!(error.code().as_u16(), 422);
        let message = error.to_status()["message"].as_str().unwrap().to_owned();
        assert!(message.contains("the accumulated size increase of copy is"), "{message}");
        // Never more than the budget past where it started (and the measuring stopped there too).
        assert!(measure(&document, usize::MAX).bytes < 1100 + BOUNDS.max_copy_bytes);
    }

    #[test]
    fn nesting_past_the_bound_is_refused_for_add_copy_and_move() {
        let deep = |n: usize| (0..n).fold(json!(1), |inner, _| json!({"a": inner}));
        let mut document = json!({"x": deep(20), "y": {}});
        assert_eq!(code(&mut document, json!([{"op": "add", "path": "/y/z", "value": deep(40)}])), 422);
        assert_eq!(
            code(&mut document.clone(), json!([{"op": "copy", "from": "/x", "path": "/x/a/a/a/a/a/a/a/a/a/a/a/a/b"}])),
            422
        );
        assert_eq!(
            code(&mut document, json!([{"op": "move", "from": "/y", "path": "/x/a/a/a/a/a/a/a/a/a/a/a/a/b"}])),
            200
        );
        let mut doubled = json!({"x": deep(20), "y": deep(20)});
        assert_eq!(
            code(&mut doubled, json!([{"op": "move", "from": "/y", "path": "/x/a/a/a/a/a/a/a/a/a/a/a/a/a/a/b"}])),
            422
        );
    }

    #[test]
    fn malformed_and_failing_patches_get_400_and_422() {
        let mut document = json!({"a": 1});
        assert_eq!(code(&mut document, json!({"op": "add"})), 400);
        assert_eq!(code(&mut document, json!([{"op": "remove", "path": "/nope"}])), 422);
        assert_eq!(code(&mut document, json!([{"op": "copy", "from": "/nope", "path": "/b"}])), 422);
    }
}
