//! Defaults the mutating webhook writes into our objects, as a JSONPatch.
//!
//! The source of every default is the api crate's `normalized()`, so the webhook, the controllers
//! and the status they report agree. What is persisted is only what the user left unset and
//! what means the same on every cluster:
//!
//! - `NUMAResourcesOperator`: `logLevel`, and each node group's `config` (`podsFingerprinting`,
//!   `infoRefreshMode`, `infoRefreshPeriod`, `infoRefreshPause`, `unmanagedMemory`);
//! - `NUMAResourcesScheduler`: `logLevel`, `cacheResyncPeriod`, `cacheResyncDebug`,
//!   `cacheResyncDetection`, `scoringStrategy`, `podRouting.mode`.
//!
//! Never persisted: `schedulerInformer` (its default depends on the OpenShift version, which
//! can change under an object that outlives an upgrade), `replicas` (unset means "detected from
//! the control plane") and `preemptionMode` (unset means "disabled"): a filled-in value could not
//! express either.
//!
//! The patch is the difference between the typed object and its defaulted copy, both
//! serialized the same way, so it only ever adds (or replaces an empty `logLevel`) at paths the
//! defaults touch; fields the types do not know stay as kube-apiserver sent them. A defaulted
//! object gives an empty patch, which makes reinvocation (`reinvocationPolicy: IfNeeded`) a no-op.

use json_patch::Patch;
use numaresources_api::operator::defaults::Platform;
use numaresources_api::operator::{NUMAResourcesOperator, NUMAResourcesScheduler};
use serde::Serialize;

/// The operator with its persisted defaults.
pub(super) fn operator(nro: &NUMAResourcesOperator) -> NUMAResourcesOperator {
    NUMAResourcesOperator { spec: nro.spec.normalized(), ..nro.clone() }
}

/// The scheduler with its persisted defaults (see the module docs for what is left out).
pub(super) fn scheduler(nrs: &NUMAResourcesScheduler) -> NUMAResourcesScheduler {
    // Any platform: the one platform-dependent default is put back to what the user gave.
    let mut spec = nrs.spec.normalized(Platform::Kubernetes);
    spec.scheduler_informer = nrs.spec.scheduler_informer.clone();
    // normalized() keeps replicas and preemptionMode as given; say so where it matters.
    debug_assert!(spec.replicas == nrs.spec.replicas && spec.preemption_mode == nrs.spec.preemption_mode);
    NUMAResourcesScheduler { spec, ..nrs.clone() }
}

/// The JSONPatch that turns `before` into `after`, both serialized as typed objects.
pub(super) fn patch<T: Serialize>(before: &T, after: &T) -> Result<Patch, serde_json::Error> {
    Ok(json_patch::diff(&serde_json::to_value(before)?, &serde_json::to_value(after)?))
}

#[cfg(test)]
mod tests {
    use numaresources_api::GoDuration;
    use numaresources_api::operator::{
        CacheResyncDebugMode, CacheResyncDetectionMode, InfoRefreshMode, InfoRefreshPauseMode, LogLevel,
        NUMAResourcesOperatorSpec, NUMAResourcesSchedulerSpec, NodeGroup, NodeGroupConfig, PodRouting, PodRoutingMode,
        PodsFingerprintingMode, PreemptionMode, SchedulerInformerMode, ScoringStrategyParams,
    };
    use serde_json::{Value, json};

    use super::*;

    /// The operations of a patch, in path order (the diff follows JSON key order).
    fn paths(patch: &Patch) -> Vec<(String, String)> {
        let value = serde_json::to_value(patch).unwrap();
        let mut ops: Vec<_> = value
            .as_array()
            .unwrap()
            .iter()
            .map(|op| (op["op"].as_str().unwrap().to_owned(), op["path"].as_str().unwrap().to_owned()))
            .collect();
        ops.sort_by(|a, b| a.1.cmp(&b.1));
        ops
    }

    fn ops(list: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut ops: Vec<_> = list.iter().map(|(op, path)| ((*op).to_owned(), (*path).to_owned())).collect();
        ops.sort_by(|a, b| a.1.cmp(&b.1));
        ops
    }

    #[test]
    fn operator_defaults_one_row_per_field() {
        let nro = NUMAResourcesOperator::new(
            "numaresourcesoperator",
            NUMAResourcesOperatorSpec {
                node_groups: vec![
                    NodeGroup { pool_name: Some("worker".into()), ..NodeGroup::default() },
                    NodeGroup {
                        pool_name: Some("cnf".into()),
                        config: Some(NodeGroupConfig {
                            info_refresh_mode: Some(InfoRefreshMode::Events),
                            ..NodeGroupConfig::default()
                        }),
                        ..NodeGroup::default()
                    },
                ],
                ..NUMAResourcesOperatorSpec::default()
            },
        );
        let defaulted = operator(&nro);
        assert_eq!(
            paths(&patch(&nro, &defaulted).unwrap()),
            ops(&[
                ("add", "/spec/logLevel"),
                ("add", "/spec/nodeGroups/0/config"),
                ("add", "/spec/nodeGroups/1/config/podsFingerprinting"),
                ("add", "/spec/nodeGroups/1/config/infoRefreshPeriod"),
                ("add", "/spec/nodeGroups/1/config/infoRefreshPause"),
                ("add", "/spec/nodeGroups/1/config/unmanagedMemory"),
            ])
        );
        let spec = &defaulted.spec;
        assert_eq!(spec.log_level, Some(LogLevel::Normal));
        let first = spec.node_groups[0].config.clone().unwrap();
        assert_eq!(first, NodeGroupConfig::defaults());
        let second = spec.node_groups[1].config.clone().unwrap();
        assert_eq!(second.info_refresh_mode, Some(InfoRefreshMode::Events), "the user's value stays");
        assert_eq!(second.pods_fingerprinting, Some(PodsFingerprintingMode::EnabledExclusiveResources));
        assert_eq!(second.info_refresh_period, Some(GoDuration::from_secs(10)));
        assert_eq!(second.info_refresh_pause, Some(InfoRefreshPauseMode::Disabled));
        assert!(patch(&defaulted, &operator(&defaulted)).unwrap().0.is_empty(), "a second pass changes nothing");
    }

