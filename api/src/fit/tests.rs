//! The filter and score against the cases the plugin's behaviour is defined by, and properties
//! that must hold for any pod and topology.

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::nrt::{AttributeInfo, NodeResourceTopology, Quantity, ResourceInfo, Zone};
use crate::operator::{ResourceSpecParams, ScoringStrategyType};
use crate::qos::QosClass;

/// One NUMA zone: (cpus, memory GiB, 1Gi hugepages, GPUs) available; allocatable the same.
type ZoneSpec = (i64, i64, i64, i64);

fn nrt(policy: &str, scope: &str, zones: &[ZoneSpec]) -> NodeResourceTopology {
    let mut nrt = NodeResourceTopology::new("worker");
    nrt.attributes =
        vec![AttributeInfo::new("topologyManagerPolicy", policy), AttributeInfo::new("topologyManagerScope", scope)];
    let gi = 1 << 30;
    nrt.zones = zones
        .iter()
        .enumerate()
        .map(|(id, (cpu, mem, huge, gpu))| {
            let resource = |name: &str, amount: i64| ResourceInfo {
                name: name.into(),
                capacity: Quantity::from_i64(amount),
                allocatable: Quantity::from_i64(amount),
                available: Quantity::from_i64(amount),
            };
            let mut resources =
                vec![resource("cpu", *cpu), resource("memory", mem * gi), resource("hugepages-1Gi", huge * gi)];
            if *gpu >= 0 {
                resources.push(resource("vendor.com/gpu", *gpu));
            }
            Zone { name: format!("node-{id}").into(), zone_type: "Node".into(), resources, ..Zone::default() }
        })
        .collect();
    nrt
}

fn resources(cpu: &str, memory: &str, extra: &[(&str, &str)]) -> Value {
    let mut list = json!({"cpu": cpu, "memory": memory});
    for (name, amount) in extra {
        list[name] = json!(amount);
    }
    json!({"requests": list, "limits": list})
}

fn pod(init: &[(&str, Value)], containers: &[(&str, Value)]) -> PodRequests {
    let list = |cs: &[(&str, Value)]| -> Vec<Value> {
        cs.iter().map(|(name, res)| json!({"name": name, "image": "x", "resources": res})).collect()
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"initContainers": list(init), "containers": list(containers)}
    }))
    .unwrap();
    PodRequests::from_pod(&pod)
}

fn guaranteed(cpu: &str, memory: &str) -> PodRequests {
    pod(&[], &[("app", resources(cpu, memory, &[]))])
}

fn default_strategy() -> ScoringStrategyParams {
    ScoringStrategyParams::default()
}

fn run(pod: &PodRequests, nrt: &NodeResourceTopology) -> NodeFit {
    evaluate(pod, Some(nrt), None, &default_strategy())
}

fn placements(fit: &NodeFit) -> Vec<u32> {
    match &fit.filtered {
        Filtered::Fits { placements } => placements.iter().map(|p| p.numa).collect(),
        other => panic!("expected a fit, got {other:?}"),
    }
}

