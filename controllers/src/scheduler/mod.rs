//! The `NUMAResourcesScheduler` controller: the NUMA-aware secondary scheduler.
//!
//! Reconcile: name check (`IncorrectNUMAResourcesSchedulerResourceName`), pause annotation,
//! validation (the api crate's rules), normalization for the platform, replica count (explicit,
//! or detected from the control-plane nodes; on plain Kubernetes with a managed control plane,
//! from all nodes), then server-side apply of the ServiceAccount, RBAC, the
//! `KubeSchedulerConfiguration` ConfigMap and the Deployment (whose pod template carries the
//! ConfigMap's hash, so a config change rolls it), then, once it is available, the pod routing
//! webhook ([`pod_routing`]). Status reports the scheduler name read back from the applied
//! ConfigMap, the effective resync period, the Deployment and the conditions.
//!
//! Deletion is ordered: our finalizer deletes the pod routing webhook first and is
//! released only once that is gone, so no pod is routed to a scheduler being removed; then owner
//! references let the garbage collector remove the rest.

pub mod pod_routing;
pub mod topology;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::operator::defaults::Platform;
use numaresources_api::operator::scheduler_image::identify;
use numaresources_api::operator::validation::validate_scheduler;
use numaresources_api::operator::{
    NUMAResourcesScheduler, NUMAResourcesSchedulerStatus, NamespacedName, PreemptionMode, SCHEDULER_SINGLETON_NAME,
    SchedulerEngine, SchedulerInformerMode,
};
use serde_json::json;

use crate::apply::{Applier, Removal, get_opt};
use crate::conditions::{self as cond, Extra, State};
use crate::context::{Context, Error, Result, error_policy_for};
use crate::guarded;
use crate::hash::config_hash;
use crate::names::{
    self, ANNOTATION_PAUSE, ANNOTATION_SCHEDULER_QOS, FIELD_MANAGER, FINALIZER_POD_ROUTING, POD_ROUTING_CONFIGURATION,
    SCHEDULER,
};
use crate::operator::nrt_api::deployment_available;
use crate::render::scheduler::{self as render, SchedulerSettings};
use crate::server_version;
use topology::{Restart, Rollout};

/// Requeue while the Deployment rolls out.
const PROGRESS_REQUEUE: Duration = Duration::from_secs(5);
/// Re-check the replica count this often when all is well.
const RESYNC: Duration = Duration::from_secs(300);

