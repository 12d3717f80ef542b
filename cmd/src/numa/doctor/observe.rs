//! Reading what the checks need; what cannot be read is kept as its error. Only get and list.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use numaresources_api::operator::{
    NUMAResourcesOperator, NUMAResourcesScheduler, OPERATOR_SINGLETON_NAME, PodRoutingMode,
};
use numaresources_controllers::kubelet as kubeletconfig;
use numaresources_controllers::{cluster_nodes, names, nodegroups};

use super::{API_SERVICE, GroupNodes, Observed, Read, SchedulerConfig};
use crate::numa::fleet;

/// Kubelets asked at once for their configuration.
const KUBELETS_AT_ONCE: usize = 16;
/// How long one kubelet's answer is waited for.
const KUBELET_TIMEOUT: Duration = Duration::from_secs(5);

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
    // Deployments, DaemonSets, Leases, Pods and Secrets: only where kube-apiserver serves `apps`.
    let cluster = served("apps");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let scheduler = if cluster {
        deployments.get_opt(names::SCHEDULER).await.map_err(|e| e.to_string())
    } else {
        not_here("Deployments")
    };
    let exporter_label = ListParams::default().labels(&format!("{}={}", names::LABEL_COMPONENT, names::COMPONENT_RTE));
    let exporters = if cluster {
        let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
        daemon_sets.list(&exporter_label).await.map(|list| list.items).map_err(|e| e.to_string())
    } else {
        not_here("DaemonSets")
    };
    let exporter_pods = if cluster {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        pods.list(&exporter_label).await.map(|list| exporter_states(&list.items)).map_err(|e| e.to_string())
    } else {
        not_here("Pods")
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
    let numa_scheduler = if operator { numa_scheduler(client).await } else { not_here("NUMAResourcesSchedulers") };
    let pod_routing = match &numa_scheduler {
        Ok(Some(scheduler)) => pod_routing(client, scheduler).await.map(Some),
        Ok(None) => Ok(None),
        Err(error) => Err(error.clone()),
    };
    let scheduler_config = match &numa_scheduler {
        Ok(Some(scheduler)) if cluster => scheduler_config(client, namespace, scheduler).await.map(Some),
        Ok(_) if cluster => Ok(None),
        Ok(_) => not_here("ConfigMaps"),
        Err(error) => Err(error.clone()),
    };
    let node_groups = if operator {
        node_groups(client, served("machineconfiguration.openshift.io")).await
    } else {
        not_here("NUMAResourcesOperators")
    };
    let reports = fleet::reports(client, None).await.map(|(reports, _)| reports).map_err(|e| format!("{e:#}"));
    // The kubelets of the node groups' nodes, or of the nodes that report when no group says.
    let kubelets = if cluster {
        let mut nodes: BTreeSet<String> = match &node_groups {
            Ok(Some(groups)) => groups.iter().flat_map(|g| g.nodes.iter().cloned()).collect(),
            _ => BTreeSet::new(),
        };
        if nodes.is_empty()
            && let Ok(reports) = &reports
        {
            nodes = reports.iter().filter_map(|r| r.nrt.metadata.name.clone()).collect();
        }
        kubelets(client, nodes).await
    } else {
        not_here("node proxies")
    };
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
        exporter_pods,
        node_groups,
        reports,
        kubelets,
        scheduler,
        scheduler_config,
        apiserver,
        pod_routing,
        certificates,
        now: SystemTime::now(),
    }
}

/// The NUMAResourcesScheduler (the first listed: there is one).
async fn numa_scheduler(client: &kube::Client) -> Read<Option<NUMAResourcesScheduler>> {
    let schedulers: Api<NUMAResourcesScheduler> = Api::all(client.clone());
    let list = schedulers.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
    Ok(list.items.into_iter().next())
}

/// Whether the NUMAResourcesScheduler routes pods, and whether the pod webhook is registered.
async fn pod_routing(client: &kube::Client, scheduler: &NUMAResourcesScheduler) -> Read<(bool, bool)> {
    let mode = scheduler.spec.pod_routing.as_ref().and_then(|r| r.mode.clone());
    let routes = mode.is_some_and(|mode| mode != PodRoutingMode::Disabled);
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let registered = webhooks.get_opt(names::POD_ROUTING_CONFIGURATION).await.map_err(|e| e.to_string())?.is_some();
    Ok((routes, registered))
}

