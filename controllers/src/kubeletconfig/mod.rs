//! The `kubeletconfig` controller: per node group, the kubelet's topology manager
//! policy and scope, written with the user's `podExcludes` into the ConfigMap `<nro>-<pool>` that
//! the group's exporters mount (`rte --config`); the operator controller hashes it into the
//! DaemonSet so a change restarts the exporters.
//!
//! Where the settings come from:
//! - OpenShift (only when discovery shows `machineconfiguration.openshift.io/v1` KubeletConfigs):
//!   the first KubeletConfig whose `machineConfigPoolSelector` matches the pool's labels; no match
//!   or no settings leave the keys out (the exporter then falls back to the kubelet defaults).
//! - Plain Kubernetes: each node's live configuration, `/api/v1/nodes/<node>/proxy/configz`
//!   (needs `nodes/proxy get`). A field the kubelet leaves out is its default (`none`,
//!   `container`).
//!
//! Nodes of one group that disagree are not averaged: the keys are left out and the ConfigMap's
//! annotation names the nodes and what each runs; the operator controller turns that into the
//! `KubeletConfigConsistent=False` condition. Nodes that cannot be asked (kubelet down, a node
//! with no address: `no preferred addresses`) are skipped and reported once per node, as a
//! Warning Event and log line when that starts and an info line when it ends ([`unreachable`]).
//!
//! When a pass runs: at once when what it reads changes — a KubeletConfig (created, changed,
//! deleted) on OpenShift; on plain Kubernetes, where configz has no watch, a Node whose kubelet
//! may run a new configuration ([`kubelet_incarnation`]: the kubelet restarted or the node
//! rebooted) — and when node labels change (group membership). [`RESYNC`] stays as a safety
//! net for a change no watched object shows (a kubelet restart that never reported NotReady).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use numaresources_api::operator::{NUMAResourcesOperator, OPERATOR_SINGLETON_NAME};
use numaresources_api::selector;

use crate::apply::{Applier, controlled_by, delete};
use crate::cluster_nodes;
use crate::context::{Context, Error, Result, error_policy_for};
use crate::guarded;
use crate::names::{self, ANNOTATION_PAUSE};
use crate::nodegroups;
use crate::render::kubeletconfig::{self as render, TopologyManager};

/// The Warning Event's reason on the NUMAResourcesOperator when a group's kubelets cannot give
/// NUMA-aligned placement (once per change of the report, not every pass).
pub const ALIGNMENT_REASON: &str = "KubeletNotNUMAAligned";

/// How often the kubelets are asked again whatever the watches saw.
pub const RESYNC: Duration = Duration::from_secs(300);
/// Kubelets asked at once.
const CONCURRENCY: usize = 8;

/// The settings of one group, distilled from its nodes: the common value, or the disagreement.
pub fn distill(per_node: &BTreeMap<String, TopologyManager>) -> (TopologyManager, Option<String>) {
    let mut by_setting: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    for (node, tm) in per_node {
        by_setting.entry((tm.policy.clone(), tm.scope.clone())).or_default().push(node);
    }
    match by_setting.len() {
        0 => (TopologyManager::default(), None),
        1 => {
            let ((policy, scope), _) = by_setting.into_iter().next().unwrap_or_default();
            (TopologyManager { policy, scope }, None)
        }
        _ => {
            let report = by_setting
                .iter()
                .map(|((policy, scope), nodes)| format!("{policy}/{scope} on {}", nodes.join(", ")))
                .collect::<Vec<_>>()
                .join("; ");
            (TopologyManager::default(), Some(report))
        }
    }
}

/// At most this many node names in one line of the alignment report; the rest are counted.
const NODES_NAMED: usize = 5;

/// What keeps a kubelet (configz's `kubeletconfig`) from NUMA-aligned placement, one sentence
/// each, with its consequence; empty when nothing does. A field the kubelet leaves out is its
/// default (`none`, `None`, `none`).
pub fn alignment_gaps(config: &serde_json::Value) -> Vec<String> {
    let field = |key: &str, default: &'static str| {
        config.get(key).and_then(serde_json::Value::as_str).filter(|v| !v.is_empty()).unwrap_or(default).to_owned()
    };
    let mut gaps = Vec::new();
    let cpu = field("cpuManagerPolicy", "none");
    if cpu != "static" {
        gaps.push(format!("CPU manager {cpu}: no container gets exclusive CPUs, so none is kept on one NUMA node"));
    }
    let memory = field("memoryManagerPolicy", "None");
    if memory != "Static" {
        gaps.push(format!(
            "memory manager {memory}: memory and hugepages are not NUMA-aligned (the exporter publishes the node's \
             totals in every zone)"
        ));
    }
    let policy = field("topologyManagerPolicy", "none");
    if policy != "single-numa-node" && policy != "restricted" {
        gaps.push(format!(
            "Topology Manager policy {policy}: the kubelet admits pods it cannot align, and the NUMA-aware \
             scheduler does not filter this node"
        ));
    }
    gaps
}

