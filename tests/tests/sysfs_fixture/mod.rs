//! The real sysfs tree the agent tests read (a two-NUMA, 24-CPU Intel machine, copied into
//! `rte/machines/`), and the agent as the end-to-end tests run it on that machine.
//! Shared by test binaries with `mod sysfs_fixture;`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use numaresources_rte::config::Config;
use numaresources_rte::podresources::testing::{FakeKubelet, RunningKubelet};
use numaresources_rte::podresources::{Backoff, ClientConfig, PodResourcesClient, proto};

/// Unpacks the tree under `dir/machine`; returns its `sys` directory.
pub fn unpack_intel_2numa_24cpu(dir: &Path) -> PathBuf {
    let tarball = numaresources_rte::sysfs::machines::directory().join("intel-2numa-24cpu.tar.gz");
    let file = fs::File::open(&tarball).unwrap_or_else(|e| panic!("{}: {e}", tarball.display()));
    let machine = dir.join("machine");
    tar::Archive::new(flate2::read::GzDecoder::new(file))
        .unpack(&machine)
        .unwrap_or_else(|e| panic!("unpacking {}: {e}", tarball.display()));
    machine.join("sys")
}

/// The agent's configuration for `node` on the machine under `sys`: it scans only when the test
/// says so (no timer, no heartbeat), so every write the server sees is one the test caused.
pub fn agent_config(node: &str, sys: &Path) -> Config {
    let mut config = Config::for_node(node);
    config.sysfs = sys.to_owned();
    config.sleep_interval = None;
    config.heartbeat = None;
    config.max_events_per_second = std::num::NonZeroU32::new(50).unwrap_or(std::num::NonZeroU32::MIN);
    config
}

/// A client of the kubelet on `socket` that retries quickly.
pub fn kubelet_client(socket: &Path) -> PodResourcesClient {
    let mut kubelet = ClientConfig::new(socket.to_owned().into());
    kubelet.backoff = Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(50), jitter: 0.0 };
    kubelet.call_timeout = Duration::from_secs(5);
    PodResourcesClient::new(kubelet)
}

/// The kubelet's answer when one Guaranteed pod holds `n` exclusive CPUs, all on NUMA node 0
/// (the machine's even CPUs, from CPU 2).
#[allow(dead_code)] // not every test binary that shares this module allocates CPUs
pub fn pods_on_numa_node_0(n: usize) -> proto::ListPodResourcesResponse {
    let cpu_ids = (0..n).map(|i| 2 + 2 * i as i64).collect();
    let container = proto::ContainerResources { name: "app".into(), cpu_ids, ..Default::default() };
    let pod = proto::PodResources { name: "dpdk".into(), namespace: "telco".into(), containers: vec![container] };
    proto::ListPodResourcesResponse { pod_resources: vec![pod] }
}

/// A kubelet on `socket` for this machine: all 24 CPUs allocatable, none taken yet (change that
/// with [`RunningKubelet::set_list`] and [`pods_on_numa_node_0`]).
#[allow(dead_code)] // not every test binary that shares this module runs this kubelet
pub fn idle_kubelet(socket: &Path) -> RunningKubelet {
    FakeKubelet {
        list: pods_on_numa_node_0(0),
        allocatable: Some(proto::AllocatableResourcesResponse { cpu_ids: (0..24).collect(), ..Default::default() }),
        hang: false,
    }
    .serve(socket)
    .unwrap_or_else(|e| panic!("the kubelet on {}: {e}", socket.display()))
}
