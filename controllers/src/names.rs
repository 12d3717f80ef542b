//! Every name, label and annotation the controllers write or read, in one place, so the objects
//! they render, the objects they look for and the manifests agree.

use std::collections::BTreeMap;

use numaresources_api::PRODUCT;

/// The one server-side-apply field manager of every controller.
pub const FIELD_MANAGER: &str = "numaresources-controllers";
/// The reporting controller of our Events.
pub const EVENT_REPORTER: &str = "numaresources-controllers";

/// `app.kubernetes.io/name`.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/part-of`.
pub const LABEL_PART_OF: &str = "app.kubernetes.io/part-of";
/// `app.kubernetes.io/component`.
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/managed-by`.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The node group a DaemonSet or ConfigMap belongs to (its pool name).
pub const LABEL_NODE_GROUP: &str = "nodetopology.openshift.io/node-group";
/// Upstream's label on the per-pool exporter ConfigMap: the owning `NUMAResourcesOperator`.
pub const LABEL_NRO_NAME: &str = "numaresourcesoperator.nodetopology.openshift.io/name";
/// Upstream's label on the per-pool exporter ConfigMap: the pool.
pub const LABEL_POOL: &str = "nodegroup.nodetopology.openshift.io/machineconfigpool";

/// Pod-template annotation whose change rolls the pods when their configuration changes.
pub const ANNOTATION_CONFIG_HASH: &str = "configmap.hash";
/// The scheduler pod template's annotation: when its pods' NRT cache was filled (RFC 3339); a
/// new value restarts them so they list NRTs that appeared since.
pub const ANNOTATION_SCHEDULER_CACHE_EPOCH: &str = "nodetopology.openshift.io/scheduler-cache-epoch";
/// NRO/NRS annotation: `enabled` stops reconciliation so operands may be edited by hand.
pub const ANNOTATION_PAUSE: &str = "config.numa-operator.openshift.io/pause-reconciliation";
/// NRO annotation: `cluster` means "use the NodeResourceTopology API the cluster already has".
pub const ANNOTATION_NRT_API: &str = "config.numa-operator.openshift.io/nrt-api-definition";
/// NRO annotation: `enabled` tolerates a selector matching several MachineConfigPools (legacy).
pub const ANNOTATION_MULTIPLE_POOLS: &str = "config.node.openshift-kni.io/multiple-pools-per-tree";
/// NRS annotation: `guaranteed` gives the scheduler requests equal to limits.
pub const ANNOTATION_SCHEDULER_QOS: &str = "config.numa-operator.openshift.io/scheduler-qos-request";
/// Exporter ConfigMap annotation: nodes of the group whose kubelets disagree, and how.
pub const ANNOTATION_KUBELET_DISAGREEMENT: &str = "nodetopology.openshift.io/kubelet-config-disagreement";
/// Exporter ConfigMap annotation: nodes of the group whose kubelets cannot give NUMA-aligned
/// placement, and why.
pub const ANNOTATION_KUBELET_ALIGNMENT: &str = "nodetopology.openshift.io/kubelet-numa-alignment";
/// Serving-certificate Secret annotation: when the leaf certificate expires (RFC 3339).
pub const ANNOTATION_CERT_NOT_AFTER: &str = "nodetopology.openshift.io/serving-cert-not-after";

/// The finalizer that removes the APIService before anything it points at.
pub const FINALIZER_APISERVICE: &str = "nodetopology.openshift.io/apiservice";
/// The finalizer that removes the pod webhook before the scheduler it routes pods to.
pub const FINALIZER_POD_ROUTING: &str = "nodetopology.openshift.io/pod-routing";

/// The component names (`app.kubernetes.io/component`).
pub const COMPONENT_RTE: &str = "rte";
/// The NRT API server component.
pub const COMPONENT_APISERVER: &str = "apiserver";
/// The secondary scheduler component.
pub const COMPONENT_SCHEDULER: &str = "scheduler";

/// The exporter's ServiceAccount (and RBAC object names).
pub const RTE_SERVICE_ACCOUNT: &str = "numaresources-rte";
/// The exporter's ClusterRole and ClusterRoleBinding.
pub const RTE_CLUSTER_ROLE: &str = "numaresources:rte";
/// The exporter's namespaced Role and RoleBinding (its own pod's conditions).
pub const RTE_ROLE: &str = "numaresources-rte";
/// The exporter container.
pub const RTE_CONTAINER: &str = "resource-topology-exporter";
/// The shared-pool reference container: it never gets exclusive CPUs, so the exporter reads the
/// shared pool's cpuset from it.
pub const SHARED_POOL_CONTAINER: &str = "shared-pool-container";

/// The NRT API server's Deployment, Service and ServiceAccount.
pub const APISERVER: &str = "numaresources-apiserver";
/// Its serving certificate Secret (`kubernetes.io/tls`, plus `ca.crt`).
pub const APISERVER_TLS_SECRET: &str = "numaresources-apiserver-tls";
/// The ConfigMap with the CA bundle that verifies the API server's serving certificate, which
/// the exporters mount for the direct write path (a ConfigMap, so no node's kubelet ever
/// fetches a Secret holding a private key for it).
pub const APISERVER_CA_CONFIG_MAP: &str = "numaresources-apiserver-ca";
/// The admission webhook's Deployment and Service.
pub const WEBHOOK: &str = "numaresources-webhook";
/// Its serving certificate Secret (`kubernetes.io/tls`, plus `ca.crt`).
pub const WEBHOOK_TLS_SECRET: &str = "numaresources-webhook-tls";
/// The Mutating- and ValidatingWebhookConfiguration (one name for both).
pub const WEBHOOK_CONFIGURATION: &str = "numaresources-webhook";
/// The MutatingWebhookConfiguration of the pod webhook alone, owned by the
/// `NUMAResourcesScheduler` (present only while it routes pods).
pub const POD_ROUTING_CONFIGURATION: &str = "numaresources-pod-routing";
/// The pod webhook in it.
pub const POD_WEBHOOK: &str = "pods.nodetopology.openshift.io";
/// The path the webhook serves pod admission on.
pub use numaresources_api::webhook::MUTATE_PODS_PATH as POD_WEBHOOK_PATH;
/// The admission webhook component.
pub const COMPONENT_WEBHOOK: &str = "webhook";
/// The self-managed CA (certificates and keys; never mounted by a server).
pub const CA_SECRET: &str = "numaresources-ca";
/// The API server replicas' peer pair Secret their Deployment mounts (`kubernetes.io/tls` plus
/// `ca.crt`).
pub const PEER_SECRET: &str = "numaresources-apiserver-peer";
/// The peer CA with its key (`Opaque`, never mounted).
pub const PEER_CA_SECRET: &str = "numaresources-apiserver-peer-ca";
/// The self-managed certificates' component.
pub const COMPONENT_CERTIFICATES: &str = "certificates";
/// The APIService that routes `topology.node.k8s.io/v1alpha2` to it.
pub const APISERVICE: &str = "v1alpha2.topology.node.k8s.io";
/// The upstream NRT CRD, which must not coexist with our APIService.
pub const NRT_CRD: &str = "noderesourcetopologies.topology.node.k8s.io";

/// The secondary scheduler's Deployment and ServiceAccount.
pub const SCHEDULER: &str = "numaresources-scheduler";
/// Its `KubeSchedulerConfiguration` ConfigMap.
pub const SCHEDULER_CONFIG: &str = "numaresources-scheduler-config";
/// Its ClusterRole (NRT read) and the bindings to the built-in scheduler roles.
pub const SCHEDULER_CLUSTER_ROLE: &str = "numaresources:scheduler";
/// Its leader-election Role and RoleBinding.
pub const SCHEDULER_LEADER_ROLE: &str = "numaresources-scheduler-leader-elect";
/// The scheduler's leader-election Lease (upstream's name).
pub const SCHEDULER_LEADER_LEASE: &str = "numa-scheduler-leader";

/// The Lease the controllers elect their leader with.
pub const CONTROLLERS_LEASE: &str = "numaresources-controllers";

/// `<nro>-<pool>`: the exporter DaemonSet and ConfigMap of one node group (the upstream
/// operator's names, so its users and tooling find them).
pub fn node_group_object_name(nro: &str, pool: &str) -> String {
    format!("{nro}-{pool}")
}

/// The `app.kubernetes.io/*` labels of a component's objects.
pub fn labels(name: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_owned(), name.to_owned()),
        (LABEL_PART_OF.to_owned(), PRODUCT.to_owned()),
        (LABEL_COMPONENT.to_owned(), component.to_owned()),
        (LABEL_MANAGED_BY.to_owned(), FIELD_MANAGER.to_owned()),
    ])
}

/// The labels a component's pods are selected by (stable: a selector cannot change).
pub fn selector_labels(name: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_NAME.to_owned(), name.to_owned()), (LABEL_COMPONENT.to_owned(), component.to_owned())])
}
