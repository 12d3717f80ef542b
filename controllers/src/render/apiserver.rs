//! The NodeResourceTopology API server, rendered from the checked-in install manifests
//! (`manifests/apiserver/`), so what the controllers deploy and what a person applies by hand
//! cannot drift apart. The manifests are compiled in; rendering moves them into the operator's
//! namespace, sets the image, and adds what the self-managed certificate mode needs: the
//! APIService's `caBundle` (the Secrets are [`crate::certificates`]' work).

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RenderError, typed};
use crate::names;

/// The namespace the checked-in manifests are written for.
const MANIFEST_NAMESPACE: &str = "numaresources";

/// The manifests, in the order they are applied (the APIService separately, last).
const MANIFESTS: &[(&str, &str)] = &[
    ("service-account.yaml", include_str!("../../../manifests/apiserver/service-account.yaml")),
    ("rbac-delegation.yaml", include_str!("../../../manifests/apiserver/rbac-delegation.yaml")),
    ("rbac-server.yaml", include_str!("../../../manifests/apiserver/rbac-server.yaml")),
    ("rbac-lease.yaml", include_str!("../../../manifests/apiserver/rbac-lease.yaml")),
    ("rbac-aggregated.yaml", include_str!("../../../manifests/apiserver/rbac-aggregated.yaml")),
    ("deployment.yaml", include_str!("../../../manifests/apiserver/deployment.yaml")),
    ("pdb.yaml", include_str!("../../../manifests/apiserver/pdb.yaml")),
    ("service.yaml", include_str!("../../../manifests/apiserver/service.yaml")),
    ("apiservice.yaml", include_str!("../../../manifests/apiserver/apiservice.yaml")),
];

/// Every object of the API server install.
#[derive(Debug, Clone, Default)]
pub struct ApiserverObjects {
    /// Its identity.
    pub service_account: Option<ServiceAccount>,
    /// Its own role and the aggregated roles for people.
    pub cluster_roles: Vec<ClusterRole>,
    /// Delegation (auth-delegator) and its own role.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// Its own Role in the namespace: the leader-election Lease, the exporter pods its warm-up
    /// lists.
    pub roles: Vec<Role>,
    /// The authentication ConfigMap reader in `kube-system`, and the Lease Role's binding.
    pub role_bindings: Vec<RoleBinding>,
    /// The server.
    pub deployment: Option<Deployment>,
    /// At most one replica voluntarily disrupted at a time.
    pub disruption_budget: Option<PodDisruptionBudget>,
    /// What the APIService points at.
    pub service: Option<Service>,
    /// The registration with kube-apiserver's aggregator (without `caBundle`).
    pub api_service: Option<APIService>,
}

/// The install for `namespace`, running `image`.
pub fn objects(namespace: &str, image: &str) -> Result<ApiserverObjects, RenderError> {
    let mut out = ApiserverObjects::default();
    for (file, text) in MANIFESTS {
        for document in serde_norway::Deserializer::from_str(text) {
            let mut value = Value::deserialize(document).map_err(|e| yaml_error(file, e))?;
            if value.is_null() {
                continue;
            }
            relocate(&mut value, namespace, image);
            // Marks what the controllers manage (and watch) without changing the manifests.
            value["metadata"]["labels"][names::LABEL_MANAGED_BY] = json!(names::FIELD_MANAGER);
            let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
            match kind.as_str() {
                "ServiceAccount" => out.service_account = Some(typed("apiserver ServiceAccount", value)?),
                "ClusterRole" => out.cluster_roles.push(typed("apiserver ClusterRole", value)?),
                "ClusterRoleBinding" => out.cluster_role_bindings.push(typed("apiserver ClusterRoleBinding", value)?),
                "Role" => out.roles.push(typed("apiserver Role", value)?),
                "RoleBinding" => out.role_bindings.push(typed("apiserver RoleBinding", value)?),
                "Deployment" => out.deployment = Some(typed("apiserver Deployment", value)?),
                "PodDisruptionBudget" => out.disruption_budget = Some(typed("apiserver PodDisruptionBudget", value)?),
                "Service" => out.service = Some(typed("apiserver Service", value)?),
                "APIService" => out.api_service = Some(typed("APIService", value)?),
                _ => {}
            }
        }
    }
    Ok(out)
}

fn yaml_error(file: &'static str, error: serde_norway::Error) -> RenderError {
    RenderError { what: "apiserver manifest", source: serde::de::Error::custom(format!("{file}: {error}")) }
}

