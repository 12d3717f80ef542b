//! The numaplacement test vectors, generated with upstream's Go code (the `numaplacement` library
//! v0.1.0 and the resource-topology-exporter's resource monitor).

use std::collections::BTreeMap;

use numaresources_api::nrt::well_known::{ATTR_NUMA_PLACEMENT_METADATA, ATTR_NUMA_PLACEMENT_VECTOR};
use numaresources_api::nrt::{AttributeInfo, NodeResourceTopology, Zone};
use proptest::prelude::*;

use super::*;

type Triple = (String, String, String);

fn triple(ns: &str, pod: &str, container: &str) -> Triple {
    (ns.to_owned(), pod.to_owned(), container.to_owned())
}

/// Encodes `(namespace, pod, container, numa)` and checks the metadata and the vectors.
fn assert_encodes(numa_nodes: u32, inputs: &[(Triple, i64)], metadata: &str, vectors: &[(u32, &str)]) {
    let payload = encode(
        numa_nodes,
        inputs.iter().map(|((namespace, pod, container), numa_node)| Placement {
            namespace,
            pod,
            container,
            numa_node: *numa_node,
        }),
    )
    .unwrap();
    assert_eq!(payload.metadata_string(), metadata);
    let expected: BTreeMap<u32, String> = vectors.iter().map(|&(n, v)| (n, v.to_owned())).collect();
    assert_eq!(payload.vectors, expected, "{metadata}");
}

fn default_ns(inputs: &[(&str, &str, i64)]) -> Vec<(Triple, i64)> {
    inputs.iter().map(|&(pod, container, numa)| (triple("default", pod, container), numa)).collect()
}

// Hash check values (XXH64, seed 0, of `namespace\0pod\0container`).

#[test]
fn container_hashes_match_the_spec_check_values() {
    assert_eq!(xxh64(b"", 0), 0xef46_db37_51d8_e999);
    assert_eq!(xxh64(b"abc", 0), 0x44bc_2cf5_ad77_0999);
    assert_eq!(container_hash("default", "pod-a", "cnt-0"), 0x66d1_44f0_9ce5_ae7d);
    assert_eq!(container_hash("default", "pod-a", "cnt-0"), 7_408_778_662_216_314_493);
    assert_eq!(container_hash("", "", ""), 0x9aab_a41f_fa2d_a101);
    assert_eq!(container_hash("ns", "pod", "c"), 0x1ee6_e11c_c465_4238);
    assert_eq!(
        container_hash("openshift-numaresources", "numaresourcesoperator-worker-xyz12", "resource-topology-exporter"),
        0xf42c_335b_b7f8_d419
    );
}

#[test]
fn hashes_sort_as_unsigned_in_the_spec_lists() {
    // E6's sorted list, and E13's with empty strings.
    let e6 = [
        ("pod-c", "cnt-1", 0x5c45_8189_daeb_1560_u64),
        ("pod-a", "cnt-0", 0x66d1_44f0_9ce5_ae7d),
        ("pod-a", "cnt-1", 0x9ad5_0773_1938_7b3e),
        ("pod-b", "cnt-0", 0xc97c_b9ca_d4cc_a918),
        ("pod-c", "cnt-0", 0xe964_7461_f641_d4c4),
    ];
    for (pod, container, hash) in e6 {
        assert_eq!(container_hash("default", pod, container), hash, "{pod}/{container}");
    }
    assert_eq!(container_hash("a", "", ""), 0x13a2_b3ec_44cd_42e8);
    assert_eq!(container_hash("", "", "a"), 0xbfd3_f325_b250_b689);
    assert_eq!(container_hash("", "a", ""), 0xd254_1e67_0a8e_118f);
}

// Encoder cases (the library level).

#[test]
fn e1_e2_no_containers_publish_only_the_metadata() {
    assert_encodes(2, &[], "npv0v001::ve=leb89::cc=0::nn=2::bn=0", &[]);
    assert_encodes(1, &[], "npv0v001::ve=leb89::cc=0::nn=1::bn=0", &[]);
}

#[test]
fn e3_e4_one_container_is_on_the_busiest_node() {
    assert_encodes(2, &default_ns(&[("pod-a", "cnt-0", 0)]), "npv0v001::ve=leb89::cc=1::nn=2::bn=0", &[]);
    assert_encodes(2, &default_ns(&[("pod-a", "cnt-0", 1)]), "npv0v001::ve=leb89::cc=1::nn=2::bn=1", &[]);
}

