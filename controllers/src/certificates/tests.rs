//! The certificate lifecycle against the in-memory API (`crate::fake`): the first pass, a no-op
//! second pass, leaf renewal, a whole CA rotation with its overlap, and the modes in which
//! nothing of ours writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::Method;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use numaresources_runtime::tls::ServingCertificate;
use numaresources_runtime::tls::rotation::{CaState, RotationPolicy, issued_by};
use serde::Deserialize;
use serde_json::{Value, json};

use super::*;
use crate::context::Settings;
use crate::fake::FakeApi;

pub(super) const NS: &str = "numaresources";
pub(super) const CA_PATH: &str = "/api/v1/namespaces/numaresources/secrets/numaresources-ca";
pub(super) const APISERVER_TLS: &str = "/api/v1/namespaces/numaresources/secrets/numaresources-apiserver-tls";
pub(super) const WEBHOOK_TLS: &str = "/api/v1/namespaces/numaresources/secrets/numaresources-webhook-tls";
pub(super) const APISERVICE_PATH: &str = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha2.topology.node.k8s.io";
pub(super) const MUTATING: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/numaresources-webhook";
pub(super) const POD_ROUTING: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/numaresources-pod-routing";
pub(super) const VALIDATING: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/numaresources-webhook";

pub(super) const HOUR: Duration = Duration::from_secs(3600);
pub(super) const DAY: Duration = Duration::from_secs(24 * 3600);

/// Short lifetimes so months fit in a test: CA 30 days (rotated with 10 left), leaves 7 days
/// (renewed with 2 left), one hour of propagation.
pub(super) fn policy() -> RotationPolicy {
    RotationPolicy {
        ca_validity: 30 * DAY,
        ca_renew_before: 10 * DAY,
        leaf_validity: 7 * DAY,
        leaf_renew_before: 2 * DAY,
        propagation: HOUR,
    }
}

pub(super) struct Harness {
    pub fake: FakeApi,
    pub ctx: Arc<Context>,
}

impl Harness {
    /// The fake with the APIService and both webhook configurations as the install ships them,
    /// and the pod routing one as the scheduler controller applies it outside self-managed mode
    /// (none with a caBundle).
    pub fn new(mode: CertificateMode) -> Self {
        let (fake, client) = crate::fake::start();
        let api_service = crate::render::apiserver::objects(NS, "img").unwrap().api_service.unwrap();
        fake.insert(APISERVICE_PATH, serde_json::to_value(api_service).unwrap());
        let text = include_str!("../../../manifests/webhook/webhook-configurations.yaml");
        for document in serde_norway::Deserializer::from_str(text) {
            let value = Value::deserialize(document).unwrap();
            let path = match value["kind"].as_str() {
                Some("MutatingWebhookConfiguration") => MUTATING,
                Some("ValidatingWebhookConfiguration") => VALIDATING,
                _ => continue,
            };
            fake.insert(path, value);
        }
        let pod_routing = crate::render::pod_routing::configuration(NS, None).unwrap();
        fake.insert(POD_ROUTING, serde_json::to_value(pod_routing).unwrap());
        let mut settings = Settings::kubernetes(NS, "img");
        settings.certificate_mode = mode;
        Self { fake, ctx: Arc::new(Context::new(client, settings, None)) }
    }

    /// The same, publishing Events into the fake.
    pub fn with_events(mode: CertificateMode) -> Self {
        let h = Self::new(mode);
        Self { ctx: crate::fake::recording(&h.ctx), ..h }
    }

    pub async fn pass(&self, now: SystemTime) -> Pass {
        let pass = tokio::time::timeout(Duration::from_secs(10), reconcile(&self.ctx, &policy(), now))
            .await
            .expect("the pass timed out: likely deadlocked")
            .unwrap();
        assert!(pass.failed_consumers.is_empty(), "{:?}", pass.failed_consumers);
        pass
    }

    pub fn data(&self, path: &str) -> BTreeMap<String, String> {
        string_data(&self.fake.typed::<Secret>(path))
    }

    pub fn ca(&self) -> CaState {
        CaState::from_secret_data(&self.data(CA_PATH)).unwrap()
    }