/// Reconciles one watched object (guarded watch, [`guarded`]): a malformed object is marked
/// `Degraded` and skipped; a malformed one being deleted still gets its finalizer's cleanup,
/// which needs nothing but its identity.
pub async fn reconcile_raw(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action> {
    match guarded::parse::<NUMAResourcesScheduler>(&obj) {
        Ok(nrs) => reconcile(Arc::new(nrs), ctx).await,
        Err(_) if obj.metadata.deletion_timestamp.is_some() => {
            if obj.finalizers().iter().any(|f| f == FINALIZER_POD_ROUTING) {
                let identity =
                    NUMAResourcesScheduler { metadata: obj.metadata.clone(), spec: Default::default(), status: None };
                cleanup(&identity, &ctx).await?;
                let resource = guarded::resource::<NUMAResourcesScheduler>();
                guarded::release(&ctx, &resource, &obj, FINALIZER_POD_ROUTING).await?;
            }
            Ok(Action::await_change())
        }
        Err(malformed) => {
            guarded::degrade(&ctx, &guarded::resource::<NUMAResourcesScheduler>(), &obj, &malformed).await?;
            Ok(Action::await_change())
        }
    }
}

/// Retries a failed reconcile with a per-object backoff.
pub fn error_policy_raw(obj: Arc<DynamicObject>, error: &Error, ctx: Arc<Context>) -> Action {
    error_policy_for(&key(&obj.name_any()), error, &ctx)
}

/// Reconciles one `NUMAResourcesScheduler`.
pub async fn reconcile(nrs: Arc<NUMAResourcesScheduler>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.pass("scheduler");
    let deleting = nrs.metadata.deletion_timestamp.is_some();
    if nrs.name_any() != SCHEDULER_SINGLETON_NAME {
        if !deleting {
            let message =
                format!("this is a singleton resource and the object name must be '{SCHEDULER_SINGLETON_NAME}'");
            write_status(&nrs, &ctx, &State::degraded(cond::REASON_SCHEDULER_NAME, message), None, None).await?;
        }
        return Ok(Action::await_change());
    }
    // Deletion is never paused: the finalizer would hold the object forever.
    if !deleting && nrs.annotations().get(ANNOTATION_PAUSE).is_some_and(|v| v == "enabled") {
        return Ok(Action::await_change());
    }
    let api: Api<NUMAResourcesScheduler> = Api::all(ctx.client.clone());
    let result = finalizer(&api, FINALIZER_POD_ROUTING, nrs.clone(), |event| async {
        match event {
            FinalizerEvent::Apply(nrs) => apply(&nrs, &ctx).await,
            FinalizerEvent::Cleanup(nrs) => cleanup(&nrs, &ctx).await,
        }
    })
    .await
    .map_err(Error::from);
    match result {
        Ok(action) => {
            ctx.reset_backoff(&key(&nrs.name_any()));
            Ok(action)
        }
        Err(error) => {
            if !deleting {
                let state = State::degraded(cond::REASON_INTERNAL_ERROR, error.condition_message());
                if let Err(status_error) = write_status(&nrs, &ctx, &state, None, None).await {
                    tracing::warn!(error = %status_error, "failed to report the failure in status");
                }
            }
            Err(error)
        }
    }
}

/// The backoff and metrics key: `scheduler/<name>`.
fn key(name: &str) -> String {
    format!("scheduler/{name}")
}

/// What status reports besides the conditions.
#[derive(Debug, Clone)]
struct Running {
    scheduler_name: String,
    spec: numaresources_api::operator::NUMAResourcesSchedulerSpec,
}

async fn apply(nrs: &NUMAResourcesScheduler, ctx: &Context) -> Result<Action> {
    if let Some(message) = server_version::refusal(&ctx.client, ctx.settings.kubernetes_version).await {
        let state = State::degraded(cond::REASON_UNSUPPORTED_KUBERNETES, message);
        write_status(nrs, ctx, &state, None, None).await?;
        return Ok(Action::requeue(server_version::RECHECK));
    }
    let errors = validate_scheduler(nrs);
    if !errors.is_empty() {
        // Upstream's reason for a bad image; ours for the other fields (upstream has none).
        let image_only = errors.0.iter().all(|e| e.path.as_str() == "spec.imageSpec");
        let reason = if image_only { cond::REASON_SCHEDULER_IMAGE } else { cond::REASON_SCHEDULER_INVALID };
        write_status(nrs, ctx, &State::degraded(reason, errors.to_string()), None, None).await?;
        return Ok(Action::await_change());
    }
    let mut spec = nrs.spec.normalized(ctx.settings.platform);
    if spec.engine() == SchedulerEngine::Extender && spec.scheduler_image.trim().is_empty() {
        match stock_scheduler_image(ctx).await {
            Some(image) => spec.scheduler_image = image,
            None => {
                let state = State::degraded(cond::REASON_SCHEDULER_IMAGE, NO_STOCK_IMAGE);
                write_status(nrs, ctx, &state, None, None).await?;
                return Ok(Action::requeue(server_version::RECHECK));
            }
        }
    }
    let eligible = eligible_nodes(ctx).await?;
    let replicas = match render::replicas(spec.replicas, eligible) {
        Ok(replicas) => replicas,
        Err(message) => {
            write_status(nrs, ctx, &State::degraded(cond::REASON_INTERNAL_ERROR, message), None, None).await?;
            return Ok(Action::requeue(RESYNC));
        }
    };
    let namespace = &ctx.settings.namespace;
    // Only what the image can decode is rendered; the rest is said in status.
    let image = identify(&spec.scheduler_image);
    // The extender engine runs the stock kube-scheduler: none of the plugin's settings apply.
    let image_warnings = match spec.engine() {
        SchedulerEngine::Extender => extender_image_warnings(&spec.scheduler_image, ctx.settings.kubernetes_version),
        _ => image.warnings(&spec.scheduler_image, spec.preemption_mode == Some(PreemptionMode::Enabled)),
    };
    let observed = Observed { image_warnings, coverage: topology::observe(ctx).await? };
    let settings = SchedulerSettings {
        namespace: namespace.clone(),
        capabilities: image.capabilities,
        guaranteed_qos: nrs.annotations().get(ANNOTATION_SCHEDULER_QOS).is_some_and(|v| v == "guaranteed"),
        extender_image: ctx.settings.image.clone(),
    };
    let applier = Applier::new(ctx.client.clone(), nrs.controller_owner_ref(&()));
    applier.namespaced(render::service_account(namespace)?).await?;
    applier.cluster(render::cluster_role()?).await?;
    for binding in render::cluster_role_bindings(namespace)? {
        applier.cluster(binding).await?;
    }
    applier.namespaced(render::leader_election_role(namespace)?).await?;
    for binding in render::role_bindings(namespace)? {
        applier.namespaced(binding).await?;
    }
    applier.namespaced(crate::render::network_policy::scheduler(namespace)?).await?;
    let config_map =
        applier.namespaced(render::config_map(&settings, render::config_yaml(&spec, &settings, replicas))?).await?;
    let data = config_map.data.clone().unwrap_or_default();
    let (epoch, restart_check) = match cache_epoch(nrs, ctx, &observed.coverage).await? {
        Epoch::Wait(message) => {
            let state = State::progressing(topology::REASON_WAITING, message);
            write_status(nrs, ctx, &state, None, Some(&observed)).await?;
            return Ok(Action::requeue(topology::WAIT_REQUEUE));
        }
        Epoch::Keep(epoch, later) => (epoch, later),
    };
    let deployment = applier
        .namespaced(render::deployment(&spec, &settings, replicas, &config_hash(&data), &epoch.to_string())?)
        .await?;
    let scheduler_name =
        data.get(render::CONFIG_KEY).and_then(|yaml| render::scheduler_name_in(yaml)).unwrap_or_default();
    let running = Running { scheduler_name, spec };
    let available = deployment_available(&deployment);
    pod_routing::reconcile(nrs, ctx, &applier, available).await?;
    let (state, action) = if available {
        (State::Available, Action::requeue(restart_check.map_or(RESYNC, |later| later.min(RESYNC))))
    } else {
        let message = format!("waiting for Deployment {namespace}/{SCHEDULER} to become available");
        (State::progressing(cond::REASON_DEPLOYMENT_UPDATING, message), Action::requeue(PROGRESS_REQUEUE))
    };
    write_status(nrs, ctx, &state, Some(&running), Some(&observed)).await?;
    Ok(action)
}

/// Why an extender engine without an image is not deployed.
const NO_STOCK_IMAGE: &str = "spec.imageSpec is empty and kube-apiserver's /version gives no release (vX.Y.Z) to pick \
     the stock kube-scheduler of: set spec.imageSpec to registry.k8s.io/kube-scheduler at the cluster's version";

/// The extender engine's default image: the stock kube-scheduler of the cluster's release, as
/// read at start or, if it could not be read then, now.
async fn stock_scheduler_image(ctx: &Context) -> Option<String> {
    if let Some(image) = &ctx.settings.stock_scheduler_image {
        return Some(image.clone());
    }
    let info = server_version::read(&ctx.client).await?;
    numaresources_api::operator::scheduler_image::stock_kube_scheduler_image(&info.git_version)
}

/// What a pass saw besides the spec, for status.
#[derive(Debug, Clone)]
struct Observed {
    /// What the chosen image leaves out, or that it is not known.
    image_warnings: Vec<String>,
    /// The NRTs against the eligible nodes.
    coverage: topology::Coverage,
}

/// The cache epoch the Deployment is rendered with.
enum Epoch {
    /// No Deployment yet, and the first rollout waits (why).
    Wait(String),
    /// This epoch (the running pods', or now for a restart or the first rollout), and when to
    /// look again if a restart is due but rate-limited.
    Keep(Timestamp, Option<Duration>),
}

/// The first rollout waits for the NRTs (bounded); later passes restart the pods, rate-limited,
/// when NRTs appeared that their cache cannot know ([`topology`]).
async fn cache_epoch(nrs: &NUMAResourcesScheduler, ctx: &Context, coverage: &topology::Coverage) -> Result<Epoch> {
    // Whole seconds: the annotation stays short and compares the same after a round trip.
    let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH);
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    // The extender watches NRTs and uses one created later at once: it neither waits for them
    // nor needs a restart to see them.
    let extender = nrs.spec.engine() == SchedulerEngine::Extender;
    let Some(existing) = get_opt(&deployments, SCHEDULER).await? else {
        if extender {
            return Ok(Epoch::Keep(now, None));
        }
        // Waiting since the Progressing condition took this reason (kept across passes).
        let previous = nrs.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
        let waiting_since = cond::find(previous, cond::PROGRESSING)
            .filter(|c| c.status == "True" && c.reason == topology::REASON_WAITING)
            .map_or(now, |c| c.last_transition_time.0);
        return Ok(match topology::first_rollout(coverage, waiting_since, now) {
            Rollout::Wait(message) => Epoch::Wait(message),
            Rollout::Go => Epoch::Keep(now, None),
        });
    };
    let template_epoch = existing
        .spec
        .as_ref()
        .and_then(|spec| spec.template.metadata.as_ref())
        .and_then(|meta| meta.annotations.as_ref())
        .and_then(|annotations| annotations.get(topology::ANNOTATION_CACHE_EPOCH))
        .and_then(|text| text.parse::<Timestamp>().ok());
    // A Deployment from before the annotation: its pods are no older than the Deployment.
    let epoch = template_epoch.or_else(|| existing.metadata.creation_timestamp.as_ref().map(|t| t.0)).unwrap_or(now);
    if extender {
        return Ok(Epoch::Keep(epoch, None));
    }
    Ok(match topology::restart(coverage, epoch, now) {
        Restart::No => Epoch::Keep(epoch, None),
        Restart::Later(left) => Epoch::Keep(epoch, Some(left)),
        Restart::Now(nodes) => {
            let names = topology::list_names(&nodes);
            tracing::info!(nodes = %names, "restarting the scheduler: NodeResourceTopologies appeared that it cannot see");
            let note = format!(
                "restarting the scheduler so that it lists the NodeResourceTopologies created since its pods started,                  for nodes: {names}"
            );
            ctx.event(&nrs.object_ref(&()), EventType::Normal, "SchedulerRestarted", "Restart", note).await;
            Epoch::Keep(now, None)
        }
    })
}

