//! The filters applied to every `List` answer before accounting: the shared pool, the pod
//! excludes and the terminal pods (docs/exporter-accounting.md).
//!
//! Pure functions over the model: no I/O, so the exporter wires them however it likes and
//! tests use plain tables.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use super::model::PodResources;

/// A container named `namespace/pod/container`, e.g. the shared-pool reference container.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name.
    pub container: String,
}

/// Why a `namespace/pod/container` reference did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid container reference {0:?}: expected namespace/pod/container, each part non-empty")]
pub struct ContainerRefError(String);

impl FromStr for ContainerRef {
    type Err = ContainerRefError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parts = text.split('/');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(namespace), Some(pod), Some(container), None)
                if !namespace.is_empty() && !pod.is_empty() && !container.is_empty() =>
            {
                Ok(ContainerRef { namespace: namespace.into(), pod: pod.into(), container: container.into() })
            }
            _ => Err(ContainerRefError(text.into())),
        }
    }
}

impl fmt::Display for ContainerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.pod, self.container)
    }
}

/// Removes the shared-pool CPUs from every container's exclusive CPUs.
///
/// Some kubelets report the shared pool as `cpu_ids` of non-exclusive containers
/// (kubernetes/kubernetes#102190). The reference container is a non-exclusive container (a
/// sleeping sidecar of the exporter's pod): whatever CPUs it reports are the shared pool.
/// Returns those CPUs (sorted), or `None` when the reference container is not in the answer,
/// in which case nothing is changed.
pub fn remove_shared_pool_cpus(pods: &mut [PodResources], reference: &ContainerRef) -> Option<Vec<u32>> {
    let mut shared = pods
        .iter()
        .filter(|pod| pod.namespace == reference.namespace && pod.name == reference.pod)
        .flat_map(|pod| &pod.containers)
        .find(|container| container.name == reference.container)?
        .cpu_ids
        .clone();
    // Models built by hand may not be sorted; the binary search below needs it.
    shared.sort_unstable();
    shared.dedup();
    if !shared.is_empty() {
        for container in pods.iter_mut().flat_map(|pod| &mut pod.containers) {
            container.cpu_ids.retain(|cpu| shared.binary_search(cpu).is_err());
        }
    }
    Some(shared)
}

/// One `podExclude` rule: shell globs (`*`, `?`, `[…]`) for the namespace and the name.
///
/// A pod is excluded when both match. An empty pattern matches anything, so a rule with only a
/// namespace pattern drops every pod of those namespaces.
#[derive(Debug, Clone)]
pub struct PodExclude {
    namespace: Option<glob::Pattern>,
    name: Option<glob::Pattern>,
}

/// Why a `podExclude` pattern did not compile.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid pod exclude pattern {pattern:?}: {reason}")]
pub struct PodExcludeError {
    pattern: String,
    reason: String,
}

impl PodExclude {
    /// Compiles a rule from its namespace and name patterns.
    ///
    /// # Errors
    /// A pattern that is not a valid glob (e.g. an unclosed `[`).
    pub fn new(namespace_pattern: &str, name_pattern: &str) -> Result<Self, PodExcludeError> {
        let compile = |pattern: &str| -> Result<Option<glob::Pattern>, PodExcludeError> {
            if pattern.is_empty() {
                return Ok(None);
            }
            glob::Pattern::new(pattern)
                .map(Some)
                .map_err(|error| PodExcludeError { pattern: pattern.into(), reason: error.msg.into() })
        };
        Ok(PodExclude { namespace: compile(namespace_pattern)?, name: compile(name_pattern)? })
    }

    /// Whether this rule drops the pod `namespace/name`.
    #[must_use]
    pub fn matches(&self, namespace: &str, name: &str) -> bool {
        let hit = |pattern: &Option<glob::Pattern>, value: &str| pattern.as_ref().is_none_or(|p| p.matches(value));
        hit(&self.namespace, namespace) && hit(&self.name, name)
    }
}

/// Drops the pods any rule matches; returns how many were dropped.
pub fn exclude_pods(pods: &mut Vec<PodResources>, rules: &[PodExclude]) -> usize {
    let before = pods.len();
    if !rules.is_empty() {
        pods.retain(|pod| !rules.iter().any(|rule| rule.matches(&pod.namespace, &pod.name)));
    }
    before - pods.len()
}

/// A pod by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
}

impl PodKey {
    /// A key from borrowed parts.
    #[must_use]
    pub fn new(namespace: &str, name: &str) -> Self {
        PodKey { namespace: namespace.into(), name: name.into() }
    }
}

