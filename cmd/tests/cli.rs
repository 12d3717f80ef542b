//! The real binary, run as a user runs it.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::path::Path;
use std::process::{Command, Output};

fn numaresources(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numaresources"))
        .args(args)
        .env("NUMARESOURCES_LOG", "info")
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn version_names_the_commit() {
    let out = numaresources(&["--version"]);
    assert!(out.status.success());
    let line = text(&out.stdout);
    assert!(line.starts_with("numaresources 0."), "{line}");
    assert!(line.contains("(commit "), "{line}");
}

#[test]
fn crds_print_as_one_yaml_stream() {
    let out = numaresources(&["crds"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches("kind: CustomResourceDefinition").count(), 2);
    assert!(stdout.contains("\n---\n"));
}

#[test]
fn crds_write_then_check_then_catch_drift() {
    let dir = std::env::temp_dir().join(format!("numaresources-crds-{}", std::process::id()));
    let dir_arg = dir.to_str().unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let write = numaresources(&["crds", "--output-dir", dir_arg]);
    assert!(write.status.success(), "{}", text(&write.stderr));
    let file = dir.join("nodetopology.openshift.io_numaresourcesoperators.yaml");
    assert!(file.exists());

    let check = numaresources(&["crds", "--output-dir", dir_arg, "--check"]);
    assert!(check.status.success(), "{}", text(&check.stderr));

    std::fs::write(&file, "# edited by hand\n").unwrap();
    let drift = numaresources(&["crds", "--output-dir", dir_arg, "--check"]);
    assert_eq!(drift.status.code(), Some(1));
    let stderr = text(&drift.stderr);
    assert!(stderr.contains("numaresourcesoperators.yaml differs"), "{stderr}");
    assert!(stderr.contains("run `numaresources crds --output-dir"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn checked_in_crds_are_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    let out = numaresources(&["crds", "--output-dir", dir.to_str().unwrap(), "--check"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn unknown_subcommands_and_bad_flags_fail_with_usage() {
    let out = numaresources(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("Usage"));
    let out = numaresources(&["crds", "--check"]);
    assert_eq!(out.status.code(), Some(2), "--check needs --output-dir");
}

/// Unpacks the rte crate's 2-NUMA sysfs fixture (a real machine's tree) and returns its `sys`.
fn two_numa_sysfs(dir: &Path) -> std::path::PathBuf {
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rte/tests/fixtures/sysfs/intel-2numa-24cpu.tar.gz");
    let file = std::fs::File::open(tarball).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(dir).unwrap();
    dir.join("sys")
}

/// `rte` with no kubelet and no API server, as the README shows it.
fn rte_oneshot(sys: &Path, extra: &[&str]) -> Output {
    let sys = sys.to_str().unwrap();
    let mut args = vec![
        "rte",
        "--oneshot",
        "--no-publish",
        "--podresources-socket",
        "none",
        "--sysfs",
        sys,
        "--hostname",
        "worker-0",
        "--metrics-mode=disabled",
        "--podreadiness=false",
    ];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_numaresources")).args(&args).env_remove("NUMARESOURCES_LOG").output().unwrap()
}

#[test]
fn rte_oneshot_prints_the_machine_topology_without_a_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let sys = two_numa_sysfs(dir.path());
    let out = rte_oneshot(&sys, &["-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("allocatable = capacity"), "the missing kubelet is said: {}", text(&out.stderr));
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
    assert!(yaml.status.success(), "{}", text(&yaml.stderr));
    assert!(text(&yaml.stdout).starts_with("apiVersion: topology.node.k8s.io/v1alpha2\n"), "{}", text(&yaml.stdout));
}

#[test]
fn rte_klog_verbosity_sets_the_log_filter_unless_log_level_does() {
    let dir = tempfile::tempdir().unwrap();
    let sys = two_numa_sysfs(dir.path());
    let quiet = rte_oneshot(&sys, &["-v=2"]);
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    assert!(!text(&quiet.stderr).contains("DEBUG"), "{}", text(&quiet.stderr));
    let verbose = rte_oneshot(&sys, &["-v=4"]);
    assert!(text(&verbose.stderr).contains("DEBUG"), "-v=4 means debug: {}", text(&verbose.stderr));
    let overridden = rte_oneshot(&sys, &["-v=4", "--log-level=warn"]);
    assert!(!text(&overridden.stderr).contains("DEBUG") && !text(&overridden.stderr).contains(" INFO "));
}

#[test]
fn rte_output_needs_oneshot_and_bad_flags_are_all_reported() {
    let out = numaresources(&["rte", "-o", "yaml", "--topology-manager-policy", "numa-please", "--hostname", "n"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--output") && stderr.contains("add --oneshot"), "{stderr}");
    assert!(stderr.contains("--topology-manager-policy"), "every problem at once: {stderr}");
    // A value that does not parse is refused by its flag's parser, before anything runs.
    let out = numaresources(&["rte", "--sleep-interval", "soon", "--hostname", "n"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("'soon'") && stderr.contains("--sleep-interval"), "{stderr}");
}