    #[test]
    fn an_empty_log_level_means_unset() {
        let nro = NUMAResourcesOperator::new(
            "numaresourcesoperator",
            NUMAResourcesOperatorSpec { log_level: Some(LogLevel::Unset), ..NUMAResourcesOperatorSpec::default() },
        );
        let patch = patch(&nro, &operator(&nro)).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([{"op": "replace", "path": "/spec/logLevel", "value": "Normal"}])
        );
    }

    #[test]
    fn scheduler_defaults_leave_platform_and_autodetected_fields_unset() {
        let nrs = NUMAResourcesScheduler::new(
            "numaresourcesscheduler",
            NUMAResourcesSchedulerSpec {
                scheduler_image: "quay.io/x:1".into(),
                ..NUMAResourcesSchedulerSpec::default()
            },
        );
        let defaulted = scheduler(&nrs);
        let patch = patch(&nrs, &defaulted).unwrap();
        let mut value: Vec<Value> = serde_json::from_value(serde_json::to_value(&patch).unwrap()).unwrap();
        value.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
        assert_eq!(
            Value::Array(value),
            json!([
                {"op": "add", "path": "/spec/cacheResyncDebug", "value": "DumpJSONFile"},
                {"op": "add", "path": "/spec/cacheResyncDetection", "value": "Relaxed"},
                {"op": "add", "path": "/spec/cacheResyncPeriod", "value": "5s"},
                {"op": "add", "path": "/spec/logLevel", "value": "Normal"},
                {"op": "add", "path": "/spec/podRouting", "value": {"mode": "Disabled"}},
                {"op": "add", "path": "/spec/scoringStrategy", "value": {"type": "LeastAllocated"}},
            ])
        );
        let spec = &defaulted.spec;
        assert_eq!(spec.scheduler_informer, None, "platform-dependent");
        assert_eq!((spec.replicas, spec.preemption_mode.clone()), (None, None), "unset means autodetect / disabled");
        assert!(self::patch(&defaulted, &scheduler(&defaulted)).unwrap().0.is_empty());
    }

    #[test]
    fn what_the_user_set_is_never_rewritten() {
        let given = NUMAResourcesSchedulerSpec {
            scheduler_image: "quay.io/x:1".into(),
            log_level: Some(LogLevel::Trace),
            cache_resync_period: Some(GoDuration::ZERO),
            cache_resync_debug: Some(CacheResyncDebugMode::Disabled),
            scheduler_informer: Some(SchedulerInformerMode::Shared),
            cache_resync_detection: Some(CacheResyncDetectionMode::Aggressive),
            scoring_strategy: Some(ScoringStrategyParams { type_: None, resources: Vec::new() }),
            replicas: Some(0),
            preemption_mode: Some(PreemptionMode::Enabled),
            pod_routing: Some(PodRouting {
                mode: Some(PodRoutingMode::Unknown("Sometimes".into())),
                namespace_selector: None,
            }),
            ..NUMAResourcesSchedulerSpec::default()
        };
        let nrs = NUMAResourcesScheduler::new("numaresourcesscheduler", given);
        assert!(patch(&nrs, &scheduler(&nrs)).unwrap().0.is_empty(), "{:?}", scheduler(&nrs).spec);
    }

    #[test]
    fn the_patch_keeps_fields_the_types_do_not_know() {
        let raw: Value = json!({
            "apiVersion": "nodetopology.openshift.io/v1", "kind": "NUMAResourcesOperator",
            "metadata": {"name": "numaresourcesoperator", "creationTimestamp": null},
            "spec": {"futureField": {"x": 1}, "nodeGroups": [{"poolName": "w", "config": {"futureKnob": true}}]}
        });
        let typed: NUMAResourcesOperator = serde_json::from_value(raw.clone()).unwrap();
        let patch = patch(&typed, &operator(&typed)).unwrap();
        let mut patched = raw.clone();
        json_patch::patch(&mut patched, &patch.0).unwrap();
        assert_eq!(patched["spec"]["futureField"], json!({"x": 1}));
        assert_eq!(patched["spec"]["nodeGroups"][0]["config"]["futureKnob"], true);
        assert_eq!(patched["spec"]["nodeGroups"][0]["config"]["infoRefreshPeriod"], "10s");
        assert_eq!(patched["metadata"], raw["metadata"], "metadata untouched");
    }
}
