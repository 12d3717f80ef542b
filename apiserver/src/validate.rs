//! Decoding and validating written objects as kube-apiserver would for the upstream CRD:
//! the right apiVersion and kind, the schema's required fields, and valid metadata
//! ([`numaresources_api::metadata`]) on create and on every update and patch.

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use numaresources_api::nrt::{GROUP, KIND, NodeResourceTopology};
use numaresources_api::{FieldError, FieldErrors, FieldPath, metadata};
use serde::Deserialize;
use serde_json::Value;

use crate::body::{self, Parsed, Syntax};
use crate::status::ApiError;

/// Media types a write body may use.
pub const BODY_TYPES: &[&str] = &["application/json", "application/yaml"];

/// The syntax of a create/update body from its media type (JSON, or YAML as kubectl may send);
/// anything else is refused with 415.
pub fn body_syntax(content_type: Option<&str>) -> Result<Syntax, ApiError> {
    let media = content_type.map(|c| c.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
    match media.as_deref() {
        None | Some("") | Some("application/json") => Ok(Syntax::Json),
        Some("application/yaml") | Some("application/x-yaml") => Ok(Syntax::Yaml),
        Some(other) => Err(ApiError::unsupported_media_type(other, BODY_TYPES)),
    }
}

/// Parses a create/update body into a JSON value, refusing more than `max_depth` levels of
/// nesting (see [`crate::body`]).
pub fn parse_body(body: &Bytes, content_type: Option<&str>, max_depth: usize) -> Result<Parsed, ApiError> {
    body::parse(body, body_syntax(content_type)?, max_depth)
}

/// Checks apiVersion/kind, decodes the object and validates it. `url_name` is the name in the
/// URL for updates (the body must agree).
pub fn decode(value: Value, url_name: Option<&str>) -> Result<NodeResourceTopology, ApiError> {
    let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default();
    let expected_version = format!("{GROUP}/v1alpha2");
    if !api_version.is_empty() && api_version != expected_version {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected_version})"
        )));
    }
    if !kind.is_empty() && kind != KIND {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({KIND})"
        )));
    }
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    if let (Some(url_name), false) = (url_name, name.is_empty())
        && url_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({url_name})"
        )));
    }
    let mut errors = FieldErrors::default();
    if !value.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    if value.get("zones").is_none_or(Value::is_null) {
        errors.push(FieldError::required(FieldPath::new("zones"), ""));
    }
    let mut object = match NodeResourceTopology::deserialize(&value) {
        Ok(object) => object,
        Err(error) => {
            // Decode again, tracking the path, only to say where (the hot path stays untracked).
            let cause = match serde_path_to_error::deserialize::<_, NodeResourceTopology>(&value) {
                Err(tracked) => type_error(&value, tracked.path(), tracked.inner()),
                Ok(_) => FieldError::invalid(FieldPath::new(""), "body", error.to_string()),
            };
            errors.push(cause);
            return Err(ApiError::invalid(&name, &errors));
        }
    };
    if let Some(url_name) = url_name {
        object.metadata.name.get_or_insert_with(|| url_name.to_owned());
    }
    errors.into_result().map_err(|errors| ApiError::invalid(&name, &errors))?;
    Ok(object)
}

/// Validates the metadata of an object about to be created (its name generated already, if
/// it had a `generateName`), as kube-apiserver does for a cluster-scoped custom resource.
pub fn validate_create(object: &NodeResourceTopology) -> Result<(), ApiError> {
    let mut meta = object.metadata.clone();
    // What the server sets on create whatever the body says (kube-apiserver clears or
    // overwrites these before validating, as the store does after).
    meta.namespace = None;
    meta.generation = None;
    invalid_unless_empty(&meta, metadata::validate_create(&meta, false))
}

