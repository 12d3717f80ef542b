//! The API server metrics that manifests/monitoring/ names, checked against a real process:
//! `numaresources local` serves the API server's /metrics. Each name must be a family the
//! process exposes, with the suffix its type gives it (counter `_total`, histogram
//! `_bucket`/`_sum`/`_count`, gauge none). (The replication metrics exist only on replicated
//! servers; tests/tests/monitoring.rs checks every component's names against its registry.)

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The `numaresources_apiserver_*` names (replication aside) in the monitoring files.
fn names_in_monitoring() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/monitoring");
    let mut names = BTreeSet::new();
    for file in ["prometheus-rule.yaml", "dashboards/numaresources.json"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for (at, _) in text.match_indices("numaresources_apiserver_") {
            let name: String = text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.starts_with("numaresources_apiserver_replication_") {
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn the_api_server_metrics_the_alerts_and_dashboard_use_are_served() {
    let server = support::local::start();
    let exposition = server.kubectl_ok(&["get", "--raw", "/metrics"]);
    let types: BTreeMap<&str, &str> =
        exposition.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_once(' ')).collect();
    let names = names_in_monitoring();
    assert!(names.len() >= 5, "{names:?}");
    for name in names {
        let (base, wanted) =
            [("_total", "counter"), ("_bucket", "histogram"), ("_sum", "histogram"), ("_count", "histogram")]
                .iter()
                .find_map(|(suffix, kind)| name.strip_suffix(suffix).map(|base| (base.to_owned(), *kind)))
                .unwrap_or((name.clone(), "gauge"));
        assert_eq!(
            types.get(base.as_str()).copied(),
            Some(wanted),
            "{name}: served as {base} of type {wanted}? {exposition}"
        );
    }
}
