use numaresources_api::nrt::well_known::{ATTR_MEMORY_NUMA_MANAGED, ATTR_PODS_FINGERPRINT};
use numaresources_controllers::names;
use serde_json::json;

use super::*;
use crate::numa::fleet::{Age, AgeSource};

/// A node's report: its policy, whether its zones list memory, its fingerprint, its age.
fn report(name: &str, policy: &str, memory: bool, fingerprint: bool, age: u64) -> Report {
    let mut resources = vec![json!({"name": "cpu", "capacity": "8", "allocatable": "8", "available": "8"})];
    if memory {
        resources.push(json!({"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"}));
    }
    let mut attributes = vec![json!({"name": "topologyManagerPolicy", "value": policy})];
    if fingerprint {
        attributes.push(json!({"name": ATTR_PODS_FINGERPRINT, "value": "pfp0v001deadbeefdeadbeef"}));
    }
    let nrt = serde_json::from_value(json!({"metadata": {"name": name}, "attributes": attributes,
        "zones": [{"name": "node-0", "type": "Node", "resources": resources}]}))
    .unwrap();
    Report { nrt, age: Some(Age { seconds: age, source: AgeSource::Reported }) }
}

fn healthy() -> Observed {
    let api_service: DynamicObject = serde_json::from_value(json!({"apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService", "metadata": {"name": API_SERVICE},
        "status": {"conditions": [{"type": "Available", "status": "True"}]}}))
    .unwrap();
    let scheduler: Deployment = serde_json::from_value(json!({"metadata": {"name": "numaresources-scheduler"},
        "status": {"conditions": [{"type": "Available", "status": "True"}]}}))
    .unwrap();
    Observed {
        api_service: Ok(Some(api_service)),
        reports: Ok(vec![report("worker-0", "single-numa-node", true, true, 20)]),
        scheduler: Ok(Some(scheduler)),
        exporters: Ok(vec![exporters("numaresourcesoperator-worker", 3, 3)]),
        apiserver: Ok((Some(apiserver(3)), Some(lease(Some("replica-0"), "replica-1,replica-2")))),
        pod_routing: Ok(Some((true, true))),
        certificates: vec![(names::APISERVER_TLS_SECRET, Ok(Some(certificate(Duration::from_secs(90 * 24 * 3600)))))],
        now: SystemTime::now(),
    }
}

fn exporters(name: &str, desired: i32, ready: i32) -> DaemonSet {
    serde_json::from_value(json!({"metadata": {"name": name}, "status": {"desiredNumberScheduled": desired,
        "numberReady": ready, "currentNumberScheduled": desired, "numberMisscheduled": 0}}))
    .unwrap()
}

#[test]
fn exporters_not_ready_fail() {
    let mut observed = healthy();
    observed.exporters = Ok(vec![exporters("numaresourcesoperator-worker", 3, 1)]);
    let (status, detail) = status_of(&observed, "exporters");
    assert_eq!(status, Status::Fail);
    assert!(detail.starts_with("exporters not ready: numaresourcesoperator-worker (1 of 3 ready)"), "{detail}");
    observed.exporters = Ok(Vec::new());
    assert_eq!(status_of(&observed, "exporters").0, Status::Skip);
}

fn apiserver(replicas: i32) -> Deployment {
    serde_json::from_value(json!({"metadata": {"name": names::APISERVER}, "spec": {"replicas": replicas,
        "selector": {}, "template": {}}}))
    .unwrap()
}

fn lease(holder: Option<&str>, in_sync: &str) -> Lease {
    serde_json::from_value(json!({"metadata": {"name": names::APISERVER,
        "annotations": {numaresources_apiserver::replication::IN_SYNC_ANNOTATION: in_sync}},
        "spec": {"holderIdentity": holder}}))
    .unwrap()
}

fn certificate(validity: Duration) -> String {
    numaresources_runtime::tls::CertificateAuthority::generate("doctor-test", validity).unwrap().cert_pem().to_owned()
}

fn status_of(observed: &Observed, name: &str) -> (Status, String) {
    let check = checks(observed).into_iter().find(|c| c.name == name).unwrap();
    (check.status, check.detail)
}

#[test]
fn a_healthy_chain_is_all_ok() {
    let checks = checks(&healthy());
    assert!(checks.iter().all(|c| c.status == Status::Ok), "{checks:#?}");
    let text = render_text(&checks, Paint::new(false));
    assert!(text.starts_with("ok    APIService: v1alpha2.topology.node.k8s.io is Available\n"), "{text}");
}

#[test]
fn an_unavailable_or_missing_apiservice_fails_and_a_missing_right_skips() {
    let mut observed = healthy();
    observed.api_service = Ok(Some(
        serde_json::from_value(json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": API_SERVICE}, "status": {"conditions": [{"type": "Available",
            "status": "False", "reason": "MissingEndpoints", "message": "endpoints for service/numaresources-apiserver have no addresses"}]}}))
        .unwrap(),
    ));
    let (status, detail) = status_of(&observed, "APIService");
    assert_eq!(status, Status::Fail);
    assert!(detail.contains("MissingEndpoints"), "{detail}");
    observed.api_service = Ok(None);
    assert_eq!(status_of(&observed, "APIService").0, Status::Fail);
    observed.api_service = Err("forbidden".into());
    assert_eq!(status_of(&observed, "APIService").0, Status::Skip);
}

