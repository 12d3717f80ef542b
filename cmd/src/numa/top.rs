//! `kubectl numa top`: where NUMA headroom is left. A summary line first, then one block per
//! node (policy/scope, report age, stale reports marked) with one row per NUMA zone: cpu,
//! memory, hugepages and devices as available/allocatable with a bar.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use futures_util::StreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use numaresources_api::fit::TopologyManagerConfig;
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::{ATTR_MEMORY_NUMA_MANAGED, ZONE_TYPE_NODE};
use serde::Serialize;

use super::fleet::{self, AgeSource, Report};
use super::style::{self, Paint};

/// At most one redraw per this interval while watching: a busy fleet sends many events.
const WATCH_REDRAW_INTERVAL: Duration = Duration::from_secs(1);
/// How long a watch request lasts before it is renewed (the server's limit may be shorter).
const WATCH_TIMEOUT_SECONDS: u32 = 290;

/// `top`'s flags.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Only nodes whose NRT matches this label selector (`pool=cnf`, `tier in (a,b)`).
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Order of the nodes.
    #[arg(long, value_enum, default_value_t = SortBy::Headroom)]
    sort_by: SortBy,
    /// Show only the first N nodes (the summary still counts them all).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// Keep running and redraw when an NRT changes.
    #[arg(short = 'w', long)]
    watch: bool,
    /// Output format: the text view (default), `wide` (every hugepages size and device in its
    /// own column), `json` or `yaml`.
    #[arg(short = 'o', long, value_enum)]
    output: Option<Output>,
    /// A report older than this is marked stale (three heartbeats of the exporter by default).
    #[arg(long, default_value = "3m", value_parser = fleet::parse_duration)]
    stale_after: Duration,
}

/// How nodes are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SortBy {
    /// Most CPUs free on one NUMA zone first (then memory): where the next aligned pod fits.
    Headroom,
    /// Most CPUs free on the whole node first.
    Cpu,
    /// Most memory free on one NUMA zone first.
    Memory,
    /// Oldest report first.
    Age,
    /// By name.
    Name,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Every resource in its own column.
    Wide,
    /// The model as JSON.
    Json,
    /// The model as YAML.
    Yaml,
}

/// What `top` shows, also its JSON/YAML form.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    /// Totals over every node matched.
    pub summary: Summary,
    /// The nodes shown, in order.
    pub nodes: Vec<NodeView>,
}

/// Totals over every matched node.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Nodes matched.
    pub nodes: usize,
    /// Nodes shown (`--top`).
    pub shown: usize,
    /// NUMA zones.
    pub zones: usize,
    /// Nodes whose report is older than `--stale-after`.
    pub stale: usize,
    /// Order of the nodes.
    pub sorted_by: SortBy,
    /// Available and allocatable CPUs over all zones.
    pub cpu: Totals,
    /// Available and allocatable memory over all zones.
    pub memory: Totals,
}

/// An available/allocatable pair.
#[derive(Debug, Serialize)]
pub struct Totals {
    /// Available.
    pub available: String,
    /// Allocatable.
    pub allocatable: String,
}

/// One node.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    /// The node's name.
    pub name: String,
    /// Topology manager policy.
    pub policy: String,
    /// Topology manager scope.
    pub scope: String,
    /// Seconds since the last report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_age_seconds: Option<u64>,
    /// Where the age comes from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_age_source: Option<AgeSource>,
    /// Older than `--stale-after`.
    pub stale: bool,
    /// How the node's memory is accounted.
    pub memory: MemoryAccounting,
    /// NUMA zones, by id.
    pub zones: Vec<ZoneView>,
}

/// How a node's NRT accounts memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MemoryAccounting {
    /// Per NUMA zone (the kubelet's Static memory manager).
    PerNuma,
    /// The node's totals in every zone (`memoryNUMAManaged=false`): the kubelet does not manage
    /// memory per NUMA node.
    NodeLevel,
    /// No zone lists memory: the kubelet does not manage it per NUMA node, and the exporter
    /// publishes nothing for it (upstream's output), so the NUMA-aware scheduler refuses every
    /// pod that requests memory there.
    NotReported,
}

