//! Kept-alive HTTPS connections to a server on loopback, over HTTP/1.1 or HTTP/2, each request
//! answered whole: the client side of the API server's TLS tests and benches.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// One kept-alive connection.
#[derive(Debug)]
pub enum Connection {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

/// An answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A connection to `address`, whose certificate `ca_pem` verifies, presenting
/// `client_certificate` (certificate and key PEM) if given. Each call has its own client
/// configuration, so its handshake is a full one.
pub async fn connect(
    address: SocketAddr,
    ca_pem: &str,
    protocol: Protocol,
    client_certificate: Option<(&str, &str)>,
) -> Connection {
    connect_with(address, client_config(ca_pem, protocol, client_certificate), protocol).await
}

/// A client configuration trusting `ca_pem`, offering `protocol` by ALPN. Connections made with
/// one configuration share its session cache: after the first, they resume the TLS session.
pub fn client_config(
    ca_pem: &str,
    protocol: Protocol,
    client_certificate: Option<(&str, &str)>,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client_certificate {
        Some((cert_pem, key_pem)) => {
            let chain = vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()];
            let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![match protocol {
        Protocol::Http1 => b"http/1.1".to_vec(),
        Protocol::Http2 => b"h2".to_vec(),
    }];
    Arc::new(config)
}

/// A connection to `address` made with `config` (see [`client_config`]).
pub async fn connect_with(address: SocketAddr, config: Arc<rustls::ClientConfig>, protocol: Protocol) -> Connection {
    let tcp = TcpStream::connect(address).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = TlsConnector::from(config).connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    let io = TokioIo::new(tls);
    match protocol {
        Protocol::Http1 => {
            let (sender, connection) = http1::handshake(io).await.unwrap();
            tokio::spawn(connection);
            Connection::Http1(sender)
        }
        Protocol::Http2 => {
            let (sender, connection) = http2::handshake(TokioExecutor::new(), io).await.unwrap();
            tokio::spawn(connection);
            Connection::Http2(sender)
        }
    }
}

impl Connection {
    /// Sends one request and reads the whole answer.
    pub async fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Answer {
        let builder = match self {
            // HTTP/2 needs the scheme and authority in the URI; HTTP/1.1 takes them from Host.
            Connection::Http1(_) => Request::builder().uri(path).header("host", "localhost"),
            Connection::Http2(_) => Request::builder().uri(format!("https://localhost{path}")),
        };
        let mut builder = builder.method(method);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::new(body.into())).unwrap();
        let response = match self {
            Connection::Http1(sender) => {
                sender.ready().await.unwrap();
                sender.send_request(request).await.unwrap()
            }
            Connection::Http2(sender) => {
                sender.ready().await.unwrap();
                sender.send_request(request).await.unwrap()
            }
        };
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Answer { status, body }
    }
}
