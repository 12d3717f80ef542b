//! The checked-in manifests the bundle is made of, compiled in and sorted by kind. The same
//! files make up the kustomize install (`manifests/base`), minus what OLM creates itself.

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::Value;

/// Every manifest the bundle reads. Left out on purpose: the Services and the kube-system
/// reader binding (OLM makes its own for the deployments that own an APIService or a webhook),
/// the ServiceAccounts (OLM creates those its permissions name), and the examples of
/// `manifests/apiserver` (the controllers render the exporter and scheduler roles).
const FILES: &[(&str, &str)] = &[
    ("controllers/deployment.yaml", include_str!("../../../manifests/controllers/deployment.yaml")),
    ("controllers/rbac.yaml", include_str!("../../../manifests/controllers/rbac.yaml")),
    ("webhook/deployment.yaml", include_str!("../../../manifests/webhook/deployment.yaml")),
    ("webhook/service.yaml", include_str!("../../../manifests/webhook/service.yaml")),
    ("webhook/rbac.yaml", include_str!("../../../manifests/webhook/rbac.yaml")),
    ("webhook/pdb.yaml", include_str!("../../../manifests/webhook/pdb.yaml")),
    ("webhook/webhook-configurations.yaml", include_str!("../../../manifests/webhook/webhook-configurations.yaml")),
    ("apiserver/deployment.yaml", include_str!("../../../manifests/apiserver/deployment.yaml")),
    ("apiserver/service.yaml", include_str!("../../../manifests/apiserver/service.yaml")),
    ("apiserver/apiservice.yaml", include_str!("../../../manifests/apiserver/apiservice.yaml")),
    ("apiserver/pdb.yaml", include_str!("../../../manifests/apiserver/pdb.yaml")),
    ("apiserver/rbac-server.yaml", include_str!("../../../manifests/apiserver/rbac-server.yaml")),
    ("apiserver/rbac-lease.yaml", include_str!("../../../manifests/apiserver/rbac-lease.yaml")),
    ("apiserver/rbac-delegation.yaml", include_str!("../../../manifests/apiserver/rbac-delegation.yaml")),
    ("apiserver/rbac-aggregated.yaml", include_str!("../../../manifests/apiserver/rbac-aggregated.yaml")),
    ("samples/numaresourcesoperator.yaml", include_str!("../../../manifests/samples/numaresourcesoperator.yaml")),
    ("samples/numaresourcesscheduler.yaml", include_str!("../../../manifests/samples/numaresourcesscheduler.yaml")),
];

/// The manifests, by kind.
#[derive(Debug, Default)]
pub struct Manifests {
    pub deployments: Vec<Value>,
    pub services: Vec<Value>,
    pub api_services: Vec<Value>,
    pub webhook_configurations: Vec<Value>,
    pub cluster_roles: Vec<Value>,
    pub cluster_role_bindings: Vec<Value>,
    pub roles: Vec<Value>,
    pub role_bindings: Vec<Value>,
    /// The sample custom resources (the CSV's `alm-examples`).
    pub samples: Vec<Value>,
    /// Objects the bundle ships as they are, one per file: the ClusterRoles no ServiceAccount
    /// of ours is bound to (the aggregated roles for people) and the PodDisruptionBudget.
    pub bundled_objects: Vec<Value>,
}

impl Manifests {
    pub fn load() -> anyhow::Result<Self> {
        let mut manifests = Self::default();
        let mut budgets = Vec::new();
        for (file, text) in FILES {
            for document in serde_norway::Deserializer::from_str(text) {
                let value = Value::deserialize(document).with_context(|| format!("manifests/{file}"))?;
                if value.is_null() {
                    continue;
                }
                let list = match value["kind"].as_str().unwrap_or_default() {
                    "Deployment" => &mut manifests.deployments,
                    "Service" => &mut manifests.services,
                    "APIService" => &mut manifests.api_services,
                    "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
                        &mut manifests.webhook_configurations
                    }
                    "ClusterRole" => &mut manifests.cluster_roles,
                    "ClusterRoleBinding" => &mut manifests.cluster_role_bindings,
                    "Role" => &mut manifests.roles,
                    "RoleBinding" => &mut manifests.role_bindings,
                    "PodDisruptionBudget" => &mut budgets,
                    "NUMAResourcesOperator" | "NUMAResourcesScheduler" => &mut manifests.samples,
                    other => bail!("manifests/{file}: the bundle does not know what to do with a {other}"),
                };
                list.push(value);
            }
        }
        let bound: Vec<&str> =
            manifests.cluster_role_bindings.iter().filter_map(|b| b["roleRef"]["name"].as_str()).collect();
        let unbound = manifests.cluster_roles.iter().filter(|role| {
            let name = role["metadata"]["name"].as_str().unwrap_or_default();
            !bound.contains(&name)
        });
        manifests.bundled_objects = unbound.cloned().collect();
        // The pod webhook is the controllers' to apply outside OLM, so no manifest holds it; the
        // CSV declares it from the same rendering (OLM generates the namespaceSelector and the
        // Service, see `webhook_definitions`), first as it always was.
        let pod_routing =
            numaresources_controllers::render::pod_routing::configuration(super::MANIFEST_NAMESPACE, None)
                .context("render the pod routing webhook")?;
        manifests.webhook_configurations.insert(0, serde_json::to_value(pod_routing)?);
        for mut budget in budgets {
            // OLM creates it in the namespace the operator is installed into.
            if let Some(metadata) = budget["metadata"].as_object_mut() {
                metadata.remove("namespace");
            }
            manifests.bundled_objects.push(budget);
        }
        Ok(manifests)
    }

    /// The Deployment called `name`.
    pub fn deployment(&self, name: &str) -> anyhow::Result<&Value> {
        named(&self.deployments, name).with_context(|| format!("no Deployment {name} in the manifests"))
    }

    /// The Service called `name`.
    pub fn service(&self, name: &str) -> anyhow::Result<&Value> {
        named(&self.services, name).with_context(|| format!("no Service {name} in the manifests"))
    }
}

/// The object of `objects` whose `metadata.name` is `name`.
pub fn named<'a>(objects: &'a [Value], name: &str) -> Option<&'a Value> {
    objects.iter().find(|object| object["metadata"]["name"] == name)
}
