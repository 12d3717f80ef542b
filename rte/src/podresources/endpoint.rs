//! Where the kubelet's podresources socket is.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The exporter's default socket: the host's `/var/lib/kubelet/pod-resources` mounted at
/// `/podresources` (mount the directory, not the socket file, so a kubelet restart is survived).
pub const DEFAULT_SOCKET: &str = "unix:///podresources/kubelet.sock";

/// The kubelet's own socket path on the host.
pub const KUBELET_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// The filesystem path of the kubelet's podresources unix socket.
///
/// Parsed from a plain path or a gRPC-style URL: `unix:///abs/path` or `unix:path`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SocketPath(PathBuf);

/// Why a socket endpoint did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid podresources socket {endpoint:?}: {reason}")]
pub struct SocketPathError {
    endpoint: String,
    reason: &'static str,
}

impl SocketPath {
    /// The socket's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl FromStr for SocketPath {
    type Err = SocketPathError;

    fn from_str(endpoint: &str) -> Result<Self, Self::Err> {
        let fail = |reason| Err(SocketPathError { endpoint: endpoint.into(), reason });
        let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
            // unix://host/path has no meaning for a local socket: demand an absolute path.
            if !rest.starts_with('/') {
                return fail("a unix:// URL needs an absolute path (unix:///path/to/kubelet.sock)");
            }
            rest
        } else if let Some(rest) = endpoint.strip_prefix("unix:") {
            rest
        } else if endpoint.contains("://") {
            return fail("only unix sockets are supported (unix:///path or a plain path)");
        } else {
            endpoint
        };
        if path.is_empty() {
            return fail("the socket path is empty");
        }
        Ok(SocketPath(PathBuf::from(path)))
    }
}

impl From<PathBuf> for SocketPath {
    fn from(path: PathBuf) -> Self {
        SocketPath(path)
    }
}

impl From<&Path> for SocketPath {
    fn from(path: &Path) -> Self {
        SocketPath(path.to_path_buf())
    }
}

impl fmt::Display for SocketPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.display().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_endpoints_parse_from_urls_and_plain_paths() {
        let cases = [
            (DEFAULT_SOCKET, "/podresources/kubelet.sock"),
            ("unix:///var/lib/kubelet/pod-resources/kubelet.sock", KUBELET_SOCKET),
            ("unix:relative/kubelet.sock", "relative/kubelet.sock"),
            ("unix:/abs/kubelet.sock", "/abs/kubelet.sock"),
            ("/run/kubelet.sock", "/run/kubelet.sock"),
        ];
        for (endpoint, path) in cases {
            assert_eq!(endpoint.parse::<SocketPath>().unwrap().path(), Path::new(path), "{endpoint}");
        }
    }

    #[test]
    fn socket_endpoints_other_than_unix_sockets_are_refused_with_a_reason() {
        for endpoint in ["", "unix://", "unix:", "unix://localhost/kubelet.sock", "fake://x", "tcp://127.0.0.1:1"] {
            let error = endpoint.parse::<SocketPath>().unwrap_err();
            assert!(error.to_string().starts_with("invalid podresources socket"), "{endpoint}: {error}");
        }
    }
}
