//! A fake kubelet: the generated `PodResourcesLister` server on a real unix socket, serving
//! canned answers. For tests and benchmarks (feature `test-kubelet`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use numaresources_runtime::shutdown::{Shutdown, Trigger};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use super::proto;
use super::proto::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};

/// What the fake kubelet answers.
#[derive(Debug, Clone, Default)]
pub struct FakeKubelet {
    /// The `List` answer.
    pub list: proto::ListPodResourcesResponse,
    /// The `GetAllocatableResources` answer; `None` plays a kubelet too old to have the method.
    pub allocatable: Option<proto::AllocatableResourcesResponse>,
    /// Accept calls and never answer them (a hung kubelet), until stopped.
    pub hang: bool,
}

/// A fake kubelet serving on a socket. Stop it with [`RunningKubelet::stop`].
#[derive(Debug)]
pub struct RunningKubelet {
    path: PathBuf,
    answers: Arc<RwLock<FakeKubelet>>,
    calls: Arc<AtomicU64>,
    stop: Trigger,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl FakeKubelet {
    /// Binds `path` (which must not exist, as with a kubelet that removed its old socket) and
    /// serves until stopped.
    ///
    /// # Errors
    /// The socket cannot be bound.
    pub fn serve(self, path: &Path) -> io::Result<RunningKubelet> {
        let listener = UnixListener::bind(path)?;
        let (stop, stopping) = Shutdown::manual();
        let answers = Arc::new(RwLock::new(self));
        let calls = Arc::new(AtomicU64::new(0));
        let service = Lister { answers: Arc::clone(&answers), calls: Arc::clone(&calls), stopping: stopping.clone() };
        let server = tokio::spawn(tonic::transport::Server::builder().serve_with_incoming_shutdown(
            PodResourcesListerServer::new(service),
            UnixListenerStream::new(listener),
            stopping.signaled(),
        ));
        Ok(RunningKubelet { path: path.to_path_buf(), answers, calls, stop, server })
    }
}

impl RunningKubelet {
    /// The socket path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Changes the `List` answer from now on (a pod admitted or gone).
    pub fn set_list(&self, list: proto::ListPodResourcesResponse) {
        self.answers.write().unwrap_or_else(PoisonError::into_inner).list = list;
    }

    /// How many calls (of any method) it has answered or is answering.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Stops serving: hung calls fail, connections close, the server task ends. The socket file
    /// stays, as a dead kubelet's does.
    ///
    /// # Errors
    /// The server failed.
    pub async fn stop(self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.stop.fire();
        self.server.await??;
        Ok(())
    }
}

#[derive(Debug)]
struct Lister {
    answers: Arc<RwLock<FakeKubelet>>,
    calls: Arc<AtomicU64>,
    stopping: Shutdown,
}

impl Lister {
    /// A copy of the answers now, counting the call; a hanging kubelet answers only when stopped.
    async fn answers(&self) -> Result<FakeKubelet, Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let answers = self.answers.read().unwrap_or_else(PoisonError::into_inner).clone();
        if answers.hang {
            self.stopping.signaled().await;
            return Err(Status::unavailable("fake kubelet stopping"));
        }
        Ok(answers)
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _: Request<proto::ListPodResourcesRequest>,
    ) -> Result<Response<proto::ListPodResourcesResponse>, Status> {
        let answers = self.answers().await?;
        Ok(Response::new(answers.list))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<proto::AllocatableResourcesRequest>,
    ) -> Result<Response<proto::AllocatableResourcesResponse>, Status> {
        let answers = self.answers().await?;
        match &answers.allocatable {
            Some(allocatable) => Ok(Response::new(allocatable.clone())),
            // What tonic itself answers for an unknown method.
            None => {
                Err(Status::unimplemented("unknown method GetAllocatableResources for service v1.PodResourcesLister"))
            }
        }
    }

    async fn get(
        &self,
        request: Request<proto::GetPodResourcesRequest>,
    ) -> Result<Response<proto::GetPodResourcesResponse>, Status> {
        let answers = self.answers().await?;
        let wanted = request.into_inner();
        let pod = answers
            .list
            .pod_resources
            .iter()
            .find(|pod| pod.namespace == wanted.pod_namespace && pod.name == wanted.pod_name)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("pod {}/{} not found", wanted.pod_namespace, wanted.pod_name)))?;
        Ok(Response::new(proto::GetPodResourcesResponse { pod_resources: Some(pod) }))
    }
}

/// A `List` answer for a 2-NUMA node (64 CPUs, node0 = 0-15,32-47) with `pods` pods: every
/// fifth is a Guaranteed pod holding 2 exclusive CPUs, 1 GiB of memory, a 1 GiB hugepage and a
/// VF on one NUMA node; the others are burstable pods that hold nothing exclusive.
#[must_use]
pub fn synthetic_list(pods: usize) -> proto::ListPodResourcesResponse {
    let numa = |id: i64| Some(proto::TopologyInfo { nodes: vec![proto::NumaNode { id }] });
    let pod_resources = (0..pods)
        .map(|i| {
            let containers = if i % 5 == 0 {
                let node = (i / 5 % 2) as i64;
                let first = (i / 5 % 15) as i64 + 1 + node * 16;
                vec![proto::ContainerResources {
                    name: "app".into(),
                    cpu_ids: vec![first, first + 32],
                    memory: vec![
                        proto::ContainerMemory { memory_type: "memory".into(), size: 1 << 30, topology: numa(node) },
                        proto::ContainerMemory {
                            memory_type: "hugepages-1Gi".into(),
                            size: 1 << 30,
                            topology: numa(node),
                        },
                    ],
                    devices: vec![proto::ContainerDevices {
                        resource_name: "example.com/sriov_vf".into(),
                        device_ids: vec![format!("0000:{:02x}:02.{}", 0x3b + node * 0x40, i % 8)],
                        topology: numa(node),
                    }],
                    dynamic_resources: vec![],
                }]
            } else {
                vec![
                    proto::ContainerResources { name: "web".into(), ..Default::default() },
                    proto::ContainerResources { name: "sidecar".into(), ..Default::default() },
                ]
            };
            proto::PodResources {
                name: format!("workload-{i:04}-7c9f8b6d5-x2k4q"),
                namespace: format!("team-{}", i % 7),
                containers,
            }
        })
        .collect();
    proto::ListPodResourcesResponse { pod_resources }
}
