//! Pending pods explained where people look: a pod the NUMA-aware scheduler cannot place
//! (`PodScheduled=False`, `Unschedulable`) gets a Warning Event of its own, reason
//! `NUMAPlacement`, saying from the NRTs and the fit rules `kubectl numa fit` uses
//! ([`numaresources_api::fit`]) which nodes would take it and why the others do not, so
//! `kubectl describe pod` answers more than `cannot align container`.
//!
//! Bounded: a pod is explained again at most once a minute, and only when an NRT or its requests
//! changed since its Event said it (a quiet cluster's Pending pods cost nothing to keep
//! explained); its Event goes out again only when the explanation changed (an NRT that matters
//! changed, not a scheduler retry); Events are
//! limited cluster-wide ([`EVENTS_PER_SECOND`], [`EVENT_BURST`]); explaining takes at most
//! [`EXPLANATION_CPU_SHARE`] of a core on average; a gauge counts the unschedulable pods by
//! their most common reason, a fixed label set.

mod limiter;
pub mod rejected;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use numaresources_api::fit::explain::{EVENT_MESSAGE_LIMIT, Explanation, ReasonKind, explain};
use numaresources_api::fit::{PodRequests, evaluate};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::operator::{NUMAResourcesScheduler, ScoringStrategyParams};

pub(crate) use limiter::{Admission, Basis, Budget, Limiter};

use crate::context::Context;

/// The Event reason.
pub const REASON: &str = "NUMAPlacement";
/// A pod's explanation goes out at most this often.
pub const PER_POD_INTERVAL: Duration = Duration::from_secs(60);
/// Explanations published per second, cluster-wide, in the long run.
pub const EVENTS_PER_SECOND: f64 = 5.0;
/// Explanations that may go out at once after a quiet spell.
pub const EVENT_BURST: f64 = 50.0;
/// Changes closer together than this are explained in one pass.
const PASS_INTERVAL: Duration = Duration::from_secs(2);
/// A pass runs at least this often, so pods due (or waiting for budget) are not left waiting
/// for a change.
const QUIET_PASS_INTERVAL: Duration = Duration::from_secs(10);
/// The share of one core explanations may take on average: a pod explained against 5,000 NRTs
/// takes 12–22 ms (BENCHMARKS.md), so 100 Pending pods explained once a minute while the NRTs
/// keep changing would take 2–4 % (while they do not, none is explained again).
pub const EXPLANATION_CPU_SHARE: f64 = 0.01;
/// The CPU time explanations may take at once after a quiet spell (about 50 pods at 5,000 nodes).
pub const EXPLANATION_BURST: Duration = Duration::from_secs(1);

