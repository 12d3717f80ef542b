//! The ClusterServiceVersion and the bundle's `metadata/annotations.yaml`.
//!
//! Under OLM the API server and the webhook get their Service (`<deployment>-service`), serving
//! certificates, `caBundle` and delegation bindings from OLM (`apiservicedefinitions`,
//! `webhookdefinitions`), so the CSV declares those instead of shipping our Services, APIService
//! and webhook configurations; the controllers run with `--certificate-mode=olm` and leave all
//! of it to OLM.

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

use super::permissions;
use super::source::Manifests;

/// The OLM package.
pub const PACKAGE: &str = "numaresources-operator";
/// The one channel.
const CHANNEL: &str = "alpha";
/// The Deployments of the install strategy, in order.
const DEPLOYMENTS: [&str; 3] = ["numaresources-controllers", "numaresources-webhook", "numaresources-apiserver"];
/// The deployment whose arguments select the certificate and API server modes.
const CONTROLLERS: &str = "numaresources-controllers";
/// How the controllers run under OLM.
const CONTROLLERS_OLM_ARGS: [&str; 2] = ["--apiserver-deployment=installed", "--certificate-mode=olm"];
/// Where OLM mounts the certificates it makes (OLM's paths for the certificates of APIServices and webhooks): our own Secret volumes at
/// these paths are dropped, OLM's take their place.
const OLM_CERTIFICATE_PATHS: [&str; 2] =
    ["/apiserver.local.config/certificates", "/tmp/k8s-webhook-server/serving-certs"];
/// Pod security fields fixed in the manifests and left out under OLM: on OpenShift,
/// restricted-v2 refuses a fixed UID outside the namespace's range and assigns one itself; on
/// plain Kubernetes the image's own numeric user (65532) applies. OLM's certificate volumes are
/// world-readable, so nothing needs the fsGroup.
const FIXED_IDS: [&str; 3] = ["runAsUser", "runAsGroup", "fsGroup"];
/// The fields of a webhook that a `webhookdefinitions` entry carries over unchanged.
const WEBHOOK_FIELDS: [&str; 8] = [
    "admissionReviewVersions",
    "failurePolicy",
    "matchPolicy",
    "objectSelector",
    "reinvocationPolicy",
    "rules",
    "sideEffects",
    "timeoutSeconds",
];

/// The ClusterServiceVersion.
pub fn cluster_service_version(manifests: &Manifests, image: &str) -> anyhow::Result<Value> {
    let version = env!("CARGO_PKG_VERSION");
    let api_services = api_service_definitions(manifests)?;
    let api_server_deployments: Vec<&str> = api_services.iter().filter_map(|d| d["deploymentName"].as_str()).collect();
    let mut deployments = Vec::new();
    let mut cluster_permissions = Vec::new();
    let mut namespace_permissions = Vec::new();
    for name in DEPLOYMENTS {
        let deployment = manifests.deployment(name)?;
        deployments.push(install_deployment(deployment, image)?);
        let account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .with_context(|| format!("Deployment {name} names no serviceAccountName"))?;
        let granted = permissions::of(manifests, account, api_server_deployments.contains(&name))?;
        if !granted.cluster.is_empty() {
            cluster_permissions.push(json!({"serviceAccountName": account, "rules": granted.cluster}));
        }
        if !granted.namespaced.is_empty() {
            namespace_permissions.push(json!({"serviceAccountName": account, "rules": granted.namespaced}));
        }
    }
    Ok(json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": format!("{PACKAGE}.v{version}"),
            "annotations": {
                "alm-examples": serde_json::to_string_pretty(&manifests.samples)?,
                "capabilities": "Basic Install",
                "categories": "OpenShift Optional",
                "containerImage": image,
                "description": "NUMA-aware scheduling: node topology exporters, the NodeResourceTopology API and a NUMA-aware secondary scheduler.",
                "operatorframework.io/suggested-namespace": "numaresources",
            },
        },
        "spec": {
            "displayName": "NUMA Resources",
            "description": DESCRIPTION,
            "version": version,
            "maturity": CHANNEL,
            // The preStop `sleep` action of the servers is on by default from 1.30.
            "minKubeVersion": "1.30.0",
            "provider": {"name": "numaresources"},
            "keywords": ["numa", "topology", "scheduling", "noderesourcetopology"],
            // Every component is cluster-wide: the CRs are cluster-scoped singletons and the
            // pod webhook serves every namespace.
            "installModes": [
                {"type": "OwnNamespace", "supported": false},
                {"type": "SingleNamespace", "supported": false},
                {"type": "MultiNamespace", "supported": false},
                {"type": "AllNamespaces", "supported": true},
            ],
            // For mirroring into disconnected registries: every image the operator runs.
            "relatedImages": [{"name": "numaresources", "image": image}],
            "customresourcedefinitions": {"owned": owned_crds()?},
            "apiservicedefinitions": {"owned": api_services},
            "webhookdefinitions": webhook_definitions(manifests)?,
            "install": {
                "strategy": "deployment",
                "spec": {
                    "deployments": deployments,
                    "clusterPermissions": cluster_permissions,
                    "permissions": namespace_permissions,
                },
            },
        },
    }))
}

