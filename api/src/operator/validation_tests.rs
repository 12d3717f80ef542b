//! One row per rule: each row breaks exactly one rule of an otherwise valid object and names
//! the error it must produce. Removing a rule makes its row fail.

use serde_json::{Value, json};

use super::*;
use crate::field::ErrorKind;

fn valid_operator() -> Value {
    json!({
        "apiVersion": "nodetopology.openshift.io/v1",
        "kind": "NUMAResourcesOperator",
        "metadata": {"name": "numaresourcesoperator"},
        "spec": {
            "logLevel": "Normal",
            "nodeGroups": [
                {"poolName": "worker-cnf", "config": {"infoRefreshPeriod": "10s"}},
                {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/numa": ""}},
                 "annotations": {"config.node.openshift-kni.io/selinux-policy": "custom"}},
                {"machineConfigPoolSelector": {"matchLabels": {"pools.operator.machineconfiguration.openshift.io/cnf": ""}},
                 "config": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "numa", "effect": "NoSchedule"}]}}
            ],
            "podExcludes": [{"namespace": "kube-*"}]
        }
    })
}

fn valid_scheduler() -> Value {
    json!({
        "apiVersion": "nodetopology.openshift.io/v1",
        "kind": "NUMAResourcesScheduler",
        "metadata": {"name": "numaresourcesscheduler"},
        "spec": {
            "imageSpec": "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.33.5",
            "schedulerName": "topo-aware-scheduler",
            "cacheResyncPeriod": "5s",
            "scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 2}]},
            "replicas": 1,
            "podRouting": {"mode": "ExclusiveResources", "namespaceSelector": {"matchLabels": {"numa": "on"}}}
        }
    })
}

/// Sets the value at a `/`-separated pointer, creating nothing: the path must exist up to its parent.
fn with(mut object: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let parent = object.pointer_mut(parent).unwrap_or_else(|| panic!("no {parent}"));
    match parent {
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
        }
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
        _ => panic!("{pointer} is not inside an object or array"),
    }
    object
}

fn operator_errors(object: Value) -> FieldErrors {
    validate_operator(&serde_json::from_value(object).unwrap())
}

fn scheduler_errors(object: Value) -> FieldErrors {
    validate_scheduler(&serde_json::from_value(object).unwrap())
}

fn assert_single(errors: &FieldErrors, path: &str, kind: ErrorKind, row: &str) {
    let found: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(errors.0.len(), 1, "{row}: want exactly one error, got {found:?}");
    assert_eq!(errors.0[0].path.as_str(), path, "{row}: {found:?}");
    assert_eq!(errors.0[0].kind, kind, "{row}: {found:?}");
}

#[test]
fn valid_objects_pass() {
    assert!(operator_errors(valid_operator()).is_empty(), "{}", operator_errors(valid_operator()));
    assert!(scheduler_errors(valid_scheduler()).is_empty(), "{}", scheduler_errors(valid_scheduler()));
    // The extender engine's image defaults to the cluster's own kube-scheduler.
    let extender = with(with(valid_scheduler(), "/spec/imageSpec", json!("")), "/spec/engine", json!("Extender"));
    assert!(scheduler_errors(extender).is_empty());
}

