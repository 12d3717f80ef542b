//! The `NUMAResourcesOperator` controller: the NodeResourceTopology API and one
//! exporter DaemonSet per node group.
//!
//! Reconcile, each step either succeeding or ending the pass:
//! 1. name check (Degraded `IncorrectNUMAResourcesOperatorResourceName`), pause annotation;
//! 2. our finalizer (it unregisters the APIService before anything it points at can go);
//! 3. custom image (`CustomUserImage`), validation and node-group resolution
//!    (`ValidationErrorUnderNodeGroups`), using the api crate's rules as the backstop of the
//!    webhook's;
//! 4. the NRT API ([`nrt_api`]);
//! 5. exporters: shared ServiceAccount/RBAC, a DaemonSet per pool (with the direct write path
//!    to our API server while it serves the NRT API, [`direct_write`]), removal of DaemonSets we
//!    own that are no longer wanted (never anyone else's);
//! 6. status: conditions, per-group DaemonSet and normalized config, ready DaemonSets,
//!    related objects; tolerable problems (a selector matching several pools, nodes in two
//!    groups) degrade it now, after everything was applied.
//!
//! Errors requeue with a per-object backoff and show as `Degraded`/`InternalError` with the
//! API server's message.

pub mod direct_write;
pub mod nrt_api;
pub mod nrt_teardown;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use numaresources_api::nrt;
use numaresources_api::operator::validation::validate_operator;
use numaresources_api::operator::{
    MachineConfigPool, NUMAResourcesOperator, NUMAResourcesOperatorStatus, NamespacedName, NodeGroupStatus,
    OPERATOR_SINGLETON_NAME, ObjectReference,
};
use serde_json::json;

use crate::apply::{Applier, Removal, controlled_by, delete, get_opt};
use crate::cluster_nodes::{self, RESOLVE_RETRY};
use crate::conditions::{self as cond, Extra, State};
use crate::context::{Context, Error, Result, error_policy_for};
use crate::guarded;
use crate::hash::config_hash;
use crate::names::{self, ANNOTATION_PAUSE, FIELD_MANAGER, FINALIZER_APISERVICE};
use crate::nodegroups::{self, ResolvedPool};
use crate::render::rte::{self, RteSettings};
use crate::server_version;
use nrt_api::ApiState;

/// Requeue while something rolls out (upstream's 5 s).
const PROGRESS_REQUEUE: Duration = Duration::from_secs(5);
/// Requeue while an NRT CRD is in the way (we do not watch CRDs).
const BLOCKED_REQUEUE: Duration = Duration::from_secs(60);
/// Re-check node membership (overlaps) this often when all is well.
const RESYNC: Duration = Duration::from_secs(300);

/// The outcome a pass reports in status.
#[derive(Debug, Clone, Default)]
struct Outcome {
    state: Option<State>,
    extras: Vec<Extra>,
    node_groups: Vec<NodeGroupStatus>,
    machine_config_pools: Vec<MachineConfigPool>,
    daemon_sets: Vec<NamespacedName>,
    related: Vec<ObjectReference>,
}

impl Outcome {
    fn degraded(reason: &str, message: impl Into<String>) -> Self {
        Self { state: Some(State::degraded(reason, message)), ..Self::default() }
    }
}

