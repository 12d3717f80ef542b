//! `kubectl numa doctor`: the chain from the exporters to the scheduler checked in order, one line
//! per check (`ok`, `warn`, `fail`, or `skip` when a right is missing), each problem with its fix
//! in one sentence; exit code 1 when anything failed. Only get and list.
//!
//! The checks are pure functions of what was read ([`Observed`]), so each is tested on its own.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DynamicObject;
use serde::Serialize;

use super::fleet::Report;
use super::style::Paint;

/// The APIService our API server registers.
const API_SERVICE: &str = "v1alpha2.topology.node.k8s.io";
/// An NRT that missed this many heartbeats is stale.
pub const STALE_HEARTBEATS: u32 = 3;
/// The most nodes named in one line.
const NAMED: usize = 5;

/// `doctor`'s flags.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The namespace the operator's components run in.
    #[arg(long, default_value = numaresources_api::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Output format: one line per check (default) or `json`.
    #[arg(short = 'o', long, value_enum)]
    output: Option<super::fit::Output>,
    /// Then probe each node group: a Guaranteed pod (1 CPU) for the NUMA-aware scheduler must be
    /// bound where its NRT says it fits, admitted, shown in the NRT and given back once deleted.
    /// Creates (and deletes) a namespace and one pod per node group.
    #[arg(long)]
    probe: bool,
    /// The probe pod's image (default: the pause image the nodes already hold).
    #[arg(long, requires = "probe")]
    probe_image: Option<String>,
    /// How long each step of a probe may take.
    #[arg(long, default_value = "2m", value_parser = super::fleet::parse_duration, requires = "probe")]
    probe_timeout: Duration,
}

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Works, with a consequence worth knowing.
    Warn,
    /// Broken: the scheduler places pods blindly or not at all.
    Fail,
    /// Not checked (a right is missing, or nothing to check).
    Skip,
}

/// One check's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: Cow<'static, str>,
    /// The verdict.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do, in one sentence (not for `ok`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self { name: name.into(), status: Status::Ok, detail: detail.into(), fix: None }
    }

    fn problem(name: &'static str, status: Status, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { name: name.into(), status, detail: detail.into(), fix: Some(fix.into()) }
    }

    fn skip(name: &'static str, why: impl Into<String>) -> Self {
        Self { name: name.into(), status: Status::Skip, detail: why.into(), fix: None }
    }
}

/// What could be read, and what could not (the error, for a skip).
pub type Read<T> = Result<T, String>;

/// Everything the checks look at.
#[derive(Debug)]
pub struct Observed {
    /// The APIService (None: it does not exist).
    pub api_service: Read<Option<DynamicObject>>,
    /// The NRTs with their report ages.
    pub reports: Read<Vec<Report>>,
    /// The NUMA-aware scheduler's Deployment (None: it does not exist).
    pub scheduler: Read<Option<Deployment>>,
    /// The exporter DaemonSets.
    pub exporters: Read<Vec<DaemonSet>>,
    /// Each node's exporter pod: `Running`, or what it waits for.
    pub exporter_pods: Read<BTreeMap<String, String>>,
    /// The nodes of each node group (None: no NUMAResourcesOperator).
    pub node_groups: Read<Option<Vec<GroupNodes>>>,
    /// Each asked node's kubelet configuration (configz), or why it did not answer.
    pub kubelets: Read<BTreeMap<String, Read<serde_json::Value>>>,
    /// The scheduler's configuration (None: no NUMAResourcesScheduler).
    pub scheduler_config: Read<Option<SchedulerConfig>>,
    /// The NRT API server's Deployment and its replication Lease (None: they do not exist).
    pub apiserver: Read<(Option<Deployment>, Option<Lease>)>,
    /// Whether the NUMAResourcesScheduler routes pods, and whether the pod webhook is registered
    /// (None: no NUMAResourcesScheduler).
    pub pod_routing: Read<Option<(bool, bool)>>,
    /// The certificates the controllers keep (Secret name, its `tls.crt`; None: no such Secret).
    pub certificates: Vec<(&'static str, Read<Option<String>>)>,
    /// When the checks run.
    pub now: SystemTime,
}

/// The nodes of one node group (one exporter DaemonSet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupNodes {
    /// The pool's name (the DaemonSet's suffix).
    pub pool: String,
    /// Its nodes, sorted.
    pub nodes: Vec<String>,
    /// How often its exporters publish at the latest (`infoRefreshPeriod`; None: unknown, or
    /// off).
    pub refresh_period: Option<Duration>,
}

/// What the NUMA-aware scheduler is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// The scheduler name pods use (the NUMAResourcesScheduler's).
    pub scheduler_name: String,
    /// Its KubeSchedulerConfiguration (`config.yaml` of its ConfigMap; None: no ConfigMap).
    pub config: Option<String>,
}

/// Every check, in the order of the chain.
pub fn checks(observed: &Observed) -> Vec<Check> {
    use cluster::*;
    use nodes::*;
    vec![
        api_service(&observed.api_service),
        replicas(&observed.apiserver),
        exporters(&observed.exporters),
        coverage(observed),
        freshness(&observed.reports, &observed.exporters),
        alignment(&observed.reports),
        kubelets(&observed.kubelets, &observed.reports),
        memory_per_zone(&observed.reports),
        scheduler(&observed.scheduler),
        scheduler_configuration(&observed.scheduler, &observed.scheduler_config),
        pod_webhook(&observed.pod_routing),
        certificates(&observed.certificates, observed.now),
        fingerprints(&observed.reports),
    ]
}
/// Runs `doctor`.
pub async fn run(client: &kube::Client, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let observed = observe::observe(client, &args.namespace).await;
    let mut checks = checks(&observed);
    if args.probe {
        checks.extend(run_probe(client, &observed, &args).await);
    }
    super::print_answer(args.output, &checks, |checks, paint| render_text(checks, paint))?;
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `--probe`, once the checks said where the node groups and the scheduler are.
async fn run_probe(client: &kube::Client, observed: &Observed, args: &DoctorArgs) -> Vec<Check> {
    let groups = match &observed.node_groups {
        Ok(Some(groups)) => groups,
        Ok(None) => return vec![Check::skip("probe", "no NUMAResourcesOperator: no node group to probe")],
        Err(error) => return vec![Check::skip("probe", format!("the node groups are not known: {error}"))],
    };
    let scheduler_name = match &observed.scheduler_config {
        Ok(Some(config)) => config.scheduler_name.clone(),
        Ok(None) => return vec![Check::skip("probe", "no NUMAResourcesScheduler: nothing schedules the probe")],
        Err(error) => return vec![Check::skip("probe", format!("the scheduler name is not known: {error}"))],
    };
    let settings =
        probe::ProbeSettings { scheduler_name, image: args.probe_image.clone(), timeout: args.probe_timeout };
    probe::probe(client, groups, &settings).await
}

/// One line per check, then the fix of each problem.
pub fn render_text(checks: &[Check], paint: Paint) -> String {
    let mut out = String::new();
    for check in checks {
        let status = match check.status {
            Status::Ok => paint.green("ok  "),
            Status::Warn => paint.yellow("warn"),
            Status::Fail => paint.red("fail"),
            Status::Skip => "skip".to_owned(),
        };
        out.push_str(&format!("{status}  {}: {}\n", check.name, check.detail));
        if let Some(fix) = &check.fix {
            out.push_str(&format!("      fix: {fix}\n"));
        }
    }
    out
}

mod cluster;
#[cfg(test)]
mod fake_cluster;
mod nodes;
mod observe;
mod probe;
#[cfg(test)]
mod tests;
