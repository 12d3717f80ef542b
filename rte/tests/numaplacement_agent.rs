//! NUMA placement end to end through the agent: a synthetic sysfs tree on disk (4 CPUs per NUMA
//! node, CPU id = node × 4 + k), a fake kubelet on a real unix socket, a publisher recording
//! what the agent sends. The cases are the upstream exporter's, as its resource monitor publishes
//! them (the R vectors generated with the upstream Go code, v0.25.0).

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

mod support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_rte::agent::Agent;
use numaresources_rte::config::Config;
use numaresources_rte::podresources::proto;
use numaresources_rte::podresources::testing::FakeKubelet;
use numaresources_rte::podresources::{ClientConfig, PodResourcesClient};
use numaresources_rte::trigger::Trigger;
use support::Told;

const METADATA: &str = "topology.node.k8s.io/numaplacement-metadata";
const VECTOR: &str = "topology.node.k8s.io/numaplacement-vector";

/// Writes a sysfs tree of `nodes` NUMA nodes with 4 CPUs each under `root`.
fn synthetic_sysfs(root: &Path, nodes: u32) {
    let write = |relative: String, content: String| {
        let path = root.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    };
    for node in 0..nodes {
        let dir = format!("sys/devices/system/node/node{node}");
        let distances: Vec<&str> = (0..nodes).map(|other| if other == node { "10" } else { "20" }).collect();
        write(format!("{dir}/distance"), format!("{}\n", distances.join(" ")));
        write(format!("{dir}/meminfo"), format!("Node {node} MemTotal: 1048576 kB\n"));
        for cpu in node * 4..node * 4 + 4 {
            write(format!("sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"), format!("{cpu}\n"));
            std::os::unix::fs::symlink(format!("../../cpu/cpu{cpu}"), root.join(format!("{dir}/cpu{cpu}"))).unwrap();
        }
    }
}

fn on(ids: &[i64]) -> Option<proto::TopologyInfo> {
    Some(proto::TopologyInfo { nodes: ids.iter().map(|&id| proto::NumaNode { id }).collect() })
}

fn container(name: &str) -> proto::ContainerResources {
    proto::ContainerResources { name: name.into(), ..Default::default() }
}

fn cpus(name: &str, ids: &[i64]) -> proto::ContainerResources {
    proto::ContainerResources { cpu_ids: ids.to_vec(), ..container(name) }
}

fn device(name: &str, ids: &[&str], numa: &[i64]) -> proto::ContainerResources {
    proto::ContainerResources { devices: vec![dev(ids, numa)], ..container(name) }
}

fn dev(ids: &[&str], numa: &[i64]) -> proto::ContainerDevices {
    proto::ContainerDevices {
        resource_name: "example.com/dev".into(),
        device_ids: ids.iter().map(|&id| id.to_owned()).collect(),
        topology: on(numa),
    }
}

fn memory(name: &str, size: u64, numa: &[i64]) -> proto::ContainerResources {
    proto::ContainerResources {
        memory: vec![proto::ContainerMemory { memory_type: "memory".into(), size, topology: on(numa) }],
        ..container(name)
    }
}

fn pod(namespace: &str, name: &str, containers: Vec<proto::ContainerResources>) -> proto::PodResources {
    proto::PodResources { namespace: namespace.into(), name: name.into(), containers }
}

/// One refresh of an agent over `nodes` NUMA nodes and a kubelet listing `pods`; the published
/// object.
async fn published(
    nodes: u32,
    policy: &str,
    fingerprint: bool,
    pods: Vec<proto::PodResources>,
) -> NodeResourceTopology {
    let dir = tempfile::tempdir().unwrap();
    synthetic_sysfs(dir.path(), nodes);
    let socket = dir.path().join("kubelet.sock");
    let kubelet = FakeKubelet {
        list: proto::ListPodResourcesResponse { pod_resources: pods },
        allocatable: Some(proto::AllocatableResourcesResponse {
            cpu_ids: (0..i64::from(nodes) * 4).collect(),
            ..Default::default()
        }),
        hang: false,
    }
    .serve(&socket)
    .unwrap();
    let mut config = Config::for_node("worker-0");
    config.sysfs = dir.path().join("sys");
    config.sleep_interval = None;
    config.heartbeat = None;
    config.topology_manager.policy = policy.into();
    if !fingerprint {
        config.fingerprint = None;
    }
    let mut client = ClientConfig::new(socket.into());
    client.call_timeout = Duration::from_secs(5);
    let (tell, mut told) = tokio::sync::mpsc::unbounded_channel();
    let mut agent = Agent::new(config, Some(PodResourcesClient::new(client)), Told(tell));
    agent.refresh(Trigger::Periodic).await.unwrap();
    kubelet.stop().await.unwrap();
    told.try_recv().unwrap()
}

/// The metadata attribute (if any) and the zones' vectors, as `(zone, vector)`.
fn placement(nrt: &NodeResourceTopology) -> (Option<&str>, Vec<(&str, &str)>) {
    let vectors = nrt
        .zones
        .iter()
        .flat_map(|zone| {
            zone.attributes.iter().filter(|a| a.name == VECTOR).map(|a| (zone.name.as_str(), a.value.as_str()))
        })
        .collect();
    (nrt.attribute(METADATA), vectors)
}

fn r1_pods() -> Vec<proto::PodResources> {
    vec![
        pod("default", "gu-pod", vec![cpus("c-numa0", &[0, 1]), cpus("c-numa1", &[4, 5])]),
        pod("default", "bu-pod", vec![container("shared")]),
        pod("default", "dev-pod", vec![device("dev", &["d1"], &[1]), container("sidecar")]),
        pod("default", "mem-pod", vec![memory("mem", 1 << 20, &[1])]),
    ]
}

