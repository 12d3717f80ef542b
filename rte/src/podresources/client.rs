//! The gRPC client of the kubelet's podresources socket.
//!
//! One lazily-connected tonic channel whose connector dials the socket path afresh every time
//! tonic (re)connects, so a restarted kubelet (a new socket at the same path) is picked up. The
//! connector also keeps the books: it refuses to dial again before the backoff allows, logs every
//! failed dial with its attempt count, and counts dials and reconnects for [`ConnectionHealth`].

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Response, Status};

use super::backoff::Backoff;
use super::endpoint::{SocketPath, SocketPathError};
use super::error::{CallLimits, DialFailure, Error};
use super::model::{self, Allocatable, PodResources};
use super::proto;
use super::proto::pod_resources_lister_client::PodResourcesListerClient;

/// Default connect and call timeouts (the upstream exporter's).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default largest answer accepted (16 MiB, the upstream exporter's).
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// How to reach the kubelet and how patient to be.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The podresources socket.
    pub socket: SocketPath,
    /// Longest wait for the socket to accept a connection.
    pub connect_timeout: Duration,
    /// Longest wait for a whole call, connecting included.
    pub call_timeout: Duration,
    /// Largest answer accepted, in bytes.
    pub max_response_bytes: usize,
    /// Waits between failed dials.
    pub backoff: Backoff,
}

impl ClientConfig {
    /// Defaults for `socket`: 10 s timeouts, 16 MiB answers, default backoff.
    #[must_use]
    pub fn new(socket: SocketPath) -> Self {
        ClientConfig {
            socket,
            connect_timeout: DEFAULT_TIMEOUT,
            call_timeout: DEFAULT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            backoff: Backoff::default(),
        }
    }
}

/// How the connection to the kubelet is doing, for metrics and readiness.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionHealth {
    /// The last dial succeeded and no call has lost the connection since.
    pub connected: bool,
    /// Dials attempted (backoff refusals not included).
    pub dials_total: u64,
    /// Dials that failed.
    pub dial_failures_total: u64,
    /// Successful dials after the first one: kubelet restarts or broken connections healed.
    pub reconnects_total: u64,
    /// Dials failed in a row since the last success.
    pub consecutive_failures: u32,
    /// The last dial failure, while it is unresolved.
    pub last_error: Option<String>,
}

/// The kubelet podresources client. Cheap to share behind an `Arc`; calls may run concurrently.
///
/// Never panics and never hangs: every call is bounded by the call timeout, connecting included.
/// Use it from one tokio runtime: the first call starts the connection's worker task there.
#[derive(Debug)]
pub struct PodResourcesClient {
    config: ClientConfig,
    dialer: Arc<Dialer>,
    // Created on first use: building a channel spawns its worker on the current tokio runtime.
    channel: OnceLock<Channel>,
}

impl PodResourcesClient {
    /// A client for `config`. Does no I/O: the first call connects.
    #[must_use]
    pub fn new(config: ClientConfig) -> Self {
        let dialer = Arc::new(Dialer {
            path: config.socket.path().to_path_buf(),
            connect_timeout: config.connect_timeout,
            backoff: config.backoff,
            state: Mutex::new(DialState::default()),
        });
        PodResourcesClient { config, dialer, channel: OnceLock::new() }
    }

    /// A client with default settings for a socket given as a path or a `unix://` URL.
    ///
    /// # Errors
    /// The endpoint is not a unix socket.
    pub fn for_socket(endpoint: &str) -> Result<Self, SocketPathError> {
        Ok(Self::new(ClientConfig::new(endpoint.parse()?)))
    }

    /// The settings in use.
    #[must_use]
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// A snapshot of the connection's health.
    #[must_use]
    pub fn health(&self) -> ConnectionHealth {
        self.dialer.lock().health.clone()
    }

    /// Every pod with its resources (`List`), converted to the model.
    ///
    /// # Errors
    /// See [`Error`]; a broken connection is redialed once within the same call.
    pub async fn list(&self) -> Result<Vec<PodResources>, Error> {
        let response = self
            .call("List", |mut grpc, timeout| async move {
                grpc.list(with_timeout(proto::ListPodResourcesRequest {}, timeout)).await
            })
            .await?;
        Ok(model::pods_from_proto(response))
    }

    /// What the kubelet may allocate (`GetAllocatableResources`), converted to the model.
    ///
    /// # Errors
    /// See [`Error`]; [`Error::Unimplemented`] from kubelets that predate the method.
    pub async fn allocatable(&self) -> Result<Allocatable, Error> {
        let response = self
            .call("GetAllocatableResources", |mut grpc, timeout| async move {
                grpc.get_allocatable_resources(with_timeout(proto::AllocatableResourcesRequest {}, timeout)).await
            })
            .await?;
        Ok(Allocatable::from_proto(response))
    }

