//! The engine's decisions and holds, over NRTs and pods built here.

use serde_json::json;

use super::*;

/// A two-zone NRT: `free` CPUs per zone of 8, the policy, and a fingerprint of `pods` (None: no
/// fingerprint attribute).
fn nrt(node: &str, free: [i64; 2], policy: &str, pods: Option<&[(&str, &str)]>, version: &str) -> NodeResourceTopology {
    let mut attributes = Vec::new();
    if let Some(pods) = pods {
        let mut fingerprint = Fingerprint::new();
        for (namespace, name) in pods {
            fingerprint.add(namespace, name);
        }
        attributes.push(json!({"name": ATTR_PODS_FINGERPRINT, "value": fingerprint.sign()}));
        attributes.push(json!({"name": ATTR_PODS_FINGERPRINT_METHOD, "value": "all"}));
    }
    let mut nrt = numaresources_testkit::nrt::with_cpus(node, &free, policy, &attributes);
    nrt["metadata"]["resourceVersion"] = json!(version);
    serde_json::from_value(nrt).unwrap()
}

/// A Guaranteed pod asking `cpu` whole CPUs, bound to `node` when given, Running when `running`.
fn pod(name: &str, cpu: &str, node: Option<&str>, running: bool) -> Pod {
    let resources = json!({"cpu": cpu, "memory": "1Gi"});
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"schedulerName": "topo-aware-scheduler", "nodeName": node,
                 "containers": [{"name": "app", "resources": {"requests": resources, "limits": resources}}]},
        "status": {"phase": if running { "Running" } else { "Pending" }}}))
    .unwrap()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

fn engine() -> Engine {
    Engine::new(PolicyOptions::default(), None)
}

#[test]
fn the_filter_passes_nodes_the_kubelet_admits_and_gives_the_others_its_reason() {
    let mut engine = engine();
    engine.nrt_changed(nrt("worker-0", [3, 3], "single-numa-node", None, "1"));
    engine.nrt_changed(nrt("worker-1", [4, 0], "single-numa-node", None, "1"));
    engine.nrt_changed(nrt("worker-2", [3, 3], "restricted", None, "1"));
    let result = engine.filter(&pod("app", "4", None, false), names(&["worker-0", "worker-1", "worker-2", "bare"]));
    // A node without an NRT says nothing about alignment: it passes.
    assert_eq!(result.node_names, Some(names(&["worker-1", "bare"])));
    let failed = result.failed_nodes.unwrap();
    assert_eq!(
        &*failed["worker-0"],
        "numa: the kubelet (single-numa-node) cannot align container \"app\": no single NUMA node holds all of it \
         (cpu 4 requested, at most 3 free on one NUMA node)"
    );
    assert!(failed["worker-2"].starts_with("numa: the kubelet (restricted) cannot align"), "{failed:?}");
    // The same arithmetic on two nodes is the same words: kube-scheduler's event counts them.
    engine.nrt_changed(nrt("worker-3", [3, 3], "single-numa-node", None, "1"));
    let result = engine.filter(&pod("app", "4", None, false), names(&["worker-0", "worker-3"]));
    let failed = result.failed_nodes.unwrap();
    assert_eq!(failed["worker-0"], failed["worker-3"]);
}

#[test]
fn a_bound_pod_is_held_until_the_nodes_fingerprint_counts_it() {
    let mut engine = engine();
    engine.nrt_changed(nrt("worker-0", [8, 8], "single-numa-node", Some(&[]), "1"));
    let first = pod("first", "6", Some("worker-0"), false);
    engine.bound("worker-0", &first);
    // Held: NUMA 0 has 2 left, so the next 6-CPU pod goes to NUMA 1, and a third fits nowhere.
    let view = engine.view("worker-0").unwrap();
    assert_eq!(view.zones[0].resources[0].available.to_string(), "2");
    engine.bound("worker-0", &pod("second", "6", Some("worker-0"), false));
    let third = engine.filter(&pod("third", "6", None, false), names(&["worker-0"]));
    assert_eq!(third.node_names, Some(Vec::new()), "{third:?}");

    // The pods show up bound; the exporter has not reported them yet: still held.
    engine.pod_changed(Arc::new(first.clone()));
    engine.pod_changed(Arc::new(pod("second", "6", Some("worker-0"), false)));
    engine.nrt_changed(nrt("worker-0", [8, 8], "single-numa-node", Some(&[]), "2"));
    assert_eq!(engine.holds("worker-0").len(), 2);
    // The exporter reports the first only: its fingerprint is not of the node's pods; held.
    engine.nrt_changed(nrt("worker-0", [2, 8], "single-numa-node", Some(&[("ns", "first")]), "3"));
    assert_eq!(engine.holds("worker-0").len(), 2);
    // Both reported: released, and the NRT alone counts them.
    engine.nrt_changed(nrt("worker-0", [2, 2], "single-numa-node", Some(&[("ns", "first"), ("ns", "second")]), "4"));
    assert!(engine.holds("worker-0").is_empty());
    let view = engine.view("worker-0").unwrap();
    assert_eq!(view.zones[0].resources[0].available.to_string(), "2", "counted once, by the NRT");
}

