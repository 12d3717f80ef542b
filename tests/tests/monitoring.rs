//! manifests/monitoring/: the kustomize Component builds over the default install with a monitor
//! for every component; every metric its alerts and dashboard name is one a component registers
//! (read from the registries the components build, encoded as a scrape sees them, and from the
//! code that registers them) or one of the few external ones; `promtool check rules` and
//! `promtool test rules` pass (promtool: scripts/setup.sh; missing is a failure when CI=true).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use numaresources_apiserver::auth::Standalone;
use numaresources_apiserver::config::{Args as ApiServerArgs, Authentication};
use numaresources_apiserver::replication::{PeerTls, ReplicaConfig};
use numaresources_apiserver::{ApiServer, Clients};
use numaresources_runtime::admin::Registry;
use serde_json::Value;

/// Metrics of other programs the rules rely on, with their owner.
const EXTERNAL_METRICS: &[(&str, &str)] = &[
    ("aggregator_unavailable_apiservice", "kube-apiserver"),
    ("certmanager_certificate_expiration_timestamp_seconds", "cert-manager"),
    ("up", "Prometheus"),
];

/// PromQL words that are not metric names.
const PROMQL_WORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan", "le"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The names `register("name", …)` and the `"name": "help" => series` lines of
/// `register_series!` register in `source`, each with `prefix`.
fn registered(source: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("register(") {
        rest = &rest[at + "register(".len()..];
        let trimmed = rest.trim_start();
        if let Some(quoted) = trimmed.strip_prefix('"') {
            let name = &quoted[..quoted.find('"').unwrap()];
            names.push(format!("{prefix}{name}"));
        }
    }
    for table in source.split("register_series!(").skip(1) {
        let table = &table[..table.find(");").unwrap()];
        for line in table.lines().filter_map(|line| line.trim().strip_prefix('"')) {
            let (name, _) = line.split_once("\": \"").unwrap_or_else(|| panic!("a series line: {line}"));
            names.push(format!("{prefix}{name}"));
        }
    }
    names
}

/// The metric families in an exposition: the names of its `# TYPE` lines.
fn families(registry: &Registry) -> Vec<String> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines().filter_map(|line| line.strip_prefix("# TYPE ")?.split(' ').next().map(str::to_owned)).collect()
}

/// A client for components that are made, never run: nothing listens at its address.
fn unused_client() -> kube::Client {
    kube::Client::try_from(kube::Config::new("https://127.0.0.1:9".parse().unwrap())).unwrap()
}

/// Every metric family the components register, with the suffixes the text format gives samples
/// (counters `_total`, histograms `_bucket`/`_sum`/`_count`): read from their registries as the
/// admin port serves them (which shows the families a collector computes when scraped, but not
/// a labelled family before its first sample), and from the code that registers them.
fn known_metrics() -> BTreeSet<String> {
    let mut registry = Registry::default();
    // The API server as a replica, so replication's series are there too.
    let mut config = numaresources_runtime::flags::defaults::<ApiServerArgs>().unwrap().config().unwrap();
    config.authentication = Authentication::Standalone(Standalone::from_token_file("").unwrap());
    config.replication = Some(ReplicaConfig {
        identity: "replica-0".into(),
        advertise: "https://127.0.0.1:6444".into(),
        tls: PeerTls {
            ca_file: "ca.crt".into(),
            cert_file: "tls.crt".into(),
            key_file: "tls.key".into(),
            server_name: "peer".into(),
        },
    });
    let clients = Clients { main: unused_client(), authentication: unused_client(), authorization: None };
    ApiServer::new(config, Some(clients)).unwrap().register_metrics(&mut registry);
    let webhook = numaresources_webhook::Webhook::new(
        numaresources_webhook::Config::new("numaresources").unwrap(),
        unused_client(),
    );
    webhook.register_metrics(&mut registry);
    let settings = numaresources_controllers::Settings::kubernetes("numaresources", "image");
    let controllers = numaresources_controllers::Controllers::new(
        numaresources_controllers::Config::new(settings, None).unwrap(),
        unused_client(),
    );
    controllers.register_metrics(&mut registry);
    let rte = numaresources_rte::config::Args { hostname: Some("worker-0".into()), ..Default::default() };
    numaresources_rte::exporter::Exporter::new(rte.resolve().unwrap(), None).register_metrics(&mut registry);

    let mut bases = families(&registry);
    assert!(bases.len() > 20, "the registries were read: {bases:?}");
    bases.extend(registered(&read("apiserver/src/metrics.rs"), "numaresources_apiserver_"));
    bases.extend(registered(&read("webhook/src/metrics.rs"), "numaresources_webhook_"));
    bases.extend(registered(&read("controllers/src/metrics.rs"), "numaresources_controllers_"));
    // The exporter: upstream's names (`rte_*`) at the top level, ours under numaresources_rte.
    for name in registered(&read("rte/src/metrics.rs"), "") {
        bases.push(if name.starts_with("rte_") { name } else { format!("numaresources_rte_{name}") });
    }
    let mut known = BTreeSet::new();
    for base in bases {
        for suffix in ["", "_total", "_bucket", "_sum", "_count"] {
            known.insert(format!("{base}{suffix}"));
        }
    }
    known.extend(EXTERNAL_METRICS.iter().map(|(name, _)| name.to_string()));
    known
}

