//! The webhook over real TLS on 127.0.0.1, served by `numaresources_runtime::serve` as the binary
//! serves it: admissions over kept-alive HTTP/1.1 and HTTP/2 connections, and a certificate
//! rotated the kubelet's way (`..data` symlink swap) under a load loop without one failed
//! admission.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use numaresources_api::operator::PodRoutingMode;
use numaresources_runtime::serve;
use numaresources_runtime::shutdown::{Shutdown, Trigger};
use numaresources_runtime::tls::{
    CertificateAuthority, PemPair, ReloadingCertificate, ServerConfigBuilder, WatchOptions,
};
use numaresources_webhook::MUTATE_PODS_PATH;
use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;

use crate::support::{fixture, scheduler, webhook_with};
use shared::{bounded, client, connect, kubelet_mount, kubelet_swap};

use numaresources_testkit::tls as shared;

struct Server {
    addr: SocketAddr,
    ca: CertificateAuthority,
    dir: tempfile::TempDir,
    _certificate: ReloadingCertificate,
    _watcher: numaresources_runtime::tls::CertificateWatcher,
    stop: Trigger,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// The webhook with routing in mode ExclusiveResources, serving a pair mounted the way the
    /// kubelet mounts a Secret.
    async fn start() -> Self {
        let ca = CertificateAuthority::generate("webhook-test-ca", Duration::from_secs(3600)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        kubelet_mount(dir.path(), "..v0", &pair(&ca));
        let certificate = ReloadingCertificate::load(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap();
        let options =
            WatchOptions::default().debounce(Duration::from_millis(50)).poll_interval(Duration::from_secs(3600));
        let watcher = certificate.watch(options).unwrap();
        let tls = ServerConfigBuilder::new(Arc::new(certificate.clone())).build().unwrap();
        // The feeds can go: the caches keep what was fed.
        let (webhook, _) = webhook_with(Some(scheduler(PodRoutingMode::ExclusiveResources, None)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = Shutdown::manual();
        let task = tokio::spawn(serve(listener, tls, webhook.router(), stopped.signaled()));
        Self { addr, ca, dir, _certificate: certificate, _watcher: watcher, stop, task }
    }

    async fn stop(mut self) {
        self.stop.fire();
        bounded("server shutdown", &mut self.task).await.unwrap().unwrap();
    }
}

fn pair(ca: &CertificateAuthority) -> PemPair {
    ca.issue_serving(&["localhost".to_owned()], Duration::from_secs(3600)).unwrap()
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A kept-alive connection that sends AdmissionReviews.
enum Connection {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Connection {
    async fn open(addr: SocketAddr, config: Arc<ClientConfig>) -> Result<Self, Error> {
        let tls = connect(addr, config).await?;
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        if h2 {
            let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(connection);
            Ok(Self::H2(sender))
        } else {
            let (sender, connection) = hyper::client::conn::http1::handshake(io).await?;
            tokio::spawn(connection);
            Ok(Self::H1(sender))
        }
    }

    /// POSTs `body` to the pod webhook; the answer's `response`.
    async fn admit(&mut self, body: &Bytes) -> Result<Value, Error> {
        let request = |uri: &str| {
            http::Request::post(uri)
                .header("content-type", "application/json")
                .header("host", "localhost")
                .body(Full::new(body.clone()))
        };
        let response = match self {
            Self::H1(sender) => {
                sender.ready().await?;
                sender.send_request(request(&format!("{MUTATE_PODS_PATH}?timeout=10s"))?).await?
            }
            Self::H2(sender) => {
                sender.ready().await?;
                sender.send_request(request(&format!("https://localhost{MUTATE_PODS_PATH}?timeout=10s"))?).await?
            }
        };
        if response.status() != http::StatusCode::OK {
            return Err(format!("HTTP {}", response.status()).into());
        }
        let review: Value = serde_json::from_slice(&response.into_body().collect().await?.to_bytes())?;
        Ok(review["response"].clone())
    }
}

fn pod_review() -> Bytes {
    Bytes::from(serde_json::to_vec(&fixture("pod-create-guaranteed-integral.json")).unwrap())
}

/// The reviewed pod with the answer's base64 JSONPatch applied, as kube-apiserver applies it.
fn patched_pod(response: &Value) -> Value {
    use base64::Engine as _;
    let encoded = response["patch"].as_str().expect("a patch");
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("a JSONPatch");
    let mut pod = fixture("pod-create-guaranteed-integral.json")["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).expect("the patch applies to the reviewed pod");
    pod
}

fn routed(response: &Value) -> bool {
    response["allowed"] == true && response["patchType"] == "JSONPatch"
}

#[tokio::test]
async fn admissions_over_kept_alive_http1_and_http2_connections() {
    let server = Server::start().await;
    let body = pod_review();
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let mut connection =
            bounded("connect", Connection::open(server.addr, client(server.ca.cert_pem(), None, &[alpn])))
                .await
                .unwrap();
        assert_eq!(matches!(connection, Connection::H2(_)), alpn == b"h2");
        for _ in 0..20 {
            let response = bounded("admission", connection.admit(&body)).await.unwrap();
            assert_eq!(response["uid"], "5b3f40f1-f24f-4588-9eb4-e08823b729ae");
            assert!(routed(&response), "{response}");
            let pod = patched_pod(&response);
            assert_eq!(pod["spec"]["schedulerName"], "topo-aware-scheduler", "{pod}");
            let why = &pod["metadata"]["annotations"][numaresources_webhook::ROUTING_ANNOTATION];
            assert!(why.as_str().is_some_and(|why| !why.is_empty()), "{pod}");
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn certificate_rotation_under_load_fails_no_admission() {
    let server = Server::start().await;
    let pairs: Vec<PemPair> = (0..3).map(|_| pair(&server.ca)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..4 {
        let (stop, addr) = (stop.clone(), server.addr);
        // Half the clients reconnect for every admission (each handshake sees the current pair),
        // half keep one connection alive across the rotations; HTTP/1.1 and HTTP/2 alike.
        let config = client(server.ca.cert_pem(), None, &[if i % 2 == 0 { b"http/1.1" } else { b"h2" }]);
        let reconnect = i < 2;
        clients.push(tokio::spawn(async move {
            let body = pod_review();
            let (mut ok, mut failed) = (0u32, Vec::new());
            let mut kept: Option<Connection> = None;
            while !stop.load(Ordering::Relaxed) {
                let result = async {
                    if reconnect || kept.is_none() {
                        kept = Some(Connection::open(addr, config.clone()).await?);
                    }
                    let connection = kept.as_mut().ok_or("no connection")?;
                    connection.admit(&body).await
                }
                .await;
                match result {
                    Ok(response) if routed(&response) => ok += 1,
                    Ok(response) => failed.push(format!("not routed: {response}")),
                    Err(error) => failed.push(error.to_string()),
                }
            }
            (ok, failed)
        }));
    }
    let mut previous = "..v0".to_owned();
    for (i, next) in pairs.iter().enumerate() {
        let version = format!("..v{}", i + 1);
        kubelet_swap(server.dir.path(), &previous, &version, next);
        previous = version;
        let expected = CertificateDer::from_pem_slice(next.cert_pem.as_bytes()).unwrap();
        bounded("the rotated pair to be served", async {
            loop {
                let tls = connect(server.addr, client(server.ca.cert_pem(), None, &[b"http/1.1"])).await.unwrap();
                if tls.get_ref().1.peer_certificates().and_then(|chain| chain.first()) == Some(&expected) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for client in clients {
        let (ok, failed) = bounded("a load client to finish", client).await.unwrap();
        assert!(failed.is_empty(), "admissions failed during rotation: {failed:?}");
        assert!(ok > 0, "every client made admissions");
        total += ok;
    }
    assert!(total > 0);
    server.stop().await;
}
