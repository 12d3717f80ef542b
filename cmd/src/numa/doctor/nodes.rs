//! The checks of each node's link: its exporter, its NRT, what its kubelet can align.
use k8s_openapi::api::apps::v1::DaemonSet;
use numaresources_api::nrt::well_known::{ATTR_MEMORY_NUMA_MANAGED, ATTR_PODS_FINGERPRINT};

use super::{Check, NAMED, Read, STALE_AFTER, Status};
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

pub(super) fn freshness(read: &Read<Vec<Report>>) -> Check {
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

pub(super) fn alignment(read: &Read<Vec<Report>>) -> Check {
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