const DESCRIPTION: &str = "\
Runs the resource topology exporter on groups of nodes (`NUMAResourcesOperator`), serves the \
`topology.node.k8s.io/v1alpha2` NodeResourceTopology API from an aggregated API server, and runs \
a NUMA-aware secondary scheduler (`NUMAResourcesScheduler`) with an admission webhook that can \
route pods to it.\n\nCreate the `NUMAResourcesOperator` named `numaresourcesoperator`, then the \
`NUMAResourcesScheduler` named `numaresourcesscheduler`. Delete them before uninstalling: the \
operator unregisters what it created first.\n";

/// A Deployment as the install strategy runs it: the image set everywhere, the controllers in
/// OLM mode, no fixed UIDs, and our certificate volumes left to OLM's.
fn install_deployment(deployment: &Value, image: &str) -> anyhow::Result<Value> {
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let mut spec = deployment["spec"].clone();
    let pod = spec["template"]["spec"].as_object_mut().with_context(|| format!("Deployment {name}: no pod spec"))?;
    if let Some(context) = pod.get_mut("securityContext").and_then(Value::as_object_mut) {
        context.retain(|field, _| !FIXED_IDS.contains(&field.as_str()));
    }
    let mut replaced = Vec::new();
    for container in pod.get_mut("containers").and_then(Value::as_array_mut).into_iter().flatten() {
        container["image"] = json!(image);
        for env in container.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
            if env["name"] == "NUMARESOURCES_IMAGE" {
                env["value"] = json!(image);
            }
        }
        if name == CONTROLLERS {
            let args = container["args"].as_array_mut().context("the controllers' container has no args")?;
            args.extend(CONTROLLERS_OLM_ARGS.map(|a| json!(a)));
        }
        if let Some(mounts) = container.get_mut("volumeMounts").and_then(Value::as_array_mut) {
            mounts.retain(|mount| {
                let olm = OLM_CERTIFICATE_PATHS.iter().any(|path| mount["mountPath"] == *path);
                if olm {
                    replaced.push(mount["name"].clone());
                }
                !olm
            });
        }
    }
    if let Some(volumes) = pod.get_mut("volumes").and_then(Value::as_array_mut) {
        volumes.retain(|volume| !replaced.contains(&volume["name"]));
    }
    Ok(json!({"name": name, "label": deployment["metadata"]["labels"], "spec": spec}))
}

/// The Deployment a Service sends its traffic to, and the container port its `targetPort` is.
fn backend(manifests: &Manifests, service_name: &str, service_port: i64) -> anyhow::Result<(String, i64)> {
    let service = manifests.service(service_name)?;
    let selector = service["spec"]["selector"].as_object().context("a Service without a selector")?;
    let port = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"] == service_port)
        .with_context(|| format!("Service {service_name} has no port {service_port}"))?;
    let deployment = manifests
        .deployments
        .iter()
        .find(|d| {
            let labels = &d["spec"]["template"]["metadata"]["labels"];
            selector.iter().all(|(key, value)| labels[key] == *value)
        })
        .with_context(|| format!("Service {service_name} selects no Deployment"))?;
    let target = &port["targetPort"];
    let container_port = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .find(|p| p["name"] == *target || p["containerPort"] == *target)
        .and_then(|p| p["containerPort"].as_i64())
        .with_context(|| format!("Service {service_name}: targetPort {target} is no container port"))?;
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    Ok((name, container_port))
}

