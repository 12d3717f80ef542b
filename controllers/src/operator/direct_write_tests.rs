//! The exporters' direct write path, rendered by the operator controller against the
//! in-memory API: with our API server in each certificate mode, and without it.

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret, Volume};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use numaresources_api::direct_write::{
    CA_FILE_NAME, NRT_SERVER_CA_FILE_FLAG, NRT_SERVER_FLAG, NRT_SERVER_TLS_NAME_FLAG, NRT_TOKEN_FILE_FLAG,
    TOKEN_AUDIENCE, TOKEN_EXPIRATION_SECONDS, TOKEN_FILE_NAME, TOKEN_MOUNT_DIR, WRITE_SERVICE, service_host,
    service_url,
};
use serde_json::json;

use crate::context::Settings;
use crate::mode::CertificateMode;
use crate::mode::SERVICE_CA_INJECT_CABUNDLE;
use crate::operator::tests::{APISERVICE_PATH, Harness, NRO, NS, ds_path, worker_group};
use crate::render::rte::NRT_SERVER_VOLUME;

const CA_CONFIG_MAP: &str = "/api/v1/namespaces/numaresources/configmaps/numaresources-apiserver-ca";
const CA_SECRET: &str = "/api/v1/namespaces/numaresources/secrets/numaresources-ca";
const EXPORTER_POLICY: &str = "/apis/networking.k8s.io/v1/namespaces/numaresources/networkpolicies/numaresources-rte";

fn harness(mode: CertificateMode) -> Harness {
    let mut settings = Settings::kubernetes(NS, "quay.io/numaresources/numaresources:v1");
    settings.certificate_mode = mode;
    Harness::with_settings(vec![worker_group()], settings)
}

fn exporter(h: &Harness) -> PodSpec {
    let ds: DaemonSet = h.fake.typed(&ds_path("numaresourcesoperator-worker"));
    ds.spec.unwrap().template.spec.unwrap()
}

fn direct_args(pod: &PodSpec) -> Vec<String> {
    let args = pod.containers[0].args.clone().unwrap();
    let flags = [NRT_SERVER_FLAG, NRT_SERVER_TLS_NAME_FLAG, NRT_SERVER_CA_FILE_FLAG, NRT_TOKEN_FILE_FLAG];
    args.into_iter().filter(|a| flags.iter().any(|flag| a.starts_with(&format!("{flag}=")))).collect()
}

fn direct_volume(pod: &PodSpec) -> Option<Volume> {
    pod.volumes.iter().flatten().find(|v| v.name == NRT_SERVER_VOLUME).cloned()
}

/// The whole direct path in one exporter pod, its CA read from `key` of the CA ConfigMap.
fn assert_direct_path(pod: &PodSpec, key: &str) {
    assert_direct_path_to(pod, "numaresources-apiserver", key);
    assert_eq!(direct_args(pod)[0], "--nrt-server=https://numaresources-apiserver-writes.numaresources.svc:443");
    assert_eq!(direct_args(pod)[1], "--nrt-server-tls-name=numaresources-apiserver.numaresources.svc");
}

/// [`assert_direct_path`], the certificate checked against the Service `service`'s name.
fn assert_direct_path_to(pod: &PodSpec, service: &str, key: &str) {
    assert_eq!(
        direct_args(pod),
        [
            format!("{NRT_SERVER_FLAG}={}", service_url(WRITE_SERVICE, NS)),
            format!("{NRT_SERVER_TLS_NAME_FLAG}={}", service_host(service, NS)),
            format!("{NRT_SERVER_CA_FILE_FLAG}={TOKEN_MOUNT_DIR}/{CA_FILE_NAME}"),
            format!("{NRT_TOKEN_FILE_FLAG}={TOKEN_MOUNT_DIR}/{TOKEN_FILE_NAME}"),
        ]
    );
    let sources = direct_volume(pod).unwrap().projected.unwrap().sources.unwrap();
    let token = sources[0].service_account_token.as_ref().unwrap();
    assert_eq!(
        (token.audience.as_deref(), token.expiration_seconds, token.path.as_str()),
        (Some(TOKEN_AUDIENCE), Some(TOKEN_EXPIRATION_SECONDS), TOKEN_FILE_NAME)
    );
    let ca = sources[1].config_map.as_ref().unwrap();
    assert_eq!(ca.name, "numaresources-apiserver-ca");
    let item = &ca.items.as_ref().unwrap()[0];
    assert_eq!((item.key.as_str(), item.path.as_str()), (key, CA_FILE_NAME));
    let mount = pod.containers[0].volume_mounts.iter().flatten().find(|m| m.name == NRT_SERVER_VOLUME).unwrap();
    assert_eq!((mount.mount_path.as_str(), mount.read_only), (TOKEN_MOUNT_DIR, Some(true)));
}

