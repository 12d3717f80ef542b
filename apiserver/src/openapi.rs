//! OpenAPI documents for `kubectl explain` and the aggregator: v3 (an index plus one document
//! for our group-version) and v2 (Swagger 2.0). Both are generated from the Rust types and
//! rendered once; every top-level kind carries `x-kubernetes-group-version-kind`.

use std::hash::{DefaultHasher, Hash, Hasher};

use bytes::Bytes;
use numaresources_api::nrt::{GROUP, KIND, LIST_KIND, NodeResourceTopology, PLURAL};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::discovery::VERSION;

/// Definition name prefix, reverse-DNS like Kubernetes' own (`io.k8s.…`).
const PREFIX: &str = "io.k8s.topology.node.v1alpha2";

/// Rendered documents.
#[derive(Debug, Clone)]
pub struct OpenApi {
    /// `GET /openapi/v2`.
    pub v2: Bytes,
    /// ETag of `v2`.
    pub v2_etag: String,
    /// `GET /openapi/v3`.
    pub v3_index: Bytes,
    /// `GET /openapi/v3/apis/<group>/<version>`.
    pub v3_group_version: Bytes,
    /// ETag (and `hash` parameter) of `v3_group_version`.
    pub v3_etag: String,
}

impl Default for OpenApi {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenApi {
    /// Renders both documents.
    pub fn new() -> Self {
        let v3_schemas = schemas("#/components/schemas/");
        let v3 = json!({
            "openapi": "3.0.0",
            "info": {"title": "numaresources NodeResourceTopology API", "version": VERSION},
            "paths": paths("#/components/schemas/"),
            "components": {"schemas": v3_schemas},
        });
        let v3_bytes = bytes(&v3);
        let v3_hash = hash(&v3_bytes);
        let index = json!({"paths": {
            format!("apis/{GROUP}/{VERSION}"): {"serverRelativeURL": format!("/openapi/v3/apis/{GROUP}/{VERSION}?hash={v3_hash}")}
        }});
        let mut definitions = schemas_v2(schemas("#/definitions/"));
        definitions.sort_keys();
        let v2 = json!({
            "swagger": "2.0",
            "info": {"title": "numaresources NodeResourceTopology API", "version": VERSION},
            "paths": paths("#/definitions/"),
            "definitions": definitions,
        });
        let v2_bytes = bytes(&v2);
        Self {
            v2_etag: format!("\"{}\"", hash(&v2_bytes)),
            v2: v2_bytes,
            v3_index: bytes(&index),
            v3_group_version: v3_bytes,
            v3_etag: format!("\"{v3_hash}\""),
        }
    }
}

/// Schemas of our kind, its list, and everything they reference, keyed by definition name.
fn schemas(reference_prefix: &'static str) -> Map<String, Value> {
    let settings = SchemaSettings::openapi3().with(|s| {
        s.definitions_path = reference_prefix.into();
    });
    let mut generator = settings.into_generator();
    let root = generator.root_schema_for::<NodeResourceTopology>();
    let mut out = Map::new();
    let mut root = root.to_value();
    let defs = root.as_object_mut().and_then(|o| o.remove("components")).unwrap_or(Value::Null);
    if let Some(object) = root.as_object_mut() {
        object.remove("$schema");
        object.remove("definitions");
        object.remove("$defs");
        object.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": GROUP, "version": VERSION, "kind": KIND}]),
        );
    }
    for (name, schema) in generator.take_definitions(true) {
        out.insert(name, schema);
    }
    drop(defs);
    out.insert(format!("{PREFIX}.{KIND}"), root);
    out.insert(
        format!("{PREFIX}.{LIST_KIND}"),
        json!({
            "description": "A list of NodeResourceTopology objects.",
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": format!("{reference_prefix}io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")},
                "items": {"type": "array", "items": {"$ref": format!("{reference_prefix}{PREFIX}.{KIND}")}},
            },
            "x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": LIST_KIND}],
        }),
    );
    out.entry("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta").or_insert_with(|| {
        json!({"type": "object", "properties": {
            "resourceVersion": {"type": "string"}, "continue": {"type": "string"},
            "remainingItemCount": {"type": "integer", "format": "int64"}}})
    });
    out
}