#[tokio::test]
async fn r1_placement_is_published_after_the_fingerprint_and_before_the_topology_manager() {
    let nrt = published(2, "single-numa-node", true, r1_pods()).await;
    assert_eq!(placement(&nrt), (Some("npv0v001::ve=leb89::cc=4::nn=2::bn=1"), vec![("node-0", "%")]));
    let names: Vec<&str> = nrt.attributes.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "nodeTopologyPodsFingerprint",
            "nodeTopologyPodsFingerprintMethod",
            METADATA,
            "topologyManagerScope",
            "topologyManagerPolicy"
        ]
    );
}

#[tokio::test]
async fn r2_r3_another_policy_or_the_fingerprint_off_publish_no_placement() {
    let nrt = published(2, "restricted", true, r1_pods()).await;
    assert_eq!(placement(&nrt), (None, vec![]));
    assert!(nrt.attribute("nodeTopologyPodsFingerprint").is_some(), "the fingerprint stays");
    let nrt = published(2, "single-numa-node", false, r1_pods()).await;
    assert_eq!(placement(&nrt), (None, vec![]));
    assert_eq!(nrt.attribute("nodeTopologyPodsFingerprint"), None);
}

#[tokio::test]
async fn r4_to_r18_as_upstream_publishes_them() {
    type Case = (&'static str, u32, Vec<proto::PodResources>, Option<&'static str>, Vec<(&'static str, &'static str)>);
    let cases: Vec<Case> = vec![
        ("R4", 2, vec![], Some("npv0v001::ve=leb89::cc=0::nn=2::bn=0"), vec![]),
        ("R5", 1, vec![], Some("npv0v001::ve=leb89::cc=0::nn=1::bn=0"), vec![]),
        (
            "R6",
            2,
            vec![pod("default", "span", vec![cpus("c", &[1, 5])])],
            Some("npv0v001::ve=leb89::cc=1::nn=2::bn=0"),
            vec![],
        ),
        (
            "R7",
            2,
            vec![pod("default", "span", vec![cpus("c", &[5, 1])])],
            Some("npv0v001::ve=leb89::cc=1::nn=2::bn=1"),
            vec![],
        ),
        (
            "R8",
            2,
            vec![
                pod("default", "gu-pod", vec![cpus("c-numa0", &[0])]),
                pod("default", "span", vec![device("c", &["d1", "d2"], &[0, 1])]),
            ],
            None,
            vec![],
        ),
        ("R9", 2, vec![pod("default", "span", vec![memory("c", 1 << 30, &[0, 1])])], None, vec![]),
        (
            "R10",
            2,
            vec![pod(
                "default",
                "mix",
                vec![proto::ContainerResources { devices: vec![dev(&["d1"], &[1])], ..cpus("c", &[2]) }],
            )],
            Some("npv0v001::ve=leb89::cc=1::nn=2::bn=0"),
            vec![],
        ),
        ("R11", 2, vec![pod("default", "bad", vec![cpus("c", &[99])])], None, vec![]),
        (
            "R12",
            2,
            vec![pod(
                "default",
                "nolocal",
                vec![proto::ContainerResources {
                    devices: vec![dev(&["d1"], &[-1]), dev(&[], &[1])],
                    ..container("c")
                }],
            )],
            Some("npv0v001::ve=leb89::cc=0::nn=2::bn=0"),
            vec![],
        ),
        (
            "R13",
            2,
            vec![pod(
                "default",
                "zeromem",
                vec![proto::ContainerResources {
                    memory: vec![proto::ContainerMemory {
                        memory_type: "hugepages-2Mi".into(),
                        size: 0,
                        topology: on(&[1]),
                    }],
                    ..container("c")
                }],
            )],
            Some("npv0v001::ve=leb89::cc=1::nn=2::bn=1"),
            vec![],
        ),
        (
            "R14",
            4,
            vec![pod("x", "p", vec![cpus("a", &[4]), cpus("b", &[8]), cpus("c", &[9]), cpus("d", &[12])])],
            Some("npv0v001::ve=leb89::cc=4::nn=4::bn=2"),
            vec![("node-1", "$"), ("node-3", "%")],
        ),
        (
            "R15",
            2,
            vec![pod("default", "dd", vec![device("c", &["d1"], &[1, 1])])],
            Some("npv0v001::ve=leb89::cc=1::nn=2::bn=1"),
            vec![],
        ),
        (
            "R16",
            2,
            vec![pod("default", "mm", vec![memory("c", 1 << 20, &[-1, 1])])],
            Some("npv0v001::ve=leb89::cc=1::nn=2::bn=1"),
            vec![],
        ),
        (
            "R17",
            2,
            vec![pod(
                "default",
                "d2",
                vec![proto::ContainerResources {
                    devices: vec![dev(&["a"], &[1]), dev(&["b"], &[0])],
                    ..container("c")
                }],
            )],
            Some("npv0v001::ve=leb89::cc=1::nn=2::bn=1"),
            vec![],
        ),
        (
            "R18",
            2,
            vec![
                pod("a", "p", vec![cpus("c", &[0])]),
                pod("b", "p", vec![cpus("c", &[4])]),
                pod("b", "p", vec![cpus("c", &[5])]),
            ],
            Some("npv0v001::ve=leb89::cc=2::nn=2::bn=0"),
            vec![("node-1", "#")],
        ),
    ];
    for (name, nodes, pods, metadata, vectors) in cases {
        let nrt = published(nodes, "single-numa-node", true, pods).await;
        assert_eq!(placement(&nrt), (metadata, vectors), "{name}");
        assert!(nrt.attribute("nodeTopologyPodsFingerprint").is_some(), "{name}: the fingerprint is always there");
    }
}
