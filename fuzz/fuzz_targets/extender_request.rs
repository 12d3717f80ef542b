//! kube-scheduler's extender requests: any body is decoded as the filter, prioritize and bind
//! verbs decode it, and a decoded pod is filtered and scored over nodes of every policy. Nothing
//! may panic, and every candidate gets one answer.
#![no_main]

use std::collections::BTreeSet;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use numaresources_api::fit::kubelet::PolicyOptions;
use numaresources_extender::engine::Engine;
use numaresources_extender::protocol::{ExtenderArgs, ExtenderBindingArgs};

/// Four two-zone nodes, one per Topology Manager policy.
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut engine = Engine::new(PolicyOptions::default(), None);
        for (i, policy) in ["single-numa-node", "restricted", "best-effort", "none"].iter().enumerate() {
            let zone = |id: usize| {
                serde_json::json!({"name": format!("node-{id}"), "type": "Node", "resources": [
                    {"name": "cpu", "capacity": "8", "allocatable": "8", "available": (2 + 3 * id).to_string()},
                    {"name": "memory", "capacity": "16Gi", "allocatable": "16Gi", "available": "8Gi"},
                    {"name": "example.com/nic", "capacity": "2", "allocatable": "2", "available": id.to_string()}]})
            };
            let nrt = serde_json::json!({"metadata": {"name": format!("worker-{i}")},
                "attributes": [{"name": "topologyManagerPolicy", "value": policy}], "zones": [zone(0), zone(1)]});
            engine.nrt_changed(serde_json::from_value(nrt).expect("a valid NRT"));
        }
        engine
    })
}

fuzz_target!(|body: &[u8]| {
    let _ = serde_json::from_slice::<ExtenderBindingArgs>(body);
    let Ok(args) = serde_json::from_slice::<ExtenderArgs>(body) else { return };
    let (pod, candidates) = args.into_pod_and_candidates();
    let Some(pod) = pod else { return };
    let engine = engine();
    let filtered = engine.filter(&pod, candidates.clone());
    let passing = filtered.node_names.clone().unwrap_or_default();
    let failed = filtered.failed_nodes.clone().unwrap_or_default();
    let unresolvable = filtered.failed_and_unresolvable_nodes.clone().unwrap_or_default();
    let answered: BTreeSet<&String> = passing.iter().chain(failed.keys()).chain(unresolvable.keys()).collect();
    assert_eq!(answered, candidates.iter().collect::<BTreeSet<_>>(), "every candidate answered");
    for name in &answered {
        let times = usize::from(passing.contains(name))
            + usize::from(failed.contains_key(*name))
            + usize::from(unresolvable.contains_key(*name));
        assert_eq!(times, 1, "{name} answered {times} times");
    }
    let scores = engine.prioritize(&pod, passing.clone());
    assert_eq!(scores.len(), passing.len());
    serde_json::to_vec(&filtered).expect("an answer encodes");
});