/// The scheduler name pods use, and the configuration the scheduler runs.
async fn scheduler_config(
    client: &kube::Client,
    namespace: &str,
    scheduler: &NUMAResourcesScheduler,
) -> Read<SchedulerConfig> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let found = config_maps.get_opt(names::SCHEDULER_CONFIG).await.map_err(|e| e.to_string())?;
    let key = numaresources_controllers::render::scheduler::CONFIG_KEY;
    Ok(SchedulerConfig {
        scheduler_name: scheduler.spec.effective_scheduler_name().to_owned(),
        config: found.map(|cm| cm.data.and_then(|mut data| data.remove(key)).unwrap_or_default()),
    })
}

/// The nodes of each node group, resolved as the controllers resolve them (None: no
/// NUMAResourcesOperator).
async fn node_groups(client: &kube::Client, machine_config_pools: bool) -> Read<Option<Vec<GroupNodes>>> {
    let operators: Api<NUMAResourcesOperator> = Api::all(client.clone());
    let Some(operator) = operators.get_opt(OPERATOR_SINGLETON_NAME).await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let spec = operator.spec.normalized();
    let (nodes, pools) =
        cluster_nodes::read(client, &spec.node_groups, machine_config_pools).await.map_err(|e| e.to_string())?;
    let resolution = nodegroups::resolve(&spec.node_groups, &nodes, pools.as_deref(), true)
        .map_err(|e| format!("the node groups do not resolve: {e}"))?;
    let groups = resolution.pools.into_iter().map(|pool| GroupNodes {
        refresh_period: pool.config.info_refresh_period.and_then(|p| p.to_std()).filter(|p| !p.is_zero()),
        pool: pool.pool,
        nodes: pool.nodes,
    });
    Ok(Some(groups.collect()))
}

/// Each node's exporter: `Running` when it runs and is Ready, else what it waits for (a
/// container's waiting reason such as `CrashLoopBackOff`, or the pod's phase).
fn exporter_states(pods: &[Pod]) -> BTreeMap<String, String> {
    let mut states = BTreeMap::new();
    for pod in pods {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let phase = status.and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".to_owned());
        let waiting = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.iter().find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone()));
        let state = match (phase.as_str(), ready) {
            ("Running", true) => "Running".to_owned(),
            _ => waiting.unwrap_or(if phase == "Running" { "not Ready".to_owned() } else { phase }),
        };
        // A node with a Running exporter (a rollout may briefly show two) counts as covered.
        let entry = states.entry(node).or_insert_with(|| state.clone());
        if state == "Running" {
            *entry = state;
        }
    }
    states
}

/// A kubelet's configuration, or whether it was refused for lack of a right and why.
type KubeletAnswer = Result<serde_json::Value, (bool, String)>;

/// Each node's kubelet configuration (configz), or why it did not answer. No right to ask any
/// kubelet is an error of its own (the check is skipped, not failed).
async fn kubelets(client: &kube::Client, nodes: BTreeSet<String>) -> Read<BTreeMap<String, Read<serde_json::Value>>> {
    let answers: Vec<(String, KubeletAnswer)> = futures_util::stream::iter(nodes)
        .map(|node| async move {
            let answer = match tokio::time::timeout(KUBELET_TIMEOUT, kubeletconfig::configz(client, &node)).await {
                Ok(Ok(config)) => Ok(config),
                Ok(Err(kube::Error::Api(status))) => Err((status.code == 403, status.message)),
                Ok(Err(error)) => Err((false, error.to_string())),
                Err(_) => Err((false, format!("no answer within {} s", KUBELET_TIMEOUT.as_secs()))),
            };
            (node, answer)
        })
        .buffer_unordered(KUBELETS_AT_ONCE)
        .collect()
        .await;
    let forbidden = answers.iter().find_map(|(_, answer)| match answer {
        Err((true, message)) => Some(message.clone()),
        _ => None,
    });
    if let Some(message) = forbidden
        && answers.iter().all(|(_, answer)| matches!(answer, Err((true, _))))
    {
        return Err(message);
    }
    Ok(answers.into_iter().map(|(node, answer)| (node, answer.map_err(|(_, message)| message))).collect())
}

/// What a server that is not kube-apiserver (`local`) does not serve.
fn not_here<T>(what: &str) -> Read<T> {
    Err(format!("{what} are not served here (no kube-apiserver: `local`?)"))
}
