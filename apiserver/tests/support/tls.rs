//! Our server on a real TLS listener (the runtime crate's `serve`, as the binary runs it), in
//! delegated mode against the kube-apiserver double, and kept-alive HTTP/1.1 or HTTP/2 client
//! connections to it, with or without the front proxy's client certificate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use numaresources_apiserver::auth::issuer_keys::IssuerKeysSource;
use numaresources_apiserver::auth::{
    Auth, AuthenticationConfig, CacheLifetimes, Delegated, NodeRestriction, RequestHeaderConfig,
};
use numaresources_apiserver::exporter_pods::ExporterPods;
use numaresources_apiserver::{AppState, Store, router};
use numaresources_runtime::serve;
use numaresources_runtime::tls::{
    CaBundle, CertificateAuthority, ClientCaVerifier, ReloadingCertificate, ServerConfigBuilder,
};

#[allow(unused_imports)] // each test binary uses a part of it
pub use numaresources_testkit::https::{Answer, Connection, Protocol, client_config, connect, connect_with};

use numaresources_testkit::kube_double::{EXPORTER_ACCOUNT, EXPORTER_NAMESPACE, EXPORTER_SELECTOR, KubeDouble};

/// The aggregator's client certificate CN, as kube-apiserver's front proxy presents it.
pub const FRONT_PROXY_CN: &str = "front-proxy-client";
const VALIDITY: Duration = Duration::from_secs(3600);

/// A running server.
pub struct TlsServer {
    pub address: SocketAddr,
    /// Verifies the serving certificate.
    pub ca_pem: String,
    /// Signs the front proxy's client certificate.
    pub front_proxy_ca: CertificateAuthority,
    pub store: Arc<Store>,
    pub exporter_pods: Arc<ExporterPods>,
    /// The router the listener serves, for in-process comparisons.
    pub app: axum::Router,
    _dir: tempfile::TempDir,
}

/// Starts our server in delegated mode against `double`, with the exporter pod watch running.
/// `configure` may change the state before it is served.
pub async fn start(double: &KubeDouble, configure: impl FnOnce(&mut AppState)) -> TlsServer {
    start_remembering(double, CacheLifetimes::default(), configure).await
}

/// [`start`], remembering reviews' answers as long as `lifetimes` says.
pub async fn start_remembering(
    double: &KubeDouble,
    lifetimes: CacheLifetimes,
    configure: impl FnOnce(&mut AppState),
) -> TlsServer {
    let dir = tempfile::tempdir().unwrap();
    let serving_ca = CertificateAuthority::generate("serving-ca", VALIDITY).unwrap();
    let pair = serving_ca.issue_serving(&["localhost".to_owned()], VALIDITY).unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    pair.write(&cert, &key).unwrap();
    let front_proxy_ca = CertificateAuthority::generate("front-proxy-ca", VALIDITY).unwrap();

    let client_cas = Arc::new(ClientCaVerifier::new(&[]).unwrap());
    let tls = ServerConfigBuilder::new(Arc::new(ReloadingCertificate::load(&cert, &key).unwrap()))
        .client_cas(client_cas.clone())
        .build()
        .unwrap();

    let client = double.client();
    let exporter_pods = Arc::new(ExporterPods::new(EXPORTER_NAMESPACE));
    let follower = exporter_pods.clone();
    let follow_client = client.clone();
    tokio::spawn(async move { follower.follow(follow_client, EXPORTER_SELECTOR).await });
    let restriction = NodeRestriction::new(EXPORTER_NAMESPACE, EXPORTER_ACCOUNT).with_pods(exporter_pods.clone());
    // Tokens the double's issuer signs are verified here; its other tokens go to TokenReview.
    let issuer_keys = Arc::new(IssuerKeysSource::new(client.clone()));
    let delegated = Delegated::new(client, Some(client_cas))
        .with_node_restriction(restriction)
        .with_local_tokens(issuer_keys, exporter_pods.clone())
        .with_cache_lifetimes(lifetimes);
    // What kube-apiserver publishes in extension-apiserver-authentication.
    delegated.set_config(AuthenticationConfig {
        request_header: RequestHeaderConfig {
            client_ca: Some(CaBundle::from_pem(front_proxy_ca.cert_pem().as_bytes()).unwrap()),
            allowed_names: vec![FRONT_PROXY_CN.to_owned()],
            username_headers: vec!["X-Remote-User".to_owned()],
            group_headers: vec!["X-Remote-Group".to_owned()],
            extra_header_prefixes: vec!["X-Remote-Extra-".to_owned()],
            uid_headers: vec!["X-Remote-Uid".to_owned()],
        },
        client_ca: None,
    });

    let store = Arc::new(Store::starting_at(0, 10_000));
    let mut state = AppState::new(store.clone(), "test", "test");
    state.auth = Auth::Delegated(Arc::new(delegated));
    configure(&mut state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = router(Arc::new(state));
    tokio::spawn(serve(listener, tls, app.clone(), std::future::pending()));
    super::eventually("the exporter pods are listed", || exporter_pods.synced()).await;
    let ca_pem = serving_ca.cert_pem().to_owned();
    TlsServer { address, ca_pem, front_proxy_ca, store, exporter_pods, app, _dir: dir }
}

impl TlsServer {
    /// A connection; `as_front_proxy` presents the aggregator's client certificate.
    pub async fn connect(&self, protocol: Protocol, as_front_proxy: bool) -> Connection {
        let client_certificate =
            as_front_proxy.then(|| self.front_proxy_ca.issue_client(FRONT_PROXY_CN, &[], VALIDITY).unwrap());
        let client_certificate =
            client_certificate.as_ref().map(|pair| (pair.cert_pem.as_str(), pair.key_pem.as_str()));
        connect(self.address, &self.ca_pem, protocol, client_certificate).await
    }
}
