//! What can go wrong talking to the kubelet, worded so that an operator knows what to do.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::{Code, Status};

/// A podresources call that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No socket file at the configured path.
    #[error(
        "kubelet podresources socket {path} does not exist: is the kubelet running? is the host's \
         pod-resources directory mounted (the directory, not the socket file)?"
    )]
    SocketMissing {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket exists but this process may not connect to it.
    #[error(
        "permission denied on kubelet podresources socket {path}: the exporter must run privileged \
         (root, or a security context allowed to use the kubelet's sockets)"
    )]
    PermissionDenied {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket file exists but nothing accepts connections on it (a stale socket).
    #[error(
        "nothing accepts connections on kubelet podresources socket {path} (stale socket): \
         the kubelet is stopped or restarting"
    )]
    ConnectionRefused {
        /// The socket path.
        path: PathBuf,
    },
    /// Connecting took longer than the connect timeout.
    #[error(
        "connecting to kubelet podresources socket {path} took longer than {timeout:?}: the kubelet may be overloaded"
    )]
    ConnectTimeout {
        /// The socket path.
        path: PathBuf,
        /// The connect timeout.
        timeout: Duration,
    },
    /// Any other failure to connect.
    #[error("cannot connect to kubelet podresources socket {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Recent dials failed and the backoff does not allow another one yet.
    #[error(
        "kubelet podresources socket {path} unreachable after {failures} attempt(s) (last: {last_error}); \
         not dialing again for {retry_in:?}"
    )]
    Backoff {
        /// The socket path.
        path: PathBuf,
        /// Consecutive failed dials.
        failures: u32,
        /// When the next dial is allowed.
        retry_in: Duration,
        /// The last dial failure.
        last_error: String,
    },
    /// The connection broke during the call (e.g. the kubelet restarted); the next call redials.
    #[error("connection to the kubelet lost during podresources {method}: {message}; the next call reconnects")]
    ConnectionLost {
        /// The gRPC method.
        method: &'static str,
        /// What the transport said.
        message: String,
    },
    /// No answer within the call timeout.
    #[error("kubelet podresources {method} got no answer within {timeout:?}: the kubelet may be hung or overloaded")]
    DeadlineExceeded {
        /// The gRPC method.
        method: &'static str,
        /// The call timeout.
        timeout: Duration,
    },
    /// The kubelet does not know the method.
    #[error(
        "the kubelet does not implement podresources {method}: it is too old (GetAllocatableResources is on by \
         default since Kubernetes 1.23 and GA since 1.28): upgrade the kubelet or enable the \
         KubeletPodResourcesGetAllocatable feature gate"
    )]
    Unimplemented {
        /// The gRPC method.
        method: &'static str,
    },
    /// The answer is larger than the client accepts.
    #[error(
        "kubelet podresources {method} answer exceeds the {limit}-byte limit ({message}): raise the client's maximum response size"
    )]
    ResponseTooLarge {
        /// The gRPC method.
        method: &'static str,
        /// The configured limit in bytes.
        limit: usize,
        /// What the decoder said.
        message: String,
    },
    /// The kubelet answered with an error status.
    #[error("kubelet podresources {method} failed with {code:?}: {message}")]
    Rpc {
        /// The gRPC method.
        method: &'static str,
        /// The gRPC status code.
        code: Code,
        /// The status message.
        message: String,
    },
}

impl Error {
    /// Whether retrying later may succeed without anyone changing the setup.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Error::SocketMissing { .. }
            | Error::ConnectionRefused { .. }
            | Error::ConnectTimeout { .. }
            | Error::Connect { .. }
            | Error::Backoff { .. }
            | Error::ConnectionLost { .. }
            | Error::DeadlineExceeded { .. } => true,
            Error::PermissionDenied { .. } | Error::Unimplemented { .. } | Error::ResponseTooLarge { .. } => false,
            Error::Rpc { code, .. } => matches!(code, Code::Unavailable | Code::ResourceExhausted | Code::Aborted),
        }
    }

    /// Maps a failed call's status, finding our dial failure in its source chain if that is
    /// what it was.
    pub(super) fn from_status(method: &'static str, call: &CallLimits<'_>, status: &Status) -> Self {
        if let Some(dial) = find_in_chain::<DialFailure>(status) {
            return Error::from_dial(call.socket, dial);
        }
        let message = status.message().to_string();
        match status.code() {
            Code::DeadlineExceeded => Error::DeadlineExceeded { method, timeout: call.timeout },
            Code::Unimplemented => Error::Unimplemented { method },
            // tonic's decoder reports an over-limit message as OutOfRange; the kubelet never
            // sends that code for these methods.
            Code::OutOfRange => Error::ResponseTooLarge { method, limit: call.max_response_bytes, message },
            // A status built locally (it has a source) is a transport failure, not the kubelet's answer.
            Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled if status.source().is_some() => {
                Error::ConnectionLost { method, message: chain_message(status) }
            }
            code => Error::Rpc { method, code, message },
        }
    }

    fn from_dial(path: &Path, dial: &DialFailure) -> Self {
        let path = path.to_path_buf();
        match dial {
            DialFailure::Missing => Error::SocketMissing { path },
            DialFailure::PermissionDenied => Error::PermissionDenied { path },
            DialFailure::Refused => Error::ConnectionRefused { path },
            DialFailure::Timeout(timeout) => Error::ConnectTimeout { path, timeout: *timeout },
            DialFailure::Other(source) => {
                Error::Connect { path, source: io::Error::new(source.kind(), source.to_string()) }
            }
            DialFailure::Backoff { failures, retry_in, last_error } => {
                Error::Backoff { path, failures: *failures, retry_in: *retry_in, last_error: last_error.clone() }
            }
        }
    }
}

