//! The peer certificate against the in-memory API (whose RBAC is the controllers' manifest):
//! created in every mode, usable for mutual TLS, renewed, rotated with an overlap, kept across a
//! restart, and not created while our API server is not deployed.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use numaresources_runtime::tls::CaBundle;
use numaresources_runtime::tls::rotation::{CaState, issued_by};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::json;

use super::*;
use crate::certificates::tests::{DAY, HOUR, NS, policy};
use crate::context::Settings;
use crate::fake::FakeApi;
use crate::mode::CertificateMode;

const PAIR: &str = "/api/v1/namespaces/numaresources/secrets/numaresources-apiserver-peer";
const CA: &str = "/api/v1/namespaces/numaresources/secrets/numaresources-apiserver-peer-ca";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/numaresources/deployments/numaresources-apiserver";

struct Harness {
    fake: FakeApi,
    client: kube::Client,
    ctx: Arc<Context>,
}

impl Harness {
    fn new(mode: CertificateMode, deployment: ApiserverDeployment) -> Self {
        let (fake, client) = crate::fake::start();
        let ctx = context(&client, mode, deployment);
        Self { fake, client, ctx }
    }

    /// The controllers restarted: a new context over the same API.
    fn restarted(&self) -> Arc<Context> {
        context(&self.client, self.ctx.settings.certificate_mode, self.ctx.settings.apiserver_deployment)
    }

    /// One step of the lifecycle's loop at `now`; returns the delay it asked for.
    async fn step(&self, now: SystemTime) -> Duration {
        step(&self.ctx, &policy(), now).await
    }

    fn data(&self, path: &str) -> BTreeMap<String, String> {
        string_data(&self.fake.typed::<Secret>(path))
    }

    fn ca(&self) -> CaState {
        CaState::from_secret_data(&self.data(CA)).unwrap()
    }
}

fn context(client: &kube::Client, mode: CertificateMode, deployment: ApiserverDeployment) -> Arc<Context> {
    let mut settings = Settings::kubernetes(NS, "img");
    settings.certificate_mode = mode;
    settings.apiserver_deployment = deployment;
    Arc::new(Context::new(client.clone(), settings, None))
}

/// What a replica does with the mounted Secret: presents `tls.crt` as a client to a peer that
/// trusts `ca.crt`, and as a server to a peer that trusts `ca.crt` and expects the peer name.
fn assert_mutual_tls(data: &BTreeMap<String, String>) {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(data["tls.crt"].as_bytes()).map(Result::unwrap).collect();
    let trusted = CaBundle::from_pem(data["ca.crt"].as_bytes()).unwrap();
    assert!(trusted.verifies_client(&chain), "a peer accepts it as a client (clientAuth, our CA)");
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(data["ca.crt"].as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
    let name = ServerName::try_from(peer_name(NS)).unwrap();
    verifier
        .verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now())
        .expect("a peer accepts it as a server (serverAuth, the --peer-server-name)");
    assert_eq!(peer_name(NS), "numaresources-apiserver-peer.numaresources.svc");
}

#[tokio::test]
async fn every_certificate_mode_gets_a_mutual_tls_peer_certificate_when_the_install_ships_the_server() {
    for mode in
        [CertificateMode::SelfManaged, CertificateMode::Olm, CertificateMode::CertManager, CertificateMode::ServiceCa]
    {
        let h = Harness::new(mode, ApiserverDeployment::Installed);
        h.step(SystemTime::now()).await;

        let pair: Secret = h.fake.typed(PAIR);
        assert_eq!(pair.type_.as_deref(), Some("kubernetes.io/tls"), "{mode}");
        assert!(pair.metadata.owner_references.is_none(), "labelled like the other Secrets, not owned");
        let labels = pair.metadata.labels.unwrap();
        assert_eq!(labels["app.kubernetes.io/managed-by"], "numaresources-controllers");
        assert_eq!(labels["app.kubernetes.io/part-of"], "numaresources");
        assert_eq!(labels["app.kubernetes.io/component"], "apiserver");
        let data = h.data(PAIR);
        assert_eq!(data.keys().collect::<Vec<_>>(), ["ca.crt", "tls.crt", "tls.key"], "no CA key in what pods mount");
        let ca = h.ca();
        assert_eq!(data["ca.crt"], ca.bundle());
        assert!(issued_by(&data["tls.crt"], &ca.cert_pem));
        assert_mutual_tls(&data);

        let ca_secret: Secret = h.fake.typed(CA);
        assert_eq!(ca_secret.type_.as_deref(), Some("Opaque"));
        assert!(h.data(CA).contains_key("ca.key"));
        let serving_paths =
            h.fake.paths().into_iter().filter(|p| p.contains("-tls") || p.ends_with("/numaresources-ca"));
        assert_eq!(serving_paths.count(), 0, "{mode}: the peer loop writes only its own Secrets");
    }
}

#[tokio::test]
async fn operator_mode_creates_it_only_while_the_api_server_is_deployed() {
    let h = Harness::new(CertificateMode::SelfManaged, ApiserverDeployment::Operator);
    let now = SystemTime::now();
    // No Deployment: the cluster serves the NRT API itself (or the operator has not got there).
    assert_eq!(h.step(now).await, DEPLOYMENT_POLL);
    assert!(h.fake.get(PAIR).is_none() && h.fake.get(CA).is_none(), "nothing for a server that does not run");

    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "numaresources-apiserver", "namespace": NS}});
    h.fake.insert(DEPLOYMENT, deployment);
    let delay = h.step(now).await;
    assert_eq!(delay, super::super::RESYNC, "nothing due before the resync");
    assert_mutual_tls(&h.data(PAIR));
}

