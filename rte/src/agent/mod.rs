//! The agent's run loop: scan on start, on the periodic timer, when the kubelet's allocations
//! change (polled through podresources `List`, see `allocations.rs`) and when the notify file is
//! touched (rate-limited, bursts coalesced), and publish only what changed, plus a heartbeat.
//!
//! A scan is sysfs discovery (on the blocking pool) plus the kubelet's podresources `List` and
//! `GetAllocatableResources`, the middlewares (terminal pods too, with
//! [`Agent::with_terminal_pods`]), and `topology::node_topology`. After the scan and after the
//! publish, the own-pod conditions are set when they changed ([`Agent::with_pod_conditions`]).
//! Every step is counted in [`Metrics`], which the exporter registers for `/metrics`
//! ([`crate::exporter`]).
//!
//! When the kubelet cannot be asked, the scan fails and nothing is published. Upstream does
//! the same; publishing the machine without the kubelet's allocations would tell the scheduler
//! that every CPU is free, which is worse than a stale object the scheduler already treats
//! with care. The failure is logged at error level and counted, and the next trigger retries.

pub(crate) mod allocations;
pub(crate) mod config_reload;
pub(crate) mod notify_file;
pub mod own_object;
pub(crate) mod schedule;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::ANNOTATION_RTE_UPDATE;
use tokio::sync::Notify;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use crate::accounting::{self, KubeletView};
use crate::config::Config;
use crate::config::UnmanagedMemory;
use crate::fingerprint::{self, Fingerprint, FingerprintPod};
use crate::metrics::{Metrics, Operation, PodResourcesCall};
use crate::podreadiness::{Condition, ConditionType, PodConditions};
use crate::podresources::{self, Allocatable, PodResources, PodResourcesSource, middleware};
use crate::publish::{Outcome, PublishError, Publisher};
use crate::sysfs::{self, Discovery, Machine};
use crate::terminal::TerminalPods;
use crate::topology::{self, Scan};
use crate::trigger::Trigger;

pub use notify_file::NotifyFileError;
use schedule::{Decision, Published, RateLimiter, decide};