/// Drops the pods known to be terminal (phase `Succeeded` or `Failed`), which `List` may still
/// report (kubernetes/kubernetes#119423); returns how many were dropped.
pub fn exclude_terminal_pods(pods: &mut Vec<PodResources>, terminal: &HashSet<PodKey>) -> usize {
    let before = pods.len();
    if !terminal.is_empty() {
        // Look up by borrowed parts would need a custom Borrow impl; the clone is two short strings.
        pods.retain(|pod| !terminal.contains(&PodKey::new(&pod.namespace, &pod.name)));
    }
    before - pods.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podresources::model::ContainerResources;

    fn pod(namespace: &str, name: &str, containers: &[(&str, &[u32])]) -> PodResources {
        PodResources {
            namespace: namespace.into(),
            name: name.into(),
            containers: containers
                .iter()
                .map(|(name, cpus)| ContainerResources {
                    name: (*name).into(),
                    cpu_ids: cpus.to_vec(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn cpus(pods: &[PodResources]) -> Vec<(String, Vec<u32>)> {
        pods.iter()
            .flat_map(|pod| {
                pod.containers
                    .iter()
                    .map(move |c| (format!("{}/{}/{}", pod.namespace, pod.name, c.name), c.cpu_ids.clone()))
            })
            .collect()
    }

    #[test]
    fn container_references_parse_only_as_three_non_empty_parts() {
        let good: ContainerRef = "rte/rte-abc/shared-ref".parse().unwrap();
        assert_eq!(good.to_string(), "rte/rte-abc/shared-ref");
        for bad in ["", "rte/pod", "rte/pod/c/extra", "/pod/c", "rte//c", "rte/pod/"] {
            assert!(bad.parse::<ContainerRef>().is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn shared_pool_cpus_seen_by_the_reference_container_are_removed_everywhere() {
        let reference: ContainerRef = "rte/rte-0/ref".parse().unwrap();
        // (pods before, expected shared pool, expected cpus after)
        type Case = (Vec<PodResources>, Option<Vec<u32>>, Vec<(&'static str, Vec<u32>)>);
        let cases: Vec<Case> = vec![
            // The buggy kubelet reports the shared pool (2-7) for both the reference container
            // and a burstable pod; the exclusive 0-1 and 8-9 stay.
            (
                vec![
                    pod("rte", "rte-0", &[("rte", &[2, 3, 4, 5, 6, 7]), ("ref", &[2, 3, 4, 5, 6, 7])]),
                    pod("telco", "dpdk", &[("app", &[0, 1])]),
                    pod("web", "burst", &[("nginx", &[2, 3, 4, 5, 6, 7]), ("sidecar", &[8, 9])]),
                ],
                Some(vec![2, 3, 4, 5, 6, 7]),
                vec![
                    ("rte/rte-0/rte", vec![]),
                    ("rte/rte-0/ref", vec![]),
                    ("telco/dpdk/app", vec![0, 1]),
                    ("web/burst/nginx", vec![]),
                    ("web/burst/sidecar", vec![8, 9]),
                ],
            ),
            // A fixed kubelet reports nothing for the reference container: nothing changes.
            (
                vec![pod("rte", "rte-0", &[("ref", &[])]), pod("telco", "dpdk", &[("app", &[0, 1])])],
                Some(vec![]),
                vec![("rte/rte-0/ref", vec![]), ("telco/dpdk/app", vec![0, 1])],
            ),
            // No reference container in the answer: nothing changes.
            (
                vec![pod("rte", "rte-1", &[("ref", &[4, 5])]), pod("telco", "dpdk", &[("app", &[4, 5])])],
                None,
                vec![("rte/rte-1/ref", vec![4, 5]), ("telco/dpdk/app", vec![4, 5])],
            ),
        ];
        for (mut pods, want_shared, want_cpus) in cases {
            let shared = remove_shared_pool_cpus(&mut pods, &reference);
            assert_eq!(shared, want_shared);
            let want: Vec<(String, Vec<u32>)> = want_cpus.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            assert_eq!(cpus(&pods), want);
        }
    }

    #[test]
    fn pod_exclude_rules_match_namespace_and_name_globs() {
        // (namespace pattern, name pattern, namespace, name, excluded)
        let cases = [
            ("kube-system", "*", "kube-system", "coredns-1", true),
            ("kube-*", "*", "kube-public", "x", true),
            ("kube-*", "*", "default", "kube-x", false),
            ("openshift-*", "machine-config-daemon-?????", "openshift-mco", "machine-config-daemon-ab12z", true),
            ("openshift-*", "machine-config-daemon-?????", "openshift-mco", "machine-config-daemon-ab12", false),
            ("telco", "dpdk-[ab]", "telco", "dpdk-b", true),
            ("telco", "dpdk-[ab]", "telco", "dpdk-c", false),
            ("", "canary-*", "anywhere", "canary-7", true),
            ("batch", "", "batch", "anything", true),
            ("", "", "any", "pod", true),
            ("Telco", "*", "telco", "pod", false),
        ];
        for (ns_pattern, name_pattern, namespace, name, excluded) in cases {
            let rule = PodExclude::new(ns_pattern, name_pattern).unwrap();
            assert_eq!(rule.matches(namespace, name), excluded, "{ns_pattern}/{name_pattern} vs {namespace}/{name}");
        }
    }

    #[test]
    fn invalid_glob_patterns_are_reported_with_the_pattern() {
        let error = PodExclude::new("kube-[", "*").unwrap_err();
        assert!(error.to_string().contains("\"kube-[\""), "{error}");
    }

    #[test]
    fn excluded_pods_are_dropped_and_counted() {
        let mut pods = vec![pod("kube-system", "a", &[]), pod("telco", "b", &[]), pod("kube-public", "c", &[])];
        let rules = [PodExclude::new("kube-*", "*").unwrap()];
        assert_eq!(exclude_pods(&mut pods, &rules), 2);
        assert_eq!(pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(exclude_pods(&mut pods, &[]), 0);
    }

    #[test]
    fn terminal_pods_are_dropped_by_namespace_and_name() {
        let mut pods = vec![pod("batch", "job-1", &[]), pod("batch", "job-2", &[]), pod("other", "job-1", &[])];
        let terminal = HashSet::from([PodKey::new("batch", "job-1"), PodKey::new("gone", "x")]);
        assert_eq!(exclude_terminal_pods(&mut pods, &terminal), 1);
        let left: Vec<String> = pods.iter().map(|p| format!("{}/{}", p.namespace, p.name)).collect();
        assert_eq!(left, ["batch/job-2", "other/job-1"]);
    }
}