/// Runs until `shutdown`: follows the NRTs and the Pending pods, and explains each pass's
/// unschedulable pods.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()>) {
    let (nrts, nrt_writer) = reflector::store::<NodeResourceTopology>();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let (failed, failed_writer) = reflector::store::<Pod>();
    let (schedulers, scheduler_writer) = reflector::store::<NUMAResourcesScheduler>();
    let pod_api: Api<Pod> = Api::all(ctx.client.clone());
    // Pods not bound yet (a bound pod has nothing left to explain), and pods that failed (the
    // kubelet's TopologyAffinityError among them).
    let pending = watcher::Config::default().fields("spec.nodeName=,status.phase=Pending");
    let failures = watcher::Config::default().fields("status.phase=Failed");
    let everything = watcher::Config::default();
    let changes = futures_util::stream::select_all([
        reflector::reflector(nrt_writer, watcher::watcher(Api::all(ctx.client.clone()), everything.clone()))
            .default_backoff()
            .map(|_| ())
            .boxed(),
        reflector::reflector(pod_writer, watcher::watcher(pod_api.clone(), pending))
            .default_backoff()
            .map(|_| ())
            .boxed(),
        reflector::reflector(failed_writer, watcher::watcher(pod_api, failures)).default_backoff().map(|_| ()).boxed(),
        reflector::reflector(scheduler_writer, watcher::watcher(Api::all(ctx.client.clone()), everything))
            .default_backoff()
            .map(|_| ())
            .boxed(),
    ]);
    let passes = async {
        let mut changes = std::pin::pin!(changes);
        let mut limiter = Limiter::new(PER_POD_INTERVAL, EVENTS_PER_SECOND, EVENT_BURST);
        let mut budget = Budget::new(EXPLANATION_CPU_SHARE, EXPLANATION_BURST);
        loop {
            match tokio::time::timeout(QUIET_PASS_INTERVAL, changes.next()).await {
                Ok(None) => break,
                Ok(Some(())) => tokio::time::sleep(PASS_INTERVAL).await,
                Err(_) => {}
            }
            // Whatever arrived meanwhile is in the stores already: one pass for all of it.
            while futures_util::FutureExt::now_or_never(changes.next()).flatten().is_some() {}
            // The NUMA-aware scheduler's name and scoring, once a NUMAResourcesScheduler asks
            // for one.
            let Some((scheduler, strategy)) = schedulers.state().first().map(|s| {
                (s.spec.effective_scheduler_name().to_owned(), s.spec.scoring_strategy.clone().unwrap_or_default())
            }) else {
                continue;
            };
            let numa = Scheduler { name: &scheduler, strategy: &strategy };
            pass(&ctx, numa, &nrts, &pods, &mut limiter, &mut budget).await;
            explain_rejections(&ctx, &scheduler, &nrts, &failed, &mut limiter).await;
        }
    };
    tokio::select! {
        () = passes => {}
        () = shutdown => {}
    }
}

/// The NUMA-aware scheduler the pods are explained for.
#[derive(Debug, Clone, Copy)]
struct Scheduler<'a> {
    name: &'a str,
    strategy: &'a ScoringStrategyParams,
}

/// One pass: every unschedulable pod of the NUMA-aware scheduler that is due explained, the
/// explanations that say something new published.
async fn pass(
    ctx: &Context,
    scheduler: Scheduler<'_>,
    nrts: &Store<NodeResourceTopology>,
    pods: &Store<Pod>,
    limiter: &mut Limiter,
    budget: &mut Budget,
) {
    let pending = pods.state();
    let unschedulable: Vec<&Arc<Pod>> =
        pending.iter().filter(|pod| is_unschedulable_for(pod, scheduler.name)).collect();
    limiter.forget_except(&unschedulable.iter().map(|pod| pod.uid().unwrap_or_default()).collect());
    let nrts = nrts.state();
    let nrts_basis = nrts_basis(&nrts, scheduler.strategy);
    let now = tokio::time::Instant::now().into_std();
    for pod in unschedulable {
        let uid = pod.uid().unwrap_or_default();
        let basis = basis(nrts_basis, pod);
        if !limiter.due(&uid, now, basis) {
            continue;
        }
        if !budget.allows(std::time::Instant::now()) {
            break; // the next passes explain the rest
        }
        let started = std::time::Instant::now();
        let explanation = explain_pod(pod, &nrts, scheduler.strategy);
        budget.spend(started.elapsed());
        // Tens of milliseconds of arithmetic at fleet scale: the other controllers' tasks run
        // between two explanations.
        tokio::task::yield_now().await;
        limiter.explained(&uid, now, explanation.first_reason);
        match limiter.admit(&uid, &explanation.message, now) {
            Admission::Send => {
                limiter.settled(&uid, basis);
                let regarding = pod.object_ref(&());
                ctx.event(&regarding, EventType::Warning, REASON, "Scheduling", explanation.message).await;
            }
            Admission::Same => limiter.settled(&uid, basis),
            Admission::TooSoon | Admission::RateLimited => {}
        }
    }
    ctx.metrics.set_unschedulable(limiter.reasons());
}

