//! A router over real TLS on loopback (the certs crate's `serve_with`, as the binary runs it) with
//! a serving certificate a generated CA signed, and kube clients that trust that CA: what the
//! end-to-end tests and the benches share.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use numaresources_runtime::shutdown::{Shutdown, Trigger};
use numaresources_runtime::tls::{CertificateAuthority, ReloadingCertificate, ServerConfigBuilder};
use numaresources_runtime::{ServeOptions, serve_with};

/// How long a test waits for anything before it calls it a hang.
pub const BOUND: Duration = Duration::from_secs(60);
/// In-flight requests' grace at shutdown: open watches count as in flight, so a short one keeps
/// a stop (or a restart on the same port) prompt.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(200);

/// Bounds a wait: a hang fails the test with `what` instead of stalling the suite.
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no progress in {} s, likely deadlocked", BOUND.as_secs()))
}

/// Waits (bounded, looking every 20 ms) until `done`.
pub async fn until(what: &str, done: impl Fn() -> bool) {
    bounded(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// A CA for one test's certificates.
pub fn test_ca() -> CertificateAuthority {
    CertificateAuthority::generate("test-ca", Duration::from_secs(24 * 3600)).unwrap_or_else(|e| panic!("CA: {e}"))
}

/// A TLS configuration serving a pair `ca` issues for `localhost` and `127.0.0.1`, its files
/// written as `<dir>/<name>.crt` and `<dir>/<name>.key`.
pub fn serving_tls(ca: &CertificateAuthority, dir: &Path, name: &str) -> Arc<rustls::ServerConfig> {
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let pair = ca.issue_serving(&names, Duration::from_secs(3600)).unwrap_or_else(|e| panic!("serving pair: {e}"));
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    pair.write(&cert, &key).unwrap_or_else(|e| panic!("serving pair: {e}"));
    let certificate = ReloadingCertificate::load(&cert, &key).unwrap_or_else(|e| panic!("serving pair: {e}"));
    ServerConfigBuilder::new(Arc::new(certificate)).build().unwrap_or_else(|e| panic!("TLS configuration: {e}"))
}

/// `app` served over `tls` until stopped.
#[derive(Debug)]
pub struct Served {
    pub address: SocketAddr,
    stop: Trigger,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    /// Serves on `address` (port 0: any free one). A port a stopped server just held is retried
    /// briefly, in case the kernel has not let go of it yet.
    pub async fn start(address: SocketAddr, tls: Arc<rustls::ServerConfig>, app: axum::Router) -> Self {
        let listener = bounded("binding the port", async {
            loop {
                match tokio::net::TcpListener::bind(address).await {
                    Ok(listener) => return listener,
                    Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(error) => panic!("binding {address}: {error}"),
                }
            }
        })
        .await;
        let address = listener.local_addr().unwrap_or_else(|e| panic!("local address: {e}"));
        let (stop, stopped) = Shutdown::manual();
        let options = ServeOptions::default().shutdown_grace(SHUTDOWN_GRACE);
        let task = tokio::spawn(serve_with(listener, tls, app, stopped.signaled(), options));
        Self { address, stop, task }
    }

    /// On any free port of 127.0.0.1.
    pub async fn on_loopback(tls: Arc<rustls::ServerConfig>, app: axum::Router) -> Self {
        Self::start(SocketAddr::from(([127, 0, 0, 1], 0)), tls, app).await
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// Shuts down and waits (bounded) until the listener has returned cleanly.
    pub async fn stop(mut self) {
        self.stop.fire();
        let served = bounded("server shutdown", &mut self.task).await;
        served.unwrap_or_else(|e| panic!("the listener task: {e}")).unwrap_or_else(|e| panic!("serving: {e}"));
    }
}

/// A kubeconfig for `server` trusting `ca_pem`, presenting `token`.
pub fn kubeconfig(server: &str, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters: [{{name: test, cluster: {{server: '{server}', certificate-authority-data: {ca}}}}}]\n\
         contexts: [{{name: test, context: {{cluster: test, user: test}}}}]\n\
         current-context: test\nusers: [{{name: test, user: {{token: {token}}}}}]\n"
    )
}

/// The kube-rs configuration of [`kubeconfig`].
pub async fn kube_config(server: &str, ca_pem: &str, token: &str) -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig(server, ca_pem, token))
        .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig: {e}"))
}

/// A kube-rs client of [`kubeconfig`].
pub async fn kube_client(server: &str, ca_pem: &str, token: &str) -> kube::Client {
    kube::Client::try_from(kube_config(server, ca_pem, token).await).unwrap_or_else(|e| panic!("client: {e}"))
}
