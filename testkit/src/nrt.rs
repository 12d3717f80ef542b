//! NRTs for scheduling tests, as JSON: NUMA zones of CPUs and a Topology Manager policy.

use serde_json::{Value, json};

/// An NRT for `node` whose NUMA zone `i` has 8 CPUs of which `free[i]` are available, under
/// `policy`, with `attributes` added.
pub fn with_cpus(node: &str, free: &[i64], policy: &str, attributes: &[Value]) -> Value {
    let zones: Vec<Value> = free
        .iter()
        .enumerate()
        .map(|(id, free)| {
            json!({"name": format!("node-{id}"), "type": "Node", "resources": [
                {"name": "cpu", "capacity": "8", "allocatable": "8", "available": free.to_string()}]})
        })
        .collect();
    let mut all = vec![json!({"name": "topologyManagerPolicy", "value": policy})];
    all.extend_from_slice(attributes);
    json!({"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
           "metadata": {"name": node}, "zones": zones, "attributes": all})
}