/// The metric names a PromQL expression selects: identifiers outside strings, label matchers,
/// ranges and groupings, not followed by `(` (functions), not PromQL words.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut plain = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut in_string = false;
    for c in expr.chars() {
        match c {
            '"' => in_string = !in_string,
            _ if in_string => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            _ => plain.push(c),
        }
        if c == '}' || c == ']' || c == '"' {
            plain.push(' ');
        }
    }
    // Groupings: `by (a, b)`, `on (node)`, …: drop their label lists.
    for keyword in ["by", "without", "on", "ignoring", "group_left", "group_right"] {
        while let Some(at) = find_word(&plain, keyword) {
            let after = &plain[at + keyword.len()..];
            let close = after.find(')').unwrap();
            plain = format!("{} {}", &plain[..at], &after[close + 1..]);
        }
    }
    let mut names = BTreeSet::new();
    let bytes = plain.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i] as char;
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < bytes.len()
                && ((bytes[i] as char).is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b':')
            {
                i += 1;
            }
            let word = &plain[start..i];
            let called = plain[i..].trim_start().starts_with('(');
            if !called && !PROMQL_WORDS.contains(&word.to_lowercase().as_str()) {
                names.insert(word.to_owned());
            }
        } else if c.is_ascii_digit() {
            // Numbers (and their exponents or units, e.g. 1e3, 5m) are not names.
            while i < bytes.len() && (bytes[i] as char).is_ascii_alphanumeric() {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(word).map(|a| a + from) {
        let before = text[..at].chars().last().is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_');
        let after = &text[at + word.len()..];
        if before
            && after.trim_start().starts_with('(')
            && !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

fn rule_spec() -> Value {
    let rule: Value = serde_norway::from_str(&read("manifests/monitoring/prometheus-rule.yaml")).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

fn expressions() -> Vec<(String, String)> {
    let mut exprs = Vec::new();
    for group in rule_spec()["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            exprs.push((
                format!("alert {}", rule["alert"].as_str().unwrap()),
                rule["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let dashboard: Value = serde_json::from_str(&read("manifests/monitoring/dashboards/numaresources.json")).unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push((format!("panel {}", panel["title"]), target["expr"].as_str().unwrap().to_owned()));
        }
    }
    exprs
}

#[test]
fn the_expression_reader_finds_names_and_skips_the_rest() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, verb) (rate(a_bucket{x="y"}[5m]))) > 0.1 and on (node) b_total - time() < 7 * 86400 or vector(0)"#,
    );
    assert_eq!(names, BTreeSet::from(["a_bucket".to_owned(), "b_total".to_owned()]));
}

