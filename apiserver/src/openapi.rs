//! OpenAPI documents for `kubectl explain` and the aggregator: v3 (an index plus one document
//! for our group-version) and v2 (Swagger 2.0). Both are generated from the Rust types and
//! rendered once; every top-level kind carries `x-kubernetes-group-version-kind`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use http::header::{ACCEPT, HeaderValue};
use http::{HeaderMap, StatusCode};
use numaresources_api::nrt::{GROUP, KIND, LIST_KIND, NodeResourceTopology, PLURAL};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::etag::{hash, with_etag};
use crate::negotiate::{OPENAPI_V2_PROTOBUF, OpenApiForm, openapi_form};
use crate::render::json_bytes;
use crate::response::json_response;
use crate::status::ApiError;
use numaresources_api::nrt::VERSION;

pub mod protobuf;

/// Rendered documents.
#[derive(Debug, Clone)]
pub struct OpenApi {
    /// `GET /openapi/v2`.
    pub v2: Bytes,
    /// ETag of `v2`.
    pub v2_etag: String,
    /// `GET /openapi/v2` in gnostic's protobuf form (what client-go's `OpenAPISchema()` reads).
    pub v2_protobuf: Bytes,
    /// ETag of `v2_protobuf`.
    pub v2_protobuf_etag: String,
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
        let v3 = json!({
            "openapi": "3.0.0",
            "info": {"title": "numaresources NodeResourceTopology API", "version": VERSION},
            "paths": paths(Spec::V3),
            "components": {"schemas": definitions(Spec::V3)},
        });
        let v3_bytes = json_bytes(&v3);
        let v3_hash = hash(&v3_bytes);
        let index = json!({"paths": {
            format!("apis/{GROUP}/{VERSION}"): {"serverRelativeURL": format!("/openapi/v3/apis/{GROUP}/{VERSION}?hash={v3_hash}")}
        }});
        let v2 = json!({
            "swagger": "2.0",
            "info": {"title": "numaresources NodeResourceTopology API", "version": VERSION},
            "paths": paths(Spec::V2),
            "definitions": definitions(Spec::V2),
        });
        let v2_bytes = json_bytes(&v2);
        // The document is ours and its unit test encodes it: a failure here is a bug that test
        // catches, so the server still starts (and answers JSON) rather than refusing to.
        let v2_protobuf = Bytes::from(protobuf::document(&v2).unwrap_or_default());
        Self {
            v2_etag: format!("\"{}\"", hash(&v2_bytes)),
            v2: v2_bytes,
            v2_protobuf_etag: format!("\"{}\"", hash(&v2_protobuf)),
            v2_protobuf,
            v3_index: json_bytes(&index),
            v3_group_version: v3_bytes,
            v3_etag: format!("\"{v3_hash}\""),
        }
    }
}

/// `GET /openapi/v2`, as JSON or gnostic's protobuf.
pub async fn v2(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let docs = &state.openapi;
    let mut response = match openapi_form(headers.get(ACCEPT).and_then(|v| v.to_str().ok()), true)? {
        OpenApiForm::Json => with_etag(&headers, docs.v2.clone(), &docs.v2_etag, "application/json"),
        OpenApiForm::Protobuf => {
            with_etag(&headers, docs.v2_protobuf.clone(), &docs.v2_protobuf_etag, OPENAPI_V2_PROTOBUF)
        }
    };
    // One URL, two forms: a cache (kubectl keeps one on disk) must key on Accept too.
    response.headers_mut().insert(http::header::VARY, HeaderValue::from_static("Accept"));
    Ok(response)
}

/// `GET /openapi/v3`: the index.
pub(crate) async fn v3_index(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.openapi.v3_index.clone())
}

