//! Warnings for valid objects the user may regret: deprecated fields, node groups that select
//! no node, refresh rates that load every node, routing that reaches every pod. kubectl prints
//! them; the object is admitted. Each names its field path and stays short (kube-apiserver
//! advises ≤ 120 characters).

use std::collections::BTreeMap;

use numaresources_api::GoDuration;
use numaresources_api::operator::scheduler_image;
use numaresources_api::operator::{
    InfoRefreshPauseMode, NUMAResourcesOperator, NUMAResourcesScheduler, PodRoutingMode, PodsFingerprintingMode,
    PreemptionMode, SchedulerEngine,
};
use numaresources_api::selector;

/// Below this a refresh or resync period costs more than it brings.
const MIN_PERIOD: GoDuration = GoDuration::from_secs(1);

/// Warnings for an operator object. `nodes` holds every node's labels when the node cache is
/// synced (else the node selectors are not checked).
pub(super) fn operator(nro: &NUMAResourcesOperator, nodes: Option<&[BTreeMap<String, String>]>) -> Vec<String> {
    let mut warnings = Vec::new();
    let spec = &nro.spec;
    if !spec.exporter_image.is_empty() {
        warnings.push("spec.imageSpec is deprecated: the exporter should run from the operator's image; a custom image is used only where the operator allows it, otherwise the operator reports Degraded".into());
    }
    for (i, group) in spec.node_groups.iter().enumerate() {
        let path = format!("spec.nodeGroups[{i}]");
        if let (Some(selector), Some(nodes)) = (&group.node_selector, nodes)
            && !nodes.iter().any(|labels| selector::matches(selector, labels))
        {
            warnings.push(format!(
                "{path}.nodeSelector selects no node today: the group runs no exporter until one matches"
            ));
        }
        let Some(config) = &group.config else { continue };
        if let Some(period) = config.info_refresh_period
            && period.as_nanos() > 0
            && period.as_nanos() < MIN_PERIOD.as_nanos()
        {
            warnings.push(format!(
                "{path}.config.infoRefreshPeriod {period} is under 1s: every exporter of the group publishes that often"
            ));
        }
        if config.info_refresh_pause == Some(InfoRefreshPauseMode::Enabled) {
            warnings.push(format!(
                "{path}.config.infoRefreshPause is Enabled: the group's topology stops updating and the scheduler works from stale data"
            ));
        }
        if config.pods_fingerprinting == Some(PodsFingerprintingMode::Disabled) {
            warnings.push(format!(
                "{path}.config.podsFingerprinting is Disabled: the scheduler cannot tell when its view of these nodes is current"
            ));
        }
    }
    warnings
}