/// Reconciles one watched object (guarded watch, [`guarded`]): a malformed object is marked
/// `Degraded` and skipped; a malformed one being deleted still gets its finalizer's cleanup,
/// which needs nothing but its identity.
pub async fn reconcile_raw(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action> {
    match guarded::parse::<NUMAResourcesOperator>(&obj) {
        Ok(nro) => reconcile(Arc::new(nro), ctx).await,
        Err(_) if obj.metadata.deletion_timestamp.is_some() => {
            if obj.finalizers().iter().any(|f| f == FINALIZER_APISERVICE) {
                let identity =
                    NUMAResourcesOperator { metadata: obj.metadata.clone(), spec: Default::default(), status: None };
                cleanup(&identity, &ctx).await?;
                guarded::release(&ctx, &guarded::resource::<NUMAResourcesOperator>(), &obj, FINALIZER_APISERVICE)
                    .await?;
            }
            Ok(Action::await_change())
        }
        Err(malformed) => {
            guarded::degrade(&ctx, &guarded::resource::<NUMAResourcesOperator>(), &obj, &malformed).await?;
            Ok(Action::await_change())
        }
    }
}

/// Retries a failed reconcile with a per-object backoff.
pub fn error_policy_raw(obj: Arc<DynamicObject>, error: &Error, ctx: Arc<Context>) -> Action {
    error_policy_for(&key(&obj.name_any()), error, &ctx)
}

/// Reconciles one `NUMAResourcesOperator`.
pub async fn reconcile(nro: Arc<NUMAResourcesOperator>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.pass("operator");
    let deleting = nro.metadata.deletion_timestamp.is_some();
    if nro.name_any() != OPERATOR_SINGLETON_NAME {
        if !deleting {
            let message =
                format!("this is a singleton resource and the object name must be '{OPERATOR_SINGLETON_NAME}'");
            write_status(&nro, &ctx, Outcome::degraded(cond::REASON_OPERATOR_NAME, message)).await?;
        }
        return Ok(Action::await_change());
    }
    if !deleting && nro.annotations().get(ANNOTATION_PAUSE).is_some_and(|v| v == "enabled") {
        tracing::info!(name = %nro.name_any(), "reconciliation paused by annotation");
        return Ok(Action::await_change());
    }
    let api: Api<NUMAResourcesOperator> = Api::all(ctx.client.clone());
    let result = finalizer(&api, FINALIZER_APISERVICE, nro.clone(), |event| async {
        match event {
            // Boxed: these futures are large, and a debug build keeps every inlined one on the stack.
            FinalizerEvent::Apply(nro) => Box::pin(apply(&nro, &ctx)).await,
            FinalizerEvent::Cleanup(nro) => Box::pin(cleanup(&nro, &ctx)).await,
        }
    })
    .await
    .map_err(Error::from);
    match result {
        Ok(action) => {
            ctx.reset_backoff(&key(&nro.name_any()));
            Ok(action)
        }
        Err(error) => {
            if !deleting {
                let outcome = Outcome::degraded(cond::REASON_INTERNAL_ERROR, error.condition_message());
                if let Err(status_error) = write_status(&nro, &ctx, outcome).await {
                    tracing::warn!(error = %status_error, "failed to report the failure in status");
                }
            }
            Err(error)
        }
    }
}

/// The backoff and metrics key: `operator/<name>`.
fn key(name: &str) -> String {
    format!("operator/{name}")
}

async fn apply(nro: &NUMAResourcesOperator, ctx: &Context) -> Result<Action> {
    if let Some(message) = server_version::refusal(&ctx.client, ctx.settings.kubernetes_version).await {
        write_status(nro, ctx, Outcome::degraded(cond::REASON_UNSUPPORTED_KUBERNETES, message)).await?;
        return Ok(Action::requeue(server_version::RECHECK));
    }
    let spec = nro.spec.normalized();
    let image = if nro.spec.exporter_image.is_empty() {
        ctx.settings.image.clone()
    } else if ctx.settings.allow_custom_rte_image {
        nro.spec.exporter_image.clone()
    } else {
        let message = format!("custom operand image is not supported: {}", nro.spec.exporter_image);
        write_status(nro, ctx, Outcome::degraded(cond::REASON_CUSTOM_IMAGE, message)).await?;
        return Ok(Action::await_change());
    };
    let errors = validate_operator(nro);
    if !errors.is_empty() {
        write_status(nro, ctx, Outcome::degraded(cond::REASON_VALIDATION, errors.to_string())).await?;
        return Ok(Action::await_change());
    }
    let (nodes, pools) = cluster_nodes::observe(ctx, &spec.node_groups).await?;
    let multiple_pools = nro.annotations().get(names::ANNOTATION_MULTIPLE_POOLS).is_some_and(|v| v == "enabled");
    let resolution = match nodegroups::resolve(&spec.node_groups, &nodes, pools.as_deref(), multiple_pools) {
        Ok(resolution) => resolution,
        Err(error) => {
            // Depends on the cluster (pools, their selectors): look again later.
            write_status(nro, ctx, Outcome::degraded(cond::REASON_VALIDATION, error.0)).await?;
            return Ok(Action::requeue(RESOLVE_RETRY));
        }
    };

    let applier = Applier::new(ctx.client.clone(), nro.controller_owner_ref(&()));
    let api_state = Box::pin(nrt_api::reconcile(nro, ctx, &applier)).await?;
    if let ApiState::Blocked(message) = &api_state {
        write_status(nro, ctx, Outcome::degraded(cond::REASON_NRT_CRD_PRESENT, message.clone())).await?;
        return Ok(Action::requeue(BLOCKED_REQUEUE));
    }

    let direct_write = Box::pin(direct_write::prepare(ctx, &applier, &api_state)).await?;
    let settings = RteSettings {
        namespace: ctx.settings.namespace.clone(),
        nro_name: nro.name_any(),
        image,
        verbosity: spec.log_level.as_ref().map_or(2, |l| l.klog_verbosity()),
        metrics: ctx.settings.rte_metrics.clone(),
        openshift_selinux: ctx.settings.is_openshift(),
        direct_write,
    };
    let exporters = apply_exporters(nro, ctx, &applier, &settings, &resolution.pools).await?;

    let mut outcome = Outcome::default();
    let namespace = &ctx.settings.namespace;
    outcome.related.push(cond::related("", "namespaces", "", namespace));
    outcome.related.push(cond::related(nrt::GROUP, nrt::PLURAL, "", ""));
    if matches!(api_state, ApiState::Ready | ApiState::Progressing(_)) {
        outcome.related.push(cond::related("apps", "deployments", namespace, names::APISERVER));
        outcome.related.push(cond::related("apiregistration.k8s.io", "apiservices", "", names::APISERVICE));
    }
    let mut waiting = Vec::new();
    let mut disagreements = Vec::new();
    let mut misaligned = Vec::new();
    for (pool, exporter) in resolution.pools.iter().zip(&exporters) {
        let ds = NamespacedName { namespace: namespace.clone(), name: exporter.name.clone() };
        outcome.node_groups.push(NodeGroupStatus {
            daemon_set: ds.clone(),
            config: pool.config.clone(),
            pool_name: pool.pool.clone(),
        });
        if spec.node_groups.get(pool.group).is_some_and(|g| g.node_selector.is_none()) {
            outcome.machine_config_pools.push(MachineConfigPool {
                name: pool.pool.clone(),
                conditions: Vec::new(),
                config: Some(pool.config.clone()),
            });
        }
        if exporter.ready {
            outcome.related.push(cond::related("apps", "daemonsets", namespace, &exporter.name));
            outcome.daemon_sets.push(ds);
        } else {
            waiting.push(exporter.name.clone());
        }
        if let Some(disagreement) = &exporter.disagreement {
            disagreements.push(format!("pool {}: {disagreement}", pool.pool));
        }
        if let Some(alignment) = &exporter.alignment {
            misaligned.push(format!("pool {}: {alignment}", pool.pool));
        }
    }
    outcome.extras.push(if misaligned.is_empty() {
        Extra {
            type_: cond::KUBELET_NUMA_ALIGNED,
            status: "True",
            reason: cond::REASON_AS_EXPECTED.into(),
            message: String::new(),
        }
    } else {
        Extra {
            type_: cond::KUBELET_NUMA_ALIGNED,
            status: "False",
            reason: crate::kubeletconfig::ALIGNMENT_REASON.into(),
            message: format!(
                "kubelets that cannot give NUMA-aligned placement (pods may land where the kubelet does not align \
                 them, or be refused): {}",
                misaligned.join(". ")
            ),
        }
    });
    outcome.extras.push(if disagreements.is_empty() {
        Extra {
            type_: cond::KUBELET_CONFIG_CONSISTENT,
            status: "True",
            reason: cond::REASON_AS_EXPECTED.into(),
            message: String::new(),
        }
    } else {
        Extra {
            type_: cond::KUBELET_CONFIG_CONSISTENT,
            status: "False",
            reason: "KubeletConfigDisagreement".into(),
            message: format!(
                "nodes of one group run different topology manager settings: {}",
                disagreements.join("; ")
            ),
        }
    });

    let mut tolerable = resolution.tolerable.clone();
    if !resolution.overlaps.is_empty() {
        tolerable.push(format!(
            "nodes in more than one node group (their second exporter pod stays Pending): {}",
            nodegroups::describe_overlaps(&resolution.overlaps)
        ));
    }
    let (state, action) = if !tolerable.is_empty() {
        (State::degraded(cond::REASON_VALIDATION, tolerable.join("; ")), Action::requeue(RESYNC))
    } else if let ApiState::Progressing(message) = &api_state {
        (State::progressing(cond::REASON_DEPLOYMENT_UPDATING, message.clone()), Action::requeue(PROGRESS_REQUEUE))
    } else if !waiting.is_empty() {
        let message = format!("waiting for DaemonSets to roll out: {}", waiting.join(", "));
        (State::progressing(cond::REASON_DAEMONSET_UPDATING, message), Action::requeue(PROGRESS_REQUEUE))
    } else {
        (State::Available, Action::requeue(RESYNC))
    };
    outcome.state = Some(state);
    write_status(nro, ctx, outcome).await?;
    Ok(action)
}

/// What happened to one pool's exporter.
#[derive(Debug)]
struct Exporter {
    name: String,
    ready: bool,
    disagreement: Option<String>,
    alignment: Option<String>,
}

async fn apply_exporters(
    nro: &NUMAResourcesOperator,
    ctx: &Context,
    applier: &Applier,
    settings: &RteSettings,
    pools: &[ResolvedPool],
) -> Result<Vec<Exporter>> {
    let namespace = &ctx.settings.namespace;
    applier.namespaced(rte::service_account(namespace)?).await?;
    applier.cluster(rte::cluster_role()?).await?;
    applier.cluster(rte::cluster_role_binding(namespace)?).await?;
    applier.namespaced(rte::role(namespace)?).await?;
    applier.namespaced(rte::role_binding(namespace)?).await?;
    let policy = if settings.direct_write.is_some() {
        crate::render::network_policy::exporters_writing_directly(namespace)?
    } else {
        crate::render::network_policy::exporters(namespace)?
    };
    applier.namespaced(policy).await?;
    if matches!(settings.metrics, rte::MetricsMode::HttpTls { .. }) {
        applier.namespaced(rte::metrics_service(namespace)?).await?;
    }

    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let mut exporters = Vec::with_capacity(pools.len());
    for pool in pools {
        let name = names::node_group_object_name(&settings.nro_name, &pool.pool);
        let config_map = get_opt(&config_maps, &name).await?;
        let data = config_map.as_ref().and_then(|cm| cm.data.clone()).unwrap_or_default();
        let report =
            |key: &str| config_map.as_ref().and_then(|cm| cm.annotations().get(key).cloned()).filter(|d| !d.is_empty());
        let disagreement = report(names::ANNOTATION_KUBELET_DISAGREEMENT);
        let alignment = report(names::ANNOTATION_KUBELET_ALIGNMENT);
        let applied = applier.namespaced(rte::daemon_set(settings, pool, &config_hash(&data))?).await?;
        exporters.push(Exporter { name, ready: daemon_set_ready(&applied), disagreement, alignment });
    }

    // Remove the DaemonSets of groups that are gone: ours only, by controller reference.
    let wanted: BTreeSet<&str> = exporters.iter().map(|e| e.name.as_str()).collect();
    let daemon_sets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), namespace);
    let selector =
        format!("{}={},{}={}", names::LABEL_COMPONENT, names::COMPONENT_RTE, names::LABEL_MANAGED_BY, FIELD_MANAGER);
    let existing = daemon_sets
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| Error::kube(format!("list DaemonSets in {namespace}"), e))?;
    let uid = nro.uid().unwrap_or_default();
    for ds in existing {
        let name = ds.name_any();
        if controlled_by(&ds, &uid) && !wanted.contains(name.as_str()) && delete(&daemon_sets, &name).await? {
            tracing::info!(%namespace, daemonset = %name, "deleted the exporter of a removed node group");
            let note = format!("deleted DaemonSet {namespace}/{name}: its node group is no longer in the spec");
            ctx.event(&nro.object_ref(&()), EventType::Normal, "DaemonSetDeleted", "Delete", note).await;
        }
    }
    Ok(exporters)
}

