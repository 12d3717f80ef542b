//! Node groups → pools → nodes, as a pure function over what the cluster has.
//!
//! A group picks its nodes with `nodeSelector` (plain Kubernetes: a selector over Node labels) or,
//! on OpenShift, with `poolName` / `machineConfigPoolSelector` (a MachineConfigPool, whose own
//! `nodeSelector` then picks the nodes). Each resolved pool gets one exporter DaemonSet named
//! `<nro>-<pool>`. The rules, in the upstream operator's order (first failure wins; duplicate
//! and unparsable selectors are the api crate's validation): each group resolves to at least one
//! pool; a pool may be picked by one group only; a selector matching several pools is tolerated
//! (one DaemonSet each) but reported, unless the multiple-pools annotation allows it. A node that falls in two pools is reported by name: its second exporter pod would
//! stay Pending (required anti-affinity), which is how the overlap shows in the cluster too.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use numaresources_api::operator::{NodeGroup, NodeGroupConfig};
use numaresources_api::selector;

/// What a node looks like to the resolver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
}

/// What a MachineConfigPool looks like to the resolver (OpenShift).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolInfo {
    /// MachineConfigPool name.
    pub name: String,
    /// Its labels (what `machineConfigPoolSelector` matches).
    pub labels: BTreeMap<String, String>,
    /// Its `spec.nodeSelector`: the nodes of the pool.
    pub node_selector: Option<LabelSelector>,
}

/// One pool that gets an exporter DaemonSet.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedPool {
    /// Index of the node group in the spec.
    pub group: usize,
    /// The pool name: MachineConfigPool name, or a name derived from the node selector.
    pub pool: String,
    /// The selector over Node labels the DaemonSet targets.
    pub node_selector: LabelSelector,
    /// The nodes it matches now, sorted.
    pub nodes: Vec<String>,
    /// The group's normalized configuration.
    pub config: NodeGroupConfig,
}

/// The outcome of resolving every node group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Resolution {
    /// One entry per pool, in spec order.
    pub pools: Vec<ResolvedPool>,
    /// Problems that do not stop the rollout but degrade the status (a selector matching several
    /// pools).
    pub tolerable: Vec<String>,
    /// Nodes in more than one pool, with those pools.
    pub overlaps: BTreeMap<String, Vec<String>>,
}

/// A problem that stops the rollout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResolveError(pub String);

