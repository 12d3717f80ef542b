//! The CSV's `clusterPermissions` and `permissions` of one ServiceAccount: the rules of every
//! role the manifests bind it to, so the OLM install grants what the kustomize one does.
//!
//! Two differences, both from how OLM works. OLM grants `permissions` only in the install
//! namespace, so a Role elsewhere (the controllers' in `kube-system`, which lets them bind the
//! scheduler to `extension-apiserver-authentication-reader`) becomes cluster-wide: `create` on
//! RoleBindings, `patch` of the scheduler's binding by name and `bind` of that one Role by name,
//! in every namespace instead of `kube-system` alone (creating a binding still needs `bind` on,
//! or every permission of, the role it grants, so this does not let them grant more than they
//! hold). And what the controllers' Role allows on the API server's own binding is left out: OLM
//! makes that binding for the API server it installs, and the controllers, installed by OLM in
//! `--apiserver-deployment=installed` mode, never touch it. Nor is what the controllers' role
//! allows on the pod webhook's configuration: under OLM the CSV declares that webhook, and the
//! controllers (`--certificate-mode=olm`) never apply their own; `create` on every
//! MutatingWebhookConfiguration is not a right to hand out unused.

use anyhow::bail;
use serde_json::Value;

use numaresources_controllers::names::POD_ROUTING_CONFIGURATION;

use super::MANIFEST_NAMESPACE;
use super::source::{Manifests, named};

/// Built-in roles the manifests bind the API server to, which OLM binds itself for a
/// deployment that owns an APIService (`<service>-system:auth-delegator` and
/// `<service>-auth-reader` in kube-system).
const BOUND_BY_OLM: &[(&str, &str)] =
    &[("ClusterRole", "system:auth-delegator"), ("Role", "extension-apiserver-authentication-reader")];

/// The rules of the built-in ClusterRoles the manifests bind and OLM does not: a CSV grants
/// rules, it cannot bind a role, so they are written out as Kubernetes defines them.
fn built_in_rules(role: &str) -> Option<Vec<Value>> {
    match role {
        // The ServiceAccount issuer's discovery document and public keys.
        "system:service-account-issuer-discovery" => Some(vec![serde_json::json!({
            "nonResourceURLs": [
                "/.well-known/openid-configuration",
                "/.well-known/openid-configuration/",
                "/openid/v1/jwks",
                "/openid/v1/jwks/",
            ],
            "verbs": ["get"],
        })]),
        _ => None,
    }
}

/// Rules granted cluster-wide and in the install namespace.
#[derive(Debug, Default)]
pub struct Permissions {
    pub cluster: Vec<Value>,
    pub namespaced: Vec<Value>,
}

/// What `service_account` is granted. `owns_api_service`: its deployment serves an APIService,
/// so OLM makes the delegation bindings.
pub fn of(manifests: &Manifests, service_account: &str, owns_api_service: bool) -> anyhow::Result<Permissions> {
    let mut granted = Permissions::default();
    let bound_by_olm = |kind: &str, name: &str| owns_api_service && BOUND_BY_OLM.contains(&(kind, name));
    let made_by_olm = bindings_made_by_olm(manifests);
    for binding in manifests.cluster_role_bindings.iter().filter(|b| binds(b, service_account)) {
        let role = &binding["roleRef"]["name"];
        match named(&manifests.cluster_roles, role.as_str().unwrap_or_default()) {
            Some(cluster_role) => granted.cluster.extend(rules(cluster_role)),
            None if bound_by_olm("ClusterRole", role.as_str().unwrap_or_default()) => {}
            None => match built_in_rules(role.as_str().unwrap_or_default()) {
                Some(built_in) => granted.cluster.extend(built_in),
                None => bail!("{service_account} is bound to ClusterRole {role}, which the manifests do not ship"),
            },
        }
    }
    for binding in manifests.role_bindings.iter().filter(|b| binds(b, service_account)) {
        let namespace = binding["metadata"]["namespace"].as_str().unwrap_or_default();
        let (kind, role) = (binding["roleRef"]["kind"].as_str().unwrap_or_default(), &binding["roleRef"]["name"]);
        let role_name = role.as_str().unwrap_or_default();
        let found = match kind {
            "Role" => manifests
                .roles
                .iter()
                .find(|r| r["metadata"]["name"] == *role && r["metadata"]["namespace"] == namespace),
            _ => named(&manifests.cluster_roles, role_name),
        };
        match found {
            Some(found) if namespace == MANIFEST_NAMESPACE => granted.namespaced.extend(rules(found)),
            // OLM grants `permissions` only in the install namespace: what the manifests grant in
            // another one (the controllers' bindings in kube-system) becomes cluster-wide.
            Some(found) => granted.cluster.extend(without_names(rules(found), &made_by_olm)),
            None if bound_by_olm(kind, role_name) => {}
            None => bail!("{service_account} is bound to {kind} {namespace}/{role}, which the manifests do not ship"),
        }
    }
    granted.cluster = without_pod_routing(granted.cluster);
    Ok(granted)
}

/// `rules` without the pod routing configuration's name and without `create` on
/// MutatingWebhookConfigurations (which cannot name it), see the module documentation.
fn without_pod_routing(rules: Vec<Value>) -> Vec<Value> {
    let creates_mutating_configurations = |rule: &Value| {
        rule["resources"] == serde_json::json!(["mutatingwebhookconfigurations"])
            && rule["verbs"] == serde_json::json!(["create"])
    };
    let rules = without_names(rules, &[POD_ROUTING_CONFIGURATION.to_owned()]);
    rules.into_iter().filter(|rule| !creates_mutating_configurations(rule)).collect()
}

/// The RoleBindings of the manifests to a role in [`BOUND_BY_OLM`]: the API server's, which OLM
/// makes itself (under its own names) for the deployment that owns the APIService.
fn bindings_made_by_olm(manifests: &Manifests) -> Vec<String> {
    let bound_by_olm = |binding: &&Value| {
        let role = (
            binding["roleRef"]["kind"].as_str().unwrap_or_default(),
            binding["roleRef"]["name"].as_str().unwrap_or_default(),
        );
        BOUND_BY_OLM.contains(&role)
    };
    let names = manifests.role_bindings.iter().filter(bound_by_olm);
    names.filter_map(|binding| binding["metadata"]["name"].as_str().map(str::to_owned)).collect()
}

/// `rules` without the resource names in `names`; a rule left with none is dropped (an empty
/// `resourceNames` would mean every object).
fn without_names(rules: Vec<Value>, names: &[String]) -> Vec<Value> {
    rules
        .into_iter()
        .filter_map(|mut rule| {
            // `get_mut`, not indexing: that would add a `resourceNames: null` to every other rule.
            let Some(listed) = rule.get_mut("resourceNames").and_then(Value::as_array_mut) else { return Some(rule) };
            listed.retain(|name| !names.iter().any(|dropped| name == dropped.as_str()));
            (!listed.is_empty()).then_some(rule)
        })
        .collect()
}

fn binds(binding: &Value, service_account: &str) -> bool {
    binding["subjects"].as_array().is_some_and(|subjects| {
        subjects.iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == service_account && s["namespace"] == MANIFEST_NAMESPACE
        })
    })
}

fn rules(role: &Value) -> Vec<Value> {
    role["rules"].as_array().cloned().unwrap_or_default()
}
