//! What the run-loop tests share: a bound on every wait, a publisher that tells the test what it
//! is asked to publish, and the 2-NUMA sysfs fixture unpacked.

use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_rte::publish::{Outcome, PublishError, Publisher};
use tokio::sync::mpsc;

/// Bounds every wait: a test that hangs fails instead.
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future).await.unwrap_or_else(|_| panic!("{what}: timed out"))
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

/// Unpacks the `intel-2numa-24cpu` fixture into `dir`; returns its `sys`.
pub fn unpack_fixture(dir: &Path) -> PathBuf {
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/intel-2numa-24cpu.tar.gz");
    tar::Archive::new(flate2::read::GzDecoder::new(fs::File::open(tarball).unwrap())).unpack(dir).unwrap();
    dir.join("sys")
}
