//! `kubectl numa fit -f pod.yaml` / `kubectl numa fit pod/NAME -n NS`: the NUMA-aware
//! scheduler's verdict for every node, one line each, from the rules in
//! [`numaresources_api::fit`]: where the pod fits (and its score), why it does not, and which
//! nodes the plugin would let through blindly (no NRT, or an NRT too old to trust).
//!
//! With the scheduler's over-reserve cache (its default), a node is judged as the cache shows it:
//! the NRT less the pods placed on the node that the NRT does not cover yet, as far as those can
//! be told from the NRT's pods fingerprint and the pods bound to the node ([`super::assumed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use numaresources_api::fit::{
    Filtered, NodeFit, NodeResources, PodRequests, Requester, Unchecked, evaluate, reserved_view,
};
use numaresources_api::operator::{ScoringStrategyParams, ScoringStrategyType};
use serde::Serialize;

use super::assumed::{self, PodSet};
use super::fleet::{self, Report};
use super::style::{self, Paint};

/// The most nodes named in a tie for the best score.
const TIES_SHOWN: usize = 5;
/// The largest pod manifest read (a pod object is limited to about 1.5 MiB by etcd anyway).
const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

/// `fit`'s flags.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// An existing pod: `pod/NAME` (or `NAME`).
    #[arg(value_name = "pod/NAME", conflicts_with = "filename", required_unless_present = "filename")]
    pod: Option<String>,
    /// A pod manifest (YAML or JSON; `-` reads standard input).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    filename: Option<PathBuf>,
    /// The pod's namespace [default: the kubeconfig context's].
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// The NUMAResourcesScheduler's scoring strategy.
    #[arg(long, value_enum, default_value_t = Strategy::LeastAllocated)]
    scoring_strategy: Strategy,
    /// An NRT older than this is reported as stale: the scheduler decides on old numbers.
    #[arg(long, default_value = "3m", value_parser = fleet::parse_duration)]
    stale_after: Duration,
    /// The NUMA-aware scheduler's name: the pods it placed are the ones its over-reserve cache
    /// holds against a node.
    #[arg(long, default_value = numaresources_api::operator::DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// The scheduler runs without the over-reserve cache (`cacheResyncPeriod: 0s`): it reads each
    /// NRT as published.
    #[arg(long)]
    passthrough: bool,
    /// Output format: one line per node (default) or `json`.
    #[arg(short = 'o', long, value_enum)]
    output: Option<Output>,
}

/// The NUMAResourcesScheduler scoring strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "PascalCase")]
pub enum Strategy {
    /// Favour the NUMA zones with the most left after the pod.
    LeastAllocated,
    /// Favour the fullest NUMA zones that still fit.
    MostAllocated,
    /// Favour zones whose resources stay balanced.
    BalancedAllocation,
    /// Favour nodes that hold the pod on the fewest (and closest) NUMA zones.
    #[value(name = "LeastNUMANodes")]
    LeastNumaNodes,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For scripts.
    Json,
}

/// The answer, also its JSON form.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// `namespace/name`.
    pub pod: String,
    /// The pod's QoS class.
    pub qos: numaresources_api::qos::QosClass,
    /// What about the pod itself changes the verdicts.
    pub pod_problems: Vec<String>,
    /// Whether Node objects could be read (else a request the Node lacks is not caught).
    pub nodes_known: bool,
    /// Whether the pods bound to nodes could be read (else neither their requests nor the
    /// over-reserve cache are accounted for).
    pub pods_known: bool,
    /// Whether the scheduler is taken to run its over-reserve cache (no `--passthrough`).
    pub over_reserve_cache: bool,
    /// One verdict per node: fits first (best score first), then unchecked, then refused.
    pub nodes: Vec<NodeAnswer>,
}

/// One node's verdict.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAnswer {
    /// The node.
    pub node: String,
    /// The verdict.
    #[serde(flatten)]
    pub fit: NodeFit,
    /// The NRT is older than `--stale-after`.
    pub stale: bool,
    /// Seconds since the last report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_age_seconds: Option<u64>,
    /// How the NRT relates to the pods bound to the node, as the over-reserve cache sees it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_set: Option<PodSet>,
    /// The verdict in words.
    pub message: String,
}