#[tokio::test]
async fn every_metric_named_by_an_alert_or_a_panel_is_registered() {
    let known = known_metrics();
    for name in [
        "numaresources_apiserver_node_report_age_seconds",
        "numaresources_apiserver_replication_lag_revisions",
        "numaresources_webhook_pods_routed_total",
        "numaresources_rte_publishes_total",
        "numaresources_controllers_reconciliations_total",
    ] {
        assert!(known.contains(name), "{name} read from the registries");
    }
    let mut unknown = Vec::new();
    let mut used = BTreeSet::new();
    for (place, expr) in expressions() {
        for name in metric_names(&expr) {
            if !known.contains(&name) {
                unknown.push(format!("{place}: {name} in {expr}"));
            }
            used.insert(name);
        }
    }
    assert!(unknown.is_empty(), "metrics no component registers:\n{}", unknown.join("\n"));
    // Each component shows up somewhere.
    for prefix in [
        "numaresources_apiserver_",
        "numaresources_apiserver_replication_",
        "numaresources_webhook_",
        "numaresources_rte_",
        "numaresources_controllers_",
    ] {
        assert!(used.iter().any(|n| n.starts_with(prefix)), "nothing of {prefix}*");
    }
}

fn promtool() -> Option<PathBuf> {
    let found = Command::new("promtool").arg("--version").output().is_ok_and(|o| o.status.success());
    if found {
        return Some(PathBuf::from("promtool"));
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "promtool is missing (scripts/setup.sh installs it: Debian package prometheus)"
    );
    eprintln!("skipping: promtool is not installed (scripts/setup.sh installs it)");
    None
}

#[test]
fn promtool_checks_the_rules_and_passes_their_unit_tests() {
    let Some(promtool) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), serde_norway::to_string(&rule_spec()).unwrap()).unwrap();
    std::fs::write(dir.path().join("alerts.test.yaml"), read("manifests/monitoring/alerts.test.yaml")).unwrap();
    for args in [["check", "rules", "rules.yaml"], ["test", "rules", "alerts.test.yaml"]] {
        let out = Command::new(&promtool).args(args).current_dir(dir.path()).output().unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_component_adds_a_monitor_for_every_component_to_the_install() {
    let target = repo().join("target");
    std::fs::create_dir_all(&target).unwrap();
    let dir = tempfile::tempdir_in(&target).unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../manifests/default\ncomponents:\n- ../../manifests/monitoring\n",
    )
    .unwrap();
    let out = Command::new("kubectl").arg("kustomize").arg(dir.path()).output().expect("kubectl (scripts/setup.sh)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let objects: Vec<Value> = text.split("\n---\n").map(|doc| serde_norway::from_str(doc).unwrap()).collect();
    let pod_labels = |name: &str| {
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name).unwrap();
        deployment["spec"]["template"]["metadata"]["labels"].clone()
    };
    let selects = |monitor: &Value, labels: &Value| {
        monitor["spec"]["selector"]["matchLabels"].as_object().unwrap().iter().all(|(k, v)| &labels[k] == v)
    };
    for (kind, name, deployment) in [
        ("PodMonitor", "numaresources-apiserver", Some("numaresources-apiserver")),
        ("PodMonitor", "numaresources-webhook", Some("numaresources-webhook")),
        ("PodMonitor", "numaresources-controllers", Some("numaresources-controllers")),
        ("PodMonitor", "numaresources-rte", None),
    ] {
        let monitor = objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"));
        assert_eq!(monitor["metadata"]["namespace"], "numaresources");
        if let Some(deployment) = deployment {
            let labels = pod_labels(deployment);
            assert!(selects(monitor, &labels), "{name} selects the {deployment} pods: {labels}");
            let port = monitor["spec"]["podMetricsEndpoints"][0]["port"].as_str();
            if let Some(port) = port {
                let deployment =
                    objects.iter().find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == deployment).unwrap();
                let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
                assert!(ports.as_array().unwrap().iter().any(|p| p["name"] == port), "{name}: port {port} in {ports}");
            }
        }
    }
    assert!(objects.iter().any(|o| o["kind"] == "PrometheusRule"));
    let dashboard = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "numaresources-dashboard")
        .unwrap();
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
}
