//! What a request asks to do, in the terms of a SubjectAccessReview: a verb on our resource (with
//! its name), or a verb on a non-resource path.

use http::Method;
use numaresources_api::nrt::{GROUP, PLURAL, VERSION};
use numaresources_api::request_info::resource_request;

/// A request's authorization attributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Attributes {
    /// A request on `noderesourcetopologies`.
    Resource {
        /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
        verb: &'static str,
        /// The object's name, for requests on one object.
        name: Option<String>,
    },
    /// Any other path: discovery, OpenAPI, `/version`.
    NonResource {
        /// The lower-case HTTP method.
        verb: String,
        /// The path.
        path: String,
    },
}

/// Paths every caller may reach, authenticated or not (probes have no credentials).
pub fn always_allowed(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"]
        .iter()
        .any(|p| path == *p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
}

impl Attributes {
    /// Classifies a request, read as kube-apiserver reads it
    /// ([`numaresources_api::request_info`]). Anything but our collection and its objects is
    /// authorized by its path, and so is a verb our resource does not serve on that path (a
    /// POST to an object, a PUT to the collection): the handler answers it 405.
    pub fn of(method: &Method, path: &str, query: Option<&str>) -> Self {
        let Some(request) = resource_request(method.as_str(), path, query) else {
            return Self::non_resource(method, path);
        };
        let ours = request.group == GROUP
            && request.version == VERSION
            && request.resource == PLURAL
            && request.namespace.is_none()
            && request.subresource.is_none();
        let served = match request.verb {
            "create" | "deletecollection" | "list" => request.name.is_none(),
            "get" | "update" | "patch" | "delete" => request.name.is_some(),
            _ => true,
        };
        if !ours || !served {
            return Self::non_resource(method, path);
        }
        Self::Resource { verb: request.verb, name: request.name.map(str::to_owned) }
    }

    fn non_resource(method: &Method, path: &str) -> Self {
        Self::NonResource { verb: method.as_str().to_ascii_lowercase(), path: path.to_owned() }
    }

    /// True for verbs that change objects.
    pub(crate) fn is_write(&self) -> bool {
        matches!(self, Self::Resource { verb: "create" | "update" | "patch" | "delete" | "deletecollection", .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";

    fn resource(verb: &'static str, name: Option<&str>) -> Attributes {
        Attributes::Resource { verb, name: name.map(str::to_owned) }
    }

    #[test]
    fn each_request_maps_to_its_verb() {
        let watch_path = "/apis/topology.node.k8s.io/v1alpha2/watch/noderesourcetopologies/worker-0";
        let rows = [
            (Method::GET, BASE.to_owned(), None, resource("list", None)),
            (Method::GET, BASE.to_owned(), Some("watch=true&resourceVersion=5"), resource("watch", None)),
            (Method::GET, format!("{BASE}/worker-0"), None, resource("get", Some("worker-0"))),
            (Method::GET, watch_path.to_owned(), None, resource("watch", Some("worker-0"))),
            (Method::POST, BASE.to_owned(), None, resource("create", None)),
            (Method::PUT, format!("{BASE}/worker-0"), None, resource("update", Some("worker-0"))),
            (Method::PATCH, format!("{BASE}/worker-0"), None, resource("patch", Some("worker-0"))),
            (Method::DELETE, format!("{BASE}/worker-0"), None, resource("delete", Some("worker-0"))),
            (Method::DELETE, BASE.to_owned(), None, resource("deletecollection", None)),
            (
                Method::GET,
                "/openapi/v2".to_owned(),
                None,
                Attributes::NonResource { verb: "get".into(), path: "/openapi/v2".into() },
            ),
        ];
        for (method, path, query, want) in rows {
            assert_eq!(Attributes::of(&method, &path, query), want, "{method} {path}");
        }
    }

    #[test]
    fn only_health_paths_are_always_allowed() {
        assert!(always_allowed("/healthz") && always_allowed("/readyz/ping") && always_allowed("/livez"));
        assert!(!always_allowed("/healthzx") && !always_allowed("/apis") && !always_allowed("/version"));
    }
}