    /// Runs one unary call under the call timeout, redialing once if the connection broke.
    async fn call<T, F>(
        &self,
        method: &'static str,
        mut send: impl FnMut(PodResourcesListerClient<Channel>, Duration) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<Response<T>, Status>>,
    {
        let timeout = self.config.call_timeout;
        let deadline = Instant::now() + timeout;
        let limits = CallLimits {
            socket: self.config.socket.path(),
            timeout,
            max_response_bytes: self.config.max_response_bytes,
        };
        let mut redialed = false;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let status = match tokio::time::timeout_at(deadline, send(self.grpc(), remaining)).await {
                Ok(Ok(response)) => return Ok(response.into_inner()),
                Ok(Err(status)) => status,
                Err(_) => return Err(Error::DeadlineExceeded { method, timeout }),
            };
            let error = Error::from_status(method, &limits, &status);
            if let Error::ConnectionLost { .. } = error {
                self.dialer.connection_lost();
                // Reads are idempotent: one immediate retry hides a kubelet restart between calls.
                if !redialed {
                    redialed = true;
                    tracing::debug!(method, %error, "retrying once on a fresh connection");
                    continue;
                }
            }
            return Err(error);
        }
    }

    fn grpc(&self) -> PodResourcesListerClient<Channel> {
        let channel = self.channel.get_or_init(|| {
            let dialer = Arc::clone(&self.dialer);
            let connector = tower::service_fn(move |_: Uri| {
                let dialer = Arc::clone(&dialer);
                async move { dialer.dial().await.map(TokioIo::new) }
            });
            // The authority is only a header here; the connector ignores the URI.
            Endpoint::from_static("http://localhost").connect_with_connector_lazy(connector)
        });
        PodResourcesListerClient::new(channel.clone()).max_decoding_message_size(self.config.max_response_bytes)
    }
}

impl super::PodResourcesSource for PodResourcesClient {
    fn list(&self) -> impl Future<Output = Result<Vec<PodResources>, Error>> + Send {
        PodResourcesClient::list(self)
    }

    fn allocatable(&self) -> impl Future<Output = Result<Allocatable, Error>> + Send {
        PodResourcesClient::allocatable(self)
    }
}

fn with_timeout<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    // Sent as grpc-timeout so the kubelet gives up too.
    request.set_timeout(timeout);
    request
}

/// Dials the socket for tonic, applying the backoff and keeping the health counters.
#[derive(Debug)]
struct Dialer {
    path: PathBuf,
    connect_timeout: Duration,
    backoff: Backoff,
    state: Mutex<DialState>,
}

#[derive(Debug, Default)]
struct DialState {
    health: ConnectionHealth,
    ever_connected: bool,
    retry_at: Option<Instant>,
}

impl Dialer {
    fn lock(&self) -> MutexGuard<'_, DialState> {
        // The state is plain counters: still meaningful after a panic elsewhere.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn dial(&self) -> Result<UnixStream, DialFailure> {
        {
            let state = self.lock();
            if let Some(retry_at) = state.retry_at {
                let now = Instant::now();
                if now < retry_at {
                    return Err(DialFailure::Backoff {
                        failures: state.health.consecutive_failures,
                        retry_in: retry_at - now,
                        last_error: state.health.last_error.clone().unwrap_or_default(),
                    });
                }
            }
        }
        // Connect by path every time: after a kubelet restart the path names a new socket.
        let result = match tokio::time::timeout(self.connect_timeout, UnixStream::connect(&self.path)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(error)) => Err(DialFailure::from_io(error)),
            Err(_) => Err(DialFailure::Timeout(self.connect_timeout)),
        };
        let mut state = self.lock();
        state.health.dials_total += 1;
        match &result {
            Ok(_) => {
                if state.ever_connected {
                    state.health.reconnects_total += 1;
                    tracing::info!(
                        socket = %self.path.display(),
                        failed_attempts = state.health.consecutive_failures,
                        "reconnected to the kubelet podresources socket"
                    );
                }
                state.ever_connected = true;
                state.retry_at = None;
                state.health.connected = true;
                state.health.consecutive_failures = 0;
                state.health.last_error = None;
            }
            Err(failure) => {
                state.health.connected = false;
                state.health.dial_failures_total += 1;
                state.health.consecutive_failures = state.health.consecutive_failures.saturating_add(1);
                state.health.last_error = Some(failure.to_string());
                let attempt = state.health.consecutive_failures;
                let wait = self.backoff.delay(attempt);
                state.retry_at = Some(Instant::now() + wait);
                tracing::warn!(
                    socket = %self.path.display(),
                    attempt,
                    retry_in = ?wait,
                    error = %failure,
                    "cannot reach the kubelet podresources socket"
                );
            }
        }
        result
    }

    fn connection_lost(&self) {
        self.lock().health.connected = false;
    }
}