/// Warnings for a scheduler object.
pub(super) fn scheduler(nrs: &NUMAResourcesScheduler) -> Vec<String> {
    let mut warnings = Vec::new();
    let spec = &nrs.spec;
    if spec.scheduler_name == crate::pods::DEFAULT_SCHEDULER {
        warnings.push(
            "spec.schedulerName default-scheduler is the cluster's own scheduler: two schedulers would place the same pods"
                .into(),
        );
    }
    if let Some(period) = spec.cache_resync_period
        && period.as_nanos() > 0
        && period.as_nanos() < MIN_PERIOD.as_nanos()
    {
        warnings
            .push(format!("spec.cacheResyncPeriod {period} is under 1s: it rounds down to 0, which disables resync"));
    }
    let routing = spec.pod_routing.as_ref();
    match spec.pod_routing_mode() {
        PodRoutingMode::All => warnings.push(format!(
            "spec.podRouting.mode All sends every pod of the selected namespaces to {}: if it is down, they stay Pending",
            spec.effective_scheduler_name()
        )),
        PodRoutingMode::Disabled if routing.is_some_and(|r| r.namespace_selector.is_some()) => {
            warnings.push("spec.podRouting.namespaceSelector has no effect while spec.podRouting.mode is Disabled".into());
        }
        _ => {}
    }
    // kube-scheduler exits on a setting its image does not know, so the controllers leave
    // those out: say so now. The extender engine runs the stock kube-scheduler, to which none of
    // the plugin's settings apply.
    if spec.engine() == SchedulerEngine::Extender {
        return warnings;
    }
    let preemption = spec.preemption_mode == Some(PreemptionMode::Enabled);
    warnings.extend(scheduler_image::identify(&spec.scheduler_image).warnings(&spec.scheduler_image, preemption));
    warnings
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use numaresources_api::operator::{
        NUMAResourcesOperatorSpec, NUMAResourcesSchedulerSpec, NodeGroup, NodeGroupConfig, PodRouting,
    };

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn selector(key: &str) -> Option<LabelSelector> {
        Some(LabelSelector { match_labels: Some(labels(&[(key, "")])), match_expressions: None })
    }

    /// One pool-named group with `config`.
    fn grouped(config: NodeGroupConfig) -> NUMAResourcesOperatorSpec {
        let group = NodeGroup { pool_name: Some("w".into()), config: Some(config), ..NodeGroup::default() };
        NUMAResourcesOperatorSpec { node_groups: vec![group], ..Default::default() }
    }

    /// One group choosing the nodes labelled `key`.
    fn selecting(key: &str) -> NUMAResourcesOperatorSpec {
        let group = NodeGroup { node_selector: selector(key), ..NodeGroup::default() };
        NUMAResourcesOperatorSpec { node_groups: vec![group], ..Default::default() }
    }

    /// No warning when `want` is `None`, else exactly one that contains it.
    fn assert_warns(row: &str, warnings: &[String], want: Option<&str>) {
        match want {
            None => assert!(warnings.is_empty(), "{row}: {warnings:?}"),
            Some(needle) => {
                assert_eq!(warnings.len(), 1, "{row}: {warnings:?}");
                assert!(warnings[0].contains(needle), "{row}: {warnings:?}");
            }
        }
    }

    fn operator_warnings(spec: NUMAResourcesOperatorSpec, nodes: Option<&[BTreeMap<String, String>]>) -> Vec<String> {
        operator(&NUMAResourcesOperator::new("numaresourcesoperator", spec), nodes)
    }

    fn scheduler_warnings(spec: NUMAResourcesSchedulerSpec) -> Vec<String> {
        scheduler(&NUMAResourcesScheduler::new("numaresourcesscheduler", spec))
    }

    #[test]
    fn operator_warnings_one_row_per_rule() {
        let nodes = [labels(&[("node-role.kubernetes.io/worker", "")])];
        let rows: Vec<(&str, NUMAResourcesOperatorSpec, Option<&str>)> = vec![
            ("nothing to say", selecting("node-role.kubernetes.io/worker"), None),
            (
                "deprecated imageSpec",
                NUMAResourcesOperatorSpec { exporter_image: "quay.io/rte:1".into(), ..Default::default() },
                Some("spec.imageSpec is deprecated"),
            ),
            (
                "selector without nodes",
                selecting("node-role.kubernetes.io/cnf"),
                Some("spec.nodeGroups[0].nodeSelector selects no node"),
            ),
            (
                "refresh under 1s",
                grouped(NodeGroupConfig {
                    info_refresh_period: Some(GoDuration::from_nanos(500_000_000)),
                    ..Default::default()
                }),
                Some("spec.nodeGroups[0].config.infoRefreshPeriod 500ms is under 1s"),
            ),
            (
                "paused",
                grouped(NodeGroupConfig {
                    info_refresh_pause: Some(InfoRefreshPauseMode::Enabled),
                    ..Default::default()
                }),
                Some("infoRefreshPause is Enabled"),
            ),
            (
                "no fingerprint",
                grouped(NodeGroupConfig {
                    pods_fingerprinting: Some(PodsFingerprintingMode::Disabled),
                    ..Default::default()
                }),
                Some("podsFingerprinting is Disabled"),
            ),
            (
                "0 disables, no warning",
                grouped(NodeGroupConfig { info_refresh_period: Some(GoDuration::ZERO), ..Default::default() }),
                None,
            ),
        ];
        for (name, spec, want) in rows {
            assert_warns(name, &operator_warnings(spec, Some(&nodes)), want);
        }
    }

    #[test]
    fn node_selectors_are_not_judged_before_the_node_cache_syncs() {
        assert!(operator_warnings(selecting("x"), None).is_empty());
    }

    #[test]
    fn scheduler_warnings_one_row_per_rule() {
        let base = || NUMAResourcesSchedulerSpec {
            scheduler_image: "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5".into(),
            ..Default::default()
        };
        let routing = |mode: PodRoutingMode, selector: Option<LabelSelector>| {
            Some(PodRouting { mode: Some(mode), namespace_selector: selector })
        };
        let rows: Vec<(&str, NUMAResourcesSchedulerSpec, Option<&str>)> = vec![
            (
                "nothing to say",
                NUMAResourcesSchedulerSpec { pod_routing: routing(PodRoutingMode::ExclusiveResources, None), ..base() },
                None,
            ),
            (
                "the default scheduler's name",
                NUMAResourcesSchedulerSpec { scheduler_name: "default-scheduler".into(), ..base() },
                Some("spec.schedulerName default-scheduler"),
            ),
            (
                "resync under 1s",
                NUMAResourcesSchedulerSpec { cache_resync_period: Some(GoDuration::from_nanos(100_000_000)), ..base() },
                Some("spec.cacheResyncPeriod 100ms is under 1s"),
            ),
            (
                "mode All",
                NUMAResourcesSchedulerSpec { pod_routing: routing(PodRoutingMode::All, None), ..base() },
                Some("spec.podRouting.mode All sends every pod"),
            ),
            (
                "a selector with routing disabled",
                NUMAResourcesSchedulerSpec {
                    pod_routing: routing(PodRoutingMode::Disabled, selector("numa")),
                    ..base()
                },
                Some("spec.podRouting.namespaceSelector has no effect"),
            ),
            (
                "preemption the image does not know",
                NUMAResourcesSchedulerSpec { preemption_mode: Some(PreemptionMode::Enabled), ..base() },
                Some("spec.preemptionMode Enabled is not rendered: scheduler-plugins v0.33 does not know it"),
            ),
            (
                "an image nobody knows",
                NUMAResourcesSchedulerSpec { scheduler_image: "quay.io/s:1".into(), ..base() },
                Some("spec.imageSpec \"quay.io/s:1\" has unknown capabilities"),
            ),
        ];
        for (name, spec, want) in rows {
            assert_warns(name, &scheduler_warnings(spec), want);
        }
    }

    #[test]
    fn the_extender_engine_gets_no_plugin_image_warning() {
        use numaresources_api::operator::SchedulerEngine;
        let stock = |engine| NUMAResourcesSchedulerSpec {
            scheduler_image: "registry.k8s.io/kube-scheduler:v1.33.0".into(),
            engine,
            ..Default::default()
        };
        assert!(scheduler_warnings(stock(Some(SchedulerEngine::Extender))).is_empty());
        let plugin = scheduler_warnings(stock(None));
        assert!(plugin.iter().any(|w| w.contains("has unknown capabilities")), "{plugin:?}");
    }
}
