//! Discovery: the documents kube-apiserver's aggregator and clients read to learn what we serve.
//!
//! Legacy discovery (`/apis`, `/apis/<group>`, `/apis/<group>/<version>`) is mandatory: the
//! aggregator's availability probe is `GET /apis/<group>/<version>`, which must answer 200 without
//! touching the store. Aggregated discovery (`apidiscovery.k8s.io/v2`, and `v2beta1`) is what the
//! aggregator asks for first, with an ETag so an unchanged document costs a 304.
//! `/version` and `/api` are for clients talking to us directly (standalone and `local` modes).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use http::header::ACCEPT;
use http::{HeaderMap, StatusCode};
use numaresources_api::nrt::{GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR};
use serde_json::json;

use crate::AppState;
use crate::etag::{hash, with_etag};
use crate::render::json_bytes;
use crate::response::json_response;

pub use numaresources_api::nrt::VERSION;
/// Verbs we implement, as discovery advertises them.
pub(crate) const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
/// The Kubernetes API level we report on `/version` (what our types are compiled against).
pub(crate) const KUBERNETES_MINOR: &str = "33";

/// Every discovery document, rendered once.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// `GET /apis` (legacy `APIGroupList`).
    pub group_list: Bytes,
    /// `GET /apis/<group>`.
    pub group: Bytes,
    /// `GET /apis/<group>/<version>`.
    pub resource_list: Bytes,
    /// `GET /apis` with the `apidiscovery.k8s.io/v2` media type.
    pub aggregated_v2: Bytes,
    /// The same, for `v2beta1`.
    pub aggregated_v2beta1: Bytes,
    /// The ETag of the aggregated documents.
    pub etag: String,
    /// `GET /version`.
    pub version: Bytes,
    /// `GET /api`.
    pub core: Bytes,
}

/// The media type of aggregated discovery, by version.
pub(crate) fn aggregated_media_type(v2beta1: bool) -> &'static str {
    if v2beta1 {
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    } else {
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    }
}

/// Which aggregated discovery version an `Accept` header asks for first, if any.
pub(crate) fn wants_aggregated(accept: &str) -> Option<bool> {
    accept.split(',').find_map(|range| {
        let params: Vec<&str> = range.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if !has("g=apidiscovery.k8s.io") || !has("as=APIGroupDiscoveryList") {
            return None;
        }
        if has("v=v2") {
            Some(false)
        } else if has("v=v2beta1") {
            Some(true)
        } else {
            None
        }
    })
}

impl Discovery {
    /// Renders every document for `binary_version` (reported on `/version`).
    pub fn new(binary_version: &str, git_commit: &str) -> Self {
        let group_version = format!("{GROUP}/{VERSION}");
        let version_entry = json!({"groupVersion": group_version, "version": VERSION});
        let group = json!({
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": GROUP,
            "versions": [version_entry],
            "preferredVersion": version_entry,
        });
        let group_list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group.clone()]});
        let resource_list = json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": [{
                "name": PLURAL,
                "singularName": SINGULAR,
                "namespaced": false,
                "kind": KIND,
                "verbs": VERBS,
                "shortNames": SHORT_NAMES,
            }],
        });
        let aggregated = |api_version: &str| {
            json!({
                "kind": "APIGroupDiscoveryList",
                "apiVersion": api_version,
                "metadata": {},
                "items": [{
                    "metadata": {"name": GROUP},
                    "versions": [{
                        "version": VERSION,
                        "freshness": "Current",
                        "resources": [{
                            "resource": PLURAL,
                            "responseKind": {"group": GROUP, "version": VERSION, "kind": KIND},
                            "scope": "Cluster",
                            "singularResource": SINGULAR,
                            "verbs": VERBS,
                            "shortNames": SHORT_NAMES,
                        }],
                    }],
                }],
            })
        };
        let aggregated_v2 = json_bytes(&aggregated("apidiscovery.k8s.io/v2"));
        let version = json!({
            "major": "1",
            "minor": KUBERNETES_MINOR,
            "gitVersion": format!("v1.{KUBERNETES_MINOR}.0"),
            "gitCommit": git_commit,
            "gitTreeState": "clean",
            "buildDate": "",
            "goVersion": format!("numaresources {binary_version}"),
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
        });
        Self {
            group_list: json_bytes(&group_list),
            group: json_bytes(&group),
            resource_list: json_bytes(&resource_list),
            etag: format!("\"{}\"", hash(&aggregated_v2)),
            aggregated_v2,
            aggregated_v2beta1: json_bytes(&aggregated("apidiscovery.k8s.io/v2beta1")),
            version: json_bytes(&version),
            core: json_bytes(&json!({"kind": "APIVersions", "versions": [], "serverAddressByClientCIDRs": []})),
        }
    }
}

/// `GET /apis`: legacy or aggregated, as `Accept` asks.
pub async fn apis(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let d = &state.discovery;
    match wants_aggregated(accept) {
        None => json_response(StatusCode::OK, d.group_list.clone()),
        Some(v2beta1) => {
            let body = if v2beta1 { d.aggregated_v2beta1.clone() } else { d.aggregated_v2.clone() };
            with_etag(&headers, body, &d.etag, aggregated_media_type(v2beta1))
        }
    }
}

/// `GET /apis/<group>`.
pub async fn group(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.discovery.group.clone())
}

/// `GET /apis/<group>/<version>`, the aggregator's availability probe: never touches the store.
pub async fn resources(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.discovery.resource_list.clone())
}

/// `GET /version`.
pub async fn version(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.discovery.version.clone())
}

/// `GET /api`.
pub async fn core(State(state): State<Arc<AppState>>) -> Response {
    json_response(StatusCode::OK, state.discovery.core.clone())
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn aggregated_discovery_is_recognised_in_either_version() {
        let aggregator = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        assert_eq!(wants_aggregated(aggregator), Some(false));
        assert_eq!(
            wants_aggregated("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"),
            Some(true)
        );
        assert_eq!(wants_aggregated("application/json"), None);
    }

    #[test]
    fn documents_name_our_resource_everywhere() {
        let d = Discovery::new("0.1.0", "abc");
        let resources: Value = serde_json::from_slice(&d.resource_list).unwrap();
        let resource = &resources["resources"][0];
        assert_eq!(resource["name"], "noderesourcetopologies");
        assert_eq!(resource["namespaced"], false);
        assert_eq!(resource["kind"], "NodeResourceTopology");
        let aggregated: Value = serde_json::from_slice(&d.aggregated_v2).unwrap();
        let resource = &aggregated["items"][0]["versions"][0]["resources"][0];
        assert_eq!(resource["responseKind"]["kind"], "NodeResourceTopology");
        assert_eq!(resource["scope"], "Cluster");
        let version: Value = serde_json::from_slice(&d.version).unwrap();
        assert_eq!(version["gitVersion"], "v1.33.0");
    }
}
