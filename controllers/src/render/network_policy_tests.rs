//! The rendered policies admit exactly each component's traffic, and the evaluator follows the
//! NetworkPolicy API's rules.

use super::*;
use crate::names::{APISERVER, COMPONENT_APISERVER, COMPONENT_WEBHOOK, WEBHOOK};

const NS: &str = "numaresources";

fn ip(text: &str) -> Peer {
    Peer::Address(text.parse().unwrap())
}

fn pod(namespace: &str, labels: BTreeMap<String, String>) -> Peer {
    let namespace_labels = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), namespace.to_owned())]);
    Peer::Pod { namespace: namespace.to_owned(), namespace_labels, labels }
}

fn tcp(direction: Direction, peer: Peer, port: u16) -> Traffic {
    Traffic { direction, peer, protocol: "TCP", port }
}

/// The node a probe or a scrape comes from, and kube-apiserver on the host network.
const NODE: &str = "192.168.10.7";
const KUBE_APISERVER: &str = "192.168.10.2";

/// Flows every component must not get: other ports in, other pods and DNS out.
fn never(h: impl Fn(&Traffic) -> bool, own_ports: &[u16]) {
    let stranger = pod("default", BTreeMap::from([("app".to_owned(), "curious".to_owned())]));
    for port in [22, 80, 8080, 9443, 10250] {
        if !own_ports.contains(&port) {
            assert!(!h(&tcp(Direction::Ingress, ip(NODE), port)), "ingress on {port}");
            assert!(!h(&tcp(Direction::Ingress, stranger.clone(), port)), "ingress from a pod on {port}");
        }
    }
    assert!(!h(&tcp(Direction::Egress, stranger.clone(), 8080)), "egress to a pod");
    assert!(!h(&tcp(Direction::Egress, ip("1.1.1.1"), 80)), "egress to the internet on 80");
    assert!(!h(&Traffic { direction: Direction::Egress, peer: ip("10.96.0.10"), protocol: "UDP", port: 53 }), "DNS");
    assert!(!h(&tcp(Direction::Egress, ip(KUBE_APISERVER), 10250)), "the kubelet API directly");
}

/// kube-apiserver, reached by the Service port and the endpoint port.
fn reaches_kube_apiserver(h: impl Fn(&Traffic) -> bool) {
    for port in KUBE_APISERVER_PORTS {
        assert!(h(&tcp(Direction::Egress, ip(KUBE_APISERVER), port)), "kube-apiserver :{port}");
    }
}

#[test]
fn the_scheduler_serves_its_secure_port_and_calls_only_kube_apiserver() {
    let policies = [scheduler(NS).unwrap()];
    let labels = names::labels(SCHEDULER, COMPONENT_SCHEDULER);
    let h = |t: &Traffic| admits(&policies, NS, &labels, t);
    assert!(h(&tcp(Direction::Ingress, ip(NODE), SCHEDULER_PORT)), "probes and scrapes");
    let health = numaresources_api::extender::HEALTH_PORT;
    assert!(h(&tcp(Direction::Ingress, ip(NODE), health)), "the extender engine's probes");
    let verbs = numaresources_api::extender::DEFAULT_PORT;
    assert!(!h(&tcp(Direction::Ingress, ip(NODE), verbs)), "the extender's verbs are kube-scheduler's alone");
    reaches_kube_apiserver(h);
    never(h, &[SCHEDULER_PORT, health]);
}

#[test]
fn exporters_serve_metrics_and_call_only_kube_apiserver() {
    let policies = [exporters(NS).unwrap()];
    let mut labels = names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE);
    labels.insert(names::LABEL_NODE_GROUP.to_owned(), "worker".to_owned());
    let h = |t: &Traffic| admits(&policies, NS, &labels, t);
    assert!(h(&tcp(Direction::Ingress, ip(NODE), RTE_METRICS_PORT)));
    reaches_kube_apiserver(h);
    never(h, &[RTE_METRICS_PORT]);
}

#[test]
fn exporters_writing_directly_also_resolve_the_service_and_reach_the_api_server_pods() {
    let objects = crate::render::apiserver::objects(NS, "img").unwrap();
    let template = objects.deployment.unwrap().spec.unwrap().template;
    let server_pod = template.metadata.unwrap().labels.unwrap();
    // The Service's target port, resolved in the server's container as the kubelet does.
    let Some(IntOrString::String(target)) =
        objects.service.unwrap().spec.unwrap().ports.unwrap()[0].target_port.clone()
    else {
        panic!("the Service targets a named port");
    };
    let ports = template.spec.unwrap().containers[0].ports.clone().unwrap();
    let target = ports.iter().find(|p| p.name.as_deref() == Some(target.as_str())).unwrap();
    assert_eq!(target.container_port, i32::from(APISERVER_PORT));
    let policies = [exporters_writing_directly(NS).unwrap(), apiserver(NS).unwrap()];
    let mut labels = names::labels(RTE_SERVICE_ACCOUNT, COMPONENT_RTE);
    labels.insert(names::LABEL_NODE_GROUP.to_owned(), "worker".to_owned());
    let h = |t: &Traffic| admits(&policies, NS, &labels, t);
    let to_server = tcp(Direction::Egress, pod(NS, server_pod.clone()), APISERVER_PORT);
    assert!(h(&to_server), "the Service forwards to the server's secure port");
    for protocol in ["UDP", "TCP"] {
        let dns = Traffic { direction: Direction::Egress, peer: ip("10.96.0.10"), protocol, port: DNS_PORT };
        assert!(h(&dns), "DNS over {protocol}");
    }
    reaches_kube_apiserver(h);
    let stranger = pod("default", BTreeMap::from([("app".to_owned(), "curious".to_owned())]));
    assert!(!h(&tcp(Direction::Egress, stranger, 8080)), "egress to another pod");
    assert!(!h(&tcp(Direction::Egress, pod(NS, server_pod.clone()), 6444)), "not the peer port");
    // The admin port, where they ask whether their object is held.
    let admin = numaresources_api::direct_write::ADMIN_PORT;
    assert!(h(&tcp(Direction::Egress, pod(NS, server_pod.clone()), admin)), "the server's admin port");
    // And the server lets the exporters in, on both.
    for port in [APISERVER_PORT, admin] {
        let from_exporter = tcp(Direction::Ingress, pod(NS, labels.clone()), port);
        assert!(admits(&policies, NS, &server_pod, &from_exporter), "port {port}");
    }
    // Without the direct path: no DNS.
    let plain = [exporters(NS).unwrap()];
    let dns = Traffic { direction: Direction::Egress, peer: ip("10.96.0.10"), protocol: "UDP", port: DNS_PORT };
    assert!(!admits(&plain, NS, &labels, &dns));
}