#[test]
fn without_a_fingerprint_a_hold_ends_with_the_first_nrt_change_after_the_pod_runs() {
    let mut engine = engine();
    engine.nrt_changed(nrt("worker-0", [8, 8], "single-numa-node", None, "1"));
    engine.bound("worker-0", &pod("app", "4", Some("worker-0"), false));
    engine.nrt_changed(nrt("worker-0", [8, 8], "single-numa-node", None, "2"));
    assert_eq!(engine.holds("worker-0").len(), 1, "not running yet: the NRT cannot count it");
    engine.pod_changed(Arc::new(pod("app", "4", Some("worker-0"), true)));
    assert_eq!(engine.holds("worker-0").len(), 1, "running, but this NRT was written before");
    engine.nrt_changed(nrt("worker-0", [4, 8], "single-numa-node", None, "3"));
    assert!(engine.holds("worker-0").is_empty());
}

#[test]
fn a_deleted_or_finished_pod_is_no_longer_held() {
    let mut engine = engine();
    engine.nrt_changed(nrt("worker-0", [8, 8], "single-numa-node", Some(&[]), "1"));
    let app = pod("app", "4", Some("worker-0"), false);
    engine.bound("worker-0", &app);
    engine.pod_changed(Arc::new(app.clone()));
    engine.pod_deleted("uid-app");
    assert!(engine.holds("worker-0").is_empty());

    engine.bound("worker-0", &app);
    let mut failed = app;
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    engine.pod_changed(Arc::new(failed));
    assert!(engine.holds("worker-0").is_empty());
}

#[test]
fn a_failed_binding_drops_its_hold() {
    let mut engine = engine();
    engine.nrt_changed(nrt("worker-0", [8, 8], "single-numa-node", None, "1"));
    engine.bound("worker-0", &pod("app", "4", None, false));
    engine.unbound("worker-0", "uid-app");
    assert!(engine.holds("worker-0").is_empty());
}

#[test]
fn after_a_restart_the_pods_a_node_does_not_count_yet_are_held_again() {
    let mut engine = engine();
    // worker-0's fingerprint counts its pod; worker-1's does not count the one bound there.
    engine.replace_nrts(vec![
        nrt("worker-0", [4, 8], "single-numa-node", Some(&[("ns", "counted")]), "1"),
        nrt("worker-1", [8, 8], "single-numa-node", Some(&[]), "1"),
    ]);
    engine.replace_pods(vec![
        Arc::new(pod("counted", "4", Some("worker-0"), true)),
        Arc::new(pod("uncounted", "4", Some("worker-1"), false)),
    ]);
    engine.rebuild_holds("topo-aware-scheduler");
    assert!(engine.holds("worker-0").is_empty());
    assert_eq!(engine.holds("worker-1").iter().map(|h| h.pod.as_str()).collect::<Vec<_>>(), ["ns/uncounted"]);
}