#[test]
fn e5_the_second_container_sits_on_node_1() {
    let inputs = default_ns(&[("pod-a", "cnt-0", 0), ("pod-b", "cnt-0", 1)]);
    assert_encodes(2, &inputs, "npv0v001::ve=leb89::cc=2::nn=2::bn=0", &[(1, "#")]);
}

#[test]
fn e6_five_containers_on_two_nodes() {
    let inputs = default_ns(&[
        ("pod-a", "cnt-0", 0),
        ("pod-a", "cnt-1", 0),
        ("pod-b", "cnt-0", 0),
        ("pod-c", "cnt-0", 1),
        ("pod-c", "cnt-1", 1),
    ]);
    assert_encodes(2, &inputs, "npv0v001::ve=leb89::cc=5::nn=2::bn=0", &[(1, "!'")]);
}

#[test]
fn e7_a_tie_goes_to_the_lowest_node() {
    let inputs =
        default_ns(&[("pod-a", "cnt-0", 0), ("pod-a", "cnt-1", 0), ("pod-c", "cnt-0", 1), ("pod-c", "cnt-1", 1)]);
    assert_encodes(2, &inputs, "npv0v001::ve=leb89::cc=4::nn=2::bn=0", &[(1, "!%")]);
}

#[test]
fn e8_node_1_can_be_the_busiest() {
    let inputs =
        default_ns(&[("pod-a", "cnt-0", 0), ("pod-c", "cnt-0", 1), ("pod-c", "cnt-1", 1), ("pod-d", "cnt-0", 1)]);
    assert_encodes(2, &inputs, "npv0v001::ve=leb89::cc=4::nn=2::bn=1", &[(0, "$")]);
    assert_eq!(container_hash("default", "pod-d", "cnt-0"), 0x4baf_7c3d_6c53_584b);
}

#[test]
fn e9_four_nodes_one_empty() {
    let inputs = [
        (triple("prod", "web-0", "app"), 0),
        (triple("prod", "web-1", "app"), 0),
        (triple("prod", "db-0", "postgres"), 1),
        (triple("prod", "db-0", "exporter"), 1),
        (triple("prod", "db-1", "postgres"), 1),
        (triple("batch", "job-x", "worker"), 2),
    ];
    assert_encodes(4, &inputs, "npv0v001::ve=leb89::cc=6::nn=4::bn=1", &[(0, "%#"), (2, "$")]);
}

#[test]
fn e10_four_nodes_tie_between_1_and_2() {
    let inputs: Vec<(Triple, i64)> =
        [0, 1, 1, 2, 2, 3].iter().enumerate().map(|(i, &numa)| (triple("t", &format!("p{i}"), "c"), numa)).collect();
    assert_encodes(4, &inputs, "npv0v001::ve=leb89::cc=6::nn=4::bn=1", &[(0, "#"), (2, "!("), (3, "%")]);
}

#[test]
fn e11_a_single_node_never_has_a_vector() {
    let inputs = default_ns(&[("pod-a", "cnt-0", 0), ("pod-a", "cnt-1", 0), ("pod-b", "cnt-0", 0)]);
    assert_encodes(1, &inputs, "npv0v001::ve=leb89::cc=3::nn=1::bn=0", &[]);
}

#[test]
fn e12_a_repeated_identity_keeps_its_last_node() {
    let inputs = default_ns(&[("pod-a", "cnt-0", 0), ("pod-b", "cnt-0", 0), ("pod-a", "cnt-0", 1)]);
    assert_encodes(2, &inputs, "npv0v001::ve=leb89::cc=2::nn=2::bn=0", &[(1, "!")]);
}

#[test]
fn e13_empty_strings_are_identities_too() {
    let inputs =
        [(triple("", "", ""), 1), (triple("a", "", ""), 0), (triple("", "a", ""), 0), (triple("", "", "a"), 0)];
    assert_encodes(2, &inputs, "npv0v001::ve=leb89::cc=4::nn=2::bn=0", &[(1, "#")]);
}

#[test]
fn e14_a_hundred_containers_on_two_nodes() {
    let inputs: Vec<(Triple, i64)> = (0..50)
        .flat_map(|i| ["c0", "c1"].map(|c| (triple("workload", &format!("pod-{i:02}"), c), i64::from(i % 2))))
        .collect();
    assert_encodes(
        2,
        &inputs,
        "npv0v001::ve=leb89::cc=100::nn=2::bn=0",
        &[(1, "!$$$#$##$'%)###%##$##%###%#%$(##.##%#$##%########'")],
    );
    let offsets = leb89::decode_offsets(b"!$$$#$##$'%)###%##$##%###%#%$(##.##%#$##%########'").unwrap();
    assert_eq!(
        offsets,
        [
            0, 2, 4, 6, 7, 9, 10, 11, 13, 17, 20, 26, 27, 28, 29, 32, 33, 34, 36, 37, 38, 41, 42, 43, 44, 47, 48, 51,
            53, 58, 59, 60, 71, 72, 73, 76, 77, 79, 80, 81, 84, 85, 86, 87, 88, 89, 90, 91, 92, 96
        ]
    );
}

