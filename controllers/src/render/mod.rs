//! Desired objects as pure functions of the normalized specs: no client, no clock.
//!
//! Objects are written as JSON literals shaped like the YAML a person would write, then typed;
//! a literal that does not type is a bug, reported as [`RenderError`] rather than a panic.

pub mod apiserver;
pub mod kubeletconfig;
pub mod network_policy;
pub mod pod_routing;
pub mod rte;
pub mod scheduler;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A rendered literal did not match its type (a bug in the renderer).
#[derive(Debug, thiserror::Error)]
#[error("failed to render {what}: {source}")]
pub struct RenderError {
    what: &'static str,
    #[source]
    source: serde_json::Error,
}

/// Types a JSON literal.
pub(crate) fn typed<T: DeserializeOwned>(what: &'static str, value: Value) -> Result<T, RenderError> {
    serde_json::from_value(value).map_err(|source| RenderError { what, source })
}

/// A component's ServiceAccount `name`.
pub(crate) fn service_account(
    name: &str,
    namespace: &str,
    labels: BTreeMap<String, String>,
) -> Result<ServiceAccount, RenderError> {
    typed(
        "ServiceAccount",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace, "labels": labels}}),
    )
}

/// A ClusterRoleBinding (`role_kind` `ClusterRole`) or RoleBinding (`Role`) with `metadata`,
/// granting `role` to the ServiceAccount `account` of `namespace`.
pub(crate) fn binding<T: DeserializeOwned>(
    metadata: Value,
    role_kind: &str,
    role: &str,
    account: &str,
    namespace: &str,
) -> Result<T, RenderError> {
    let kind = format!("{role_kind}Binding");
    typed(
        "role binding",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }),
    )
}
