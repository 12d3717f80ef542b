//! Whether the scheduler can see every eligible node's NodeResourceTopology.
//!
//! The released scheduler-plugins images list NRTs once when they start, in the cache mode we
//! render (`cacheResyncPeriodSeconds` > 0), and ignore later events for nodes they did not list
//! (`missing cached NodeTopology`): such a node is then unconstrained. So:
//! - the first rollout waits until the NRT API answers and every node of the node groups (the
//!   NUMAResourcesOperator's) has an NRT, for at most [`ROLLOUT_WAIT`], with a condition saying
//!   what it waits for; after that it rolls out anyway and the restarts below catch up;
//! - the pod template carries the time its pods' cache was filled ([`ANNOTATION_CACHE_EPOCH`]);
//!   an eligible node's NRT created after it is one the running pods cannot know, and the
//!   scheduler is restarted (a new epoch, so a rollout), at most once per
//!   [`RESTART_MIN_INTERVAL`], with an Event naming the nodes. A lost and refilled NRT store
//!   recreates every NRT, which counts the same way.
//!
//! The epoch is our clock and `creationTimestamp` the API server's: a skew shows as one extra
//! restart (rate-limited) or a late one, never a missed node for longer than the skew.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::operator::{NUMAResourcesOperator, OPERATOR_SINGLETON_NAME};

use crate::apply::get_opt;
use crate::cluster_nodes;
use crate::context::{Context, Result};
use crate::names::ANNOTATION_MULTIPLE_POOLS;
use crate::nodegroups;

pub use crate::names::ANNOTATION_SCHEDULER_CACHE_EPOCH as ANNOTATION_CACHE_EPOCH;
/// How long the first rollout waits for the API and every eligible node's NRT.
pub const ROLLOUT_WAIT: Duration = Duration::from_secs(300);
/// The least time between two restarts for new NRTs.
pub const RESTART_MIN_INTERVAL: Duration = Duration::from_secs(120);
/// How often a pass looks again while waiting.
pub const WAIT_REQUEUE: Duration = Duration::from_secs(10);
/// Node names a message lists before saying how many more there are.
const NAMES_LISTED: usize = 10;

/// The condition type reporting whether every eligible node has an NRT.
pub const CONDITION: &str = "NodeTopologyComplete";
/// The Progressing reason while the first rollout waits.
pub const REASON_WAITING: &str = "WaitingForNodeTopology";

/// The NRTs against the nodes that should have one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Why the NRT API cannot be listed; `None` when it answers.
    pub not_serving: Option<String>,
    /// The nodes of the NUMAResourcesOperator's node groups.
    pub eligible: BTreeSet<String>,
    /// Each NRT's node (its name) and creation time.
    pub created: BTreeMap<String, Timestamp>,
}

impl Coverage {
    /// Eligible nodes without an NRT.
    pub fn missing(&self) -> Vec<String> {
        self.eligible.iter().filter(|node| !self.created.contains_key(*node)).cloned().collect()
    }

    /// Eligible nodes whose NRT was created after `epoch`.
    pub fn created_after(&self, epoch: Timestamp) -> Vec<String> {
        self.eligible.iter().filter(|node| self.created.get(*node).is_some_and(|t| *t > epoch)).cloned().collect()
    }

    /// Whether the scheduler can see every eligible node.
    pub fn complete(&self) -> bool {
        self.not_serving.is_none() && self.missing().is_empty()
    }

    /// What is missing, for a person; empty when complete.
    pub fn describe(&self) -> String {
        if let Some(why) = &self.not_serving {
            return format!("the NodeResourceTopology API does not answer: {why}");
        }
        let missing = self.missing();
        if missing.is_empty() {
            return String::new();
        }
        format!(
            "{} of {} eligible nodes have no NodeResourceTopology, so the scheduler cannot place NUMA-aligned pods \
             there: {}",
            missing.len(),
            self.eligible.len(),
            list_names(&missing)
        )
    }
}

/// `a, b, c` or `a, …, j and 5 more`.
pub fn list_names(names: &[String]) -> String {
    let shown = names.iter().take(NAMES_LISTED).cloned().collect::<Vec<_>>().join(", ");
    match names.len().saturating_sub(NAMES_LISTED) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// What the first rollout does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    /// Deploy now.
    Go,
    /// Wait: why, for a Progressing condition.
    Wait(String),
}

/// The first rollout's decision: wait while something is missing and `waiting_since` is less
/// than [`ROLLOUT_WAIT`] ago.
pub fn first_rollout(coverage: &Coverage, waiting_since: Timestamp, now: Timestamp) -> Rollout {
    if coverage.complete() {
        return Rollout::Go;
    }
    let waited = now.duration_since(waiting_since).unsigned_abs();
    if waited >= ROLLOUT_WAIT {
        return Rollout::Go;
    }
    Rollout::Wait(format!(
        "waiting up to {}s before deploying the scheduler, which sees only the NodeResourceTopologies present when \
         it starts: {}",
        ROLLOUT_WAIT.as_secs(),
        coverage.describe()
    ))
}

