//! What the integration tests and benches share: the resource's path and a small object, the
//! router called in process, our server on a plain socket with a raw HTTP/1.1 client, and our
//! server over real TLS against testkit's kube-apiserver double.

#![allow(dead_code)] // each test binary uses part of the harness

pub mod fleet;
pub mod in_process;
pub mod socket;
pub mod tls;

use std::time::Duration;

use serde_json::{Value, json};

pub const BASE: &str = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies";

/// How long a test waits for what must happen before calling it a failure (a hang guard, not a
/// figure: everything here happens within milliseconds).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits until `done` holds (checked every 5 ms), for [`PATIENCE`] at most: then fails, saying
/// `what` was awaited.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let wait = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait).await.unwrap_or_else(|_| panic!("never happened: {what}"));
}

/// A one-zone NodeResourceTopology labelled `pool=cnf`, with `available` CPUs free.
pub fn nrt(name: &str, available: i64) -> Value {
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name, "labels": {"pool": "cnf"}},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
        "zones": [{"name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": 10}],
                   "resources": [{"name": "cpu", "capacity": 32, "allocatable": 30, "available": available}]}]
    })
}