impl MemoryAccounting {
    fn of(nrt: &NodeResourceTopology) -> Self {
        let node_level = nrt
            .zones
            .iter()
            .any(|zone| zone.attributes.iter().any(|a| a.name == ATTR_MEMORY_NUMA_MANAGED && a.value == "false"));
        let listed = nrt.zones.iter().any(|zone| zone.resources.iter().any(|r| r.name == "memory"));
        match (node_level, listed) {
            (true, _) => Self::NodeLevel,
            (false, true) => Self::PerNuma,
            (false, false) => Self::NotReported,
        }
    }

    /// What a person should know, in one sentence naming `node`; nothing when per NUMA.
    fn note(self, node: &str) -> Option<String> {
        match self {
            Self::PerNuma => None,
            Self::NodeLevel => Some(format!(
                "memory is not NUMA-managed on {node} (its kubelet's memory manager is not Static): MEMORY is the \
                 node's total in each zone, and memory is checked for the whole node only"
            )),
            Self::NotReported => Some(format!(
                "memory is not NUMA-managed on {node} (its kubelet's memory manager is not Static) and its exporter \
                 publishes none per zone: the NUMA-aware scheduler refuses every pod requesting memory there"
            )),
        }
    }
}

/// One NUMA zone.
#[derive(Debug, Serialize)]
pub struct ZoneView {
    /// `node-<id>`.
    pub name: String,
    /// Its resources.
    pub resources: Vec<ResourceView>,
}

/// One resource of a zone.
#[derive(Debug, Serialize)]
pub struct ResourceView {
    /// Resource name.
    pub name: String,
    /// Available, as a quantity.
    pub available: String,
    /// Allocatable, as a quantity.
    pub allocatable: String,
    #[serde(skip)]
    available_millis: i64,
    #[serde(skip)]
    allocatable_millis: i64,
}

impl NodeView {
    fn of(report: &Report, stale_after: Duration) -> Self {
        let nrt = &report.nrt;
        let config = TopologyManagerConfig::of(nrt);
        Self {
            name: nrt.metadata.name.clone().unwrap_or_default(),
            policy: config.policy,
            scope: config.scope,
            report_age_seconds: report.age.map(|a| a.seconds),
            report_age_source: report.age.map(|a| a.source),
            stale: report.age.is_some_and(|a| a.seconds > stale_after.as_secs()),
            memory: MemoryAccounting::of(nrt),
            zones: zones(nrt),
        }
    }

    /// The largest amount of `resource` free on one zone.
    fn best_zone(&self, resource: &str) -> i64 {
        self.zones.iter().filter_map(|z| z.get(resource)).map(|r| r.available_millis).max().unwrap_or(0)
    }

    fn total(&self, resource: &str) -> (i64, i64) {
        let mut amounts = self.zones.iter().filter_map(|z| z.get(resource));
        if self.memory == MemoryAccounting::NodeLevel && (resource == "memory" || resource.starts_with("hugepages-")) {
            // Every zone holds the node's total: counted once.
            return amounts.next().map_or((0, 0), |r| (r.available_millis, r.allocatable_millis));
        }
        amounts.fold((0, 0), |(a, b), r| (a.saturating_add(r.available_millis), b.saturating_add(r.allocatable_millis)))
    }
}

impl ZoneView {
    fn get(&self, resource: &str) -> Option<&ResourceView> {
        self.resources.iter().find(|r| r.name == resource)
    }
}