/// Validates the metadata of `next`, about to replace `current` (by update or patch).
pub fn validate_update(next: &NodeResourceTopology, current: &NodeResourceTopology) -> Result<(), ApiError> {
    let old = &current.metadata;
    let mut meta = next.metadata.clone();
    // What kube-apiserver carries over from the stored object before validating (the store
    // does the same when it writes); a different uid is the store's 409, not a 422.
    meta.namespace = None;
    meta.uid.clone_from(&old.uid);
    meta.generation = old.generation;
    meta.creation_timestamp.clone_from(&old.creation_timestamp);
    meta.deletion_timestamp.clone_from(&old.deletion_timestamp);
    meta.deletion_grace_period_seconds = old.deletion_grace_period_seconds;
    let mut old = old.clone();
    old.namespace = None;
    invalid_unless_empty(&meta, metadata::validate_update(&meta, &old))
}

fn invalid_unless_empty(meta: &ObjectMeta, errors: Vec<FieldError>) -> Result<(), ApiError> {
    if errors.is_empty() {
        return Ok(());
    }
    let name = meta.name.as_deref().unwrap_or_default();
    Err(ApiError::invalid(name, &FieldErrors(errors)))
}

/// A value of the wrong type or shape, at the field it was found in, as kube-apiserver names it
/// (`zones[0].resources[0].available: Invalid value: "a lot": …`).
fn type_error(body: &Value, at: &serde_path_to_error::Path, error: &serde_json::Error) -> FieldError {
    let (mut path, mut value) = (FieldPath::default(), Some(body));
    for segment in at.iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => {
                path = path.index(*index);
                value = value.and_then(|v| v.get(*index));
            }
            serde_path_to_error::Segment::Map { key } => {
                path = path.child(key);
                value = value.and_then(|v| v.get(key));
            }
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {}
        }
    }
    let shown = value.map_or_else(|| "body".to_owned(), |v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
    let detail = error.to_string();
    // serde appends the position in the text, which means nothing to the client here.
    let detail = detail.split(" at line ").next().unwrap_or(&detail).to_owned();
    if path.as_str().is_empty() {
        FieldError::invalid(FieldPath::new(""), "body", detail)
    } else {
        FieldError::invalid(path, shown, detail)
    }
}

/// Fields each level of a NodeResourceTopology may carry (what the upstream schema declares).
const ROOT_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "topologyPolicies", "zones", "attributes"];
const METADATA_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];
const ZONE_FIELDS: &[&str] = &["name", "type", "parent", "costs", "attributes", "resources"];
const RESOURCE_FIELDS: &[&str] = &["name", "capacity", "allocatable", "available"];
const NAME_VALUE_FIELDS: &[&str] = &["name", "value"];

/// Paths of fields the schema does not declare (kube-apiserver would prune them; with
/// `fieldValidation=Strict` it refuses them and with `Warn` it says so).
pub fn unknown_fields(value: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    check_fields(value, ROOT_FIELDS, "", &mut unknown);
    if let Some(metadata) = value.get("metadata") {
        check_fields(metadata, METADATA_FIELDS, ".metadata", &mut unknown);
    }
    let each = |list: Option<&Value>, fields: &[&str], path: &str, unknown: &mut Vec<String>| {
        for (i, item) in list.and_then(Value::as_array).into_iter().flatten().enumerate() {
            check_fields(item, fields, &format!("{path}[{i}]"), unknown);
        }
    };
    each(value.get("attributes"), NAME_VALUE_FIELDS, ".attributes", &mut unknown);
    for (i, zone) in value.get("zones").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let path = format!(".zones[{i}]");
        check_fields(zone, ZONE_FIELDS, &path, &mut unknown);
        each(zone.get("resources"), RESOURCE_FIELDS, &format!("{path}.resources"), &mut unknown);
        each(zone.get("costs"), NAME_VALUE_FIELDS, &format!("{path}.costs"), &mut unknown);
        each(zone.get("attributes"), NAME_VALUE_FIELDS, &format!("{path}.attributes"), &mut unknown);
    }
    unknown
}

