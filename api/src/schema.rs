//! Schema helpers shared by our hand-written Kubernetes types.

use schemars::Schema;
use serde_json::{Value, json};

/// Shapes the root schema of a type that writes its own `apiVersion` and `kind`: adds those two
/// properties, marks `required` fields required, and drops the `default`s that `#[serde(default)]`
/// put on top-level properties (we read leniently; the schema states what writers must send).
pub(crate) fn kubernetes_root(schema: &mut Schema, required: &[&str]) {
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for property in properties.values_mut() {
            if let Some(property) = property.as_object_mut() {
                property.remove("default");
            }
        }
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
        );
    }
    if !required.is_empty() {
        let list = schema.ensure_object().entry("required").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list {
            list.extend(required.iter().map(|field| Value::from(*field)));
        }
    }
}
