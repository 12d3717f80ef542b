//! When a fresh store is warm, from real signals: every exporter that exists has reported.
//!
//! A store that starts empty (every replica gone, as at a cluster restart) must not answer as if
//! it knew: the scheduler plugin reads a missing NodeResourceTopology as "no constraint". The
//! exporters re-create their objects within seconds of noticing, so the store is warm once each
//! node that runs a Running exporter pod has its object, or after a bound (a node whose
//! exporter cannot reach us must not keep every other node's answers back forever). No exporter
//! at all means nothing to wait for.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use tokio::time::Instant;

use crate::Store;
use crate::health::Readiness;
use crate::replication::STORE_WARM_CHECK;

/// How often the exporters are listed while warming up.
const POLL: Duration = Duration::from_secs(1);

/// Which pods are the exporters.
#[derive(Debug, Clone)]
pub struct Exporters {
    /// Their namespace.
    pub namespace: String,
    /// Their label selector.
    pub selector: String,
}

/// Holds [`STORE_WARM_CHECK`] failing until every node running an exporter has its object in
/// `store`, or `bound` has passed.
pub async fn warm_up(
    client: kube::Client,
    store: Arc<Store>,
    readiness: Arc<Readiness>,
    exporters: Exporters,
    bound: Duration,
) {
    readiness.set(STORE_WARM_CHECK, false);
    let deadline = Instant::now() + bound;
    let api: Api<Pod> = Api::namespaced(client, &exporters.namespace);
    let params = ListParams::default().labels(&exporters.selector);
    let mut warned = false;
    loop {
        let missing = match api.list(&params).await {
            Ok(pods) => {
                let nodes = exporter_nodes(&pods.items);
                let missing: Vec<String> = nodes.iter().filter(|node| store.get(node).is_none()).cloned().collect();
                if missing.is_empty() {
                    tracing::info!(
                        objects = store.len(),
                        exporters = nodes.len(),
                        "the store is warm: every exporter has reported"
                    );
                    break;
                }
                tracing::debug!(missing = missing.len(), exporters = nodes.len(), "warming up");
                missing
            }
            Err(error) => {
                if !warned {
                    tracing::warn!(%error, "cannot list the exporter pods; the store is declared warm at the bound");
                    warned = true;
                }
                Vec::new()
            }
        };
        if Instant::now() >= deadline {
            tracing::warn!(?bound, objects = store.len(), missing = missing.len(), first_missing = ?missing.first(),
                "declaring the store warm at the bound: some exporters have not reported");
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    readiness.set(STORE_WARM_CHECK, true);
}

/// The nodes that run a Running exporter pod.
fn exporter_nodes(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter_map(|pod| pod.spec.as_ref()?.node_name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(node: &str, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("rte-{node}")},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    type Handle = tower_test::mock::Handle<http::Request<kube::client::Body>, http::Response<kube::client::Body>>;

    /// Answers the next list of the exporter pods (nothing when the warm-up has ended).
    async fn answer_list(handle: &mut Handle, pods: &[Pod]) {
        let Some((request, send)) = handle.next_request().await else { return };
        assert!(request.uri().to_string().contains("labelSelector=app"), "{}", request.uri());
        let list = serde_json::json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods});
        send.send_response(http::Response::new(kube::client::Body::from(serde_json::to_vec(&list).unwrap())));
    }

    #[tokio::test(start_paused = true)]
    async fn warm_once_every_running_exporter_has_reported() {
        let (service, mut handle) = tower_test::mock::pair();
        let client = kube::Client::new(service, "default");
        let store = Arc::new(Store::starting_at(0, 10));
        let readiness = Arc::new(Readiness::default());
        let exporters = Exporters { namespace: "numaresources".into(), selector: "app=rte".into() };
        let task =
            tokio::spawn(warm_up(client, store.clone(), readiness.clone(), exporters, Duration::from_secs(3600)));
        let pods = [pod("a", "Running"), pod("b", "Pending"), pod("c", "Running")];

        answer_list(&mut handle, &pods).await;
        store.create(numaresources_api::nrt::NodeResourceTopology::new("a"), false).unwrap();
        answer_list(&mut handle, &pods).await;
        tokio::task::yield_now().await;
        assert_eq!(readiness.get(STORE_WARM_CHECK), Some(false), "c has not reported");

        store.create(numaresources_api::nrt::NodeResourceTopology::new("c"), false).unwrap();
        answer_list(&mut handle, &pods).await;
        task.await.unwrap();
        assert_eq!(readiness.get(STORE_WARM_CHECK), Some(true), "b's exporter is not running: not waited for");
    }

    #[tokio::test(start_paused = true)]
    async fn warm_at_the_bound_when_an_exporter_never_reports() {
        let (service, mut handle) = tower_test::mock::pair();
        let client = kube::Client::new(service, "default");
        let store = Arc::new(Store::starting_at(0, 10));
        let readiness = Arc::new(Readiness::default());
        let exporters = Exporters { namespace: "numaresources".into(), selector: "app=rte".into() };
        let mut task = tokio::spawn(warm_up(client, store, readiness.clone(), exporters, Duration::from_secs(3)));
        let pods = [pod("a", "Running")];
        loop {
            tokio::select! {
                biased;
                done = &mut task => break done.unwrap(),
                () = answer_list(&mut handle, &pods) => {}
            }
        }
        assert_eq!(readiness.get(STORE_WARM_CHECK), Some(true));
    }

    #[test]
    fn only_running_exporters_are_waited_for() {
        let pods = [pod("a", "Running"), pod("b", "Pending"), pod("c", "Running")];
        assert_eq!(exporter_nodes(&pods), BTreeSet::from(["a".to_owned(), "c".to_owned()]));
    }
}
