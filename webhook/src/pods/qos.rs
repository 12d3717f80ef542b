//! What a pod asks for, read the way the kubelet reads it: its QoS class and whether any
//! container needs resources that the kubelet's managers pin to NUMA zones.
//!
//! A mutating webhook sees the pod before `status.qosClass` is set, so the class is derived here
//! from the resources, as Kubernetes' `ComputePodQOS` does (pod-level `spec.resources` when set,
//! else every app and init container; ephemeral containers cannot ask for resources).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use numaresources_api::Quantity;

/// A pod's Kubernetes QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    /// cpu and memory limits equal to requests, everywhere.
    Guaranteed,
    /// Some requests or limits, not Guaranteed.
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

/// The QoS class Kubernetes will give the pod.
pub fn qos_class(spec: &PodSpec) -> QosClass {
    match &spec.resources {
        Some(pod_level) => classify(std::iter::once(Some(pod_level))),
        None => {
            classify(spec.containers.iter().chain(spec.init_containers.iter().flatten()).map(|c| c.resources.as_ref()))
        }
    }
}

/// Requests default to limits (API defaulting has usually done it already; the webhook does
/// not rely on that). Only non-zero cpu and memory count, as in `ComputePodQOS`.
fn classify<'a>(all: impl Iterator<Item = Option<&'a ResourceRequirements>>) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    for resources in all {
        let limits = qos_quantities(resources.and_then(|r| r.limits.as_ref()), None);
        let requests =
            qos_quantities(resources.and_then(|r| r.requests.as_ref()), resources.and_then(|r| r.limits.as_ref()));
        any |= !limits.is_empty() || !requests.is_empty();
        if limits.len() != QOS_RESOURCES.len() || requests != limits {
            guaranteed = false;
        }
    }
    match (any, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    }
}

/// Non-zero cpu and memory of `primary`, each falling back to `fallback` when absent.
fn qos_quantities(
    primary: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    fallback: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<&'static str, Quantity> {
    QOS_RESOURCES
        .into_iter()
        .filter_map(|name| {
            let text = primary.and_then(|m| m.get(name)).or_else(|| fallback.and_then(|m| m.get(name)))?;
            let quantity = Quantity::parse(&text.0).ok()?;
            (!quantity.is_zero()).then_some((name, quantity))
        })
        .collect()
}

/// A resource the kubelet allocates exclusively and aligns to NUMA zones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusive {
    /// A whole number of CPUs (the static CPU manager pins them).
    IntegralCpu(String),
    /// Hugepages of some size (the memory manager places them).
    Hugepages(String),
    /// A device or other extended resource (the device manager allocates it).
    Device(String),
}

/// The first exclusive resource of a pod: the container that asks for it, and what.
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
            Exclusive::Hugepages(name) => write!(f, "requests hugepages ({name})"),
            Exclusive::Device(name) => write!(f, "requests a device ({name})"),
        }
    }
}

/// The first container (app containers first, then init containers) that asks for an integral
/// number of CPUs, hugepages, or an extended resource.
pub fn first_exclusive_request(spec: &PodSpec) -> Option<ExclusiveRequest> {
    let app = spec.containers.iter().map(|c| (c, false));
    let init = spec.init_containers.iter().flatten().map(|c| (c, true));
    app.chain(init).find_map(|(container, init)| {
        exclusive_in(container).map(|resource| ExclusiveRequest { container: container.name.clone(), init, resource })
    })
}

