//! The kubelet's admission, case by case, as its Topology Manager decides (cases worked out
//! from the kubelet's hint providers and merge; see the module notes).

use serde_json::{Value, json};

use super::*;

/// One NUMA node: CPUs (capacity, free), and extra resources `(name, capacity/allocatable, free)`.
struct Numa {
    cpus: (i64, i64),
    extra: Vec<(&'static str, &'static str, &'static str)>,
}

fn numa(cpus: i64, free: i64) -> Numa {
    Numa { cpus: (cpus, free), extra: Vec::new() }
}

impl Numa {
    fn with(mut self, name: &'static str, capacity: &'static str, free: &'static str) -> Self {
        self.extra.push((name, capacity, free));
        self
    }
}

fn node(policy: &str, scope: &str, zones: Vec<Numa>, distances: Option<&[&[i64]]>) -> NodeResourceTopology {
    let zones: Vec<Value> = zones
        .iter()
        .enumerate()
        .map(|(id, zone)| {
            let mut resources = vec![json!({"name": "cpu", "capacity": zone.cpus.0.to_string(),
                "allocatable": zone.cpus.0.to_string(), "available": zone.cpus.1.to_string()})];
            for (name, capacity, free) in &zone.extra {
                resources.push(json!({"name": name, "capacity": capacity, "allocatable": capacity, "available": free}));
            }
            let costs: Vec<Value> = distances
                .map(|d| {
                    d[id].iter().enumerate().map(|(j, v)| json!({"name": format!("node-{j}"), "value": v})).collect()
                })
                .unwrap_or_default();
            json!({"name": format!("node-{id}"), "type": "Node", "resources": resources, "costs": costs})
        })
        .collect();
    serde_json::from_value(json!({"metadata": {"name": "worker"}, "zones": zones, "attributes": [
        {"name": "topologyManagerPolicy", "value": policy}, {"name": "topologyManagerScope", "value": scope}]}))
    .unwrap()
}

/// A pod of containers `(kind, name, cpu, extra)`: kind `init`, `sidecar` or `app`; requests
/// equal limits (Guaranteed) unless the cpu is fractional and `burstable`.
/// `(kind, name, cpu, extra requests)`.
type ContainerSpec<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);

fn pod(containers: &[ContainerSpec<'_>]) -> PodRequests {
    let container = |(kind, name, cpu, extra): &ContainerSpec<'_>| {
        let mut resources = serde_json::Map::new();
        resources.insert("cpu".into(), json!(cpu));
        resources.insert("memory".into(), json!("1Gi"));
        for (resource, amount) in *extra {
            resources.insert((*resource).into(), json!(amount));
        }
        let mut c = json!({"name": name, "resources": {"requests": resources, "limits": resources}});
        if *kind == "sidecar" {
            c["restartPolicy"] = json!("Always");
        }
        c
    };
    let init: Vec<Value> = containers.iter().filter(|c| c.0 != "app").map(container).collect();
    let app: Vec<Value> = containers.iter().filter(|c| c.0 == "app").map(container).collect();
    let pod = serde_json::from_value(json!({"spec": {"initContainers": init, "containers": app}})).unwrap();
    PodRequests::from_pod(&pod)
}

fn one(cpu: &str, extra: &[(&'static str, &'static str)]) -> PodRequests {
    // Leak the slice for the table's lifetime: tests only.
    let extra: &'static [(&str, &str)] = Box::leak(extra.to_vec().into_boxed_slice());
    pod(&[("app", "app", cpu, extra)])
}

/// Where the kubelet aligns the first requester, or why it refuses.
fn verdict(pod: &PodRequests, nrt: &NodeResourceTopology, options: &PolicyOptions) -> Result<Option<Vec<u32>>, String> {
    let admission = admit(pod, nrt, options);
    match admission.refusal {
        Some(refusal) => Err(refusal.to_string()),
        None => Ok(admission.aligned.first().and_then(|a| a.numa.clone())),
    }
}

fn default() -> PolicyOptions {
    PolicyOptions::default()
}