/// The pod routing webhook first: with it gone no pod is sent to the scheduler the garbage
/// collector is about to delete. The finalizer is released only once a GET answers 404.
async fn cleanup(nrs: &NUMAResourcesScheduler, ctx: &Context) -> Result<Action> {
    match pod_routing::remove(nrs, ctx).await? {
        Removal::Deleted => {
            let note = format!("the pod routing webhook {POD_ROUTING_CONFIGURATION} is gone");
            ctx.event(&nrs.object_ref(&()), EventType::Normal, "PodRoutingRemoved", "Delete", note).await;
            Ok(Action::await_change())
        }
        Removal::NothingOurs => Ok(Action::await_change()),
        Removal::Pending => Err(Error::NotYet(format!(
            "MutatingWebhookConfiguration {POD_ROUTING_CONFIGURATION} is still being deleted"
        ))),
    }
}

/// How many nodes may run a replica: control-plane nodes (workers on HyperShift); on plain
/// Kubernetes without visible control-plane nodes (a managed control plane), every node.
async fn eligible_nodes(ctx: &Context) -> Result<usize> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let role = match ctx.settings.platform {
        Platform::HyperShift(..) => "node-role.kubernetes.io/worker",
        _ => "node-role.kubernetes.io/control-plane",
    };
    let list = |selector: Option<&str>| {
        let params = selector.map_or_else(ListParams::default, |s| ListParams::default().labels(s));
        let nodes = nodes.clone();
        async move { nodes.list_metadata(&params).await.map(|l| l.items.len()) }
    };
    let count = list(Some(role)).await.map_err(|e| Error::kube("list nodes", e))?;
    if count == 0 && ctx.settings.platform == Platform::Kubernetes {
        return list(None).await.map_err(|e| Error::kube("list nodes", e));
    }
    Ok(count)
}

