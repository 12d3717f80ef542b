//! The lifecycle walked over real TLS: two rustls servers (`numaresources_runtime::serve` on
//! 127.0.0.1) present the serving certificates from the fake's Secrets, and rustls clients trust
//! exactly the `caBundle` injected into the APIService and the webhook configurations. Simulated
//! time runs through leaf renewals and two CA rotations; consumers lag one step behind (a server
//! may still present the previous leaf, a client may still hold the previous bundle). No
//! handshake may fail at any step.

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use numaresources_runtime::shutdown::{Shutdown, Trigger};
use numaresources_runtime::tls::{PemPair, ServerConfigBuilder, ServingCertificate};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::time_provider::TimeProvider;
use tokio_rustls::TlsConnector;

use super::tests::{APISERVER_TLS, DAY, HOUR, Harness, NS, WEBHOOK_TLS};
use super::*;

/// The certificate a server presents, swapped by the test as the kubelet would swap the file.
#[derive(Debug)]
struct Presented(RwLock<Arc<CertifiedKey>>);

impl Presented {
    fn new(pair: &PemPair) -> Arc<Self> {
        Arc::new(Self(RwLock::new(certified(pair))))
    }

    fn present(&self, pair: &PemPair) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = certified(pair);
    }
}

fn certified(pair: &PemPair) -> Arc<CertifiedKey> {
    ServingCertificate::from_pem(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes()).unwrap().certified_key().clone()
}

impl ResolvesServerCert for Presented {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(PoisonError::into_inner).clone())
    }
}

/// The client's clock: the simulated time, so certificates are judged as they would be then.
#[derive(Debug)]
struct SimulatedClock(UnixTime);

impl TimeProvider for SimulatedClock {
    fn current_time(&self) -> Option<UnixTime> {
        Some(self.0)
    }
}

/// A TLS handshake with `addr` as kube-apiserver makes it: roots = `bundle`, server name =
/// `<service>.<namespace>.svc`, clock = `now`.
async fn handshake(addr: SocketAddr, bundle: &str, service: &str, now: SystemTime) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let clock = SimulatedClock(UnixTime::since_unix_epoch(now.duration_since(UNIX_EPOCH).unwrap()));
    let config =
        rustls::ClientConfig::builder_with_details(Arc::new(rustls::crypto::ring::default_provider()), Arc::new(clock))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from(format!("{service}.{NS}.svc")).unwrap();
    TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map(drop).map_err(|e| e.to_string())
}

/// A server on 127.0.0.1 presenting what `presented` holds at each handshake.
async fn server(presented: Arc<Presented>) -> (SocketAddr, Trigger) {
    let tls = ServerConfigBuilder::new(presented).build().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = Shutdown::manual();
    tokio::spawn(numaresources_runtime::serve(listener, tls, axum::Router::new(), stopped.signaled()));
    (addr, stop)
}

/// What the consumers hold after a pass.
#[derive(Debug, Clone)]
struct Step {
    /// (Service, the leaf its Secret holds, the caBundle its clients trust).
    services: Vec<(&'static str, PemPair, String)>,
    ca: String,
}

fn observe(h: &Harness) -> Step {
    let bundles = h.bundles();
    let (api_service, webhooks) = bundles.split_first().unwrap();
    assert!(webhooks.iter().all(|b| b == &webhooks[0]), "the webhooks disagree: {webhooks:#?}");
    let leaf = |path: &str| {
        let data = h.data(path);
        PemPair { cert_pem: data["tls.crt"].clone(), key_pem: data["tls.key"].clone() }
    };
    Step {
        services: vec![
            ("numaresources-apiserver", leaf(APISERVER_TLS), api_service.clone()),
            ("numaresources-webhook", leaf(WEBHOOK_TLS), webhooks[0].clone()),
        ],
        ca: h.ca().cert_pem,
    }
}

#[tokio::test]
async fn no_handshake_fails_through_renewals_and_rotations_with_lagging_consumers() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let t0 = SystemTime::now();
    h.pass(t0).await;
    let first = observe(&h);
    let mut servers = Vec::new();
    for (_, leaf, _) in &first.services {
        let presented = Presented::new(leaf);
        let (addr, stop) = server(presented.clone()).await;
        servers.push((presented, addr, stop));
    }