#[test]
fn e15_a_hundred_containers_on_four_nodes() {
    let inputs: Vec<(Triple, i64)> =
        (0..100).map(|i| (triple("workload", &format!("pod-{i:03}"), "main"), i64::from(i % 4))).collect();
    assert_encodes(
        4,
        &inputs,
        "npv0v001::ve=leb89::cc=100::nn=4::bn=0",
        &[(1, "!'#%#%-#*/$%%''#$$$*'#$$4"), (2, "*%(#'#%$*5$,$($%#+$$%#$$'"), (3, "%%(+)%#$#%#'(#$#%'#%-+'**")],
    );
}

#[test]
fn e16_two_thousand_containers_need_multi_byte_values() {
    let inputs: Vec<(Triple, i64)> =
        (0..2000).map(|i| (triple("scale", &format!("p{i}"), "c"), i64::from(matches!(i, 7 | 1000 | 1999)))).collect();
    assert_encodes(2, &inputs, "npv0v001::ve=leb89::cc=2000::nn=2::bn=0", &[(1, "z9k*gY")]);
    assert_eq!(leb89::decode_offsets(b"z9k*gY").unwrap(), [1366, 1757, 1937]);
}

#[test]
fn e17_eight_nodes_one_container_each() {
    let inputs: Vec<(Triple, i64)> = (0..8).map(|i| (triple("ns", &format!("pod{i}"), "c"), i)).collect();
    assert_encodes(
        8,
        &inputs,
        "npv0v001::ve=leb89::cc=8::nn=8::bn=0",
        &[(1, "$"), (2, "'"), (3, "#"), (4, "!"), (5, ")"), (6, "*"), (7, "(")],
    );
}

#[test]
fn the_encoder_rejects_unknown_and_out_of_range_nodes_and_zero_nodes() {
    let mut encoder = Encoder::new(2).unwrap();
    assert_eq!(encoder.add("a", "b", "c", -1), Err(Error::UnknownNumaAffinity));
    assert_eq!(encoder.add("a", "b", "c", -2), Err(Error::WrongNumaAffinity { numa_node: -2, numa_nodes: 2 }));
    assert_eq!(encoder.add("a", "b", "c", 2), Err(Error::WrongNumaAffinity { numa_node: 2, numa_nodes: 2 }));
    assert_eq!(encoder.add("a", "b", "c", 1), Ok(()));
    assert_eq!(Encoder::new(0).err(), Some(Error::InconsistentNodeCount));
    assert_eq!(Error::UnknownNumaAffinity.to_string(), "unknown NUMA affinity not supported");
}

// Exporter-level cases (upstream's resource monitor with a fake podresources client): 4 CPUs
// per NUMA node, CPU id = numa·4 + k.

fn cpu_map(numa_nodes: u32) -> impl Fn(i64) -> Option<u32> {
    move |cpu| u32::try_from(cpu).ok().filter(|&c| c < numa_nodes * 4).map(|c| c / 4)
}

fn pod(namespace: &str, name: &str, containers: Vec<ContainerAffinity>) -> PodAffinity {
    PodAffinity { namespace: namespace.to_owned(), name: name.to_owned(), containers }
}

fn cpus(name: &str, ids: &[i64]) -> ContainerAffinity {
    ContainerAffinity { name: name.to_owned(), cpu_ids: ids.to_vec(), ..ContainerAffinity::default() }
}

fn device(count: usize, numa: &[i64]) -> DeviceAffinity {
    DeviceAffinity { device_count: count, numa_nodes: numa.to_vec() }
}

fn memory(numa: &[i64]) -> MemoryAffinity {
    MemoryAffinity { numa_nodes: numa.to_vec() }
}

fn with_devices(name: &str, devices: Vec<DeviceAffinity>) -> ContainerAffinity {
    ContainerAffinity { name: name.to_owned(), devices, ..ContainerAffinity::default() }
}

fn with_memory(name: &str, blocks: Vec<MemoryAffinity>) -> ContainerAffinity {
    ContainerAffinity { name: name.to_owned(), memory: blocks, ..ContainerAffinity::default() }
}

