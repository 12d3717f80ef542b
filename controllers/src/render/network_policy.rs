//! NetworkPolicies for what the controllers deploy: each component's pods get one policy that
//! selects them for both directions (so anything it does not allow is denied, whether or not the
//! namespace has a default-deny) and allows exactly what the component needs:
//!
//! | component | ingress | egress |
//! |---|---|---|
//! | scheduler | 10259 (`/healthz`, `/metrics`) | kube-apiserver |
//! | exporters | [`RTE_METRICS_PORT`] (`/metrics`) | kube-apiserver; with the direct write path also DNS, the API server's [`APISERVER_PORT`] and its admin port (is this node's object held?) |
//! | API server | 6443 from anywhere (kube-apiserver), 6444 from its replicas | kube-apiserver, 6444 to its replicas |
//!
//! kube-apiserver runs on the control plane's host network: no pod or namespace selector names
//! it, and its address is not known when the policy is written, so it is reached by port
//! ([`KUBE_APISERVER_PORTS`]: the `kubernetes` Service's and the usual endpoint port) and calls in
//! on the component's serving port only. Components reach kube-apiserver by the address in their
//! environment, so none needs DNS, except the exporters writing to our API server's Service by
//! its name ([`exporters_writing_directly`]): DNS is reached by port (the cluster's resolver
//! lives in a namespace and under labels that differ between distributions).
//!
//! [`admits`] evaluates policies the way the NetworkPolicy API defines them; the tests (here and
//! in the install tests) check every needed flow is admitted and the others are not.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use numaresources_api::direct_write::ADMIN_PORT;
use numaresources_api::selector;
use serde_json::{Value, json};

use super::{RenderError, typed};
use crate::names::{self, COMPONENT_RTE, COMPONENT_SCHEDULER, RTE_SERVICE_ACCOUNT, SCHEDULER};

/// The ports kube-apiserver is reached on (Service port, common endpoint port).
pub const KUBE_APISERVER_PORTS: [u16; 2] = [443, 6443];
/// The scheduler's secure port (`/healthz`, `/metrics`).
pub const SCHEDULER_PORT: u16 = 10259;
/// The exporters' metrics port (`METRICS_PORT`).
pub const RTE_METRICS_PORT: u16 = numaresources_api::exporter::METRICS_PORT;
/// The NRT API server's secure port (`--secure-port`, its Service's target).
pub const APISERVER_PORT: u16 = 6443;
/// DNS, over UDP and TCP.
pub const DNS_PORT: u16 = 53;

/// The namespace the checked-in API server policy is written for.
const MANIFEST_NAMESPACE: &str = "numaresources";
/// The API server's policy, shared with the install (`manifests/network-policies/`).
const APISERVER_POLICY: &str = include_str!("../../../manifests/network-policies/apiserver.yaml");

fn kube_apiserver_egress() -> Value {
    json!({"ports": KUBE_APISERVER_PORTS.iter().map(|port| json!({"protocol": "TCP", "port": port})).collect::<Vec<_>>()})
}

/// One component's policy: its pods, ingress on `ports` from anywhere, egress to kube-apiserver.
fn component_policy(
    what: &'static str,
    namespace: &str,
    name: &str,
    component: &str,
    ingress_ports: &[u16],
) -> Result<NetworkPolicy, RenderError> {
    let ports: Vec<Value> = ingress_ports.iter().map(|port| json!({"protocol": "TCP", "port": port})).collect();
    typed(
        what,
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": names::labels(name, component)},
            "spec": {
                "podSelector": {"matchLabels": names::selector_labels(name, component)},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"ports": ports}],
                "egress": [kube_apiserver_egress()],
            },
        }),
    )
}

/// The secondary scheduler's policy.
pub fn scheduler(namespace: &str) -> Result<NetworkPolicy, RenderError> {
    // The extender engine's probes; its verbs are on loopback, out of any policy's reach.
    let ports = [SCHEDULER_PORT, numaresources_api::extender::HEALTH_PORT];
    component_policy("scheduler NetworkPolicy", namespace, SCHEDULER, COMPONENT_SCHEDULER, &ports)
}

/// The exporters' policy (every node group's DaemonSet).
pub fn exporters(namespace: &str) -> Result<NetworkPolicy, RenderError> {
    component_policy("exporter NetworkPolicy", namespace, RTE_SERVICE_ACCOUNT, COMPONENT_RTE, &[RTE_METRICS_PORT])
}

/// The exporters' policy with the direct write path: also the cluster's DNS (the Service is
/// addressed by name) and our API server's pods on their secure port (what the Service
/// forwards to).
pub fn exporters_writing_directly(namespace: &str) -> Result<NetworkPolicy, RenderError> {
    let mut policy = exporters(namespace)?;
    let extra: Vec<k8s_openapi::api::networking::v1::NetworkPolicyEgressRule> = typed(
        "exporter NetworkPolicy",
        json!([
        {"ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}]},
        {
            "to": [{"podSelector": {"matchLabels": names::selector_labels(names::APISERVER, names::COMPONENT_APISERVER)}}],
            "ports": [{"protocol": "TCP", "port": APISERVER_PORT}, {"protocol": "TCP", "port": ADMIN_PORT}],
        },
        ]),
    )?;
    if let Some(spec) = policy.spec.as_mut() {
        spec.egress.get_or_insert_with(Vec::new).extend(extra);
    }
    Ok(policy)
}

/// The NRT API server's policy: the install's file, moved into `namespace`.
pub fn apiserver(namespace: &str) -> Result<NetworkPolicy, RenderError> {
    let value: Value = serde_norway::from_str(APISERVER_POLICY).map_err(|error| RenderError {
        what: "API server NetworkPolicy",
        source: serde::de::Error::custom(format!("manifests/network-policies/apiserver.yaml: {error}")),
    })?;
    let mut policy: NetworkPolicy = typed("API server NetworkPolicy", value)?;
    if namespace != MANIFEST_NAMESPACE {
        policy.metadata.namespace = Some(namespace.to_owned());
    }
    Ok(policy)
}

/// Which way a connection goes, seen from the pod the policies select.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Ingress,
    Egress,
}

