//! End to end: `numaresources local` serving a real sysfs tree over TLS, driven by the real
//! `kubectl` (installed by scripts/setup.sh where missing).

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use serde_json::Value;
use support::local::{launch, start, start_with};
use support::nrt_fixture;

#[test]
fn kubectl_reads_this_machines_topology() {
    let server = start();
    server.process.wait_for(&["no kubelet here: allocatable = capacity, nothing allocated"]);

    let table = server.kubectl_ok(&["get", "noderesourcetopologies"]);
    assert!(table.contains("NAME") && table.contains("ZONES") && table.contains("POLICY"), "{table}");
    assert!(table.contains("fixture-node"), "{table}");
    assert!(table.contains("12/12 12/12"), "both zones show 12 available of 12 CPUs: {table}");

    let json: Value = serde_json::from_str(&server.kubectl_ok(&["get", "nrt", "fixture-node", "-o", "json"])).unwrap();
    let zones = json["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 2);
    assert_eq!(zones[0]["name"], "node-0");
    assert_eq!(zones[0]["costs"][1]["value"], 20);
    let cpu = zones[1]["resources"].as_array().unwrap().iter().find(|r| r["name"] == "cpu").unwrap();
    assert_eq!(cpu["capacity"], "12");
    let policy = json["attributes"].as_array().unwrap().iter().find(|a| a["name"] == "topologyManagerPolicy").unwrap();
    assert_eq!(policy["value"], "none");

    let resources = server.kubectl_ok(&["api-resources", "--api-group=topology.node.k8s.io"]);
    assert!(resources.contains("noderesourcetopologies") && resources.contains("nrt"), "{resources}");
}

#[test]
fn kubectl_writes_patches_and_deletes_objects() {
    let server = start();
    let fixture = nrt_fixture();
    let applied = server.kubectl_ok(&["apply", "-f", &fixture]);
    assert!(applied.contains("worker-0 created"), "{applied}");
    let again = server.kubectl_ok(&["apply", "-f", &fixture]);
    assert!(again.contains("worker-0 unchanged") || again.contains("worker-0 configured"), "{again}");

    let patch = r#"{"metadata":{"labels":{"pool":"cnf"}}}"#;
    server.kubectl_ok(&["patch", "nrt", "worker-0", "--type=merge", "-p", patch]);
    let labelled = server.kubectl_ok(&["get", "nrt", "-l", "pool=cnf", "-o", "name"]);
    assert_eq!(labelled.trim(), "noderesourcetopology.topology.node.k8s.io/worker-0");

    let strategic = server.kubectl(&["patch", "nrt", "worker-0", "--type=strategic", "-p", patch]);
    assert!(!strategic.status.success());
    assert!(String::from_utf8_lossy(&strategic.stderr).contains("strategic merge patch is not supported"));

    let missing = server.kubectl(&["get", "nrt", "worker-9"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("\"worker-9\" not found"));

    server.kubectl_ok(&["delete", "nrt", "worker-0", "--wait=true", "--timeout=30s"]);
    let left = server.kubectl_ok(&["get", "nrt", "-o", "name"]);
    assert!(!left.contains("worker-0"), "{left}");
}

#[test]
fn kubectl_explain_finds_the_schema() {
    let server = start();
    let explained = server.kubectl_ok(&["explain", "noderesourcetopologies.zones.resources"]);
    assert!(explained.contains("allocatable"), "{explained}");
}

#[test]
fn a_wrong_token_is_401_and_a_simulated_fleet_is_listed() {
    let server = start_with(&["--simulate-nodes", "9"]);
    let denied = server.kubectl(&["get", "nrt", "--token", "not-the-token"]);
    assert!(!denied.status.success());
    let stderr = String::from_utf8_lossy(&denied.stderr);
    // kubectl's wording for a 401.
    assert!(stderr.contains("provide credentials") || stderr.contains("Unauthorized"), "{stderr}");
    let names = server.kubectl_ok(&["get", "nrt", "-o", "name"]);
    assert_eq!(names.lines().filter(|l| l.contains("/sim-")).count(), 9, "{names}");
    assert!(names.contains("/fixture-node"), "{names}");
    // -v=6 logs every request: ten pages of one, the nine after the first following a token.
    let chunked = server.kubectl(&["get", "nrt", "--chunk-size=1", "-o", "name", "-v=6"]);
    assert!(chunked.status.success(), "{}", String::from_utf8_lossy(&chunked.stderr));
    assert_eq!(String::from_utf8_lossy(&chunked.stdout).lines().count(), 10);
    let log = String::from_utf8_lossy(&chunked.stderr);
    let pages: Vec<&str> =
        log.lines().filter(|l| l.contains("/noderesourcetopologies?") && l.contains("limit=1")).collect();
    assert_eq!(pages.len(), 10, "one request per object: {log}");
    assert_eq!(pages.iter().filter(|l| l.contains("continue=")).count(), 9, "{log}");
}

#[test]
fn a_socket_left_by_a_stopped_kubelet_is_no_kubelet_yet() {
    // A dead kubelet's socket: the file is there, nobody accepts on it. Until a kubelet answers
    // on it, the machine's own view is published (once one has answered, a failing kubelet gets
    // nothing published: rte/tests/agent.rs).
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let server = launch(&[], socket.to_str().unwrap());

    server.process.wait_for(&["a kubelet socket exists but does not answer"]);
    server.process.wait_for(&["published the node topology"]);
    let table = server.kubectl_ok(&["get", "nrt", "fixture-node"]);
    assert!(table.contains("12/12 12/12"), "the machine's own view: {table}");
    assert!(server.kubectl(&["get", "--raw", "/readyz"]).status.success());
}

#[test]
fn a_kubelet_config_that_is_not_one_means_the_kubelet_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "topologyManagerPolicy: [this is: not a policy\n").unwrap();
    let server = start_with(&["--kubelet-config", config.to_str().unwrap()]);

    server.process.wait_for(&["using the kubelet defaults none/container"]);
    let json: Value = serde_json::from_str(&server.kubectl_ok(&["get", "nrt", "fixture-node", "-o", "json"])).unwrap();
    let attribute = |name: &str| json["attributes"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned();
    assert_eq!(attribute("topologyManagerPolicy").unwrap()["value"], "none");
    assert_eq!(attribute("topologyManagerScope").unwrap()["value"], "container");
}