/// Moves a manifest object from `numaresources` to `namespace` (object, subjects, service
/// reference, certificate names) and sets the image.
fn relocate(value: &mut Value, namespace: &str, image: &str) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                match (key.as_str(), &*field) {
                    ("namespace", Value::String(ns)) if ns == MANIFEST_NAMESPACE => *field = json!(namespace),
                    ("image", Value::String(_)) => *field = json!(image),
                    _ => relocate(field, namespace, image),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| relocate(item, namespace, image)),
        Value::String(text) if text.contains(&format!(".{MANIFEST_NAMESPACE}.svc")) => {
            *text = text.replace(&format!(".{MANIFEST_NAMESPACE}.svc"), &format!(".{namespace}.svc"));
        }
        _ => {}
    }
}

/// The APIService with the CAs that clients must trust (self-managed mode).
pub fn with_ca_bundle(mut api_service: APIService, ca_pem: &str) -> APIService {
    if let Some(spec) = api_service.spec.as_mut() {
        spec.ca_bundle = Some(ByteString(ca_pem.as_bytes().to_vec()));
    }
    api_service
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::APISERVER;

    #[test]
    fn the_install_manifests_render_into_any_namespace() {
        let objects = objects("numa-system", "example.com/numaresources@sha256:abc").unwrap();
        let deployment = objects.deployment.unwrap();
        assert_eq!(deployment.metadata.namespace.as_deref(), Some("numa-system"));
        let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(container.image.as_deref(), Some("example.com/numaresources@sha256:abc"));
        let sni = container.args.iter().flatten().find(|a| a.starts_with("--tls-sni-names=")).unwrap();
        assert_eq!(
            sni,
            "--tls-sni-names=numaresources-apiserver.numa-system.svc,numaresources-apiserver.numa-system.svc.cluster.local"
        );
        let service = objects.api_service.unwrap().spec.unwrap().service.unwrap();
        assert_eq!((service.namespace.as_deref(), service.name.as_deref()), (Some("numa-system"), Some(APISERVER)));
        let service = objects.service.unwrap();
        assert_eq!(service.metadata.namespace.as_deref(), Some("numa-system"));
        assert_eq!(service.metadata.labels.unwrap()[names::LABEL_MANAGED_BY], names::FIELD_MANAGER);
        assert_eq!(objects.service_account.unwrap().metadata.namespace.as_deref(), Some("numa-system"));
        assert_eq!(objects.cluster_roles.len(), 3, "server + view + edit");
        assert_eq!(objects.cluster_role_bindings.len(), 3, "auth-delegator + issuer discovery + server");
        for binding in &objects.cluster_role_bindings {
            assert_eq!(binding.subjects.as_ref().unwrap()[0].namespace.as_deref(), Some("numa-system"));
        }
        let reader = objects
            .role_bindings
            .iter()
            .find(|b| b.role_ref.kind == "Role" && b.role_ref.name.contains("authentication"));
        let reader = reader.unwrap();
        assert_eq!(reader.metadata.namespace.as_deref(), Some("kube-system"), "stays where the ConfigMap is");
        assert_eq!(reader.subjects.as_ref().unwrap()[0].namespace.as_deref(), Some("numa-system"));
        let lease = &objects.roles[0];
        assert_eq!(lease.metadata.namespace.as_deref(), Some("numa-system"));
        let pods = lease.rules.iter().flatten().find(|rule| rule.resources.iter().flatten().any(|r| r == "pods"));
        assert_eq!(pods.unwrap().verbs, ["get", "list", "watch"], "one watch of the exporter pods of its namespace");
        let lease_binding = objects.role_bindings.iter().find(|b| b.role_ref.name == APISERVER).unwrap();
        assert_eq!(lease_binding.metadata.namespace.as_deref(), Some("numa-system"));
        let budget = objects.disruption_budget.unwrap();
        assert_eq!(budget.metadata.namespace.as_deref(), Some("numa-system"));
        let peer_name = container.args.iter().flatten().find(|a| a.starts_with("--peer-server-name=")).unwrap();
        assert_eq!(peer_name, "--peer-server-name=numaresources-apiserver-peer.numa-system.svc");
    }

    #[test]
    fn ca_bundle() {
        let api_service = objects("ns", "img").unwrap().api_service.unwrap();
        assert!(api_service.spec.as_ref().unwrap().ca_bundle.is_none(), "the manifest leaves it out");
        let with = with_ca_bundle(api_service, "CA");
        assert_eq!(with.spec.unwrap().ca_bundle, Some(ByteString(b"CA".to_vec())));
    }
}
