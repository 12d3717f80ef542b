//! Which pods go to the NUMA-aware scheduler, as one pure function: the pod, its
//! namespace's labels and the routing policy in, a decision with its reason out.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use numaresources_api::operator::{NUMAResourcesScheduler, PodRoutingMode};
use numaresources_api::selector;

use crate::{OPT_OUT_ANNOTATION, OPT_OUT_VALUE};
use numaresources_api::qos::{ExclusiveRequest, QosClass, first_exclusive_request, qos_class};

/// The scheduler every pod names unless told otherwise.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// What the `NUMAResourcesScheduler` says about routing.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingPolicy {
    /// The name the NUMA-aware scheduler runs with.
    pub scheduler_name: String,
    /// Which pods are routed.
    pub mode: PodRoutingMode,
    /// The namespaces whose pods are routed (none: all).
    pub namespace_selector: Option<LabelSelector>,
}

impl RoutingPolicy {
    /// The policy of a `NUMAResourcesScheduler`: the name it actually runs with
    /// (`status.schedulerName`, reported by the controller), else the one its spec asks for.
    pub fn of(scheduler: &NUMAResourcesScheduler) -> Self {
        let reported = scheduler.status.as_ref().map(|s| s.scheduler_name.as_str()).filter(|n| !n.is_empty());
        Self {
            scheduler_name: reported.unwrap_or_else(|| scheduler.spec.effective_scheduler_name()).to_owned(),
            mode: scheduler.spec.pod_routing_mode(),
            namespace_selector: scheduler.spec.pod_routing.as_ref().and_then(|r| r.namespace_selector.clone()),
        }
    }
}

/// Namespaces whose pods are never routed, whatever the selector says: the cluster's own, and
/// ours (a restart of the scheduler must never depend on the scheduler).
#[derive(Debug, Clone)]
pub struct SystemNamespaces {
    own: String,
}

impl SystemNamespaces {
    /// The system namespaces plus `own`, the namespace the components run in.
    pub fn new(own: impl Into<String>) -> Self {
        Self { own: own.into() }
    }

    /// Whether `namespace` is one of them.
    pub fn contains(&self, namespace: &str) -> bool {
        matches!(namespace, "kube-system" | "kube-public" | "kube-node-lease" | "openshift")
            || namespace.starts_with("openshift-")
            || namespace == self.own
    }
}

/// What the cluster caches know about the pod's namespace.
#[derive(Debug, Clone, Copy)]
pub enum NamespaceLabels<'a> {
    /// Its labels.
    Known(&'a BTreeMap<String, String>),
    /// Not in the cache (yet).
    Unknown,
}

/// The outcome for one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Set `spec.schedulerName` to `scheduler`.
    Route {
        /// The NUMA-aware scheduler's name.
        scheduler: String,
        /// Why.
        reason: RouteReason,
    },
    /// Leave the pod as it is.
    Leave(SkipReason),
}

/// Why a pod is routed.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteReason {
    /// Mode `All`.
    All,
    /// Mode `ExclusiveResources`, and this is what the pod asks for.
    Exclusive(ExclusiveRequest),
}

impl RouteReason {
    /// The mode, as the metric label.
    pub fn mode(&self) -> &'static str {
        match self {
            Self::All => "All",
            Self::Exclusive(_) => "ExclusiveResources",
        }
    }
}

impl fmt::Display for RouteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("podRouting mode All: every pod of a selected namespace"),
            Self::Exclusive(request) => write!(f, "podRouting mode ExclusiveResources: Guaranteed pod, {request}"),
        }
    }
}

/// Why a pod is left alone.
#[derive(Debug, Clone, PartialEq)]
pub enum SkipReason {
    /// The caches have not completed their first list.
    NotSynced,
    /// No `NUMAResourcesScheduler` exists (or it is being deleted).
    NoScheduler,
    /// The `NUMAResourcesScheduler` does not decode.
    SchedulerUnreadable,
    /// `podRouting.mode` is `Disabled`, unset or unknown.
    RoutingDisabled,
    /// The pod names another scheduler.
    OtherScheduler(String),
    /// The pod carries the opt-out annotation.
    OptedOut,
    /// A system namespace (or ours).
    SystemNamespace,
    /// The namespace does not match `podRouting.namespaceSelector`.
    NamespaceNotSelected,
    /// The namespace is not in the cache, so the selector cannot be evaluated.
    NamespaceUnknown,
    /// Mode `ExclusiveResources` and the pod is not Guaranteed.
    NotGuaranteed(QosClass),
    /// Mode `ExclusiveResources`, Guaranteed, but nothing exclusive is asked for.
    NoExclusiveResources,
}