fn rejection(fit: &NodeFit) -> String {
    match &fit.filtered {
        Filtered::Rejected(rejection) => rejection.to_string(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn a_guaranteed_pod_fits_the_lowest_numa_that_holds_it_and_is_scored() {
    let node = nrt("single-numa-node", "container", &[(4, 8, 0, -1), (8, 8, 0, -1)]);
    let fit = run(&guaranteed("6", "2Gi"), &node);
    assert_eq!(placements(&fit), [1]);
    // LeastAllocated, per NUMA node, as the plugin computes it: NUMA 1 cpu (8-6)*100/8 = 25,
    // memory (8-2)*100/8 = 75 -> 50; NUMA 0 cannot hold 6 CPUs (cpu scores 0) but its memory
    // does (75) -> 37, and the node gets the lowest non-zero NUMA score.
    assert_eq!(fit.score, Some(37));
    let both = run(&guaranteed("2", "2Gi"), &node);
    assert_eq!(placements(&both), [0], "the lowest id among the suitable ones");
}

/// A node whose kubelet runs without the Static memory manager, published as the upstream
/// exporter does: its zones list no memory. The plugin refuses every Guaranteed pod asking for
/// memory there; the reason must say why in words, not "0 available ... ()".
#[test]
fn memory_no_zone_lists_is_refused_saying_it_is_not_numa_managed() {
    let mut node = nrt("single-numa-node", "container", &[(4, 8, 0, -1), (4, 8, 0, -1)]);
    for zone in &mut node.zones {
        zone.resources.retain(|r| r.name == "cpu");
    }
    let refused = rejection(&run(&guaranteed("1", "64Mi"), &node));
    assert_eq!(
        refused,
        "memory requested by container \"app\" is in no NUMA zone of the node's topology: the node's kubelet does \
         not manage memory per NUMA node (its memory manager is not Static) and its exporter publishes none per zone"
    );
    assert!(!refused.contains("()"), "{refused}");
    // The plugin looks only at zones that list a resource, for a Burstable pod too.
    let burstable = pod(&[], &[("app", json!({"requests": {"cpu": "1", "memory": "64Mi"}}))]);
    assert_eq!(rejection(&run(&burstable, &node)), refused);
}

#[test]
fn a_full_zone_refuses_with_the_numbers_a_person_needs() {
    let node = nrt("single-numa-node", "container", &[(4, 8, 0, -1), (2, 8, 0, -1)]);
    let fit = run(&guaranteed("6", "1Gi"), &node);
    assert_eq!(fit.score, None);
    assert_eq!(rejection(&fit), r#"cpu 4 available < 6 requested by container "app" (4 on NUMA 0, 2 on NUMA 1)"#);
    let huge = pod(&[], &[("app", resources("1", "1Gi", &[("hugepages-1Gi", "2Gi")]))]);
    assert_eq!(
        rejection(&run(&huge, &node)),
        r#"hugepages-1Gi 0 available < 2Gi requested by container "app" (0 on NUMA 0, 0 on NUMA 1)"#
    );
}

#[test]
fn resources_split_across_zones_do_not_fit() {
    // Enough CPUs only on NUMA 0, enough memory only on NUMA 1.
    let node = nrt("single-numa-node", "container", &[(8, 1, 0, -1), (2, 16, 0, -1)]);
    let fit = run(&guaranteed("4", "8Gi"), &node);
    assert_eq!(
        rejection(&fit),
        r#"no single NUMA node has everything container "app" requests: cpu on NUMA 0; memory on NUMA 1"#
    );
}

#[test]
fn containers_reduce_the_numa_they_land_on_and_init_containers_do_not() {
    let node = nrt("single-numa-node", "container", &[(4, 8, 0, -1), (4, 8, 0, -1)]);
    let two = pod(&[], &[("a", resources("3", "1Gi", &[])), ("b", resources("3", "1Gi", &[]))]);
    assert_eq!(placements(&run(&two, &node)), [0, 1], "b no longer fits NUMA 0 once a took 3 of its 4 CPUs");
    let three = pod(
        &[],
        &[("a", resources("3", "1Gi", &[])), ("b", resources("3", "1Gi", &[])), ("c", resources("3", "1Gi", &[]))],
    );
    assert_eq!(
        rejection(&run(&three, &node)),
        r#"cpu 1 available < 3 requested by container "c" (1 on NUMA 0, 1 on NUMA 1)"#
    );

    // Init containers run alone: each only has to fit somewhere, and leaves nothing behind.
    let init = pod(
        &[("setup", resources("4", "1Gi", &[]))],
        &[("a", resources("4", "1Gi", &[])), ("b", resources("4", "1Gi", &[]))],
    );
    assert_eq!(placements(&run(&init, &node)), [0, 1]);
    let too_big = pod(&[("setup", resources("6", "1Gi", &[]))], &[("a", resources("1", "1Gi", &[]))]);
    assert_eq!(
        rejection(&run(&too_big, &node)),
        r#"cpu 4 available < 6 requested by init container "setup" (4 on NUMA 0, 4 on NUMA 1)"#
    );
}

#[test]
fn pod_scope_checks_the_effective_request_once() {
    let containers = [("a", resources("3", "1Gi", &[])), ("b", resources("3", "1Gi", &[]))];
    let split = nrt("single-numa-node", "pod", &[(4, 8, 0, -1), (4, 8, 0, -1)]);
    // In container scope these land on 0 and 1; the pod scope wants 6 CPUs on one NUMA node.
    assert_eq!(
        rejection(&run(&pod(&[], &containers), &split)),
        r#"cpu 4 available < 6 requested by the pod (4 on NUMA 0, 4 on NUMA 1)"#
    );
    let big = nrt("single-numa-node", "pod", &[(4, 8, 0, -1), (8, 8, 0, -1)]);
    let fit = run(&pod(&[], &containers), &big);
    assert_eq!(fit.filtered, Filtered::Fits { placements: vec![Placement { requester: Requester::Pod, numa: 1 }] });
    // Effective request: max(sum of app containers, largest init container).
    let init = pod(&[("setup", resources("7", "1Gi", &[]))], &containers);
    assert_eq!(init.effective()["cpu"], 7000);
    assert_eq!(placements(&run(&init, &big)), [1]);
}

#[test]
fn best_effort_and_burstable_pods_are_not_aligned() {
    let node = nrt("single-numa-node", "container", &[(1, 1, 0, 0), (1, 1, 0, 0)]);
    let best_effort = pod(&[], &[("app", json!({}))]);
    assert_eq!(best_effort.problems, [PodProblem::BestEffort]);
    let fit = run(&best_effort, &node);
    assert_eq!(fit.filtered, Filtered::Unchecked(Unchecked::BestEffortPod));
    assert_eq!(fit.score, Some(MAX_NODE_SCORE));

    // Burstable: cpu and memory pass on any NUMA listing them, whatever the amount...
    let burstable = pod(&[], &[("app", json!({"requests": {"cpu": "8", "memory": "4Gi"}}))]);
    assert_eq!(burstable.qos, QosClass::Burstable);
    assert_eq!(burstable.problems, [PodProblem::NotGuaranteed]);
    assert_eq!(placements(&run(&burstable, &node)), [0]);
    // ...but devices are counted for everyone, and a BestEffort pod asking for one is filtered.
    let device = pod(&[], &[("app", json!({"requests": {"vendor.com/gpu": "2"}, "limits": {"vendor.com/gpu": "2"}}))]);
    assert_eq!(device.qos, QosClass::BestEffort);
    assert_eq!(
        rejection(&run(&device, &node)),
        r#"vendor.com/gpu 0 available < 2 requested by container "app" (0 on NUMA 0, 0 on NUMA 1)"#
    );
}

#[test]
fn pod_level_resources_decide_the_class_the_filter_reads() {
    // Containers alone would make the pod BestEffort; the pod-level limits make it Guaranteed,
    // as they make it for the kubelet.
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
        "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
        "containers": [{"name": "app", "image": "x"}]}}))
    .unwrap();
    let requests = PodRequests::from_pod(&pod);
    assert_eq!(requests.qos, QosClass::Guaranteed);
    assert!(!requests.problems.contains(&PodProblem::BestEffort), "{:?}", requests.problems);
}

