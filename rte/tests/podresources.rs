//! The podresources client against a fake kubelet: the generated gRPC server on a real unix
//! socket in a temporary directory.

mod support;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use numaresources_rte::podresources::proto;
use numaresources_rte::podresources::testing::{FakeKubelet, RunningKubelet, synthetic_list};
use numaresources_rte::podresources::{
    Allocatable, Backoff, ClientConfig, ContainerResources, Devices, Error, MemoryBlock, NumaAffinity, PodResources,
    PodResourcesClient, PodResourcesSource, StaticPodResources,
};
use proptest::prelude::*;
use prost::Message;
use support::bounded;

fn socket_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("kubelet.sock")
}

/// A client with test-sized timeouts and backoff.
fn client(path: &Path) -> PodResourcesClient {
    let mut config = ClientConfig::new(path.into());
    config.connect_timeout = Duration::from_secs(2);
    config.call_timeout = Duration::from_secs(2);
    config.backoff = Backoff { initial: Duration::from_millis(50), max: Duration::from_millis(200), jitter: 0.2 };
    PodResourcesClient::new(config)
}

fn numa(ids: &[i64]) -> Option<proto::TopologyInfo> {
    Some(proto::TopologyInfo { nodes: ids.iter().map(|&id| proto::NumaNode { id }).collect() })
}

/// A List answer using every field, including the ones the model normalises or drops.
fn rich_list() -> proto::ListPodResourcesResponse {
    proto::ListPodResourcesResponse {
        pod_resources: vec![
            proto::PodResources {
                name: "dpdk-app-7c9f8b6d5-x2k4q".into(),
                namespace: "telco".into(),
                containers: vec![proto::ContainerResources {
                    name: "app".into(),
                    cpu_ids: vec![33, 1, 2, 34, 1],
                    memory: vec![
                        proto::ContainerMemory {
                            memory_type: "memory".into(),
                            size: 17_179_869_184,
                            topology: numa(&[0]),
                        },
                        proto::ContainerMemory {
                            memory_type: "hugepages-1Gi".into(),
                            size: 4_294_967_296,
                            topology: numa(&[1, 0]),
                        },
                        proto::ContainerMemory { memory_type: "hugepages-2Mi".into(), size: 2_097_152, topology: None },
                    ],
                    devices: vec![
                        proto::ContainerDevices {
                            resource_name: "example.com/sriov_vf".into(),
                            device_ids: vec!["0000:3b:02.1".into()],
                            topology: numa(&[0]),
                        },
                        proto::ContainerDevices {
                            resource_name: "example.com/fpga".into(),
                            device_ids: vec!["fpga-0".into(), "fpga-1".into()],
                            topology: None,
                        },
                        proto::ContainerDevices {
                            resource_name: "example.com/nic".into(),
                            device_ids: vec!["nic-9".into()],
                            topology: numa(&[-1]),
                        },
                    ],
                    dynamic_resources: vec![proto::DynamicResource {
                        claim_name: "gpu-claim".into(),
                        claim_namespace: "telco".into(),
                        claim_resources: vec![proto::ClaimResource {
                            cdi_devices: vec![proto::CdiDevice { name: "vendor.example/gpu=gpu0".into() }],
                            driver_name: "gpu.example".into(),
                            pool_name: "worker-0".into(),
                            device_name: "gpu-0".into(),
                        }],
                    }],
                }],
            },
            proto::PodResources {
                name: "nginx-5d9c".into(),
                namespace: "web".into(),
                containers: vec![
                    proto::ContainerResources { name: "nginx".into(), ..Default::default() },
                    proto::ContainerResources {
                        name: "empty-topology".into(),
                        memory: vec![proto::ContainerMemory {
                            memory_type: "memory".into(),
                            size: 1,
                            topology: Some(proto::TopologyInfo { nodes: vec![] }),
                        }],
                        ..Default::default()
                    },
                ],
            },
            proto::PodResources { name: "no-containers".into(), namespace: "kube-system".into(), containers: vec![] },
        ],
    }
}

