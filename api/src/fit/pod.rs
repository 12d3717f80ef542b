//! What a pod asks for, as the NUMA filter reads it: per-container requests, the pod's QoS class
//! ([`crate::qos`]) and its effective request.

use std::collections::BTreeMap;
use std::fmt;

use compact_str::CompactString;
use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use serde::Serialize;

use crate::qos::{QosClass, is_native, qos_class};
use crate::quantity::Quantity;

/// Amounts per resource name, in thousandths of the resource's unit (millicores for `cpu`,
/// millibytes for memory), so fractional CPUs compare exactly.
pub type Resources = BTreeMap<String, i64>;

/// Which part of the pod a request belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "camelCase")]
pub enum Requester {
    /// An init container (runs alone, before the app containers).
    InitContainer(CompactString),
    /// A restartable init container (`restartPolicy: Always`): started before the app
    /// containers and running beside them.
    Sidecar(CompactString),
    /// An app container.
    Container(CompactString),
    /// The whole pod (topology manager scope `pod`).
    Pod,
}

impl fmt::Display for Requester {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InitContainer(name) => write!(f, "init container {name:?}"),
            Self::Sidecar(name) => write!(f, "sidecar container {name:?}"),
            Self::Container(name) => write!(f, "container {name:?}"),
            Self::Pod => f.write_str("the pod"),
        }
    }
}

/// One container's non-zero requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRequests {
    /// Whose requests these are.
    pub requester: Requester,
    /// The requests, zero amounts left out (the filter skips them).
    pub requests: Resources,
}

/// Something about the pod itself that changes what the NUMA filter does with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "camelCase")]
pub enum PodProblem {
    /// BestEffort with no extended resources: the filter lets it through everywhere.
    BestEffort,
    /// Burstable: cpu, memory and hugepages pass on every zone; only devices are checked, and
    /// the kubelet aligns nothing.
    NotGuaranteed,
    /// A Guaranteed container with a fractional CPU request gets shared CPUs, not exclusive
    /// ones, so its CPUs are not NUMA-aligned whatever the scheduler decides.
    FractionalCpu {
        /// The container.
        container: String,
        /// Its CPU request, as written.
        cpu: String,
    },
    /// A request or limit that is not a quantity; counted as zero.
    InvalidQuantity {
        /// The container.
        container: String,
        /// The resource.
        resource: String,
        /// The text found.
        value: String,
    },
}

impl fmt::Display for PodProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BestEffort => f.write_str(
                "the pod is BestEffort (no cpu or memory requests): the NUMA filter lets it through on every node",
            ),
            Self::NotGuaranteed => f.write_str(
                "the pod is not Guaranteed (requests != limits): the NUMA filter ignores its cpu, memory and \
                 hugepages, and the kubelet does not align it",
            ),
            Self::FractionalCpu { container, cpu } => write!(
                f,
                "container {container:?} requests a fractional cpu ({cpu}): it runs on shared CPUs, not NUMA-aligned"
            ),
            Self::InvalidQuantity { container, resource, value } => {
                write!(f, "container {container:?}: {resource} {value:?} is not a quantity (counted as 0)")
            }
        }
    }
}

/// Everything the filter and the scorer need from a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRequests {
    /// The QoS class.
    pub qos: QosClass,
    /// Init containers, in order.
    pub init_containers: Vec<ContainerRequests>,
    /// App containers, in order.
    pub containers: Vec<ContainerRequests>,
    /// The pod overhead (RuntimeClass).
    pub overhead: Resources,
    /// What makes the pod special for the filter.
    pub problems: Vec<PodProblem>,
}

impl PodRequests {
    /// Reads a pod's spec. Requests left out but limited are taken as the limits, as the API
    /// server's defaulting does, so an un-applied manifest reads like the stored pod.
    pub fn from_pod(pod: &Pod) -> Self {
        let empty = Vec::new();
        let spec = pod.spec.as_ref();
        let init = spec.and_then(|s| s.init_containers.as_ref()).unwrap_or(&empty);
        let app = spec.map_or(&empty, |s| &s.containers);
        let mut problems = Vec::new();
        let mut read = |container: &Container, requester: Requester| {
            let requests = effective_container_requests(container, &mut problems);
            ContainerRequests { requester, requests }
        };
        let init_containers: Vec<_> = init
            .iter()
            .map(|c| {
                let requester = if crate::qos::is_sidecar(c) {
                    Requester::Sidecar(c.name.as_str().into())
                } else {
                    Requester::InitContainer(c.name.as_str().into())
                };
                read(c, requester)
            })
            .collect();
        let containers: Vec<_> = app.iter().map(|c| read(c, Requester::Container(c.name.as_str().into()))).collect();
        let overhead =
            spec.and_then(|s| s.overhead.as_ref()).map(|o| amounts(o, "overhead", &mut problems)).unwrap_or_default();
        let qos = spec.map_or(QosClass::BestEffort, qos_class);
        match qos {
            QosClass::BestEffort => problems.insert(0, PodProblem::BestEffort),
            QosClass::Burstable => problems.insert(0, PodProblem::NotGuaranteed),
            QosClass::Guaranteed => {
                for container in init.iter().chain(app) {
                    if let Some(cpu) = request_text(container.resources.as_ref(), "cpu")
                        && Quantity::parse(cpu).ok().and_then(|q| q.ceil_milli_i64()).is_some_and(|m| m % 1000 != 0)
                    {
                        problems
                            .push(PodProblem::FractionalCpu { container: container.name.clone(), cpu: cpu.to_owned() });
                    }
                }
            }
        }
        Self { qos, init_containers, containers, overhead, problems }
    }