#[test]
fn a_request_one_node_holds_is_aligned_on_the_lowest_such_node_under_every_policy() {
    for policy in ["best-effort", "restricted", "single-numa-node"] {
        let nrt = node(policy, "container", vec![numa(8, 6), numa(8, 8)], None);
        assert_eq!(verdict(&one("4", &[]), &nrt, &default()), Ok(Some(vec![0])), "{policy}");
    }
}

#[test]
fn a_request_one_node_could_hold_but_none_holds_now_is_spread_by_best_effort_and_refused_by_the_others() {
    let free = || vec![numa(8, 3), numa(8, 3)];
    let pod = one("4", &[]);
    assert_eq!(verdict(&pod, &node("best-effort", "container", free(), None), &default()), Ok(Some(vec![0, 1])));
    let restricted = verdict(&pod, &node("restricted", "container", free(), None), &default()).unwrap_err();
    assert!(restricted.starts_with("the kubelet (restricted) cannot align container \"app\""), "{restricted}");
    assert!(restricted.contains("cpu 4 requested, at most 3 free on one NUMA node"), "{restricted}");
    assert!(verdict(&pod, &node("single-numa-node", "container", free(), None), &default()).is_err());
}

#[test]
fn a_request_no_node_could_hold_spans_two_except_under_single_numa_node() {
    let pod = one("10", &[]);
    for policy in ["best-effort", "restricted"] {
        let nrt = node(policy, "container", vec![numa(8, 8), numa(8, 8)], None);
        assert_eq!(verdict(&pod, &nrt, &default()), Ok(Some(vec![0, 1])), "{policy}");
        assert!(admit(&pod, &nrt, &default()).aligned[0].preferred, "as narrow as 10 CPUs allow");
    }
    let nrt = node("single-numa-node", "container", vec![numa(8, 8), numa(8, 8)], None);
    assert!(verdict(&pod, &nrt, &default()).is_err());
}

#[test]
fn a_device_on_one_node_draws_the_cpus_to_it() {
    let zones = || vec![numa(8, 8).with("example.com/gpu", "0", "0"), numa(8, 8).with("example.com/gpu", "1", "1")];
    let pod = one("2", &[("example.com/gpu", "1")]);
    for policy in ["best-effort", "restricted", "single-numa-node"] {
        assert_eq!(verdict(&pod, &node(policy, "container", zones(), None), &default()), Ok(Some(vec![1])), "{policy}");
    }
}

#[test]
fn two_devices_one_per_node_with_cpus_that_fit_one_node_are_not_a_preferred_merge() {
    let zones = || vec![numa(8, 8).with("example.com/gpu", "1", "1"), numa(8, 8).with("example.com/gpu", "1", "1")];
    let pod = one("2", &[("example.com/gpu", "2")]);
    assert_eq!(verdict(&pod, &node("best-effort", "container", zones(), None), &default()), Ok(Some(vec![0, 1])));
    assert!(verdict(&pod, &node("restricted", "container", zones(), None), &default()).is_err());
    assert!(verdict(&pod, &node("single-numa-node", "container", zones(), None), &default()).is_err());
}

#[test]
fn memory_wider_than_the_cpus_is_refused_by_restricted_and_spread_by_best_effort() {
    let zones = || vec![numa(8, 8).with("memory", "16Gi", "16Gi"), numa(8, 8).with("memory", "16Gi", "16Gi")];
    let pod = pod(&[("app", "app", "2", &[("memory", "20Gi")])]);
    assert!(verdict(&pod, &node("restricted", "container", zones(), None), &default()).is_err());
    assert_eq!(verdict(&pod, &node("best-effort", "container", zones(), None), &default()), Ok(Some(vec![0, 1])));
}

const DISTANCES: &[&[i64]] = &[&[10, 11, 21, 21], &[11, 10, 21, 21], &[21, 21, 10, 11], &[21, 21, 11, 10]];

