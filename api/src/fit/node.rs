//! kube-scheduler's own NodeResourcesFit filter, which a pod passes before any NUMA rule counts:
//! the Node's allocatable resources, less what the pods bound to it request, must hold the pod's
//! request, and one more pod. A node whose topology manager policy the NUMA filter does not check
//! still refuses a pod here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use serde::Serialize;

use super::pod::{PodRequests, Resources, format_amount};
use crate::quantity::Quantity;

/// The resource name of the Node's pod slots.
pub(super) const PODS: &str = "pods";

/// One Node's allocatable resources and what the pods bound to it request (thousandths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeResources {
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// The sum of the bound pods' effective requests, a pod slot each.
    pub requested: Resources,
}

/// Why the Node itself cannot take the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeShortfall {
    /// The resource.
    pub resource: String,
    /// What the pod requests (thousandths).
    pub requested: i64,
    /// What the Node has left (thousandths).
    pub free: i64,
    /// The Node's allocatable (thousandths).
    pub allocatable: i64,
}

impl std::fmt::Display for NodeShortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let amount = |millis| format_amount(&self.resource, millis);
        if self.allocatable == 0 {
            return write!(f, "the Node offers no {} (kube-scheduler refuses it before any NUMA rule)", self.resource);
        }
        write!(
            f,
            "insufficient {} on the Node: {} free of {} allocatable < {} requested (kube-scheduler refuses it before any NUMA rule)",
            self.resource,
            amount(self.free),
            amount(self.allocatable),
            amount(self.requested)
        )
    }
}

impl NodeResources {
    /// A Node's `status.allocatable` (quantities that do not parse count as none).
    pub fn new(allocatable: &BTreeMap<String, KubeQuantity>) -> Self {
        let allocatable = allocatable
            .iter()
            .filter_map(|(name, value)| {
                let millis = Quantity::parse(&value.0).ok()?.ceil_milli_i64().unwrap_or(i64::MAX);
                Some((name.clone(), millis.max(0)))
            })
            .collect();
        Self { allocatable, requested: Resources::new() }
    }

    /// Counts `pods`, bound to the node and not terminated, against it.
    #[must_use]
    pub fn with_pods<'a>(mut self, pods: impl IntoIterator<Item = &'a Pod>) -> Self {
        for pod in pods {
            add(&mut self.requested, &PodRequests::from_pod(pod).effective());
            add(&mut self.requested, &one_pod());
        }
        self
    }

    /// The first resource (by name) the Node cannot give `pod`, if any.
    pub fn shortfall(&self, pod: &PodRequests) -> Option<NodeShortfall> {
        let mut wanted = pod.effective();
        add(&mut wanted, &one_pod());
        wanted.into_iter().filter(|(_, requested)| *requested > 0).find_map(|(resource, requested)| {
            // A Node that lists no pod slots at all (not one a kubelet registered) is not
            // limited by them.
            if resource == PODS && !self.offers(PODS) {
                return None;
            }
            let allocatable = self.allocatable.get(&resource).copied().unwrap_or(0);
            let free = self.free(&resource);
            (free < requested).then_some(NodeShortfall { resource, requested, free, allocatable })
        })
    }

    /// What is left of `resource` once the bound pods' requests are taken (never below zero).
    pub fn free(&self, resource: &str) -> i64 {
        let allocatable = self.allocatable.get(resource).copied().unwrap_or(0);
        allocatable.saturating_sub(self.requested.get(resource).copied().unwrap_or(0)).max(0)
    }

    /// Whether the Node lists `resource` as allocatable.
    pub fn offers(&self, resource: &str) -> bool {
        self.allocatable.contains_key(resource)
    }
}

fn one_pod() -> Resources {
    Resources::from([(PODS.to_owned(), 1000)])
}

fn add(total: &mut Resources, more: &Resources) {
    for (name, amount) in more {
        let entry = total.entry(name.clone()).or_default();
        *entry = entry.saturating_add(*amount);
    }
}