#[test]
fn a_node_without_topology_or_another_policy_passes_unchecked() {
    let pod = guaranteed("64", "1Ti");
    let blind = evaluate(&pod, None, None, &default_strategy());
    assert_eq!(blind.filtered, Filtered::Unchecked(Unchecked::NoTopology));
    assert_eq!(blind.score, Some(0), "a Guaranteed pod scores 0 where there is no NRT");
    for policy in ["none", "best-effort", "restricted"] {
        let fit = run(&pod, &nrt(policy, "container", &[(1, 1, 0, -1)]));
        assert_eq!(fit.filtered, Filtered::Unchecked(Unchecked::PolicyDoesNotFilter { policy: policy.to_owned() }));
        assert_eq!(fit.score, Some(0));
    }
    // An invalid attribute is ignored: the deprecated field (or the default) holds.
    let mut deprecated = nrt("single-numa-node", "container", &[(1, 1, 0, -1)]);
    deprecated.attributes = vec![AttributeInfo::new("topologyManagerPolicy", "bogus")];
    deprecated.topology_policies = vec!["SingleNUMANodePodLevel".to_owned()];
    let config = TopologyManagerConfig::of(&deprecated);
    assert_eq!((config.policy.as_str(), config.scope.as_str()), ("single-numa-node", "pod"));
}