/// The NUMA zones of an NRT, by id, with their resources by name.
fn zones(nrt: &NodeResourceTopology) -> Vec<ZoneView> {
    let mut zones: Vec<(u32, ZoneView)> = nrt
        .zones
        .iter()
        .filter(|z| z.zone_type == ZONE_TYPE_NODE)
        .map(|zone| {
            let id = numaresources_api::nrt::well_known::numa_id_from_zone_name(&zone.name).unwrap_or(u32::MAX);
            let mut resources: Vec<ResourceView> = zone
                .resources
                .iter()
                .map(|r| ResourceView {
                    name: r.name.to_string(),
                    available: r.available.to_string(),
                    allocatable: r.allocatable.to_string(),
                    available_millis: r.available.ceil_milli_i64().unwrap_or(i64::MAX),
                    allocatable_millis: r.allocatable.ceil_milli_i64().unwrap_or(i64::MAX),
                })
                .collect();
            resources.sort_by(|a, b| a.name.cmp(&b.name));
            (id, ZoneView { name: zone.name.to_string(), resources })
        })
        .collect();
    zones.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    zones.into_iter().map(|(_, zone)| zone).collect()
}

/// Builds the view: every report summarised, sorted, the first `top` kept.
pub fn fleet(reports: &[Report], sort_by: SortBy, top: Option<usize>, stale_after: Duration) -> Fleet {
    let mut nodes: Vec<NodeView> = reports.iter().map(|r| NodeView::of(r, stale_after)).collect();
    let by_name = |a: &NodeView, b: &NodeView| a.name.cmp(&b.name);
    match sort_by {
        SortBy::Headroom => nodes.sort_by(|a, b| {
            (b.best_zone("cpu"), b.best_zone("memory"))
                .cmp(&(a.best_zone("cpu"), a.best_zone("memory")))
                .then_with(|| by_name(a, b))
        }),
        SortBy::Cpu => nodes.sort_by(|a, b| b.total("cpu").0.cmp(&a.total("cpu").0).then_with(|| by_name(a, b))),
        SortBy::Memory => {
            nodes.sort_by(|a, b| b.best_zone("memory").cmp(&a.best_zone("memory")).then_with(|| by_name(a, b)))
        }
        // Unknown ages sort as the oldest: they deserve a look first.
        SortBy::Age => nodes.sort_by(|a, b| {
            b.report_age_seconds
                .unwrap_or(u64::MAX)
                .cmp(&a.report_age_seconds.unwrap_or(u64::MAX))
                .then_with(|| by_name(a, b))
        }),
        SortBy::Name => nodes.sort_by(by_name),
    }
    let sum = |resource: &str| {
        nodes
            .iter()
            .map(|n| n.total(resource))
            .fold((0_i64, 0_i64), |(a, b), (x, y)| (a.saturating_add(x), b.saturating_add(y)))
    };
    let totals = |resource: &str| {
        let (available, allocatable) = sum(resource);
        Totals { available: style::human(resource, available), allocatable: style::human(resource, allocatable) }
    };
    let summary = Summary {
        nodes: nodes.len(),
        shown: top.map_or(nodes.len(), |n| n.min(nodes.len())),
        zones: nodes.iter().map(|n| n.zones.len()).sum(),
        stale: nodes.iter().filter(|n| n.stale).count(),
        sorted_by: sort_by,
        cpu: totals("cpu"),
        memory: totals("memory"),
    };
    nodes.truncate(summary.shown);
    Fleet { summary, nodes }
}

/// The text view (`wide`: every resource in its own column).
pub fn render_text(fleet: &Fleet, wide: bool, paint: Paint) -> String {
    let s = &fleet.summary;
    let mut out = format!(
        "{} nodes, {} NUMA zones, {} stale; cpu {}/{} available, memory {}/{} available; sorted by {}",
        s.nodes,
        s.zones,
        if s.stale > 0 { paint.red(&s.stale.to_string()) } else { s.stale.to_string() },
        s.cpu.available,
        s.cpu.allocatable,
        s.memory.available,
        s.memory.allocatable,
        format!("{:?}", s.sorted_by).to_lowercase(),
    );
    if s.shown < s.nodes {
        out.push_str(&format!(" (top {} shown)", s.shown));
    }
    out.push('\n');
    let columns = columns(fleet, wide);
    for node in &fleet.nodes {
        let age = match node.report_age_seconds {
            Some(seconds) => format!("reported {} ago", style::age(seconds)),
            None => "report age unknown".to_owned(),
        };
        let stale = if node.stale { format!("  {}", paint.red("STALE")) } else { String::new() };
        out.push_str(&format!("\n{}  {}/{}  {age}{stale}\n", paint.bold(&node.name), node.policy, node.scope));
        if let Some(note) = node.memory.note(&node.name) {
            out.push_str(&format!("  {note}\n"));
        }
        render_zones(&mut out, node, &columns, paint);
    }
    out
}