#[test]
fn among_equally_narrow_sets_the_lowest_ids_win_unless_the_closest_are_preferred() {
    let pod = one("6", &[]);
    let all_free =
        node("restricted", "container", vec![numa(4, 4), numa(4, 4), numa(4, 4), numa(4, 4)], Some(DISTANCES));
    assert_eq!(verdict(&pod, &all_free, &default()), Ok(Some(vec![0, 1])));
    let one_full = || vec![numa(4, 4), numa(4, 0), numa(4, 4), numa(4, 4)];
    let nrt = node("restricted", "container", one_full(), Some(DISTANCES));
    assert_eq!(verdict(&pod, &nrt, &default()), Ok(Some(vec![0, 2])));
    let closest = PolicyOptions { prefer_closest_numa_nodes: true, ..default() };
    assert_eq!(verdict(&pod, &nrt, &closest), Ok(Some(vec![2, 3])));
    // single-numa-node ignores the option (one node either way).
}

#[test]
fn a_burstable_pod_without_devices_is_aligned_nowhere_and_admitted() {
    let burstable: PodRequests = PodRequests::from_pod(
        &serde_json::from_value(json!({"spec": {"containers": [{"name": "app",
            "resources": {"requests": {"cpu": "500m"}}}]}}))
        .unwrap(),
    );
    let nrt = node("single-numa-node", "container", vec![numa(8, 0), numa(8, 0)], None);
    assert_eq!(verdict(&burstable, &nrt, &default()), Ok(None));
}

#[test]
fn pod_scope_aligns_the_effective_request_with_sidecars_counted() {
    // A sidecar (2) before an init container (6), then the app (3): max(2 + 6, 3 + 2) = 8.
    let requests = pod(&[("sidecar", "proxy", "2", &[]), ("init", "setup", "6", &[]), ("app", "app", "3", &[])]);
    let nrt = node("single-numa-node", "pod", vec![numa(8, 8), numa(8, 8)], None);
    let admission = admit(&requests, &nrt, &default());
    assert!(admission.admitted(), "{admission:?}");
    assert_eq!(admission.aligned, [Aligned { requester: Requester::Pod, numa: Some(vec![0]), preferred: true }]);
    // A larger init container after the sidecar: 2 + 7 = 9 CPUs, more than one node holds.
    let bigger = pod(&[("sidecar", "proxy", "2", &[]), ("init", "setup", "7", &[]), ("app", "app", "3", &[])]);
    let refused = verdict(&bigger, &nrt, &default()).unwrap_err();
    assert!(
        refused.contains("cannot align the pod: no single NUMA node holds all of it (cpu 9 requested"),
        "{refused}"
    );
}

#[test]
fn container_scope_aligns_each_container_in_turn_and_reuses_an_init_containers_cpus() {
    let pod = pod(&[("sidecar", "proxy", "2", &[]), ("init", "setup", "6", &[]), ("app", "app", "3", &[])]);
    let nrt = node("single-numa-node", "container", vec![numa(8, 5), numa(8, 8)], None);
    let admission = admit(&pod, &nrt, &default());
    assert!(admission.admitted(), "{admission:?}");
    let placed: Vec<(String, Option<Vec<u32>>)> =
        admission.aligned.iter().map(|a| (a.requester.to_string(), a.numa.clone())).collect();
    assert_eq!(
        placed,
        [
            ("sidecar container \"proxy\"".to_owned(), Some(vec![0])),
            ("init container \"setup\"".to_owned(), Some(vec![1])),
            // Where the init container's CPUs are, to reuse them.
            ("container \"app\"".to_owned(), Some(vec![1])),
        ]
    );
}

#[test]
fn a_later_container_sees_what_the_earlier_ones_took() {
    let pod = pod(&[("app", "a", "6", &[]), ("app", "b", "6", &[])]);
    let nrt = node("single-numa-node", "container", vec![numa(8, 8), numa(8, 8)], None);
    let aligned: Vec<Option<Vec<u32>>> = admit(&pod, &nrt, &default()).aligned.into_iter().map(|a| a.numa).collect();
    assert_eq!(aligned, [Some(vec![0]), Some(vec![1])]);
    let nrt = node("single-numa-node", "container", vec![numa(8, 8), numa(8, 5)], None);
    let refused = verdict(&pod, &nrt, &default()).unwrap_err();
    assert!(refused.contains("container \"b\""), "{refused}");
}