fn scan(numa_nodes: u32, pods: &[PodAffinity]) -> Result<Payload, Error> {
    scan_payload("single-numa-node", numa_nodes, pods, cpu_map(numa_nodes))
}

fn published(payload: &Payload) -> (String, Vec<(u32, &str)>) {
    (payload.metadata_string(), payload.vectors.iter().map(|(&n, v)| (n, v.as_str())).collect())
}

fn r1_pods() -> Vec<PodAffinity> {
    vec![
        pod("default", "gu-pod", vec![cpus("c-numa0", &[0, 1]), cpus("c-numa1", &[4, 5])]),
        pod("default", "bu-pod", vec![cpus("shared", &[])]),
        pod("default", "dev-pod", vec![with_devices("dev", vec![device(1, &[1])]), cpus("sidecar", &[])]),
        pod("default", "mem-pod", vec![with_memory("mem", vec![memory(&[1])])]),
    ]
}

#[test]
fn r1_cpus_devices_and_memory_place_their_containers() {
    let payload = scan(2, &r1_pods()).unwrap();
    assert_eq!(published(&payload), ("npv0v001::ve=leb89::cc=4::nn=2::bn=1".to_owned(), vec![(0, "%")]));
    let prefixes = [
        ("gu-pod", "c-numa1", 0x39c5_37b8_u64),
        ("mem-pod", "mem", 0x4de4_0a14),
        ("dev-pod", "dev", 0xdf55_e5a1),
        ("gu-pod", "c-numa0", 0xf858_15db),
    ];
    for (pod, container, prefix) in prefixes {
        assert_eq!(container_hash("default", pod, container) >> 32, prefix, "{pod}/{container}");
    }
}

#[test]
fn r2_another_policy_publishes_no_placement() {
    assert_eq!(
        scan_payload("restricted", 2, &r1_pods(), cpu_map(2)),
        Err(Error::UnsupportedPolicy("restricted".to_owned()))
    );
}

// R3 (fingerprinting off publishes nothing) is the caller's switch: it does not call scan_payload.

#[test]
fn r4_r5_no_pods_still_publish_the_metadata() {
    assert_eq!(scan(2, &[]).unwrap().metadata_string(), "npv0v001::ve=leb89::cc=0::nn=2::bn=0");
    assert_eq!(scan(1, &[]).unwrap().metadata_string(), "npv0v001::ve=leb89::cc=0::nn=1::bn=0");
}

#[test]
fn r6_r7_cpus_spanning_nodes_follow_the_first_cpu() {
    let payload = scan(2, &[pod("default", "span", vec![cpus("c", &[1, 5])])]).unwrap();
    assert_eq!(published(&payload), ("npv0v001::ve=leb89::cc=1::nn=2::bn=0".to_owned(), vec![]));
    let payload = scan(2, &[pod("default", "span", vec![cpus("c", &[5, 1])])]).unwrap();
    assert_eq!(published(&payload), ("npv0v001::ve=leb89::cc=1::nn=2::bn=1".to_owned(), vec![]));
}

#[test]
fn r8_r9_a_device_or_memory_block_spanning_nodes_drops_the_payload() {
    let pods = [
        pod("default", "gu-pod", vec![cpus("c-numa0", &[0])]),
        pod("default", "span", vec![with_devices("c", vec![device(2, &[0, 1])])]),
    ];
    assert_eq!(scan(2, &pods), Err(Error::MultipleNumaNodes("c".to_owned())));
    let pods = [pod("default", "span", vec![with_memory("c", vec![memory(&[0, 1])])])];
    assert_eq!(scan(2, &pods), Err(Error::MultipleNumaNodes("c".to_owned())));
    assert_eq!(Error::MultipleNumaNodes("c".to_owned()).to_string(), "multiple NUMA nodes found for container c");
}

#[test]
fn r10_cpus_win_over_devices() {
    let container = ContainerAffinity { devices: vec![device(1, &[1])], ..cpus("c", &[2]) };
    let payload = scan(2, &[pod("default", "mix", vec![container])]).unwrap();
    assert_eq!(payload.metadata_string(), "npv0v001::ve=leb89::cc=1::nn=2::bn=0");
}

#[test]
fn r11_an_unknown_cpu_drops_the_payload() {
    assert_eq!(scan(2, &[pod("default", "bad", vec![cpus("c", &[99])])]), Err(Error::UnknownCpu(99)));
}