/// Swagger 2.0 has no `anyOf`: int-or-string becomes `type: string, format: int-or-string`, as
/// Kubernetes' own v2 document writes it.
fn schemas_v2(mut schemas: Map<String, Value>) -> Map<String, Value> {
    fn visit(value: &mut Value) {
        if let Value::Object(map) = value {
            if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                map.remove("anyOf");
                map.insert("type".into(), json!("string"));
                map.insert("format".into(), json!("int-or-string"));
            }
            map.remove("nullable");
            map.values_mut().for_each(visit);
        } else if let Value::Array(items) = value {
            items.iter_mut().for_each(visit);
        }
    }
    schemas.values_mut().for_each(visit);
    schemas
}

fn paths(reference_prefix: &str) -> Value {
    let object = json!({"$ref": format!("{reference_prefix}{PREFIX}.{KIND}")});
    let list = json!({"$ref": format!("{reference_prefix}{PREFIX}.{LIST_KIND}")});
    let gvk = json!({"group": GROUP, "version": VERSION, "kind": KIND});
    // Writes declare the query parameters we implement; kubectl looks for `fieldValidation` on
    // PATCH to decide that it may leave validation to the server.
    let write_parameters = json!([
        {"name": "dryRun", "in": "query", "type": "string", "schema": {"type": "string"},
         "description": "When present, indicates that modifications should not be persisted. The only valid value is All."},
        {"name": "fieldValidation", "in": "query", "type": "string", "schema": {"type": "string"},
         "description": "How the server treats unknown fields: Ignore, Warn (the default) or Strict."},
    ]);
    let operation = |id: &str, action: &str, schema: &Value| {
        let mut operation = json!({
            "operationId": id,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
            "responses": {"200": {"description": "OK", "schema": schema,
                                  "content": {"application/json": {"schema": schema}}}},
        });
        if matches!(action, "post" | "put" | "patch") {
            operation["parameters"] = write_parameters.clone();
        }
        operation
    };
    json!({
        format!("/apis/{GROUP}/{VERSION}/{PLURAL}"): {
            "get": operation("listTopologyNodeV1alpha2NodeResourceTopology", "list", &list),
            "post": operation("createTopologyNodeV1alpha2NodeResourceTopology", "post", &object),
            "delete": operation("deleteTopologyNodeV1alpha2CollectionNodeResourceTopology", "deletecollection", &list),
        },
        format!("/apis/{GROUP}/{VERSION}/{PLURAL}/{{name}}"): {
            "get": operation("readTopologyNodeV1alpha2NodeResourceTopology", "get", &object),
            "put": operation("replaceTopologyNodeV1alpha2NodeResourceTopology", "put", &object),
            "patch": operation("patchTopologyNodeV1alpha2NodeResourceTopology", "patch", &object),
            "delete": operation("deleteTopologyNodeV1alpha2NodeResourceTopology", "delete", &object),
        },
    })
}

fn hash(bytes: &Bytes) -> String {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

fn bytes(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_document_finds_our_kind_by_group_version_kind() {
        let docs = OpenApi::new();
        let v3: Value = serde_json::from_slice(&docs.v3_group_version).unwrap();
        let schemas = v3["components"]["schemas"].as_object().unwrap();
        let ours: Vec<&Value> = schemas
            .values()
            .filter(|s| s["x-kubernetes-group-version-kind"][0]["kind"] == "NodeResourceTopology")
            .collect();
        assert_eq!(ours.len(), 1);
        assert!(ours[0]["properties"]["zones"].is_object());
        let text = serde_json::to_string(&v3).unwrap();
        for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap();
            assert!(schemas.contains_key(name), "dangling reference to {name}");
        }
        let index: Value = serde_json::from_slice(&docs.v3_index).unwrap();
        let url = index["paths"]["apis/topology.node.k8s.io/v1alpha2"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.ends_with(docs.v3_etag.trim_matches('"')));
    }

    #[test]
    fn v2_document_has_no_any_of() {
        let docs = OpenApi::new();
        let text = std::str::from_utf8(&docs.v2).unwrap();
        assert!(!text.contains("anyOf"));
        assert!(text.contains("int-or-string"));
        let v2: Value = serde_json::from_slice(&docs.v2).unwrap();
        for reference in text.split("\"$ref\":\"#/definitions/").skip(1) {
            let name = reference.split('"').next().unwrap();
            assert!(v2["definitions"].get(name).is_some(), "dangling reference to {name}");
        }
    }
}
