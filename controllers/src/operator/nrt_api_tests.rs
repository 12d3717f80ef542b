//! The NRT API step in each `--apiserver-deployment` and `--certificate-mode`, against the
//! in-memory API: who writes what.

use std::collections::BTreeSet;
use std::sync::Arc;

use http::Method;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::Resource as _;
use numaresources_api::operator::{NUMAResourcesOperatorSpec, OPERATOR_SINGLETON_NAME};
use serde_json::json;

use super::*;
use crate::context::Settings;
use crate::fake::FakeApi;
use crate::mode::CertificateMode;
use crate::mode::{CERT_MANAGER_INJECT_CA_FROM, SERVICE_CA_INJECT_CABUNDLE, SERVICE_CA_SERVING_CERT_SECRET};

const APISERVICE_PATH: &str = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha2.topology.node.k8s.io";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/numaresources/deployments/numaresources-apiserver";
const SERVICE: &str = "/api/v1/namespaces/numaresources/services/numaresources-apiserver";

struct Step {
    fake: FakeApi,
    ctx: Arc<Context>,
    nro: NUMAResourcesOperator,
}

impl Step {
    fn new(mode: CertificateMode, deployment: ApiserverDeployment) -> Self {
        let (fake, client) = crate::fake::start();
        let mut settings = Settings::kubernetes("numaresources", "img");
        settings.certificate_mode = mode;
        settings.apiserver_deployment = deployment;
        let mut nro = NUMAResourcesOperator::new(OPERATOR_SINGLETON_NAME, NUMAResourcesOperatorSpec::default());
        nro.metadata.uid = Some("nro-uid".to_owned());
        Self { fake, ctx: Arc::new(Context::new(client, settings, None)), nro }
    }

    async fn run(&self) -> ApiState {
        let applier = Applier::new(self.ctx.client.clone(), self.nro.controller_owner_ref(&()));
        reconcile(&self.nro, &self.ctx, &applier).await.unwrap()
    }

    /// Runs until the Deployment is available and the APIService applied.
    async fn converge(&self) {
        self.run().await;
        self.fake.roll_out();
        assert_eq!(self.run().await, ApiState::Ready);
    }

    fn secrets(&self) -> BTreeSet<String> {
        self.fake.paths().into_iter().filter(|p| p.contains("/secrets/")).collect()
    }
}

#[tokio::test]
async fn an_installed_api_server_is_only_read() {
    let step = Step::new(CertificateMode::SelfManaged, ApiserverDeployment::Installed);
    match step.run().await {
        ApiState::Progressing(message) => assert!(message.contains("does not exist"), "{message}"),
        other => panic!("{other:?}"),
    }
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "numaresources-apiserver", "namespace": "numaresources"}});
    step.fake.insert(DEPLOYMENT, deployment);
    assert!(matches!(step.run().await, ApiState::Progressing(_)), "not available yet");
    step.fake.roll_out();
    assert_eq!(step.run().await, ApiState::Ready);
    let writes: Vec<_> = step.fake.take_calls().into_iter().filter(|c| c.method != Method::GET).collect();
    assert!(writes.is_empty(), "the install owns every object: {writes:#?}");
    assert_eq!(step.fake.paths(), [DEPLOYMENT], "nothing created, certificates included (the lifecycle's job)");
}

#[tokio::test]
async fn switching_an_installed_api_server_to_the_cluster_api_touches_none_of_its_objects() {
    let mut step = Step::new(CertificateMode::Olm, ApiserverDeployment::Installed);
    step.nro.metadata.annotations = Some([(ANNOTATION_NRT_API.to_owned(), "cluster".to_owned())].into());
    assert_eq!(step.run().await, ApiState::External);
    let calls = step.fake.take_calls();
    assert!(calls.is_empty(), "not even read (OLM grants no access to the API server's binding): {calls:#?}");
}

#[tokio::test]
async fn self_managed_the_apiservice_trusts_the_bundle_of_the_ca_secret() {
    let step = Step::new(CertificateMode::SelfManaged, ApiserverDeployment::Operator);
    step.converge().await;
    let ca: Secret = step.fake.typed("/api/v1/namespaces/numaresources/secrets/numaresources-ca");
    let bundle = ca.data.unwrap()[numaresources_runtime::tls::rotation::keys::CA_BUNDLE].clone();
    let api_service: APIService = step.fake.typed(APISERVICE_PATH);
    assert_eq!(api_service.spec.unwrap().ca_bundle, Some(bundle));
    assert_eq!(step.secrets().len(), 3, "CA, API server and webhook: {:?}", step.secrets());
}

#[tokio::test]
async fn the_disruption_budget_is_applied_with_the_server_and_owned_by_the_operator_object() {
    const BUDGET: &str = "/apis/policy/v1/namespaces/numaresources/poddisruptionbudgets/numaresources-apiserver";
    let step = Step::new(CertificateMode::SelfManaged, ApiserverDeployment::Operator);
    step.converge().await;
    let budget: k8s_openapi::api::policy::v1::PodDisruptionBudget = step.fake.typed(BUDGET);
    let owner = &budget.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("NUMAResourcesOperator", "nro-uid", Some(true))
    );
    let spec = budget.spec.unwrap();
    assert_eq!(spec.min_available, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)));
    let deployment: Deployment = step.fake.typed(DEPLOYMENT);
    let pod_labels = deployment.spec.unwrap().template.metadata.unwrap().labels.unwrap();
    let selected = spec.selector.unwrap().match_labels.unwrap();
    assert!(selected.iter().all(|(k, v)| pod_labels.get(k) == Some(v)), "it covers the server's pods");
}

#[tokio::test]
async fn cert_manager_and_service_ca_are_asked_by_annotation_and_nothing_of_ours_is_written() {
    for mode in [CertificateMode::CertManager, CertificateMode::ServiceCa] {
        let step = Step::new(mode, ApiserverDeployment::Operator);
        step.converge().await;
        assert!(step.secrets().is_empty(), "{mode}: {:?}", step.secrets());
        let api_service: APIService = step.fake.typed(APISERVICE_PATH);
        assert_eq!(api_service.spec.as_ref().unwrap().ca_bundle, None, "{mode}: the injector's field");
        let annotations = api_service.metadata.annotations.unwrap_or_default();
        let service: Service = step.fake.typed(SERVICE);
        let service_annotations = service.metadata.annotations.unwrap_or_default();
        match mode {
            CertificateMode::CertManager => {
                assert_eq!(annotations[CERT_MANAGER_INJECT_CA_FROM], "numaresources/numaresources-apiserver");
                assert!(!service_annotations.contains_key(SERVICE_CA_SERVING_CERT_SECRET));
            }
            _ => {
                assert_eq!(annotations[SERVICE_CA_INJECT_CABUNDLE], "true");
                assert_eq!(service_annotations[SERVICE_CA_SERVING_CERT_SECRET], "numaresources-apiserver-tls");
            }
        }
    }
}