    /// Every `caBundle` the consumers hold: the APIService's, then each webhook's.
    pub fn bundles(&self) -> Vec<String> {
        let text = |b: Option<ByteString>| String::from_utf8(b.map(|b| b.0).unwrap_or_default()).unwrap();
        let api_service: APIService = self.fake.typed(APISERVICE_PATH);
        let validating: ValidatingWebhookConfiguration = self.fake.typed(VALIDATING);
        let mut bundles = vec![text(api_service.spec.unwrap().ca_bundle)];
        for path in [MUTATING, POD_ROUTING] {
            let mutating: MutatingWebhookConfiguration = self.fake.typed(path);
            bundles.extend(mutating.webhooks.unwrap().into_iter().map(|w| text(w.client_config.ca_bundle)));
        }
        bundles.extend(validating.webhooks.unwrap().into_iter().map(|w| text(w.client_config.ca_bundle)));
        bundles
    }

    /// The one bundle every consumer holds (fails if they disagree).
    pub fn bundle(&self) -> String {
        let bundles = self.bundles();
        assert!(bundles.iter().all(|b| *b == bundles[0]), "consumers disagree: {bundles:#?}");
        bundles[0].clone()
    }

    fn writes(&self) -> Vec<String> {
        let calls = self.fake.take_calls();
        calls.into_iter().filter(|c| c.method != Method::GET).map(|c| format!("{} {}", c.method, c.path)).collect()
    }
}

fn certificates_in(bundle: &str) -> usize {
    bundle.matches("BEGIN CERTIFICATE").count()
}