/// Whether running pods whose cache was filled at `epoch` must restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// They know every NRT.
    No,
    /// Restart now, for these nodes.
    Now(Vec<String>),
    /// New NRTs, but the last restart was too recent: look again after this long.
    Later(Duration),
}

/// The restart decision, rate-limited to one per [`RESTART_MIN_INTERVAL`].
pub fn restart(coverage: &Coverage, epoch: Timestamp, now: Timestamp) -> Restart {
    let fresh = coverage.created_after(epoch);
    if fresh.is_empty() {
        return Restart::No;
    }
    let since = now.duration_since(epoch).unsigned_abs();
    match RESTART_MIN_INTERVAL.checked_sub(since) {
        Some(left) if !left.is_zero() => Restart::Later(left),
        _ => Restart::Now(fresh),
    }
}

/// Reads the eligible nodes (from the NUMAResourcesOperator singleton's node groups) and the
/// NRTs (metadata only).
pub async fn observe(ctx: &Context) -> Result<Coverage> {
    let mut coverage = Coverage { eligible: eligible_nodes(ctx).await?, ..Coverage::default() };
    let nrts: Api<PartialObjectMeta<NodeResourceTopology>> = Api::all(ctx.client.clone());
    match nrts.list_metadata(&ListParams::default()).await {
        Ok(list) => {
            for nrt in list.items {
                let (Some(name), Some(created)) = (nrt.metadata.name, nrt.metadata.creation_timestamp) else {
                    continue;
                };
                coverage.created.insert(name, created.0);
            }
        }
        Err(kube::Error::Api(status)) => coverage.not_serving = Some(status.message),
        Err(error) => coverage.not_serving = Some(error.to_string()),
    }
    Ok(coverage)
}

/// The nodes of the operator object's node groups; none without one (or when its groups do not
/// resolve: the operator controller reports that).
async fn eligible_nodes(ctx: &Context) -> Result<BTreeSet<String>> {
    let operators: Api<NUMAResourcesOperator> = Api::all(ctx.client.clone());
    // An object our types cannot read is the operator controller's to report.
    let Ok(Some(nro)) = get_opt(&operators, OPERATOR_SINGLETON_NAME).await else {
        return Ok(BTreeSet::new());
    };
    let groups = nro.spec.normalized().node_groups;
    let (nodes, pools) = cluster_nodes::observe(ctx, &groups).await?;
    let multiple_pools = nro
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_MULTIPLE_POOLS))
        .is_some_and(|v| v == "enabled");
    Ok(match nodegroups::resolve(&groups, &nodes, pools.as_deref(), multiple_pools) {
        Ok(resolution) => resolution.pools.into_iter().flat_map(|pool| pool.nodes).collect(),
        Err(_) => BTreeSet::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn coverage(eligible: &[&str], created: &[(&str, i64)]) -> Coverage {
        Coverage {
            not_serving: None,
            eligible: eligible.iter().map(|n| (*n).to_owned()).collect(),
            created: created.iter().map(|(n, t)| ((*n).to_owned(), at(*t))).collect(),
        }
    }

    #[test]
    fn the_first_rollout_waits_for_every_eligible_node_but_not_forever() {
        let partial = coverage(&["a", "b"], &[("a", 0), ("other", 0)]);
        assert_eq!(partial.missing(), ["b"]);
        let Rollout::Wait(why) = first_rollout(&partial, at(0), at(10)) else { panic!("waits") };
        assert!(why.contains("1 of 2 eligible nodes") && why.contains(": b"), "{why}");
        let bound = i64::try_from(ROLLOUT_WAIT.as_secs()).unwrap();
        assert_eq!(first_rollout(&partial, at(0), at(bound)), Rollout::Go, "bounded");
        assert_eq!(first_rollout(&coverage(&["a"], &[("a", 0)]), at(0), at(0)), Rollout::Go);
        let down = Coverage { not_serving: Some("503".into()), ..coverage(&[], &[]) };
        assert!(matches!(first_rollout(&down, at(0), at(1)), Rollout::Wait(why) if why.contains("does not answer")));
    }

    #[test]
    fn nrts_created_after_the_pods_started_restart_them_at_most_once_per_interval() {
        let epoch = at(0);
        let interval = i64::try_from(RESTART_MIN_INTERVAL.as_secs()).unwrap();
        let known = coverage(&["a", "b"], &[("a", -5), ("b", -5)]);
        assert_eq!(restart(&known, epoch, at(1000)), Restart::No);
        let fresh = coverage(&["a", "b", "c"], &[("a", -5), ("b", interval + 1), ("c", 3), ("ineligible", 9)]);
        assert_eq!(restart(&fresh, epoch, at(interval + 2)), Restart::Now(vec!["b".into(), "c".into()]));
        assert_eq!(restart(&fresh, epoch, at(interval - 20)), Restart::Later(Duration::from_secs(20)));
    }

    #[test]
    fn long_lists_of_nodes_are_cut() {
        let names: Vec<String> = (0..12).map(|i| format!("n{i}")).collect();
        assert_eq!(list_names(&names[..2]), "n0, n1");
        assert!(list_names(&names).ends_with("n9 and 2 more"));
    }
}
