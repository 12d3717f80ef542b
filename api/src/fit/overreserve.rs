//! The scheduler plugin's over-reserve cache, as far as a reader of NRTs and Pods can follow it.
//!
//! With `cacheResyncPeriodSeconds > 0` the plugin does not read a node's NRT as published: it
//! keeps a copy, and every pod it places on the node (Reserve) is *assumed* there until an NRT
//! arrives whose pods fingerprint matches the pods bound to the node. Meanwhile the filter and
//! the scorer see the copy with **every assumed pod's effective request taken from every NUMA
//! zone's `available`** (the kubelet may pick any zone), clamped at 0: [`reserved_view`].
//!
//! Which pods are assumed is the scheduler's memory, not an object: a reader can only infer them
//! (pods bound to the node that the NRT's fingerprint does not cover). Which pods a fingerprint
//! covers under `with-exclusive-resources` is decided on the scheduler's side by
//! [`has_exclusive_resources`].

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

use super::pod::Resources;
use crate::nrt::NodeResourceTopology;
use crate::nrt::well_known::ZONE_TYPE_NODE;
use crate::qos::{Exclusive, QosClass, exclusive_requests, is_sidecar};
use crate::quantity::Quantity;

/// The NRT as the over-reserve cache hands it to the filter and scorer: every NUMA zone's
/// `available` reduced by each assumed pod's effective request (thousandths, as
/// [`super::PodRequests::effective`] gives them) for every resource the zone lists, clamped at 0.
pub fn reserved_view(nrt: &NodeResourceTopology, assumed: &[Resources]) -> NodeResourceTopology {
    let mut view = nrt.clone();
    if assumed.is_empty() {
        return view;
    }
    for zone in view.zones.iter_mut().filter(|zone| zone.zone_type == ZONE_TYPE_NODE) {
        for resource in &mut zone.resources {
            let taken: i64 = assumed
                .iter()
                .filter_map(|pod| pod.get(resource.name.as_str()))
                .fold(0i64, |sum, amount| sum.saturating_add(*amount));
            if taken == 0 {
                continue;
            }
            let Some(available) = resource.available.ceil_milli_i64() else { continue };
            let left = available.saturating_sub(taken).max(0);
            resource.available = from_milli(left);
        }
    }
    view
}

/// A quantity of `milli` thousandths, in the form the exporter writes (whole numbers plain).
fn from_milli(milli: i64) -> Quantity {
    if milli % 1000 == 0 {
        Quantity::from_i64(milli / 1000)
    } else {
        // A whole number of thousandths always parses.
        Quantity::parse(&format!("{milli}m")).unwrap_or_default()
    }
}

/// The scheduler's side of the `with-exclusive-resources` fingerprint method: over the app
/// containers and the restartable (sidecar) init containers, a request for a non-native resource
/// the node's NRT lists, or, for a Guaranteed pod, an integral positive `cpu` request or a
/// positive `memory` or `hugepages-*` request.
pub fn has_exclusive_resources(pod: &Pod, qos: QosClass, nrt_resources: &BTreeSet<String>) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    let sidecars = spec.init_containers.iter().flatten().filter(|c| is_sidecar(c));
    spec.containers.iter().chain(sidecars).any(|container| {
        exclusive_requests(container).any(|resource| match resource {
            Exclusive::Device(name) => nrt_resources.contains(&name),
            Exclusive::IntegralCpu(_) | Exclusive::Memory | Exclusive::Hugepages(_) => qos == QosClass::Guaranteed,
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fit::numa_zones;

    fn nrt() -> NodeResourceTopology {
        serde_json::from_value(json!({"metadata": {"name": "n"}, "zones": [
            {"name": "node-0", "type": "Node", "resources": [
                {"name": "cpu", "capacity": "16", "allocatable": "16", "available": "10"},
                {"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "4Gi"}]},
            {"name": "node-1", "type": "Node", "resources": [
                {"name": "cpu", "capacity": "16", "allocatable": "16", "available": "3"}]}]}))
        .unwrap()
    }

    fn resources(pairs: &[(&str, i64)]) -> Resources {
        pairs.iter().map(|(name, milli)| ((*name).to_owned(), *milli)).collect()
    }

    #[test]
    fn every_assumed_pod_is_taken_from_every_zone_and_clamped_at_zero() {
        let assumed = [resources(&[("cpu", 4000), ("memory", 8 * (1 << 30) * 1000)]), resources(&[("cpu", 500)])];
        let zones = numa_zones(&reserved_view(&nrt(), &assumed));
        assert_eq!(zones[0].available["cpu"], 5_500);
        assert_eq!(zones[0].available["memory"], 0, "clamped");
        assert_eq!(zones[1].available["cpu"], 0, "3 - 4.5 clamps at 0");
        assert_eq!(reserved_view(&nrt(), &[]), nrt(), "nothing assumed: the NRT as published");
    }

    #[test]
    fn exclusive_resources_as_the_scheduler_reads_them() {
        let pod = |containers: serde_json::Value, init: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"},
                "spec": {"containers": containers, "initContainers": init}}))
            .unwrap()
        };
        let listed = BTreeSet::from(["example.com/vf".to_owned()]);
        let limits = |l: serde_json::Value| json!([{"name": "c", "resources": {"limits": l}}]);
        let guaranteed = pod(limits(json!({"cpu": "2", "memory": "1Gi"})), json!([]));
        assert!(has_exclusive_resources(&guaranteed, QosClass::Guaranteed, &listed));
        let fractional = pod(limits(json!({"cpu": "1500m"})), json!([]));
        assert!(!has_exclusive_resources(&fractional, QosClass::Burstable, &listed));
        let device = pod(json!([{"name": "c", "resources": {"requests": {"example.com/vf": "1"}}}]), json!([]));
        assert!(has_exclusive_resources(&device, QosClass::BestEffort, &listed));
        assert!(!has_exclusive_resources(&device, QosClass::BestEffort, &BTreeSet::new()), "not in the NRT");
        let plain_init =
            pod(json!([{"name": "c"}]), json!([{"name": "i", "resources": {"requests": {"example.com/vf": "1"}}}]));
        assert!(
            !has_exclusive_resources(&plain_init, QosClass::BestEffort, &listed),
            "an init container's device alone is not exclusive"
        );
        let sidecar = pod(
            json!([{"name": "c"}]),
            json!([{"name": "i", "restartPolicy": "Always", "resources": {"requests": {"example.com/vf": "1"}}}]),
        );
        assert!(has_exclusive_resources(&sidecar, QosClass::BestEffort, &listed));
    }
}