/// Why one scan (or its publish) failed; logged and counted, never fatal.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// Machine discovery failed.
    #[error("sysfs discovery failed: {0}")]
    Sysfs(#[from] sysfs::Error),
    /// The blocking discovery task died.
    #[error("sysfs discovery task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// Discovery did not finish within [`DISCOVERY_TIMEOUT`] (a read stalled in the kernel, e.g.
    /// on a hung mount); it goes on in the background and later scans fail with
    /// [`ScanError::SysfsStalled`] until it ends.
    #[error("sysfs discovery did not finish within {0:?}; a read of the tree is stalled")]
    SysfsTimeout(Duration),
    /// The discovery that timed out is still stuck; no second one is started beside it.
    #[error("an earlier sysfs discovery is still stalled on a read; not starting another")]
    SysfsStalled,
    /// The kubelet could not be asked; nothing was published.
    #[error("cannot read the kubelet's pod resources, not publishing a topology without them: {0}")]
    Kubelet(#[from] podresources::Error),
    /// Publishing failed; the next scan publishes again.
    #[error("publishing failed: {0}")]
    Publish(#[from] PublishError),
}

/// The object for one scan's inputs: middlewares applied to `pods` (in place), accounting,
/// attributes, resource excludes, and the trigger annotation. Pure.
///
/// `kubelet` is `None` when there is none (`--podresources-socket none`): the machine's own view.
pub fn assemble(
    config: &Config,
    machine: &Machine,
    kubelet: Option<(&mut Vec<PodResources>, &Allocatable)>,
    trigger: Trigger,
) -> NodeResourceTopology {
    let memory_unmanaged =
        kubelet.as_ref().is_some_and(|(_, allocatable)| !accounting::memory_numa_managed(allocatable));
    let kubelet = kubelet.map(|(pods, allocatable)| {
        if let Some(reference) = &config.reference_container {
            middleware::remove_shared_pool_cpus(pods, reference);
        }
        middleware::exclude_pods(pods, &config.pod_excludes);
        KubeletView { allocatable, pods }
    });
    let mut nrt = topology::node_topology(&Scan {
        node_name: &config.node_name,
        machine,
        kubelet,
        topology_manager: &config.topology_manager,
        fingerprint: config.fingerprint,
    });
    if memory_unmanaged && config.flags.unmanaged_memory == UnmanagedMemory::NodeLevel {
        accounting::publish_node_level_memory(&mut nrt.zones, machine);
    }
    if !config.resource_excludes.is_empty() {
        for zone in &mut nrt.zones {
            zone.resources.retain(|r| !config.resource_excludes.iter().any(|excluded| *excluded == r.name));
        }
    }
    nrt.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ANNOTATION_RTE_UPDATE.to_owned(), trigger.as_str().to_owned());
    nrt
}

/// How long one sysfs discovery may take before the scan fails. Reads never wait for a writer
/// (see [`sysfs`]), so discovery takes milliseconds; only a filesystem stalled in the kernel can
/// hold it this long.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a process running the agent waits at exit for blocking tasks (a sysfs discovery,
/// the fingerprint status file) before exiting without them: a read stalled in the kernel must
/// not hold the process past the kubelet's termination grace period (30 s by default).
pub const BLOCKING_TASKS_GRACE: Duration = Duration::from_secs(2);

/// Clears the agent's "discovery in flight" flag when dropped.
struct Discovering(Arc<AtomicBool>);

impl Drop for Discovering {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The fingerprint status record for the pods of one scan.
fn fingerprint_status(node: &str, method: fingerprint::Method, pods: &[PodResources]) -> fingerprint::Status {
    let mut traced = Fingerprint::traced();
    for pod in pods.iter().filter(|p| method.includes(*p)) {
        traced.add(pod.namespace(), pod.name());
    }
    fingerprint::Status {
        fingerprint_computed: traced.sign(),
        pods: traced.pods().unwrap_or_default().to_vec(),
        node_name: node.to_owned(),
        ..fingerprint::Status::default()
    }
}

/// The agent: a configuration, a kubelet, a publisher and what it last published; optionally
/// its own Pod's conditions and the node's terminal pods.
#[derive(Debug)]
pub struct Agent<S, P> {
    config: Config,
    source: S,
    publisher: P,
    metrics: Arc<Metrics>,
    last: Option<Published>,
    conditions: Option<PodConditions>,
    terminal: Option<TerminalPods>,
    /// Reported when the API server is found not to hold this node's object any more.
    republish: Option<Arc<own_object::Lost>>,
    last_wakeup: Instant,
    /// Set while a sysfs discovery runs on the blocking pool, so a stalled one is never joined
    /// by another (threads do not pile up behind a hung read).
    discovering: Arc<AtomicBool>,
    /// The digest of the last `List` answer seen (by a scan or a poll).
    seen_allocations: Mutex<Option<u64>>,
    /// Whether to resolve its flags again when the configuration files they name change.
    reload: bool,
}

impl<S: PodResourcesSource + Sync, P: Publisher + Sync> Agent<S, P> {
    /// An agent that has not scanned yet.
    pub fn new(config: Config, source: S, publisher: P) -> Self {
        Self {
            config,
            source,
            publisher,
            metrics: Arc::default(),
            last: None,
            conditions: None,
            terminal: None,
            republish: None,
            last_wakeup: Instant::now(),
            discovering: Arc::default(),
            seen_allocations: Mutex::new(None),
            reload: false,
        }
    }

    /// Sets the own-pod conditions after each scan and publish.
    #[must_use]
    pub fn with_pod_conditions(mut self, conditions: PodConditions) -> Self {
        self.conditions = Some(conditions);
        self
    }

    /// Leaves the pods in `terminal` out of every scan.
    #[must_use]
    pub fn with_terminal_pods(mut self, terminal: TerminalPods) -> Self {
        self.terminal = Some(terminal);
        self
    }

    /// Counts into `metrics` (shared with its publisher) instead of counters of its own.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Its counters, shared.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What it last published, if anything since the last failure.
    pub fn last_published(&self) -> Option<&NodeResourceTopology> {
        self.last.as_ref().map(|published| &published.topology)
    }

    /// The kubelet's pods and allocatable resources, counting each failed call.
    async fn ask_kubelet(&self) -> Result<(Vec<PodResources>, Allocatable), podresources::Error> {
        let list = async {
            self.source.list().await.inspect_err(|_| self.metrics.podresources_call_failed(PodResourcesCall::List))
        };
        let allocatable = async {
            self.source
                .allocatable()
                .await
                .inspect_err(|_| self.metrics.podresources_call_failed(PodResourcesCall::GetAllocatableResources))
        };
        tokio::try_join!(list, allocatable)
    }

    /// Discovers the machine on the blocking pool, within [`DISCOVERY_TIMEOUT`]. A discovery
    /// that times out is left to finish on its own (nothing awaits it, shutdown included).
    async fn discover(&self) -> Result<Discovery, ScanError> {
        if self.discovering.swap(true, Ordering::AcqRel) {
            return Err(ScanError::SysfsStalled);
        }
        let discovering = Discovering(Arc::clone(&self.discovering));
        let root = self.config.sysfs.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _discovering = discovering; // cleared when discovery ends, however it ends
            sysfs::discover(root)
        });
        match tokio::time::timeout(DISCOVERY_TIMEOUT, task).await {
            Ok(joined) => Ok(joined??),
            Err(_) => Err(ScanError::SysfsTimeout(DISCOVERY_TIMEOUT)),
        }
    }

    /// Scans once.
    pub async fn scan(&self, trigger: Trigger) -> Result<NodeResourceTopology, ScanError> {
        let discovery = self.discover().await?;
        for skipped in &discovery.skipped {
            tracing::debug!(error = %skipped, "sysfs entry skipped");
        }
        // Asked first, so that a source whose kubelet shows up between the calls is consistent.
        let present = self.source.present().await;
        let (mut pods, allocatable) =
            if present { self.ask_kubelet().await? } else { (Vec::new(), Allocatable::default()) };
        if present {
            self.saw_allocations(allocations::allocation_digest(&pods));
        }
        if let Some(terminal) = &self.terminal {
            let dropped = middleware::exclude_terminal_pods(&mut pods, &terminal.read().pods);
            if dropped > 0 {
                tracing::debug!(dropped, "terminal pods left out");
            }
        }
        let kubelet = present.then_some((&mut pods, &allocatable));
        let nrt = assemble(&self.config, &discovery.machine, kubelet, trigger);
        if let (Some(path), Some(method)) = (&self.config.fingerprint_status_file, self.config.fingerprint) {
            let status = fingerprint_status(&self.config.node_name, method, &pods);
            let path = path.clone();
            match tokio::task::spawn_blocking(move || fingerprint::write_status_file(&path, &status)).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "cannot write the fingerprint status file"),
                Err(error) => tracing::warn!(%error, "fingerprint status task failed"),
            }
        }
        Ok(nrt)
    }

    /// Records the digest of a `List` answer; true when it differs from the last one seen (or
    /// none was seen yet).
    fn saw_allocations(&self, digest: u64) -> bool {
        let mut seen = self.seen_allocations.lock().unwrap_or_else(PoisonError::into_inner);
        seen.replace(digest) != Some(digest)
    }

    /// Asks the kubelet's `List` once: true when the allocations changed since the last answer
    /// seen. A failed call is counted and logged at debug level (the next scan reports it).
    pub(crate) async fn allocations_changed(&self) -> bool {
        if !self.source.present().await {
            return false;
        }
        match self.source.list().await {
            Ok(pods) => self.saw_allocations(allocations::allocation_digest(&pods)),
            Err(error) => {
                self.metrics.podresources_call_failed(PodResourcesCall::List);
                tracing::debug!(%error, "polling the kubelet's allocations failed");
                false
            }
        }
    }

    /// Sets one own-pod condition, if conditions are on and it changed; failures are logged
    /// and counted, and the condition is tried again on the next scan.
    async fn set_condition(&mut self, condition: Condition) {
        let Some(conditions) = self.conditions.as_mut() else { return };
        match conditions.set(&condition).await {
            Ok(false) => {}
            Ok(true) => {
                self.metrics.condition_written(true);
                tracing::info!(
                    condition = condition.kind.as_str(),
                    status = condition.status(),
                    pod = %conditions.pod(),
                    "set pod condition"
                );
            }
            Err(error) => {
                self.metrics.condition_written(false);
                tracing::warn!(%error, "cannot set pod condition");
            }
        }
    }

    /// Scans once and publishes if the topology changed or the heartbeat is due. Errors are
    /// counted and returned; the caller only logs them.
    pub async fn refresh(&mut self, trigger: Trigger) -> Result<Option<Outcome>, ScanError> {
        let started = Instant::now();
        self.metrics.scan_started(trigger, started.saturating_duration_since(self.last_wakeup));
        self.last_wakeup = started;
        let scanned = self.scan(trigger).await;
        self.metrics.took(Operation::PodresourcesScan, trigger, started.elapsed());
        let desired = match scanned {
            Ok(desired) => {
                self.set_condition(Condition::ok(ConditionType::PodresourcesFetched)).await;
                desired
            }
            Err(error) => {
                self.metrics.scan_failed(matches!(error, ScanError::Kubelet(_)));
                self.set_condition(Condition::failed(ConditionType::PodresourcesFetched, &error)).await;
                return Err(error);
            }
        };
        let now = Instant::now();
        let decision = decide(self.last.as_ref(), &desired, now, self.config.heartbeat);
        // A heartbeat resends the last object as it was, trigger annotation included: the
        // topology is the same, and a new annotation value alone would make the API server
        // emit a watch event (each one requeues pods in kube-scheduler) for nothing.
        let desired = match (decision, &self.last) {
            (Decision::Heartbeat, Some(last)) => last.topology.clone(),
            _ => desired,
        };
        if !decision.publishes() {
            self.metrics.skipped();
            tracing::debug!(trigger = trigger.as_str(), "topology unchanged; not publishing");
            // What was published still stands; this also retries a condition write that failed.
            self.set_condition(Condition::ok(ConditionType::NodeTopologyUpdated)).await;
            return Ok(None);
        }
        let published = self.publisher.publish(desired.clone()).await;
        self.metrics.took(Operation::NodeResourceObjectUpdate, trigger, now.elapsed());
        match published {
            Ok(outcome) => {
                self.metrics.published(outcome, trigger);
                tracing::info!(trigger = trigger.as_str(), ?decision, ?outcome, "published the node topology");
                self.last = Some(Published { topology: desired, at: now });
                self.set_condition(Condition::ok(ConditionType::NodeTopologyUpdated)).await;
                Ok(Some(outcome))
            }
            Err(error) => {
                self.metrics.publish_failed();
                // Forget what was published: the next scan must send again.
                self.last = None;
                self.set_condition(Condition::failed(ConditionType::NodeTopologyUpdated, &error)).await;
                Err(error.into())
            }
        }
    }

    /// Follows the configuration files its flags name (the operator's ConfigMap, the kubelet
    /// configuration) while running, and applies their changes (`config_reload.rs`).
    #[must_use]
    pub fn with_config_reload(mut self) -> Self {
        self.reload = true;
        self
    }

    /// Resolves the flags again after a configuration file changed and applies the result; a
    /// configuration that does not resolve is logged and the running one kept.
    fn reload_config(&mut self) {
        match self.config.flags.resolve() {
            Ok(fresh) => {
                config_reload::apply(&mut self.config, fresh);
            }
            Err(error) => tracing::warn!(%error, "the changed configuration is not valid; keeping the running one"),
        }
    }

    /// Publishes again at once whenever `lost` is reported (the API server lost the object)
    /// and nothing was published since that was seen.
    pub fn with_republish(mut self, lost: Arc<own_object::Lost>) -> Self {
        self.republish = Some(lost);
        self
    }

    /// Runs until `shutdown` completes: one scan at once, then on the timer, on a change of the
    /// kubelet's allocations and on the notify file.
    /// Returns early only when the notify file cannot be set up.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), NotifyFileError> {
        let wake = Arc::new(Notify::new());
        let _watcher = match &self.config.notify_file {
            Some(path) => {
                notify_file::prepare(path)?;
                Some(notify_file::watch(path, Arc::clone(&wake))?)
            }
            None => None,
        };
        let mut timer = self.config.sleep_interval.map(ticker);
        let reloaded = Arc::new(Notify::new());
        let _config_watch = self
            .reload
            .then(|| config_reload::follow(&config_reload::followed_files(&self.config.flags), Arc::clone(&reloaded)))
            .flatten();
        let mut poll = self.config.allocation_poll.map(ticker);
        let mut limiter = RateLimiter::new(self.config.max_events_per_second);
        limiter.offer(Trigger::Periodic);
        // A failed refresh is retried on its own schedule too, so an agent with only the
        // notify file (or a long interval) recovers when the kubelet or API server comes back.
        let mut failures = 0u32;
        let mut retry: Option<Instant> = None;
        tokio::pin!(shutdown);
        loop {
            let due = limiter.due();
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = sleep_until(due) => {
                    let Some(trigger) = limiter.take(Instant::now()) else { continue };
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        result = self.refresh(trigger) => match result {
                            Ok(_) => (failures, retry) = (0, None),
                            Err(error) => {
                                failures = failures.saturating_add(1);
                                let delay = retry_delay(failures, &self.config.node_name);
                                retry = Some(Instant::now() + delay);
                                tracing::error!(%error, trigger = trigger.as_str(), node = %self.config.node_name, retry_in = ?delay, "refresh failed");
                            }
                        },
                    }
                }
                () = tick(timer.as_mut()) => limiter.offer(Trigger::Periodic),
                () = tick(poll.as_mut()) => {
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        changed = self.allocations_changed() => if changed {
                            tracing::debug!("the kubelet's allocations changed; scanning");
                            limiter.offer(Trigger::Reactive);
                        },
                    }
                }
                () = wake.notified() => limiter.offer(Trigger::Reactive),
                () = reloaded.notified() => {
                    self.reload_config();
                    // The scan publishes only if the object changed.
                    limiter.offer(Trigger::Periodic);
                }
                seen_at = reported(self.republish.as_deref()) => {
                    if !lost_since(self.last.as_ref(), seen_at) {
                        tracing::debug!("the object was found missing before the last publish; not a loss");
                    } else {
                        tracing::info!(node = %self.config.node_name, "the API server does not hold this node's topology; publishing again");
                        // What was published is gone: the next scan publishes whatever it finds.
                        self.last = None;
                        limiter.offer(Trigger::Periodic);
                    }
                }
                () = sleep_until(retry) => {
                    retry = None;
                    limiter.offer(Trigger::Periodic);
                }
            }
        }
        tracing::info!(stats = ?self.metrics.snapshot(), "agent stopped");
        Ok(())
    }
}