/// The nodes of one group whose kubelets cannot give NUMA-aligned placement, grouped by what
/// they lack (`None`: every node can). At most [`NODES_NAMED`] names a line, so a large group
/// makes a short report.
pub fn describe_alignment(per_node: &BTreeMap<String, Vec<String>>) -> Option<String> {
    let mut by_gaps: BTreeMap<&[String], Vec<&str>> = BTreeMap::new();
    for (node, gaps) in per_node.iter().filter(|(_, gaps)| !gaps.is_empty()) {
        by_gaps.entry(gaps.as_slice()).or_default().push(node);
    }
    let lines: Vec<String> = by_gaps
        .into_iter()
        .map(|(gaps, nodes)| {
            let mut named = nodes.iter().take(NODES_NAMED).copied().collect::<Vec<_>>().join(", ");
            if nodes.len() > NODES_NAMED {
                named.push_str(&format!(" and {} more", nodes.len() - NODES_NAMED));
            }
            format!("{named}: {}", gaps.join("; "))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join(". "))
}

/// The topology manager settings in a kubelet configuration (configz's `kubeletconfig`, or a
/// KubeletConfig's `spec.kubeletConfig`); `defaults` fills what it leaves out.
pub fn topology_manager_of(config: &serde_json::Value, defaults: bool) -> TopologyManager {
    let field = |key: &str, default: &str| {
        config
            .get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|v| !v.is_empty())
            .map_or_else(|| if defaults { default.to_owned() } else { String::new() }, str::to_owned)
    };
    TopologyManager {
        policy: field("topologyManagerPolicy", "none"),
        scope: field("topologyManagerScope", "container"),
    }
}

/// Reconciles one watched object (guarded watch, [`crate::guarded`]); a malformed one is left to
/// the operator controller, which reports it.
pub async fn reconcile_raw(obj: Arc<DynamicObject>, ctx: Arc<KubeletConfigContext>) -> Result<Action> {
    match guarded::parse::<NUMAResourcesOperator>(&obj) {
        Ok(nro) => reconcile(Arc::new(nro), ctx).await,
        Err(_) => Ok(Action::await_change()),
    }
}

/// Retries a failed reconcile with a per-object backoff.
pub fn error_policy_raw(obj: Arc<DynamicObject>, error: &Error, ctx: Arc<KubeletConfigContext>) -> Action {
    error_policy_for(&key(&obj.name_any()), error, &ctx)
}

/// The backoff key: `kubeletconfig/<name>`.
fn key(name: &str) -> String {
    format!("kubeletconfig/{name}")
}