fn rich_allocatable() -> proto::AllocatableResourcesResponse {
    proto::AllocatableResourcesResponse {
        cpu_ids: (1..16).chain(33..48).rev().collect(),
        memory: vec![
            proto::ContainerMemory { memory_type: "memory".into(), size: 184_022_315_008, topology: numa(&[0]) },
            proto::ContainerMemory { memory_type: "hugepages-1Gi".into(), size: 17_179_869_184, topology: numa(&[1]) },
        ],
        devices: vec![
            proto::ContainerDevices {
                resource_name: "example.com/sriov_vf".into(),
                device_ids: vec!["0000:3b:02.0".into(), "0000:3b:02.1".into()],
                topology: numa(&[0]),
            },
            proto::ContainerDevices {
                resource_name: "example.com/fpga".into(),
                device_ids: vec!["fpga-0".into()],
                topology: None,
            },
        ],
    }
}

fn memory(memory_type: &str, size_bytes: u64, affinity: NumaAffinity) -> MemoryBlock {
    MemoryBlock { memory_type: memory_type.into(), size_bytes, affinity }
}

fn devices(resource_name: &str, ids: &[&str], affinity: NumaAffinity) -> Devices {
    Devices {
        resource_name: resource_name.into(),
        device_ids: ids.iter().map(|id| (*id).to_string()).collect(),
        affinity,
    }
}

fn serve(kubelet: FakeKubelet, path: &Path) -> RunningKubelet {
    kubelet.serve(path).expect("bind the fake kubelet socket")
}

#[tokio::test]
async fn list_round_trips_every_field_and_ignores_dynamic_resources() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = serve(FakeKubelet { list: rich_list(), ..Default::default() }, &socket_in(&dir));
    let url = format!("unix://{}", socket_in(&dir).display());
    let client = PodResourcesClient::for_socket(&url).unwrap();

    let pods = bounded("List", client.list()).await.unwrap();

    let want = vec![
        PodResources {
            namespace: "telco".into(),
            name: "dpdk-app-7c9f8b6d5-x2k4q".into(),
            containers: vec![ContainerResources {
                name: "app".into(),
                // Unique, in the kubelet's order (placement reads the first).
                cpu_ids: vec![33, 1, 2, 34],
                memory: vec![
                    memory("memory", 17_179_869_184, NumaAffinity::Nodes(vec![0])),
                    memory("hugepages-1Gi", 4_294_967_296, NumaAffinity::Nodes(vec![0, 1])),
                    memory("hugepages-2Mi", 2_097_152, NumaAffinity::NoAffinity),
                ],
                devices: vec![
                    devices("example.com/sriov_vf", &["0000:3b:02.1"], NumaAffinity::Nodes(vec![0])),
                    devices("example.com/fpga", &["fpga-0", "fpga-1"], NumaAffinity::NoAffinity),
                    devices("example.com/nic", &["nic-9"], NumaAffinity::NoAffinity),
                ],
            }],
        },
        PodResources {
            namespace: "web".into(),
            name: "nginx-5d9c".into(),
            containers: vec![
                ContainerResources { name: "nginx".into(), ..Default::default() },
                ContainerResources {
                    name: "empty-topology".into(),
                    memory: vec![memory("memory", 1, NumaAffinity::NoAffinity)],
                    ..Default::default()
                },
            ],
        },
        PodResources { namespace: "kube-system".into(), name: "no-containers".into(), containers: vec![] },
    ];
    assert_eq!(pods, want);
    let health = client.health();
    assert!(health.connected && health.dials_total == 1 && health.dial_failures_total == 0, "{health:?}");
    bounded("stop", kubelet.stop()).await.unwrap();
}

#[tokio::test]
async fn allocatable_round_trips_cpus_memory_and_devices() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = serve(FakeKubelet { allocatable: Some(rich_allocatable()), ..Default::default() }, &socket_in(&dir));
    let client = client(&socket_in(&dir));

    let allocatable = bounded("GetAllocatableResources", client.allocatable()).await.unwrap();

    let want = Allocatable {
        cpu_ids: (1..16).chain(33..48).collect(),
        memory: vec![
            memory("memory", 184_022_315_008, NumaAffinity::Nodes(vec![0])),
            memory("hugepages-1Gi", 17_179_869_184, NumaAffinity::Nodes(vec![1])),
        ],
        devices: vec![
            devices("example.com/sriov_vf", &["0000:3b:02.0", "0000:3b:02.1"], NumaAffinity::Nodes(vec![0])),
            devices("example.com/fpga", &["fpga-0"], NumaAffinity::NoAffinity),
        ],
    };
    assert_eq!(allocatable, want);
    bounded("stop", kubelet.stop()).await.unwrap();
}

