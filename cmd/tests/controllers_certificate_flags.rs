//! `--certificate-mode` and `--apiserver-deployment` of `numaresources controllers`: the values
//! the manifests and the OLM bundle pass, and the refusals a typo or an impossible pair gets.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::process::{Command, Output};

use support::stderr;

/// Runs `numaresources controllers` with a kubeconfig that does not exist, so a run that gets
/// past flag checking fails at once on it (no cluster needed).
fn controllers(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(support::BINARY);
    command
        .args(["controllers", "--image", "x", "--health-port", "0", "--kubeconfig", "/nonexistent/kubeconfig"])
        .args(args)
        .env_remove("NUMARESOURCES_CERTIFICATE_MODE")
        .env_remove("NUMARESOURCES_APISERVER_DEPLOYMENT");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("the binary runs")
}

#[test]
fn every_documented_value_is_accepted_by_flag_and_by_environment() {
    for mode in ["self-managed", "olm", "cert-manager", "service-ca"] {
        let by_flag = controllers(&["--certificate-mode", mode, "--apiserver-deployment", "installed"], &[]);
        assert!(stderr(&by_flag).contains("reading the kubeconfig"), "{mode}: {}", stderr(&by_flag));
        let by_env = controllers(
            &[],
            &[("NUMARESOURCES_CERTIFICATE_MODE", mode), ("NUMARESOURCES_APISERVER_DEPLOYMENT", "installed")],
        );
        assert!(stderr(&by_env).contains("reading the kubeconfig"), "{mode}: {}", stderr(&by_env));
    }
    let defaults = controllers(&[], &[]);
    assert!(stderr(&defaults).contains("reading the kubeconfig"), "{}", stderr(&defaults));
}

#[test]
fn an_unknown_value_is_refused_with_the_choices() {
    let out = controllers(&["--certificate-mode", "selfmanaged"], &[]);
    assert!(!out.status.success());
    let message = stderr(&out);
    assert!(message.contains("self-managed") && message.contains("service-ca"), "{message}");
    let out = controllers(&["--apiserver-deployment", "olm"], &[]);
    assert!(stderr(&out).contains("installed"), "{}", stderr(&out));
}

#[test]
fn olm_certificates_with_an_operator_rendered_api_server_are_refused_before_anything_runs() {
    let out = controllers(&["--certificate-mode", "olm"], &[]);
    assert!(!out.status.success());
    let message = stderr(&out);
    assert!(message.contains("--apiserver-deployment=installed"), "{message}");
    assert!(!message.contains("reading the kubeconfig"), "refused before connecting: {message}");
}