/// Ready as upstream defines it (nothing to schedule, or every pod ready), for the current
/// generation and fully rolled out.
pub fn daemon_set_ready(ds: &DaemonSet) -> bool {
    let Some(status) = &ds.status else { return false };
    let current = status.observed_generation >= ds.metadata.generation;
    let desired = status.desired_number_scheduled;
    let rolled_out = desired == 0 || status.updated_number_scheduled.unwrap_or(0) == desired;
    current && rolled_out && (desired == 0 || status.number_ready == desired)
}

async fn cleanup(nro: &NUMAResourcesOperator, ctx: &Context) -> Result<Action> {
    // The APIService first: with it gone nothing routes to the Service the garbage collector
    // is about to delete. The finalizer is removed only once it is really gone; the Event says
    // so only when there was one of ours to delete.
    match nrt_api::unregister(nro, ctx).await? {
        Removal::Deleted => {
            let note = format!("unregistered APIService {}", names::APISERVICE);
            ctx.event(&nro.object_ref(&()), EventType::Normal, "APIServiceDeleted", "Delete", note).await;
            Ok(Action::await_change())
        }
        Removal::NothingOurs => Ok(Action::await_change()),
        Removal::Pending => Err(Error::NotYet(format!("APIService {} is still being deleted", names::APISERVICE))),
    }
}