impl SkipReason {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Self::NotSynced => "not-synced",
            Self::NoScheduler => "no-scheduler",
            Self::SchedulerUnreadable => "scheduler-unreadable",
            Self::RoutingDisabled => "routing-disabled",
            Self::OtherScheduler(_) => "other-scheduler",
            Self::OptedOut => "opted-out",
            Self::SystemNamespace => "system-namespace",
            Self::NamespaceNotSelected => "namespace-not-selected",
            Self::NamespaceUnknown => "namespace-unknown",
            Self::NotGuaranteed(_) => "not-guaranteed",
            Self::NoExclusiveResources => "no-exclusive-resources",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotSynced => f.write_str("the webhook's caches are not synced yet"),
            Self::NoScheduler => f.write_str("no NUMAResourcesScheduler exists"),
            Self::SchedulerUnreadable => f.write_str("the NUMAResourcesScheduler cannot be read"),
            Self::RoutingDisabled => f.write_str("podRouting mode is Disabled"),
            Self::OtherScheduler(name) => write!(f, "the pod names the scheduler {name:?}"),
            Self::OptedOut => write!(f, "the pod carries {OPT_OUT_ANNOTATION}: {OPT_OUT_VALUE}"),
            Self::SystemNamespace => f.write_str("system namespaces are never routed"),
            Self::NamespaceNotSelected => f.write_str("the namespace does not match podRouting.namespaceSelector"),
            Self::NamespaceUnknown => f.write_str("the namespace is not in the cache yet"),
            Self::NotGuaranteed(class) => write!(f, "the pod is {class}, not Guaranteed"),
            Self::NoExclusiveResources => f.write_str("no container asks for whole CPUs, hugepages or devices"),
        }
    }
}