/// Each pod of the NUMA-aware scheduler its kubelet refused with `TopologyAffinityError` gets
/// one Event saying why the scheduler let it through.
async fn explain_rejections(
    ctx: &Context,
    scheduler: &str,
    nrts: &Store<NodeResourceTopology>,
    failed: &Store<Pod>,
    limiter: &mut Limiter,
) {
    let now = tokio::time::Instant::now().into_std();
    let unix_now = k8s_openapi::jiff::Timestamp::now().as_second();
    for pod in failed.state().iter().filter(|pod| rejected::is_topology_rejected_for(pod, scheduler)) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        let nrt = nrts.get(&reflector::ObjectRef::new(&node));
        let message = rejected::explain_rejection(pod, nrt.as_deref(), unix_now);
        // Keyed apart from the pod's placement explanations: a rejected pod is never Pending.
        let key = format!("rejected/{}", pod.uid().unwrap_or_default());
        if limiter.admit_once(&key, &message, now) == Admission::Send {
            let regarding = pod.object_ref(&());
            ctx.event(&regarding, EventType::Warning, REASON, "Admission", message).await;
        }
    }
}

/// `pod`'s placement against every NRT, by the fit rules `kubectl numa fit` applies with the
/// scheduler's scoring `strategy`.
pub fn explain_pod(pod: &Pod, nrts: &[Arc<NodeResourceTopology>], strategy: &ScoringStrategyParams) -> Explanation {
    let requests = PodRequests::from_pod(pod);
    let verdicts: Vec<(String, numaresources_api::fit::NodeFit)> =
        nrts.iter().map(|nrt| (nrt.name_any(), evaluate(&requests, Some(nrt), None, strategy))).collect();
    explain(&verdicts, EVENT_MESSAGE_LIMIT)
}

/// A digest of the NRTs (each one's name and resourceVersion: a changed NRT has a new one) and
/// the scoring: what every pod's explanation in a pass is computed from, besides the pod. The
/// NRTs are combined in any order, as the store lists them (BENCHMARKS.md: a pass over 5,000
/// NRTs and 100 pods takes well under a millisecond).
pub fn nrts_basis(nrts: &[Arc<NodeResourceTopology>], strategy: &ScoringStrategyParams) -> Basis {
    let each = |nrt: &NodeResourceTopology| {
        let mut hasher = DefaultHasher::new();
        (nrt.metadata.name.as_deref(), nrt.metadata.resource_version.as_deref()).hash(&mut hasher);
        hasher.finish()
    };
    let mut hasher = DefaultHasher::new();
    nrts.iter().fold(0_u64, |sum, nrt| sum.wrapping_add(each(nrt))).hash(&mut hasher);
    nrts.len().hash(&mut hasher);
    format!("{strategy:?}").hash(&mut hasher);
    hasher.finish()
}

/// What `pod`'s explanation is computed from: the pass's NRTs and scoring, and what the pod asks.
pub fn basis(nrts_basis: Basis, pod: &Pod) -> Basis {
    let mut hasher = DefaultHasher::new();
    nrts_basis.hash(&mut hasher);
    format!("{:?}", PodRequests::from_pod(pod)).hash(&mut hasher);
    hasher.finish()
}

/// A pod `scheduler` tried and could not place: not bound, `PodScheduled=False` `Unschedulable`.
pub(crate) fn is_unschedulable_for(pod: &Pod, scheduler: &str) -> bool {
    let spec = pod.spec.as_ref();
    let ours = spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler);
    let unbound = spec.and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty);
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let refused = conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    ours && unbound && refused && pod.meta().deletion_timestamp.is_none()
}

/// The gauge's label of a pod with no refusing node (the NUMA rules would place it: another
/// plugin, or older numbers, refused it).
pub const NO_NUMA_REASON: &str = "none";

/// Every label value of the unschedulable-pods gauge.
pub fn reason_labels() -> impl Iterator<Item = &'static str> {
    ReasonKind::ALL.into_iter().map(ReasonKind::label).chain(std::iter::once(NO_NUMA_REASON))
}