#[test]
fn host_level_and_missing_resources() {
    let node = nrt("single-numa-node", "container", &[(4, 8, 0, -1)]);
    let storage =
        pod(&[], &[("app", resources("1", "1Gi", &[("ephemeral-storage", "10Gi"), ("example.com/nic", "1")]))]);
    assert_eq!(placements(&run(&storage, &node)), [0], "no NUMA lists them: they are node-level");
    let on_node = node_resources(&[("cpu", "4"), ("memory", "8Gi"), ("ephemeral-storage", "100Gi"), ("pods", "110")]);
    let fit = evaluate(&storage, Some(&node), Some(&on_node), &default_strategy());
    assert_eq!(rejection(&fit), "the Node offers no example.com/nic (kube-scheduler refuses it before any NUMA rule)");
}

fn node_resources(allocatable: &[(&str, &str)]) -> NodeResources {
    let allocatable = allocatable
        .iter()
        .map(|(name, amount)| {
            ((*name).to_owned(), k8s_openapi::apimachinery::pkg::api::resource::Quantity((*amount).to_owned()))
        })
        .collect();
    NodeResources::new(&allocatable)
}

fn bound_pod(cpu: &str, memory: &str) -> Pod {
    serde_json::from_value(serde_json::json!({"metadata": {"name": "running"}, "spec": {"nodeName": "worker-0",
        "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}))
    .unwrap()
}

/// A node whose policy the NUMA filter does not check still refuses what its Node cannot hold,
/// as kube-scheduler's NodeResourcesFit does: the allocatable less the bound pods' requests, and
/// a pod slot.
#[test]
fn the_node_level_fit_refuses_before_any_numa_rule_whatever_the_policy() {
    let topology = nrt("best-effort", "container", &[(8, 8, 0, -1)]);
    let app = guaranteed("4", "1Gi");
    let node = node_resources(&[("cpu", "8"), ("memory", "8Gi"), ("pods", "2")]);
    let fit = evaluate(&app, Some(&topology), Some(&node), &default_strategy());
    assert!(matches!(fit.filtered, Filtered::Unchecked(_)), "room on the Node: the policy lets it through");

    let busy = node.clone().with_pods([&bound_pod("6", "1Gi")]);
    let fit = evaluate(&app, Some(&topology), Some(&busy), &default_strategy());
    assert_eq!(
        rejection(&fit),
        "insufficient cpu on the Node: 2 free of 8 allocatable < 4 requested (kube-scheduler refuses it before any NUMA rule)"
    );
    let full = node.with_pods([&bound_pod("1", "1Gi"), &bound_pod("1", "1Gi")]);
    let fit = evaluate(&app, Some(&topology), Some(&full), &default_strategy());
    assert!(
        rejection(&fit).starts_with("insufficient pods on the Node: 0 free of 2 allocatable"),
        "{}",
        rejection(&fit)
    );
    // Without the Node nothing is known of it: the NUMA rules alone.
    assert!(matches!(evaluate(&app, Some(&topology), None, &default_strategy()).filtered, Filtered::Unchecked(_)));
}

#[test]
fn fractional_cpus_are_reported() {
    let pod = guaranteed("1500m", "1Gi");
    assert_eq!(pod.qos, QosClass::Guaranteed);
    assert_eq!(pod.problems, [PodProblem::FractionalCpu { container: "app".to_owned(), cpu: "1500m".to_owned() }]);
    let node = nrt("single-numa-node", "container", &[(1, 8, 0, -1), (2, 8, 0, -1)]);
    assert_eq!(placements(&run(&pod, &node)), [1], "still checked in millicores");
}

#[test]
fn scoring_strategies() {
    let node = nrt("single-numa-node", "container", &[(8, 8, 0, -1), (4, 16, 0, -1)]);
    let pod = guaranteed("2", "4Gi");
    let with = |type_: ScoringStrategyType, resources: Vec<ResourceSpecParams>| {
        score(&pod, Some(&node), &ScoringStrategyParams { type_: Some(type_), resources })
    };
    // LeastAllocated: NUMA 0 (75+50)/2 = 62, NUMA 1 (50+75)/2 = 62.
    assert_eq!(with(ScoringStrategyType::LeastAllocated, vec![]), 62);
    // Weighted cpu x3: NUMA 0 (75*3+50)/4 = 68, NUMA 1 (50*3+75)/4 = 56 -> lowest 56.
    let cpu3 = vec![ResourceSpecParams { name: "cpu".to_owned(), weight: 3 }];
    assert_eq!(with(ScoringStrategyType::LeastAllocated, cpu3), 56);
    // MostAllocated: NUMA 0 (25+50)/2 = 37, NUMA 1 (50+25)/2 = 37.
    assert_eq!(with(ScoringStrategyType::MostAllocated, vec![]), 37);
    // Balanced: fractions 0.25/0.5 -> sample variance 0.03125 -> 96.
    assert_eq!(with(ScoringStrategyType::BalancedAllocation, vec![]), 96);
}

#[test]
fn least_numa_nodes_scores_the_fewest_and_closest_nodes_a_requester_needs() {
    use crate::nrt::CostInfo;
    // Three NUMA nodes of 8 CPUs; 0-1 are close (12), 2 is far (30) from both.
    let mut node = nrt("restricted", "container", &[(8, 16, 0, -1), (8, 16, 0, -1), (8, 16, 0, -1)]);
    let far = |a: usize, b: usize| {
        if a == b {
            10
        } else if a + b == 1 {
            12
        } else {
            30
        }
    };
    for (a, zone) in node.zones.iter_mut().enumerate() {
        zone.costs = (0..3).map(|b| CostInfo { name: format!("node-{b}").into(), value: far(a, b) }).collect();
    }
    let least = ScoringStrategyParams { type_: Some(ScoringStrategyType::LeastNUMANodes), resources: vec![] };
    // One node: 100 - 12, plus 6 (one node is always among the closest).
    assert_eq!(score(&guaranteed("4", "4Gi"), Some(&node), &least), 94);
    // Two nodes, the close pair: 100 - 24 + 6.
    assert_eq!(score(&guaranteed("12", "4Gi"), Some(&node), &least), 82);
    // Two nodes, but the close pair has no room left: a far pair, no bonus.
    node.zones[0].resources[0].available = Quantity::from_i64(0);
    assert_eq!(score(&guaranteed("12", "4Gi"), Some(&node), &least), 76);
    // Nowhere: 0. A Burstable pod: 100 everywhere, as with every strategy.
    assert_eq!(score(&guaranteed("30", "4Gi"), Some(&node), &least), 0);
    assert_eq!(score(&pod(&[], &[("app", json!({"cpu": "1"}))]), Some(&node), &least), MAX_NODE_SCORE);
}

fn arb_zone() -> impl Strategy<Value = ZoneSpec> {
    (0..16_i64, 0..16_i64, 0..4_i64, -1..3_i64)
}

fn arb_container() -> impl Strategy<Value = Value> {
    (0..10_i64, 1..10_i64, 0..3_i64, 0..3_i64).prop_map(|(cpu, mem, huge, gpu)| {
        let mut extra = vec![];
        let (huge, gpu) = (format!("{huge}Gi"), gpu.to_string());
        extra.push(("hugepages-1Gi", huge.as_str()));
        extra.push(("vendor.com/gpu", gpu.as_str()));
        resources(&cpu.max(1).to_string(), &format!("{mem}Gi"), &extra)
    })
}

proptest! {
    /// A pod placed on a NUMA node fits what that node had (the filter never over-commits a zone).
    #[test]
    fn a_placement_never_overcommits_its_numa(
        zones in prop::collection::vec(arb_zone(), 1..4),
        containers in prop::collection::vec(arb_container(), 1..4),
        pod_scope in any::<bool>(),
    ) {
        let node = nrt("single-numa-node", if pod_scope { "pod" } else { "container" }, &zones);
        let named: Vec<(String, Value)> = containers.into_iter().enumerate().map(|(i, c)| (format!("c{i}"), c)).collect();
        let refs: Vec<(&str, Value)> = named.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
        let pod = pod(&[], &refs);
        let fit = evaluate(&pod, Some(&node), None, &default_strategy());
        if let Filtered::Fits { placements } = &fit.filtered {
            let mut zones_left = numa_zones(&node);
            for placement in placements {
                let requests = match &placement.requester {
                    Requester::Pod => pod.effective(),
                    Requester::Container(name) => pod.containers.iter().find(|c| c.requester == Requester::Container(name.clone())).unwrap().requests.clone(),
                    Requester::InitContainer(_) | Requester::Sidecar(_) => unreachable!(),
                };
                let zone = zones_left.iter_mut().find(|z| z.id == placement.numa).unwrap();
                for (resource, amount) in &requests {
                    // Resources no NUMA node lists are node-level: nothing to check per zone.
                    let Some(available) = zone.available.get_mut(resource) else { continue };
                    prop_assert!(*available >= *amount, "{resource}: {available} < {amount}");
                    *available -= amount;
                }
            }
            prop_assert!(fit.score.is_some_and(|s| (0..=MAX_NODE_SCORE).contains(&s)));
        } else {
            prop_assert_eq!(fit.score, None);
        }
    }

    /// More available resources never turn a fit into a rejection.
    #[test]
    fn more_room_never_hurts(
        zones in prop::collection::vec(arb_zone(), 1..4),
        containers in prop::collection::vec(arb_container(), 1..3),
        extra_cpu in 0..8_i64,
    ) {
        let named: Vec<(String, Value)> = containers.into_iter().enumerate().map(|(i, c)| (format!("c{i}"), c)).collect();
        let refs: Vec<(&str, Value)> = named.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
        let pod = pod(&[], &refs);
        let small = nrt("single-numa-node", "pod", &zones);
        let bigger: Vec<ZoneSpec> = zones.iter().map(|(c, m, h, g)| (c + extra_cpu, *m, *h, *g)).collect();
        let big = nrt("single-numa-node", "pod", &bigger);
        let fits = |n: &NodeResourceTopology| matches!(filter(&pod, Some(n), None), Filtered::Fits { .. });
        prop_assert!(!fits(&small) || fits(&big));
    }

    /// Whatever the pod, the verdict renders to one line and scores stay within 0..=100.
    #[test]
    fn verdicts_are_one_line(zones in prop::collection::vec(arb_zone(), 0..3), containers in prop::collection::vec(arb_container(), 0..3)) {
        let named: Vec<(String, Value)> = containers.into_iter().enumerate().map(|(i, c)| (format!("c{i}"), c)).collect();
        let refs: Vec<(&str, Value)> = named.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
        let pod = pod(&refs, &refs);
        for strategy in [ScoringStrategyType::LeastAllocated, ScoringStrategyType::MostAllocated, ScoringStrategyType::BalancedAllocation] {
            let fit = evaluate(&pod, Some(&nrt("single-numa-node", "container", &zones)), None, &ScoringStrategyParams { type_: Some(strategy), resources: vec![] });
            if let Filtered::Rejected(r) = &fit.filtered {
                prop_assert!(!r.to_string().contains('\n'));
            }
            prop_assert!(fit.score.is_none_or(|s| (0..=MAX_NODE_SCORE).contains(&s)));
        }
    }
}

fn room_for(cpu: &str, memory: &str, extra: &[(&str, &str)]) -> Resources {
    pod(&[], &[("app", resources(cpu, memory, extra))]).effective()
}

#[test]
fn room_is_counted_per_zone_by_its_scarcest_resource_within_the_nodes_limit() {
    use capacity::room;
    let node = nrt("single-numa-node", "container", &[(8, 16, 0, -1), (4, 32, 0, -1)]);
    let four_cpus = room_for("4", "8Gi", &[]);
    let counted = room(&four_cpus, &node, None);
    let per_zone: Vec<(Option<u64>, Option<&str>)> =
        counted.zones.iter().map(|z| (z.pods, z.limited_by.as_deref())).collect();
    assert_eq!(per_zone, [(Some(2), Some("cpu")), (Some(1), Some("cpu"))]);
    assert_eq!((counted.pods, counted.aligned), (3, true));

    // The Node, with 6 of its 12 CPUs requested by pods already there, allows one more.
    let mut on_node = node_resources(&[("cpu", "12"), ("memory", "48Gi"), ("pods", "110")]);
    on_node = on_node.with_pods([&bound_pod("6", "1Gi")]);
    let limited = room(&four_cpus, &node, Some(&on_node));
    assert_eq!((limited.pods, limited.node_limit), (1, Some((1, "cpu".to_owned()))));

    // Hugepages no zone lists (no Static memory manager): no zone can align them.
    let huge = room(&room_for("1", "1Gi", &[("hugepages-2Mi", "1Gi")]), &node, None);
    assert_eq!(huge.pods, 0);
    assert_eq!(huge.zones[0].limited_by.as_deref(), Some("hugepages-2Mi"));
    // A device one zone lists: only that zone counts.
    let gpus = nrt("best-effort", "container", &[(8, 16, 0, 0), (8, 16, 0, 3)]);
    let with_gpu = room(&room_for("2", "1Gi", &[("vendor.com/gpu", "1")]), &gpus, None);
    assert_eq!(with_gpu.zones.iter().map(|z| z.pods).collect::<Vec<_>>(), [Some(0), Some(3)]);
    assert!(!with_gpu.aligned, "best-effort: the kubelet does not insist on one zone");
}

proptest! {
    /// Room for one more pod on a single-numa-node node exactly when the filter would place it.
    #[test]
    fn room_for_one_pod_is_what_the_filter_accepts(
        zones in prop::collection::vec(arb_zone(), 1..4),
        cpu in 1..16i64,
        memory_gi in 1..32i64,
    ) {
        let node = nrt("single-numa-node", "container", &zones);
        let shape = guaranteed(&cpu.to_string(), &format!("{memory_gi}Gi"));
        let fits = matches!(evaluate(&shape, Some(&node), None, &default_strategy()).filtered, Filtered::Fits { .. });
        prop_assert_eq!(capacity::room(&shape.effective(), &node, None).pods >= 1, fits);
    }
}

/// A node's verdict for the explanation tests.
fn verdict(node: &str, zones: &[ZoneSpec], pod: &PodRequests) -> (String, NodeFit) {
    (node.to_owned(), evaluate(pod, Some(&nrt("single-numa-node", "container", zones)), None, &default_strategy()))
}

#[test]
fn an_explanation_names_the_shortest_reasons_first_and_counts_the_rest_within_the_limit() {
    use explain::{EVENT_MESSAGE_LIMIT, ReasonKind, explain};
    let app = guaranteed("4", "8Gi");
    let mut verdicts = vec![
        verdict("big-0", &[(8, 16, 0, -1)], &app),
        verdict("small-cpu", &[(2, 16, 0, -1), (2, 16, 0, -1)], &app),
        verdict("small-memory", &[(8, 4, 0, -1)], &app),
    ];
    let few = explain(&verdicts, EVENT_MESSAGE_LIMIT);
    assert_eq!(
        few.message,
        "1/3 nodes can take it on one NUMA zone (big-0: the NUMA rules would place it there); \
         small-memory: memory 4Gi available < 8Gi requested by container \"app\" (4Gi on NUMA 0); \
         small-cpu: cpu 2 available < 4 requested by container \"app\" (2 on NUMA 0, 2 on NUMA 1)"
    );
    assert_eq!(few.first_reason, Some(ReasonKind::Cpu));

    // 5,000 refusing nodes: as many as fit in 1 KiB, then the count and kinds of the rest.
    for i in 0..5_000 {
        verdicts.push(verdict(&format!("full-{i:04}"), &[(1, 16, 0, -1)], &app));
    }
    let many = explain(&verdicts, EVENT_MESSAGE_LIMIT);
    assert!(many.message.len() <= EVENT_MESSAGE_LIMIT, "{}", many.message.len());
    assert!(many.message.starts_with("1/5003 nodes can take it"), "{}", many.message);
    assert!(many.message.contains("more nodes: cpu"), "{}", many.message);
    assert_eq!(many.first_reason, Some(ReasonKind::Cpu));
    let tiny = explain(&verdicts, 120);
    assert!(tiny.message.len() <= 120, "{}", tiny.message);
}

proptest! {
    /// What the kubelet admits on a single-numa-node node, the plugin's filter lets through too:
    /// an engine filtering by the kubelet's rules never places a pod the plugin would refuse.
    #[test]
    fn a_pod_the_kubelet_admits_on_single_numa_node_is_one_the_plugin_admits(
        zones in prop::collection::vec(arb_zone(), 1..4),
        containers in prop::collection::vec(arb_container(), 1..3),
    ) {
        let named: Vec<(String, Value)> = containers.into_iter().enumerate().map(|(i, c)| (format!("c{i}"), c)).collect();
        let refs: Vec<(&str, Value)> = named.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
        let pod = pod(&[], &refs);
        let node = nrt("single-numa-node", "container", &zones);
        let admission = kubelet::admit(&pod, &node, &kubelet::PolicyOptions::default());
        if admission.admitted() {
            let plugin = evaluate(&pod, Some(&node), None, &default_strategy()).filtered;
            prop_assert!(!matches!(plugin, Filtered::Rejected(_)), "kubelet {admission:?}, plugin {plugin:?}");
        }
    }
}