#[tokio::test]
async fn the_peer_certificates_expiry_is_exported_while_the_server_is_deployed() {
    use crate::certificates::tests::{expiry_of, exported_expiries};
    let h = Harness::new(CertificateMode::SelfManaged, ApiserverDeployment::Operator);
    let now = SystemTime::now();
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "numaresources-apiserver", "namespace": NS}});
    h.fake.insert(DEPLOYMENT, deployment);
    h.step(now).await;
    let ca = CaState::from_secret_data(&h.data(CA)).unwrap();
    let exported = exported_expiries(&h.ctx);
    assert_eq!(exported["numaresources-apiserver-peer"], expiry_of(&h.data(PAIR)["tls.crt"]));
    assert_eq!(exported["numaresources-apiserver-peer-ca"], expiry_of(&ca.cert_pem));

    // The cluster's own NRT API now: the server and its peer certificate are gone, and so is
    // the series, so a certificate nobody renews any more does not alert.
    h.fake.remove(DEPLOYMENT);
    assert_eq!(h.step(now).await, DEPLOYMENT_POLL);
    assert!(exported_expiries(&h.ctx).is_empty());
}

#[tokio::test]
async fn a_restart_keeps_both_secrets_and_writes_nothing() {
    let h = Harness::new(CertificateMode::CertManager, ApiserverDeployment::Installed);
    let now = SystemTime::now();
    h.step(now).await;
    let before = h.fake.versions();
    let (pair, ca) = (h.data(PAIR), h.data(CA));

    let pass = pass(&h.restarted(), &policy(), now + HOUR).await.unwrap();
    assert_eq!(pass.writes, 0);
    assert_eq!(h.fake.versions(), before);
    assert_eq!((h.data(PAIR), h.data(CA)), (pair, ca));
}

#[tokio::test]
async fn the_pair_is_renewed_by_the_same_ca_before_it_expires() {
    let h = Harness::new(CertificateMode::ServiceCa, ApiserverDeployment::Installed);
    let now = SystemTime::now();
    let first = pass(&h.ctx, &policy(), now).await.unwrap();
    // Leaves live 7 days and are renewed with 2 left.
    let due = first.next.unwrap();
    let in_ = due.duration_since(now).unwrap();
    assert!(in_ > 5 * DAY - HOUR && in_ <= 5 * DAY, "next decision in {in_:?}");
    let old = h.data(PAIR);
    let ca = h.ca();

    assert_eq!(pass(&h.ctx, &policy(), due - HOUR).await.unwrap().writes, 0, "not yet due");
    let renewed = pass(&h.ctx, &policy(), due).await.unwrap();
    assert_eq!(renewed.writes, 1, "only the pair");
    let new = h.data(PAIR);
    assert_ne!(new["tls.crt"], old["tls.crt"]);
    assert_ne!(new["tls.key"], old["tls.key"]);
    assert_eq!(h.ca(), ca, "the same CA");
    assert!(issued_by(&new["tls.crt"], &ca.cert_pem));
}

#[tokio::test]
async fn a_ca_near_its_end_is_rotated_with_an_overlap() {
    let h = Harness::new(CertificateMode::SelfManaged, ApiserverDeployment::Installed);
    let start = SystemTime::now();
    let run = |at: SystemTime| {
        let ctx = h.ctx.clone();
        async move { pass(&ctx, &policy(), at).await.unwrap() }
    };
    // CA: 30 days, rotated with 10 left. Walk 4 days at a time (the pair renews on its own).
    for day in [0, 4, 8, 12, 16] {
        run(start + day * DAY).await;
    }
    let old_ca = h.ca();
    let old_pair = h.data(PAIR);
    let rotation = start + 20 * DAY + HOUR;
    run(rotation).await;
    let ca = h.ca();
    assert_ne!(ca.cert_pem, old_ca.cert_pem);
    assert_eq!(ca.previous_cert_pem.as_deref(), Some(old_ca.cert_pem.as_str()));
    let step1 = h.data(PAIR);
    assert_eq!(step1["tls.crt"], old_pair["tls.crt"], "the pair waits until the replicas trust both CAs");
    assert_eq!(step1["ca.crt"].matches("BEGIN CERTIFICATE").count(), 2);

    run(rotation + HOUR).await;
    let step2 = h.data(PAIR);
    assert!(issued_by(&step2["tls.crt"], &ca.cert_pem), "the pair moved to the new CA");
    assert_eq!(step2["ca.crt"].matches("BEGIN CERTIFICATE").count(), 2, "a replica may still present the old pair");

    run(rotation + 2 * HOUR).await;
    let step3 = h.data(PAIR);
    assert_eq!(step3["ca.crt"], format!("{}\n", ca.cert_pem.trim_end()), "the old CA is retired");
    assert_eq!(step3["tls.crt"], step2["tls.crt"]);
}

#[tokio::test]
async fn a_pair_secret_of_another_type_is_left_alone() {
    let h = Harness::new(CertificateMode::SelfManaged, ApiserverDeployment::Installed);
    h.fake.insert(
        PAIR,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "numaresources-apiserver-peer", "namespace": NS}, "data": {"x": "eA=="}}),
    );
    assert!(pass(&h.ctx, &policy(), SystemTime::now()).await.is_err());
    assert_eq!(h.data(PAIR).keys().collect::<Vec<_>>(), ["x"]);
}