/// Decides one pod CREATE in `namespace`. The checks run from the cheapest to the costliest, and
/// the first that leaves the pod alone is the reason given.
pub fn decide(
    pod: &Pod,
    namespace: &str,
    policy: &RoutingPolicy,
    labels: NamespaceLabels<'_>,
    system: &SystemNamespaces,
) -> Decision {
    use SkipReason::*;
    if !matches!(policy.mode, PodRoutingMode::ExclusiveResources | PodRoutingMode::All) {
        return Decision::Leave(RoutingDisabled);
    }
    let spec = pod.spec.as_ref();
    let scheduler = spec.and_then(|s| s.scheduler_name.as_deref()).unwrap_or(DEFAULT_SCHEDULER);
    if !scheduler.is_empty() && scheduler != DEFAULT_SCHEDULER {
        return Decision::Leave(OtherScheduler(scheduler.to_owned()));
    }
    let annotations = pod.metadata.annotations.as_ref();
    if annotations.and_then(|a| a.get(OPT_OUT_ANNOTATION)).is_some_and(|v| v == OPT_OUT_VALUE) {
        return Decision::Leave(OptedOut);
    }
    if system.contains(namespace) {
        return Decision::Leave(SystemNamespace);
    }
    if let Some(selector) = &policy.namespace_selector {
        match labels {
            NamespaceLabels::Known(labels) if selector::matches(selector, labels) => {}
            NamespaceLabels::Known(_) => return Decision::Leave(NamespaceNotSelected),
            NamespaceLabels::Unknown => return Decision::Leave(NamespaceUnknown),
        }
    }
    let route = |reason| Decision::Route { scheduler: policy.scheduler_name.clone(), reason };
    if policy.mode == PodRoutingMode::All {
        return route(RouteReason::All);
    }
    let default_spec = k8s_openapi::api::core::v1::PodSpec::default();
    let spec = spec.unwrap_or(&default_spec);
    match qos_class(spec) {
        QosClass::Guaranteed => {}
        other => return Decision::Leave(NotGuaranteed(other)),
    }
    match first_exclusive_request(spec) {
        Some(request) => route(RouteReason::Exclusive(request)),
        None => Decision::Leave(NoExclusiveResources),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};
    use numaresources_api::operator::{NUMAResourcesSchedulerSpec, NUMAResourcesSchedulerStatus, PodRouting};

    use super::*;
    use numaresources_api::qos::Exclusive;

    fn resources(cpu: &str, memory: &str, extra: &[(&str, &str)]) -> ResourceRequirements {
        let mut list: BTreeMap<String, Quantity> =
            [("cpu", cpu), ("memory", memory)].iter().map(|(k, v)| ((*k).into(), Quantity((*v).into()))).collect();
        list.extend(extra.iter().map(|(k, v)| ((*k).into(), Quantity((*v).into()))));
        ResourceRequirements { requests: Some(list.clone()), limits: Some(list), claims: None }
    }

    /// A pod with one container whose requests equal its limits.
    fn pod(cpu: &str, memory: &str) -> Pod {
        pod_with(resources(cpu, memory, &[]))
    }

    fn pod_with(resources: ResourceRequirements) -> Pod {
        Pod {
            metadata: ObjectMeta { name: Some("p".into()), ..ObjectMeta::default() },
            spec: Some(PodSpec {
                containers: vec![Container { name: "app".into(), resources: Some(resources), ..Container::default() }],
                scheduler_name: Some(DEFAULT_SCHEDULER.into()),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    fn burstable() -> Pod {
        let mut resources = resources("2", "1Gi", &[]);
        resources.requests = Some([("cpu".to_owned(), Quantity("1".into()))].into());
        pod_with(resources)
    }

    fn named(mut pod: Pod, scheduler: &str) -> Pod {
        pod.spec.as_mut().unwrap().scheduler_name = Some(scheduler.into());
        pod
    }

    fn annotated(mut pod: Pod, key: &str, value: &str) -> Pod {
        pod.metadata.annotations = Some([(key.to_owned(), value.to_owned())].into());
        pod
    }

    fn policy(mode: PodRoutingMode, selector: Option<LabelSelector>) -> RoutingPolicy {
        RoutingPolicy { scheduler_name: "topo-aware-scheduler".into(), mode, namespace_selector: selector }
    }

    fn numa_selector() -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some([("numa".to_owned(), "true".to_owned())].into()),
            match_expressions: None,
        })
    }

    fn route(reason: RouteReason) -> Decision {
        Decision::Route { scheduler: "topo-aware-scheduler".into(), reason }
    }

    fn exclusive(resource: Exclusive) -> Decision {
        route(RouteReason::Exclusive(ExclusiveRequest { container: "app".into(), init: false, resource }))
    }

    #[test]
    fn every_rule_one_row() {
        use Decision::Leave;
        use PodRoutingMode::*;
        use SkipReason::*;
        let two_cpus = || pod("2", "1Gi");
        let selected: BTreeMap<String, String> = [("numa".to_owned(), "true".to_owned())].into();
        let other: BTreeMap<String, String> = [("team".to_owned(), "web".to_owned())].into();
        let known = NamespaceLabels::Known;
        let system = SystemNamespaces::new("numaresources");
        // The pod's own rules, in an ordinary namespace the selector (if any) does not pick.
        let hugepages = pod_with(resources("500m", "256Mi", &[("hugepages-2Mi", "64Mi")]));
        let device = pod_with(resources("100m", "64Mi", &[("example.com/sriov_vf", "1")]));
        let best_effort = || pod_with(ResourceRequirements::default());
        let pods: Vec<(&str, Pod, RoutingPolicy, Decision)> = vec![
            (
                "integral CPUs, ExclusiveResources",
                two_cpus(),
                policy(ExclusiveResources, None),
                exclusive(Exclusive::IntegralCpu("2".into())),
            ),
            ("fractional CPUs", pod("500m", "256Mi"), policy(ExclusiveResources, None), Leave(NoExclusiveResources)),
            (
                "hugepages with fractional CPUs",
                hugepages,
                policy(ExclusiveResources, None),
                exclusive(Exclusive::Hugepages("hugepages-2Mi".into())),
            ),
            (
                "a device with fractional CPUs",
                device,
                policy(ExclusiveResources, None),
                exclusive(Exclusive::Device("example.com/sriov_vf".into())),
            ),
            ("Burstable", burstable(), policy(ExclusiveResources, None), Leave(NotGuaranteed(QosClass::Burstable))),
            ("BestEffort", best_effort(), policy(ExclusiveResources, None), Leave(NotGuaranteed(QosClass::BestEffort))),
            ("mode All routes BestEffort too", best_effort(), policy(All, None), route(RouteReason::All)),
            ("mode Disabled", two_cpus(), policy(Disabled, None), Leave(RoutingDisabled)),
            ("unknown mode", two_cpus(), policy(PodRoutingMode::Unknown("Some".into()), None), Leave(RoutingDisabled)),
            (
                "another scheduler named",
                named(two_cpus(), "my-scheduler"),
                policy(All, None),
                Leave(OtherScheduler("my-scheduler".into())),
            ),
            (
                "already ours",
                named(two_cpus(), "topo-aware-scheduler"),
                policy(All, None),
                Leave(OtherScheduler("topo-aware-scheduler".into())),
            ),
            ("empty scheduler name is the default", named(two_cpus(), ""), policy(All, None), route(RouteReason::All)),
            (
                "opt-out annotation",
                annotated(two_cpus(), OPT_OUT_ANNOTATION, "default"),
                policy(All, None),
                Leave(OptedOut),
            ),
            (
                "another value of the annotation does not opt out",
                annotated(two_cpus(), OPT_OUT_ANNOTATION, "numa"),
                policy(All, None),
                route(RouteReason::All),
            ),
        ];
        for (name, pod, policy, want) in pods {
            assert_eq!(decide(&pod, "work", &policy, known(&other), &system), want, "{name}");
        }

        // The namespace's rules, for a pod that would be routed anywhere.
        let team_not_web = Some(LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".into(),
                operator: "NotIn".into(),
                values: Some(vec!["web".into()]),
            }]),
        });
        let namespaces: Vec<(&str, &str, RoutingPolicy, NamespaceLabels<'_>, Decision)> = vec![
            ("kube-system", "kube-system", policy(All, None), known(&selected), Leave(SystemNamespace)),
            ("kube-public", "kube-public", policy(All, None), known(&selected), Leave(SystemNamespace)),
            ("kube-node-lease", "kube-node-lease", policy(All, None), known(&selected), Leave(SystemNamespace)),
            ("openshift-*", "openshift-monitoring", policy(All, None), known(&selected), Leave(SystemNamespace)),
            (
                "our own namespace",
                "numaresources",
                policy(All, numa_selector()),
                known(&selected),
                Leave(SystemNamespace),
            ),
            (
                "a namespace merely starting with kube-",
                "kube-apps",
                policy(All, None),
                known(&other),
                route(RouteReason::All),
            ),
            (
                "selector matches",
                "work",
                policy(ExclusiveResources, numa_selector()),
                known(&selected),
                exclusive(Exclusive::IntegralCpu("2".into())),
            ),
            (
                "selector does not match",
                "work",
                policy(ExclusiveResources, numa_selector()),
                known(&other),
                Leave(NamespaceNotSelected),
            ),
            (
                "selector and a namespace not cached",
                "work",
                policy(All, numa_selector()),
                NamespaceLabels::Unknown,
                Leave(NamespaceUnknown),
            ),
            (
                "no selector needs no labels",
                "work",
                policy(All, None),
                NamespaceLabels::Unknown,
                route(RouteReason::All),
            ),
            ("expression selector", "work", policy(All, team_not_web), known(&other), Leave(NamespaceNotSelected)),
        ];
        for (name, namespace, policy, labels, want) in namespaces {
            assert_eq!(decide(&two_cpus(), namespace, &policy, labels, &system), want, "{name}");
        }
    }

    #[test]
    fn the_policy_uses_the_name_the_scheduler_runs_with() {
        let mut scheduler =
            NUMAResourcesScheduler::new("numaresourcesscheduler", NUMAResourcesSchedulerSpec::default());
        assert_eq!(RoutingPolicy::of(&scheduler).scheduler_name, "topo-aware-scheduler");
        assert_eq!(RoutingPolicy::of(&scheduler).mode, PodRoutingMode::Disabled);
        scheduler.spec.scheduler_name = "numa-sched".into();
        scheduler.spec.pod_routing =
            Some(PodRouting { mode: Some(PodRoutingMode::All), namespace_selector: numa_selector() });
        let policy = RoutingPolicy::of(&scheduler);
        assert_eq!(
            (policy.scheduler_name.as_str(), policy.mode, policy.namespace_selector),
            ("numa-sched", PodRoutingMode::All, numa_selector())
        );
        scheduler.status =
            Some(NUMAResourcesSchedulerStatus { scheduler_name: "running-name".into(), ..Default::default() });
        assert_eq!(RoutingPolicy::of(&scheduler).scheduler_name, "running-name");
    }

    #[test]
    fn every_reason_explains_itself() {
        let reasons = [
            SkipReason::NotSynced,
            SkipReason::NoScheduler,
            SkipReason::SchedulerUnreadable,
            SkipReason::RoutingDisabled,
            SkipReason::OtherScheduler("x".into()),
            SkipReason::OptedOut,
            SkipReason::SystemNamespace,
            SkipReason::NamespaceNotSelected,
            SkipReason::NamespaceUnknown,
            SkipReason::NotGuaranteed(QosClass::Burstable),
            SkipReason::NoExclusiveResources,
        ];
        let labels: std::collections::BTreeSet<_> = reasons.iter().map(SkipReason::label).collect();
        assert_eq!(labels.len(), reasons.len(), "labels are distinct");
        for reason in reasons {
            assert!(!reason.to_string().is_empty());
        }
        assert_eq!(
            RouteReason::Exclusive(ExclusiveRequest {
                container: "app".into(),
                init: false,
                resource: Exclusive::IntegralCpu("2".into())
            })
            .to_string(),
            "podRouting mode ExclusiveResources: Guaranteed pod, container \"app\" requests whole CPUs (cpu: 2)"
        );
    }
}
