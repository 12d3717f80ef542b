//! The agent's run loop: scan on start, on the periodic timer and when the notify file is
//! touched (rate-limited, bursts coalesced), and publish only what changed, plus a heartbeat.
//!
//! A scan is sysfs discovery (on the blocking pool) plus the kubelet's podresources `List` and
//! `GetAllocatableResources`, the middlewares, and [`topology::node_topology`].
//!
//! When the kubelet cannot be asked, the scan fails and nothing is published. Upstream does
//! the same; publishing the machine without the kubelet's allocations would tell the scheduler
//! that every CPU is free, which is worse than a stale object the scheduler already treats
//! with care. The failure is logged at error level and counted, and the next trigger retries.

pub mod notify_file;
pub mod trigger;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::ANNOTATION_RTE_UPDATE;
use tokio::sync::Notify;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use crate::accounting::KubeletView;
use crate::config::{Args, Config, ConfigError};
use crate::fingerprint::{self, Fingerprint, FingerprintPod};
use crate::podresources::{
    self, Allocatable, ClientConfig, PodResources, PodResourcesClient, PodResourcesSource, middleware,
};
use crate::publish::{KubePublisher, Outcome, PublishError, Publisher};
use crate::sysfs::{self, Machine};
use crate::topology::{self, Scan};

