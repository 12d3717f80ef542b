//! The worker the in-process and TLS benches load: two NUMA zones of four resources, with
//! `available` CPUs free in each (≈1.3 KiB of JSON).

use serde_json::{Value, json};

pub fn worker(name: &str, available: i64) -> Value {
    let zone = |id: i64| {
        json!({"name": format!("node-{id}"), "type": "Node",
               "costs": [{"name": "node-0", "value": if id == 0 {10} else {21}}, {"name": "node-1", "value": if id == 1 {10} else {21}}],
               "resources": [
                   {"name": "cpu", "capacity": "32", "allocatable": "30", "available": available.to_string()},
                   {"name": "example.com/sriov_vf", "capacity": "8", "allocatable": "8", "available": "7"},
                   {"name": "hugepages-1Gi", "capacity": "17179869184", "allocatable": "17179869184", "available": "12884901888"},
                   {"name": "memory", "capacity": "202355617792", "allocatable": "184022315008", "available": "166842445824"}]})
    };
    json!({"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
           "metadata": {"name": name},
           "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                          {"name": "topologyManagerScope", "value": "container"},
                          {"name": "nodeTopologyPodsFingerprint", "value": "pfp0v001a9cddfe43845cd3a"}],
           "zones": [zone(0), zone(1)]})
}