/// Reconciles the exporter ConfigMaps of one `NUMAResourcesOperator`.
pub async fn reconcile(nro: Arc<NUMAResourcesOperator>, ctx: Arc<KubeletConfigContext>) -> Result<Action> {
    let _timer = ctx.metrics.pass("kubeletconfig");
    // The operator controller reports wrong names, pauses and invalid specs; here they just stop.
    let paused = nro.annotations().get(ANNOTATION_PAUSE).is_some_and(|v| v == "enabled");
    if nro.name_any() != OPERATOR_SINGLETON_NAME || paused || nro.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let spec = nro.spec.normalized();
    let (node_infos, pools) = cluster_nodes::observe(&ctx, &spec.node_groups).await?;
    let Ok(resolution) = nodegroups::resolve(&spec.node_groups, &node_infos, pools.as_deref(), true) else {
        // The operator controller reports why; the cluster may catch up (a pool gets created).
        return Ok(Action::requeue(cluster_nodes::RESOLVE_RETRY));
    };
    let kubelet_configs = if ctx.settings.kubelet_configs { Some(list_kubelet_configs(&ctx).await?) } else { None };

    let applier = Applier::new(ctx.client.clone(), nro.controller_owner_ref(&()));
    let namespace = &ctx.settings.namespace;
    let mut wanted = BTreeSet::new();
    let mut asked = Vec::new();
    let mut unanswered = BTreeMap::new();
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    for pool in &resolution.pools {
        let (topology_manager, disagreement, alignment) = match (&kubelet_configs, &pools) {
            (Some(configs), Some(pools)) => {
                let labels = pools.iter().find(|p| p.name == pool.pool).map(|p| p.labels.clone()).unwrap_or_default();
                (from_kubelet_configs(configs, &labels), None, None)
            }
            _ => {
                let (answers, failures) = ask_kubelets(&ctx, &pool.nodes).await;
                asked.extend(pool.nodes.iter().cloned());
                unanswered.extend(failures);
                let settings = answers.iter().map(|(node, (tm, _))| (node.clone(), tm.clone())).collect();
                let gaps = answers.into_iter().map(|(node, (_, gaps))| (node, gaps)).collect();
                let (topology_manager, disagreement) = distill(&settings);
                (topology_manager, disagreement, describe_alignment(&gaps))
            }
        };
        let name = names::node_group_object_name(&nro.name_any(), &pool.pool);
        let reported_before = crate::apply::get_opt(&config_maps, &name)
            .await?
            .and_then(|cm| cm.annotations().get(names::ANNOTATION_KUBELET_ALIGNMENT).cloned())
            .unwrap_or_default();
        let yaml = render::config_yaml(&topology_manager, &spec.pod_excludes);
        let reports = render::KubeletReports { disagreement: disagreement.as_deref(), alignment: alignment.as_deref() };
        let config_map = render::config_map(namespace, &nro.name_any(), &pool.pool, yaml, reports)?;
        wanted.insert(name);
        applier.namespaced(config_map).await?;
        if let Some(alignment) = alignment.filter(|now| *now != reported_before) {
            let note =
                format!("node group {}: kubelets that cannot give NUMA-aligned placement: {alignment}", pool.pool);
            tracing::warn!(pool = %pool.pool, %alignment, "kubelets that cannot give NUMA-aligned placement");
            let regarding = nro.object_ref(&());
            ctx.event(&regarding, EventType::Warning, ALIGNMENT_REASON, "ReadKubeletConfig", note).await;
        }
    }

    // ConfigMaps of groups that are gone: ours only.
    let selector = format!("{}={}", names::LABEL_NRO_NAME, nro.name_any());
    let existing = config_maps
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| Error::kube(format!("list ConfigMaps in {namespace}"), e))?;
    let uid = nro.uid().unwrap_or_default();
    for cm in existing {
        if controlled_by(&cm, &uid) && !wanted.contains(&cm.name_any()) {
            delete(&config_maps, &cm.name_any()).await?;
        }
    }
    unreachable::report(&ctx, &ctx.unreachable_kubelets, &asked, unanswered).await;
    ctx.reset_backoff(&key(&nro.name_any()));
    Ok(Action::requeue(RESYNC))
}

/// What one kubelet runs: its topology manager settings, and what keeps it from NUMA-aligned
/// placement ([`alignment_gaps`]).
type KubeletAnswer = (TopologyManager, Vec<String>);