fn check_fields(value: &Value, known: &[&str], path: &str, unknown: &mut Vec<String>) {
    if let Some(object) = value.as_object() {
        unknown.extend(object.keys().filter(|k| !known.contains(&k.as_str())).map(|k| format!("{path}.{k}")));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn code(result: Result<NodeResourceTopology, ApiError>) -> u16 {
        result.map(|_| 200).unwrap_or_else(|e| e.code().as_u16())
    }

    #[test]
    fn good_objects_decode() {
        let body = json!({"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
                          "metadata": {"name": "worker-0"}, "zones": []});
        assert_eq!(code(decode(body, Some("worker-0"))), 200);
    }

    #[test]
    fn bad_objects_get_the_code_kube_apiserver_gives() {
        let rows = [
            (json!({"apiVersion": "v1", "kind": "NodeResourceTopology", "metadata": {"name": "a"}, "zones": []}), 400),
            (
                json!({"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "Pod", "metadata": {"name": "a"}, "zones": []}),
                400,
            ),
            (json!({"metadata": {"name": "a"}}), 422),
            (
                json!({"metadata": {"name": "a"}, "zones": [{"name": "node-0", "type": "Node",
                    "resources": [{"name": "cpu", "capacity": "lots", "allocatable": 1, "available": 1}]}]}),
                422,
            ),
            (json!([1, 2]), 400),
        ];
        for (body, want) in rows {
            assert_eq!(code(decode(body.clone(), None)), want, "{body}");
        }
        let renamed = json!({"metadata": {"name": "b"}, "zones": []});
        assert_eq!(code(decode(renamed, Some("a"))), 400, "the URL and body names must agree");
    }

    #[test]
    fn a_value_of_the_wrong_shape_is_named_by_its_field() {
        let body = json!({"metadata": {"name": "a"}, "zones": [{"name": "node-0", "type": "Node",
            "resources": [{"name": "cpu", "capacity": 1, "allocatable": 1, "available": "a lot"}]}]});
        let status = decode(body, None).unwrap_err().to_status();
        let cause = &status["details"]["causes"][0];
        assert_eq!(cause["field"], "zones[0].resources[0].available", "{status}");
        assert!(cause["message"].as_str().unwrap().starts_with("Invalid value: \"a lot\": "), "{status}");
        assert!(!status["message"].as_str().unwrap().contains(" at line "), "{status}");
    }

    #[test]
    fn unknown_fields_are_found_at_every_level() {
        let body = json!({"apiVersion": "x", "kind": "y", "spec": {}, "metadata": {"name": "a", "nmae": "b"},
            "attributes": [{"name": "a", "value": "b", "vaule": "c"}],
            "zones": [{"name": "node-0", "type": "Node", "typ": "x",
                       "resources": [{"name": "cpu", "capacity": 1, "allocatable": 1, "available": 1, "used": 0}],
                       "costs": [{"name": "node-0", "value": 10, "unit": "x"}]}]});
        assert_eq!(
            unknown_fields(&body),
            [
                ".spec",
                ".metadata.nmae",
                ".attributes[0].vaule",
                ".zones[0].typ",
                ".zones[0].resources[0].used",
                ".zones[0].costs[0].unit"
            ]
        );
    }

    #[test]
    fn bodies_parse_as_json_or_yaml_only() {
        let json = Bytes::from_static(b"{\"a\":1}");
        assert!(parse_body(&json, Some("application/json; charset=utf-8"), 8).is_ok());
        assert!(parse_body(&Bytes::from_static(b"a: 1\n"), Some("application/yaml"), 8).is_ok());
        assert_eq!(parse_body(&json, Some("application/vnd.kubernetes.protobuf"), 8).unwrap_err().code().as_u16(), 415);
        assert_eq!(parse_body(&Bytes::from_static(b"{"), None, 8).unwrap_err().code().as_u16(), 400);
    }
}