fn exporter_policy_egress_ports(h: &Harness) -> Vec<i32> {
    let policy: NetworkPolicy = h.fake.typed(EXPORTER_POLICY);
    let egress = policy.spec.unwrap().egress.unwrap();
    let ports = egress.into_iter().flat_map(|rule| rule.ports.unwrap_or_default());
    ports
        .filter_map(|port| match port.port {
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(port)) => Some(port),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn self_managed_exporters_write_directly_verified_by_the_bundle_of_the_ca_secret() {
    let h = harness(CertificateMode::SelfManaged);
    h.converge().await;
    assert_direct_path(&exporter(&h), "ca.crt");
    let ca: Secret = h.fake.typed(CA_SECRET);
    let bundle = ca.data.unwrap()[numaresources_runtime::tls::rotation::keys::CA_BUNDLE].clone();
    let config_map: ConfigMap = h.fake.typed(CA_CONFIG_MAP);
    assert_eq!(config_map.data.unwrap()["ca.crt"].as_bytes(), bundle.0.as_slice(), "what the APIService trusts");
    let owner = &config_map.metadata.owner_references.unwrap()[0];
    assert_eq!(owner.kind, "NUMAResourcesOperator");
    assert!(exporter_policy_egress_ports(&h).contains(&53), "the Service is resolved by name");
}

#[tokio::test]
async fn the_certificate_lifecycle_keeps_the_exporters_bundle_current() {
    let h = harness(CertificateMode::SelfManaged);
    h.converge().await;
    let current = h.fake.typed::<ConfigMap>(CA_CONFIG_MAP).data.unwrap()["ca.crt"].clone();
    h.fake.edit(CA_CONFIG_MAP, |cm| cm["data"]["ca.crt"] = json!("stale"));
    let pass = crate::certificates::reconcile(
        &h.ctx,
        &numaresources_runtime::tls::rotation::RotationPolicy::default(),
        std::time::SystemTime::now(),
    )
    .await
    .unwrap();
    assert!(pass.failed_consumers.is_empty(), "{:?}", pass.failed_consumers);
    assert_eq!(h.fake.typed::<ConfigMap>(CA_CONFIG_MAP).data.unwrap()["ca.crt"], current);
}

#[tokio::test]
async fn service_ca_injects_the_bundle_into_the_annotated_config_map() {
    let h = harness(CertificateMode::ServiceCa);
    h.converge().await;
    assert_direct_path(&exporter(&h), "service-ca.crt");
    let config_map: ConfigMap = h.fake.typed(CA_CONFIG_MAP);
    assert_eq!(config_map.metadata.annotations.unwrap()[SERVICE_CA_INJECT_CABUNDLE], "true");
    assert!(config_map.data.is_none(), "service-ca's to fill");
}

#[tokio::test]
async fn cert_manager_bundle_is_copied_from_the_apiservice_once_injected() {
    let h = harness(CertificateMode::CertManager);
    h.converge().await;
    assert_direct_path(&exporter(&h), "ca.crt");
    assert!(h.fake.get(CA_CONFIG_MAP).is_none(), "nothing to copy before the injector filled caBundle");
    let injected = ByteString(b"-----BEGIN CERTIFICATE-----\ncert-manager\n-----END CERTIFICATE-----\n".to_vec());
    h.fake.edit(APISERVICE_PATH, |api_service| api_service["spec"]["caBundle"] = json!(injected));
    h.reconcile().await.unwrap();
    let config_map: ConfigMap = h.fake.typed(CA_CONFIG_MAP);
    assert_eq!(config_map.data.unwrap()["ca.crt"].as_bytes(), injected.0.as_slice());
}

#[tokio::test]
async fn when_the_cluster_serves_nrt_the_exporters_get_none_of_it() {
    let h = harness(CertificateMode::SelfManaged);
    h.converge().await;
    assert!(h.fake.get(CA_CONFIG_MAP).is_some());
    h.fake.edit(NRO, |nro| {
        nro["metadata"]["annotations"] = json!({"config.numa-operator.openshift.io/nrt-api-definition": "cluster"});
    });
    h.reconcile().await.unwrap();
    let pod = exporter(&h);
    assert!(direct_args(&pod).is_empty(), "{:?}", pod.containers[0].args);
    assert!(direct_volume(&pod).is_none());
    assert!(pod.containers[0].volume_mounts.iter().flatten().all(|m| m.mount_path != TOKEN_MOUNT_DIR));
    assert!(h.fake.get(CA_CONFIG_MAP).is_none(), "removed with the server");
    assert!(!exporter_policy_egress_ports(&h).contains(&53), "no name to resolve");
}

#[tokio::test]
async fn under_olm_the_exporters_reach_olms_service_verified_by_the_ca_olm_injected() {
    let mut settings = Settings::kubernetes(NS, "quay.io/numaresources/numaresources:v1");
    settings.certificate_mode = CertificateMode::Olm;
    settings.apiserver_deployment = crate::mode::ApiserverDeployment::Installed;
    let h = Harness::with_settings(vec![worker_group()], settings);
    // What OLM creates from the CSV: the Deployment, and the APIService in front of its Service.
    h.fake.insert(
        "/apis/apps/v1/namespaces/numaresources/deployments/numaresources-apiserver",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "numaresources-apiserver", "namespace": NS}}),
    );
    let injected = ByteString(b"-----BEGIN CERTIFICATE-----\nolm\n-----END CERTIFICATE-----\n".to_vec());
    h.fake.insert(
        APISERVICE_PATH,
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1alpha2.topology.node.k8s.io"},
            "spec": {"group": "topology.node.k8s.io", "version": "v1alpha2", "groupPriorityMinimum": 1000, "versionPriority": 100,
                "service": {"name": "numaresources-apiserver-service", "namespace": NS, "port": 443}, "caBundle": injected}}),
    );
    h.converge().await;
    assert_direct_path_to(&exporter(&h), "numaresources-apiserver-service", "ca.crt");
    let config_map: ConfigMap = h.fake.typed(CA_CONFIG_MAP);
    assert_eq!(config_map.data.unwrap()["ca.crt"].as_bytes(), injected.0.as_slice());
}