/// The expiry the controllers' registry exports for each Secret (Unix seconds).
pub(super) fn exported_expiries(ctx: &Context) -> BTreeMap<String, u64> {
    let text = ctx.metrics.encode().unwrap();
    let prefix = "numaresources_controllers_certificate_expiry_timestamp_seconds{secret=\"";
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .map(|rest| {
            let (secret, value) = rest.split_once("\"} ").unwrap();
            (secret.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// A certificate's notAfter in Unix seconds.
pub(super) fn expiry_of(cert_pem: &str) -> u64 {
    numaresources_runtime::tls::rotation::not_after(cert_pem)
        .unwrap()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn the_expiry_of_every_kept_certificate_is_exported_and_follows_a_renewal() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let now = SystemTime::now();
    assert!(exported_expiries(&h.ctx).is_empty(), "nothing before a pass");
    h.pass(now).await;
    let expected = |h: &Harness| {
        BTreeMap::from([
            ("numaresources-apiserver-tls".to_owned(), expiry_of(&h.data(APISERVER_TLS)["tls.crt"])),
            ("numaresources-ca".to_owned(), expiry_of(&h.ca().cert_pem)),
            ("numaresources-webhook-tls".to_owned(), expiry_of(&h.data(WEBHOOK_TLS)["tls.crt"])),
        ])
    };
    assert_eq!(exported_expiries(&h.ctx), expected(&h));
    let first = exported_expiries(&h.ctx)["numaresources-webhook-tls"];
    // Past the leaves' renewal point: the new certificates' expiry is exported.
    h.pass(now + 6 * DAY).await;
    assert_eq!(exported_expiries(&h.ctx), expected(&h));
    assert!(exported_expiries(&h.ctx)["numaresources-webhook-tls"] > first, "renewed");
}

#[tokio::test]
async fn the_first_pass_creates_the_ca_both_serving_secrets_and_every_ca_bundle() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let now = SystemTime::now();
    let pass = h.pass(now).await;

    let ca = h.ca();
    assert_eq!(ca.previous_cert_pem, None);
    assert_eq!(pass.bundle, ca.bundle());
    assert_eq!(h.bundle(), ca.bundle(), "the APIService and all three webhooks trust exactly our CA");
    assert_eq!(h.bundles().len(), 4);
    let api_service: APIService = h.fake.typed(APISERVICE_PATH);
    assert_eq!(api_service.spec.unwrap().group_priority_minimum, 1000, "only caBundle was patched");

    for (path, service) in [(APISERVER_TLS, "numaresources-apiserver"), (WEBHOOK_TLS, "numaresources-webhook")] {
        let secret: Secret = h.fake.typed(path);
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
        assert!(secret.metadata.owner_references.is_none(), "nothing owns it: {path}");
        let labels = secret.metadata.labels.unwrap();
        assert_eq!(labels["app.kubernetes.io/managed-by"], "numaresources-controllers");
        assert_eq!(labels["app.kubernetes.io/part-of"], "numaresources");
        let data = h.data(path);
        assert_eq!(data.keys().collect::<Vec<_>>(), ["ca.crt", "tls.crt", "tls.key"]);
        assert_eq!(data["ca.crt"], ca.bundle());
        assert!(issued_by(&data["tls.crt"], &ca.cert_pem), "{path} comes from our CA");
        let served = ServingCertificate::from_pem(data["tls.crt"].as_bytes(), data["tls.key"].as_bytes()).unwrap();
        assert_eq!(
            served.names(),
            [
                format!("{service}.{NS}.svc"),
                format!("{service}.{NS}.svc.cluster.local"),
                service.to_owned(),
                format!("{service}.{NS}")
            ]
        );
    }
    let ca_secret: Secret = h.fake.typed(CA_PATH);
    assert_eq!(ca_secret.metadata.labels.unwrap()["app.kubernetes.io/managed-by"], "numaresources-controllers");
    assert!(h.data(CA_PATH).contains_key("ca.key"), "the CA key is kept, so leaves can be reissued by it");
    // Nothing due before the leaves' renewal (7 days of life, renewed with 2 left).
    let next = pass.next.unwrap().duration_since(now).unwrap();
    assert!(next > 4 * DAY && next <= 5 * DAY, "next decision in {next:?}");
}

#[tokio::test]
async fn a_second_pass_at_the_same_time_writes_nothing() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let now = SystemTime::now();
    h.pass(now).await;
    let before = h.fake.versions();
    h.fake.take_calls();
    let pass = h.pass(now).await;
    assert_eq!(pass.writes, 0);
    assert_eq!(h.writes(), Vec::<String>::new());
    assert_eq!(h.fake.versions(), before);
}

#[tokio::test]
async fn a_leaf_near_its_expiry_is_renewed_by_the_same_ca() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let t0 = SystemTime::now();
    h.pass(t0).await;
    let (ca, first) = (h.ca(), h.data(APISERVER_TLS));
    h.fake.take_calls();

    // Four days in: nothing to do. Five days and an hour in: two days are left, renew.
    h.pass(t0 + 4 * DAY).await;
    assert_eq!(h.writes(), Vec::<String>::new());
    h.pass(t0 + 5 * DAY + HOUR).await;
    let renewed = h.data(APISERVER_TLS);
    assert_ne!(renewed["tls.crt"], first["tls.crt"]);
    assert_ne!(renewed["tls.key"], first["tls.key"], "a new key with every certificate");
    assert!(issued_by(&renewed["tls.crt"], &ca.cert_pem));
    assert_eq!(h.ca(), ca, "the CA stays");
    assert_eq!(h.bundle(), ca.bundle());
    let writes = h.writes();
    assert_eq!(writes.len(), 2, "the two leaf Secrets only: {writes:#?}");
    assert!(writes.iter().all(|w| w.contains("-tls")), "{writes:#?}");
}

/// A harness whose CA has just rotated.
async fn rotated() -> (Harness, SystemTime) {
    rotate(Harness::new(CertificateMode::SelfManaged)).await
}

/// Rotates `h`'s CA: daily passes for 20 days, then one at `t1`, returned.
async fn rotate(h: Harness) -> (Harness, SystemTime) {
    let t0 = SystemTime::now();
    walk(&h, (0..20).map(|day| t0 + day * DAY)).await;
    let t1 = t0 + 20 * DAY + HOUR;
    h.pass(t1).await;
    (h, t1)
}

/// A pass at each of `times`.
async fn walk(h: &Harness, times: impl IntoIterator<Item = SystemTime>) {
    for now in times {
        h.pass(now).await;
    }
}

#[tokio::test]
async fn a_ca_rotation_keeps_both_cas_trusted_until_the_leaves_moved_then_drops_the_old_one() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let t0 = SystemTime::now();
    // Daily passes renew the leaves on time until the CA is due (30 days, rotated with 10 left).
    walk(&h, (0..20).map(|day| t0 + day * DAY)).await;
    let old = h.ca();
    let old_leaf = h.data(WEBHOOK_TLS)["tls.crt"].clone();
    assert!(issued_by(&old_leaf, &old.cert_pem));

    // The rotation: the new CA joins the bundle everywhere, the leaves stay as they are.
    let t1 = t0 + 20 * DAY + HOUR;
    let pass = h.pass(t1).await;
    let rotated = h.ca();
    assert_ne!(rotated.cert_pem, old.cert_pem);
    assert_eq!(rotated.previous_cert_pem.as_deref(), Some(old.cert_pem.as_str()));
    assert_eq!(certificates_in(&h.bundle()), 2);
    assert_eq!(h.data(WEBHOOK_TLS)["tls.crt"], old_leaf, "leaves wait for the bundle to propagate");
    assert_eq!(h.data(WEBHOOK_TLS)["ca.crt"], rotated.bundle());
    assert_eq!(pass.next, Some(t1 + HOUR), "the next decision is the end of the overlap");

    // Half an overlap later: nothing moves.
    h.fake.take_calls();
    h.pass(t1 + HOUR / 2).await;
    assert_eq!(h.writes(), Vec::<String>::new());

    // After the overlap the leaves come from the new CA; both CAs are still trusted.
    h.pass(t1 + HOUR).await;
    for path in [APISERVER_TLS, WEBHOOK_TLS] {
        assert!(issued_by(&h.data(path)["tls.crt"], &rotated.cert_pem), "{path}");
    }
    assert_eq!(certificates_in(&h.bundle()), 2, "servers may still present the old leaves");
    h.pass(t1 + HOUR + HOUR / 2).await;
    assert_eq!(certificates_in(&h.bundle()), 2);

    // Once the new leaves have propagated, the old CA goes.
    h.pass(t1 + 2 * HOUR).await;
    let retired = h.ca();
    assert_eq!((retired.cert_pem.as_str(), retired.previous_cert_pem.as_deref()), (rotated.cert_pem.as_str(), None));
    assert_eq!(h.bundle(), retired.bundle());
    assert_eq!(certificates_in(&h.bundle()), 1);
    assert_eq!(h.data(APISERVER_TLS)["ca.crt"], retired.bundle());
    assert!(!h.data(CA_PATH).contains_key("previous-ca.crt"), "the retired CA is removed from the Secret");
}