/// The other end of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// A pod, with its namespace's labels.
    Pod { namespace: String, namespace_labels: BTreeMap<String, String>, labels: BTreeMap<String, String> },
    /// Anything addressed by IP only: a node, kube-apiserver on the host network, the internet.
    Address(IpAddr),
}

/// One TCP/UDP connection to or from a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traffic {
    pub direction: Direction,
    pub peer: Peer,
    pub protocol: &'static str,
    /// The port on the receiving side: the pod's own port for ingress, the peer's for egress.
    pub port: u16,
}

/// Whether `policies` (those of namespace `namespace`) let the pod with `labels` make or receive
/// `traffic`. A pod no policy selects for that direction is not isolated: everything passes.
pub fn admits(
    policies: &[NetworkPolicy],
    namespace: &str,
    labels: &BTreeMap<String, String>,
    traffic: &Traffic,
) -> bool {
    let mut isolated = false;
    for policy in policies {
        let Some(spec) = &policy.spec else { continue };
        if policy.metadata.namespace.as_deref().unwrap_or_default() != namespace
            // An absent podSelector is the empty one: every pod of the namespace.
            || !spec.pod_selector.as_ref().is_none_or(|pods| selector::matches(pods, labels))
        {
            continue;
        }
        let types = spec.policy_types.clone().unwrap_or_else(|| {
            let mut types = vec!["Ingress".to_owned()];
            if spec.egress.is_some() {
                types.push("Egress".to_owned());
            }
            types
        });
        let wanted = match traffic.direction {
            Direction::Ingress => "Ingress",
            Direction::Egress => "Egress",
        };
        if !types.iter().any(|t| t == wanted) {
            continue;
        }
        isolated = true;
        let allowed = match traffic.direction {
            Direction::Ingress => spec
                .ingress
                .iter()
                .flatten()
                .any(|rule| rule_matches(rule.from.as_deref(), rule.ports.as_deref(), namespace, traffic)),
            Direction::Egress => spec
                .egress
                .iter()
                .flatten()
                .any(|rule| rule_matches(rule.to.as_deref(), rule.ports.as_deref(), namespace, traffic)),
        };
        if allowed {
            return true;
        }
    }
    !isolated
}

/// A rule matches when its ports and its peers do (an absent or empty list matches all).
fn rule_matches(
    peers: Option<&[NetworkPolicyPeer]>,
    ports: Option<&[NetworkPolicyPort]>,
    namespace: &str,
    traffic: &Traffic,
) -> bool {
    let port_ok = ports.is_none_or(|ports| ports.is_empty() || ports.iter().any(|p| port_matches(p, traffic)));
    let peer_ok =
        peers.is_none_or(|peers| peers.is_empty() || peers.iter().any(|p| peer_matches(p, namespace, traffic)));
    port_ok && peer_ok
}

fn port_matches(port: &NetworkPolicyPort, traffic: &Traffic) -> bool {
    if port.protocol.as_deref().unwrap_or("TCP") != traffic.protocol {
        return false;
    }
    match &port.port {
        None => true,
        Some(IntOrString::Int(first)) => {
            let last = port.end_port.unwrap_or(*first);
            (*first..=last).contains(&i32::from(traffic.port))
        }
        // Named ports need the pod's container ports; none of ours are named in a policy.
        Some(IntOrString::String(_)) => false,
    }
}

fn peer_matches(peer: &NetworkPolicyPeer, policy_namespace: &str, traffic: &Traffic) -> bool {
    match &traffic.peer {
        Peer::Address(address) => peer.ip_block.as_ref().is_some_and(|block| {
            in_cidr(address, &block.cidr) && !block.except.iter().flatten().any(|cidr| in_cidr(address, cidr))
        }),
        Peer::Pod { namespace, namespace_labels, labels } => {
            if peer.ip_block.is_some() {
                // ipBlock is meant for addresses outside the cluster; pod IPs are not matched here.
                return false;
            }
            let namespace_ok = match &peer.namespace_selector {
                Some(selector) => selector::matches(selector, namespace_labels),
                None => namespace == policy_namespace,
            };
            let pod_ok = peer.pod_selector.as_ref().is_none_or(|selector| selector::matches(selector, labels));
            namespace_ok && pod_ok
        }
    }
}

/// `address` within `cidr` (`a.b.c.d/n` or IPv6); a malformed CIDR matches nothing.
fn in_cidr(address: &IpAddr, cidr: &str) -> bool {
    let Some((network, bits)) = cidr.split_once('/') else { return false };
    let (Ok(network), Ok(bits)) = (network.parse::<IpAddr>(), bits.parse::<u32>()) else { return false };
    match (address, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(*a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(*a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
#[path = "network_policy_tests.rs"]
mod tests;
