//! Schema helpers shared by our hand-written Kubernetes types.

use schemars::Schema;
use serde_json::json;

/// Adds `apiVersion` and `kind` to a root object schema whose type writes them itself.
pub(crate) fn with_type_meta(schema: &mut Schema) {
    if let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
        );
    }
}
