//! A Pending pod's placement in one message a person reads in `kubectl describe pod`: how many
//! nodes the NUMA rules would take it on, and for the others the reason per node, shortest first,
//! within what an Event's message may hold (`… and 4,812 more nodes: cpu`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::NodeFit;
use super::filter::{Filtered, Rejection, Unchecked};
use crate::qos::is_hugepages;

/// The longest Event message kube-apiserver keeps (longer ones are cut).
pub const EVENT_MESSAGE_LIMIT: usize = 1024;

/// What stops a pod on a node, in a word: a fixed set (metric labels, summaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonKind {
    /// Not enough CPUs on any one NUMA zone.
    Cpu,
    /// Not enough memory on any one NUMA zone.
    Memory,
    /// Not enough hugepages on any one NUMA zone.
    Hugepages,
    /// Not enough of a device on any one NUMA zone.
    Device,
    /// Every resource fits some zone, no zone fits them all.
    Split,
    /// A resource no NUMA zone lists (memory without the Static memory manager, say).
    NoZone,
    /// kube-scheduler's node-level fit: the Node itself is full.
    Node,
}

impl ReasonKind {
    /// Every kind, for a metric's fixed label set.
    pub const ALL: [Self; 7] =
        [Self::Cpu, Self::Memory, Self::Hugepages, Self::Device, Self::Split, Self::NoZone, Self::Node];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Memory => "memory",
            Self::Hugepages => "hugepages",
            Self::Device => "device",
            Self::Split => "split",
            Self::NoZone => "no-zone",
            Self::Node => "node",
        }
    }

    /// The kind of a rejection.
    pub fn of(rejection: &Rejection) -> Self {
        let by_resource = |resource: &str| match resource {
            "cpu" => Self::Cpu,
            "memory" => Self::Memory,
            resource if is_hugepages(resource) => Self::Hugepages,
            _ => Self::Device,
        };
        match rejection {
            Rejection::Insufficient { resource, .. } => by_resource(resource),
            Rejection::InNoZone { .. } => Self::NoZone,
            Rejection::Split { .. } => Self::Split,
            Rejection::Node(_) => Self::Node,
        }
    }
}

/// A pod's placement across the nodes, in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The message, at most the limit asked for.
    pub message: String,
    /// The most common reason the nodes refuse it (None: none refuses it).
    pub first_reason: Option<ReasonKind>,
}

/// Explains `verdicts` (each node's name and verdict) in at most `limit` bytes.
pub fn explain(verdicts: &[(String, NodeFit)], limit: usize) -> Explanation {
    let mut fitting = Vec::new();
    let mut unchecked = 0usize;
    let mut refused: Vec<(&str, String, ReasonKind)> = Vec::new();
    for (node, fit) in verdicts {
        match &fit.filtered {
            Filtered::Fits { .. } => fitting.push(node.as_str()),
            Filtered::Unchecked(Unchecked::BestEffortPod) => {}
            Filtered::Unchecked(_) => unchecked += 1,
            Filtered::Rejected(rejection) => refused.push((node, rejection.to_string(), ReasonKind::of(rejection))),
        }
    }
    // Shortest first: the most nodes named within the limit, the plainest reasons on top.
    refused.sort_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| a.0.cmp(b.0)));
    let mut counts: BTreeMap<ReasonKind, usize> = BTreeMap::new();
    for (_, _, kind) in &refused {
        *counts.entry(*kind).or_default() += 1;
    }
    let first_reason = counts.iter().max_by_key(|(kind, count)| (**count, std::cmp::Reverse(**kind))).map(|(k, _)| *k);

    let mut message = format!("{}/{} nodes can take it on one NUMA zone", fitting.len(), verdicts.len());
    if !fitting.is_empty() {
        message.push_str(&format!(" ({}: the NUMA rules would place it there)", names(&fitting, 3)));
    }
    if unchecked > 0 {
        message.push_str(&format!(
            "; {unchecked} let it through unchecked (no NRT, or a topology manager policy the scheduler does not filter)"
        ));
    }
    if refused.is_empty() {
        return Explanation { message: truncate(message, limit), first_reason };
    }
    message.push_str("; ");
    let mut named = 0;
    for (index, (node, reason, _)) in refused.iter().enumerate() {
        let piece = format!("{}{node}: {reason}", if index == 0 { "" } else { "; " });
        let rest = &refused[index + 1..];
        // Room is kept for the summary of the nodes not named.
        let summary = more(rest.len(), rest.iter().map(|(_, _, kind)| *kind));
        if message.len() + piece.len() + summary.len() > limit {
            break;
        }
        message.push_str(&piece);
        named += 1;
    }
    let rest = &refused[named..];
    let summary = more(rest.len(), rest.iter().map(|(_, _, kind)| *kind));
    if named == 0 {
        // Not even one reason fits: the kinds alone.
        message.push_str(&summary.replacen("; … and ", "", 1).replacen(" more node", " node", 1));
    } else {
        message.push_str(&summary);
    }
    Explanation { message: truncate(message, limit), first_reason }
}

/// `; … and N more nodes: cpu, memory` for the nodes not named (their kinds, most common first).
fn more(count: usize, kinds: impl Iterator<Item = ReasonKind>) -> String {
    if count == 0 {
        return String::new();
    }
    let mut counts: BTreeMap<ReasonKind, usize> = BTreeMap::new();
    for kind in kinds {
        *counts.entry(kind).or_default() += 1;
    }
    let mut by_count: Vec<(ReasonKind, usize)> = counts.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let kinds: Vec<&str> = by_count.iter().map(|(kind, _)| kind.label()).collect();
    format!("; … and {} more node{}: {}", thousands(count), if count == 1 { "" } else { "s" }, kinds.join(", "))
}

/// Up to `shown` names, then how many more.
fn names(nodes: &[&str], shown: usize) -> String {
    let mut text = nodes.iter().take(shown).copied().collect::<Vec<_>>().join(", ");
    if nodes.len() > shown {
        text.push_str(&format!(" and {} more", thousands(nodes.len() - shown)));
    }
    text
}

/// 4812 → `4,812`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `text` cut to at most `limit` bytes on a character boundary (only when the fixed parts alone
/// are longer).
fn truncate(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit.saturating_sub('…'.len_utf8());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}