fn exclusive_in(container: &Container) -> Option<Exclusive> {
    let resources = container.resources.as_ref()?;
    let requests = resources.requests.iter().flatten();
    // A resource given only as a limit is requested at that value (API defaulting).
    let limits_only = resources
        .limits
        .iter()
        .flatten()
        .filter(|(name, _)| !resources.requests.as_ref().is_some_and(|r| r.contains_key(*name)));
    requests.chain(limits_only).find_map(|(name, text)| {
        let quantity = Quantity::parse(&text.0).ok().filter(|q| !q.is_zero() && !q.is_negative())?;
        if name == "cpu" {
            is_whole(&quantity).then(|| Exclusive::IntegralCpu(text.0.clone()))
        } else if name.starts_with("hugepages-") {
            Some(Exclusive::Hugepages(name.clone()))
        } else if is_extended_resource(name) {
            Some(Exclusive::Device(name.clone()))
        } else {
            None
        }
    })
}

fn is_whole(quantity: &Quantity) -> bool {
    quantity.ceil_milli_i64().is_some_and(|milli| milli % 1000 == 0)
}

/// Kubernetes' `IsExtendedResourceName`: a domain-qualified name outside `kubernetes.io/`, not a
/// quota `requests.` name, and valid as `requests.<name>`.
fn is_extended_resource(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native
        && !name.starts_with("requests.")
        && numaresources_api::selector::check_qualified_name(&format!("requests.{name}")).is_ok()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

    use super::*;

    fn list(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, K8sQuantity>> {
        (!pairs.is_empty())
            .then(|| pairs.iter().map(|(k, v)| ((*k).to_owned(), K8sQuantity((*v).to_owned()))).collect())
    }

    fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements { requests: list(requests), limits: list(limits), claims: None }),
            ..Container::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
        PodSpec { containers, init_containers: (!init.is_empty()).then_some(init), ..PodSpec::default() }
    }

    /// A pod of one container, `app`.
    fn app(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> PodSpec {
        pod(vec![container("app", requests, limits)], vec![])
    }

    const G: &[(&str, &str)] = &[("cpu", "2"), ("memory", "1Gi")];

    #[test]
    fn qos_classes_one_row_per_rule() {
        use QosClass::*;
        let rows: Vec<(&str, PodSpec, QosClass)> = vec![
            ("requests equal limits", app(G, G), Guaranteed),
            ("limits only: requests default to them", app(&[], G), Guaranteed),
            (
                "1000m equals 1",
                app(&[("cpu", "1000m"), ("memory", "1Gi")], &[("cpu", "1"), ("memory", "1024Mi")]),
                Guaranteed,
            ),
            (
                "fractional but equal",
                app(&[("cpu", "500m"), ("memory", "256Mi")], &[("cpu", "500m"), ("memory", "256Mi")]),
                Guaranteed,
            ),
            ("requests below limits", app(&[("cpu", "1"), ("memory", "512Mi")], G), Burstable),
            ("no memory limit", app(&[("cpu", "2")], &[("cpu", "2")]), Burstable),
            ("requests only", app(G, &[]), Burstable),
            ("nothing at all", app(&[], &[]), BestEffort),
            (
                "no resources field",
                pod(vec![Container { name: "a".into(), ..Container::default() }], vec![]),
                BestEffort,
            ),
            ("zero values do not count", app(&[("cpu", "0")], &[("cpu", "0")]), BestEffort),
            (
                "hugepages alone do not decide QoS",
                app(&[("hugepages-2Mi", "64Mi")], &[("hugepages-2Mi", "64Mi")]),
                BestEffort,
            ),
            (
                "one app container without limits",
                pod(vec![container("a", G, G), container("b", &[], &[])], vec![]),
                Burstable,
            ),
            (
                "init container counted",
                pod(vec![container("a", G, G)], vec![container("i", &[("cpu", "1")], &[])]),
                Burstable,
            ),
            (
                "init container Guaranteed too",
                pod(
                    vec![container("a", G, G)],
                    vec![container("i", &[("cpu", "1"), ("memory", "128Mi")], &[("cpu", "1"), ("memory", "128Mi")])],
                ),
                Guaranteed,
            ),
        ];
        for (name, spec, want) in rows {
            assert_eq!(qos_class(&spec), want, "{name}");
        }
    }

    #[test]
    fn pod_level_resources_decide_when_present() {
        let mut spec = app(&[], &[]);
        spec.resources = Some(ResourceRequirements { requests: None, limits: list(G), claims: None });
        assert_eq!(qos_class(&spec), QosClass::Guaranteed, "pod-level limits, requests defaulted");
        spec.resources = Some(ResourceRequirements { requests: list(&[("cpu", "1")]), limits: list(G), claims: None });
        assert_eq!(qos_class(&spec), QosClass::Burstable, "pod-level requests below limits");
        let mut containers_guaranteed = app(G, G);
        containers_guaranteed.resources =
            Some(ResourceRequirements { requests: list(&[("cpu", "1")]), limits: None, claims: None });
        assert_eq!(qos_class(&containers_guaranteed), QosClass::Burstable, "the pod level wins over containers");
    }

    #[test]
    fn exclusive_resources_one_row_per_rule() {
        let cpu = |c: &str| Exclusive::IntegralCpu(c.into());
        type Row = (&'static str, PodSpec, Option<(&'static str, bool, Exclusive)>);
        let rows: Vec<Row> = vec![
            ("integral cpu", app(G, G), Some(("app", false, cpu("2")))),
            ("integral cpu written in millis", app(&[("cpu", "2000m")], &[]), Some(("app", false, cpu("2000m")))),
            ("integral cpu given as a limit only", app(&[], &[("cpu", "3")]), Some(("app", false, cpu("3")))),
            ("fractional cpu", app(&[("cpu", "1500m")], &[]), None),
            ("zero cpu", app(&[("cpu", "0")], &[]), None),
            ("memory only", app(&[("memory", "1Gi")], &[]), None),
            (
                "hugepages with fractional cpu",
                app(&[("cpu", "500m"), ("hugepages-1Gi", "1Gi")], &[]),
                Some(("app", false, Exclusive::Hugepages("hugepages-1Gi".into()))),
            ),
            (
                "a device",
                app(&[("cpu", "100m"), ("example.com/sriov_vf", "1")], &[]),
                Some(("app", false, Exclusive::Device("example.com/sriov_vf".into()))),
            ),
            (
                "a GPU",
                app(&[], &[("nvidia.com/gpu", "1")]),
                Some(("app", false, Exclusive::Device("nvidia.com/gpu".into()))),
            ),
            ("kubernetes.io/ names are native", app(&[("example.kubernetes.io/thing", "1")], &[]), None),
            ("ephemeral-storage is native", app(&[("ephemeral-storage", "1Gi")], &[]), None),
            ("quota names are not extended resources", app(&[("requests.example.com/x", "1")], &[]), None),
            (
                "init container only",
                pod(vec![container("app", &[("cpu", "500m")], &[])], vec![container("setup", &[("cpu", "1")], &[])]),
                Some(("setup", true, cpu("1"))),
            ),
            (
                "app container reported before init",
                pod(
                    vec![container("a", &[], &[]), container("b", &[("cpu", "4")], &[])],
                    vec![container("i", &[("cpu", "1")], &[])],
                ),
                Some(("b", false, cpu("4"))),
            ),
            ("no resources", pod(vec![Container { name: "app".into(), ..Container::default() }], vec![]), None),
        ];
        for (name, spec, want) in rows {
            let got = first_exclusive_request(&spec);
            let want = want.map(|(container, init, resource)| ExclusiveRequest {
                container: container.into(),
                init,
                resource,
            });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn explanations_read_well() {
        let request =
            ExclusiveRequest { container: "app".into(), init: false, resource: Exclusive::IntegralCpu("2".into()) };
        assert_eq!(request.to_string(), "container \"app\" requests whole CPUs (cpu: 2)");
        let request = ExclusiveRequest {
            container: "i".into(),
            init: true,
            resource: Exclusive::Device("example.com/vf".into()),
        };
        assert_eq!(request.to_string(), "init container \"i\" requests a device (example.com/vf)");
    }
}