#[tokio::test]
async fn a_consumer_found_without_both_cas_during_the_overlap_restarts_it() {
    let (h, t1) = rotated().await;
    let old_leaf = h.data(APISERVER_TLS)["tls.crt"].clone();

    // The validating configuration is re-applied without caBundle, and the first repair fails.
    h.fake.edit(VALIDATING, |v| {
        v["webhooks"][0]["clientConfig"].as_object_mut().unwrap().remove("caBundle");
    });
    h.fake.fail(Method::PATCH, "validatingwebhookconfigurations", 500, 1);
    let failed = reconcile(&h.ctx, &policy(), t1 + HOUR / 2).await.unwrap();
    assert_eq!(failed.failed_consumers.len(), 1, "reported, not fatal");

    // Repaired at t1 + 40 min: the overlap counts from there, so leaves stay on the old CA at
    // t1 + 1 h and move at t1 + 1 h 40 min.
    let repaired = t1 + HOUR / 2 + Duration::from_secs(600);
    let pass = h.pass(repaired).await;
    assert_eq!(certificates_in(&h.bundle()), 2);
    assert_eq!(pass.next, Some(repaired + HOUR));
    h.pass(t1 + HOUR).await;
    assert_eq!(h.data(APISERVER_TLS)["tls.crt"], old_leaf);
    h.pass(repaired + HOUR).await;
    assert!(issued_by(&h.data(APISERVER_TLS)["tls.crt"], &h.ca().cert_pem));
}

#[tokio::test]
async fn a_secret_left_by_the_previous_operator_is_taken_over_and_freed_from_its_owner() {
    let h = Harness::new(CertificateMode::SelfManaged);
    // What the operator used to write: a CA without its key, an expiry annotation, an owner.
    h.fake.insert(
        APISERVER_TLS,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "numaresources-apiserver-tls", "namespace": NS,
                            "annotations": {names::ANNOTATION_CERT_NOT_AFTER: "2030-01-01T00:00:00Z"},
                            "ownerReferences": [{"apiVersion": "nodetopology.openshift.io/v1",
                                "kind": "NUMAResourcesOperator", "name": "numaresourcesoperator", "uid": "u",
                                "controller": true}]},
               "data": {"tls.crt": "Q1JU", "tls.key": "S0VZ", "ca.crt": "Q0E="}}),
    );
    h.pass(SystemTime::now()).await;
    let secret: Secret = h.fake.typed(APISERVER_TLS);
    assert!(issued_by(&h.data(APISERVER_TLS)["tls.crt"], &h.ca().cert_pem));
    assert!(secret.metadata.owner_references.is_none());
    assert!(secret.metadata.annotations.is_none());
}