async fn write_status(
    nrs: &NUMAResourcesScheduler,
    ctx: &Context,
    state: &State,
    running: Option<&Running>,
    observed: Option<&Observed>,
) -> Result<()> {
    let previous = nrs.status.clone().unwrap_or_default();
    let namespace = &ctx.settings.namespace;
    let mut extras: Vec<Extra> = running.map(|r| engine_conditions(&r.spec).into()).unwrap_or_default();
    if let Some(observed) = observed {
        extras.extend(observed_conditions(observed));
        announce_image_warnings(nrs, ctx, &previous.conditions, &observed.image_warnings).await;
    }
    let mut status = NUMAResourcesSchedulerStatus {
        conditions: cond::conditions(&previous.conditions, state, &extras, nrs.metadata.generation),
        ..previous.clone()
    };
    if let Some(running) = running {
        status.deployment = NamespacedName { namespace: namespace.clone(), name: SCHEDULER.to_owned() };
        status.scheduler_name = running.scheduler_name.clone();
        status.cache_resync_period = Some(render::effective_resync_period(&running.spec));
        status.related_objects = vec![
            cond::related("", "namespaces", "", namespace),
            cond::related("apps", "deployments", namespace, SCHEDULER),
        ];
    }
    let unchanged = cond::same(&previous.conditions, &status.conditions)
        && NUMAResourcesSchedulerStatus { conditions: Vec::new(), ..previous.clone() }
            == NUMAResourcesSchedulerStatus { conditions: Vec::new(), ..status.clone() };
    if unchanged {
        return Ok(());
    }
    let api: Api<NUMAResourcesScheduler> = Api::all(ctx.client.clone());
    let patch = json!({
        "apiVersion": NUMAResourcesScheduler::api_version(&()),
        "kind": NUMAResourcesScheduler::kind(&()),
        "status": status,
    });
    api.patch_status(&nrs.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map_err(|e| Error::kube(format!("update the status of NUMAResourcesScheduler {}", nrs.name_any()), e))?;
    let note = || format!("scheduler {} is available (engine {})", status.scheduler_name, nrs.spec.engine());
    cond::announce(ctx, &nrs.object_ref(&()), &previous.conditions, state, note).await;
    Ok(())
}

/// The conditions that say which engine decides: `ExtenderEngineActive` (True: the stock
/// kube-scheduler with our extender; False: scheduler-plugins' NodeResourceTopologyMatch), each
/// naming the image, and `DedicatedInformerActive` (the plugin's informer; the extender watches
/// NRTs itself).
fn engine_conditions(spec: &numaresources_api::operator::NUMAResourcesSchedulerSpec) -> [Extra; 2] {
    let image = &spec.scheduler_image;
    if spec.engine() == SchedulerEngine::Extender {
        let message =
            format!("the stock kube-scheduler {image} asks the numaresources extender beside it for every pod");
        [
            Extra { type_: cond::EXTENDER_ENGINE_ACTIVE, status: "True", reason: "Extender".into(), message },
            Extra {
                type_: cond::DEDICATED_INFORMER_ACTIVE,
                status: "False",
                reason: "Extender".into(),
                message: "the extender watches NodeResourceTopologies itself".into(),
            },
        ]
    } else {
        let dedicated = spec.scheduler_informer == Some(SchedulerInformerMode::Dedicated);
        [
            Extra {
                type_: cond::EXTENDER_ENGINE_ACTIVE,
                status: "False",
                reason: "Plugin".into(),
                message: format!("scheduler-plugins' NodeResourceTopologyMatch in {image} decides"),
            },
            Extra {
                type_: cond::DEDICATED_INFORMER_ACTIVE,
                status: if dedicated { "True" } else { "False" },
                reason: cond::REASON_AS_EXPECTED.into(),
                message: String::new(),
            },
        ]
    }
}

/// The conditions that report what a pass saw: every eligible node visible, the image's fit.
fn observed_conditions(observed: &Observed) -> [Extra; 2] {
    let coverage = &observed.coverage;
    let topology = if coverage.complete() {
        Extra {
            type_: topology::CONDITION,
            status: "True",
            reason: cond::REASON_AS_EXPECTED.into(),
            message: format!("every eligible node ({}) has a NodeResourceTopology", coverage.eligible.len()),
        }
    } else {
        let reason = if coverage.not_serving.is_some() { "NodeTopologyAPIUnavailable" } else { "NodesWithoutTopology" };
        Extra { type_: topology::CONDITION, status: "False", reason: reason.into(), message: coverage.describe() }
    };
    let image = if observed.image_warnings.is_empty() {
        Extra {
            type_: cond::SCHEDULER_IMAGE_COMPATIBLE,
            status: "True",
            reason: cond::REASON_AS_EXPECTED.into(),
            message: String::new(),
        }
    } else {
        Extra {
            type_: cond::SCHEDULER_IMAGE_COMPATIBLE,
            status: "False",
            reason: "SettingsNotRendered".into(),
            message: observed.image_warnings.join("; "),
        }
    };
    [topology, image]
}

/// A Warning Event when what the image leaves out changes (not on every pass).
/// The extender engine's image is the stock kube-scheduler of the cluster's version: another
/// minor is said (kube-scheduler supports the kube-apiserver of its own minor and the one before,
/// and its default plugins follow its version).
fn extender_image_warnings(image: &str, cluster: Option<crate::server_version::KubeVersion>) -> Vec<String> {
    let minor = numaresources_api::operator::scheduler_image::kube_scheduler_minor(image);
    match (minor, cluster) {
        (Some(minor), Some(cluster)) if cluster.major == 1 && minor != cluster.minor => vec![format!(
            "spec.imageSpec {image:?} is kube-scheduler v1.{minor} while the cluster runs {cluster}: use the \
             cluster's version (registry.k8s.io/kube-scheduler:{cluster}.x)"
        )],
        _ => Vec::new(),
    }
}

async fn announce_image_warnings(
    nrs: &NUMAResourcesScheduler,
    ctx: &Context,
    previous: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    warnings: &[String],
) {
    let message = warnings.join("; ");
    let said = cond::find(previous, cond::SCHEDULER_IMAGE_COMPATIBLE).map(|c| c.message.as_str()).unwrap_or_default();
    if message.is_empty() || message == said {
        return;
    }
    tracing::warn!(image = %nrs.spec.scheduler_image, "{message}");
    ctx.event(&nrs.object_ref(&()), EventType::Warning, "SettingsNotRendered", "Reconcile", message).await;
}

/// An object's identity for the "created" predicate: changes only when it is (re)created.
fn uid_hash(object: &PartialObjectMeta<NodeResourceTopology>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    object.metadata.uid.as_ref()?.hash(&mut hasher);
    Some(hasher.finish())
}

/// Runs the controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let client = ctx.client.clone();
    let namespace = ctx.settings.namespace.clone();
    let ours = watcher::Config::default().labels(&format!("{}={}", names::LABEL_MANAGED_BY, FIELD_MANAGER));
    // Node label changes (a control-plane node added or relabelled) may change the replica count;
    // node status updates do not, so only label changes trigger a pass.
    let node_labels = guarded::node_label_changes(client.clone());
    // An NRT created (or recreated: a new uid) may need the scheduler restarted; the many
    // updates of existing NRTs do not. Retried with backoff while the NRT API is not served yet.
    let nrts_created = watcher::watcher(
        Api::<PartialObjectMeta<NodeResourceTopology>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .predicate_filter(uid_hash, Default::default())
    .filter_map(|nrt| async move { nrt.ok().map(|_| ()) });
    let controller = guarded::controller::<NUMAResourcesScheduler>(client.clone())
        .owns(Api::<Deployment>::namespaced(client.clone(), &namespace), ours.clone())
        .owns(Api::<ConfigMap>::namespaced(client, &namespace), ours)
        .reconcile_all_on(futures_util::stream::select(node_labels, nrts_created));
    let synced = ctx.readiness.scheduler.clone();
    guarded::drive("scheduler", controller, reconcile_raw, error_policy_raw, ctx, synced, shutdown).await;
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
