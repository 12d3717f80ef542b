//! What the rte tests share: a bound on every wait, a publisher that tells the test what it is
//! asked to publish, a sysfs fixture of `machines/` unpacked (see the README
//! there), the kubelet's pods and the CPUs a published zone has left. The benches include it by `#[path]`; each binary uses a part of it.

#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_rte::podresources::proto;
use numaresources_rte::publish::{Outcome, PublishError, Publisher};
use tokio::sync::mpsc;

/// Bounds every wait: a test that hangs fails instead.
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("{what} took more than 20 s: likely deadlocked"))
}

/// Tells the test what it is asked to publish.
#[derive(Clone)]
pub struct Told(pub mpsc::UnboundedSender<NodeResourceTopology>);

impl Publisher for Told {
    fn publish(&self, desired: NodeResourceTopology) -> impl Future<Output = Result<Outcome, PublishError>> + Send {
        let _ = self.0.send(desired);
        std::future::ready(Ok(Outcome::Patched))
    }
}

/// Unpacks fixture `name` into a temporary directory; returns it and its `sys/` root.
pub fn unpack(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tarball = numaresources_rte::sysfs::machines::directory().join(format!("{name}.tar.gz"));
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::open(&tarball).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir.path()).unwrap();
    let sys = dir.path().join("sys");
    (dir, sys)
}

/// A `List` answer with one pod per `(name, cpus)` in namespace `telco`, its container `app`
/// holding `cpus` exclusively.
pub fn exclusive_pods(pods: &[(&str, &[i64])]) -> proto::ListPodResourcesResponse {
    let pod = |(name, cpus): &(&str, &[i64])| proto::PodResources {
        name: (*name).into(),
        namespace: "telco".into(),
        containers: vec![proto::ContainerResources {
            name: "app".into(),
            cpu_ids: cpus.to_vec(),
            ..Default::default()
        }],
    };
    proto::ListPodResourcesResponse { pod_resources: pods.iter().map(pod).collect() }
}

/// The CPUs `zone` of `nrt` has available.
pub fn available_cpus(nrt: &NodeResourceTopology, zone: &str) -> i64 {
    let zone = nrt.zones.iter().find(|z| z.name == zone).unwrap();
    zone.resources.iter().find(|r| r.name == "cpu").unwrap().available.as_i64().unwrap()
}
