//! kubectl 1.28 against `numaresources local`. Up to 1.28, kubectl reads `/openapi/v2` in its
//! protobuf form (gnostic's `openapi.v2.Document`) before `create -f`, `apply -f` and `explain`,
//! and fails the command when it cannot: a 406 sends it to the legacy `/swagger-2.0.0.pb-v1`,
//! and JSON labelled 200 does not decode. scripts/setup.sh installs the binary at
//! `.tools/bin/kubectl-1.28`; without it the test is skipped, except in CI, where it fails.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::local::{Server, start};
use support::{kubectl_command, nrt_fixture, stderr, stdout};

/// The kubectl 1.28 binary, or `None` (outside CI) when it is not installed.
fn kubectl_1_28() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin/kubectl-1.28");
    if path.exists() {
        return Some(path);
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(!in_ci, "{} is missing: scripts/setup.sh installs it, and CI runs every test", path.display());
    eprintln!("skipped: {} is missing (run scripts/setup.sh)", path.display());
    None
}

fn run(server: &Server, kubectl: &Path, args: &[&str]) -> (String, String) {
    let out = kubectl_command(kubectl, &server.kubeconfig, args).output().unwrap();
    assert!(out.status.success(), "kubectl 1.28 {args:?} failed:\n{}\n{}", stderr(&out), stdout(&out));
    (stdout(&out), stderr(&out))
}

/// A fixture object renamed, so each command writes an object of its own.
fn manifest(dir: &Path, name: &str, available_cpus: u32) -> PathBuf {
    let text = std::fs::read_to_string(nrt_fixture()).unwrap();
    let mut object: Value = serde_norway::from_str(&text).unwrap();
    object["metadata"] = serde_json::json!({"name": name});
    object["zones"][0]["resources"][0]["available"] = Value::String(available_cpus.to_string());
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&object).unwrap()).unwrap();
    path
}

#[test]
fn kubectl_1_28_creates_applies_deletes_and_explains() {
    let Some(kubectl) = kubectl_1_28() else { return };
    let (version, _) = run(&start(), &kubectl, &["version", "--client", "-o", "json"]);
    let version: Value = serde_json::from_str(&version).unwrap();
    assert_eq!(version["clientVersion"]["minor"], "28", "{version}");

    let server = start();
    let dir = tempfile::tempdir().unwrap();

    // create -f: kubectl 1.28 fetches /openapi/v2 as protobuf first (-v=6 logs each request).
    let created = manifest(dir.path(), "created-by-1-28", 4);
    let (out, log) = run(&server, &kubectl, &["create", "-f", created.to_str().unwrap(), "-v=6"]);
    assert!(out.contains("created-by-1-28 created"), "{out}");
    let openapi = log.lines().find(|l| l.contains("/openapi/v2")).unwrap_or_else(|| panic!("no /openapi/v2: {log}"));
    assert!(openapi.contains("200 OK"), "{openapi}");

    // apply -f: creates, then changes, the object (client-side apply, a merge patch).
    let applied = manifest(dir.path(), "applied-by-1-28", 4);
    let (out, _) = run(&server, &kubectl, &["apply", "-f", applied.to_str().unwrap()]);
    assert!(out.contains("applied-by-1-28 created"), "{out}");
    let changed = manifest(dir.path(), "applied-by-1-28", 2);
    let (out, _) = run(&server, &kubectl, &["apply", "-f", changed.to_str().unwrap()]);
    assert!(out.contains("applied-by-1-28 configured"), "{out}");
    let (object, _) = run(&server, &kubectl, &["get", "nrt", "applied-by-1-28", "-o", "json"]);
    let object: Value = serde_json::from_str(&object).unwrap();
    assert_eq!(object["zones"][0]["resources"][0]["available"], "2");

    // delete --cascade=orphan: the object stays, marked, for the garbage collector (there is
    // none here) to orphan its dependents and remove the `orphan` finalizer.
    let (out, _) = run(&server, &kubectl, &["delete", "nrt", "created-by-1-28", "--cascade=orphan", "--wait=false"]);
    assert!(out.contains("created-by-1-28\" deleted"), "{out}");
    let (object, _) = run(&server, &kubectl, &["get", "nrt", "created-by-1-28", "-o", "json"]);
    let object: Value = serde_json::from_str(&object).unwrap();
    assert_eq!(object["metadata"]["finalizers"], serde_json::json!(["orphan"]), "{object}");
    assert!(object["metadata"]["deletionTimestamp"].is_string(), "{object}");

    let (explained, _) = run(&server, &kubectl, &["explain", "noderesourcetopologies.zones.resources"]);
    assert!(explained.contains("allocatable"), "{explained}");
    let (explained, _) = run(&server, &kubectl, &["explain", "nrt", "--recursive"]);
    assert!(explained.contains("topologyPolicies") || explained.contains("zones"), "{explained}");
}
