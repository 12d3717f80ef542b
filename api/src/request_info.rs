//! What kube-apiserver reads from a request line before it authorizes it (its
//! `RequestInfoFactory`): for a request on a resource, the verb, the group and version, the
//! namespace, the resource and subresource, and the object's name. Our API server authorizes its
//! requests with it, and the controllers' test double authorizes theirs against the shipped RBAC
//! with it, so both read a path the way kube-apiserver does.

/// A request on a resource, in the terms of a SubjectAccessReview's `resourceAttributes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceRequest<'a> {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: &'static str,
    /// The API group; empty for the core group (`/api/v1`).
    pub group: &'a str,
    /// The API version.
    pub version: &'a str,
    /// The namespace, for namespaced requests.
    pub namespace: Option<&'a str>,
    /// The resource (plural).
    pub resource: &'a str,
    /// The subresource (`status`, `proxy`), if any; path segments after it are not part of it.
    pub subresource: Option<&'a str>,
    /// The object's name, for requests on one object.
    pub name: Option<&'a str>,
}

/// Reads a request; `None` when it is not a request on a resource (discovery, `/version`,
/// `/openapi/v2`, an unknown method), which is authorized by its path instead.
pub fn resource_request<'a>(method: &str, path: &'a str, query: Option<&str>) -> Option<ResourceRequest<'a>> {
    let segments: Vec<&str> = path.trim_start_matches('/').trim_end_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    // The deprecated `/watch/` prefix makes any GET a watch.
    let (legacy_watch, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    // `namespaces/<ns>` alone is the Namespace object itself.
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => (Some(*namespace), rest),
        _ => (None, rest),
    };
    let (resource, name, subresource) = match rest {
        [] | [""] => return None,
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, subresource, ..] => (*resource, Some(*name), Some(*subresource)),
    };
    let verb = match (method, name.is_some()) {
        ("GET", _) if legacy_watch || asks_to_watch(query) => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some(ResourceRequest { verb, group, version, namespace, resource, subresource, name })
}

/// Whether the query's `watch` parameter is true, spelt as Go's `strconv.ParseBool` accepts it.
fn asks_to_watch(query: Option<&str>) -> bool {
    query.into_iter().flat_map(|q| q.split('&')).any(|pair| {
        pair.strip_prefix("watch=").is_some_and(|value| matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request as `verb group/resource[/subresource] "name" [in namespace ns]`.
    fn read(method: &str, path: &str, query: &str) -> String {
        let Some(request) = resource_request(method, path, (!query.is_empty()).then_some(query)) else {
            return String::new();
        };
        let resource = match request.subresource {
            Some(sub) => format!("{}/{sub}", request.resource),
            None => request.resource.to_owned(),
        };
        let mut out = format!("{} {}/{resource} {:?}", request.verb, request.group, request.name.unwrap_or_default());
        if let Some(namespace) = request.namespace {
            out += &format!(" in namespace {namespace}");
        }
        out
    }

    #[test]
    fn requests_read_as_kube_apiserver_reads_them() {
        let nrt = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";
        let rows = [
            ("GET", "/api/v1/nodes", "", "list /nodes \"\""),
            ("GET", "/api/v1/nodes", "watch=true&x=1", "watch /nodes \"\""),
            ("GET", "/api/v1/nodes", "watch=1", "watch /nodes \"\""),
            ("GET", "/api/v1/nodes", "watch=false", "list /nodes \"\""),
            ("GET", "/api/v1/nodes/a/proxy/configz", "", "get /nodes/proxy \"a\""),
            ("PATCH", "/apis/apps/v1/namespaces/ns/daemonsets/x", "", "patch apps/daemonsets \"x\" in namespace ns"),
            ("PATCH", "/apis/g/v1/things/x/status", "", "patch g/things/status \"x\""),
            ("POST", "/api/v1/namespaces/ns/secrets", "", "create /secrets \"\" in namespace ns"),
            ("GET", "/api/v1/namespaces/ns", "", "get /namespaces \"ns\""),
            ("GET", &format!("{nrt}/worker-0"), "", "get topology.node.k8s.io/noderesourcetopologies \"worker-0\""),
            ("DELETE", nrt, "", "deletecollection topology.node.k8s.io/noderesourcetopologies \"\""),
            (
                "GET",
                "/apis/topology.node.k8s.io/v1alpha2/watch/noderesourcetopologies/worker-0",
                "",
                "watch topology.node.k8s.io/noderesourcetopologies \"worker-0\"",
            ),
            ("GET", "/apis", "", ""),
            ("GET", "/apis/topology.node.k8s.io/v1alpha2", "", ""),
            ("GET", "/openapi/v2", "", ""),
            ("OPTIONS", nrt, "", ""),
        ];
        for (method, path, query, want) in rows {
            assert_eq!(read(method, path, query), want, "{method} {path}?{query}");
        }
    }
}