/// A column of the zone table: its heading and the resources it adds up.
struct ZoneColumn {
    heading: String,
    resources: Vec<String>,
    /// Narrow devices column: every device listed by name.
    list: bool,
}

fn columns(fleet: &Fleet, wide: bool) -> Vec<ZoneColumn> {
    let names: BTreeSet<&str> =
        fleet.nodes.iter().flat_map(|n| &n.zones).flat_map(|z| &z.resources).map(|r| r.name.as_str()).collect();
    let hugepages: Vec<String> = names.iter().filter(|n| n.starts_with("hugepages-")).map(|n| n.to_string()).collect();
    let devices: Vec<String> = names
        .iter()
        .filter(|n| !["cpu", "memory", "ephemeral-storage"].contains(n) && !n.starts_with("hugepages-"))
        .map(|n| n.to_string())
        .collect();
    let single =
        |name: &str| ZoneColumn { heading: name.to_uppercase(), resources: vec![name.to_owned()], list: false };
    let mut columns = vec![single("cpu"), single("memory")];
    if wide {
        columns.extend(hugepages.iter().chain(&devices).map(|n| single(n)));
    } else {
        columns.push(ZoneColumn { heading: "HUGEPAGES".to_owned(), resources: hugepages, list: false });
        columns.push(ZoneColumn { heading: "DEVICES".to_owned(), resources: devices, list: true });
    }
    columns
}

