//! One row per rule of `ComputePodQOS` and of the kubelet's exclusive allocation.

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::*;

fn list(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, K8sQuantity>> {
    (!pairs.is_empty()).then(|| pairs.iter().map(|(k, v)| ((*k).to_owned(), K8sQuantity((*v).to_owned()))).collect())
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
        ("no resources field", pod(vec![Container { name: "a".into(), ..Container::default() }], vec![]), BestEffort),
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
        let want =
            want.map(|(container, init, resource)| ExclusiveRequest { container: container.into(), init, resource });
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn explanations_read_well() {
    let request =
        ExclusiveRequest { container: "app".into(), init: false, resource: Exclusive::IntegralCpu("2".into()) };
    assert_eq!(request.to_string(), "container \"app\" requests whole CPUs (cpu: 2)");
    let request =
        ExclusiveRequest { container: "i".into(), init: true, resource: Exclusive::Device("example.com/vf".into()) };
    assert_eq!(request.to_string(), "init container \"i\" requests a device (example.com/vf)");
}

#[test]
fn memory_is_aligned_for_the_kubelet_but_routes_no_pod() {
    let container = container("app", &[("cpu", "500m"), ("memory", "1Gi")], &[]);
    assert_eq!(exclusive_requests(&container).collect::<Vec<_>>(), vec![Exclusive::Memory]);
    assert_eq!(first_exclusive_request(&pod(vec![container], vec![])), None, "every Guaranteed pod asks for memory");
}

#[test]
fn a_sidecar_is_an_init_container_that_keeps_running() {
    let mut sidecar = container("proxy", &[], &[]);
    assert!(!is_sidecar(&sidecar));
    sidecar.restart_policy = Some("Always".into());
    assert!(is_sidecar(&sidecar));
}
