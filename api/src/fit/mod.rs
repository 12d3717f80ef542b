//! Would this pod fit, and where: the scheduler plugin NodeResourceTopologyMatch's filter and
//! score as pure functions over a pod, a node's NRT and the Node's resources (kube-scheduler's own
//! node-level fit comes first).
//!
//! ```text
//!   pod       what a pod asks for: QoS class, per-container and effective requests, and what
//!             about the pod itself the filter treats specially (BestEffort, Burstable,
//!             fractional CPUs)
//!   topology  the node as the plugin reads it: topology manager policy/scope, NUMA zones
//!   filter    fits on NUMA X, or the request that stops it
//!   score     LeastAllocated / MostAllocated / BalancedAllocation
//! ```
//!
//! `kubectl numa fit` answers with these, so what it says is what the scheduler decides, as
//! long as the NRT it reads is the one the scheduler reads: with the over-reserve cache the
//! scheduler reads [`reserved_view`] instead, the NRT less the pods it placed since (which
//! pods, a reader can only infer; see [`overreserve`]).

pub mod capacity;
pub mod explain;
mod filter;
pub mod kubelet;
mod node;
pub mod overreserve;
mod pod;
mod score;
mod topology;

#[cfg(test)]
mod tests;

use serde::Serialize;

pub use filter::{Filtered, Placement, Rejection, Unchecked, filter};
pub use node::{NodeResources, NodeShortfall};
pub use overreserve::{has_exclusive_resources, reserved_view};
pub use pod::{ContainerRequests, PodProblem, PodRequests, Requester, Resources, format_amount};
pub use score::{MAX_NODE_SCORE, score};
pub use topology::{MAX_NUMA_ID, Numa, TopologyManagerConfig, numa_zones};

use crate::nrt::NodeResourceTopology;
use crate::operator::ScoringStrategyParams;

/// The filter's verdict and, when the node passes, its score.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeFit {
    /// What the filter decides.
    #[serde(flatten)]
    pub filtered: Filtered,
    /// The score among the nodes that pass (None when refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<i64>,
}

/// Filters and, when the node passes, scores it.
pub fn evaluate(
    pod: &PodRequests,
    nrt: Option<&NodeResourceTopology>,
    node: Option<&NodeResources>,
    strategy: &ScoringStrategyParams,
) -> NodeFit {
    let filtered = filter(pod, nrt, node);
    let score = match filtered {
        Filtered::Rejected(_) => None,
        _ => Some(score(pod, nrt, strategy)),
    };
    NodeFit { filtered, score }
}