#[tokio::test]
async fn a_missing_socket_fails_fast_with_advice_and_then_backs_off() {
    let dir = tempfile::tempdir().unwrap();
    let client = client(&socket_in(&dir));

    let error = bounded("List without a kubelet", client.list()).await.unwrap_err();
    assert!(matches!(error, Error::SocketMissing { .. }), "{error}");
    assert!(error.to_string().contains("is the kubelet running?"), "{error}");
    assert!(error.is_transient());

    // Right after, the backoff refuses to dial again and says so.
    let error = bounded("List during backoff", client.list()).await.unwrap_err();
    assert!(matches!(error, Error::Backoff { failures: 1, .. }), "{error}");
    let health = client.health();
    assert!(!health.connected, "{health:?}");
    assert_eq!((health.dials_total, health.dial_failures_total, health.consecutive_failures), (1, 1, 1));
    assert!(health.last_error.is_some());
}

#[tokio::test]
async fn a_stale_socket_without_a_listener_is_reported_as_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Bind and drop: the file stays, nobody listens (a kubelet that died without cleaning up).
    drop(std::os::unix::net::UnixListener::bind(socket_in(&dir)).unwrap());
    let client = client(&socket_in(&dir));

    let error = bounded("List on a stale socket", client.allocatable()).await.unwrap_err();
    assert!(matches!(error, Error::ConnectionRefused { .. }), "{error}");
}

#[tokio::test]
async fn a_kubelet_restart_with_a_new_socket_is_survived_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_in(&dir);
    let first = serve(FakeKubelet { list: synthetic_list(3), ..Default::default() }, &path);
    let client = client(&path);
    assert_eq!(bounded("first List", client.list()).await.unwrap().len(), 3);

    // The kubelet goes away and removes its socket; calls fail meanwhile.
    bounded("stop", first.stop()).await.unwrap();
    std::fs::remove_file(&path).unwrap();
    let error = bounded("List while the kubelet is down", client.list()).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert!(!client.health().connected);

    // A new kubelet binds the same path (a new socket inode). The client, called as the exporter
    // would, finds it without being told.
    let second = serve(FakeKubelet { list: synthetic_list(7), ..Default::default() }, &path);
    let pods = bounded("recovery", async {
        loop {
            match client.list().await {
                Ok(pods) => break pods,
                Err(error) => {
                    assert!(error.is_transient(), "{error}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    })
    .await;
    assert_eq!(pods.len(), 7);
    let health = client.health();
    assert!(health.connected, "{health:?}");
    assert_eq!(health.reconnects_total, 1, "{health:?}");
    assert!(health.dial_failures_total >= 1, "{health:?}");
    assert_eq!(health.consecutive_failures, 0, "{health:?}");
    assert_eq!(health.last_error, None);
    bounded("stop", second.stop()).await.unwrap();
}

#[tokio::test]
async fn a_kubelet_restart_between_two_calls_is_invisible_to_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_in(&dir);
    let first = serve(FakeKubelet { list: synthetic_list(1), ..Default::default() }, &path);
    let client = client(&path);
    assert_eq!(bounded("first List", client.list()).await.unwrap().len(), 1);

    bounded("stop", first.stop()).await.unwrap();
    std::fs::remove_file(&path).unwrap();
    let second = serve(FakeKubelet { list: synthetic_list(2), ..Default::default() }, &path);

    // The old connection is dead; the call redials the path and gets the new kubelet.
    assert_eq!(bounded("List after restart", client.list()).await.unwrap().len(), 2);
    let health = client.health();
    assert_eq!((health.dials_total, health.reconnects_total, health.dial_failures_total), (2, 1, 0), "{health:?}");
    bounded("stop", second.stop()).await.unwrap();
}

#[tokio::test]
async fn a_kubelet_that_never_answers_hits_the_call_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = serve(FakeKubelet { hang: true, ..Default::default() }, &socket_in(&dir));
    let mut config = ClientConfig::new(socket_in(&dir).into());
    config.call_timeout = Duration::from_millis(300);
    let client = PodResourcesClient::new(config);

    let error = bounded("hung List", client.list()).await.unwrap_err();
    assert!(matches!(error, Error::DeadlineExceeded { method: "List", .. }), "{error}");
    assert!(error.to_string().contains("may be hung"), "{error}");
    bounded("stop", kubelet.stop()).await.unwrap();
}

#[tokio::test]
async fn a_socket_that_accepts_but_never_speaks_grpc_hits_the_call_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::UnixListener::bind(socket_in(&dir)).unwrap();
    // Accept and hold connections without reading or writing a byte.
    let mute = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let mut config = ClientConfig::new(socket_in(&dir).into());
    config.call_timeout = Duration::from_millis(300);
    let client = PodResourcesClient::new(config);

    let error = bounded("mute List", client.allocatable()).await.unwrap_err();
    assert!(matches!(error, Error::DeadlineExceeded { method: "GetAllocatableResources", .. }), "{error}");
    mute.abort();
}

#[tokio::test]
async fn an_old_kubelet_without_get_allocatable_resources_is_reported_as_unimplemented() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet =
        serve(FakeKubelet { list: synthetic_list(2), allocatable: None, ..Default::default() }, &socket_in(&dir));
    let client = client(&socket_in(&dir));

    let error = bounded("GetAllocatableResources", client.allocatable()).await.unwrap_err();
    assert!(matches!(error, Error::Unimplemented { method: "GetAllocatableResources" }), "{error}");
    assert!(error.to_string().contains("too old") && !error.is_transient(), "{error}");
    // List still works on the same connection.
    assert_eq!(bounded("List", client.list()).await.unwrap().len(), 2);
    bounded("stop", kubelet.stop()).await.unwrap();
}

#[tokio::test]
async fn an_answer_over_the_16_mib_limit_is_a_clear_error_and_the_client_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    // One container with 200,000 device ids of ~90 bytes: about 18 MiB on the wire.
    let huge = proto::ListPodResourcesResponse {
        pod_resources: vec![proto::PodResources {
            name: "huge".into(),
            namespace: "default".into(),
            containers: vec![proto::ContainerResources {
                name: "c".into(),
                devices: vec![proto::ContainerDevices {
                    resource_name: "example.com/dev".into(),
                    device_ids: (0..200_000).map(|i| format!("{i:0>88}")).collect(),
                    topology: None,
                }],
                ..Default::default()
            }],
        }],
    };
    assert!(huge.encoded_len() > 16 * 1024 * 1024);
    let kubelet =
        serve(FakeKubelet { list: huge, allocatable: Some(rich_allocatable()), hang: false }, &socket_in(&dir));
    let mut config = ClientConfig::new(socket_in(&dir).into());
    config.call_timeout = Duration::from_secs(10);
    let client = PodResourcesClient::new(config);

    let error = bounded("oversized List", client.list()).await.unwrap_err();
    assert!(matches!(error, Error::ResponseTooLarge { method: "List", limit: 16_777_216, .. }), "{error}");
    assert!(error.to_string().contains("maximum response size"), "{error}");
    assert!(bounded("GetAllocatableResources", client.allocatable()).await.is_ok());
    bounded("stop", kubelet.stop()).await.unwrap();
}

