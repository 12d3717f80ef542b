//! The kube client for our API server: its CA (re-read while running, so a rotated CA is
//! followed), the bearer token from [`BearerFile`] on every request, a short connect timeout and
//! no retries of its own: a failure must reach the failover at once, which then publishes through
//! kube-apiserver instead of retrying a replica that is not ready.

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http::header::AUTHORIZATION;
use kube::client::{Body, ClientBuilder};
use numaresources_certs::CaBundle;
use tower::util::MapRequestLayer;

use super::DirectServer;
use super::bearer::BearerFile;

/// How long connecting to our server may take. It is a Service address inside the cluster:
/// when it does not connect within this, it is not there, and kube-apiserver is used instead.
pub(crate) const DIRECT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The largest CA bundle read (a bundle of a few certificates is a few KiB; the controllers'
/// rotation keeps two).
pub(crate) const MAX_CA_BUNDLE_BYTES: u64 = 1024 * 1024;

/// Why the client for our server could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA bundle cannot be read.
    #[error("cannot read the CA bundle {path}: {source}")]
    ReadCa {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The CA bundle holds no usable certificate, or is too large.
    #[error("the CA bundle {path} is not usable: {reason}")]
    BadCa {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// kube could not build the client (TLS configuration).
    #[error("cannot build the client for {url}: {source}")]
    Kube {
        /// The server.
        url: http::Uri,
        /// Why.
        #[source]
        source: Box<kube::Error>,
    },
}

/// Reads the CA bundle's certificates (DER), bounded by [`MAX_CA_BUNDLE_BYTES`].
fn read_ca(path: &Path) -> Result<Vec<Vec<u8>>, ClientError> {
    let read = |source| ClientError::ReadCa { path: path.to_owned(), source };
    let mut pem = Vec::new();
    fs::File::open(path).map_err(read)?.take(MAX_CA_BUNDLE_BYTES + 1).read_to_end(&mut pem).map_err(read)?;
    let bad = |reason: String| ClientError::BadCa { path: path.to_owned(), reason };
    if pem.len() as u64 > MAX_CA_BUNDLE_BYTES {
        return Err(bad(format!("larger than {MAX_CA_BUNDLE_BYTES} bytes")));
    }
    let bundle = CaBundle::from_pem(&pem).map_err(|e| bad(e.to_string()))?;
    Ok(bundle.certificates().iter().map(|c| c.to_vec()).collect())
}

/// A client for `server` presenting the token `bearer` reads.
pub fn direct_client(server: &DirectServer, bearer: Arc<BearerFile>) -> Result<kube::Client, ClientError> {
    let roots = read_ca(&server.ca_file)?;
    let mut config = kube::Config::new(server.url.clone());
    config.root_cert = Some(roots);
    // kube re-reads this file while running and verifies with what it holds.
    config.root_cert_file = Some(server.ca_file.clone());
    config.connect_timeout = Some(DIRECT_CONNECT_TIMEOUT);
    config.default_retry = false;
    let kube = |source| ClientError::Kube { url: server.url.clone(), source: Box::new(source) };
    let bearer = MapRequestLayer::new(move |mut request: Request<Body>| {
        if let Some(header) = bearer.header() {
            request.headers_mut().insert(AUTHORIZATION, header);
        }
        request
    });
    Ok(ClientBuilder::try_from(config).map_err(kube)?.with_layer(&bearer).build())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_missing_or_empty_ca_bundle_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.crt");
        assert!(matches!(read_ca(&missing), Err(ClientError::ReadCa { path, .. }) if path == missing));
        let empty = dir.path().join("empty.crt");
        fs::write(&empty, "no certificate here\n").unwrap();
        let error = read_ca(&empty).unwrap_err();
        assert!(matches!(&error, ClientError::BadCa { path, .. } if *path == empty), "{error}");
        let huge = dir.path().join("huge.crt");
        fs::write(&huge, vec![b'#'; MAX_CA_BUNDLE_BYTES as usize + 1]).unwrap();
        assert!(read_ca(&huge).unwrap_err().to_string().contains("larger than"));
    }
}