#[test]
fn r12_devices_without_locality_or_ids_make_no_eligible_pod() {
    let container = with_devices("c", vec![device(1, &[-1]), device(0, &[1])]);
    let pods = [pod("default", "nolocal", vec![container])];
    assert!(!pods[0].is_numa_eligible());
    assert_eq!(scan(2, &pods).unwrap().metadata_string(), "npv0v001::ve=leb89::cc=0::nn=2::bn=0");
}

#[test]
fn r13_a_memory_block_of_size_zero_still_places() {
    let payload = scan(2, &[pod("default", "zeromem", vec![with_memory("c", vec![memory(&[1])])])]).unwrap();
    assert_eq!(payload.metadata_string(), "npv0v001::ve=leb89::cc=1::nn=2::bn=1");
}

#[test]
fn r14_four_nodes_from_cpus() {
    let containers = vec![cpus("a", &[4]), cpus("b", &[8]), cpus("c", &[9]), cpus("d", &[12])];
    let payload = scan(4, &[pod("x", "p", containers)]).unwrap();
    assert_eq!(published(&payload), ("npv0v001::ve=leb89::cc=4::nn=4::bn=2".to_owned(), vec![(1, "$"), (3, "%")]));
    let prefixes = [("b", 0x4511_ba37_u64), ("c", 0x8d89_16c2), ("a", 0xda26_d979), ("d", 0xf7e7_7246)];
    for (container, prefix) in prefixes {
        assert_eq!(container_hash("x", "p", container) >> 32, prefix, "{container}");
    }
}

#[test]
fn r15_r16_r17_topologies_are_deduplicated_and_the_first_device_wins() {
    let r15 = scan(2, &[pod("default", "dd", vec![with_devices("c", vec![device(1, &[1, 1])])])]).unwrap();
    assert_eq!(r15.metadata_string(), "npv0v001::ve=leb89::cc=1::nn=2::bn=1");
    let r16 = scan(2, &[pod("default", "mm", vec![with_memory("c", vec![memory(&[-1, 1])])])]).unwrap();
    assert_eq!(r16.metadata_string(), "npv0v001::ve=leb89::cc=1::nn=2::bn=1");
    let r17 =
        scan(2, &[pod("default", "d2", vec![with_devices("c", vec![device(1, &[1]), device(1, &[0])])])]).unwrap();
    assert_eq!(r17.metadata_string(), "npv0v001::ve=leb89::cc=1::nn=2::bn=1");
}

#[test]
fn r18_a_pod_listed_twice_keeps_its_last_entry() {
    let pods = [
        pod("a", "p", vec![cpus("c", &[0])]),
        pod("b", "p", vec![cpus("c", &[4])]),
        pod("b", "p", vec![cpus("c", &[5])]),
    ];
    let payload = scan(2, &pods).unwrap();
    assert_eq!(published(&payload), ("npv0v001::ve=leb89::cc=2::nn=2::bn=0".to_owned(), vec![(1, "#")]));
}

#[test]
fn eligible_pods_are_the_with_exclusive_resources_fingerprint_set() {
    use crate::fingerprint::{Fingerprint, Method};
    let pods = r1_pods();
    let mut expected = Fingerprint::new();
    for name in ["gu-pod", "dev-pod", "mem-pod"] {
        expected.add("default", name);
    }
    assert_eq!(Fingerprint::from_pods(Method::WithExclusiveResources, &pods).sign(), expected.sign());
    assert_eq!(Fingerprint::from_pods(Method::All, &pods).len(), 4);
}

// Metadata parsing and decoder validation.

fn parsed(text: &str) -> Result<(String, i64, i64, i64), Error> {
    Metadata::parse(text).map(|m| (m.encoding, m.container_count, m.numa_nodes, m.busiest_node))
}

