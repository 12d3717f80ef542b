//! What the run-loop tests share: a bound on every wait and a publisher that tells the test what
//! it is asked to publish.

use std::future::Future;
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
