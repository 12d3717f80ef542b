//! A kubelet that this machine may not run: `numaresources local` on a laptop.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Allocatable, Error, PodResources, PodResourcesClient, PodResourcesSource};

/// The kubelet behind `client`, once its socket has appeared.
///
/// Until a kubelet answers there is none: the topology is the machine's own view (allocatable =
/// capacity, nothing allocated). The socket is looked for at every scan; a socket that exists
/// but does not answer (left behind by a stopped kubelet) is not a kubelet yet. Once a kubelet
/// has answered it is there for good: when it later fails or its socket goes away (a restart),
/// scans fail and nothing is published, rather than the machine turning back into an empty one
/// with every CPU free.
#[derive(Debug)]
pub struct KubeletIfPresent {
    client: PodResourcesClient,
    seen: AtomicBool,
}

impl KubeletIfPresent {
    /// Watches for `client`'s socket; does no I/O yet.
    #[must_use]
    pub fn new(client: PodResourcesClient) -> Self {
        Self { client, seen: AtomicBool::new(false) }
    }

    fn socket(&self) -> &Path {
        self.client.config().socket.path()
    }
}

impl PodResourcesSource for KubeletIfPresent {
    async fn list(&self) -> Result<Vec<PodResources>, Error> {
        self.client.list().await
    }

    async fn allocatable(&self) -> Result<Allocatable, Error> {
        self.client.allocatable().await
    }

    /// True once a kubelet has answered on the socket; until then the socket is looked for, and
    /// asked, at every scan.
    async fn present(&self) -> bool {
        if self.seen.load(Ordering::Relaxed) {
            return true;
        }
        // `exists` follows symlinks and is false on any error, e.g. a directory we may not read.
        if !self.socket().exists() {
            return false;
        }
        match self.client.allocatable().await {
            Ok(_) => {
                if !self.seen.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        socket = %self.socket().display(),
                        "the kubelet podresources API answered: accounting the kubelet's allocations from now on"
                    );
                }
                true
            }
            Err(error) => {
                tracing::warn!(
                    socket = %self.socket().display(),
                    "a kubelet socket exists but does not answer ({error}); still publishing the machine's own view"
                );
                false
            }
        }
    }
}
