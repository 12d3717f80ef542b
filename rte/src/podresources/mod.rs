//! The kubelet podresources API: a gRPC client over the kubelet's unix socket, a plain model of
//! its answers, and the filters applied to them before accounting (docs/exporter-accounting.md).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use numaresources_rte::podresources::{PodResourcesClient, PodResourcesSource};
//!
//! let client = PodResourcesClient::for_socket("unix:///podresources/kubelet.sock")?;
//! let pods = client.list().await?;
//! let allocatable = client.allocatable().await?;
//! println!("{} pods, {} allocatable cpus", pods.len(), allocatable.cpu_ids.len());
//! # Ok(()) }
//! ```

mod backoff;
mod client;
mod endpoint;
mod error;
mod if_present;
pub mod middleware;
pub mod model;
#[cfg(feature = "test-kubelet")]
pub mod testing;

use std::future::Future;

pub use backoff::Backoff;
pub use client::{ClientConfig, ConnectionHealth, PodResourcesClient};
pub use endpoint::{DEFAULT_SOCKET, KUBELET_SOCKET, SocketPath, SocketPathError};
pub use error::Error;
pub use if_present::KubeletIfPresent;
pub use model::{Allocatable, ContainerResources, Devices, MemoryBlock, NumaAffinity, PodResources};

/// The wire types of `v1.PodResourcesLister`, generated from `proto/podresources/v1/api.proto`.
///
/// The server half is compiled only with the `test-kubelet` feature (the fake kubelet).
#[allow(missing_docs, clippy::all, clippy::pedantic, missing_debug_implementations, rust_2018_idioms)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/v1.rs"));
}

/// Where the accounting gets pods and allocatable resources from: the kubelet in production,
/// plain data in tests.
pub trait PodResourcesSource {
    /// Every pod with its exclusive resources.
    fn list(&self) -> impl Future<Output = Result<Vec<PodResources>, Error>> + Send;
    /// What the kubelet may allocate.
    fn allocatable(&self) -> impl Future<Output = Result<Allocatable, Error>> + Send;
    /// Whether there is a kubelet at all; without one the topology is the machine's own view
    /// (allocatable = capacity, nothing allocated).
    fn present(&self) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }
}

/// No source (`--podresources-socket none`) or one.
impl<S: PodResourcesSource + Sync> PodResourcesSource for Option<S> {
    async fn list(&self) -> Result<Vec<PodResources>, Error> {
        match self {
            Some(source) => source.list().await,
            None => Ok(Vec::new()),
        }
    }

    async fn allocatable(&self) -> Result<Allocatable, Error> {
        match self {
            Some(source) => source.allocatable().await,
            None => Ok(Allocatable::default()),
        }
    }

    async fn present(&self) -> bool {
        match self {
            Some(source) => source.present().await,
            None => false,
        }
    }
}

/// A [`PodResourcesSource`] that always answers the same plain data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticPodResources {
    /// What `list` answers.
    pub pods: Vec<PodResources>,
    /// What `allocatable` answers.
    pub allocatable: Allocatable,
}

impl PodResourcesSource for StaticPodResources {
    fn list(&self) -> impl Future<Output = Result<Vec<PodResources>, Error>> + Send {
        std::future::ready(Ok(self.pods.clone()))
    }

    fn allocatable(&self) -> impl Future<Output = Result<Allocatable, Error>> + Send {
        std::future::ready(Ok(self.allocatable.clone()))
    }
}