pub use notify_file::NotifyFileError;
pub use trigger::{Decision, Published, RateLimiter, Trigger, decide};

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags, environment or files are wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The notify file cannot be used.
    #[error(transparent)]
    NotifyFile(#[from] NotifyFileError),
    /// No client configuration for the API server (neither in-cluster nor a kubeconfig).
    #[error("cannot configure a Kubernetes client (in-cluster service account or KUBECONFIG): {0}")]
    Kube(#[source] kube::Error),
}

/// Why one scan (or its publish) failed; logged and counted, never fatal.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// Machine discovery failed.
    #[error("sysfs discovery failed: {0}")]
    Sysfs(#[from] sysfs::Error),
    /// The blocking discovery task died.
    #[error("sysfs discovery task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// The kubelet could not be asked; nothing was published.
    #[error("cannot read the kubelet's pod resources, not publishing a topology without them: {0}")]
    Kubelet(#[from] podresources::Error),
    /// Publishing failed; the next scan publishes again.
    #[error("publishing failed: {0}")]
    Publish(#[from] PublishError),
}

/// Counters the binary can export.
#[derive(Debug, Default)]
pub struct Metrics {
    scans: AtomicU64,
    scan_failures: AtomicU64,
    kubelet_failures: AtomicU64,
    publishes: AtomicU64,
    skipped_unchanged: AtomicU64,
    publish_failures: AtomicU64,
}

/// A snapshot of [`Metrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Scans started.
    pub scans: u64,
    /// Scans that failed before publishing (discovery or kubelet).
    pub scan_failures: u64,
    /// Of those, the ones where the kubelet could not be asked.
    pub kubelet_failures: u64,
    /// Successful publishes.
    pub publishes: u64,
    /// Scans whose result equalled what was last published.
    pub skipped_unchanged: u64,
    /// Failed publishes.
    pub publish_failures: u64,
}

impl Metrics {
    /// The current values.
    pub fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            scans: get(&self.scans),
            scan_failures: get(&self.scan_failures),
            kubelet_failures: get(&self.kubelet_failures),
            publishes: get(&self.publishes),
            skipped_unchanged: get(&self.skipped_unchanged),
            publish_failures: get(&self.publish_failures),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The object for one scan's inputs: middlewares applied to `pods` (in place), accounting,
/// attributes, resource excludes, and the trigger annotation. Pure.
pub fn assemble(
    config: &Config,
    machine: &Machine,
    pods: &mut Vec<PodResources>,
    allocatable: &Allocatable,
    trigger: Trigger,
) -> NodeResourceTopology {
    if let Some(reference) = &config.reference_container {
        middleware::remove_shared_pool_cpus(pods, reference);
    }
    middleware::exclude_pods(pods, &config.pod_excludes);
    let mut nrt = topology::node_topology(&Scan {
        node_name: &config.node_name,
        machine,
        kubelet: Some(KubeletView { allocatable, pods }),
        topology_manager: &config.topology_manager,
        fingerprint: config.fingerprint,
    });
    if !config.resource_excludes.is_empty() {
        for zone in &mut nrt.zones {
            zone.resources.retain(|r| !config.resource_excludes.contains(&r.name));
        }
    }
    nrt.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ANNOTATION_RTE_UPDATE.to_owned(), trigger.as_str().to_owned());
    nrt
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

/// The agent: a configuration, a kubelet, a publisher and what it last published.
#[derive(Debug)]
pub struct Agent<S, P> {
    config: Config,
    source: S,
    publisher: P,
    metrics: Arc<Metrics>,
    last: Option<Published>,
}

impl<S: PodResourcesSource + Sync, P: Publisher + Sync> Agent<S, P> {
    /// An agent that has not scanned yet.
    pub fn new(config: Config, source: S, publisher: P) -> Self {
        Self { config, source, publisher, metrics: Arc::default(), last: None }
    }

    /// Its counters, shared.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Scans once.
    pub async fn scan(&self, trigger: Trigger) -> Result<NodeResourceTopology, ScanError> {
        let root = self.config.sysfs.clone();
        let discovery = tokio::task::spawn_blocking(move || sysfs::discover(root)).await??;
        for skipped in &discovery.skipped {
            tracing::debug!(error = %skipped, "sysfs entry skipped");
        }
        let (mut pods, allocatable) = tokio::try_join!(self.source.list(), self.source.allocatable())?;
        let nrt = assemble(&self.config, &discovery.machine, &mut pods, &allocatable, trigger);
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

    /// Scans once and publishes if the topology changed or the heartbeat is due. Errors are
    /// counted and returned; the caller only logs them.
    pub async fn refresh(&mut self, trigger: Trigger) -> Result<Option<Outcome>, ScanError> {
        bump(&self.metrics.scans);
        let desired = match self.scan(trigger).await {
            Ok(desired) => desired,
            Err(error) => {
                bump(&self.metrics.scan_failures);
                if matches!(error, ScanError::Kubelet(_)) {
                    bump(&self.metrics.kubelet_failures);
                }
                return Err(error);
            }
        };
        let now = Instant::now();
        let decision = decide(self.last.as_ref(), &desired, now, self.config.heartbeat);
        if !decision.publishes() {
            bump(&self.metrics.skipped_unchanged);
            tracing::debug!(trigger = trigger.as_str(), "topology unchanged; not publishing");
            return Ok(None);
        }
        match self.publisher.publish(desired.clone()).await {
            Ok(outcome) => {
                bump(&self.metrics.publishes);
                tracing::info!(trigger = trigger.as_str(), ?decision, ?outcome, "published the node topology");
                self.last = Some(Published { topology: desired, at: now });
                Ok(Some(outcome))
            }
            Err(error) => {
                bump(&self.metrics.publish_failures);
                // Forget what was published: the next scan must send again.
                self.last = None;
                Err(error.into())
            }
        }
    }

    /// Runs until `shutdown` completes: one scan at once, then on the timer and the notify file.
    /// Returns early only when the notify file cannot be set up.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let wake = Arc::new(Notify::new());
        let _watcher = match &self.config.notify_file {
            Some(path) => {
                notify_file::prepare(path)?;
                Some(notify_file::watch(path, Arc::clone(&wake))?)
            }
            None => None,
        };
        let mut timer = self.config.sleep_interval.map(|every| {
            let mut timer = tokio::time::interval_at(Instant::now() + every, every);
            timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
            timer
        });
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
                                let delay = retry_delay(failures);
                                retry = Some(Instant::now() + delay);
                                tracing::error!(%error, trigger = trigger.as_str(), node = %self.config.node_name, retry_in = ?delay, "refresh failed");
                            }
                        },
                    }
                }
                () = tick(timer.as_mut()) => limiter.offer(Trigger::Periodic),
                () = wake.notified() => limiter.offer(Trigger::Reactive),
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

/// How long to wait before retrying after `failures` failed refreshes in a row: 1 s, doubling,
/// at most 30 s.
pub fn retry_delay(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(5);
    Duration::from_secs(1 << exponent).min(Duration::from_secs(30))
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
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

/// The `numaresources rte` entry point: validates `args`, connects to the kubelet and the API
/// server, and runs until `shutdown` completes.
pub async fn run(args: Args, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    let config = args.resolve()?;
    // No readiness wait here: the first scan dials, and a failed scan is retried with backoff.
    let source = PodResourcesClient::new(ClientConfig::new(config.podresources_socket.clone()));
    if config.publish {
        let client = kube::Client::try_default().await.map_err(Error::Kube)?;
        let publisher = KubePublisher::new(client, config.add_nrt_owner);
        Agent::new(config, source, publisher).run(shutdown).await
    } else {
        Agent::new(config, source, DryRun).run(shutdown).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_one_second_to_thirty() {
        let delays: Vec<u64> = [1, 2, 3, 5, 6, 7, 100, u32::MAX].map(|n| retry_delay(n).as_secs()).to_vec();
        assert_eq!(delays, [1, 2, 4, 16, 30, 30, 30, 30]);
    }
}