#[test]
fn the_api_server_takes_kube_apiserver_and_its_peers_and_nothing_else() {
    let policies = [apiserver(NS).unwrap()];
    let labels = names::labels(APISERVER, COMPONENT_APISERVER);
    let h = |t: &Traffic| admits(&policies, NS, &labels, t);
    let replica = pod(NS, names::labels(APISERVER, COMPONENT_APISERVER));
    let webhook = pod(NS, names::labels(WEBHOOK, COMPONENT_WEBHOOK));
    assert!(h(&tcp(Direction::Ingress, ip(KUBE_APISERVER), 6443)), "kube-apiserver's proxied requests");
    assert!(h(&tcp(Direction::Ingress, replica.clone(), 6444)), "replication from a peer");
    assert!(h(&tcp(Direction::Egress, replica, 6444)), "replication to a peer");
    assert!(!h(&tcp(Direction::Ingress, webhook.clone(), 6444)), "the peer port is for peers only");
    assert!(!h(&tcp(Direction::Ingress, ip(NODE), 6444)));
    assert!(!h(&tcp(Direction::Egress, webhook, 6444)));
    reaches_kube_apiserver(h);
    never(h, &[6443]);
}

#[test]
fn the_api_server_policy_moves_with_the_namespace() {
    let moved = apiserver("elsewhere").unwrap();
    assert_eq!(moved.metadata.namespace.as_deref(), Some("elsewhere"));
    let labels = names::labels(APISERVER, COMPONENT_APISERVER);
    let from_node = tcp(Direction::Ingress, ip(NODE), 8080);
    assert!(!admits(std::slice::from_ref(&moved), "elsewhere", &labels, &from_node));
    assert!(admits(&[moved], NS, &labels, &from_node), "a policy binds only its own namespace");
}

#[test]
fn the_evaluator_follows_the_api_rules() {
    let policy = |spec: Value| -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": NS}, "spec": spec})).unwrap()
    };
    let app = BTreeMap::from([("app".to_owned(), "a".to_owned())]);
    let other = BTreeMap::from([("app".to_owned(), "b".to_owned())]);
    // Ingress-only by default: egress stays open; an empty ingress list denies all ingress.
    let deny_in = [policy(json!({"podSelector": {"matchLabels": {"app": "a"}}}))];
    assert!(!admits(&deny_in, NS, &app, &tcp(Direction::Ingress, ip(NODE), 80)));
    assert!(admits(&deny_in, NS, &app, &tcp(Direction::Egress, ip(NODE), 80)));
    assert!(admits(&deny_in, NS, &other, &tcp(Direction::Ingress, ip(NODE), 80)), "not selected: not isolated");
    // Policies add up; ipBlock with except; port ranges; a pod selector alone means this namespace.
    let policies = [
        policy(json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})),
        policy(json!({"podSelector": {"matchLabels": {"app": "a"}}, "egress": [
            {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}], "ports": [{"port": 8000, "endPort": 8010}]},
            {"to": [{"podSelector": {"matchLabels": {"app": "b"}}}]},
        ]})),
    ];
    let out = |peer: Peer, port| admits(&policies, NS, &app, &tcp(Direction::Egress, peer, port));
    assert!(out(ip("10.2.3.4"), 8005));
    assert!(!out(ip("10.2.3.4"), 8011), "outside the range");
    assert!(!out(ip("10.1.3.4"), 8005), "excepted");
    assert!(!out(ip("11.0.0.1"), 8005));
    assert!(out(pod(NS, other.clone()), 1234), "any port to app=b here");
    assert!(!out(pod("default", other), 1234), "app=b elsewhere");
    assert!(!admits(&policies, NS, &BTreeMap::new(), &tcp(Direction::Egress, ip("10.2.3.4"), 8005)), "default deny");
    assert!(in_cidr(&"fd00::1".parse().unwrap(), "fd00::/8") && !in_cidr(&"fe00::1".parse().unwrap(), "fd00::/8"));
    assert!(!in_cidr(&"10.0.0.1".parse().unwrap(), "garbage"));
}