#[test]
fn each_operator_rule_is_enforced() {
    use ErrorKind::*;
    let g = "/spec/nodeGroups";
    let rows: Vec<(&str, Value, &str, ErrorKind)> = vec![
        ("singleton name", with(valid_operator(), "/metadata/name", json!("other")), "metadata.name", Invalid),
        (
            "rule 1: a group needs a pool specifier",
            with(valid_operator(), &format!("{g}/0"), json!({"config": {}})),
            "spec.nodeGroups[0]",
            Required,
        ),
        (
            "rule 1: only one specifier per group",
            with(
                valid_operator(),
                &format!("{g}/0"),
                json!({"poolName": "a", "machineConfigPoolSelector": {"matchLabels": {"x": "y"}}}),
            ),
            "spec.nodeGroups[0]",
            Forbidden,
        ),
        (
            "exactly one of nodeSelector/poolName/machineConfigPoolSelector",
            with(
                valid_operator(),
                &format!("{g}/0"),
                json!({"poolName": "a", "nodeSelector": {"matchLabels": {"x": "y"}}}),
            ),
            "spec.nodeGroups[0]",
            Forbidden,
        ),
        (
            "rule 2: pool name not empty",
            with(valid_operator(), &format!("{g}/0/poolName"), json!("")),
            "spec.nodeGroups[0].poolName",
            Required,
        ),
        (
            "rule 3: pool names unique",
            with(valid_operator(), &format!("{g}/1"), json!({"poolName": "worker-cnf"})),
            "spec.nodeGroups[1].poolName",
            Duplicate,
        ),
        (
            "rule 4: at most 8 annotations",
            with(
                valid_operator(),
                &format!("{g}/1/annotations"),
                json!({"a1": "", "a2": "", "a3": "", "a4": "", "a5": "", "a6": "", "a7": "", "a8": "", "a9": ""}),
            ),
            "spec.nodeGroups[1].annotations",
            TooMany,
        ),
        (
            "annotation keys are qualified names",
            with(valid_operator(), &format!("{g}/1/annotations"), json!({"not a key": "x"})),
            "spec.nodeGroups[1].annotations",
            Invalid,
        ),
        (
            "node selectors unique",
            with(
                valid_operator(),
                &format!("{g}/0"),
                json!({"nodeSelector": {"matchExpressions": [
                    {"key": "node-role.kubernetes.io/numa", "operator": "In", "values": [""]}
                ]}}),
            ),
            "spec.nodeGroups[1].nodeSelector",
            Duplicate,
        ),
        (
            "machine config pool selectors unique",
            with(
                valid_operator(),
                &format!("{g}/0"),
                json!({"machineConfigPoolSelector": {"matchLabels": {"pools.operator.machineconfiguration.openshift.io/cnf": ""}}}),
            ),
            "spec.nodeGroups[2].machineConfigPoolSelector",
            Duplicate,
        ),
        (
            "node selector parses",
            with(
                valid_operator(),
                &format!("{g}/1/nodeSelector"),
                json!({"matchExpressions": [{"key": "a", "operator": "Within", "values": ["b"]}]}),
            ),
            "spec.nodeGroups[1].nodeSelector.matchExpressions[0].operator",
            NotSupported,
        ),
        (
            "machine config pool selector parses",
            with(valid_operator(), &format!("{g}/2/machineConfigPoolSelector"), json!({"matchLabels": {"a": "b c"}})),
            "spec.nodeGroups[2].machineConfigPoolSelector.matchLabels[a]",
            Invalid,
        ),
        ("logLevel enum", with(valid_operator(), "/spec/logLevel", json!("Loud")), "spec.logLevel", NotSupported),
        (
            "podsFingerprinting enum",
            with(valid_operator(), &format!("{g}/0/config/podsFingerprinting"), json!("Sometimes")),
            "spec.nodeGroups[0].config.podsFingerprinting",
            NotSupported,
        ),
        (
            "infoRefreshMode enum",
            with(valid_operator(), &format!("{g}/0/config/infoRefreshMode"), json!("Never")),
            "spec.nodeGroups[0].config.infoRefreshMode",
            NotSupported,
        ),
        (
            "infoRefreshPause enum",
            with(valid_operator(), &format!("{g}/0/config/infoRefreshPause"), json!("Maybe")),
            "spec.nodeGroups[0].config.infoRefreshPause",
            NotSupported,
        ),
        (
            "infoRefreshPeriod non-negative",
            with(valid_operator(), &format!("{g}/0/config/infoRefreshPeriod"), json!("-1s")),
            "spec.nodeGroups[0].config.infoRefreshPeriod",
            Invalid,
        ),
        (
            "toleration operator enum",
            with(valid_operator(), &format!("{g}/2/config/tolerations/0/operator"), json!("foo")),
            "spec.nodeGroups[2].config.tolerations[0].operator",
            NotSupported,
        ),
        (
            "toleration effect enum",
            with(valid_operator(), &format!("{g}/2/config/tolerations/0/effect"), json!("NoWay")),
            "spec.nodeGroups[2].config.tolerations[0].effect",
            NotSupported,
        ),
        (
            "toleration Exists takes no value",
            with(valid_operator(), &format!("{g}/2/config/tolerations/0/operator"), json!("Exists")),
            "spec.nodeGroups[2].config.tolerations[0].value",
            Invalid,
        ),
        (
            "toleration without key must be Exists",
            with(valid_operator(), &format!("{g}/2/config/tolerations/0/key"), json!("")),
            "spec.nodeGroups[2].config.tolerations[0].operator",
            Invalid,
        ),
        (
            "tolerationSeconds needs NoExecute",
            with(valid_operator(), &format!("{g}/2/config/tolerations/0/tolerationSeconds"), json!(30)),
            "spec.nodeGroups[2].config.tolerations[0].effect",
            Invalid,
        ),
        (
            "podExcludes entries are not empty",
            with(valid_operator(), "/spec/podExcludes/0", json!({})),
            "spec.podExcludes[0]",
            Required,
        ),
    ];
    for (row, object, path, kind) in rows {
        assert_single(&operator_errors(object), path, kind, row);
    }
}

