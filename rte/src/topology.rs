//! The node's NodeResourceTopology object, assembled from one scan: zones from the accounting,
//! topology-manager attributes, the pods fingerprint and the NUMA placement of pinned
//! containers. Pure.

use std::collections::BTreeMap;

use numaresources_api::exporter::TopologyManager;
use numaresources_api::nrt::well_known::{
    ANNOTATION_FINGERPRINT, ATTR_PODS_FINGERPRINT, ATTR_PODS_FINGERPRINT_METHOD, ATTR_TOPOLOGY_MANAGER_POLICY,
    ATTR_TOPOLOGY_MANAGER_SCOPE, TOPOLOGY_MANAGER_POLICIES, TOPOLOGY_MANAGER_SCOPES,
};
use numaresources_api::nrt::{AttributeInfo, NodeResourceTopology};

use crate::accounting::{self, KubeletView};
use crate::fingerprint::{Fingerprint, FingerprintPod, Method};
use crate::numaplacement::{self, PodAffinity};
use crate::podresources::PodResources;
use crate::sysfs::Machine;

/// Why a kubelet configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KubeletConfigError {
    /// Not YAML (or JSON).
    #[error("the kubelet configuration is not valid YAML: {0}")]
    Parse(#[from] serde_norway::Error),
    /// A value the kubelet would not accept.
    #[error("unsupported {field} {value:?} in the kubelet configuration: expected one of {expected:?}")]
    Unsupported {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What the kubelet accepts.
        expected: &'static [&'static str],
    },
}

/// Reads `topologyManagerPolicy` and `topologyManagerScope` from a `KubeletConfiguration` file
/// (YAML or JSON); a missing field takes the kubelet's default, because that is what the kubelet
/// runs with.
pub fn read_kubelet_config(text: &str) -> Result<TopologyManager, KubeletConfigError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct KubeletConfiguration {
        topology_manager_policy: Option<String>,
        topology_manager_scope: Option<String>,
    }
    let config: KubeletConfiguration = serde_norway::from_str(text)?;
    let defaults = TopologyManager::kubelet_defaults();
    let policy = config.topology_manager_policy.filter(|p| !p.is_empty()).unwrap_or(defaults.policy);
    let scope = config.topology_manager_scope.filter(|s| !s.is_empty()).unwrap_or(defaults.scope);
    check("topologyManagerPolicy", &policy, TOPOLOGY_MANAGER_POLICIES)?;
    check("topologyManagerScope", &scope, TOPOLOGY_MANAGER_SCOPES)?;
    Ok(TopologyManager { policy, scope })
}

fn check(field: &'static str, value: &str, expected: &'static [&'static str]) -> Result<(), KubeletConfigError> {
    if expected.contains(&value) {
        Ok(())
    } else {
        Err(KubeletConfigError::Unsupported { field, value: value.to_owned(), expected })
    }
}

impl FingerprintPod for PodResources {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn has_exclusive_resources(&self) -> bool {
        self.containers.iter().any(|c| {
            !c.cpu_ids.is_empty()
                || c.memory.iter().any(|m| !m.affinity.nodes().is_empty())
                || c.devices.iter().any(|d| !d.device_ids.is_empty() && !d.affinity.nodes().is_empty())
        })
    }
}

/// One scan's inputs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scan<'a> {
    /// The node's name (the object's name).
    pub node_name: &'a str,
    /// The machine.
    pub machine: &'a Machine,
    /// What the kubelet reported, if it could be asked.
    pub kubelet: Option<KubeletView<'a>>,
    /// Topology manager settings.
    pub topology_manager: &'a TopologyManager,
    /// Which pods the fingerprint covers; `None` disables it.
    pub fingerprint: Option<Method>,
}

