//! `kubectl numa doctor`: the chain from the exporters to the scheduler checked in order, one line
//! per check (`ok`, `warn`, `fail`, or `skip` when a right is missing), each problem with its fix
//! in one sentence; exit code 1 when anything failed. Only get and list.
//!
//! The checks are pure functions of what was read ([`Observed`]), so each is tested on its own.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use numaresources_api::nrt::well_known::{ATTR_MEMORY_NUMA_MANAGED, ATTR_PODS_FINGERPRINT};
use numaresources_api::operator::{NUMAResourcesScheduler, PodRoutingMode};
use numaresources_controllers::names;
use serde::Serialize;

use super::fleet::{self, Report};
use super::style::{self, Paint};

/// The APIService our API server registers.
const API_SERVICE: &str = "v1alpha2.topology.node.k8s.io";
/// An NRT older than this has missed three exporter heartbeats (60 s each).
pub const STALE_AFTER: Duration = Duration::from_secs(180);
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
    pub name: &'static str,
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
        Self { name, status: Status::Ok, detail: detail.into(), fix: None }
    }

    fn problem(name: &'static str, status: Status, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { name, status, detail: detail.into(), fix: Some(fix.into()) }
    }

    fn skip(name: &'static str, why: impl Into<String>) -> Self {
        Self { name, status: Status::Skip, detail: why.into(), fix: None }
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

/// Every check, in the order of the chain.
pub fn checks(observed: &Observed) -> Vec<Check> {
    vec![
        api_service(&observed.api_service),
        exporters(&observed.exporters),
        freshness(&observed.reports),
        alignment(&observed.reports),
        memory_per_zone(&observed.reports),
        fingerprints(&observed.reports),
        replicas(&observed.apiserver),
        scheduler(&observed.scheduler),
        pod_webhook(&observed.pod_routing),
        certificates(&observed.certificates, observed.now),
    ]
}

fn replicas(read: &Read<(Option<Deployment>, Option<Lease>)>) -> Check {
    const NAME: &str = "API server replicas";
    let (deployment, lease) = match read {
        Err(error) => return Check::skip(NAME, format!("cannot read the API server Deployment or its Lease: {error}")),
        Ok((None, _)) => return Check::skip(NAME, "no API server Deployment here (installed another way?)"),
        Ok((Some(deployment), lease)) => (deployment, lease),
    };
    let replicas = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if replicas <= 1 {
        return Check::ok(NAME, "one replica (no replication)");
    }
    let holder =
        lease.as_ref().and_then(|l| l.spec.as_ref()).and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty());
    let Some(holder) = holder else {
        return Check::problem(
            NAME,
            Status::Fail,
            format!("{replicas} replicas and no leader: writes are refused until one is elected"),
            "check the API server pods' logs for the election (kubectl logs -l app.kubernetes.io/name=numaresources-apiserver)",
        );
    };
    let annotations = lease.as_ref().and_then(|l| l.metadata.annotations.as_ref());
    let in_sync = annotations
        .and_then(|a| a.get(numaresources_apiserver::replication::IN_SYNC_ANNOTATION))
        .map_or(0, |list| list.split(',').filter(|id| !id.is_empty()).count());
    let followers = usize::try_from(replicas - 1).unwrap_or(0);
    if in_sync >= followers {
        return Check::ok(NAME, format!("leader {holder}, {in_sync} of {followers} followers in sync"));
    }
    Check::problem(
        NAME,
        Status::Warn,
        format!(
            "leader {holder}, {in_sync} of {followers} followers in sync: a leader lost now leaves fewer replicas \
             holding every acknowledged write{}",
            if in_sync == 0 { " (none: the leader acknowledges writes alone)" } else { "" }
        ),
        "check the followers' readiness and logs; a follower joins once it has caught up with the leader",
    )
}

