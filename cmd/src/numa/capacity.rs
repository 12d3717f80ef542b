//! `kubectl numa capacity --cpu 8 --memory 16Gi [--hugepages-1Gi 4Gi] [--device NAME=COUNT]`:
//! how many more Guaranteed pods of that shape can be placed now, each on one NUMA zone, per node
//! and zone and in total ([`numaresources_api::fit::capacity`]), from the NRTs, and where they can
//! be read the Nodes and the pods bound to them.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use numaresources_api::fit::capacity::{NodeRoom, room};
use numaresources_api::fit::{NodeResources, Resources};
use numaresources_api::quantity::Quantity;
use serde::Serialize;

use super::fleet;
use super::style::Paint;

/// `capacity`'s flags: the pod's shape (its requests, equal to its limits).
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// CPUs per pod (whole CPUs align; `500m` is allowed and counted as asked).
    #[arg(long)]
    cpu: String,
    /// Memory per pod.
    #[arg(long)]
    memory: String,
    /// 1 GiB hugepages per pod (`4Gi`).
    #[arg(long = "hugepages-1Gi")]
    hugepages_1gi: Option<String>,
    /// 2 MiB hugepages per pod (`512Mi`).
    #[arg(long = "hugepages-2Mi")]
    hugepages_2mi: Option<String>,
    /// A device per pod, `NAME=COUNT` (`example.com/nic=1`); repeatable.
    #[arg(long = "device", value_name = "NAME=COUNT")]
    devices: Vec<String>,
    /// Count only the nodes whose kubelet aligns at this Topology Manager scope (their NRT's
    /// `topologyManagerScope`, `container` when it says none). A pod of one container is
    /// aligned alike in both scopes: this picks the node groups to count.
    #[arg(long, value_enum)]
    scope: Option<Scope>,
    /// Output format: a table (default) or `json`.
    #[arg(short = 'o', long, value_enum)]
    output: Option<super::fit::Output>,
}

/// A Topology Manager scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// Each container aligned on its own.
    Container,
    /// The whole pod aligned at once.
    Pod,
}

impl Scope {
    /// The kubelet's name of the scope.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Pod => "pod",
        }
    }
}

/// The answer, also its JSON form.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The pod's requests, as given.
    pub shape: BTreeMap<String, String>,
    /// Every node with an NRT.
    pub nodes: Vec<NodeAnswer>,
    /// The pods the nodes can take together.
    pub total: u64,
    /// Of those, the ones on nodes whose kubelet enforces one NUMA zone per pod.
    pub aligned_total: u64,
    /// Whether the Nodes and their pods could be read (else the node-level limit is unknown).
    pub nodes_known: bool,
    /// The scope counted (`--scope`), and how many nodes of the other were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeCounted>,
}

/// What `--scope` left out.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeCounted {
    /// The scope counted.
    pub scope: &'static str,
    /// The nodes of another scope, not counted.
    pub nodes_left_out: usize,
}

/// One node's room.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAnswer {
    /// The node.
    pub node: String,
    /// Its room.
    #[serde(flatten)]
    pub room: NodeRoom,
}

impl CapacityArgs {
    /// The shape: each request in thousandths, and as given.
    fn shape(&self) -> anyhow::Result<(Resources, BTreeMap<String, String>)> {
        let mut given =
            BTreeMap::from([("cpu".to_owned(), self.cpu.clone()), ("memory".to_owned(), self.memory.clone())]);
        for (name, value) in [("hugepages-1Gi", &self.hugepages_1gi), ("hugepages-2Mi", &self.hugepages_2mi)] {
            if let Some(value) = value {
                given.insert(name.to_owned(), value.clone());
            }
        }
        for device in &self.devices {
            let Some((name, count)) = device.split_once('=') else {
                bail!("--device {device}: give NAME=COUNT, as example.com/nic=1");
            };
            given.insert(name.to_owned(), count.to_owned());
        }
        let mut requests = Resources::new();
        for (name, value) in &given {
            let quantity = Quantity::parse(value).with_context(|| format!("{name} {value:?}: not a quantity"))?;
            let millis = quantity.ceil_milli_i64().filter(|m| *m > 0);
            let Some(millis) = millis else { bail!("{name} {value:?}: must be more than zero") };
            requests.insert(name.clone(), millis);
        }
        Ok((requests, given))
    }
}

