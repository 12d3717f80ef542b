//! The real `kubectl` against a standalone `numaresources apiserver` process: static tokens in
//! kube-apiserver's CSV format (an admin in `system:masters`, a reader), the serving certificate
//! generated into `--cert-dir` and trusted by the kubeconfig the test writes.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::path::PathBuf;

use serde_json::Value;
use support::apiserver::ApiServer;
use support::{Process, kubectl_command, kubectl_fails, kubectl_ok, nrt_fixture, write_kubeconfig};

struct Standalone {
    _server: ApiServer,
    /// The admin's kubeconfig; `--token reader-token` makes a reader of it.
    admin: PathBuf,
    dir: tempfile::TempDir,
}

const READER: &[&str] = &["--token", "reader-token"];

fn start() -> Standalone {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "admin-token,admin,uid-1,\"system:masters,ops\"\nreader-token,reader,uid-2\n").unwrap();
    let server = ApiServer::start(dir.path(), &["--token-auth-file", tokens.to_str().unwrap()]);
    let admin = dir.path().join("admin.kubeconfig");
    write_kubeconfig(&admin, &server.url, &ApiServer::cert_dir(dir.path()).join("apiserver.crt"), "admin-token");
    Standalone { _server: server, admin, dir }
}

impl Standalone {
    fn ok(&self, args: &[&str]) -> String {
        kubectl_ok(&self.admin, args)
    }

    fn fails(&self, args: &[&str]) -> String {
        kubectl_fails(&self.admin, args)
    }

    /// `args` with the reader's token.
    fn as_reader<'a>(&self, args: &[&'a str]) -> Vec<&'a str> {
        READER.iter().chain(args).copied().collect()
    }

    /// Writes `object` to a file for `kubectl -f`.
    fn file(&self, name: &str, object: &Value) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(object).unwrap()).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

#[test]
fn kubectl_reads_writes_and_is_refused_as_kube_apiserver_would() {
    let server = start();
    let versions = server.ok(&["api-versions"]);
    assert!(versions.lines().any(|l| l == "topology.node.k8s.io/v1alpha2"), "{versions}");
    assert!(server.ok(&["create", "-f", &nrt_fixture()]).contains("worker-0 created"));

    // Output formats: yaml (with the server-set freshness annotation), wide (the extra columns).
    let yaml = server.ok(&["get", "nrt", "worker-0", "-o", "yaml"]);
    assert!(yaml.contains("kind: NodeResourceTopology") && yaml.contains("nodetopology.openshift.io/last-change"));
    let table = server.ok(&["get", "nrt"]);
    let wide = server.ok(&["get", "nrt", "-o", "wide"]);
    assert!(!table.contains("SCOPE") && wide.contains("SCOPE") && wide.contains("FINGERPRINT"), "{wide}");
    assert!(wide.contains("container") && wide.contains("pfp0v001a9cddfe43845cd3a"), "{wide}");

    // replace, from what get returned.
    let mut object: Value = serde_json::from_str(&server.ok(&["get", "nrt", "worker-0", "-o", "json"])).unwrap();
    object["metadata"]["labels"] = serde_json::json!({"pool": "a"});
    let current = server.file("current.json", &object);
    assert!(server.ok(&["replace", "-f", &current]).contains("worker-0 replaced"));

    // patch --type json, then replacing with the now stale resourceVersion is a conflict.
    let patch = r#"[{"op":"replace","path":"/metadata/labels/pool","value":"b"}]"#;
    server.ok(&["patch", "nrt", "worker-0", "--type", "json", "-p", patch]);
    assert_eq!(server.ok(&["get", "nrt", "worker-0", "-o", "jsonpath={.metadata.labels.pool}"]), "b");
    let stale = server.fails(&["replace", "-f", &current]);
    assert!(stale.contains("Conflict") || stale.contains("the object has been modified"), "{stale}");

    // An invalid object: 422 naming the field.
    let mut invalid = object.clone();
    invalid["metadata"] = serde_json::json!({"name": "worker-bad"});
    invalid["zones"][0]["resources"][0]["available"] = Value::from("a lot");
    let refused = server.fails(&["create", "-f", &server.file("invalid.json", &invalid)]);
    assert!(refused.contains("is invalid") && refused.contains("zones[0].resources[0].available"), "{refused}");

    // The reader reads, may not write (403); an unknown token is 401.
    let read = kubectl_ok(&server.admin, &server.as_reader(&["get", "nrt", "-o", "name"]));
    assert_eq!(read.trim(), "noderesourcetopology.topology.node.k8s.io/worker-0");
    let forbidden = kubectl_fails(&server.admin, &server.as_reader(&["delete", "nrt", "worker-0"]));
    assert!(forbidden.contains("Forbidden") && forbidden.contains("User \"reader\" cannot delete"), "{forbidden}");
    let unknown = server.fails(&["get", "nrt", "--token", "not-a-token"]);
    assert!(unknown.contains("Unauthorized") || unknown.contains("provide credentials"), "{unknown}");
}

#[test]
fn kubectl_get_watch_sees_another_clients_writes() {
    let server = start();
    server.ok(&["create", "-f", &nrt_fixture()]);
    server.ok(&["label", "nrt", "worker-0", "pool=first"]);
    let watch_args =
        server.as_reader(&["get", "nrt", "worker-0", "-w", "-o", "jsonpath={.metadata.labels.pool}{\"\\n\"}"]);
    let watch = Process::spawn_stdout(&mut kubectl_command("kubectl", &server.admin, &watch_args));
    watch.wait_for(&["first"]);
    // Another client (the admin) writes; the reader's watch prints the change.
    server.ok(&["label", "nrt", "worker-0", "pool=second", "--overwrite"]);
    watch.wait_for(&["second"]);
    server.ok(&["delete", "nrt", "worker-0"]);
}
