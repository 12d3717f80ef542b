//! The checks of each node's link: its exporter, its NRT, what its kubelet can align.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use numaresources_api::fit::TopologyManagerConfig;
use numaresources_api::nrt::well_known::{
    ATTR_MEMORY_NUMA_MANAGED, ATTR_PODS_FINGERPRINT, ZONE_TYPE_NODE, numa_id_from_zone_name,
};
use numaresources_controllers::kubelet as kubeletconfig;
use numaresources_rte::config::{DEFAULT_HEARTBEAT, HEARTBEAT_ENV, Interval};
use serde_json::Value;

use super::{Check, NAMED, Observed, Read, STALE_HEARTBEATS, Status};
use crate::numa::fleet::Report;
use crate::numa::style;

pub(super) fn exporters(read: &Read<Vec<DaemonSet>>) -> Check {
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

/// Every node of every node group has a Running exporter and an NRT: a node without an NRT is
/// one the scheduler places pods on as if it had no NUMA constraint.
pub(super) fn coverage(observed: &Observed) -> Check {
    const NAME: &str = "nodes covered";
    let groups = match &observed.node_groups {
        Err(error) => return Check::skip(NAME, format!("cannot resolve the node groups' nodes: {error}")),
        Ok(None) => return Check::skip(NAME, "no NUMAResourcesOperator: no node group to cover"),
        Ok(Some(groups)) => groups,
    };
    let nodes: BTreeSet<&String> = groups.iter().flat_map(|g| &g.nodes).collect();
    if nodes.is_empty() {
        return Check::problem(
            NAME,
            Status::Warn,
            format!("the {} node groups select no node: no node gets an exporter", groups.len()),
            "check the node groups' nodeSelector (or machineConfigPoolSelector) against the nodes' labels",
        );
    }
    let reports = match &observed.reports {
        Err(error) => return Check::skip(NAME, format!("cannot list NRTs: {error}")),
        Ok(reports) => reports,
    };
    let reported: BTreeSet<&str> = reports.iter().filter_map(|r| r.nrt.metadata.name.as_deref()).collect();
    let mut uncovered = Vec::new();
    for node in &nodes {
        let exporter = match &observed.exporter_pods {
            Ok(states) => match states.get(*node).map(String::as_str) {
                Some("Running") => None,
                Some(state) => Some(format!("exporter {state}")),
                None => Some("no exporter".to_owned()),
            },
            // Unknown: the NRT alone is checked.
            Err(_) => None,
        };
        let nrt = (!reported.contains(node.as_str())).then_some("no NRT");
        let problems: Vec<String> = exporter.into_iter().chain(nrt.map(str::to_owned)).collect();
        if !problems.is_empty() {
            uncovered.push(format!("{node} ({})", problems.join(", ")));
        }
    }
    let unread = observed.exporter_pods.as_ref().err().map(|e| format!(" (exporter pods not read: {e})"));
    if uncovered.is_empty() {
        return Check::ok(
            NAME,
            format!(
                "{} nodes in {} node groups, each with {}an NRT{}",
                nodes.len(),
                groups.len(),
                if unread.is_none() { "a Running exporter and " } else { "" },
                unread.unwrap_or_default()
            ),
        );
    }
    on_nodes(
        NAME,
        Status::Fail,
        (&uncovered, nodes.len()),
        "nodes of the node groups are not covered",
        "the scheduler places pods on a node without an NRT as if it had no NUMA constraint, and an NRT without \
         its exporter stops changing",
        "check the exporter pods on those nodes (a taint the DaemonSet does not tolerate, or their logs: kubectl \
         get pods -A -o wide -l app.kubernetes.io/component=rte)",
    )
}

/// The longest heartbeat any exporter DaemonSet sets (`--heartbeat` in its exporter's command or
/// arguments, or `NUMARESOURCES_RTE_HEARTBEAT` in its environment), else the exporter's default;
/// None when one turns it off (`0`): its exporters publish only on change, so an unchanged node's
/// NRT grows old by design.
pub(super) fn heartbeat(exporters: &Read<Vec<DaemonSet>>) -> Option<Duration> {
    let default = DEFAULT_HEARTBEAT.parse::<Interval>().ok().and_then(|i| i.0);
    let Ok(exporters) = exporters else { return default };
    let containers = exporters
        .iter()
        .filter_map(|ds| ds.spec.as_ref()?.template.spec.as_ref())
        .flat_map(|spec| spec.containers.iter());
    let mut set = Vec::new();
    for container in containers {
        let args = container.command.iter().flatten().chain(container.args.iter().flatten());
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            if let Some(value) = arg.strip_prefix("--heartbeat=") {
                set.push(value.to_owned());
            } else if arg == "--heartbeat" {
                set.extend(args.peek().map(|value| (*value).clone()));
            }
        }
        let env = container.env.iter().flatten().filter(|e| e.name == HEARTBEAT_ENV);
        set.extend(env.filter_map(|e| e.value.clone()));
    }
    let parsed: Vec<Option<Duration>> =
        set.iter().filter_map(|value| Some(value.parse::<Interval>().ok()?.0)).collect();
    if parsed.iter().any(Option::is_none) {
        return None;
    }
    parsed.into_iter().flatten().max().or(default)
}

