//! Reactivity without host hooks, end to end: the agent's run loop polls a fake kubelet (a real
//! gRPC server on a unix socket) over a real sysfs tree, and an allocation or a release on the
//! kubelet reaches a publish on its own, marked reactive, with no notify file and no timer.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup is a failed test

mod support;

use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_rte::agent::Agent;
use numaresources_rte::config::Config;
use numaresources_rte::podresources::proto;
use numaresources_rte::podresources::testing::{FakeKubelet, RunningKubelet};
use numaresources_rte::podresources::{ClientConfig, PodResourcesClient};
use support::{Told, available_cpus, bounded, exclusive_pods};
use tokio::sync::mpsc;

fn trigger(nrt: &NodeResourceTopology) -> &str {
    nrt.metadata.annotations.as_ref().unwrap()["k8stopoawareschedwg/rte-update"].as_str()
}

/// Waits until the kubelet has answered `more` calls beyond `from`.
async fn calls_beyond(kubelet: &RunningKubelet, from: u64, more: u64) {
    bounded("kubelet calls", async {
        while kubelet.calls() < from + more {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn an_allocation_and_its_release_are_published_reactively_by_polling_the_kubelet() {
    let (dir, sys) = support::unpack("intel-2numa-24cpu");
    let socket = dir.path().join("kubelet.sock");
    let kubelet = FakeKubelet {
        list: exclusive_pods(&[]),
        allocatable: Some(proto::AllocatableResourcesResponse { cpu_ids: (0..24).collect(), ..Default::default() }),
        hang: false,
    }
    .serve(&socket)
    .unwrap();

    let mut config = Config::for_node("worker-0");
    config.sysfs = sys;
    config.sleep_interval = None; // no timer: only the poll can cause a scan after the first
    config.heartbeat = None;
    config.allocation_poll = Some(Duration::from_millis(100));
    let client = PodResourcesClient::new(ClientConfig::new(socket.into()));
    let (tell, mut told) = mpsc::unbounded_channel();
    let agent = Agent::new(config, Some(client), Told(tell));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent.run(async move { drop(stopped.await) }));

    let first = bounded("the first publish", told.recv()).await.unwrap();
    assert_eq!(trigger(&first), "periodic");
    let free = available_cpus(&first, "node-0");

    // Polls of an unchanged kubelet publish nothing.
    let seen = kubelet.calls();
    calls_beyond(&kubelet, seen, 5).await;
    assert!(told.try_recv().is_err(), "an unchanged allocation set was published again");

    // Two CPUs of NUMA 0 (even ids on this machine) pinned by a new pod.
    kubelet.set_list(exclusive_pods(&[("dpdk", &[0, 2])]));
    let allocated = bounded("the allocation's publish", told.recv()).await.unwrap();
    assert_eq!(trigger(&allocated), "reactive");
    assert_eq!(available_cpus(&allocated, "node-0"), free - 2);

    // The pod goes away: the release is published the same way.
    kubelet.set_list(exclusive_pods(&[]));
    let released = bounded("the release's publish", told.recv()).await.unwrap();
    assert_eq!(trigger(&released), "reactive");
    assert_eq!(available_cpus(&released, "node-0"), free);

    stop.send(()).unwrap();
    bounded("the agent stops", running).await.unwrap().unwrap();
    bounded("the kubelet stops", kubelet.stop()).await.unwrap();
}