#[test]
fn metadata_parses_as_upstream_in_every_listed_case() {
    let ok = |ve: &str, cc, nn, bn| Ok((ve.to_owned(), cc, nn, bn));
    assert_eq!(parsed("npv0v001::ve=leb89::cc=2::nn=2::bn=0"), ok("leb89", 2, 2, 0));
    assert_eq!(parsed("npv0v001::nn=2::bn=0::cc=2::ve=leb89"), ok("leb89", 2, 2, 0));
    assert_eq!(parsed("npv0v001::ve=leb89::cc=2::nn=2"), ok("leb89", 2, 2, -1));
    assert_eq!(parsed("npv0v001::ve=foo::cc=2::nn=2::bn=0"), ok("foo", 2, 2, 0));
    assert_eq!(parsed("npv0v001::ve=leb89::cc=+2::nn=02::bn=-0"), ok("leb89", 2, 2, 0));
    assert_eq!(parsed("npv0v001::ve=leb89::cc=2::cc=3::nn=2::bn=0"), ok("leb89", 3, 2, 0));
    assert_eq!(parsed("npv0v001::ve=le=b::cc=1::nn=1::bn=0"), ok("le=b", 1, 1, 0));
    assert_eq!(parsed("npv0v001::ve=leb89::cc=2::nn=2::bn=2"), ok("leb89", 2, 2, 2));
    assert_eq!(parsed("npv0v001::ve=leb89::cc=0::nn=0::bn=0"), ok("leb89", 0, 0, 0));

    let rest = "::cc=2::nn=2::bn=0";
    type IsExpected = fn(&Error) -> bool;
    let cases: [(&str, IsExpected); 11] = [
        ("npv0v002::ve=leb89::cc=2::nn=2::bn=0", |e| matches!(e, Error::MalformedMetadata(_))),
        ("npv0v001:ve=leb89::cc=2::nn=2::bn=0", |e| matches!(e, Error::MalformedMetadata(_))),
        ("npv0v001::", |e| matches!(e, Error::MalformedMetadataPair(_))),
        ("npv0v001::ve=leb89::cc=2::nn=2::bn=0::", |e| matches!(e, Error::MalformedMetadataPair(_))),
        ("npv0v001::ve=leb89::cc=2::nn=2::bn=0::xx=1", |e| matches!(e, Error::UnknownMetadataField(_))),
        ("npv0v001::ve=leb89::cc=2::nn=2::bn=0::xx=y", |e| matches!(e, Error::MetadataValue(_))),
        ("npv0v001::ve=leb89::cc=x::nn=2::bn=0", |e| matches!(e, Error::MetadataValue(_))),
        ("npv0v001::ve=leb89::cc= 2::nn=2::bn=0", |e| matches!(e, Error::MetadataValue(_))),
        ("npv0v001::ve=", |e| matches!(e, Error::MissingMetadataValue(_))),
        ("npv0v001::=leb89", |e| matches!(e, Error::MissingMetadataKey(_))),
        ("npv0v001::ve", |e| matches!(e, Error::MalformedMetadataPair(_))),
    ];
    for (text, expected) in cases {
        let error = parsed(text).expect_err(text);
        assert!(expected(&error), "{text}: {error:?}");
        // The same with the rest of the fields after the faulty piece.
        if text.ends_with("ve=") || text.ends_with("=leb89") || text.ends_with("::ve") {
            let error = parsed(&format!("{text}{rest}")).expect_err(text);
            assert!(expected(&error), "{text}{rest}: {error:?}");
        }
    }
}

#[test]
fn metadata_keeps_what_it_read_before_an_error() {
    let mut metadata = Metadata::default();
    assert!(metadata.unpack("npv0v001::ve=leb89::cc=7::xx=1::nn=2").is_err());
    assert_eq!((metadata.encoding.as_str(), metadata.container_count, metadata.numa_nodes), ("leb89", 7, -1));
}

#[test]
fn metadata_prints_in_the_producer_order() {
    let metadata = Metadata::parse("npv0v001::nn=2::bn=0::cc=2::ve=leb89").unwrap();
    assert_eq!(metadata.to_string(), "npv0v001::ve=leb89::cc=2::nn=2::bn=0");
}

fn decoder(text: &str, vectors: &[(i64, &str)]) -> Result<Decoder, Error> {
    let metadata = Metadata::parse(text).unwrap();
    Decoder::new(&metadata, vectors.iter().map(|&(n, v)| (n, v.to_owned())).collect())
}

#[test]
fn the_decoder_validates_metadata_as_upstream() {
    assert!(decoder("npv0v001::ve=leb89::cc=2::nn=2::bn=0", &[]).is_ok());
    assert!(decoder("npv0v001::nn=2::bn=0::cc=2::ve=leb89", &[]).is_ok());
    assert!(decoder("npv0v001::ve=leb89::cc=+2::nn=02::bn=-0", &[]).is_ok());
    assert!(decoder("npv0v001::ve=leb89::cc=2::cc=3::nn=2::bn=0", &[]).is_ok());
    assert_eq!(decoder("npv0v001::ve=leb89::cc=2::nn=2", &[]).err(), Some(Error::UnknownBusiestNode));
    assert_eq!(
        decoder("npv0v001::ve=foo::cc=2::nn=2::bn=0", &[]).err(),
        Some(Error::UnsupportedEncoding("foo".to_owned()))
    );
    assert_eq!(
        decoder("npv0v001::ve=le=b::cc=1::nn=1::bn=0", &[]).err(),
        Some(Error::UnsupportedEncoding("le=b".to_owned()))
    );
    assert_eq!(
        decoder("npv0v001::ve=leb89::cc=2::nn=2::bn=2", &[]).err(),
        Some(Error::InconsistentBusiestNode { busiest_node: 2, numa_nodes: 2 })
    );
    assert_eq!(
        decoder("npv0v001::ve=leb89::cc=0::nn=0::bn=0", &[]).err(),
        Some(Error::InconsistentBusiestNode { busiest_node: 0, numa_nodes: 0 })
    );
}

