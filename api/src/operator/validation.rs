//! Validation, as pure functions that return every problem with its field path.
//!
//! Upstream checks node groups only at reconcile time and stops at the first failure; we report
//! everything at once so one `kubectl apply` shows the user all there is to fix. The rules are
//! upstream's (each group sets exactly one of `poolName` / `machineConfigPoolSelector`, a
//! `poolName` is not empty, no two groups share a `poolName`, at most 8 per-group annotations;
//! the enums of the CRD schema) plus those our additions need: exactly one node selection
//! method per group, no two groups selecting the same way, selectors that parse, valid
//! tolerations, non-negative durations, and the pod routing rules.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    NUMAResourcesOperator, NUMAResourcesScheduler, NodeGroup, NodeGroupConfig, OPERATOR_SINGLETON_NAME, PodRouting,
    SCHEDULER_SINGLETON_NAME, SchedulerEngine, ScoringStrategyParams,
};
use crate::duration::GoDuration;
use crate::field::{FieldError, FieldErrors, FieldPath};
use crate::selector;
use crate::string_enum::StringEnum;

use super::NODE_GROUP_MAX_ANNOTATIONS;

/// Every problem with a `NUMAResourcesOperator`.
pub fn validate_operator(nro: &NUMAResourcesOperator) -> FieldErrors {
    let mut errors = FieldErrors::default();
    errors.extend(singleton_name(&nro.metadata, OPERATOR_SINGLETON_NAME));
    let spec = FieldPath::new("spec");
    let spec_value = &nro.spec;
    errors.extend(known_enum(spec.child("logLevel"), spec_value.log_level.as_ref()));
    let groups = spec.child("nodeGroups");
    for (i, group) in spec_value.node_groups.iter().enumerate() {
        errors.extend(node_group(group, &groups.index(i)));
    }
    errors.extend(unique_node_group_selection(&spec_value.node_groups, &groups));
    for (i, exclude) in spec_value.pod_excludes.iter().enumerate() {
        if exclude.is_empty() {
            errors.push(FieldError::required(
                spec.child("podExcludes").index(i),
                "set a namespace pattern, a name pattern, or both",
            ));
        }
    }
    errors
}

/// Every problem with a `NUMAResourcesScheduler`.
pub fn validate_scheduler(nrs: &NUMAResourcesScheduler) -> FieldErrors {
    let mut errors = FieldErrors::default();
    errors.extend(singleton_name(&nrs.metadata, SCHEDULER_SINGLETON_NAME));
    let spec = FieldPath::new("spec");
    let s = &nrs.spec;
    // The extender engine's default image is the cluster's own kube-scheduler.
    if s.scheduler_image.trim().is_empty() && s.engine() != SchedulerEngine::Extender {
        errors.push(FieldError::required(spec.child("imageSpec"), "the scheduler image is required"));
    }
    if !s.scheduler_name.is_empty()
        && let Err(reason) = selector::check_dns1123_subdomain(&s.scheduler_name)
    {
        // Pods carry this name in spec.schedulerName, which the API server validates so.
        errors.push(FieldError::invalid(spec.child("schedulerName"), &s.scheduler_name, reason));
    }
    errors.extend(known_enum(spec.child("logLevel"), s.log_level.as_ref()));
    errors.extend(non_negative(spec.child("cacheResyncPeriod"), s.cache_resync_period));
    errors.extend(known_enum(spec.child("cacheResyncDebug"), s.cache_resync_debug.as_ref()));
    errors.extend(known_enum(spec.child("schedulerInformer"), s.scheduler_informer.as_ref()));
    errors.extend(known_enum(spec.child("cacheResyncDetection"), s.cache_resync_detection.as_ref()));
    errors.extend(known_enum(spec.child("preemptionMode"), s.preemption_mode.as_ref()));
    errors.extend(known_enum(spec.child("engine"), s.engine.as_ref()));
    if let Some(strategy) = &s.scoring_strategy {
        errors.extend(scoring_strategy(strategy, &spec.child("scoringStrategy")));
    }
    if let Some(replicas) = s.replicas
        && replicas < 0
    {
        errors.push(FieldError::invalid(spec.child("replicas"), replicas, "must be greater than or equal to 0"));
    }
    if let Some(routing) = &s.pod_routing {
        errors.extend(pod_routing(routing, &spec.child("podRouting")));
    }
    errors
}

