//! A pod as Kubernetes classes it: its QoS class, and which of its requests the kubelet's
//! managers allocate exclusively and align to NUMA zones. The webhook routes pods by these rules
//! and [`crate::fit`] filters them by the same ones.
//!
//! Pods are read before and after API defaulting alike (a mutating webhook sees a pod whose
//! requests may still be left to default to its limits), so a limit stands in for a request left
//! out, as defaulting would make it.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde::Serialize;

use crate::quantity::Quantity;

/// A pod's Kubernetes QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum QosClass {
    /// cpu and memory limited everywhere, and requests equal to limits.
    Guaranteed,
    /// Some cpu or memory request or limit, not Guaranteed.
    Burstable,
    /// No cpu or memory request or limit at all.
    BestEffort,
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
            Self::BestEffort => "BestEffort",
        })
    }
}

/// The only resources that decide the QoS class (`isSupportedQoSComputeResource`).
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The class Kubernetes gives the pod (`ComputePodQOS`). Pod-level `spec.resources`, when set,
/// decide alone; otherwise the app and init containers (sidecars included) do. Requests and
/// limits are summed over the containers and compared as totals, and every container must limit
/// both cpu and memory. Zero amounts do not count.
pub fn qos_class(spec: &PodSpec) -> QosClass {
    let mut requests = Totals::new();
    let mut limits = Totals::new();
    let mut every_part_limits_both = true;
    let mut add = |resources: Option<&ResourceRequirements>| {
        let limit_list = resources.and_then(|r| r.limits.as_ref());
        let request_list = resources.and_then(|r| r.requests.as_ref());
        let mut limited = 0;
        for name in QOS_RESOURCES {
            let limit = positive_milli(limit_list, name);
            let request = positive_milli(request_list, name).or(limit);
            if let Some(request) = request {
                add_to(&mut requests, name, request);
            }
            if let Some(limit) = limit {
                add_to(&mut limits, name, limit);
                limited += 1;
            }
        }
        if limited < QOS_RESOURCES.len() {
            every_part_limits_both = false;
        }
    };
    match &spec.resources {
        Some(pod_level) => add(Some(pod_level)),
        None => {
            spec.containers.iter().chain(spec.init_containers.iter().flatten()).for_each(|c| add(c.resources.as_ref()))
        }
    }
    if requests.is_empty() && limits.is_empty() {
        QosClass::BestEffort
    } else if every_part_limits_both && requests == limits {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// cpu and memory totals, in thousandths.
type Totals = BTreeMap<&'static str, i64>;

fn add_to(totals: &mut Totals, name: &'static str, milli: i64) {
    let total = totals.entry(name).or_default();
    *total = total.saturating_add(milli);
}

/// `name`'s amount in `list`, in thousandths, when it is a positive quantity.
fn positive_milli(list: Option<&BTreeMap<String, K8sQuantity>>, name: &str) -> Option<i64> {
    let quantity = Quantity::parse(&list?.get(name)?.0).ok()?;
    // Beyond i64 thousandths (9 exabytes) is beyond any machine: saturate.
    let milli = quantity.ceil_milli_i64().unwrap_or(if quantity.is_negative() { 0 } else { i64::MAX });
    (milli > 0).then_some(milli)
}

/// Kubernetes' `IsNativeResource`: no domain, or a `kubernetes.io` one.
pub fn is_native(resource: &str) -> bool {
    !resource.contains('/') || resource.contains("kubernetes.io/")
}

/// Whether the resource is a hugepages size (`hugepages-2Mi`).
pub fn is_hugepages(resource: &str) -> bool {
    resource.starts_with("hugepages-")
}

/// Kubernetes' `IsExtendedResourceName`: a domain-qualified name outside `kubernetes.io/`, not a
/// quota `requests.` name, and valid as `requests.<name>`. Devices are requested by such names.
pub fn is_extended_resource(resource: &str) -> bool {
    !is_native(resource)
        && !resource.starts_with("requests.")
        && crate::selector::check_qualified_name(&format!("requests.{resource}")).is_ok()
}

/// A request the kubelet allocates exclusively and aligns to NUMA zones (for the first three,
/// only in a Guaranteed pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusive {
    /// A whole number of CPUs, as written (the static CPU manager pins them).
    IntegralCpu(String),
    /// Memory (the Static memory manager places it).
    Memory,
    /// Hugepages of one size, by resource name (the memory manager places them).
    Hugepages(String),
    /// A device or other extended resource, by name (the device manager allocates it).
    Device(String),
}

impl Exclusive {
    /// What one positive request of `name` is to the kubelet's managers, if anything.
    fn of(name: &str, text: &str, quantity: &Quantity) -> Option<Self> {
        if name == "cpu" {
            quantity.ceil_milli_i64().is_some_and(|milli| milli % 1000 == 0).then(|| Self::IntegralCpu(text.to_owned()))
        } else if name == "memory" {
            Some(Self::Memory)
        } else if is_hugepages(name) {
            Some(Self::Hugepages(name.to_owned()))
        } else if is_extended_resource(name) {
            Some(Self::Device(name.to_owned()))
        } else {
            None
        }
    }
}

/// A container's exclusive requests, in resource-name order (requests, then resources given
/// only as limits).
pub fn exclusive_requests(container: &Container) -> impl Iterator<Item = Exclusive> + '_ {
    let resources = container.resources.as_ref();
    let requests = resources.and_then(|r| r.requests.as_ref());
    let limits_only = resources
        .and_then(|r| r.limits.as_ref())
        .into_iter()
        .flatten()
        .filter(move |(name, _)| !requests.is_some_and(|r| r.contains_key(*name)));
    requests.into_iter().flatten().chain(limits_only).filter_map(|(name, text)| {
        let quantity = Quantity::parse(&text.0).ok().filter(|q| !q.is_zero() && !q.is_negative())?;
        Exclusive::of(name, &text.0, &quantity)
    })
}

/// The containers whose requests the kubelet aligns to NUMA zones, and why: the first one found
/// (app containers first, then init containers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExclusiveRequest {
    /// The container's name.
    pub container: String,
    /// Whether it is an init container.
    pub init: bool,
    /// The resource.
    pub resource: Exclusive,
}

impl fmt::Display for ExclusiveRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.init { "init container" } else { "container" };
        write!(f, "{kind} {:?} ", self.container)?;
        match &self.resource {
            Exclusive::IntegralCpu(cpus) => write!(f, "requests whole CPUs (cpu: {cpus})"),
            Exclusive::Memory => f.write_str("requests memory"),
            Exclusive::Hugepages(name) => write!(f, "requests hugepages ({name})"),
            Exclusive::Device(name) => write!(f, "requests a device ({name})"),
        }
    }
}

/// What makes a Guaranteed pod worth placing by NUMA zone: the first container (app containers
/// first, then init containers, which the kubelet aligns too) that asks for whole CPUs,
/// hugepages or a device. Memory alone does not count: every Guaranteed pod asks for it.
pub fn first_exclusive_request(spec: &PodSpec) -> Option<ExclusiveRequest> {
    let app = spec.containers.iter().map(|c| (c, false));
    let init = spec.init_containers.iter().flatten().map(|c| (c, true));
    app.chain(init).find_map(|(container, init)| {
        exclusive_requests(container).find(|resource| *resource != Exclusive::Memory).map(|resource| ExclusiveRequest {
            container: container.name.clone(),
            init,
            resource,
        })
    })
}

/// Whether an init container keeps running beside the app containers (a sidecar).
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

#[cfg(test)]
mod tests;