#[test]
fn policy_none_aligns_nothing_and_admits_everything() {
    let nrt = node("none", "container", vec![numa(8, 0), numa(8, 0)], None);
    let admission = admit(&one("4", &[]), &nrt, &default());
    assert!(admission.admitted() && admission.aligned.is_empty(), "{admission:?}");
}

#[test]
fn more_numa_nodes_than_the_kubelet_allows_is_a_node_it_does_not_run_on() {
    let zones = || (0..9).map(|_| numa(4, 4)).collect::<Vec<_>>();
    let refused = verdict(&one("1", &[]), &node("restricted", "container", zones(), None), &default()).unwrap_err();
    assert!(refused.starts_with("9 NUMA nodes"), "{refused}");
    let raised = PolicyOptions { max_allowable_numa_nodes: 9, ..default() };
    assert_eq!(verdict(&one("1", &[]), &node("restricted", "container", zones(), None), &raised), Ok(Some(vec![0])));
}

#[test]
fn fractional_cpus_are_not_pinned_so_only_memory_is_aligned() {
    let zones = || vec![numa(8, 0).with("memory", "8Gi", "8Gi"), numa(8, 0).with("memory", "8Gi", "8Gi")];
    let pod = pod(&[("app", "app", "1500m", &[("memory", "2Gi")])]);
    assert_eq!(verdict(&pod, &node("single-numa-node", "container", zones(), None), &default()), Ok(Some(vec![0])));
}

#[test]
fn a_reserved_pod_is_taken_from_the_zones_the_kubelet_aligns_it_on() {
    let zones = vec![numa(8, 6).with("example.com/gpu", "1", "1"), numa(8, 8).with("example.com/gpu", "1", "1")];
    let nrt = node("single-numa-node", "container", zones, None);
    let (admission, after) = reserve(&one("4", &[("example.com/gpu", "1")]), &nrt, &default());
    assert!(admission.admitted());
    let available = |zone: usize, name: &str| {
        let resource = after.zones[zone].resources.iter().find(|r| r.name == name).unwrap();
        resource.available.to_string()
    };
    assert_eq!((available(0, "cpu"), available(0, "example.com/gpu")), ("2".to_owned(), "0".to_owned()));
    assert_eq!((available(1, "cpu"), available(1, "example.com/gpu")), ("8".to_owned(), "1".to_owned()));
}

#[test]
fn memory_and_hugepages_are_preferred_at_the_width_that_holds_them_together() {
    // Hugepages fit one node; memory needs both: the memory manager's narrowest set for the two
    // together is both nodes, and that set is a preferred hint (restricted admits it).
    let zones = || {
        vec![
            numa(8, 8).with("memory", "8Gi", "8Gi").with("hugepages-1Gi", "4Gi", "4Gi"),
            numa(8, 8).with("memory", "8Gi", "8Gi").with("hugepages-1Gi", "4Gi", "4Gi"),
        ]
    };
    let pod = pod(&[("app", "app", "10", &[("memory", "12Gi"), ("hugepages-1Gi", "2Gi")])]);
    assert_eq!(verdict(&pod, &node("restricted", "container", zones(), None), &default()), Ok(Some(vec![0, 1])));
    assert!(verdict(&pod, &node("single-numa-node", "container", zones(), None), &default()).is_err());
}

/// A random NUMA node's resources: `(cpu capacity, cpu free, memory GiB allocatable, free,
/// hugepages GiB allocatable, free, NICs, free NICs)`, free never above allocatable.
fn arb_numa() -> impl proptest::strategy::Strategy<Value = [i64; 8]> {
    use proptest::prelude::*;
    (1..16i64, 1..16i64, 1..8i64, 0..4i64, 0..3i64)
        .prop_flat_map(|(cpus, memory, hugepages, nics, _)| {
            (Just(cpus), 0..=cpus, Just(memory), 0..=memory, Just(hugepages), 0..=hugepages, Just(nics), 0..=nics)
        })
        .prop_map(|(a, b, c, d, e, f, g, h)| [a, b, c, d, e, f, g, h])
}

