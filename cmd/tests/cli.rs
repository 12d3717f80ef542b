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
