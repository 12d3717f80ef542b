//! A Service as a cluster routes it, for the replicas' tests: one loopback port whose
//! connections go, round robin, to the replicas' endpoints.
//!
//! In a cluster, clients never pick a replica: kube-proxy sends each connection to one of the
//! Service's endpoints, and the endpoints of an ordinary Service are the Ready pods only (the
//! kubelet's readiness probe, the EndpointSlice controller). A Service with
//! `publishNotReadyAddresses` lists every pod that has an address, Ready or not. A test that
//! lets its clients reach a replica that is not Ready proves nothing about a cold start: that
//! is how a deadlock (exporters waiting for a Ready replica, replicas waiting for exporters)
//! once went unnoticed. With no endpoint, a connection is closed at once (kube-proxy rejects
//! it).
//!
//! The endpoints are refreshed every [`ENDPOINTS_REFRESH`], as the probes and the controller
//! refresh them (more often than a real cluster, so the tests wait less; never instantly).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How often the endpoints are looked at again.
pub const ENDPOINTS_REFRESH: Duration = Duration::from_millis(100);

/// Which pods a Service routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// Ready pods only: what the APIService and readers use.
    Ready,
    /// Every pod that listens (`publishNotReadyAddresses: true`): what the exporters write
    /// through.
    NotReadyToo,
}

/// One replica as an endpoint: its port, and a client asking its `/readyz`.
#[derive(Clone)]
pub struct Backend {
    pub port: u16,
    pub probe: kube::Client,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").field("port", &self.port).finish_non_exhaustive()
    }
}

/// A Service over some replicas; stops routing when dropped.
#[derive(Debug)]
pub struct Service {
    pub port: u16,
    endpoints: Arc<Mutex<Vec<u16>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Service {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Service {
    /// Starts routing to `backends` as `publish` says.
    pub async fn start(backends: Vec<Backend>, publish: Publish) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("a Service port: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_else(|e| panic!("a Service port: {e}"));
        let endpoints = Arc::new(Mutex::new(Vec::new()));
        let refresh = tokio::spawn(refresh_endpoints(backends, publish, endpoints.clone()));
        let route = tokio::spawn(route(listener, endpoints.clone()));
        Self { port, endpoints, tasks: vec![refresh, route] }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:<port>`, for a plain-HTTP port.
    pub fn plain_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The backends' ports it routes to now.
    pub fn endpoints(&self) -> Vec<u16> {
        self.endpoints.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

async fn refresh_endpoints(backends: Vec<Backend>, publish: Publish, endpoints: Arc<Mutex<Vec<u16>>>) {
    loop {
        let mut current = Vec::new();
        for backend in &backends {
            let listed = match publish {
                Publish::Ready => crate::replicas::is_ready(&backend.probe).await,
                Publish::NotReadyToo => TcpStream::connect(("127.0.0.1", backend.port)).await.is_ok(),
            };
            if listed {
                current.push(backend.port);
            }
        }
        *endpoints.lock().unwrap_or_else(PoisonError::into_inner) = current;
        tokio::time::sleep(ENDPOINTS_REFRESH).await;
    }
}

async fn route(listener: TcpListener, endpoints: Arc<Mutex<Vec<u16>>>) {
    let next = AtomicUsize::new(0);
    while let Ok((mut client, _)) = listener.accept().await {
        let chosen = {
            let endpoints = endpoints.lock().unwrap_or_else(PoisonError::into_inner);
            (!endpoints.is_empty()).then(|| endpoints[next.fetch_add(1, Ordering::Relaxed) % endpoints.len()])
        };
        let Some(port) = chosen else {
            drop(client); // No endpoint: refused.
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            }
        });
    }
}