/// What an accounting written against the trait would do.
async fn exclusive_cpus(source: &impl PodResourcesSource) -> Result<usize, Error> {
    let pods = source.list().await?;
    Ok(pods.iter().flat_map(|pod| &pod.containers).map(|container| container.cpu_ids.len()).sum())
}

#[tokio::test]
async fn the_client_and_plain_data_serve_the_same_trait() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = serve(FakeKubelet { list: rich_list(), ..Default::default() }, &socket_in(&dir));
    let client = client(&socket_in(&dir));
    let from_kubelet = bounded("List", exclusive_cpus(&client)).await.unwrap();

    let plain = StaticPodResources { pods: bounded("List", client.list()).await.unwrap(), ..Default::default() };
    assert_eq!(bounded("static", exclusive_cpus(&plain)).await.unwrap(), from_kubelet);
    assert_eq!(from_kubelet, 4);
    bounded("stop", kubelet.stop()).await.unwrap();
}

#[tokio::test]
async fn concurrent_calls_share_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = serve(FakeKubelet { list: synthetic_list(20), ..Default::default() }, &socket_in(&dir));
    let client = std::sync::Arc::new(client(&socket_in(&dir)));
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let client = std::sync::Arc::clone(&client);
            tokio::spawn(async move { client.list().await.map(|pods| pods.len()) })
        })
        .collect();
    for call in calls {
        assert_eq!(bounded("concurrent List", call).await.unwrap().unwrap(), 20);
    }
    assert_eq!(client.health().dials_total, 1);
    bounded("stop", kubelet.stop()).await.unwrap();
}

