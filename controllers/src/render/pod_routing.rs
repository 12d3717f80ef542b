//! The pod webhook's own MutatingWebhookConfiguration ([`POD_ROUTING_CONFIGURATION`]).
//!
//! It is the `NUMAResourcesScheduler`'s, not the install's: it exists only while pods are routed,
//! and on deletion it goes before the scheduler it routes to, so no pod is ever routed to a
//! scheduler that is gone (the order the Multiarch Tuning Operator keeps for its pod-placement
//! webhook). The OLM bundle renders
//! its `webhookdefinitions` entry from here too, so both installs declare the same webhook.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use serde_json::json;

use super::{RenderError, typed};
use crate::names::{self, COMPONENT_WEBHOOK, POD_ROUTING_CONFIGURATION, POD_WEBHOOK, POD_WEBHOOK_PATH, WEBHOOK};

/// Namespaces whose pods are never sent to the webhook (besides ours): restarting the webhook or
/// the scheduler must never wait on the webhook. The webhook refuses them too (and `openshift-*`,
/// which a selector cannot express).
pub const EXCLUDED_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// The configuration, calling the webhook Service of `namespace`; `ca_bundle` when the
/// controllers inject it themselves (self-managed certificates), else left to the injector.
///
/// Fails open: a webhook that is down or slow must never stop pods from being created; an
/// unrouted pod is what the cluster did before us.
pub fn configuration(namespace: &str, ca_bundle: Option<&str>) -> Result<MutatingWebhookConfiguration, RenderError> {
    let mut excluded: Vec<&str> = EXCLUDED_NAMESPACES.to_vec();
    excluded.push(namespace);
    let mut configuration: MutatingWebhookConfiguration = typed(
        "the pod routing MutatingWebhookConfiguration",
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {
                "name": POD_ROUTING_CONFIGURATION,
                "labels": names::labels(POD_ROUTING_CONFIGURATION, COMPONENT_WEBHOOK),
            },
            "webhooks": [{
                "name": POD_WEBHOOK,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "matchPolicy": "Equivalent",
                "timeoutSeconds": 5,
                "reinvocationPolicy": "Never",
                "clientConfig": {
                    "service": {"namespace": namespace, "name": WEBHOOK, "path": POD_WEBHOOK_PATH, "port": 443},
                },
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded},
                    ],
                },
                "rules": [{
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods"],
                    "scope": "Namespaced",
                }],
            }],
        }),
    )?;
    if let Some(bundle) = ca_bundle {
        for webhook in configuration.webhooks.iter_mut().flatten() {
            webhook.client_config.ca_bundle = Some(ByteString(bundle.as_bytes().to_vec()));
        }
    }
    Ok(configuration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_fail_open_pod_webhook_on_our_service_keeping_system_namespaces_out() {
        let rendered = configuration("numa", Some("PEM")).unwrap();
        let webhooks = rendered.webhooks.unwrap();
        assert_eq!(webhooks.len(), 1);
        let webhook = &webhooks[0];
        assert_eq!(webhook.failure_policy.as_deref(), Some("Ignore"));
        let service = webhook.client_config.service.as_ref().unwrap();
        assert_eq!((service.namespace.as_str(), service.name.as_str()), ("numa", WEBHOOK));
        assert_eq!((service.path.as_deref(), service.port), (Some(POD_WEBHOOK_PATH), Some(443)));
        assert_eq!(webhook.client_config.ca_bundle, Some(ByteString(b"PEM".to_vec())));
        let selector = webhook.namespace_selector.as_ref().unwrap();
        let values = selector.match_expressions.as_ref().unwrap()[0].values.clone().unwrap();
        assert_eq!(values, ["kube-system", "kube-public", "kube-node-lease", "numa"]);
        let rules = webhook.rules.as_ref().unwrap();
        assert_eq!(rules[0].resources.as_deref(), Some(&["pods".to_owned()][..]));
        assert!(configuration("numa", None).unwrap().webhooks.unwrap()[0].client_config.ca_bundle.is_none());
    }
}