fn singleton_name(metadata: &ObjectMeta, required: &str) -> Option<FieldError> {
    let name = metadata.name.as_deref().unwrap_or_default();
    (name != required).then(|| {
        FieldError::invalid(
            FieldPath::new("metadata").child("name"),
            name,
            format!("this is a singleton resource and the object name must be '{required}'"),
        )
    })
}

/// An enum field that is set to a value the API does not know.
fn known_enum<E: StringEnum>(path: FieldPath, field: Option<&E>) -> Option<FieldError> {
    field.filter(|value| !value.is_known()).map(|value| FieldError::not_supported(path, value.as_str(), E::VALUES))
}

fn non_negative(path: FieldPath, duration: Option<GoDuration>) -> Option<FieldError> {
    duration
        .filter(GoDuration::is_negative)
        .map(|d| FieldError::invalid(path, d, "must be a non-negative duration (0 disables)"))
}

/// Rules 1, 2 and 4 of upstream, the selection-method rule, and everything inside the group.
fn node_group(group: &NodeGroup, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let methods: Vec<&str> = [
        ("nodeSelector", group.node_selector.is_some()),
        ("poolName", group.pool_name.is_some()),
        ("machineConfigPoolSelector", group.machine_config_pool_selector.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    match methods.len() {
        0 => errors.push(FieldError::required(
            path.clone(),
            "missing any pool specifier: set exactly one of nodeSelector, poolName, machineConfigPoolSelector",
        )),
        1 => {}
        _ => errors.push(FieldError::forbidden(
            path.clone(),
            format!(
                "must have only a single specifier set: {} are all set; keep exactly one of nodeSelector, poolName, machineConfigPoolSelector",
                methods.join(", ")
            ),
        )),
    }
    if let Some(pool) = &group.pool_name
        && pool.is_empty()
    {
        errors.push(FieldError::required(path.child("poolName"), "pool name must not be empty"));
    }
    if let Some(selector) = &group.machine_config_pool_selector {
        errors.extend(selector::validate(selector, &path.child("machineConfigPoolSelector")));
    }
    if let Some(selector) = &group.node_selector {
        errors.extend(selector::validate(selector, &path.child("nodeSelector")));
    }
    let annotations = path.child("annotations");
    if group.annotations.len() > NODE_GROUP_MAX_ANNOTATIONS {
        errors.push(FieldError::too_many(annotations.clone(), group.annotations.len(), NODE_GROUP_MAX_ANNOTATIONS));
    }
    for key in group.annotations.keys() {
        if let Err(reason) = selector::check_qualified_name(key) {
            errors.push(FieldError::invalid(annotations.clone(), key, reason));
        }
    }
    if let Some(config) = &group.config {
        errors.extend(node_group_config(config, &path.child("config")));
    }
    errors
}

fn node_group_config(config: &NodeGroupConfig, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    errors.extend(known_enum(path.child("podsFingerprinting"), config.pods_fingerprinting.as_ref()));
    errors.extend(known_enum(path.child("infoRefreshMode"), config.info_refresh_mode.as_ref()));
    errors.extend(non_negative(path.child("infoRefreshPeriod"), config.info_refresh_period));
    errors.extend(known_enum(path.child("infoRefreshPause"), config.info_refresh_pause.as_ref()));
    errors.extend(known_enum(path.child("unmanagedMemory"), config.unmanaged_memory.as_ref()));
    for (i, toleration) in config.tolerations.iter().enumerate() {
        errors.extend(validate_toleration(toleration, &path.child("tolerations").index(i)));
    }
    errors
}

/// Rule 3 of upstream (unique pool names) and its analogue for selectors: two groups that pick
/// their nodes the same way would run two exporters on the same nodes.
fn unique_node_group_selection(groups: &[NodeGroup], path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen: HashMap<(&str, String), usize> = HashMap::new();
    for (i, group) in groups.iter().enumerate() {
        let keys = [
            ("poolName", group.pool_name.clone().filter(|p| !p.is_empty())),
            ("nodeSelector", group.node_selector.as_ref().map(selector::canonical)),
            ("machineConfigPoolSelector", group.machine_config_pool_selector.as_ref().map(selector::canonical)),
        ];
        for (field, key) in keys {
            let Some(key) = key else { continue };
            if let Some(first) = seen.get(&(field, key.clone())) {
                let shown = if key.is_empty() { "{} (every node)".to_owned() } else { key.clone() };
                let mut error = FieldError::duplicate(path.index(i).child(field), shown);
                error.detail = format!("spec.nodeGroups[{first}] already selects its nodes this way");
                errors.push(error);
            } else {
                seen.insert((field, key), i);
            }
        }
    }
    errors
}

const TOLERATION_OPERATORS: &[&str] = &["Exists", "Equal"];
const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// A toleration as core/v1 validation has it (so a bad one is caught at admission instead of
/// surfacing as a DaemonSet the API server refuses).
fn validate_toleration(toleration: &Toleration, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    let value = toleration.value.as_deref().unwrap_or_default();
    if !key.is_empty()
        && let Err(reason) = selector::check_qualified_name(key)
    {
        errors.push(FieldError::invalid(path.child("key"), key, reason));
    }
    if key.is_empty() && operator != "Exists" {
        errors.push(FieldError::invalid(
            path.child("operator"),
            operator,
            "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
        ));
    }
    match operator {
        "Equal" => {
            if let Err(reason) = selector::check_label_value(value) {
                errors.push(FieldError::invalid(path.child("value"), value, reason));
            }
        }
        "Exists" if !value.is_empty() => errors.push(FieldError::invalid(
            path.child("value"),
            value,
            "value must be empty when `operator` is 'Exists'",
        )),
        "Exists" => {}
        other => errors.push(FieldError::not_supported(path.child("operator"), other, TOLERATION_OPERATORS)),
    }
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
        errors.push(FieldError::not_supported(path.child("effect"), effect, TAINT_EFFECTS));
    }
    if toleration.toleration_seconds.is_some() && effect != "NoExecute" {
        errors.push(FieldError::invalid(
            path.child("effect"),
            effect,
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ));
    }
    errors
}

fn scoring_strategy(strategy: &ScoringStrategyParams, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    errors.extend(known_enum(path.child("type"), strategy.type_.as_ref()));
    let mut names = HashMap::new();
    for (i, resource) in strategy.resources.iter().enumerate() {
        let item = path.child("resources").index(i);
        if resource.name.is_empty() {
            errors.push(FieldError::required(item.child("name"), "the resource name is required"));
        } else if names.insert(resource.name.as_str(), i).is_some() {
            errors.push(FieldError::duplicate(item.child("name"), &resource.name));
        }
        if resource.weight < 0 {
            errors.push(FieldError::invalid(
                item.child("weight"),
                resource.weight,
                "must be a positive weight (0 or unset means the default weight 1)",
            ));
        }
    }
    errors
}

fn pod_routing(routing: &PodRouting, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    errors.extend(known_enum(path.child("mode"), routing.mode.as_ref()));
    if let Some(selector) = &routing.namespace_selector {
        errors.extend(selector::validate(selector, &path.child("namespaceSelector")));
    }
    errors
}

#[cfg(test)]
#[path = "validation_tests.rs"]
mod tests;