#[test]
fn prioritize_prefers_the_node_left_freer_and_a_single_numa_node() {
    let mut engine = engine();
    engine.nrt_changed(nrt("roomy", [8, 8], "single-numa-node", None, "1"));
    engine.nrt_changed(nrt("tight", [4, 4], "single-numa-node", None, "1"));
    engine.nrt_changed(nrt("spread", [3, 3], "best-effort", None, "1"));
    let scores = engine.prioritize(&pod("app", "4", None, false), names(&["roomy", "tight", "spread", "bare"]));
    let by: BTreeMap<&str, i64> = scores.iter().map(|s| (s.host.as_str(), s.score)).collect();
    assert!(by["roomy"] > by["tight"], "{by:?}");
    assert!(by["tight"] > by["spread"], "an aligned node beats one that spreads the pod: {by:?}");
    assert_eq!(by["spread"], 0);
    assert_eq!(by["bare"], 0);
    assert!(scores.iter().all(|s| (0..=MAX_EXTENDER_PRIORITY).contains(&s.score)));
}

#[test]
fn least_numa_nodes_scores_by_the_numa_nodes_the_pod_takes() {
    use numaresources_api::operator::ScoringStrategyType;
    let mut engine = Engine::new(PolicyOptions::default(), Some(ScoringStrategyType::LeastNUMANodes));
    engine.nrt_changed(nrt("worker", [8, 8], "restricted", None, "1"));
    let score = |cpu: &str| engine.prioritize(&pod("app", cpu, None, false), names(&["worker"]))[0].score;
    // 6 CPUs on one NUMA node: the most.
    assert_eq!(score("6"), MAX_EXTENDER_PRIORITY);
    // 12 CPUs need both: two less, and one less again as the NRT gives no distances (so the
    // pair cannot be said to be the closest).
    assert_eq!(score("12"), MAX_EXTENDER_PRIORITY - 3);
}