/// A container's name, CPUs and other requests, owned (the proptest's pods).
type ContainerOwned = (String, String, Vec<(&'static str, String)>);

fn arb_nrt(zones: &[[i64; 8]], policy: &str, scope: &str, distances: &[i64]) -> NodeResourceTopology {
    let zones: Vec<Value> = zones
        .iter()
        .enumerate()
        .map(|(id, [cpus, free_cpus, memory, free_memory, hugepages, free_hugepages, nics, free_nics])| {
            let resource = |name: &str, capacity: String, free: String| {
                json!({"name": name, "capacity": capacity, "allocatable": capacity, "available": free})
            };
            let mut resources = vec![
                resource("cpu", cpus.to_string(), free_cpus.to_string()),
                resource("memory", format!("{memory}Gi"), format!("{free_memory}Gi")),
                resource("hugepages-1Gi", format!("{hugepages}Gi"), format!("{free_hugepages}Gi")),
            ];
            if *nics > 0 {
                resources.push(resource("example.com/nic", nics.to_string(), free_nics.to_string()));
            }
            let costs: Vec<Value> = (0..zones.len())
                .map(|j| {
                    let value = if j == id { 10 } else { distances[(id + j) % distances.len()] };
                    json!({"name": format!("node-{j}"), "value": value})
                })
                .collect();
            json!({"name": format!("node-{id}"), "type": "Node", "resources": resources, "costs": costs})
        })
        .collect();
    serde_json::from_value(json!({"metadata": {"name": "worker"}, "zones": zones, "attributes": [
        {"name": "topologyManagerPolicy", "value": policy}, {"name": "topologyManagerScope", "value": scope}]}))
    .unwrap()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]
    /// The quick answer for a pod aligned as one requester is the general admission's, on every
    /// policy, scope and option; pods of several containers go the general way and agree too.
    #[test]
    fn a_placement_is_the_general_admissions_answer(
        zones in proptest::collection::vec(arb_numa(), 1..5),
        policy in proptest::sample::select(vec!["none", "best-effort", "restricted", "single-numa-node"]),
        scope in proptest::sample::select(vec!["container", "pod"]),
        distances in proptest::collection::vec(11..40i64, 1..4),
        closest in proptest::bool::ANY,
        containers in proptest::collection::vec((1..24i64, 0..16i64, 0..6i64, 0..4i64, proptest::bool::ANY), 1..3),
    ) {
        let nrt = arb_nrt(&zones, policy, scope, &distances);
        let specs: Vec<ContainerOwned> = containers
            .iter()
            .enumerate()
            .map(|(i, (cpu, memory, hugepages, nics, fractional))| {
                let cpu = if *fractional { format!("{cpu}500m") } else { cpu.to_string() };
                let mut extra = vec![("memory", format!("{}Gi", memory + 1))];
                if *hugepages > 0 { extra.push(("hugepages-1Gi", format!("{hugepages}Gi"))); }
                if *nics > 0 { extra.push(("example.com/nic", nics.to_string())); }
                (format!("c{i}"), cpu, extra)
            })
            .collect();
        let borrowed: Vec<Vec<(&str, &str)>> =
            specs.iter().map(|(_, _, extra)| extra.iter().map(|(n, a)| (*n, a.as_str())).collect()).collect();
        let list: Vec<ContainerSpec<'_>> =
            specs.iter().zip(&borrowed).map(|((name, cpu, _), extra)| ("app", name.as_str(), cpu.as_str(), extra.as_slice())).collect();
        let pod = pod(&list);
        let options = PolicyOptions { prefer_closest_numa_nodes: closest, ..default() };
        let node = Node::of(&nrt);
        let ask = Ask::of(&pod);
        let general = admit_on(&ask, &node.config, &mut std::borrow::Cow::Borrowed(&node.machine), &options, false);
        let expected = match general.refusal.clone() {
            Some(refusal) => Err(refusal),
            None => Ok(Placement::of(&general, &node.machine)),
        };
        proptest::prop_assert_eq!(node.place(&ask, &options), expected, "{:?}", general);
    }
}