fn pod_webhook(read: &Read<Option<(bool, bool)>>) -> Check {
    const NAME: &str = "pod routing";
    match read {
        Err(error) => Check::skip(NAME, format!("cannot read the NUMAResourcesScheduler or the pod webhook: {error}")),
        Ok(None) => Check::skip(NAME, "no NUMAResourcesScheduler"),
        Ok(Some((false, _))) => Check::ok(NAME, "pods name the NUMA-aware scheduler themselves (podRouting off)"),
        Ok(Some((true, true))) => Check::ok(NAME, "podRouting routes pods and the pod webhook is registered"),
        Ok(Some((true, false))) => Check::problem(
            NAME,
            Status::Fail,
            "podRouting routes pods but the pod webhook is not registered: pods keep the default scheduler",
            "check the controllers' logs and the NUMAResourcesScheduler's conditions",
        ),
    }
}

/// A certificate expiring within this is a warning.
const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

fn certificates(read: &[(&'static str, Read<Option<String>>)], now: SystemTime) -> Check {
    const NAME: &str = "certificates";
    let mut problems = Vec::new();
    let mut checked = 0;
    for (secret, pem) in read {
        let Ok(Some(pem)) = pem else { continue };
        let Some(not_after) = numaresources_runtime::tls::rotation::not_after(pem) else { continue };
        checked += 1;
        match not_after.duration_since(now) {
            Err(_) => problems.push((Status::Fail, format!("{secret} expired"))),
            Ok(left) if left < EXPIRY_WARNING => {
                problems.push((Status::Warn, format!("{secret} expires in {}", style::age(left.as_secs()))));
            }
            Ok(_) => {}
        }
    }
    if checked == 0 {
        return Check::skip(
            NAME,
            "no certificate the controllers keep could be read (another issuer, or no right to get Secrets)",
        );
    }
    if problems.is_empty() {
        return Check::ok(NAME, format!("{checked} certificates, none expiring within a week"));
    }
    let status = if problems.iter().any(|(s, _)| *s == Status::Fail) { Status::Fail } else { Status::Warn };
    Check::problem(
        NAME,
        status,
        problems.into_iter().map(|(_, p)| p).collect::<Vec<_>>().join(", "),
        "the controllers renew their own certificates before expiry: check their logs, or the issuer that manages these Secrets",
    )
}

fn api_service(read: &Read<Option<DynamicObject>>) -> Check {
    const NAME: &str = "APIService";
    let service = match read {
        Err(error) => return Check::skip(NAME, format!("cannot get APIService {API_SERVICE}: {error}")),
        Ok(None) => {
            return Check::problem(
                NAME,
                Status::Fail,
                format!(
                    "APIService {API_SERVICE} does not exist: kube-apiserver serves no NRTs, and the scheduler places pods blindly"
                ),
                "install the NRT API server (manifests/default) or create a NUMAResourcesOperator",
            );
        }
        Ok(Some(service)) => service,
    };
    let conditions = service.data.pointer("/status/conditions").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    let available = conditions.iter().find(|c| c["type"] == "Available");
    match available {
        Some(condition) if condition["status"] == "True" => Check::ok(NAME, format!("{API_SERVICE} is Available")),
        Some(condition) => Check::problem(
            NAME,
            Status::Fail,
            format!(
                "{API_SERVICE} is not Available ({}: {}): NRT reads fail, and the scheduler places pods blindly",
                condition["reason"].as_str().unwrap_or("no reason"),
                condition["message"].as_str().unwrap_or("no message")
            ),
            "check the numaresources-apiserver pods and their Service (kubectl get pods,endpoints -l app.kubernetes.io/name=numaresources-apiserver -A)",
        ),
        None => Check::problem(
            NAME,
            Status::Warn,
            format!("{API_SERVICE} has no Available condition yet"),
            "wait a few seconds for kube-apiserver's availability check, then run doctor again",
        ),
    }
}

fn exporters(read: &Read<Vec<DaemonSet>>) -> Check {
    const NAME: &str = "exporters";
    let daemon_sets = match read {
        Err(error) => return Check::skip(NAME, format!("cannot list the exporter DaemonSets: {error}")),
        Ok(daemon_sets) if daemon_sets.is_empty() => {
            return Check::skip(
                NAME,
                "no exporter DaemonSet here (none rendered yet, or exporters installed another way)",
            );
        }
        Ok(daemon_sets) => daemon_sets,
    };
    let short: Vec<String> = daemon_sets
        .iter()
        .filter_map(|ds| {
            let status = ds.status.as_ref()?;
            (status.number_ready < status.desired_number_scheduled).then(|| {
                format!(
                    "{} ({} of {} ready)",
                    ds.metadata.name.as_deref().unwrap_or_default(),
                    status.number_ready,
                    status.desired_number_scheduled
                )
            })
        })
        .collect();
    let desired: i32 = daemon_sets.iter().filter_map(|ds| ds.status.as_ref()).map(|s| s.desired_number_scheduled).sum();
    if short.is_empty() {
        return Check::ok(NAME, format!("{desired} exporters ready in {} DaemonSets", daemon_sets.len()));
    }
    Check::problem(
        NAME,
        Status::Fail,
        format!("exporters not ready: {}; their nodes get no fresh NRT", named(&short)),
        "check the exporter pods that are not ready (kubectl get pods -A -o wide -l app.kubernetes.io/component=rte)",
    )
}

fn freshness(read: &Read<Vec<Report>>) -> Check {
    const NAME: &str = "NRT freshness";
    let reports = match read {
        Err(error) => return Check::skip(NAME, format!("cannot list NRTs: {error}")),
        Ok(reports) => reports,
    };
    if reports.is_empty() {
        return Check::problem(
            NAME,
            Status::Fail,
            "no NodeResourceTopology at all: the scheduler places every pod blindly",
            "check that a NUMAResourcesOperator selects nodes and that its exporter pods run (kubectl get numaresourcesoperator -o yaml)",
        );
    }
    let mut stale: Vec<(String, u64)> = reports
        .iter()
        .filter_map(|r| {
            let seconds = r.age?.seconds;
            (seconds > STALE_AFTER.as_secs()).then(|| (r.nrt.metadata.name.clone().unwrap_or_default(), seconds))
        })
        .collect();
    if stale.is_empty() {
        return Check::ok(NAME, format!("{} NRTs, none older than three heartbeats", reports.len()));
    }
    stale.sort_by_key(|(_, age)| std::cmp::Reverse(*age));
    let nodes: Vec<String> = stale.iter().map(|(node, age)| format!("{node} ({})", style::age(*age))).collect();
    on_nodes(
        NAME,
        Status::Fail,
        (&nodes, reports.len()),
        "NRTs are older than three heartbeats",
        "the scheduler decides on old numbers there",
        "check the exporter pods on those nodes and their logs (kubectl get pods -A -o wide -l app.kubernetes.io/component=rte)",
    )
}

fn alignment(read: &Read<Vec<Report>>) -> Check {
    const NAME: &str = "kubelet alignment";
    let Ok(reports) = read else { return Check::skip(NAME, "no NRTs read") };
    let unfiltered: Vec<(String, String)> = reports
        .iter()
        .filter_map(|r| {
            let policy = numaresources_api::fit::TopologyManagerConfig::of(&r.nrt).policy;
            (policy != "single-numa-node").then(|| (r.nrt.metadata.name.clone().unwrap_or_default(), policy))
        })
        .collect();
    if unfiltered.is_empty() {
        return Check::ok(NAME, "every node's topology manager policy is single-numa-node");
    }
    let nodes: Vec<String> = unfiltered.iter().map(|(node, policy)| format!("{node} ({policy})")).collect();
    on_nodes(
        NAME,
        Status::Warn,
        (&nodes, reports.len()),
        "nodes run a topology manager policy the scheduler does not filter",
        "it lets pods through \
             there unchecked, and the kubelet may reject them (TopologyAffinityError) or run them unaligned",
        "set topologyManagerPolicy: single-numa-node in those nodes' kubelet configuration for pods that must be aligned",
    )
}

fn memory_per_zone(read: &Read<Vec<Report>>) -> Check {
    const NAME: &str = "memory per NUMA zone";
    let Ok(reports) = read else { return Check::skip(NAME, "no NRTs read") };
    let without: Vec<String> = reports
        .iter()
        .filter(|r| {
            let zones = numaresources_api::fit::numa_zones(&r.nrt);
            !zones.is_empty() && zones.iter().all(|zone| !zone.available.contains_key("memory"))
        })
        .map(|r| r.nrt.metadata.name.clone().unwrap_or_default())
        .collect();
    let node_level: Vec<String> = reports
        .iter()
        .filter(|r| {
            r.nrt
                .zones
                .iter()
                .any(|zone| zone.attributes.iter().any(|a| a.name == ATTR_MEMORY_NUMA_MANAGED && a.value == "false"))
        })
        .map(|r| r.nrt.metadata.name.clone().unwrap_or_default())
        .collect();
    if without.is_empty() && node_level.is_empty() {
        return Check::ok(NAME, "every node reports memory per NUMA zone");
    }
    if without.is_empty() {
        return on_nodes(
            NAME,
            Status::Warn,
            (&node_level, reports.len()),
            "nodes report their total memory in every zone",
            "their kubelet's memory manager is not \
                 Static, so pods placed there get aligned CPUs but not aligned memory",
            "run those kubelets with memoryManagerPolicy: Static (and reservedMemory) where memory must be aligned",
        );
    }
    on_nodes(
        NAME,
        Status::Fail,
        (&without, reports.len()),
        "nodes report no memory per NUMA zone",
        "their kubelet's memory manager is not Static, so \
             the NUMA-aware scheduler refuses every pod there that requests memory",
        "run those kubelets with memoryManagerPolicy: Static (and reservedMemory), or keep NUMA-aligned pods off them",
    )
}

fn fingerprints(read: &Read<Vec<Report>>) -> Check {
    const NAME: &str = "pods fingerprint";
    let Ok(reports) = read else { return Check::skip(NAME, "no NRTs read") };
    let without: Vec<String> = reports
        .iter()
        .filter(|r| r.nrt.attribute(ATTR_PODS_FINGERPRINT).is_none_or(str::is_empty))
        .map(|r| r.nrt.metadata.name.clone().unwrap_or_default())
        .collect();
    if without.is_empty() {
        return Check::ok(NAME, "every NRT carries a pods fingerprint");
    }
    on_nodes(
        NAME,
        Status::Warn,
        (&without, reports.len()),
        "NRTs carry no pods fingerprint",
        "the scheduler's cache never resyncs those nodes and \
             holds every pod it placed there",
        "enable podsFingerprinting in the NUMAResourcesOperator's node groups",
    )
}

fn scheduler(read: &Read<Option<Deployment>>) -> Check {
    const NAME: &str = "scheduler";
    let deployment = match read {
        Err(error) => return Check::skip(NAME, format!("cannot get the scheduler Deployment: {error}")),
        Ok(None) => {
            return Check::problem(
                NAME,
                Status::Fail,
                "no NUMA-aware scheduler Deployment: pods routed to it stay Pending",
                "create a NUMAResourcesScheduler (manifests/samples)",
            );
        }
        Ok(Some(deployment)) => deployment,
    };
    let conditions = deployment.status.as_ref().and_then(|s| s.conditions.as_ref());
    let available = conditions.into_iter().flatten().find(|c| c.type_ == "Available");
    match available {
        Some(condition) if condition.status == "True" => Check::ok(NAME, "the NUMA-aware scheduler is Available"),
        _ => Check::problem(
            NAME,
            Status::Fail,
            "the NUMA-aware scheduler Deployment is not Available: pods routed to it stay Pending",
            "check its pods and their logs (kubectl -n <namespace> logs deployment/numaresources-scheduler)",
        ),
    }
}

/// A problem found on some of the nodes: `{count} of {total} {what}: {the first nodes}; {consequence}`.
fn on_nodes(
    name: &'static str,
    status: Status,
    (nodes, total): (&[String], usize),
    what: &str,
    consequence: &str,
    fix: &str,
) -> Check {
    Check::problem(name, status, format!("{} of {total} {what}: {}; {consequence}", nodes.len(), named(nodes)), fix)
}

/// The first [`NAMED`] of `nodes`, then how many more.
fn named(nodes: &[String]) -> String {
    let mut text = nodes.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
    if nodes.len() > NAMED {
        text.push_str(&format!(" and {} more", nodes.len() - NAMED));
    }
    text
}

/// Runs `doctor`.
pub async fn run(client: &kube::Client, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let observed = observe(client, &args.namespace).await;
    let checks = checks(&observed);
    super::print_answer(args.output, &checks, |checks, paint| render_text(checks, paint))?;
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Reads what the checks need; what cannot be read is kept as its error.
async fn observe(client: &kube::Client, namespace: &str) -> Observed {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::numa::fleet::{Age, AgeSource};

    /// A node's report: its policy, whether its zones list memory, its fingerprint, its age.
    fn report(name: &str, policy: &str, memory: bool, fingerprint: bool, age: u64) -> Report {
        let mut resources = vec![json!({"name": "cpu", "capacity": "8", "allocatable": "8", "available": "8"})];
        if memory {
            resources.push(json!({"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"}));
        }
        let mut attributes = vec![json!({"name": "topologyManagerPolicy", "value": policy})];
        if fingerprint {
            attributes.push(json!({"name": ATTR_PODS_FINGERPRINT, "value": "pfp0v001deadbeefdeadbeef"}));
        }
        let nrt = serde_json::from_value(json!({"metadata": {"name": name}, "attributes": attributes,
            "zones": [{"name": "node-0", "type": "Node", "resources": resources}]}))
        .unwrap();
        Report { nrt, age: Some(Age { seconds: age, source: AgeSource::Reported }) }
    }

    fn healthy() -> Observed {
        let api_service: DynamicObject = serde_json::from_value(json!({"apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService", "metadata": {"name": API_SERVICE},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}}))
        .unwrap();
        let scheduler: Deployment = serde_json::from_value(json!({"metadata": {"name": "numaresources-scheduler"},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}}))
        .unwrap();
        Observed {
            api_service: Ok(Some(api_service)),
            reports: Ok(vec![report("worker-0", "single-numa-node", true, true, 20)]),
            scheduler: Ok(Some(scheduler)),
            exporters: Ok(vec![exporters("numaresourcesoperator-worker", 3, 3)]),
            apiserver: Ok((Some(apiserver(3)), Some(lease(Some("replica-0"), "replica-1,replica-2")))),
            pod_routing: Ok(Some((true, true))),
            certificates: vec![(
                names::APISERVER_TLS_SECRET,
                Ok(Some(certificate(Duration::from_secs(90 * 24 * 3600)))),
            )],
            now: SystemTime::now(),
        }
    }

    fn exporters(name: &str, desired: i32, ready: i32) -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {"desiredNumberScheduled": desired,
            "numberReady": ready, "currentNumberScheduled": desired, "numberMisscheduled": 0}}))
        .unwrap()
    }

    #[test]
    fn exporters_not_ready_fail() {
        let mut observed = healthy();
        observed.exporters = Ok(vec![exporters("numaresourcesoperator-worker", 3, 1)]);
        let (status, detail) = status_of(&observed, "exporters");
        assert_eq!(status, Status::Fail);
        assert!(detail.starts_with("exporters not ready: numaresourcesoperator-worker (1 of 3 ready)"), "{detail}");
        observed.exporters = Ok(Vec::new());
        assert_eq!(status_of(&observed, "exporters").0, Status::Skip);
    }

    fn apiserver(replicas: i32) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": names::APISERVER}, "spec": {"replicas": replicas,
            "selector": {}, "template": {}}}))
        .unwrap()
    }

    fn lease(holder: Option<&str>, in_sync: &str) -> Lease {
        serde_json::from_value(json!({"metadata": {"name": names::APISERVER,
            "annotations": {numaresources_apiserver::replication::IN_SYNC_ANNOTATION: in_sync}},
            "spec": {"holderIdentity": holder}}))
        .unwrap()
    }

    fn certificate(validity: Duration) -> String {
        numaresources_runtime::tls::CertificateAuthority::generate("doctor-test", validity)
            .unwrap()
            .cert_pem()
            .to_owned()
    }

    fn status_of(observed: &Observed, name: &str) -> (Status, String) {
        let check = checks(observed).into_iter().find(|c| c.name == name).unwrap();
        (check.status, check.detail)
    }

    #[test]
    fn a_healthy_chain_is_all_ok() {
        let checks = checks(&healthy());
        assert!(checks.iter().all(|c| c.status == Status::Ok), "{checks:#?}");
        let text = render_text(&checks, Paint::new(false));
        assert!(text.starts_with("ok    APIService: v1alpha2.topology.node.k8s.io is Available\n"), "{text}");
    }

    #[test]
    fn an_unavailable_or_missing_apiservice_fails_and_a_missing_right_skips() {
        let mut observed = healthy();
        observed.api_service = Ok(Some(
            serde_json::from_value(json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": API_SERVICE}, "status": {"conditions": [{"type": "Available",
                "status": "False", "reason": "MissingEndpoints", "message": "endpoints for service/numaresources-apiserver have no addresses"}]}}))
            .unwrap(),
        ));
        let (status, detail) = status_of(&observed, "APIService");
        assert_eq!(status, Status::Fail);
        assert!(detail.contains("MissingEndpoints"), "{detail}");
        observed.api_service = Ok(None);
        assert_eq!(status_of(&observed, "APIService").0, Status::Fail);
        observed.api_service = Err("forbidden".into());
        assert_eq!(status_of(&observed, "APIService").0, Status::Skip);
    }

    #[test]
    fn stale_or_missing_nrts_fail() {
        let mut observed = healthy();
        observed.reports = Ok(vec![
            report("worker-0", "single-numa-node", true, true, 20),
            report("worker-1", "single-numa-node", true, true, 3_600),
        ]);
        let (status, detail) = status_of(&observed, "NRT freshness");
        assert_eq!(status, Status::Fail);
        assert!(detail.starts_with("1 of 2 NRTs are older than three heartbeats: worker-1 (60m)"), "{detail}");
        observed.reports = Ok(Vec::new());
        assert_eq!(status_of(&observed, "NRT freshness").0, Status::Fail);
    }

    #[test]
    fn a_policy_the_scheduler_does_not_filter_warns_with_its_consequence() {
        let mut observed = healthy();
        observed.reports = Ok(vec![report("worker-0", "restricted", true, true, 20)]);
        let (status, detail) = status_of(&observed, "kubelet alignment");
        assert_eq!(status, Status::Warn);
        assert!(detail.contains("worker-0 (restricted)") && detail.contains("TopologyAffinityError"), "{detail}");
    }

    #[test]
    fn nodes_without_memory_per_zone_fail() {
        let mut observed = healthy();
        observed.reports = Ok(vec![report("worker-0", "single-numa-node", false, true, 20)]);
        let (status, detail) = status_of(&observed, "memory per NUMA zone");
        assert_eq!(status, Status::Fail);
        assert!(detail.contains("memory manager is not Static"), "{detail}");
    }

    #[test]
    fn memory_reported_as_the_nodes_total_in_every_zone_warns() {
        let mut observed = healthy();
        let mut node_level = report("worker-0", "single-numa-node", true, true, 20);
        node_level.nrt.zones[0].attributes =
            vec![numaresources_api::nrt::AttributeInfo::new(ATTR_MEMORY_NUMA_MANAGED, "false")];
        observed.reports = Ok(vec![node_level]);
        let (status, detail) = status_of(&observed, "memory per NUMA zone");
        assert_eq!(status, Status::Warn);
        assert!(detail.contains("aligned CPUs but not aligned memory"), "{detail}");
    }

    #[test]
    fn nrts_without_a_fingerprint_warn() {
        let mut observed = healthy();
        observed.reports = Ok(vec![report("worker-0", "single-numa-node", true, false, 20)]);
        assert_eq!(status_of(&observed, "pods fingerprint").0, Status::Warn);
    }

    #[test]
    fn api_server_replicas_without_a_leader_fail_and_followers_out_of_sync_warn() {
        let mut observed = healthy();
        assert_eq!(
            status_of(&observed, "API server replicas"),
            (Status::Ok, "leader replica-0, 2 of 2 followers in sync".into())
        );
        observed.apiserver = Ok((Some(apiserver(3)), Some(lease(Some("replica-0"), ""))));
        let (status, detail) = status_of(&observed, "API server replicas");
        assert_eq!(status, Status::Warn);
        assert!(detail.contains("the leader acknowledges writes alone"), "{detail}");
        observed.apiserver = Ok((Some(apiserver(3)), Some(lease(None, ""))));
        assert_eq!(status_of(&observed, "API server replicas").0, Status::Fail);
        observed.apiserver = Ok((Some(apiserver(1)), None));
        assert_eq!(status_of(&observed, "API server replicas").0, Status::Ok);
    }

    #[test]
    fn routing_pods_without_the_pod_webhook_fails() {
        let mut observed = healthy();
        observed.pod_routing = Ok(Some((true, false)));
        let (status, detail) = status_of(&observed, "pod routing");
        assert_eq!(status, Status::Fail);
        assert!(detail.contains("pods keep the default scheduler"), "{detail}");
        observed.pod_routing = Ok(Some((false, false)));
        assert_eq!(status_of(&observed, "pod routing").0, Status::Ok);
    }

    #[test]
    fn a_certificate_near_its_expiry_warns_and_an_expired_one_fails() {
        let mut observed = healthy();
        observed.certificates =
            vec![(names::WEBHOOK_TLS_SECRET, Ok(Some(certificate(Duration::from_secs(2 * 24 * 3600)))))];
        let (status, detail) = status_of(&observed, "certificates");
        assert_eq!(status, Status::Warn);
        assert!(detail.starts_with("numaresources-webhook-tls expires in"), "{detail}");
        observed.now = SystemTime::now() + Duration::from_secs(3 * 24 * 3600);
        assert_eq!(status_of(&observed, "certificates").0, Status::Fail);
        observed.certificates = vec![(names::WEBHOOK_TLS_SECRET, Err("forbidden".into()))];
        assert_eq!(status_of(&observed, "certificates").0, Status::Skip);
    }

    #[test]
    fn a_missing_or_unavailable_scheduler_fails() {
        let mut observed = healthy();
        observed.scheduler = Ok(None);
        assert_eq!(status_of(&observed, "scheduler").0, Status::Fail);
        observed.scheduler = Ok(Some(
            serde_json::from_value(json!({"metadata": {"name": "numaresources-scheduler"},
            "status": {"conditions": [{"type": "Available", "status": "False"}]}}))
            .unwrap(),
        ));
        assert_eq!(status_of(&observed, "scheduler").0, Status::Fail);
    }
}
