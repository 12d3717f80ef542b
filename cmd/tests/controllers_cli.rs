//! `numaresources controllers` and `numaresources pause` as a user (and a DaemonSet) runs them.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::process::Output;
use std::time::Duration;

use support::{Process, stderr};

fn numaresources(args: &[&str]) -> Output {
    support::numaresources(args).env_remove("NUMARESOURCES_IMAGE").output().expect("the binary runs")
}

#[test]
fn controllers_take_the_flags_the_manifests_use() {
    let out = numaresources(&["controllers", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in
        ["--image", "--namespace", "--leader-elect", "--leader-election-namespace", "--kubeconfig", "--health-port"]
    {
        assert!(help.contains(flag), "{flag} in {help}");
    }
    let missing_image = numaresources(&["controllers"]);
    assert!(!missing_image.status.success());
    assert!(stderr(&missing_image).contains("--image"));
}

#[test]
fn an_unreadable_kubeconfig_is_a_clear_error() {
    let out = numaresources(&[
        "controllers",
        "--image",
        "x",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
        "--health-port",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("reading the kubeconfig /nonexistent/kubeconfig"));
}

#[test]
fn every_configuration_problem_is_reported_at_once_before_connecting() {
    let out = numaresources(&[
        "controllers",
        "--image",
        "",
        "--namespace",
        "Numa",
        "--certificate-mode",
        "olm",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert!(!out.status.success());
    let stderr = stderr(&out);
    for problem in ["namespace \"Numa\"", "the image must be set", "--apiserver-deployment=installed"] {
        assert!(stderr.contains(problem), "{problem} in {stderr}");
    }
    assert!(!stderr.contains("reading the kubeconfig"), "refused before connecting: {stderr}");
}

/// The shared-pool container's process: it waits, and SIGTERM (what the kubelet sends) ends it
/// cleanly.
#[test]
fn pause_sleeps_until_sigterm_and_exits_cleanly() {
    let mut pause =
        Process::spawn(support::numaresources(&["pause"]).env("NUMARESOURCES_LOG", "numaresources_runtime=debug"));
    pause.wait_for(&["listening for SIGTERM"]); // the handlers are installed
    let status = pause.terminate(Duration::from_secs(30));
    pause.wait_for(&["shutting down"]);
    assert!(status.success(), "{status}");
}

#[test]
fn pause_exists_for_the_shared_pool_container() {
    let out = numaresources(&["pause", "--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