mod properties {
    //! Whatever the pod and the candidates, every candidate gets exactly one answer and nothing
    //! panics: the verbs face kube-scheduler's requests, built from any pod a user can create.

    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// A quantity as users write them: whole, milli, binary and decimal suffixes, zero, huge.
    fn quantity() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u64..64).prop_map(|n| n.to_string()),
            (1u64..64_000).prop_map(|n| format!("{n}m")),
            (0u64..512).prop_map(|n| format!("{n}Gi")),
            (0u64..4096).prop_map(|n| format!("{n}Mi")),
            Just("9223372036854775807".to_owned()),
            Just("1e3".to_owned()),
        ]
    }

    fn resources() -> impl Strategy<Value = serde_json::Value> {
        let name = prop_oneof![
            Just("cpu"),
            Just("memory"),
            Just("hugepages-1Gi"),
            Just("hugepages-2Mi"),
            Just("example.com/nic"),
            Just("ephemeral-storage")
        ];
        proptest::collection::btree_map(name, quantity(), 0..5).prop_map(|map| json!(map))
    }

    /// A container; `guaranteed` makes its requests its limits; an init container may be a
    /// sidecar (`restartPolicy: Always`, which only init containers may set).
    fn container(index: usize, init: bool) -> impl Strategy<Value = serde_json::Value> {
        (resources(), resources(), any::<bool>(), any::<bool>()).prop_map(
            move |(requests, limits, guaranteed, sidecar)| {
                let resources = if guaranteed {
                    json!({"requests": limits.clone(), "limits": limits})
                } else {
                    json!({"requests": requests, "limits": limits})
                };
                let mut container = json!({"name": format!("c{index}"), "resources": resources});
                if init && sidecar {
                    container["restartPolicy"] = json!("Always");
                }
                container
            },
        )
    }

    fn pod() -> impl Strategy<Value = Pod> {
        let containers = (1usize..4).prop_flat_map(|n| (0..n).map(|i| container(i, false)).collect::<Vec<_>>());
        let init = (0usize..3).prop_flat_map(|n| (0..n).map(|i| container(10 + i, true)).collect::<Vec<_>>());
        (containers, init).prop_map(|(containers, init)| {
            serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
                "spec": {"containers": containers, "initContainers": init}}))
            .unwrap()
        })
    }

    /// Five nodes of every policy and scope, one with more NUMA nodes than a kubelet with a
    /// policy runs on, and names of nodes it has no NRT for, repeated or not.
    fn engine_and_candidates() -> impl Strategy<Value = (Engine, Vec<String>)> {
        let nodes = ["worker-0", "worker-1", "worker-2", "worker-3", "worker-4", "worker-wide", "bare", ""];
        let candidates = proptest::collection::vec(proptest::sample::select(nodes.to_vec()), 0..12)
            .prop_map(|names| names.into_iter().map(str::to_owned).collect::<Vec<_>>());
        let free = proptest::array::uniform2(0i64..9);
        (proptest::collection::vec(free, 5), candidates, any::<bool>())
            .prop_map(|(free, candidates, pod_scope)| (nodes_of_every_kind(&free, pod_scope), candidates))
    }

    /// worker-0..4 with these free CPUs per zone (single-numa-node, restricted, best-effort,
    /// none, single-numa-node), in pod scope or not, and worker-wide with nine NUMA nodes.
    fn nodes_of_every_kind(free: &[[i64; 2]], pod_scope: bool) -> Engine {
        let mut engine = engine();
        let policies = ["single-numa-node", "restricted", "best-effort", "none", "single-numa-node"];
        for (i, (policy, free)) in policies.iter().zip(free).enumerate() {
            let mut nrt = numaresources_testkit::nrt::with_cpus(&format!("worker-{i}"), free, policy, &[]);
            if pod_scope {
                nrt["attributes"].as_array_mut().unwrap().push(json!({"name": "topologyManagerScope", "value": "pod"}));
            }
            engine.nrt_changed(serde_json::from_value(nrt).unwrap());
        }
        let wide = numaresources_testkit::nrt::with_cpus("worker-wide", &[4; 9], "single-numa-node", &[]);
        engine.nrt_changed(serde_json::from_value(wide).unwrap());
        engine
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// The nine-NUMA node refuses every pod that aligns anything as no preemption helps.
        #[test]
        fn a_machine_over_the_kubelets_numa_limit_is_unresolvable(pod in pod()) {
            let engine = nodes_of_every_kind(&[[4, 4]; 5], false);
            let result = engine.filter(&pod, vec!["worker-wide".to_owned()]);
            let unresolvable = result.failed_and_unresolvable_nodes.unwrap_or_default();
            let passing = result.node_names.unwrap_or_default();
            prop_assert_eq!(unresolvable.len() + passing.len(), 1);
            if let Some(reason) = unresolvable.get("worker-wide") {
                prop_assert!(reason.contains("max-allowable-numa-nodes"), "{}", reason);
            }
            let guaranteed = engine.filter(&super::pod("g", "1", None, false), vec!["worker-wide".to_owned()]);
            prop_assert!(guaranteed.failed_and_unresolvable_nodes.unwrap_or_default().contains_key("worker-wide"));
        }

        #[test]
        fn every_candidate_is_answered_once_and_prioritize_scores_within_range(
            pod in pod(),
            (engine, candidates) in engine_and_candidates(),
        ) {
            let result = engine.filter(&pod, candidates.clone());
            let passing = result.node_names.clone().unwrap_or_default();
            let failed = result.failed_nodes.clone().unwrap_or_default();
            let unresolvable = result.failed_and_unresolvable_nodes.clone().unwrap_or_default();
            let distinct: BTreeSet<&String> = candidates.iter().collect();
            let answered: BTreeSet<&String> = passing.iter().chain(failed.keys()).chain(unresolvable.keys()).collect();
            prop_assert_eq!(&answered, &distinct);
            for name in &distinct {
                let times = usize::from(passing.contains(name)) + usize::from(failed.contains_key(*name))
                    + usize::from(unresolvable.contains_key(*name));
                prop_assert_eq!(times, 1, "{} answered {} times: {:?}", name, times, result);
            }
            prop_assert!(failed.values().chain(unresolvable.values()).all(|reason| reason.starts_with("numa: ")));
            // The passing nodes in the candidates' order.
            let in_order: Vec<&String> = candidates
                .iter()
                .filter(|name| !failed.contains_key(*name) && !unresolvable.contains_key(*name))
                .collect();
            prop_assert_eq!(passing.iter().collect::<Vec<_>>(), in_order);
            let scores = engine.prioritize(&pod, passing.clone());
            prop_assert_eq!(scores.len(), passing.len());
            prop_assert!(scores.iter().all(|s| (0..=MAX_EXTENDER_PRIORITY).contains(&s.score)), "{:?}", scores);
            serde_json::to_vec(&result).unwrap();
        }
    }
}