/// The object to publish for one scan. Attributes come in upstream's order: fingerprint and
/// method, NUMA placement metadata, then scope and policy; the fingerprint also goes into the
/// legacy annotation. Without a kubelet there are no pods to fingerprint, so none is published.
///
/// NUMA placement is published exactly when upstream publishes it: inside the fingerprint
/// branch (fingerprint on, a kubelet asked), under the policy `single-numa-node`, over every
/// NUMA-eligible pod whatever the fingerprint method. Any placement error (a CPU sysfs does not
/// know, a device or memory block on two nodes, …) drops the whole payload for this scan:
/// no metadata attribute and no zone vector, the fingerprint still published.
pub(crate) fn node_topology(scan: &Scan<'_>) -> NodeResourceTopology {
    let mut nrt = NodeResourceTopology::new(scan.node_name);
    nrt.zones = accounting::zones(scan.machine, scan.kubelet);
    if let (Some(method), Some(kubelet)) = (scan.fingerprint, scan.kubelet) {
        let signature = Fingerprint::from_pods(method, kubelet.pods).sign();
        nrt.attributes.push(AttributeInfo::new(ATTR_PODS_FINGERPRINT, &signature));
        nrt.attributes.push(AttributeInfo::new(ATTR_PODS_FINGERPRINT_METHOD, method.as_str()));
        nrt.metadata.annotations = Some(BTreeMap::from([(ANNOTATION_FINGERPRINT.to_owned(), signature)]));
        let pods: Vec<PodAffinity> = kubelet.pods.iter().map(PodAffinity::from).collect();
        let machine = scan.machine;
        let payload =
            numaplacement::scan_payload(&scan.topology_manager.policy, machine.numa_id_bound(), &pods, |cpu| {
                machine.numa_of_cpu(cpu)
            });
        match payload {
            // Appends the metadata after the fingerprint attributes and sets the zone vectors.
            Ok(payload) => payload.apply_to(&mut nrt),
            Err(error) => {
                tracing::debug!(%error, "containers NUMA-placement detection: no placement published this scan")
            }
        }
    }
    nrt.attributes.push(AttributeInfo::new(ATTR_TOPOLOGY_MANAGER_SCOPE, &scan.topology_manager.scope));
    nrt.attributes.push(AttributeInfo::new(ATTR_TOPOLOGY_MANAGER_POLICY, &scan.topology_manager.policy));
    nrt
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podresources::{Allocatable, ContainerResources};
    use crate::sysfs::{Layout, NumaNode};

    fn machine() -> Machine {
        Machine {
            layout: Layout::Numa,
            nodes: vec![NumaNode {
                id: 0,
                cpus: vec![0, 1],
                cores: Vec::new(),
                distances: BTreeMap::from([(0, 10)]),
                memory_bytes: 1 << 30,
                hugepages: Vec::new(),
            }],
        }
    }

    #[test]
    fn kubelet_config_gives_policy_and_scope_or_the_kubelet_defaults() {
        let config = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ntopologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n";
        let tm = read_kubelet_config(config).unwrap();
        assert_eq!((tm.policy.as_str(), tm.scope.as_str()), ("single-numa-node", "pod"));
        let tm = read_kubelet_config("kind: KubeletConfiguration\n").unwrap();
        assert_eq!(tm, TopologyManager::kubelet_defaults());
        assert!(read_kubelet_config("topologyManagerPolicy: numa-please\n").is_err());
        assert!(read_kubelet_config("{ not yaml").is_err());
    }

    #[test]
    fn the_published_object_carries_attributes_in_upstream_order() {
        let pods = [PodResources {
            namespace: "telco".into(),
            name: "dpdk-app-7c9f8b6d5-x2k4q".into(),
            containers: vec![ContainerResources { cpu_ids: vec![1], ..ContainerResources::default() }],
        }];
        let allocatable = Allocatable { cpu_ids: vec![0, 1], ..Allocatable::default() };
        let tm = TopologyManager { policy: "single-numa-node".into(), scope: "container".into() };
        let nrt = node_topology(&Scan {
            node_name: "worker-0",
            machine: &machine(),
            kubelet: Some(KubeletView { allocatable: &allocatable, pods: &pods }),
            topology_manager: &tm,
            fingerprint: Some(Method::WithExclusiveResources),
        });
        let names: Vec<&str> = nrt.attributes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "nodeTopologyPodsFingerprint",
                "nodeTopologyPodsFingerprintMethod",
                "topology.node.k8s.io/numaplacement-metadata",
                "topologyManagerScope",
                "topologyManagerPolicy"
            ]
        );
        assert_eq!(nrt.attributes[2].value, "npv0v001::ve=leb89::cc=1::nn=1::bn=0");
        // The fingerprint of this one pod, as upstream's algorithm v001 signs it.
        assert_eq!(nrt.attributes[0].value, "pfp0v001a9cddfe43845cd3a");
        assert_eq!(nrt.attributes[1].value, "with-exclusive-resources");
        assert_eq!(nrt.metadata.annotations.unwrap()["topology.node.k8s.io/fingerprint"], "pfp0v001a9cddfe43845cd3a");
        assert_eq!(nrt.zones[0].resources[0].available.as_i64(), Some(1));
    }

    #[test]
    fn without_a_kubelet_only_the_topology_manager_is_published() {
        let nrt = node_topology(&Scan {
            node_name: "laptop",
            machine: &machine(),
            kubelet: None,
            topology_manager: &TopologyManager::kubelet_defaults(),
            fingerprint: Some(Method::All),
        });
        assert_eq!(nrt.attribute("topologyManagerPolicy"), Some("none"));
        assert_eq!(nrt.attribute("nodeTopologyPodsFingerprint"), None);
    }
}