#[tokio::test]
async fn in_every_other_mode_nothing_is_written() {
    for mode in [CertificateMode::Olm, CertificateMode::CertManager, CertificateMode::ServiceCa] {
        let h = Harness::new(mode);
        // One turn of the loop (the shutdown is ready at once): only the peer certificate is
        // looked after in these modes, and without an API server Deployment it writes nothing.
        tokio::time::timeout(Duration::from_secs(10), run(h.ctx.clone(), std::future::ready(())))
            .await
            .expect("the loop stops on shutdown");
        assert_eq!(h.writes(), Vec::<String>::new(), "{mode}: nothing written");
        assert!(h.fake.get(CA_PATH).is_none());
        assert!(h.bundles().iter().all(String::is_empty), "{mode}: caBundle left to the injector");
    }
}

#[tokio::test]
async fn the_loop_stops_on_shutdown_after_its_first_pass() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let (stop, stopped) = numaresources_runtime::shutdown::Shutdown::manual();
    let loop_task = tokio::spawn(run(h.ctx.clone(), stopped.signaled()));
    let first_pass = async {
        while h.fake.get(WEBHOOK_TLS).is_none() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), first_pass).await.expect("the first pass ran");
    stop.fire();
    tokio::time::timeout(Duration::from_secs(10), loop_task).await.expect("stopped").unwrap();
    assert_eq!(h.bundle(), h.ca().bundle());
}

#[tokio::test]
async fn a_consumer_that_cannot_be_read_does_not_hold_the_serving_certificates_back() {
    let h = Harness::new(CertificateMode::SelfManaged);
    h.fake.fail(Method::GET, "mutatingwebhookconfigurations", 403, 1);
    let now = SystemTime::now();
    let first = reconcile(&h.ctx, &policy(), now).await.unwrap();
    assert_eq!(first.failed_consumers.len(), 1, "reported: {:?}", first.failed_consumers);
    assert!(first.failed_consumers[0].to_string().contains("MutatingWebhookConfiguration"));
    assert!(h.fake.get(APISERVER_TLS).is_some() && h.fake.get(WEBHOOK_TLS).is_some());
    let mutating: MutatingWebhookConfiguration = h.fake.typed(MUTATING);
    assert!(mutating.webhooks.unwrap().iter().all(|w| w.client_config.ca_bundle.is_none()));

    // Readable again: the next pass fills it, and only it.
    h.fake.take_calls();
    h.pass(now).await;
    assert_eq!(h.writes(), [format!("PATCH {MUTATING}")]);
    assert_eq!(h.bundle(), h.ca().bundle());
}