/// Resolves `groups` (normalized) against the cluster's nodes and, when the cluster has
/// MachineConfigPools, its pools (`None`: the API does not exist).
pub fn resolve(
    groups: &[NodeGroup],
    nodes: &[NodeInfo],
    pools: Option<&[PoolInfo]>,
    allow_multiple_pools: bool,
) -> Result<Resolution, ResolveError> {
    let mut resolution = Resolution::default();
    let mut pool_owner: BTreeMap<String, usize> = BTreeMap::new();
    for (index, group) in groups.iter().enumerate() {
        let config = group.normalized_config();
        let targets: Vec<(String, LabelSelector)> = if let Some(node_selector) = &group.node_selector {
            vec![(pool_name_for_selector(node_selector), node_selector.clone())]
        } else {
            let Some(pools) = pools else {
                return Err(ResolveError(format!(
                    "spec.nodeGroups[{index}]: poolName and machineConfigPoolSelector need MachineConfigPools \
                     (OpenShift), which this cluster does not have; select the nodes with nodeSelector"
                )));
            };
            mcp_targets(index, group, pools, allow_multiple_pools, &mut resolution.tolerable)?
        };
        for (pool, node_selector) in targets {
            if let Some(first) = pool_owner.insert(pool.clone(), index) {
                return Err(ResolveError(format!(
                    "spec.nodeGroups[{index}] selects pool {pool:?}, which spec.nodeGroups[{first}] already selects"
                )));
            }
            let matched: Vec<String> = nodes
                .iter()
                .filter(|node| selector::matches(&node_selector, &node.labels))
                .map(|node| node.name.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            resolution.pools.push(ResolvedPool {
                group: index,
                pool,
                node_selector,
                nodes: matched,
                config: config.clone(),
            });
        }
    }
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pool in &resolution.pools {
        for node in &pool.nodes {
            by_node.entry(node.clone()).or_default().push(pool.pool.clone());
        }
    }
    resolution.overlaps = by_node.into_iter().filter(|(_, pools)| pools.len() > 1).collect();
    Ok(resolution)
}

/// The MachineConfigPools a group picks, with their node selectors: at least one, and several
/// only with a report in `tolerable` (unless `allow_multiple_pools`).
fn mcp_targets(
    index: usize,
    group: &NodeGroup,
    pools: &[PoolInfo],
    allow_multiple_pools: bool,
    tolerable: &mut Vec<String>,
) -> Result<Vec<(String, LabelSelector)>, ResolveError> {
    let matched: Vec<&PoolInfo> = match (&group.pool_name, &group.machine_config_pool_selector) {
        (Some(name), _) => pools.iter().filter(|p| &p.name == name).collect(),
        (None, Some(mcp_selector)) => pools.iter().filter(|p| selector::matches(mcp_selector, &p.labels)).collect(),
        (None, None) => Vec::new(),
    };
    if matched.is_empty() {
        return Err(ResolveError(format!(
            "spec.nodeGroups[{index}]: failed to find MachineConfigPool for the node group"
        )));
    }
    if matched.len() > 1 && !allow_multiple_pools {
        let names: Vec<&str> = matched.iter().map(|p| p.name.as_str()).collect();
        tolerable.push(format!(
            "spec.nodeGroups[{index}]: the selector matches {} MachineConfigPools ({}); use one node group per pool",
            matched.len(),
            names.join(", ")
        ));
    }
    matched
        .into_iter()
        .map(|pool| match &pool.node_selector {
            Some(node_selector) => Ok((pool.name.clone(), node_selector.clone())),
            None => Err(ResolveError(format!("MachineConfigPool {:?} has no spec.nodeSelector", pool.name))),
        })
        .collect()
}

/// The pool name of a `nodeSelector` group: the role of a lone `node-role.kubernetes.io/<role>`
/// label (`worker`), else `nodes-` and a digest of the selector's canonical form, so the name is
/// stable, DNS-safe and the same for two spellings of one selector.
pub fn pool_name_for_selector(node_selector: &LabelSelector) -> String {
    const ROLE_PREFIX: &str = "node-role.kubernetes.io/";
    let labels = node_selector.match_labels.as_ref();
    let no_expressions = node_selector.match_expressions.as_ref().is_none_or(Vec::is_empty);
    if no_expressions
        && let Some(labels) = labels
        && labels.len() == 1
        && let Some((key, _)) = labels.iter().next()
        && let Some(role) = key.strip_prefix(ROLE_PREFIX)
        && !role.is_empty()
        && role.len() <= 40
        && role.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !role.starts_with('-')
        && !role.ends_with('-')
    {
        return role.to_owned();
    }
    let canonical = selector::canonical(node_selector);
    let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes());
    let hex: String = digest.as_ref().iter().take(5).map(|b| format!("{b:02x}")).collect();
    format!("nodes-{hex}")
}