/// `GET /openapi/v3/apis/<group>/<version>`.
pub async fn v3(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    openapi_form(headers.get(ACCEPT).and_then(|v| v.to_str().ok()), false)?;
    let mut response =
        with_etag(&headers, state.openapi.v3_group_version.clone(), &state.openapi.v3_etag, "application/json");
    // The hash in the URL pins the content, so clients may cache it for good.
    response.headers_mut().insert("cache-control", HeaderValue::from_static("public, immutable"));
    Ok(response)
}

/// Every schema a document of this version holds, keyed by definition name, sorted.
fn definitions(spec: Spec) -> Map<String, Value> {
    let mut out = schemas(spec.reference_prefix());
    out.extend(request_definitions().map(|(name, schema)| (name.to_owned(), schema)));
    if spec == Spec::V2 {
        out = schemas_v2(out);
    }
    out.sort_keys();
    out
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
    out.insert(OBJECT.to_owned(), root);
    out.insert(
        LIST.to_owned(),
        json!({
            "description": "A list of NodeResourceTopology objects.",
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": format!("{reference_prefix}io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")},
                "items": {"type": "array", "items": {"$ref": format!("{reference_prefix}{OBJECT}")}},
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

/// Which OpenAPI version a document is built for: parameters, request bodies and responses are
/// spelled differently in each, and kube-apiserver's strict parser refuses a document that mixes
/// them (one bad parameter makes its whole merged `/openapi/v2` fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// Swagger 2.0: `type` on parameters, a `body` parameter, `schema` on responses.
    V2,
    /// OpenAPI 3.0: `schema` on parameters, `requestBody`, `content` on responses.
    V3,
}

impl Spec {
    fn reference_prefix(self) -> &'static str {
        match self {
            Self::V2 => "#/definitions/",
            Self::V3 => "#/components/schemas/",
        }
    }

    fn reference(self, definition: &str) -> Value {
        json!({"$ref": format!("{}{definition}", self.reference_prefix())})
    }

    /// A query or path parameter (string, integer or boolean).
    fn parameter(self, parameter: &Parameter) -> Value {
        let Parameter { name, location, kind, description } = *parameter;
        let mut out = match self {
            Self::V2 => json!({"name": name, "in": location, "description": description, "type": kind,
                               "uniqueItems": true}),
            Self::V3 => json!({"name": name, "in": location, "description": description,
                               "schema": {"type": kind, "uniqueItems": true}}),
        };
        if location == "path" {
            out["required"] = json!(true);
        }
        out
    }

    /// The operation's request body and its parameters, placed where this version wants them.
    fn operation(self, action: &Action, parameters: &[Parameter]) -> Value {
        let mut operation = json!({
            "operationId": action.id,
            "description": action.description,
            "x-kubernetes-action": action.verb,
            "x-kubernetes-group-version-kind": {"group": GROUP, "version": VERSION, "kind": KIND},
        });
        let mut rendered: Vec<Value> = parameters.iter().map(|p| self.parameter(p)).collect();
        if let Some(body) = action.body {
            match self {
                Self::V2 => {
                    rendered.insert(
                        0,
                        json!({"name": "body", "in": "body", "required": true, "schema": self.reference(body)}),
                    );
                    operation["consumes"] = json!(action.consumes);
                }
                Self::V3 => {
                    let content: Map<String, Value> = action
                        .consumes
                        .iter()
                        .map(|media| ((*media).to_owned(), json!({"schema": self.reference(body)})))
                        .collect();
                    operation["requestBody"] = json!({"required": true, "content": content});
                }
            }
        }
        if !rendered.is_empty() {
            operation["parameters"] = Value::Array(rendered);
        }
        let response = |description: &str| match self {
            Self::V2 => json!({"description": description, "schema": self.reference(action.answer)}),
            Self::V3 => json!({"description": description,
                               "content": {"application/json": {"schema": self.reference(action.answer)}}}),
        };
        let mut responses = Map::new();
        for (code, description) in action.codes {
            responses.insert((*code).to_owned(), response(description));
        }
        responses.insert("401".into(), json!({"description": "Unauthorized"}));
        operation["responses"] = Value::Object(responses);
        if self == Self::V2 {
            operation["produces"] = json!(["application/json"]);
            operation["schemes"] = json!(["https"]);
        }
        operation
    }
}

/// One query or path parameter we implement.
#[derive(Debug, Clone, Copy)]
struct Parameter {
    name: &'static str,
    location: &'static str,
    kind: &'static str,
    description: &'static str,
}

const fn query(name: &'static str, kind: &'static str, description: &'static str) -> Parameter {
    Parameter { name, location: "query", kind, description }
}

const NAME: Parameter =
    Parameter { name: "name", location: "path", kind: "string", description: "name of the NodeResourceTopology" };
const DRY_RUN: Parameter = query(
    "dryRun",
    "string",
    "When present, indicates that modifications should not be persisted. The only valid value is All.",
);
// kubectl looks for `fieldValidation` on PATCH to decide that it may leave validation to us.
const FIELD_VALIDATION: Parameter =
    query("fieldValidation", "string", "How the server treats unknown fields: Ignore, Warn (the default) or Strict.");
const LIST_PARAMETERS: &[Parameter] = &[
    query("allowWatchBookmarks", "boolean", "Asks a watch for BOOKMARK events."),
    query("continue", "string", "The continue token of the previous page."),
    query("fieldSelector", "string", "Selects objects by metadata.name (and the empty metadata.namespace)."),
    query("labelSelector", "string", "Selects objects by their labels."),
    query("limit", "integer", "The most objects a page holds."),
    query("resourceVersion", "string", "The state the list or watch starts from."),
    query("resourceVersionMatch", "string", "How resourceVersion applies to a list: Exact or NotOlderThan."),
    query("sendInitialEvents", "boolean", "Starts a watch with the current state, then a BOOKMARK."),
    query("timeoutSeconds", "integer", "How long a watch lasts (0 or absent: the server's default)."),
    query("watch", "boolean", "Streams changes instead of a list."),
];
const WRITE_PARAMETERS: &[Parameter] = &[DRY_RUN, FIELD_VALIDATION];
const DELETE_PARAMETERS: &[Parameter] = &[
    DRY_RUN,
    query("gracePeriodSeconds", "integer", "Accepted and ignored: NodeResourceTopology has no graceful deletion."),
    query("orphanDependents", "boolean", "Deprecated: use propagationPolicy."),
    query("propagationPolicy", "string", "How dependents are garbage collected: Orphan, Background or Foreground."),
];

/// One operation on a path.
#[derive(Debug)]
struct Action {
    id: &'static str,
    verb: &'static str,
    description: &'static str,
    /// The request body's definition and media types.
    body: Option<&'static str>,
    consumes: &'static [&'static str],
    /// The answer's definition and codes.
    answer: &'static str,
    codes: &'static [(&'static str, &'static str)],
}

/// Definition names, reverse-DNS like Kubernetes' own (`io.k8s.…`).
const OBJECT: &str = "io.k8s.topology.node.v1alpha2.NodeResourceTopology";
const LIST: &str = "io.k8s.topology.node.v1alpha2.NodeResourceTopologyList";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const JSON: &[&str] = &["application/json"];
const OK: &[(&str, &str)] = &[("200", "OK")];

fn paths(spec: Spec) -> Value {
    let collection = [
        (
            "get",
            Action {
                id: "listTopologyNodeV1alpha2NodeResourceTopology",
                verb: "list",
                description: "list or watch objects of kind NodeResourceTopology",
                body: None,
                consumes: &[],
                answer: LIST,
                codes: OK,
            },
            LIST_PARAMETERS,
        ),
        (
            "post",
            Action {
                id: "createTopologyNodeV1alpha2NodeResourceTopology",
                verb: "post",
                description: "create a NodeResourceTopology",
                body: Some(OBJECT),
                consumes: JSON,
                answer: OBJECT,
                codes: &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
            },
            WRITE_PARAMETERS,
        ),
        (
            "delete",
            Action {
                id: "deleteTopologyNodeV1alpha2CollectionNodeResourceTopology",
                verb: "deletecollection",
                description: "delete collection of NodeResourceTopology",
                body: Some(DELETE_OPTIONS),
                consumes: JSON,
                answer: LIST,
                codes: OK,
            },
            DELETE_PARAMETERS,
        ),
    ];
    let item = [
        (
            "get",
            Action {
                id: "readTopologyNodeV1alpha2NodeResourceTopology",
                verb: "get",
                description: "read the specified NodeResourceTopology",
                body: None,
                consumes: &[],
                answer: OBJECT,
                codes: OK,
            },
            &[][..],
        ),
        (
            "put",
            Action {
                id: "replaceTopologyNodeV1alpha2NodeResourceTopology",
                verb: "put",
                description: "replace the specified NodeResourceTopology",
                body: Some(OBJECT),
                consumes: JSON,
                answer: OBJECT,
                codes: &[("200", "OK"), ("201", "Created")],
            },
            WRITE_PARAMETERS,
        ),
        (
            "patch",
            Action {
                id: "patchTopologyNodeV1alpha2NodeResourceTopology",
                verb: "patch",
                description: "partially update the specified NodeResourceTopology",
                body: Some(PATCH),
                consumes: &["application/json-patch+json", "application/merge-patch+json"],
                answer: OBJECT,
                codes: OK,
            },
            WRITE_PARAMETERS,
        ),
        (
            "delete",
            Action {
                id: "deleteTopologyNodeV1alpha2NodeResourceTopology",
                verb: "delete",
                description: "delete a NodeResourceTopology",
                body: Some(DELETE_OPTIONS),
                consumes: JSON,
                answer: OBJECT,
                codes: &[("200", "OK"), ("202", "Accepted")],
            },
            DELETE_PARAMETERS,
        ),
    ];
    let path_item = |operations: &[(&str, Action, &[Parameter])], shared: &[Parameter]| {
        let mut out = Map::new();
        for (method, action, parameters) in operations {
            out.insert((*method).to_owned(), spec.operation(action, parameters));
        }
        if !shared.is_empty() {
            out.insert("parameters".into(), shared.iter().map(|p| spec.parameter(p)).collect());
        }
        Value::Object(out)
    };
    json!({
        format!("/apis/{GROUP}/{VERSION}/{PLURAL}"): path_item(&collection, &[]),
        format!("/apis/{GROUP}/{VERSION}/{PLURAL}/{{name}}"): path_item(&item, &[NAME]),
    })
}

/// The request-body definitions the paths refer to besides our own kinds. They carry no
/// `x-kubernetes-group-version-kind`: kube-apiserver's merge keeps (or renames) them beside its
/// own DeleteOptions, which alone should answer to that kind for kubectl.
fn request_definitions() -> [(&'static str, Value); 2] {
    [
        (
            DELETE_OPTIONS,
            json!({
                "description": "DeleteOptions may be provided when deleting an API object.",
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "dryRun": {"type": "array", "items": {"type": "string"}},
                    "gracePeriodSeconds": {"type": "integer", "format": "int64"},
                    "orphanDependents": {"type": "boolean"},
                    "propagationPolicy": {"type": "string"},
                    "preconditions": {"type": "object", "properties": {
                        "resourceVersion": {"type": "string"}, "uid": {"type": "string"}}},
                },
            }),
        ),
        (
            PATCH,
            json!({
                "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
                "type": "object",
            }),
        ),
    ]
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
    fn v2_document_encodes_to_protobuf() {
        let docs = OpenApi::new();
        let v2: Value = serde_json::from_slice(&docs.v2).unwrap();
        let encoded = protobuf::document(&v2).unwrap();
        assert_eq!(docs.v2_protobuf, encoded);
        assert_ne!(docs.v2_protobuf_etag, docs.v2_etag);
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