#[tokio::test]
async fn an_apiservice_and_a_webhook_served_by_someone_else_are_left_alone_and_do_not_hold_a_rotation_back() {
    let h = Harness::new(CertificateMode::SelfManaged);
    // The NRT API served by kube-apiserver itself (a CRD: no spec.service) ...
    h.fake.edit(APISERVICE_PATH, |a| {
        a["spec"].as_object_mut().unwrap().remove("service");
    });
    // ... and a webhook of another vendor's added to our validating configuration.
    let theirs = json!({"name": "other.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"service": {"name": "other", "namespace": "elsewhere"}, "caBundle": "VEhFSVJT"}});
    h.fake.edit(VALIDATING, |v| v["webhooks"].as_array_mut().unwrap().push(theirs.clone()));
    let untouched = |h: &Harness| {
        let api_service: APIService = h.fake.typed(APISERVICE_PATH);
        assert_eq!(api_service.spec.unwrap().ca_bundle, None, "kube-apiserver's own APIService is not ours");
        let validating: ValidatingWebhookConfiguration = h.fake.typed(VALIDATING);
        let other = validating.webhooks.unwrap().pop().unwrap();
        assert_eq!(other.name, "other.example.com");
        assert_eq!(other.client_config.ca_bundle, Some(ByteString(b"THEIRS".to_vec())));
    };

    let t0 = SystemTime::now();
    walk(&h, (0..20).map(|day| t0 + day * DAY)).await;
    untouched(&h);
    let mutating: MutatingWebhookConfiguration = h.fake.typed(MUTATING);
    let held = mutating.webhooks.unwrap()[0].client_config.ca_bundle.clone().unwrap();
    assert_eq!(String::from_utf8(held.0).unwrap(), h.ca().bundle(), "our own webhooks still get the bundle");

    // A rotation: neither counts as lacking the two-CA bundle, so the overlap ends on time.
    let t1 = t0 + 20 * DAY + HOUR;
    h.pass(t1).await;
    let rotated = h.ca();
    assert!(rotated.previous_cert_pem.is_some());
    h.pass(t1 + HOUR).await;
    assert!(issued_by(&h.data(APISERVER_TLS)["tls.crt"], &rotated.cert_pem), "the leaves moved after one overlap");
    h.fake.take_calls();
    h.pass(t1 + HOUR).await;
    assert_eq!(h.writes(), Vec::<String>::new(), "nothing is patched again and again");
    untouched(&h);
}

#[tokio::test]
async fn a_ca_secret_whose_key_is_not_its_own_is_replaced_and_its_leaves_stay_trusted() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let t0 = SystemTime::now();
    h.pass(t0).await;
    let (old, old_leaf) = (h.ca(), h.data(WEBHOOK_TLS)["tls.crt"].clone());
    let stranger = numaresources_runtime::tls::CertificateAuthority::generate_at("stranger", t0, 30 * DAY).unwrap();
    let mut data = h.data(CA_PATH);
    data.insert(keys::CA_KEY.to_owned(), stranger.key_pem());
    h.fake.edit(CA_PATH, |secret| {
        secret["data"] = serde_json::to_value(desired_secret("x", NS, BTreeMap::new(), "Opaque", data).data).unwrap()
    });

    let t1 = t0 + HOUR;
    h.pass(t1).await;
    let replaced = h.ca();
    assert_ne!(replaced.cert_pem, old.cert_pem);
    assert_eq!(replaced.previous_cert_pem.as_deref(), Some(old.cert_pem.as_str()));
    assert_eq!(h.bundle(), replaced.bundle());
    assert_eq!(h.data(WEBHOOK_TLS)["tls.crt"], old_leaf, "kept until the new bundle has propagated");
    h.pass(t1 + HOUR).await;
    assert!(issued_by(&h.data(WEBHOOK_TLS)["tls.crt"], &replaced.cert_pem));
}

#[tokio::test]
async fn a_serving_secret_deleted_during_a_rotation_keeps_the_previous_ca_trusted_until_it_is_back_and_settled() {
    let h = Harness::new(CertificateMode::SelfManaged);
    let t0 = SystemTime::now();
    walk(&h, (0..20).map(|day| t0 + day * DAY)).await;
    let t1 = t0 + 20 * DAY + HOUR;
    walk(&h, [t1, t1 + HOUR]).await;
    h.fake.remove(WEBHOOK_TLS);
    // The apiserver leaf has been out for an hour; the webhook one is only re-issued now.
    h.pass(t1 + 2 * HOUR).await;
    assert_eq!(certificates_in(&h.bundle()), 2, "the re-issued webhook leaf has not propagated yet");
    h.pass(t1 + 3 * HOUR).await;
    assert_eq!(certificates_in(&h.bundle()), 1);
}

#[tokio::test]
async fn an_unreadable_consumer_during_the_overlap_holds_the_leaves_without_rewriting_the_ca_secret() {
    let (h, t1) = rotated().await;
    let (rotated, old_leaf) = (h.ca(), h.data(APISERVER_TLS)["tls.crt"].clone());

    h.fake.take_calls();
    for minutes in [70, 80, 90] {
        h.fake.fail(Method::GET, "mutatingwebhookconfigurations", 403, 1);
        let pass = reconcile(&h.ctx, &policy(), t1 + Duration::from_secs(60 * minutes)).await.unwrap();
        assert_eq!(pass.failed_consumers.len(), 1);
    }
    assert_eq!(h.writes(), Vec::<String>::new(), "no Secret rewritten, no Event, while it is unknown");
    assert_eq!(h.data(APISERVER_TLS)["tls.crt"], old_leaf, "the leaves wait for it");
    assert_eq!(h.ca(), rotated);
    // Readable again and holding the bundle: the leaves move.
    h.pass(t1 + 2 * HOUR).await;
    assert!(issued_by(&h.data(APISERVER_TLS)["tls.crt"], &rotated.cert_pem));
}

#[tokio::test]
async fn a_consumer_that_cannot_be_patched_during_the_overlap_is_not_rewritten_into_the_ca_secret_every_pass() {
    let (h, t1) = rotated().await;
    let rotated = h.ca();
    h.fake.edit(VALIDATING, |v| {
        v["webhooks"][0]["clientConfig"].as_object_mut().unwrap().remove("caBundle");
    });
    h.fake.take_calls();
    for minutes in [70, 80, 90] {
        h.fake.fail(Method::PATCH, "validatingwebhookconfigurations", 403, 1);
        let pass = reconcile(&h.ctx, &policy(), t1 + Duration::from_secs(60 * minutes)).await.unwrap();
        assert_eq!(pass.failed_consumers.len(), 1);
    }
    let writes = h.writes();
    assert!(writes.iter().all(|w| w.starts_with("PATCH") && w.contains("validating")), "only the retries: {writes:#?}");
    assert_eq!(h.ca(), rotated);
    // Patched at last: the overlap starts over from there, once, with one Event.
    let repaired = t1 + 2 * HOUR;
    h.pass(repaired).await;
    assert_eq!(unix_seconds_of(h.ca().rotated_at), unix_seconds_of(repaired));
    assert!(h.writes().iter().any(|w| w.contains("numaresources-ca")));
}

fn unix_seconds_of(time: SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test]
async fn a_serving_secret_of_another_type_is_reported_and_left_alone_and_the_other_is_still_kept() {
    let h = Harness::with_events(CertificateMode::SelfManaged);
    let theirs = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "numaresources-apiserver-tls", "namespace": NS}, "data": {"password": "aHVudGVyMg=="}});
    h.fake.insert(APISERVER_TLS, theirs);
    let now = SystemTime::now();
    for _ in 0..2 {
        let pass = h.pass(now).await;
        assert_eq!(pass.foreign_secrets, ["numaresources-apiserver-tls"]);
    }
    let kept: Secret = h.fake.typed(APISERVER_TLS);
    assert_eq!(kept.type_.as_deref(), Some("Opaque"));
    assert_eq!(h.data(APISERVER_TLS).keys().collect::<Vec<_>>(), ["password"], "their data is untouched");
    assert!(issued_by(&h.data(WEBHOOK_TLS)["tls.crt"], &h.ca().cert_pem), "the webhook's Secret is still kept");
    let events = h.fake.events("SecretTypeConflict");
    assert_eq!(events.len(), 1, "one Event (repeats are counted on it): {events:#?}");
    assert_eq!(events[0]["type"], "Warning");
    let note = events[0]["note"].as_str().unwrap();
    assert!(note.contains("numaresources/numaresources-apiserver-tls") && note.contains("\"Opaque\""), "{note}");
}