/// `apiservicedefinitions.owned`: OLM makes the Service (port = containerPort), the serving
/// certificate and the APIService with its `caBundle`.
fn api_service_definitions(manifests: &Manifests) -> anyhow::Result<Vec<Value>> {
    let mut owned = Vec::new();
    for api_service in &manifests.api_services {
        let spec = &api_service["spec"];
        let service = &spec["service"];
        let name = service["name"].as_str().context("an APIService without a Service")?;
        let (deployment, container_port) = backend(manifests, name, service["port"].as_i64().unwrap_or(443))?;
        if spec["group"] != numaresources_api::nrt::GROUP {
            bail!("an APIService of group {}: only {} is described here", spec["group"], numaresources_api::nrt::GROUP);
        }
        owned.push(json!({
            "name": numaresources_api::nrt::PLURAL,
            "group": spec["group"],
            "version": spec["version"],
            "kind": numaresources_api::nrt::KIND,
            "displayName": "Node Resource Topology",
            "description": "The NUMA zones of each node and the resources available in each, as the scheduler's NodeResourceTopologyMatch plugin reads them.",
            "deploymentName": deployment,
            "containerPort": container_port,
        }));
    }
    Ok(owned)
}

/// `webhookdefinitions`: one per webhook of our configurations. OLM creates one configuration
/// per definition, calling `<deployment>-service` on `containerPort` (→ `targetPort`), and
/// generates the `namespaceSelector` from the OperatorGroup (none for AllNamespaces): the pod
/// webhook's exclusion of kube-system, kube-node-lease and our namespace is lost there. That is
/// safe because it fails open (`Ignore`) and the webhook itself never routes pods of those
/// namespaces (nor its own, from POD_NAMESPACE).
fn webhook_definitions(manifests: &Manifests) -> anyhow::Result<Vec<Value>> {
    let mut definitions = Vec::new();
    for configuration in &manifests.webhook_configurations {
        let kind = match configuration["kind"].as_str() {
            Some("MutatingWebhookConfiguration") => "MutatingAdmissionWebhook",
            _ => "ValidatingAdmissionWebhook",
        };
        for webhook in configuration["webhooks"].as_array().into_iter().flatten() {
            let name = webhook["name"].as_str().context("a webhook without a name")?;
            let service = &webhook["clientConfig"]["service"];
            let service_port = service["port"].as_i64().unwrap_or(443);
            let service_name = service["name"].as_str().with_context(|| format!("{name}: not a Service webhook"))?;
            let (deployment, target_port) = backend(manifests, service_name, service_port)?;
            let mut definition = Map::new();
            definition.insert("generateName".into(), json!(name));
            definition.insert("type".into(), json!(kind));
            definition.insert("deploymentName".into(), json!(deployment));
            definition.insert("containerPort".into(), json!(service_port));
            definition.insert("targetPort".into(), json!(target_port));
            definition.insert("webhookPath".into(), service["path"].clone());
            for (field, value) in webhook.as_object().into_iter().flatten() {
                match field.as_str() {
                    "name" | "clientConfig" | "namespaceSelector" => {}
                    known if WEBHOOK_FIELDS.contains(&known) => {
                        definition.insert(field.clone(), value.clone());
                    }
                    other => bail!("{name}: the bundle does not carry the webhook field {other} over; teach it"),
                }
            }
            definitions.push(Value::Object(definition));
        }
    }
    Ok(definitions)
}

/// `customresourcedefinitions.owned`: every served version of our CRDs, described by its schema.
fn owned_crds() -> anyhow::Result<Vec<Value>> {
    let mut owned = Vec::new();
    for crd in numaresources_api::crds::all() {
        let crd = serde_json::to_value(&crd)?;
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
        let display_name = match kind {
            "NUMAResourcesOperator" => "NUMA Resources Operator",
            "NUMAResourcesScheduler" => "NUMA Resources Scheduler",
            other => bail!("no display name for {other}"),
        };
        for version in crd["spec"]["versions"].as_array().into_iter().flatten().filter(|v| v["served"] == true) {
            owned.push(json!({
                "name": crd["metadata"]["name"],
                "version": version["name"],
                "kind": kind,
                "displayName": display_name,
                "description": version["schema"]["openAPIV3Schema"]["description"],
            }));
        }
    }
    Ok(owned)
}

/// `metadata/annotations.yaml` of a registry+v1 bundle.
pub fn annotations() -> Value {
    json!({"annotations": {
        "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
        "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
        "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
        "operators.operatorframework.io.bundle.package.v1": PACKAGE,
        "operators.operatorframework.io.bundle.channels.v1": CHANNEL,
        "operators.operatorframework.io.bundle.channel.default.v1": CHANNEL,
    }})
}