/// The overlap report: `node-a (pools gpu, worker); node-b (...)`.
pub fn describe_overlaps(overlaps: &BTreeMap<String, Vec<String>>) -> String {
    overlaps.iter().map(|(node, pools)| format!("{node} (pools {})", pools.join(", "))).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn node(name: &str, pairs: &[(&str, &str)]) -> NodeInfo {
        NodeInfo { name: name.to_owned(), labels: labels(pairs) }
    }

    fn by_labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector { match_labels: Some(labels(pairs)), match_expressions: None }
    }

    fn selector_group(pairs: &[(&str, &str)]) -> NodeGroup {
        NodeGroup { node_selector: Some(by_labels(pairs)), ..NodeGroup::default() }
    }

    fn pool_group(name: &str) -> NodeGroup {
        NodeGroup { pool_name: Some(name.to_owned()), ..NodeGroup::default() }
    }

    fn mcp(name: &str, pairs: &[(&str, &str)], nodes: &[(&str, &str)]) -> PoolInfo {
        PoolInfo { name: name.to_owned(), labels: labels(pairs), node_selector: Some(by_labels(nodes)) }
    }

    const WORKER: (&str, &str) = ("node-role.kubernetes.io/worker", "");
    const GPU: (&str, &str) = ("gpu", "true");

    #[test]
    fn node_selector_groups_resolve_to_matching_nodes() {
        let nodes = [node("a", &[WORKER]), node("b", &[WORKER, GPU]), node("cp", &[])];
        let groups = [selector_group(&[WORKER])];
        let resolution = resolve(&groups, &nodes, None, false).unwrap();
        assert_eq!(resolution.pools.len(), 1);
        assert_eq!(resolution.pools[0].pool, "worker");
        assert_eq!(resolution.pools[0].nodes, ["a", "b"]);
        assert_eq!(resolution.pools[0].config, NodeGroupConfig::defaults());
        assert!(resolution.overlaps.is_empty() && resolution.tolerable.is_empty());
    }

    #[test]
    fn nodes_in_two_groups_are_reported_by_name() {
        let nodes = [node("a", &[WORKER]), node("b", &[WORKER, GPU])];
        let groups = [selector_group(&[WORKER]), selector_group(&[GPU])];
        let resolution = resolve(&groups, &nodes, None, false).unwrap();
        let gpu_pool = pool_name_for_selector(&by_labels(&[GPU]));
        assert_eq!(
            resolution.overlaps,
            BTreeMap::from([("b".to_owned(), vec!["worker".to_owned(), gpu_pool.clone()])])
        );
        assert_eq!(describe_overlaps(&resolution.overlaps), format!("b (pools worker, {gpu_pool})"));
    }

    #[test]
    fn pool_names_for_selectors_are_stable_and_dns_safe() {
        assert_eq!(pool_name_for_selector(&by_labels(&[WORKER])), "worker");
        let a = pool_name_for_selector(&by_labels(&[GPU]));
        let b = pool_name_for_selector(&LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "gpu".into(),
                operator: "In".into(),
                values: Some(vec!["true".into()]),
            }]),
        });
        assert_eq!(a, b, "two spellings of one selector");
        assert!(a.starts_with("nodes-") && a.len() == 16, "{a}");
        assert_eq!(pool_name_for_selector(&by_labels(&[("node-role.kubernetes.io/Bad_Role", "")])).len(), 16);
    }

    #[test]
    fn pool_groups_need_machine_config_pools() {
        let error = resolve(&[pool_group("worker")], &[], None, false).unwrap_err();
        assert!(error.0.contains("need MachineConfigPools"), "{error}");
    }

    #[test]
    fn machine_config_pool_rules() {
        let nodes = [node("a", &[WORKER]), node("b", &[("node-role.kubernetes.io/cnf", "")])];
        let pools = [
            mcp("worker", &[("pools.operator.machineconfiguration.openshift.io/worker", "")], &[WORKER]),
            mcp(
                "cnf",
                &[("pools.operator.machineconfiguration.openshift.io/worker", ""), ("cnf", "")],
                &[("node-role.kubernetes.io/cnf", "")],
            ),
        ];
        let by_name = resolve(&[pool_group("worker")], &nodes, Some(&pools), false).unwrap();
        assert_eq!((by_name.pools[0].pool.as_str(), by_name.pools[0].nodes.clone()), ("worker", vec!["a".to_owned()]));

        let missing = resolve(&[pool_group("nope")], &nodes, Some(&pools), false).unwrap_err();
        assert!(missing.0.contains("failed to find MachineConfigPool"), "{missing}");

        let wide = NodeGroup {
            machine_config_pool_selector: Some(by_labels(&[(
                "pools.operator.machineconfiguration.openshift.io/worker",
                "",
            )])),
            ..NodeGroup::default()
        };
        let tolerated = resolve(std::slice::from_ref(&wide), &nodes, Some(&pools), false).unwrap();
        assert_eq!(tolerated.pools.len(), 2, "one DaemonSet per pool");
        assert!(tolerated.tolerable[0].contains("matches 2 MachineConfigPools (worker, cnf)"), "{:?}", tolerated);
        assert!(resolve(std::slice::from_ref(&wide), &nodes, Some(&pools), true).unwrap().tolerable.is_empty());

        let twice = resolve(&[wide, pool_group("cnf")], &nodes, Some(&pools), false).unwrap_err();
        assert!(twice.0.contains("spec.nodeGroups[1] selects pool \"cnf\""), "{twice}");

        let no_selector = [PoolInfo { name: "odd".into(), labels: BTreeMap::new(), node_selector: None }];
        let error = resolve(&[pool_group("odd")], &nodes, Some(&no_selector), false).unwrap_err();
        assert!(error.0.contains("has no spec.nodeSelector"), "{error}");
    }
}