/// How many failed refreshes in a row are retried within seconds ([`retry_delay`]): about two
/// minutes' worth, longer than a cold start of the API server takes (its replicas restart and
/// elect a leader, and the exporters' writes are what make them Ready).
pub(crate) const FAST_RETRIES: u32 = 60;

/// How long to wait before retrying after `failures` failed refreshes in a row: 1 s, then 2 s
/// while [`FAST_RETRIES`] last, then doubling to at most 30 s; each stretched by up to a
/// quarter, fixed by `node` and the count, so a fleet that failed together does not retry in
/// step.
pub(crate) fn retry_delay(failures: u32, node: &str) -> Duration {
    let base = match failures {
        0 | 1 => Duration::from_secs(1),
        n if n <= FAST_RETRIES => Duration::from_secs(2),
        n => Duration::from_secs(2 << (n - FAST_RETRIES).min(4)).min(Duration::from_secs(30)),
    };
    let hash = xxhash_rust::xxh64::xxh64(node.as_bytes(), u64::from(failures));
    // The top 16 bits as a fraction of ¼.
    base.mul_f64(1.0 + (hash >> 48) as f64 / f64::from(1u32 << 18))
}

/// Whether an object found missing in a view from `seen_at` is lost: nothing was published
/// since that view began (a publish that started after it may have created the object).
fn lost_since(last: Option<&Published>, seen_at: Instant) -> bool {
    last.is_none_or(|last| last.at < seen_at)
}

