//! The OpenAPI documents against the official schemas (tests/fixtures/openapi-schemas), validated
//! by an independent implementation (the `jsonschema` crate): `/openapi/v2` must be Swagger 2.0
//! and `/openapi/v3/apis/<group>/<version>` OpenAPI 3.0, each on its own. kube-apiserver merges
//! our v2 document into its own with a strict parser, and one parameter spelled the v3 way
//! makes its whole `/openapi/v2` answer 503, for every kubectl in the cluster.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::path::Path;
use std::sync::Arc;

use http::StatusCode;
use numaresources_apiserver::openapi::OpenApi;
use numaresources_apiserver::router;
use serde_json::Value;
use support::in_process::{self, Answer};

const V3_PATH: &str = "/openapi/v3/apis/topology.node.k8s.io/v1alpha2";
const ITEM: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/{name}";

fn official_schema(file: &str) -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openapi-schemas").join(file);
    let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    jsonschema::draft4::new(&schema).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn swagger_2() -> jsonschema::Validator {
    official_schema("swagger-2.0.json")
}

fn openapi_3() -> jsonschema::Validator {
    official_schema("openapi-3.0.json")
}

/// Every violation, with where it is, so a failure names the offending parameter.
fn violations(validator: &jsonschema::Validator, document: &Value) -> Vec<String> {
    validator.iter_errors(document).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

fn documents() -> (Value, Value) {
    let docs = OpenApi::new();
    (serde_json::from_slice(&docs.v2).unwrap(), serde_json::from_slice(&docs.v3_group_version).unwrap())
}

#[test]
fn v2_is_valid_swagger_2_0() {
    let (v2, _) = documents();
    let found = violations(&swagger_2(), &v2);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn v3_is_valid_openapi_3_0() {
    let (_, v3) = documents();
    let found = violations(&openapi_3(), &v3);
    assert!(found.is_empty(), "{found:#?}");
}

/// The validator catches the very mistakes that broke kube-apiserver's merge: a v3-style query
/// parameter (`schema`) or response (`content`) in v2, and a v2-style parameter (`type`) in v3.
#[test]
fn the_validator_catches_one_document_spelled_for_the_other_version() {
    let (mut v2, mut v3) = documents();
    let patch = &mut v2["paths"][ITEM]["patch"];
    let query = patch["parameters"].as_array_mut().unwrap().iter_mut().find(|p| p["in"] == "query").unwrap();
    query["schema"] = serde_json::json!({"type": "string"});
    assert!(!violations(&swagger_2(), &v2).is_empty(), "a query parameter with a schema is not Swagger 2.0");

    let (mut v2, _) = documents();
    v2["paths"][ITEM]["get"]["responses"]["200"]["content"] = serde_json::json!({"application/json": {}});
    assert!(!violations(&swagger_2(), &v2).is_empty(), "a response with content is not Swagger 2.0");

    let parameter = &mut v3["paths"][ITEM]["patch"]["parameters"][0];
    parameter["type"] = serde_json::json!("string");
    assert!(!violations(&openapi_3(), &v3).is_empty(), "a parameter with a type is not OpenAPI 3.0");
}

#[test]
fn each_version_spells_parameters_bodies_and_answers_its_own_way() {
    let (v2, v3) = documents();
    let patch_v2 = &v2["paths"][ITEM]["patch"];
    let body = patch_v2["parameters"].as_array().unwrap().iter().find(|p| p["in"] == "body").unwrap();
    assert_eq!(body["schema"]["$ref"], "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch");
    let field_validation = patch_v2["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "fieldValidation");
    assert_eq!(field_validation.unwrap()["type"], "string", "kubectl finds fieldValidation on PATCH");
    assert!(patch_v2["responses"]["200"]["schema"]["$ref"].is_string());

    let patch_v3 = &v3["paths"][ITEM]["patch"];
    assert!(patch_v3["parameters"].as_array().unwrap().iter().all(|p| p.get("type").is_none()));
    assert!(patch_v3["requestBody"]["content"]["application/merge-patch+json"]["schema"]["$ref"].is_string());
    let answer = &patch_v3["responses"]["200"]["content"]["application/json"]["schema"]["$ref"];
    assert_eq!(answer, "#/components/schemas/io.k8s.topology.node.v1alpha2.NodeResourceTopology");
    // Every reference resolves in its own document.
    for (document, prefix, definitions) in
        [(&v2, "#/definitions/", &v2["definitions"]), (&v3, "#/components/schemas/", &v3["components"]["schemas"])]
    {
        let text = document.to_string();
        for reference in text.split(&format!("\"$ref\":\"{prefix}")).skip(1) {
            let name = reference.split('"').next().unwrap();
            assert!(definitions.get(name).is_some(), "dangling reference to {name}");
        }
    }
}

async fn get(path: &str, accept: Option<&str>) -> Answer {
    let app = router(Arc::new(in_process::state()));
    let headers: Vec<_> = accept.map(|accept| ("accept", accept)).into_iter().collect();
    in_process::call(&app, "GET", path, &headers, None).await
}

#[tokio::test]
async fn the_served_documents_are_the_valid_ones() {
    let v2 = get("/openapi/v2", Some("application/json")).await;
    assert_eq!((v2.status, v2.header("content-type")), (StatusCode::OK, "application/json"));
    let found = violations(&swagger_2(), &serde_json::from_slice(&v2.bytes).unwrap());
    assert!(found.is_empty(), "{found:#?}");
    let v3 = get(V3_PATH, None).await;
    assert_eq!((v3.status, v3.header("content-type")), (StatusCode::OK, "application/json"));
    let found = violations(&openapi_3(), &serde_json::from_slice(&v3.bytes).unwrap());
    assert!(found.is_empty(), "{found:#?}");
}

/// kube-apiserver answers a v3 request that accepts only the protobuf form with 406; JSON
/// labelled 200 would be parsed as protobuf by the client.
#[tokio::test]
async fn a_protobuf_only_accept_is_never_answered_with_json() {
    let protobuf_v3 = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf";
    let refused = get(V3_PATH, Some(protobuf_v3)).await;
    assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE);
    let status: Value = serde_json::from_slice(&refused.bytes).unwrap();
    assert_eq!(status["reason"], "NotAcceptable");
    // Offering JSON as well (or anything) gets JSON.
    for accept in [format!("{protobuf_v3}, application/json"), "*/*".to_owned(), "application/*".to_owned()] {
        let served = get(V3_PATH, Some(&accept)).await;
        assert_eq!((served.status, served.header("content-type")), (StatusCode::OK, "application/json"), "{accept}");
    }
    let text = get(V3_PATH, Some("text/html")).await;
    assert_eq!(text.status, StatusCode::NOT_ACCEPTABLE);
}

/// `/openapi/v2` has a protobuf form, which client-go's `OpenAPISchema()` (kubectl up to 1.28
/// for create, apply and explain) asks for alone; it is labelled the way Go's MIME parser
/// accepts, as kube-apiserver labels it.
#[tokio::test]
async fn v2_is_served_as_protobuf_to_clients_that_ask_for_it() {
    let protobuf = get("/openapi/v2", Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf")).await;
    assert_eq!(protobuf.status, StatusCode::OK);
    assert_eq!(protobuf.header("content-type"), "application/com.github.proto-openapi.spec.v2.v1.0+protobuf");
    assert_eq!(protobuf.bytes, OpenApi::new().v2_protobuf);
    assert_ne!(protobuf.bytes.first(), Some(&b'{'), "not JSON");
    assert_eq!(protobuf.header("vary"), "Accept", "caches must not answer one form for the other");
    let json =
        get("/openapi/v2", Some("application/json, application/com.github.proto-openapi.spec.v2@v1.0+protobuf")).await;
    assert_eq!(json.header("content-type"), "application/json", "the client's first choice wins");
    let refused = get("/openapi/v2", Some("application/vnd.kubernetes.protobuf")).await;
    assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE);
}