fn arbitrary_topology() -> impl Strategy<Value = Option<proto::TopologyInfo>> {
    proptest::option::of(
        proptest::collection::vec(prop_oneof![Just(-1i64), 0i64..8, any::<i64>()], 0..4)
            .prop_map(|ids| proto::TopologyInfo { nodes: ids.into_iter().map(|id| proto::NumaNode { id }).collect() }),
    )
}

fn arbitrary_container() -> impl Strategy<Value = proto::ContainerResources> {
    (
        proptest::collection::vec(prop_oneof![0i64..128, any::<i64>()], 0..8),
        proptest::collection::vec((any::<u64>(), arbitrary_topology()), 0..3),
        proptest::collection::vec((proptest::collection::vec("[a-z0-9:.]{1,12}", 0..3), arbitrary_topology()), 0..3),
    )
        .prop_map(|(cpu_ids, memory, devices)| proto::ContainerResources {
            name: "c".into(),
            cpu_ids,
            memory: memory
                .into_iter()
                .map(|(size, topology)| proto::ContainerMemory { memory_type: "memory".into(), size, topology })
                .collect(),
            devices: devices
                .into_iter()
                .map(|(device_ids, topology)| proto::ContainerDevices {
                    resource_name: "example.com/dev".into(),
                    device_ids,
                    topology,
                })
                .collect(),
            dynamic_resources: vec![],
        })
}

fn assert_normalised(affinity: &NumaAffinity) {
    if let NumaAffinity::Nodes(nodes) = affinity {
        assert!(!nodes.is_empty() && nodes.windows(2).all(|pair| pair[0] < pair[1]), "{nodes:?}");
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_the_decoding_or_the_conversion(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(response) = proto::ListPodResourcesResponse::decode(bytes.as_slice()) {
            let _ = numaresources_rte::podresources::model::pods_from_proto(response);
        }
        if let Ok(response) = proto::AllocatableResourcesResponse::decode(bytes.as_slice()) {
            let _ = Allocatable::from_proto(response);
        }
    }

    #[test]
    fn converted_answers_are_always_normalised(containers in proptest::collection::vec(arbitrary_container(), 0..4)) {
        let response = proto::ListPodResourcesResponse {
            pod_resources: vec![proto::PodResources { name: "p".into(), namespace: "n".into(), containers }],
        };
        // Through the wire format too, as the client would see it.
        let decoded = proto::ListPodResourcesResponse::decode(response.encode_to_vec().as_slice()).unwrap();
        for pod in numaresources_rte::podresources::model::pods_from_proto(decoded) {
            for container in &pod.containers {
                let unique: std::collections::BTreeSet<u32> = container.cpu_ids.iter().copied().collect();
                prop_assert_eq!(unique.len(), container.cpu_ids.len());
                container.memory.iter().for_each(|block| assert_normalised(&block.affinity));
                container.devices.iter().for_each(|entry| assert_normalised(&entry.affinity));
            }
        }
    }
}

#[test]
fn middlewares_compose_over_a_converted_answer() {
    use numaresources_rte::podresources::middleware::{
        ContainerRef, PodExclude, PodKey, exclude_pods, exclude_terminal_pods, remove_shared_pool_cpus,
    };
    let mut answer = rich_list();
    answer.pod_resources.push(proto::PodResources {
        name: "rte-x".into(),
        namespace: "rte".into(),
        containers: vec![proto::ContainerResources { name: "ref".into(), cpu_ids: vec![2, 3], ..Default::default() }],
    });
    let mut pods = numaresources_rte::podresources::model::pods_from_proto(answer);

    let reference: ContainerRef = "rte/rte-x/ref".parse().unwrap();
    assert_eq!(remove_shared_pool_cpus(&mut pods, &reference), Some(vec![2, 3]));
    assert_eq!(pods[0].containers[0].cpu_ids, [33, 1, 34]);
    assert_eq!(exclude_pods(&mut pods, &[PodExclude::new("kube-*", "").unwrap()]), 1);
    assert_eq!(exclude_terminal_pods(&mut pods, &HashSet::from([PodKey::new("web", "nginx-5d9c")])), 1);
    let left: Vec<&str> = pods.iter().map(|pod| pod.name.as_str()).collect();
    assert_eq!(left, ["dpdk-app-7c9f8b6d5-x2k4q", "rte-x"]);
}