#[tokio::test]
async fn a_ca_secret_of_another_type_stops_the_pass_with_a_reason_before_anything_is_published() {
    let h = Harness::with_events(CertificateMode::SelfManaged);
    h.fake.insert(
        CA_PATH,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "numaresources-ca", "namespace": NS}, "data": {}}),
    );
    let error = reconcile(&h.ctx, &policy(), SystemTime::now()).await.unwrap_err();
    assert!(error.to_string().contains("numaresources/numaresources-ca"), "{error}");
    assert!(h.fake.get(WEBHOOK_TLS).is_none() && h.bundles().iter().all(String::is_empty));
    assert_eq!(h.fake.events("SecretTypeConflict").len(), 1);
}

#[tokio::test]
async fn a_configuration_that_keeps_losing_ca_bundle_is_announced_at_most_once_per_propagation() {
    let (h, t1) = rotate(Harness::with_events(CertificateMode::SelfManaged)).await;
    let strip = || {
        h.fake.edit(VALIDATING, |v| {
            v["webhooks"][0]["clientConfig"].as_object_mut().unwrap().remove("caBundle");
        })
    };
    let minutes = |m: u64| t1 + Duration::from_secs(60 * m);
    for at in [minutes(30), minutes(40), minutes(100), minutes(110)] {
        strip();
        h.pass(at).await;
        assert_eq!(unix_seconds_of(h.ca().rotated_at), unix_seconds_of(at), "every repair restarts the overlap");
    }
    // 30 and 40 fall within the rotation's own propagation, 110 within the restart at 100.
    let events = h.fake.events("CertificateAuthorityRepublished");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["series"]["count"], Value::Null, "announced once, not as a series");
}