    /// The pod's effective request, as kube-scheduler and the kubelet count it: per resource, the
    /// larger of the app containers' sum plus every sidecar, and the largest init container
    /// plus the sidecars started before it; then the overhead.
    pub fn effective(&self) -> Resources {
        let mut sidecars = Resources::new();
        let mut init_peak = Resources::new();
        for container in &self.init_containers {
            for (name, amount) in &container.requests {
                let before = sidecars.get(name).copied().unwrap_or_default();
                if matches!(container.requester, Requester::Sidecar(_)) {
                    sidecars.insert(name.clone(), before.saturating_add(*amount));
                } else {
                    let peak = init_peak.entry(name.clone()).or_default();
                    *peak = (*peak).max(before.saturating_add(*amount));
                }
            }
        }
        let mut total = sidecars;
        for container in &self.containers {
            for (name, amount) in &container.requests {
                let entry = total.entry(name.clone()).or_default();
                *entry = entry.saturating_add(*amount);
            }
        }
        for (name, peak) in init_peak {
            let entry = total.entry(name).or_default();
            *entry = (*entry).max(peak);
        }
        for (name, amount) in &self.overhead {
            let entry = total.entry(name.clone()).or_default();
            *entry = entry.saturating_add(*amount);
        }
        total.retain(|_, amount| *amount != 0);
        total
    }

    /// Whether any container requests a resource outside the `kubernetes.io` namespace.
    pub fn has_non_native_requests(&self) -> bool {
        self.init_containers.iter().chain(&self.containers).any(|c| c.requests.keys().any(|r| !is_native(r)))
    }
}

/// Requests, with limits standing in for requests left out; zero amounts dropped.
fn effective_container_requests(container: &Container, problems: &mut Vec<PodProblem>) -> Resources {
    let Some(resources) = container.resources.as_ref() else { return Resources::new() };
    let mut merged = resources.limits.clone().unwrap_or_default();
    merged.extend(resources.requests.clone().unwrap_or_default());
    let mut amounts = amounts(&merged, &container.name, problems);
    amounts.retain(|_, amount| *amount != 0);
    amounts
}

fn amounts(
    list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    container: &str,
    problems: &mut Vec<PodProblem>,
) -> Resources {
    let mut out = Resources::new();
    for (name, value) in list {
        match Quantity::parse(&value.0) {
            // Beyond i64 thousandths (9 exabytes) is beyond any machine: saturate.
            Ok(quantity) => {
                out.insert(name.clone(), quantity.ceil_milli_i64().unwrap_or(i64::MAX).max(0));
            }
            Err(_) => problems.push(PodProblem::InvalidQuantity {
                container: container.to_owned(),
                resource: name.clone(),
                value: value.0.clone(),
            }),
        }
    }
    out
}

fn request_text<'a>(resources: Option<&'a ResourceRequirements>, name: &str) -> Option<&'a str> {
    let resources = resources?;
    let pick = |list: Option<&'a BTreeMap<String, _>>| {
        list.and_then(|l| l.get(name))
            .map(|q: &'a k8s_openapi::apimachinery::pkg::api::resource::Quantity| q.0.as_str())
    };
    pick(resources.requests.as_ref()).or_else(|| pick(resources.limits.as_ref()))
}

/// The amount written back in the resource's usual form: `6`, `500m`, `2Gi`.
pub fn format_amount(resource: &str, millis: i64) -> String {
    Amount(resource, millis).to_string()
}

/// An amount of a resource (thousandths), displayed as [`format_amount`] writes it, without an
/// intermediate string.
#[derive(Debug, Clone, Copy)]
pub struct Amount<'a>(pub &'a str, pub i64);

impl fmt::Display for Amount<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self(resource, millis) = *self;
        if millis % 1000 != 0 {
            return write!(f, "{millis}m");
        }
        let whole = millis / 1000;
        if resource == "cpu" || !is_native(resource) {
            write!(f, "{}", Quantity::from_i64(whole))
        } else {
            write!(f, "{}", Quantity::from_i64_binary(whole))
        }
    }
}