#[test]
fn stale_or_missing_nrts_fail() {
    let mut observed = healthy();
    observed.reports = Ok(vec![
        report("worker-0", "single-numa-node", true, true, 20),
        report("worker-1", "single-numa-node", true, true, 3_600),
    ]);
    let (status, detail) = status_of(&observed, "NRT freshness");
    assert_eq!(status, Status::Fail);
    assert!(detail.starts_with("1 of 2 NRTs are older than three heartbeats: worker-1 (60m)"), "{detail}");
    observed.reports = Ok(Vec::new());
    assert_eq!(status_of(&observed, "NRT freshness").0, Status::Fail);
}

#[test]
fn a_policy_the_scheduler_does_not_filter_warns_with_its_consequence() {
    let mut observed = healthy();
    observed.reports = Ok(vec![report("worker-0", "restricted", true, true, 20)]);
    let (status, detail) = status_of(&observed, "kubelet alignment");
    assert_eq!(status, Status::Warn);
    assert!(detail.contains("worker-0 (restricted)") && detail.contains("TopologyAffinityError"), "{detail}");
}

#[test]
fn nodes_without_memory_per_zone_fail() {
    let mut observed = healthy();
    observed.reports = Ok(vec![report("worker-0", "single-numa-node", false, true, 20)]);
    let (status, detail) = status_of(&observed, "memory per NUMA zone");
    assert_eq!(status, Status::Fail);
    assert!(detail.contains("memory manager is not Static"), "{detail}");
}

#[test]
fn memory_reported_as_the_nodes_total_in_every_zone_warns() {
    let mut observed = healthy();
    let mut node_level = report("worker-0", "single-numa-node", true, true, 20);
    node_level.nrt.zones[0].attributes =
        vec![numaresources_api::nrt::AttributeInfo::new(ATTR_MEMORY_NUMA_MANAGED, "false")];
    observed.reports = Ok(vec![node_level]);
    let (status, detail) = status_of(&observed, "memory per NUMA zone");
    assert_eq!(status, Status::Warn);
    assert!(detail.contains("aligned CPUs but not aligned memory"), "{detail}");
}

#[test]
fn nrts_without_a_fingerprint_warn() {
    let mut observed = healthy();
    observed.reports = Ok(vec![report("worker-0", "single-numa-node", true, false, 20)]);
    assert_eq!(status_of(&observed, "pods fingerprint").0, Status::Warn);
}

#[test]
fn api_server_replicas_without_a_leader_fail_and_followers_out_of_sync_warn() {
    let mut observed = healthy();
    assert_eq!(
        status_of(&observed, "API server replicas"),
        (Status::Ok, "leader replica-0, 2 of 2 followers in sync".into())
    );
    observed.apiserver = Ok((Some(apiserver(3)), Some(lease(Some("replica-0"), ""))));
    let (status, detail) = status_of(&observed, "API server replicas");
    assert_eq!(status, Status::Warn);
    assert!(detail.contains("the leader acknowledges writes alone"), "{detail}");
    observed.apiserver = Ok((Some(apiserver(3)), Some(lease(None, ""))));
    assert_eq!(status_of(&observed, "API server replicas").0, Status::Fail);
    observed.apiserver = Ok((Some(apiserver(1)), None));
    assert_eq!(status_of(&observed, "API server replicas").0, Status::Ok);
}

#[test]
fn routing_pods_without_the_pod_webhook_fails() {
    let mut observed = healthy();
    observed.pod_routing = Ok(Some((true, false)));
    let (status, detail) = status_of(&observed, "pod routing");
    assert_eq!(status, Status::Fail);
    assert!(detail.contains("pods keep the default scheduler"), "{detail}");
    observed.pod_routing = Ok(Some((false, false)));
    assert_eq!(status_of(&observed, "pod routing").0, Status::Ok);
}

#[test]
fn a_certificate_near_its_expiry_warns_and_an_expired_one_fails() {
    let mut observed = healthy();
    observed.certificates =
        vec![(names::WEBHOOK_TLS_SECRET, Ok(Some(certificate(Duration::from_secs(2 * 24 * 3600)))))];
    let (status, detail) = status_of(&observed, "certificates");
    assert_eq!(status, Status::Warn);
    assert!(detail.starts_with("numaresources-webhook-tls expires in"), "{detail}");
    observed.now = SystemTime::now() + Duration::from_secs(3 * 24 * 3600);
    assert_eq!(status_of(&observed, "certificates").0, Status::Fail);
    observed.certificates = vec![(names::WEBHOOK_TLS_SECRET, Err("forbidden".into()))];
    assert_eq!(status_of(&observed, "certificates").0, Status::Skip);
}

#[test]
fn a_missing_or_unavailable_scheduler_fails() {
    let mut observed = healthy();
    observed.scheduler = Ok(None);
    assert_eq!(status_of(&observed, "scheduler").0, Status::Fail);
    observed.scheduler = Ok(Some(
        serde_json::from_value(json!({"metadata": {"name": "numaresources-scheduler"},
        "status": {"conditions": [{"type": "Available", "status": "False"}]}}))
        .unwrap(),
    ));
    assert_eq!(status_of(&observed, "scheduler").0, Status::Fail);
}