/// Runs `fit`.
pub async fn run(client: &kube::Client, args: FitArgs) -> anyhow::Result<ExitCode> {
    let pod = load_pod(client, &args).await?;
    let (reports, _) = fleet::reports(client, None).await?;
    let bound = fleet::bound_pods(client).await;
    let nodes = fleet::with_bound_pods(fleet::node_resources(client).await, bound.as_deref());
    let answer = answer(&pod, &reports, nodes.as_ref(), bound.as_deref(), &args);
    super::print_answer(args.output, &answer, render_text)?;
    // Scripts can tell "nowhere to go" from "somewhere".
    let accepted = answer.nodes.iter().any(|n| !matches!(n.fit.filtered, Filtered::Rejected(_)));
    Ok(if accepted { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

async fn load_pod(client: &kube::Client, args: &FitArgs) -> anyhow::Result<Pod> {
    if let Some(path) = &args.filename {
        let mut text = String::new();
        let reader: Box<dyn Read> = if path.as_os_str() == "-" {
            Box::new(std::io::stdin())
        } else {
            Box::new(std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?)
        };
        reader
            .take(MAX_MANIFEST_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading {}", path.display()))?;
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            bail!("{}: larger than {MAX_MANIFEST_BYTES} bytes", path.display());
        }
        // JSON is YAML.
        let value: serde_json::Value =
            serde_norway::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if value.get("kind").and_then(|k| k.as_str()).is_some_and(|k| k != "Pod") {
            bail!("{}: a {} is not a Pod (give the pod itself)", path.display(), value["kind"]);
        }
        return serde_json::from_value(value).with_context(|| format!("{}: not a Pod", path.display()));
    }
    let reference = args.pod.as_deref().unwrap_or_default();
    let name = match reference.split_once('/') {
        Some(("pod" | "pods" | "po", name)) => name,
        Some((kind, _)) => bail!("{reference}: only pods can be checked, not {kind}"),
        None => reference,
    };
    let namespace = args.namespace.as_deref().unwrap_or(client.default_namespace());
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.get(name).await.with_context(|| format!("getting pod {namespace}/{name}"))
}

/// Every node's verdict: the nodes with an NRT, and the Nodes without one (`nodes`, with the
/// requests of their pods counted). `bound` is every pod bound to a node, when they could be
/// listed: the over-reserve cache (unless `--passthrough`) holds those the NRT does not cover yet.
pub fn answer(
    pod: &Pod,
    reports: &[Report],
    nodes: Option<&BTreeMap<String, NodeResources>>,
    bound: Option<&[Pod]>,
    args: &FitArgs,
) -> Answer {
    let requests = PodRequests::from_pod(pod);
    let strategy = ScoringStrategyParams {
        type_: Some(match args.scoring_strategy {
            Strategy::LeastAllocated => ScoringStrategyType::LeastAllocated,
            Strategy::MostAllocated => ScoringStrategyType::MostAllocated,
            Strategy::BalancedAllocation => ScoringStrategyType::BalancedAllocation,
            Strategy::LeastNumaNodes => ScoringStrategyType::LeastNUMANodes,
        }),
        resources: Vec::new(),
    };
    let by_name: BTreeMap<&str, &Report> =
        reports.iter().filter_map(|r| r.nrt.metadata.name.as_deref().map(|n| (n, r))).collect();
    let mut names: BTreeSet<&str> = by_name.keys().copied().collect();
    if let Some(nodes) = nodes {
        names.extend(nodes.keys().map(String::as_str));
    }
    let by_node = bound.map(assumed::bound_by_node);
    let on = |node: &str| by_node.as_ref().map(|by_node| by_node.get(node).map_or(&[][..], Vec::as_slice));
    let mut verdicts: Vec<NodeAnswer> = names
        .into_iter()
        .map(|node| {
            let report = by_name.get(node);
            let held = report
                .zip(on(node))
                .filter(|_| !args.passthrough)
                .map(|(report, on_node)| assumed::held(&report.nrt, on_node, &args.scheduler_name));
            let seen = report.map(|r| match &held {
                Some(held) => reserved_view(&r.nrt, &held.requests),
                None => r.nrt.clone(),
            });
            let fit = evaluate(&requests, seen.as_ref(), nodes.and_then(|nodes| nodes.get(node)), &strategy);
            let age = report.and_then(|r| r.age).map(|a| a.seconds);
            let stale = age.is_some_and(|a| a > args.stale_after.as_secs());
            let pod_set = held.map(|h| h.pod_set);
            let message = message(&fit, stale.then_some(age.unwrap_or_default()), pod_set.as_ref());
            NodeAnswer { node: node.to_owned(), fit, stale, report_age_seconds: age, pod_set, message }
        })
        .collect();
    let rank = |n: &NodeAnswer| match n.fit.filtered {
        Filtered::Fits { .. } => (0, -n.fit.score.unwrap_or(0)),
        Filtered::Unchecked(_) => (1, -n.fit.score.unwrap_or(0)),
        Filtered::Rejected(_) => (2, 0),
    };
    verdicts.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.node.cmp(&b.node)));
    let name = pod.metadata.name.clone().or_else(|| pod.metadata.generate_name.clone()).unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().or(args.namespace.as_deref()).unwrap_or("default");
    Answer {
        pod: format!("{namespace}/{name}"),
        qos: requests.qos,
        pod_problems: requests.problems.iter().map(ToString::to_string).collect(),
        nodes_known: nodes.is_some(),
        pods_known: bound.is_some(),
        over_reserve_cache: !args.passthrough,
        nodes: verdicts,
    }
}

/// One node's verdict in words.
fn message(fit: &NodeFit, stale_age: Option<u64>, pod_set: Option<&PodSet>) -> String {
    let score = fit.score.map(|s| format!(" (score {s})")).unwrap_or_default();
    let mut text = match &fit.filtered {
        Filtered::Fits { placements } => {
            let zones: BTreeSet<u32> = placements.iter().map(|p| p.numa).collect();
            if zones.len() == 1 {
                format!("fits on NUMA {}{score}", placements[0].numa)
            } else {
                let each: Vec<String> = placements
                    .iter()
                    .map(|p| match &p.requester {
                        Requester::Container(name) | Requester::InitContainer(name) | Requester::Sidecar(name) => {
                            format!("{name} on NUMA {}", p.numa)
                        }
                        Requester::Pod => format!("NUMA {}", p.numa),
                    })
                    .collect();
                format!("fits: {}{score}", each.join(", "))
            }
        }
        Filtered::Unchecked(unchecked @ Unchecked::NoTopology) => unchecked.to_string(),
        Filtered::Unchecked(unchecked) => format!("{unchecked}{score}"),
        Filtered::Rejected(rejection) => format!("does not fit: {rejection}"),
    };
    if let Some(age) = stale_age {
        text.push_str(&format!(
            "; its NRT is stale (reported {} ago): the scheduler decides on old numbers",
            style::age(age)
        ));
    }
    match pod_set {
        Some(PodSet::Behind { assumed, foreign }) => {
            if !assumed.is_empty() {
                text.push_str(&format!(
                    "; counting {} placed here but not yet in its NRT against every NUMA zone, as the scheduler's cache does",
                    assumed.join(", ")
                ));
            }
            if !foreign.is_empty() {
                text.push_str(&format!(
                    "; {} not yet in its NRT: placed by another scheduler, the scheduler's cache may refuse this node until the NRT catches up",
                    foreign.join(", ")
                ));
            }
        }
        Some(PodSet::Unexplained) => text.push_str(
            "; its NRT's pods fingerprint matches none of the pods bound here less the newest: \
             the scheduler's cache holds an older copy less pods that cannot be told from here",
        ),
        Some(PodSet::NoFingerprint { assumed }) if !assumed.is_empty() => text.push_str(&format!(
            "; its NRT has no pods fingerprint, so the scheduler's cache never resyncs it: counting {} against \
             every NUMA zone, taken to be placed by the scheduler since it last started",
            assumed.join(", ")
        )),
        Some(PodSet::NoFingerprint { .. } | PodSet::InSync) | None => {}
    }
    text
}

/// The text answer: the pod's own problems, one line per node, then a summary.
pub fn render_text(answer: &Answer, paint: Paint) -> String {
    let mut out = format!("pod {} ({:?})\n", answer.pod, answer.qos);
    for problem in &answer.pod_problems {
        out.push_str(&format!("{}: {problem}\n", paint.yellow("note")));
    }
    if !answer.nodes_known {
        out.push_str(
            "note: Nodes cannot be listed here: kube-scheduler's node-level fit (what a Node offers, less what its \
             pods request) is not checked\n",
        );
    }
    if !answer.pods_known {
        out.push_str("note: Pods cannot be listed here: what the pods on a node request is not taken from its Node");
        if answer.over_reserve_cache {
            out.push_str(
                ", nor are pods placed on a node but not yet in its NRT counted against every NUMA zone, as the \
                 scheduler's over-reserve cache counts them",
            );
        }
        out.push('\n');
    }
    for node in &answer.nodes {
        let line = format!("{}: {}", node.node, node.message);
        let painted = match node.fit.filtered {
            Filtered::Fits { .. } if !node.stale => paint.green(&line),
            Filtered::Rejected(_) => paint.red(&line),
            _ => paint.yellow(&line),
        };
        out.push_str(&painted);
        out.push('\n');
    }
    let fits = answer.nodes.iter().filter(|n| matches!(n.fit.filtered, Filtered::Fits { .. })).count();
    let blind = answer
        .nodes
        .iter()
        .filter(|n| n.stale || matches!(n.fit.filtered, Filtered::Unchecked(Unchecked::NoTopology)))
        .count();
    out.push_str(&format!("{fits} of {} nodes fit", answer.nodes.len()));
    let mut fitting = answer.nodes.iter().filter(|n| matches!(n.fit.filtered, Filtered::Fits { .. }));
    if let Some(best) = fitting.next() {
        let score = best.fit.score.map(|s| format!(" (score {s})")).unwrap_or_default();
        let tied: Vec<&str> = fitting.take_while(|n| n.fit.score == best.fit.score).map(|n| n.node.as_str()).collect();
        if tied.is_empty() {
            out.push_str(&format!(", best {}{score}", best.node));
        } else {
            let shown: Vec<&str> =
                std::iter::once(best.node.as_str()).chain(tied.iter().copied()).take(TIES_SHOWN).collect();
            let more = (tied.len() + 1).saturating_sub(TIES_SHOWN);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            out.push_str(&format!(
                ", {}{more} tie for best{score}: kube-scheduler's other plugins choose among them",
                shown.join(", ")
            ));
        }
    }
    if blind > 0 {
        out.push_str(&format!("; {blind} let through blindly (no NRT or a stale one)"));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use numaresources_api::nrt::NodeResourceTopology;

    use super::*;
    use crate::numa::fleet::{Age, AgeSource};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        fit: FitArgs,
    }

    fn nrt(name: &str, cpus: i64) -> NodeResourceTopology {
        serde_json::from_value(json!({"metadata": {"name": name},
            "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
            "zones": [{"name": "node-0", "type": "Node", "resources": [
                {"name": "cpu", "capacity": cpus.to_string(), "allocatable": cpus.to_string(), "available": cpus.to_string()},
                {"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"}]}]}))
        .unwrap()
    }

    /// A Node's allocatable, 110 pod slots.
    fn offering(cpu: &str, memory: &str) -> NodeResources {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let allocatable = [("cpu", cpu), ("memory", memory), ("pods", "110")]
            .map(|(name, amount)| (name.to_owned(), Quantity(amount.to_owned())));
        NodeResources::new(&BTreeMap::from(allocatable))
    }

    /// On a node whose policy the NUMA filter lets through unchecked, kube-scheduler's node-level
    /// fit still refuses a pod the Node cannot hold with the pods already on it.
    #[test]
    fn a_node_the_numa_filter_does_not_check_still_refuses_what_its_node_cannot_hold() {
        use crate::numa::assumed::tests::pod as bound_pod;
        let args = Cli::parse_from(["fit", "-f", "pod.yaml"]).fit;
        let app: Pod = serde_json::from_value(json!({"metadata": {"name": "app", "namespace": "ns"},
            "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}}]}}))
        .unwrap();
        let mut topology = nrt("restricted-node", 8);
        topology.attributes = vec![numaresources_api::nrt::AttributeInfo::new("topologyManagerPolicy", "restricted")];
        topology.metadata.name = Some("worker-0".to_owned());
        let reports = [Report { nrt: topology, age: Some(Age { seconds: 5, source: AgeSource::Reported }) }];
        let nodes = BTreeMap::from([("worker-0".to_owned(), offering("8", "16Gi"))]);
        let busy = [bound_pod("running", "6", Some("2026-11-25T10:00:00Z"), "default-scheduler")];
        let counted = fleet::with_bound_pods(Some(nodes.clone()), Some(&busy));
        let text = render_text(&answer(&app, &reports, counted.as_ref(), Some(&busy), &args), Paint::new(false));
        assert!(
            text.contains(
                "worker-0: does not fit: insufficient cpu on the Node: 2 free of 8 allocatable < 4 requested \
                 (kube-scheduler refuses it before any NUMA rule)"
            ),
            "{text}"
        );
        let text = render_text(&answer(&app, &reports, Some(&nodes), Some(&[]), &args), Paint::new(false));
        assert!(text.contains("worker-0: passes unchecked"), "{text}");
    }

    #[test]
    fn nodes_without_an_nrt_or_with_a_stale_one_are_let_through_blindly() {
        let args = Cli::parse_from(["fit", "-f", "pod.yaml"]).fit;
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "app", "namespace": "ns"},
            "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}}))
        .unwrap();
        let fresh = Some(Age { seconds: 5, source: AgeSource::Reported });
        let old = Some(Age { seconds: 3_600, source: AgeSource::Reported });
        let reports = [Report { nrt: nrt("fresh", 4), age: fresh }, Report { nrt: nrt("old", 4), age: old }];
        let nodes = BTreeMap::from(["fresh", "old", "bare"].map(|name| (name.to_owned(), offering("4", "8Gi"))));
        let text = render_text(&answer(&pod, &reports, Some(&nodes), Some(&[]), &args), Paint::new(false));
        assert_eq!(
            text,
            "pod ns/app (Guaranteed)\n\
             fresh: fits on NUMA 0 (score 68)\n\
             old: fits on NUMA 0 (score 68); its NRT is stale (reported 60m ago): the scheduler decides on old numbers\n\
             bare: passes blindly: no NodeResourceTopology for this node (the kubelet may reject the pod with TopologyAffinityError)\n\
             2 of 3 nodes fit, fresh, old tie for best (score 68): kube-scheduler's other plugins choose among them; \
             2 let through blindly (no NRT or a stale one)\n"
        );
    }

    #[test]
    fn pods_placed_but_not_yet_in_the_nrt_count_against_every_zone_as_the_cache_counts_them() {
        use crate::numa::assumed::tests::{nrt_covering, pod};
        let fitting: Pod = serde_json::from_value(json!({"metadata": {"name": "app", "namespace": "ns"},
            "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}}]}}))
        .unwrap();
        let mut nrt = nrt_covering(&["old"], None);
        nrt.attributes.push(numaresources_api::nrt::AttributeInfo::new("topologyManagerPolicy", "single-numa-node"));
        let reports = [Report { nrt, age: Some(Age { seconds: 5, source: AgeSource::Reported }) }];
        let old = pod("old", "2", Some("2026-11-25T10:00:00Z"), "topo-aware-scheduler");
        let pending = pod("pending", "4", None, "topo-aware-scheduler");
        let bound = [old.clone(), pending];

        let cached = Cli::parse_from(["fit", "-f", "pod.yaml"]).fit;
        let text = render_text(&answer(&fitting, &reports, None, Some(&bound), &cached), Paint::new(false));
        assert!(
            text.contains(
                "worker-0: does not fit: cpu 2 available < 4 requested by container \"app\" (2 on NUMA 0); \
                 counting ns/pending placed here but not yet in its NRT against every NUMA zone"
            ),
            "{text}"
        );
        // Once the NRT covers it, the cache reads the NRT as published (6 available).
        let mut synced = reports.clone();
        synced[0].nrt = nrt_covering(&["old", "pending"], None);
        synced[0]
            .nrt
            .attributes
            .push(numaresources_api::nrt::AttributeInfo::new("topologyManagerPolicy", "single-numa-node"));
        let text = render_text(&answer(&fitting, &synced, None, Some(&bound), &cached), Paint::new(false));
        assert!(text.contains("worker-0: fits on NUMA 0"), "{text}");
        // Without the cache, or without the pods, the NRT as published; the latter says so.
        let passthrough = Cli::parse_from(["fit", "-f", "pod.yaml", "--passthrough"]).fit;
        let text = render_text(&answer(&fitting, &reports, None, None, &passthrough), Paint::new(false));
        assert!(text.contains("worker-0: fits on NUMA 0"), "{text}");
        assert!(text.contains("note: Pods cannot be listed here") && !text.contains("over-reserve"), "{text}");
        let text = render_text(&answer(&fitting, &reports, None, None, &cached), Paint::new(false));
        assert!(text.contains("worker-0: fits on NUMA 0"), "{text}");
        assert!(text.contains("note: Pods cannot be listed here") && text.contains("over-reserve"), "{text}");
        let json = serde_json::to_value(answer(&fitting, &reports, None, Some(&[old]), &cached)).unwrap();
        assert_eq!(json["nodes"][0]["podSet"]["state"], "inSync", "{json}");
    }
}
