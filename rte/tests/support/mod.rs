//! What the rte tests share: a bound on every wait, a publisher that tells the test what it is
//! asked to publish, and a sysfs fixture of `tests/fixtures/sysfs/` unpacked (see the README
//! there). The benches include it by `#[path]`; each binary uses a part of it.

#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
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
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(format!("{name}.tar.gz"));
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::open(&tarball).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir.path()).unwrap();
    let sys = dir.path().join("sys");
    (dir, sys)
}