/// Each reachable node's live settings, and why the others did not answer.
async fn ask_kubelets(ctx: &Context, nodes: &[String]) -> (BTreeMap<String, KubeletAnswer>, BTreeMap<String, String>) {
    let answers: Vec<(String, Result<KubeletAnswer, String>)> = futures_util::stream::iter(nodes.iter().cloned())
        .map(|node| async move {
            let answer = match configz(&ctx.client, &node).await {
                Ok(config) => Ok((topology_manager_of(&config, true), alignment_gaps(&config))),
                Err(kube::Error::Api(status)) => Err(status.message),
                Err(error) => Err(error.to_string()),
            };
            (node, answer)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut settings = BTreeMap::new();
    let mut failures = BTreeMap::new();
    for (node, answer) in answers {
        match answer {
            Ok(answer) => {
                settings.insert(node, answer);
            }
            Err(reason) => {
                failures.insert(node, reason);
            }
        }
    }
    (settings, failures)
}

/// A node's live kubelet configuration (configz's `kubeletconfig`), through kube-apiserver's node
/// proxy (`nodes/proxy get`).
pub async fn configz(client: &kube::Client, node: &str) -> Result<serde_json::Value, kube::Error> {
    let request = http::Request::get(format!("/api/v1/nodes/{node}/proxy/configz"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let mut configz = client.request::<serde_json::Value>(request).await?;
    Ok(configz["kubeletconfig"].take())
}

/// The settings of the first KubeletConfig selecting a pool with these labels.
fn from_kubelet_configs(configs: &[DynamicObject], pool_labels: &BTreeMap<String, String>) -> TopologyManager {
    configs
        .iter()
        .find(|kc| {
            kc.data
                .pointer("/spec/machineConfigPoolSelector")
                .and_then(|s| serde_json::from_value(s.clone()).ok())
                .is_some_and(|s| selector::matches(&s, pool_labels))
        })
        .and_then(|kc| kc.data.pointer("/spec/kubeletConfig"))
        .map(|config| topology_manager_of(config, false))
        .unwrap_or_default()
}

/// The KubeletConfig API, read dynamically (OpenShift only).
fn kubelet_config_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("machineconfiguration.openshift.io", "v1", "KubeletConfig"))
}

async fn list_kubelet_configs(ctx: &Context) -> Result<Vec<DynamicObject>> {
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &kubelet_config_resource());
    let list = api.list(&ListParams::default()).await.map_err(|e| Error::kube("list KubeletConfigs", e))?;
    Ok(list.items)
}

/// What of a Node says its kubelet may run a new configuration, or the node changed group: its
/// labels, its boot, the kubelet's version, and when its Ready condition last changed. A kubelet
/// restarted to take a new configuration usually reports NotReady until its runtime and pod
/// lifecycle checks first pass, so Ready's transition time moves (one that does not is left to
/// [`RESYNC`]); a reboot changes the boot ID. The heartbeat (`lastHeartbeatTime`) is left out:
/// it says nothing new.
pub fn kubelet_incarnation(node: &Node) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let status = node.status.as_ref();
    let info = status.and_then(|s| s.node_info.as_ref());
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.status.clone(), c.last_transition_time.as_ref().map(|t| format!("{:?}", t.0))));
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (node.labels(), info.map(|i| (&i.boot_id, &i.kubelet_version)), ready).hash(&mut hasher);
    Some(hasher.finish())
}

/// Every change that should start a pass over every `NUMAResourcesOperator` at once.
fn triggers(ctx: &Context) -> futures_util::stream::BoxStream<'static, ()> {
    let client = ctx.client.clone();
    if ctx.settings.kubelet_configs {
        // OpenShift: the KubeletConfigs are the source; Nodes matter for their labels only.
        let node_labels = guarded::node_label_changes(client.clone());
        let kubelet_configs = watcher::watcher(
            Api::<DynamicObject>::all_with(client, &kubelet_config_resource()),
            watcher::Config::default(),
        )
        .touched_objects()
        .filter_map(|kc| async move { kc.ok().map(|_| ()) });
        futures_util::stream::select(node_labels, kubelet_configs).boxed()
    } else {
        // configz has no watch: a Node whose kubelet may run a new configuration stands for it.
        watcher::watcher(Api::<Node>::all(client), watcher::Config::default())
            .touched_objects()
            .predicate_filter(kubelet_incarnation, Default::default())
            .filter_map(|node| async move { node.ok().map(|_| ()) })
            .boxed()
    }
}

/// The controller's context: the shared one, and what only this controller keeps between passes.
pub struct KubeletConfigContext {
    shared: Arc<Context>,
    /// The kubelets that could not be asked, so each is reported once.
    unreachable_kubelets: unreachable::UnreachableKubelets,
}

impl KubeletConfigContext {
    /// A context for this controller over the shared one.
    pub fn new(shared: Arc<Context>) -> Self {
        Self { shared, unreachable_kubelets: unreachable::UnreachableKubelets::default() }
    }
}

impl std::ops::Deref for KubeletConfigContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

/// Runs the controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let controller = guarded::controller::<NUMAResourcesOperator>(ctx.client.clone()).reconcile_all_on(triggers(&ctx));
    let synced = ctx.readiness.kubeletconfig.clone();
    let ctx = Arc::new(KubeletConfigContext::new(ctx));
    guarded::drive("kubeletconfig", controller, reconcile_raw, error_policy_raw, ctx, synced, shutdown).await;
}

#[cfg(test)]
mod tests;
pub mod unreachable;