    let mut previous: Option<Step> = None;
    let (mut now, mut rotations, mut overlapping_steps, mut handshakes) = (t0, 0, 0, 0);
    while now < t0 + 45 * DAY {
        let pass = h.pass(now).await;
        let step = observe(&h);
        let day = now.duration_since(t0).unwrap().as_secs_f64() / DAY.as_secs_f64();
        if previous.as_ref().is_some_and(|p| p.ca != step.ca) {
            rotations += 1;
            // Proof that the clients verify: trusting the new CA alone, the old leaf fails.
            let (presented, addr, _) = &servers[0];
            let (service, leaf, _) = &step.services[0];
            presented.present(leaf);
            assert!(handshake(*addr, &step.ca, service, now).await.is_err(), "day {day:.2}: the overlap is needed");
        }
        if step.services[0].2.matches("BEGIN CERTIFICATE").count() == 2 {
            overlapping_steps += 1;
        }
        for (index, (service, leaf, bundle)) in step.services.iter().enumerate() {
            let lagging = previous.as_ref().map(|p| &p.services[index]);
            let mut leaves = vec![leaf];
            let mut bundles = vec![bundle];
            if let Some((_, old_leaf, old_bundle)) = lagging {
                leaves.extend((old_leaf != leaf).then_some(old_leaf));
                bundles.extend((old_bundle != bundle).then_some(old_bundle));
            }
            let (presented, addr, _) = &servers[index];
            for served in &leaves {
                presented.present(served);
                for trusted in &bundles {
                    handshakes += 1;
                    if let Err(error) = handshake(*addr, trusted, service, now).await {
                        panic!("day {day:.2}: {service}: a client trusting the injected caBundle failed: {error}");
                    }
                }
            }
        }
        previous = Some(step);
        // Straight to the next decision (so every change is a step), but never more than 6 hours.
        now = pass.next.map_or(now + 6 * HOUR, |next| next.min(now + 6 * HOUR));
    }
    assert!(rotations >= 2, "the CA rotated {rotations} times in 45 days");
    assert!(overlapping_steps >= 4, "{overlapping_steps} steps with two CAs trusted");
    assert!(handshakes > 200, "{handshakes} handshakes");
    for (_, _, stop) in servers {
        stop.fire();
    }
}

/// What the previous operator left: a CA (its key thrown away) in `ca.crt` next to the API
/// server's leaf, and no CA Secret. The first pass must keep that CA trusted and the leaf served
/// until the new bundle has reached every client: a server still presenting the old leaf (the
/// kubelet has not synced yet) is trusted by a client holding the new bundle, and the reverse.
#[tokio::test]
async fn an_upgrade_from_the_previous_operator_keeps_its_leaf_trusted_until_the_new_bundle_propagated() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let t0 = SystemTime::now();
    let names = numaresources_runtime::tls::rotation::service_names("numaresources-apiserver", NS);
    let legacy =
        numaresources_runtime::tls::CertificateAuthority::generate_at("numaresources-legacy", t0 - DAY, 365 * DAY)
            .unwrap();
    // The old leaf covered only the first name: it is still kept until the overlap ends.
    let old_leaf = legacy.issue_serving_at(&names[..1], t0 - DAY, 365 * DAY).unwrap();
    let encode = |text: &str| serde_json::to_value(ByteString(text.as_bytes().to_vec())).unwrap();
    h.fake.insert(
        APISERVER_TLS,
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "numaresources-apiserver-tls", "namespace": NS},
            "data": {"tls.crt": encode(&old_leaf.cert_pem), "tls.key": encode(&old_leaf.key_pem),
                     "ca.crt": encode(legacy.cert_pem())}}),
    );
    let presented = Presented::new(&old_leaf);
    let (addr, stop) = server(presented.clone()).await;
    let old_bundle = legacy.cert_pem().to_owned();

    h.pass(t0).await;
    let step = observe(&h);
    let (service, leaf, bundle) = step.services[0].clone();
    assert_eq!(leaf, old_leaf, "the old leaf is kept for the overlap");
    assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2, "the new CA and the old one");
    for trusted in [&old_bundle, &bundle] {
        handshake(addr, trusted, service, t0).await.unwrap();
    }

    // After the overlap the leaf moves to the new CA; clients with the new bundle trust it, and
    // the old leaf a server may still present.
    h.pass(t0 + HOUR).await;
    let moved = observe(&h).services[0].1.clone();
    assert_ne!(moved, old_leaf);
    for served in [&old_leaf, &moved] {
        presented.present(served);
        handshake(addr, &bundle, service, t0 + HOUR).await.unwrap();
    }
    // Once the new leaves have propagated the legacy CA goes.
    h.pass(t0 + 2 * HOUR).await;
    assert_eq!(h.bundle().matches("BEGIN CERTIFICATE").count(), 1);
    presented.present(&moved);
    handshake(addr, &h.bundle(), service, t0 + 2 * HOUR).await.unwrap();
    stop.fire();
}