/// Writes status when it says something new (server-side apply of the whole status), and
/// publishes an Event when the base state changes.
async fn write_status(nro: &NUMAResourcesOperator, ctx: &Context, outcome: Outcome) -> Result<()> {
    let previous = nro.status.clone().unwrap_or_default();
    let state = outcome.state.unwrap_or(State::Available);
    let conditions = cond::conditions(&previous.conditions, &state, &outcome.extras, nro.metadata.generation);
    // Per-group results are published only by a pass that got that far (upstream's rule).
    let status = NUMAResourcesOperatorStatus {
        daemon_sets: outcome.daemon_sets,
        machine_config_pools: outcome.machine_config_pools,
        node_groups: outcome.node_groups,
        conditions,
        related_objects: outcome.related,
    };
    let unchanged = cond::same(&previous.conditions, &status.conditions)
        && previous.daemon_sets == status.daemon_sets
        && previous.machine_config_pools == status.machine_config_pools
        && previous.node_groups == status.node_groups
        && previous.related_objects == status.related_objects;
    if unchanged {
        return Ok(());
    }
    let api: Api<NUMAResourcesOperator> = Api::all(ctx.client.clone());
    let patch = json!({
        "apiVersion": NUMAResourcesOperator::api_version(&()),
        "kind": NUMAResourcesOperator::kind(&()),
        "status": status,
    });
    api.patch_status(&nro.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map_err(|e| Error::kube(format!("update the status of NUMAResourcesOperator {}", nro.name_any()), e))?;
    let note = || "the NodeResourceTopology API and every node group's exporter are ready".to_owned();
    cond::announce(ctx, &nro.object_ref(&()), &previous.conditions, &state, note).await;
    Ok(())
}

/// Runs the controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let client = ctx.client.clone();
    let namespace = ctx.settings.namespace.clone();
    let ours = watcher::Config::default().labels(&format!("{}={}", names::LABEL_MANAGED_BY, FIELD_MANAGER));
    let exporter_configs = watcher::Config::default().labels(names::LABEL_NRO_NAME);
    let config_owner = guarded::resource::<NUMAResourcesOperator>();
    // Node label changes move nodes between groups (and may make a failed resolution succeed).
    let node_labels = guarded::node_label_changes(client.clone());
    let controller = guarded::controller::<NUMAResourcesOperator>(client.clone())
        .owns(Api::<DaemonSet>::namespaced(client.clone(), &namespace), ours.clone())
        .owns(Api::<Deployment>::namespaced(client.clone(), &namespace), ours)
        .watches(Api::<ConfigMap>::namespaced(client, &namespace), exporter_configs, move |cm| {
            cm.labels().get(names::LABEL_NRO_NAME).map(|name| ObjectRef::new_with(name, config_owner.clone()))
        })
        .reconcile_all_on(node_labels);
    let synced = ctx.readiness.operator.clone();
    guarded::drive("operator", controller, reconcile_raw, error_policy_raw, ctx, synced, shutdown).await;
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