fn render_zones(out: &mut String, node: &NodeView, columns: &[ZoneColumn], paint: Paint) {
    // Plain cells first (to measure), bars painted after padding.
    let rows: Vec<Vec<Cell>> = node
        .zones
        .iter()
        .map(|zone| {
            let mut cells = vec![(zone.name.clone(), None)];
            for column in columns {
                cells.push(cell(zone, column));
            }
            cells
        })
        .collect();
    let headings: Vec<&str> = std::iter::once("ZONE").chain(columns.iter().map(|c| c.heading.as_str())).collect();
    let widths: Vec<usize> = (0..headings.len())
        .map(|i| rows.iter().map(|r| r[i].0.len()).chain([headings[i].len()]).max().unwrap_or(0))
        .collect();
    let bar_width = paint_width();
    let mut line = String::new();
    for (i, heading) in headings.iter().enumerate() {
        let pad = widths[i] + if i == 0 || rows.iter().all(|r| r[i].1.is_none()) { 0 } else { bar_width + 1 };
        line.push_str(&format!("  {heading:<pad$}"));
    }
    out.push_str(line.trim_end());
    out.push('\n');
    for row in &rows {
        let mut line = String::new();
        for (i, (text, bar)) in row.iter().enumerate() {
            line.push_str(&format!("  {text:<width$}", width = widths[i]));
            match bar {
                Some((available, allocatable)) => line.push_str(&format!(" {}", paint.bar(*available, *allocatable))),
                None if i > 0 && rows.iter().any(|r| r[i].1.is_some()) => line.push_str(&" ".repeat(bar_width + 1)),
                None => {}
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn paint_width() -> usize {
    Paint::new(false).bar(0, 1).len()
}

/// A cell's text and, for amounts, the available/allocatable pair its bar shows.
type Cell = (String, Option<(i64, i64)>);

/// One cell: `available/allocatable` and the pair for its bar, or `-` when the zone has none.
fn cell(zone: &ZoneView, column: &ZoneColumn) -> Cell {
    let present: Vec<&ResourceView> = column.resources.iter().filter_map(|name| zone.get(name)).collect();
    if present.is_empty() {
        return ("-".to_owned(), None);
    }
    if column.list {
        let text = present
            .iter()
            .map(|r| {
                format!(
                    "{} {}/{}",
                    r.name,
                    style::human(&r.name, r.available_millis),
                    style::human(&r.name, r.allocatable_millis)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        return (text, None);
    }
    let available = present.iter().map(|r| r.available_millis).fold(0_i64, i64::saturating_add);
    let allocatable = present.iter().map(|r| r.allocatable_millis).fold(0_i64, i64::saturating_add);
    let unit = present[0].name.as_str();
    (format!("{}/{}", style::human(unit, available), style::human(unit, allocatable)), Some((available, allocatable)))
}

/// Runs `top`.
pub async fn run(client: &kube::Client, args: TopArgs) -> anyhow::Result<ExitCode> {
    let paint = Paint::new(style::colour_wanted());
    let mut stdout = std::io::stdout();
    let (reports, mut version) = fleet::reports(client, args.selector.as_deref()).await?;
    write_frame(&mut stdout, &args, &reports, paint, false)?;
    if !args.watch {
        return Ok(ExitCode::SUCCESS);
    }
    let api: Api<NodeResourceTopology> = Api::all(client.clone());
    loop {
        let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECONDS);
        if let Some(selector) = &args.selector {
            params = params.labels(selector);
        }
        let stream = api.watch(&params, &version).await?;
        let mut stream = std::pin::pin!(stream);
        let mut changed = false;
        let mut last_draw = tokio::time::Instant::now();
        loop {
            let next = if changed {
                // Something changed: draw once the redraw interval has passed, whatever comes.
                match tokio::time::timeout_at(last_draw + WATCH_REDRAW_INTERVAL, stream.next()).await {
                    Ok(event) => event,
                    Err(_elapsed) => {
                        let (reports, _) = fleet::reports(client, args.selector.as_deref()).await?;
                        write_frame(&mut stdout, &args, &reports, paint, true)?;
                        (changed, last_draw) = (false, tokio::time::Instant::now());
                        continue;
                    }
                }
            } else {
                stream.next().await
            };
            match next {
                Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o))) => {
                    version = o.metadata.resource_version.unwrap_or(version);
                    changed = true;
                }
                Some(Ok(WatchEvent::Bookmark(b))) => version = b.metadata.resource_version,
                // Expired or failed: start over from a fresh list.
                Some(Ok(WatchEvent::Error(_)) | Err(_)) => {
                    let (reports, fresh) = fleet::reports(client, args.selector.as_deref()).await?;
                    write_frame(&mut stdout, &args, &reports, paint, true)?;
                    version = fresh;
                    break;
                }
                None => break,
            }
        }
        if changed {
            let (reports, _) = fleet::reports(client, args.selector.as_deref()).await?;
            write_frame(&mut stdout, &args, &reports, paint, true)?;
        }
    }
}

/// Writes one frame; a redraw on a terminal clears the screen first, elsewhere frames follow
/// one another after a blank line.
fn write_frame(
    out: &mut impl Write,
    args: &TopArgs,
    reports: &[Report],
    paint: Paint,
    redraw: bool,
) -> anyhow::Result<()> {
    let view = fleet(reports, args.sort_by, args.top, args.stale_after);
    let text = match args.output {
        Some(Output::Json) => serde_json::to_string_pretty(&view)? + "\n",
        Some(Output::Yaml) => serde_norway::to_string(&view)?,
        Some(Output::Wide) => render_text(&view, true, paint),
        None => render_text(&view, false, paint),
    };
    if redraw {
        let separator = if std::io::IsTerminal::is_terminal(&std::io::stdout()) { "\x1b[H\x1b[2J" } else { "\n" };
        out.write_all(separator.as_bytes())?;
    }
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
