//! The real binary, run as a user runs it.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::path::Path;
use std::process::Output;

use support::{stderr, stdout, unpack_sysfs};

fn numaresources(args: &[&str]) -> Output {
    support::numaresources(args).output().expect("the binary runs")
}

#[test]
fn version_names_the_commit() {
    let out = numaresources(&["--version"]);
    assert!(out.status.success());
    let line = stdout(&out);
    assert!(line.starts_with("numaresources 0."), "{line}");
    assert!(line.contains("(commit "), "{line}");
}

#[test]
fn crds_print_as_one_yaml_stream() {
    let out = numaresources(&["crds"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = stdout(&out);
    assert_eq!(stdout.matches("kind: CustomResourceDefinition").count(), 2);
    assert!(stdout.contains("\n---\n"));
}

#[test]
fn crds_write_then_check_then_catch_drift() {
    let dir = std::env::temp_dir().join(format!("numaresources-crds-{}", std::process::id()));
    let dir_arg = dir.to_str().unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let write = numaresources(&["crds", "--output-dir", dir_arg]);
    assert!(write.status.success(), "{}", stderr(&write));
    let file = dir.join("nodetopology.openshift.io_numaresourcesoperators.yaml");
    assert!(file.exists());

    let check = numaresources(&["crds", "--output-dir", dir_arg, "--check"]);
    assert!(check.status.success(), "{}", stderr(&check));

    std::fs::write(&file, "# edited by hand\n").unwrap();
    let drift = numaresources(&["crds", "--output-dir", dir_arg, "--check"]);
    assert_eq!(drift.status.code(), Some(1));
    let message = stderr(&drift);
    assert!(message.contains("numaresourcesoperators.yaml differs"), "{message}");
    assert!(message.contains("run `numaresources crds --output-dir"), "{message}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn checked_in_crds_are_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    let out = numaresources(&["crds", "--output-dir", dir.to_str().unwrap(), "--check"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn unknown_subcommands_and_bad_flags_fail_with_usage() {
    let out = numaresources(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("Usage"));
    let out = numaresources(&["crds", "--check"]);
    assert_eq!(out.status.code(), Some(2), "--check needs --output-dir");
}

/// `rte` with no kubelet and no API server, as the README shows it.
fn rte_oneshot(sys: &Path, extra: &[&str]) -> Output {
    let mut command = support::rte_alone(sys, &["--oneshot", "--metrics-mode=disabled"]);
    command.args(extra).env_remove("NUMARESOURCES_LOG").output().unwrap()
}

#[test]
fn rte_oneshot_prints_the_machine_topology_without_a_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let sys = unpack_sysfs(dir.path());
    let out = rte_oneshot(&sys, &["-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("allocatable = capacity"), "the missing kubelet is said: {}", stderr(&out));
    let nrt: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(nrt["kind"], "NodeResourceTopology");
    assert_eq!(nrt["metadata"]["name"], "worker-0");
    let zones = nrt["zones"].as_array().unwrap();
    assert_eq!(zones.iter().map(|z| z["name"].as_str().unwrap()).collect::<Vec<_>>(), ["node-0", "node-1"]);
    for zone in zones {
        let cpu = zone["resources"].as_array().unwrap().iter().find(|r| r["name"] == "cpu").unwrap();
        assert_eq!(
            (&cpu["capacity"], &cpu["allocatable"], &cpu["available"]),
            (&"12".into(), &"12".into(), &"12".into())
        );
    }

    let yaml = rte_oneshot(&sys, &["-o", "yaml"]);
    assert!(yaml.status.success(), "{}", stderr(&yaml));
    assert!(stdout(&yaml).starts_with("apiVersion: topology.node.k8s.io/v1alpha2\n"), "{}", stdout(&yaml));
}

#[test]
fn rte_klog_verbosity_sets_the_log_filter_unless_log_level_does() {
    let dir = tempfile::tempdir().unwrap();
    let sys = unpack_sysfs(dir.path());
    let quiet = rte_oneshot(&sys, &["-v=2"]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert!(!stderr(&quiet).contains("DEBUG"), "{}", stderr(&quiet));
    let verbose = rte_oneshot(&sys, &["-v=4"]);
    assert!(stderr(&verbose).contains("DEBUG"), "-v=4 means debug: {}", stderr(&verbose));
    let overridden = rte_oneshot(&sys, &["-v=4", "--log-level=warn"]);
    assert!(!stderr(&overridden).contains("DEBUG") && !stderr(&overridden).contains(" INFO "));
}

#[test]
fn rte_output_needs_oneshot_and_bad_flags_are_all_reported() {
    let out = numaresources(&["rte", "-o", "yaml", "--topology-manager-policy", "numa-please", "--hostname", "n"]);
    assert!(!out.status.success());
    let message = stderr(&out);
    assert!(message.contains("--output") && message.contains("add --oneshot"), "{message}");
    assert!(message.contains("--topology-manager-policy"), "every problem at once: {message}");
    // A value that does not parse is refused by its flag's parser, before anything runs.
    let out = numaresources(&["rte", "--sleep-interval", "soon", "--hostname", "n"]);
    assert!(!out.status.success());
    let message = stderr(&out);
    assert!(message.contains("'soon'") && message.contains("--sleep-interval"), "{message}");
}