pub(super) fn freshness(read: &Read<Vec<Report>>, exporters: &Read<Vec<DaemonSet>>) -> Check {
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
    let Some(heartbeat) = heartbeat(exporters) else {
        return Check::ok(
            NAME,
            format!(
                "{} NRTs; an exporter's heartbeat is off (--heartbeat 0), so an unchanged node's NRT grows old by \
                 design: their age is not judged",
                reports.len()
            ),
        );
    };
    let stale_after = heartbeat * STALE_HEARTBEATS;
    let mut stale: Vec<(String, u64)> = reports
        .iter()
        .filter_map(|r| {
            let seconds = r.age?.seconds;
            (seconds > stale_after.as_secs()).then(|| (r.nrt.metadata.name.clone().unwrap_or_default(), seconds))
        })
        .collect();
    if stale.is_empty() {
        let limit = style::age(stale_after.as_secs());
        return Check::ok(NAME, format!("{} NRTs, none older than three heartbeats ({limit})", reports.len()));
    }
    stale.sort_by_key(|(_, age)| std::cmp::Reverse(*age));
    let nodes: Vec<String> = stale.iter().map(|(node, age)| format!("{node} ({})", style::age(*age))).collect();
    on_nodes(
        NAME,
        Status::Fail,
        (&nodes, reports.len()),
        &format!("NRTs are older than three heartbeats ({})", style::age(stale_after.as_secs())),
        "the scheduler decides on old numbers there",
        "check the exporter pods on those nodes and their logs (kubectl get pods -A -o wide -l app.kubernetes.io/component=rte)",
    )
}