/// Runs `capacity`.
pub async fn run(client: &kube::Client, args: CapacityArgs) -> anyhow::Result<ExitCode> {
    let (requests, given) = args.shape()?;
    let (reports, _) = fleet::reports(client, None).await?;
    let nodes = fleet::node_resources(client).await;
    let bound = fleet::bound_pods(client).await;
    let on_nodes = fleet::with_bound_pods(nodes, bound.as_deref());
    let answer = answer(&requests, given, &reports, on_nodes.as_ref(), args.scope);
    super::print_answer(args.output, &answer, render_text)?;
    Ok(if answer.total > 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Every node's room, the most first.
pub fn answer(
    requests: &Resources,
    shape: BTreeMap<String, String>,
    reports: &[fleet::Report],
    nodes: Option<&BTreeMap<String, NodeResources>>,
    scope: Option<Scope>,
) -> Answer {
    let mut answers: Vec<NodeAnswer> = reports
        .iter()
        .map(|report| {
            let name = report.nrt.metadata.name.clone().unwrap_or_default();
            let node = nodes.and_then(|nodes| nodes.get(&name));
            NodeAnswer { room: room(requests, &report.nrt, node), node: name }
        })
        .collect();
    let before = answers.len();
    if let Some(scope) = scope {
        answers.retain(|answer| answer.room.scope == scope.as_str());
    }
    let scope = scope.map(|scope| ScopeCounted { scope: scope.as_str(), nodes_left_out: before - answers.len() });
    answers.sort_by(|a, b| b.room.pods.cmp(&a.room.pods).then_with(|| a.node.cmp(&b.node)));
    let total = answers.iter().map(|n| n.room.pods).fold(0, u64::saturating_add);
    let aligned_total = answers.iter().filter(|n| n.room.aligned).map(|n| n.room.pods).fold(0, u64::saturating_add);
    Answer { shape, nodes: answers, total, aligned_total, nodes_known: nodes.is_some(), scope }
}

/// The table: one line per node, its zones, then the total.
pub fn render_text(answer: &Answer, paint: Paint) -> String {
    let shape: Vec<String> = answer.shape.iter().map(|(name, value)| format!("{name} {value}")).collect();
    let mut out = format!("pods of {} (Guaranteed), each on one NUMA zone\n", shape.join(", "));
    if !answer.nodes_known {
        out.push_str(
            "note: Nodes or Pods cannot be listed here: what the Nodes allow beyond their NUMA zones is not counted\n",
        );
    }
    if let Some(counted) = &answer.scope {
        out.push_str(&format!(
            "nodes whose kubelet aligns at {} scope only: {} of another scope left out\n",
            counted.scope, counted.nodes_left_out
        ));
    }
    let width = answer.nodes.iter().map(|n| n.node.len()).max().unwrap_or(4).max(4);
    out.push_str(&format!("{:width$}  {:18}  {:>5}  NUMA ZONES\n", "NODE", "POLICY", "PODS"));
    for node in &answer.nodes {
        let room = &node.room;
        let zones: Vec<String> = room
            .zones
            .iter()
            .map(|zone| match (zone.pods, &zone.limited_by) {
                (Some(pods), Some(resource)) => format!("node-{}: {pods} ({resource})", zone.numa),
                _ => format!("node-{}: -", zone.numa),
            })
            .collect();
        let mut line = format!("{:width$}  {:18}  {:>5}  {}", node.node, room.policy, room.pods, zones.join(", "));
        if let Some((limit, resource)) = &room.node_limit
            && *limit < room.zones.iter().filter_map(|z| z.pods).sum::<u64>()
        {
            line.push_str(&format!("; the Node allows {limit} ({resource})"));
        }
        if !room.aligned && room.pods > 0 {
            line.push_str(&format!("; {} does not make the kubelet align them", room.policy));
        }
        out.push_str(&if room.pods == 0 { paint.red(&line) } else { line });
        out.push('\n');
    }
    out.push_str(&format!(
        "total: {} pods on {} nodes, {} of them where the kubelet enforces one NUMA zone (single-numa-node)\n",
        answer.total,
        answer.nodes.len(),
        answer.aligned_total
    ));
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::*;
    use crate::numa::fleet::{Age, AgeSource, Report};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        capacity: CapacityArgs,
    }

    fn report(name: &str, policy: &str, zones: &[(i64, &str)]) -> Report {
        report_in_scope(name, policy, "container", zones)
    }

    fn report_in_scope(name: &str, policy: &str, scope: &str, zones: &[(i64, &str)]) -> Report {
        let zones: Vec<_> = zones
            .iter()
            .enumerate()
            .map(|(id, (cpus, memory))| json!({"name": format!("node-{id}"), "type": "Node", "resources": [
                {"name": "cpu", "capacity": cpus.to_string(), "allocatable": cpus.to_string(), "available": cpus.to_string()},
                {"name": "memory", "capacity": memory, "allocatable": memory, "available": memory}]}))
            .collect();
        let nrt = serde_json::from_value(json!({"metadata": {"name": name},
            "attributes": [{"name": "topologyManagerPolicy", "value": policy},
                           {"name": "topologyManagerScope", "value": scope}], "zones": zones}))
        .unwrap();
        Report { nrt, age: Some(Age { seconds: 5, source: AgeSource::Reported }) }
    }

    #[test]
    fn each_node_says_how_many_more_pods_its_zones_hold_and_what_runs_out() {
        let args = Cli::parse_from(["capacity", "--cpu", "4", "--memory", "8Gi"]).capacity;
        let (requests, shape) = args.shape().unwrap();
        let reports = [
            report("worker-0", "single-numa-node", &[(8, "16Gi"), (4, "32Gi")]),
            report("worker-1", "best-effort", &[(16, "8Gi")]),
            report("worker-2", "single-numa-node", &[(2, "64Gi")]),
        ];
        let text = render_text(&answer(&requests, shape, &reports, None, None), Paint::new(false));
        assert_eq!(
            text,
            "pods of cpu 4, memory 8Gi (Guaranteed), each on one NUMA zone\n\
             note: Nodes or Pods cannot be listed here: what the Nodes allow beyond their NUMA zones is not counted\n\
             NODE      POLICY               PODS  NUMA ZONES\n\
             worker-0  single-numa-node        3  node-0: 2 (cpu), node-1: 1 (cpu)\n\
             worker-1  best-effort             1  node-0: 1 (memory); best-effort does not make the kubelet align them\n\
             worker-2  single-numa-node        0  node-0: 0 (cpu)\n\
             total: 4 pods on 3 nodes, 3 of them where the kubelet enforces one NUMA zone (single-numa-node)\n"
        );
    }

    #[test]
    fn scope_counts_only_the_nodes_aligning_at_that_scope() {
        let args = Cli::parse_from(["capacity", "--cpu", "4", "--memory", "8Gi", "--scope", "pod"]).capacity;
        let (requests, shape) = args.shape().unwrap();
        let reports = [
            report_in_scope("worker-0", "single-numa-node", "pod", &[(8, "16Gi")]),
            report("worker-1", "single-numa-node", &[(16, "64Gi")]),
        ];
        let counted = answer(&requests, shape.clone(), &reports, None, args.scope);
        assert_eq!(counted.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["worker-0"]);
        assert_eq!(counted.total, 2);
        let text = render_text(&counted, Paint::new(false));
        assert!(text.contains("nodes whose kubelet aligns at pod scope only: 1 of another scope left out"), "{text}");
        let json = serde_json::to_value(&counted).unwrap();
        assert_eq!(json["scope"], json!({"scope": "pod", "nodesLeftOut": 1}));
        assert_eq!(json["nodes"][0]["scope"], "pod");
        // Without --scope every node counts.
        assert_eq!(answer(&requests, shape, &reports, None, None).total, 6);
    }

    #[test]
    fn a_shape_is_checked_before_anything_is_read() {
        let shape = |extra: &[&str]| {
            let mut args = vec!["capacity", "--cpu", "2", "--memory", "1Gi"];
            args.extend_from_slice(extra);
            Cli::parse_from(args).capacity.shape()
        };
        let (requests, _) = shape(&["--hugepages-1Gi", "2Gi", "--device", "example.com/nic=1"]).unwrap();
        assert_eq!(requests["hugepages-1Gi"], 2 * (1 << 30) * 1000);
        assert_eq!(requests["example.com/nic"], 1000);
        assert!(shape(&["--device", "example.com/nic"]).unwrap_err().to_string().contains("NAME=COUNT"));
        assert!(shape(&["--hugepages-2Mi", "0"]).unwrap_err().to_string().contains("more than zero"));
        assert!(shape(&["--hugepages-2Mi", "lots"]).unwrap_err().to_string().contains("not a quantity"));
    }
}
