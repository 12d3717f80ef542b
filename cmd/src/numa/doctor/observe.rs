//! Reading what the checks need; what cannot be read is kept as its error.
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use numaresources_api::operator::{NUMAResourcesScheduler, PodRoutingMode};
use numaresources_controllers::names;
use std::time::SystemTime;

use super::{API_SERVICE, Observed, Read};
use crate::numa::fleet;

/// Reads what the checks need; what cannot be read is kept as its error.
pub(super) async fn observe(client: &kube::Client, namespace: &str) -> Observed {
    // `local` (our API server alone) serves neither APIServices nor Deployments: not a cluster.
    let groups = client.list_api_groups().await.map(|list| list.groups).unwrap_or_default();
    let served = |group: &str| groups.is_empty() || groups.iter().any(|g| g.name == group);
    let api_service = if served("apiregistration.k8s.io") {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"));
        let services: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        services.get_opt(API_SERVICE).await.map_err(|e| e.to_string())
    } else {
        not_here("APIServices")
    };
    // Deployments, DaemonSets, Leases and Secrets: only where kube-apiserver serves `apps`.
    let cluster = served("apps");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let scheduler = if cluster {
        deployments.get_opt(names::SCHEDULER).await.map_err(|e| e.to_string())
    } else {
        not_here("Deployments")
    };
    let exporters = if cluster {
        let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
        let params =
            kube::api::ListParams::default().labels(&format!("{}={}", names::LABEL_COMPONENT, names::COMPONENT_RTE));
        daemon_sets.list(&params).await.map(|list| list.items).map_err(|e| e.to_string())
    } else {
        not_here("DaemonSets")
    };
    let apiserver = if cluster {
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        match deployments.get_opt(names::APISERVER).await {
            Ok(deployment) => {
                leases.get_opt(names::APISERVER).await.map(|lease| (deployment, lease)).map_err(|e| e.to_string())
            }
            Err(error) => Err(error.to_string()),
        }
    } else {
        not_here("Deployments")
    };
    // The operator's own objects are only where its CRDs are.
    let operator = served("nodetopology.openshift.io");
    let pod_routing = if operator { pod_routing(client).await } else { not_here("NUMAResourcesSchedulers") };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut certificates = Vec::new();
    for secret in [names::APISERVER_TLS_SECRET, names::WEBHOOK_TLS_SECRET, names::PEER_SECRET] {
        let pem = if cluster {
            secrets.get_opt(secret).await.map_err(|e| e.to_string()).map(|found| {
                let data = found.and_then(|s| s.data)?;
                data.get("tls.crt").and_then(|b| String::from_utf8(b.0.clone()).ok())
            })
        } else {
            not_here("Secrets")
        };
        certificates.push((secret, pem));
    }
    Observed {
        api_service,
        exporters,
        reports: fleet::reports(client, None).await.map(|(reports, _)| reports).map_err(|e| format!("{e:#}")),
        scheduler,
        apiserver,
        pod_routing,
        certificates,
        now: SystemTime::now(),
    }
}

/// Whether the NUMAResourcesScheduler routes pods, and whether the pod webhook is registered.
async fn pod_routing(client: &kube::Client) -> Read<Option<(bool, bool)>> {
    let schedulers: Api<NUMAResourcesScheduler> = Api::all(client.clone());
    let list = schedulers.list(&kube::api::ListParams::default()).await.map_err(|e| e.to_string())?;
    let Some(scheduler) = list.items.first() else { return Ok(None) };
    let mode = scheduler.spec.pod_routing.as_ref().and_then(|r| r.mode.clone());
    let routes = mode.is_some_and(|mode| mode != PodRoutingMode::Disabled);
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let registered = webhooks.get_opt(names::POD_ROUTING_CONFIGURATION).await.map_err(|e| e.to_string())?.is_some();
    Ok(Some((routes, registered)))
}

/// What a server that is not kube-apiserver (`local`) does not serve.
fn not_here<T>(what: &str) -> Read<T> {
    Err(format!("{what} are not served here (no kube-apiserver: `local`?)"))
}