pub(super) fn alignment(read: &Read<Vec<Report>>) -> Check {
    const NAME: &str = "Topology Manager policies";
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

/// What each kubelet runs (configz), what keeps it from aligned placement, and whether its NRT
/// tells the scheduler the same policy and scope.
pub(super) fn kubelets(read: &Read<BTreeMap<String, Read<Value>>>, reports: &Read<Vec<Report>>) -> Check {
    const NAME: &str = "kubelets";
    let answers = match read {
        Err(error) => {
            return Check::skip(
                NAME,
                format!(
                    "cannot read the kubelets' configuration (get nodes/proxy, /configz): {error}; \
                     the policies the NRTs report are checked above"
                ),
            );
        }
        Ok(answers) if answers.is_empty() => return Check::skip(NAME, "no node to ask"),
        Ok(answers) => answers,
    };
    let reported: BTreeMap<&str, TopologyManagerConfig> = match reports {
        Ok(reports) => reports
            .iter()
            .filter_map(|r| Some((r.nrt.metadata.name.as_deref()?, TopologyManagerConfig::of(&r.nrt))))
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    let mut settings: BTreeMap<String, usize> = BTreeMap::new();
    let mut gaps = BTreeMap::new();
    let mut mismatched = Vec::new();
    let mut silent = Vec::new();
    for (node, answer) in answers {
        let config = match answer {
            Ok(config) => config,
            Err(reason) => {
                silent.push(format!("{node} ({reason})"));
                continue;
            }
        };
        let facts = KubeletFacts::of(config);
        *settings.entry(facts.to_string()).or_default() += 1;
        gaps.insert(node.clone(), kubeletconfig::alignment_gaps(config));
        if let Some(nrt) = reported.get(node.as_str())
            && (nrt.policy != facts.policy || nrt.scope != facts.scope)
        {
            mismatched.push(format!(
                "{node} (NRT {} scope {}, kubelet {} scope {})",
                nrt.policy, nrt.scope, facts.policy, facts.scope
            ));
        }
    }
    let mut running: Vec<String> = settings.iter().map(|(facts, count)| format!("{count} run {facts}")).collect();
    if let Ok(reports) = reports {
        running.extend(reserved_cpu_consequences(
            reports.iter().filter(|r| r.nrt.metadata.name.as_ref().is_some_and(|name| answers.contains_key(name))),
        ));
    }
    if !mismatched.is_empty() {
        return on_nodes(
            NAME,
            Status::Fail,
            (&mismatched, answers.len()),
            "NRTs report another Topology Manager policy or scope than their kubelet runs",
            "the scheduler filters those nodes by the wrong rules",
            "the exporters learn the kubelets' settings from the controllers (ConfigMap numaresourcesoperator-<pool>): \
             check the controllers' logs and the NUMAResourcesOperator's KubeletConfigConsistent condition",
        );
    }
    if let Some(alignment) = kubeletconfig::describe_alignment(&gaps) {
        let mut detail =
            format!("kubelets that cannot give NUMA-aligned placement: {alignment}; {}", running.join("; "));
        if !silent.is_empty() {
            detail.push_str(&format!("; did not answer: {}", named(&silent)));
        }
        return Check::problem(
            NAME,
            Status::Warn,
            detail,
            "set cpuManagerPolicy: static, memoryManagerPolicy: Static and topologyManagerPolicy: \
             single-numa-node (with reservedSystemCPUs and reservedMemory) on the nodes that run aligned pods",
        );
    }
    if !silent.is_empty() {
        return on_nodes(
            NAME,
            Status::Warn,
            (&silent, answers.len()),
            "kubelets did not answer",
            &format!("the others: {}", running.join("; ")),
            "check those nodes' kubelets (kubectl get nodes) and kube-apiserver's access to them",
        );
    }
    Check::ok(NAME, running.join("; "))
}

/// What the reserved CPUs do to alignment, from the NRTs (a zone's CPU capacity less its
/// allocatable is what the kubelet keeps from pinned containers there): where they leave one
/// zone fewer CPUs than another, the largest container that still aligns there is smaller. One
/// line per pattern, naming its nodes.
fn reserved_cpu_consequences<'a>(reports: impl Iterator<Item = &'a Report>) -> Option<String> {
    let mut by_pattern: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for report in reports {
        let cpus = |q: &numaresources_api::quantity::Quantity| q.ceil_milli_i64().unwrap_or(0) / 1000;
        let zones: Vec<(u32, i64, i64)> = report
            .nrt
            .zones
            .iter()
            .filter(|zone| zone.zone_type == ZONE_TYPE_NODE)
            .filter_map(|zone| {
                let id = numa_id_from_zone_name(&zone.name)?;
                let cpu = zone.resources.iter().find(|r| r.name == "cpu")?;
                Some((id, cpus(&cpu.capacity), cpus(&cpu.allocatable)))
            })
            .collect();
        let Some(most) = zones.iter().map(|(_, _, allocatable)| *allocatable).max() else { continue };
        let short: Vec<&(u32, i64, i64)> = zones.iter().filter(|(_, _, allocatable)| *allocatable < most).collect();
        if short.is_empty() || zones.iter().all(|(_, capacity, allocatable)| capacity == allocatable) {
            continue;
        }
        let widest: Vec<String> =
            zones.iter().filter(|(_, _, a)| *a == most).map(|(id, _, _)| format!("NUMA {id}")).collect();
        let offers: Vec<String> = short
            .iter()
            .map(|(id, capacity, allocatable)| format!("NUMA {id} offers {allocatable} of {capacity}"))
            .collect();
        let most_elsewhere = short.iter().map(|(_, _, allocatable)| *allocatable).max().unwrap_or(0);
        let pattern = format!(
            "reserved CPUs: {} CPUs, so a container asking more than {most_elsewhere} aligns only on {}",
            offers.join(", "),
            widest.join(" or ")
        );
        by_pattern.entry(pattern).or_default().push(report.nrt.metadata.name.clone().unwrap_or_default());
    }
    let lines: Vec<String> =
        by_pattern.into_iter().map(|(pattern, nodes)| format!("{pattern} ({})", named(&nodes))).collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// The settings of one kubelet that decide NUMA alignment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KubeletFacts {
    cpu_manager: String,
    memory_manager: String,
    policy: String,
    scope: String,
    /// `reservedSystemCPUs`, or the CPU of `kubeReserved` and `systemReserved` (the kubelet then
    /// picks the CPUs itself).
    reserved: String,
}

impl KubeletFacts {
    /// From configz's `kubeletconfig`; a field left out is the kubelet's default.
    fn of(config: &Value) -> Self {
        let field = |key: &str, default: &str| {
            config.get(key).and_then(Value::as_str).filter(|v| !v.is_empty()).unwrap_or(default).to_owned()
        };
        let reserved_cpu =
            |key: &str| config.pointer(&format!("/{key}/cpu")).and_then(Value::as_str).map(str::to_owned);
        let reserved = match config.get("reservedSystemCPUs").and_then(Value::as_str).filter(|v| !v.is_empty()) {
            Some(cpus) => format!("CPUs {cpus} reserved"),
            None => {
                let amounts: Vec<String> = [("kubeReserved", "kube"), ("systemReserved", "system")]
                    .into_iter()
                    .filter_map(|(key, what)| reserved_cpu(key).map(|cpu| format!("{what} {cpu}")))
                    .collect();
                if amounts.is_empty() {
                    "no CPU reserved".to_owned()
                } else {
                    format!("{} CPU reserved", amounts.join(" + "))
                }
            }
        };
        Self {
            cpu_manager: field("cpuManagerPolicy", "none"),
            memory_manager: field("memoryManagerPolicy", "None"),
            policy: field("topologyManagerPolicy", "none"),
            scope: field("topologyManagerScope", "container"),
            reserved,
        }
    }
}

impl std::fmt::Display for KubeletFacts {
    /// `CPU manager static, memory manager Static, Topology Manager single-numa-node per container
    /// (each container on its own NUMA set), CPUs 0-1 reserved (never given to pinned pods)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scope = if self.scope == "pod" {
            "per pod (a pod's containers share one NUMA set)"
        } else {
            "per container (each container on its own NUMA set)"
        };
        write!(
            f,
            "CPU manager {}, memory manager {}, Topology Manager {} {scope}, {}",
            self.cpu_manager, self.memory_manager, self.policy, self.reserved
        )?;
        if self.cpu_manager == "static" {
            f.write_str(" (never given to pinned containers)")?;
        }
        Ok(())
    }
}

pub(super) fn memory_per_zone(read: &Read<Vec<Report>>) -> Check {
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

pub(super) fn fingerprints(read: &Read<Vec<Report>>) -> Check {
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
