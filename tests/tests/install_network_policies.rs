//! The install's NetworkPolicies, as real `kubectl kustomize` renders every overlay: each pod of
//! the namespace is default-denied, and each component gets exactly the traffic it needs, derived
//! from its own Deployment (every container port reachable, the peer port from its replicas
//! only, kube-apiserver reachable) and nothing else (other ports, other pods, DNS, the
//! internet). The controllers' policies for what they deploy combine with the install's the
//! same way. Policies are evaluated by the controllers' NetworkPolicy evaluator.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

mod support;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use numaresources_controllers::names::{
    self, APISERVER, COMPONENT_RTE, COMPONENT_SCHEDULER, RTE_SERVICE_ACCOUNT, SCHEDULER,
};
use numaresources_controllers::render::network_policy::{
    self, Direction, KUBE_APISERVER_PORTS, Peer, RTE_METRICS_PORT, SCHEDULER_PORT, Traffic, admits,
};
use support::{Install, NAMESPACE, OVERLAYS, pod_labels, pod_spec};

/// A node (probes, scrapes) and kube-apiserver on the host network.
const NODE: &str = "192.168.10.7";
const KUBE_APISERVER: &str = "192.168.10.2";
/// The API server's replication port, open to its replicas only.
const PEER_PORT_NAME: &str = "peer";

fn address(text: &str) -> Peer {
    Peer::Address(text.parse().unwrap())
}

fn pod(namespace: &str, labels: BTreeMap<String, String>) -> Peer {
    let namespace_labels = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), namespace.to_owned())]);
    Peer::Pod { namespace: namespace.to_owned(), namespace_labels, labels }
}

fn tcp(direction: Direction, peer: Peer, port: u16) -> Traffic {
    Traffic { direction, peer, protocol: "TCP", port }
}

/// The ports a Deployment's containers serve, with their names.
fn container_ports(deployment: &Deployment) -> Vec<(u16, String)> {
    pod_spec(deployment)
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .map(|p| (u16::try_from(p.container_port).unwrap(), p.name.clone().unwrap_or_default()))
        .collect()
}

/// Everything a component's pods must and must not be able to do, given the policies.
fn assert_exactly_its_traffic(
    what: &str,
    policies: &[NetworkPolicy],
    labels: &BTreeMap<String, String>,
    served: &[(u16, String)],
) {
    let allowed = |traffic: &Traffic| admits(policies, NAMESPACE, labels, traffic);
    let own = pod(NAMESPACE, labels.clone());
    let stranger = pod("default", BTreeMap::from([("app".to_owned(), "curious".to_owned())]));
    for (port, name) in served {
        if name == PEER_PORT_NAME {
            assert!(allowed(&tcp(Direction::Ingress, own.clone(), *port)), "{what}: a replica on {port}");
            assert!(allowed(&tcp(Direction::Egress, own.clone(), *port)), "{what}: to a replica on {port}");
            assert!(!allowed(&tcp(Direction::Ingress, address(NODE), *port)), "{what}: the peer port from outside");
            assert!(!allowed(&tcp(Direction::Ingress, stranger.clone(), *port)), "{what}: the peer port from a pod");
        } else {
            assert!(allowed(&tcp(Direction::Ingress, address(KUBE_APISERVER), *port)), "{what}: serves {port}");
        }
    }
    for port in KUBE_APISERVER_PORTS {
        assert!(allowed(&tcp(Direction::Egress, address(KUBE_APISERVER), port)), "{what}: kube-apiserver :{port}");
    }
    for port in [22, 80, 2379, 8080, 10250, 30000] {
        if served.iter().all(|(p, _)| *p != port) {
            assert!(!allowed(&tcp(Direction::Ingress, address(NODE), port)), "{what}: ingress on {port}");
            assert!(!allowed(&tcp(Direction::Ingress, stranger.clone(), port)), "{what}: a pod on {port}");
        }
    }
    assert!(!allowed(&tcp(Direction::Egress, stranger, 8080)), "{what}: egress to another pod");
    assert!(!allowed(&tcp(Direction::Egress, address("1.1.1.1"), 80)), "{what}: the internet");
    assert!(!allowed(&tcp(Direction::Egress, address(KUBE_APISERVER), 2379)), "{what}: etcd");
    let dns = Traffic { direction: Direction::Egress, peer: address("10.96.0.10"), protocol: "UDP", port: 53 };
    assert!(!allowed(&dns), "{what}: DNS (no component resolves names)");
}

#[test]
fn every_shipped_component_gets_exactly_the_traffic_its_deployment_needs() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        assert!(
            install.network_policies.iter().any(|p| {
                let spec = p.spec.as_ref().unwrap();
                spec.pod_selector.as_ref().is_none_or(|s| s.match_labels.is_none() && s.match_expressions.is_none())
                    && spec.policy_types.as_deref() == Some(&["Ingress".to_owned(), "Egress".to_owned()][..])
            }),
            "{overlay}: a default-deny for the namespace"
        );
        for deployment in &install.deployments {
            let name = deployment.metadata.name.clone().unwrap();
            let served = container_ports(deployment);
            assert!(!served.is_empty(), "{overlay}: {name} serves something");
            assert_exactly_its_traffic(
                &format!("{overlay}: {name}"),
                &install.network_policies,
                &pod_labels(deployment),
                &served,
            );
        }
    }
}

#[test]
fn what_the_controllers_deploy_is_denied_until_their_policy_allows_it() {
    let install = Install::build("default");
    let scheduler_labels = names::labels(SCHEDULER, COMPONENT_SCHEDULER);
    let exporter_labels = names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE);
    let to_kube_apiserver = tcp(Direction::Egress, address(KUBE_APISERVER), KUBE_APISERVER_PORTS[1]);
    // The install alone: the namespace's default-deny holds the operands.
    for labels in [&scheduler_labels, &exporter_labels] {
        assert!(!admits(&install.network_policies, NAMESPACE, labels, &to_kube_apiserver));
    }
    // With what the controllers render: each gets exactly its own.
    let mut policies = install.network_policies.clone();
    policies.push(network_policy::scheduler(NAMESPACE).unwrap());
    policies.push(network_policy::exporters(NAMESPACE).unwrap());
    let extender_health = (numaresources_api::extender::HEALTH_PORT, "extender-health".into());
    assert_exactly_its_traffic(
        "scheduler",
        &policies,
        &scheduler_labels,
        &[(SCHEDULER_PORT, "https".into()), extender_health],
    );
    assert_exactly_its_traffic("exporters", &policies, &exporter_labels, &[(RTE_METRICS_PORT, "metrics".into())]);
}

#[test]
fn the_install_ships_the_api_server_policy_the_controllers_render() {
    for overlay in OVERLAYS {
        let install = Install::build(overlay);
        let shipped = install.network_policies.iter().find(|p| p.metadata.name.as_deref() == Some(APISERVER)).unwrap();
        assert_eq!(*shipped, network_policy::apiserver(NAMESPACE).unwrap(), "{overlay}");
    }
}