const POD_A: (&str, &str, &str) = ("default", "pod-a", "cnt-0");
const POD_B: (&str, &str, &str) = ("default", "pod-b", "cnt-0");

#[test]
fn the_decoder_places_containers_and_rejects_bad_vectors_as_upstream() {
    let placements =
        decoder("npv0v001::ve=leb89::cc=2::nn=2::bn=0", &[(1, "#")]).unwrap().result([POD_A, POD_B]).unwrap();
    assert_eq!(
        (placements.numa_node("default", "pod-a", "cnt-0"), placements.numa_node("default", "pod-b", "cnt-0")),
        (Some(0), Some(1))
    );
    assert_eq!(placements.numa_node("default", "pod-c", "cnt-0"), None);

    assert_eq!(
        decoder("npv0v001::ve=leb89::cc=2::nn=2::bn=0", &[(0, "#")]).err(),
        Some(Error::CorruptedVector { numa_node: 0 })
    );
    assert_eq!(
        decoder("npv0v001::ve=leb89::cc=2::nn=3::bn=0", &[(3, "#")]).err(),
        Some(Error::CorruptedVector { numa_node: 3 })
    );
    assert_eq!(
        decoder("npv0v001::ve=leb89::cc=2::nn=2::bn=0", &[(0, "!"), (1, "#")]).err(),
        Some(Error::InconsistentVectorData)
    );
    assert_eq!(decoder("npv0v001::ve=leb89::cc=0::nn=2::bn=0", &[(1, "!")]).err(), Some(Error::InconsistentVectorData));

    let result = |text: &str, vectors: &[(i64, &str)], containers: &[(&'static str, &'static str, &'static str)]| {
        decoder(text, vectors).unwrap().result(containers.iter().copied())
    };
    let meta2 = "npv0v001::ve=leb89::cc=2::nn=2::bn=0";
    assert_eq!(result(meta2, &[(1, "$")], &[POD_A, POD_B]).err(), Some(Error::CorruptedVector { numa_node: 1 }));
    assert_eq!(
        result("npv0v001::ve=leb89::cc=2::nn=3::bn=0", &[(1, "#"), (2, "#")], &[POD_A, POD_B]).err(),
        Some(Error::DuplicatedVectorData)
    );
    assert_eq!(result(meta2, &[(1, "#")], &[POD_A]).err(), Some(Error::InconsistentContainerSet));
    assert_eq!(result(meta2, &[(1, "f")], &[POD_A, POD_B]).err(), Some(Error::CorruptedVector { numa_node: 1 }));
    assert_eq!(result(meta2, &[(1, "!!")], &[POD_A, POD_B]).err(), Some(Error::DuplicatedVectorData));
    let both_on_0 = result(meta2, &[(1, "")], &[POD_A, POD_B]).unwrap();
    assert_eq!(
        (both_on_0.numa_node("default", "pod-a", "cnt-0"), both_on_0.numa_node("default", "pod-b", "cnt-0")),
        (Some(0), Some(0))
    );
    let empty = result("npv0v001::ve=leb89::cc=0::nn=2::bn=0", &[], &[]).unwrap();
    assert!(empty.is_empty());
    // Duplicated identities count once.
    assert_eq!(result(meta2, &[(1, "#")], &[POD_A, POD_B, POD_A]).map(|p| p.len()), Ok(2));
}

fn two_zone_nrt() -> NodeResourceTopology {
    let mut nrt = NodeResourceTopology::new("worker-0");
    nrt.attributes = vec![AttributeInfo::new("nodeTopologyPodsFingerprint", "pfp0v001ef46db3751d8e999")];
    nrt.zones = (0..2)
        .map(|i| Zone { name: format!("node-{i}").into(), zone_type: "Node".into(), ..Zone::default() })
        .collect();
    nrt
}

#[test]
fn a_payload_is_written_into_and_read_back_from_an_nrt() {
    let mut nrt = two_zone_nrt();
    nrt.zones[0].attributes.push(AttributeInfo::new(ATTR_NUMA_PLACEMENT_VECTOR, "stale"));
    let payload = encode(
        2,
        [
            Placement { namespace: "default", pod: "pod-a", container: "cnt-0", numa_node: 0 },
            Placement { namespace: "default", pod: "pod-b", container: "cnt-0", numa_node: 1 },
        ],
    )
    .unwrap();
    payload.apply_to(&mut nrt);
    payload.apply_to(&mut nrt); // idempotent
    assert_eq!(nrt.attribute(ATTR_NUMA_PLACEMENT_METADATA), Some("npv0v001::ve=leb89::cc=2::nn=2::bn=0"));
    assert_eq!(nrt.attributes.len(), 2);
    assert!(nrt.zones[0].attributes.is_empty());
    assert_eq!(nrt.zones[1].attributes, [AttributeInfo::new(ATTR_NUMA_PLACEMENT_VECTOR, "#")]);
    let json = serde_json::to_value(&nrt).unwrap();
    assert!(json["zones"][0].get("attributes").is_none(), "no empty attributes list on the wire");

    let placements = Decoder::from_nrt(&nrt).unwrap().unwrap().result([POD_A, POD_B]).unwrap();
    assert_eq!(placements.numa_node("default", "pod-b", "cnt-0"), Some(1));
}

#[test]
fn a_vector_on_a_zone_not_named_by_id_abandons_decoding() {
    let mut nrt = two_zone_nrt();
    nrt.attributes.push(AttributeInfo::new(ATTR_NUMA_PLACEMENT_METADATA, "npv0v001::ve=leb89::cc=2::nn=2::bn=0"));
    nrt.zones[1].name = "socket-1".into();
    nrt.zones[1].attributes.push(AttributeInfo::new(ATTR_NUMA_PLACEMENT_VECTOR, "#"));
    assert_eq!(Decoder::from_nrt(&nrt).err(), Some(Error::ZoneName("socket-1".into())));
}

#[test]
fn sparse_ids_are_encodable_with_the_id_bound() {
    // Nodes 0 and 2: nn = 3 (the id bound), so a container on node 2 is fine.
    let payload = encode(
        3,
        [
            Placement { namespace: "default", pod: "pod-a", container: "cnt-0", numa_node: 2 },
            Placement { namespace: "default", pod: "pod-b", container: "cnt-0", numa_node: 0 },
            Placement { namespace: "default", pod: "pod-c", container: "cnt-0", numa_node: 0 },
        ],
    )
    .unwrap();
    assert_eq!(payload.metadata_string(), "npv0v001::ve=leb89::cc=3::nn=3::bn=0");
    assert_eq!(payload.vectors.keys().copied().collect::<Vec<_>>(), [2]);
    assert_eq!(
        encode(2, [Placement { namespace: "a", pod: "b", container: "c", numa_node: 2 }]).err(),
        Some(Error::WrongNumaAffinity { numa_node: 2, numa_nodes: 2 })
    );
}

proptest! {
    #[test]
    fn whatever_is_encoded_decodes_to_the_same_placement(
        numa_nodes in 1u32..6,
        raw in proptest::collection::vec(("[a-c]{0,2}", "[a-z0-9-]{0,6}", "[a-c]{0,2}", 0u32..6), 0..60),
    ) {
        let inputs: Vec<(String, String, String, i64)> =
            raw.into_iter().map(|(ns, pod, cnt, numa)| (ns, pod, cnt, i64::from(numa % numa_nodes))).collect();
        let payload = encode(numa_nodes, inputs.iter().map(|(namespace, pod, container, numa_node)| Placement {
            namespace, pod, container, numa_node: *numa_node,
        })).unwrap();
        prop_assert!(payload.vectors.values().all(|v| !v.is_empty()));
        prop_assert!(!payload.vectors.contains_key(&payload.busiest_node));
        let vectors = payload.vectors.iter().map(|(&n, v)| (i64::from(n), v.clone())).collect();
        let decoder = Decoder::new(&Metadata::parse(&payload.metadata_string()).unwrap(), vectors).unwrap();
        let placements = decoder.result(inputs.iter().map(|(a, b, c, _)| (a.as_str(), b.as_str(), c.as_str()))).unwrap();
        // Last one wins for repeated identities.
        let mut expected = std::collections::HashMap::new();
        for (ns, pod, cnt, numa) in &inputs {
            expected.insert((ns, pod, cnt), *numa);
        }
        for ((ns, pod, cnt), numa) in expected {
            prop_assert_eq!(placements.numa_node(ns, pod, cnt), Some(numa));
        }
    }
}