#[test]
fn each_scheduler_rule_is_enforced() {
    use ErrorKind::*;
    let rows: Vec<(&str, Value, &str, ErrorKind)> = vec![
        (
            "singleton name",
            with(valid_scheduler(), "/metadata/name", json!("numa-scheduler")),
            "metadata.name",
            Invalid,
        ),
        ("imageSpec required", with(valid_scheduler(), "/spec/imageSpec", json!("")), "spec.imageSpec", Required),
        (
            "schedulerName is a DNS-1123 subdomain",
            with(valid_scheduler(), "/spec/schedulerName", json!("Topo Aware")),
            "spec.schedulerName",
            Invalid,
        ),
        ("logLevel enum", with(valid_scheduler(), "/spec/logLevel", json!("Chatty")), "spec.logLevel", NotSupported),
        (
            "cacheResyncPeriod non-negative",
            with(valid_scheduler(), "/spec/cacheResyncPeriod", json!("-5s")),
            "spec.cacheResyncPeriod",
            Invalid,
        ),
        (
            "cacheResyncDebug enum",
            with(valid_scheduler(), "/spec/cacheResyncDebug", json!("DumpYAML")),
            "spec.cacheResyncDebug",
            NotSupported,
        ),
        (
            "schedulerInformer enum",
            with(valid_scheduler(), "/spec/schedulerInformer", json!("Private")),
            "spec.schedulerInformer",
            NotSupported,
        ),
        (
            "cacheResyncDetection enum",
            with(valid_scheduler(), "/spec/cacheResyncDetection", json!("Lazy")),
            "spec.cacheResyncDetection",
            NotSupported,
        ),
        (
            "preemptionMode enum",
            with(valid_scheduler(), "/spec/preemptionMode", json!("Sometimes")),
            "spec.preemptionMode",
            NotSupported,
        ),
        (
            "scoringStrategy type enum",
            with(valid_scheduler(), "/spec/scoringStrategy/type", json!("Random")),
            "spec.scoringStrategy.type",
            NotSupported,
        ),
        (
            "scoring resource names required",
            with(valid_scheduler(), "/spec/scoringStrategy/resources/0/name", json!("")),
            "spec.scoringStrategy.resources[0].name",
            Required,
        ),
        (
            "scoring resource names unique",
            with(valid_scheduler(), "/spec/scoringStrategy/resources", json!([{"name": "cpu"}, {"name": "cpu"}])),
            "spec.scoringStrategy.resources[1].name",
            Duplicate,
        ),
        (
            "scoring weights not negative",
            with(valid_scheduler(), "/spec/scoringStrategy/resources/0/weight", json!(-1)),
            "spec.scoringStrategy.resources[0].weight",
            Invalid,
        ),
        ("replicas non-negative", with(valid_scheduler(), "/spec/replicas", json!(-1)), "spec.replicas", Invalid),
        (
            "podRouting mode enum",
            with(valid_scheduler(), "/spec/podRouting/mode", json!("Everything")),
            "spec.podRouting.mode",
            NotSupported,
        ),
        (
            "podRouting namespaceSelector parses",
            with(
                valid_scheduler(),
                "/spec/podRouting/namespaceSelector",
                json!({"matchExpressions": [{"key": "numa", "operator": "Exists", "values": ["x"]}]}),
            ),
            "spec.podRouting.namespaceSelector.matchExpressions[0].values",
            Forbidden,
        ),
    ];
    for (row, object, path, kind) in rows {
        assert_single(&scheduler_errors(object), path, kind, row);
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let object = json!({
        "metadata": {"name": "wrong"},
        "spec": {
            "logLevel": "Loud",
            "nodeGroups": [{}, {"poolName": ""}, {"poolName": "a"}, {"poolName": "a"}]
        }
    });
    let errors = operator_errors(object);
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "metadata.name",
            "spec.logLevel",
            "spec.nodeGroups[0]",
            "spec.nodeGroups[1].poolName",
            "spec.nodeGroups[3].poolName",
        ]
    );
    let message = errors.to_string();
    assert!(message.starts_with('[') && message.contains("spec.nodeGroups[0]: Required value"), "{message}");
}

#[test]
fn upstream_yaml_reads_unchanged() {
    // The shape of upstream's own samples, including fields only OpenShift uses.
    let nro: NUMAResourcesOperator = serde_norway::from_str(
        r#"
apiVersion: nodetopology.openshift.io/v1
kind: NUMAResourcesOperator
metadata:
  name: numaresourcesoperator
spec:
  nodeGroups:
  - machineConfigPoolSelector:
      matchLabels:
        pools.operator.machineconfiguration.openshift.io/worker: ""
    config:
      podsFingerprinting: Enabled
      infoRefreshMode: PeriodicAndEvents
      infoRefreshPeriod: 1m30s
status:
  nodeGroups:
  - daemonsets: {namespace: openshift-numaresources, name: numaresourcesoperator-worker}
    config: {podsFingerprinting: Enabled}
    selector: worker
"#,
    )
    .unwrap();
    assert!(validate_operator(&nro).is_empty());
    let status = nro.status.as_ref().unwrap();
    assert_eq!(status.node_groups[0].pool_name, "worker");
    assert_eq!(status.node_groups[0].daemon_set.name, "numaresourcesoperator-worker");
    let back = serde_json::to_value(&nro).unwrap();
    assert_eq!(back["spec"]["nodeGroups"][0]["config"]["infoRefreshPeriod"], "1m30s");
    assert_eq!(back["status"]["nodeGroups"][0]["selector"], "worker");
}