/// What a call needs to word its errors.
pub(super) struct CallLimits<'a> {
    pub socket: &'a Path,
    pub timeout: Duration,
    pub max_response_bytes: usize,
}

/// Why the connector could not hand tonic a connection. Travels inside tonic's error chain.
#[derive(Debug)]
pub(super) enum DialFailure {
    Missing,
    PermissionDenied,
    Refused,
    Timeout(Duration),
    Other(io::Error),
    Backoff { failures: u32, retry_in: Duration, last_error: String },
}

impl DialFailure {
    pub(super) fn from_io(error: io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::NotFound => DialFailure::Missing,
            io::ErrorKind::PermissionDenied => DialFailure::PermissionDenied,
            io::ErrorKind::ConnectionRefused => DialFailure::Refused,
            _ => DialFailure::Other(error),
        }
    }
}

impl fmt::Display for DialFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DialFailure::Missing => f.write_str("socket does not exist"),
            DialFailure::PermissionDenied => f.write_str("permission denied"),
            DialFailure::Refused => f.write_str("connection refused"),
            DialFailure::Timeout(timeout) => write!(f, "connect timed out after {timeout:?}"),
            DialFailure::Other(error) => write!(f, "{error}"),
            DialFailure::Backoff { failures, retry_in, .. } => {
                write!(f, "backing off for {retry_in:?} after {failures} failed dial(s)")
            }
        }
    }
}

impl StdError for DialFailure {}

fn find_in_chain<'a, T: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        next = error.source();
    }
    None
}

/// The status message followed by its sources, for transport errors whose top line says little.
fn chain_message(status: &Status) -> String {
    let mut message = status.message().to_string();
    let mut next = status.source();
    while let Some(error) = next {
        let text = error.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        next = error.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> CallLimits<'static> {
        CallLimits {
            socket: Path::new("/podresources/kubelet.sock"),
            timeout: Duration::from_secs(10),
            max_response_bytes: 16,
        }
    }

    #[test]
    fn os_errors_of_a_dial_map_to_the_matching_advice() {
        let cases = [
            (io::ErrorKind::NotFound, "is the kubelet running?"),
            (io::ErrorKind::PermissionDenied, "must run privileged"),
            (io::ErrorKind::ConnectionRefused, "stale socket"),
            (io::ErrorKind::AddrNotAvailable, "cannot connect"),
        ];
        for (kind, advice) in cases {
            let status = Status::from_error(Box::new(DialFailure::from_io(io::Error::from(kind))));
            let error = Error::from_status("List", &limits(), &status);
            assert!(error.to_string().contains(advice), "{kind:?}: {error}");
            assert!(error.to_string().contains("/podresources/kubelet.sock"), "{error}");
        }
    }

    #[test]
    fn statuses_from_the_kubelet_map_to_typed_errors() {
        let error = Error::from_status("GetAllocatableResources", &limits(), &Status::unimplemented("unknown method"));
        assert!(matches!(error, Error::Unimplemented { method: "GetAllocatableResources" }), "{error}");
        let error = Error::from_status("List", &limits(), &Status::deadline_exceeded("late"));
        assert!(matches!(error, Error::DeadlineExceeded { .. }), "{error}");
        let error = Error::from_status("List", &limits(), &Status::out_of_range("decoded message length too large"));
        assert!(matches!(error, Error::ResponseTooLarge { limit: 16, .. }), "{error}");
        // Sent by the server (no local source): an answer, not a lost connection.
        let error = Error::from_status("List", &limits(), &Status::unavailable("draining"));
        assert!(matches!(error, Error::Rpc { code: Code::Unavailable, .. }) && error.is_transient(), "{error}");
        let error = Error::from_status("List", &limits(), &Status::invalid_argument("no"));
        assert!(!error.is_transient(), "{error}");
    }

    #[test]
    fn local_transport_failures_are_lost_connections() {
        let status = Status::from_error(Box::new(io::Error::new(io::ErrorKind::BrokenPipe, "broken pipe")));
        let error = Error::from_status("List", &limits(), &status);
        assert!(matches!(error, Error::ConnectionLost { .. }), "{error}");
        assert!(error.to_string().contains("broken pipe"), "{error}");
    }
}