async fn reported(lost: Option<&own_object::Lost>) -> Instant {
    match lost {
        Some(lost) => lost.reported().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// Ticks every `period`, the first tick one period from now; a late tick delays the next ones
/// rather than bunching them.
fn ticker(period: Duration) -> Interval {
    let mut timer = tokio::time::interval_at(Instant::now() + period, period);
    timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
    timer
}

async fn tick(timer: Option<&mut Interval>) {
    match timer {
        Some(timer) => drop(timer.tick().await),
        None => std::future::pending().await,
    }
}

/// Logs what would be published; for `--no-publish`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DryRun;

impl Publisher for DryRun {
    fn publish(&self, desired: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send {
        let zones = desired.zones.len();
        tracing::info!(
            zones,
            node = desired.metadata.name.as_deref().unwrap_or_default(),
            "--no-publish: not writing the topology"
        );
        std::future::ready(Ok(Outcome::DryRun))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_older_than_the_last_publish_is_no_loss() {
        let t0 = Instant::now();
        let published = |at| Published { topology: NodeResourceTopology::new("n"), at };
        assert!(lost_since(None, t0), "nothing published: publish");
        // The first publish started after the list that did not find the object: no loss (the
        // race that made every start publish twice).
        assert!(!lost_since(Some(&published(t0 + Duration::from_millis(5))), t0));
        assert!(!lost_since(Some(&published(t0)), t0));
        // A deletion seen after the last publish is one.
        assert!(lost_since(Some(&published(t0)), t0 + Duration::from_secs(1)));
    }

    #[test]
    fn retries_come_within_seconds_for_two_minutes_then_back_off_to_thirty() {
        let bases = [(1, 1), (2, 2), (3, 2), (FAST_RETRIES, 2), (FAST_RETRIES + 1, 4), (FAST_RETRIES + 2, 8)];
        let bases = bases.into_iter().chain([(FAST_RETRIES + 3, 16), (FAST_RETRIES + 4, 30), (u32::MAX, 30)]);
        for (failures, base) in bases {
            for node in ["worker-0", "worker-1", "a-much-longer-node-name.example.com"] {
                let delay = retry_delay(failures, node);
                let base = Duration::from_secs(base);
                assert!(delay >= base && delay < base.mul_f64(1.25), "{node} {failures}: {delay:?}");
            }
        }
        let spread: std::collections::BTreeSet<Duration> =
            (0..50).map(|n| retry_delay(2, &format!("worker-{n}"))).collect();
        assert!(spread.len() > 40, "nodes retry at different times: {spread:?}");
    }
}
