//! The fake API server authorizes every request as the real one would authorize a component's
//! ServiceAccount: against that component's checked-in RBAC manifests ([`Rbac`]: the
//! ClusterRoles everywhere, each Role in its own namespace). A reconciler that makes a call the
//! manifests do not allow gets `403 Forbidden` in every scenario test, so the RBAC cannot drift
//! from the code.
//!
//! Escalation rules (`bind`, holding what a written role grants) and admission plugins
//! (`<owner>/finalizers`) are not requests of their own; `tests/manifests.rs` checks those.

use std::path::Path;

use http::Method;
use k8s_openapi::api::rbac::v1::PolicyRule;
use numaresources_api::request_info::resource_request;
use serde::Deserialize;
use serde_json::Value;

/// What the authorizer sees of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    pub namespace: Option<String>,
    /// Empty for collections and for `create`.
    pub name: String,
}

impl std::fmt::Display for Attributes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{} {:?}", self.verb, self.group, self.resource, self.name)?;
        match &self.namespace {
            Some(namespace) => write!(f, " in namespace {namespace}"),
            None => write!(f, " (cluster)"),
        }
    }
}

/// The request's attributes, read as kube-apiserver reads them; `None` for paths that are not
/// resources (discovery).
pub fn attributes(method: &Method, path: &str, query: &str) -> Option<Attributes> {
    let request = resource_request(method.as_str(), path, Some(query))?;
    let resource = match request.subresource {
        Some(sub) => format!("{}/{sub}", request.resource),
        None => request.resource.to_owned(),
    };
    Some(Attributes {
        verb: request.verb.to_owned(),
        group: request.group.to_owned(),
        resource,
        namespace: request.namespace.map(str::to_owned),
        name: request.name.unwrap_or_default().to_owned(),
    })
}

/// A ServiceAccount's rules, as RBAC manifests grant them: the ClusterRoles' everywhere, each
/// Role's in its own namespace.
#[derive(Debug, Default)]
pub struct Rbac {
    /// Where the rules were read from, for the 403's message.
    source: String,
    cluster: Vec<PolicyRule>,
    namespaced: Vec<(String, Vec<PolicyRule>)>,
}

impl Rbac {
    /// The rules of the ClusterRoles and Roles in the multi-document YAML at `path` (bindings and
    /// other kinds are skipped: the file is one component's RBAC, all bound to its account).
    pub fn from_file(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut rules = Self { source: path.display().to_string(), ..Self::default() };
        for document in serde_norway::Deserializer::from_str(&text) {
            let doc = Value::deserialize(document).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let parsed = || -> Vec<PolicyRule> { serde_json::from_value(doc["rules"].clone()).unwrap_or_default() };
            match (doc["kind"].as_str(), doc["metadata"]["namespace"].as_str()) {
                (Some("ClusterRole"), _) => rules.cluster.extend(parsed()),
                (Some("Role"), Some(namespace)) => rules.namespaced.push((namespace.to_owned(), parsed())),
                _ => {}
            }
        }
        rules
    }

    /// Where the rules were read from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when the rules allow the request.
    pub fn allows(&self, request: &Attributes) -> bool {
        self.cluster.iter().any(|rule| rule_allows(rule, request))
            || request.namespace.as_deref().is_some_and(|namespace| {
                self.namespaced.iter().any(|(ns, list)| ns == namespace && list.iter().any(|r| rule_allows(r, request)))
            })
    }
}

fn rule_allows(rule: &PolicyRule, request: &Attributes) -> bool {
    let any = |list: &[String], value: &str| list.iter().any(|v| v == value || v == "*");
    any(rule.api_groups.as_deref().unwrap_or_default(), &request.group)
        && any(rule.resources.as_deref().unwrap_or_default(), &request.resource)
        && any(&rule.verbs, &request.verb)
        && match rule.resource_names.as_deref() {
            None | Some([]) => true,
            // A rule limited to names never matches a request without one (create, list).
            Some(names) => !request.name.is_empty() && names.contains(&request.name),
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, path: &str, query: &str) -> String {
        attributes(&method, path, query).map(|a| a.to_string()).unwrap_or_default()
    }

    #[test]
    fn requests_map_to_what_the_authorizer_sees() {
        assert_eq!(attrs(Method::GET, "/api/v1/nodes", ""), "list /nodes \"\" (cluster)");
        assert_eq!(attrs(Method::GET, "/api/v1/nodes", "watch=true&x=1"), "watch /nodes \"\" (cluster)");
        assert_eq!(attrs(Method::GET, "/api/v1/nodes/a/proxy/configz", ""), "get /nodes/proxy \"a\" (cluster)");
        assert_eq!(
            attrs(Method::PATCH, "/apis/apps/v1/namespaces/ns/daemonsets/x", ""),
            "patch apps/daemonsets \"x\" in namespace ns"
        );
        assert_eq!(attrs(Method::PATCH, "/apis/g/v1/things/x/status", ""), "patch g/things/status \"x\" (cluster)");
        assert_eq!(attrs(Method::POST, "/api/v1/namespaces/ns/secrets", ""), "create /secrets \"\" in namespace ns");
        assert_eq!(attrs(Method::GET, "/apis", ""), "");
    }

    #[test]
    fn the_manifests_decide() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/controllers/rbac.yaml");
        let rbac = Rbac::from_file(Path::new(path));
        let allow = |method, path: &str| rbac.allows(&attributes(&method, path, "").unwrap());
        assert!(allow(Method::DELETE, "/apis/apps/v1/namespaces/numaresources/daemonsets/x"));
        assert!(!allow(Method::DELETE, "/apis/apps/v1/namespaces/elsewhere/daemonsets/x"), "a Role is per namespace");
        assert!(!allow(Method::GET, "/api/v1/namespaces/numaresources/secrets/someone-elses"), "limited to names");
        assert!(!allow(Method::DELETE, "/api/v1/nodes/a"));
    }
}
