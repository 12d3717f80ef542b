//! When a fresh store is warm, from real signals: every exporter that exists has reported.
//!
//! A store that starts empty (every replica gone, as at a cluster restart) must not answer as if
//! it knew: the scheduler plugin reads a missing NodeResourceTopology as "no constraint". The
//! exporters re-create their objects with their next publish (a change, or the heartbeat within
//! a minute), so the store is warm once each node that runs a Running exporter pod has its
//! object, or after a bound (a node whose
//! exporter cannot reach us must not keep every other node's answers back forever). No exporter
//! at all means nothing to wait for.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::Store;
use crate::exporter_pods::ExporterPods;
use crate::health::Readiness;
use crate::replication::STORE_WARM_CHECK;

/// How often the exporters are looked at while warming up.
const POLL: Duration = Duration::from_secs(1);

/// Holds [`STORE_WARM_CHECK`] failing until every node running an exporter has its object in
/// `store`, or `bound` has passed. The exporters come from `exporters`, the pod cache the node
/// restriction uses too (one watch for both), which [`ExporterPods::follow`] must keep current.
pub(crate) async fn warm_up(
    store: Arc<Store>,
    readiness: Arc<Readiness>,
    exporters: Arc<ExporterPods>,
    bound: Duration,
) {
    readiness.set(STORE_WARM_CHECK, false);
    let deadline = Instant::now() + bound;
    loop {
        let missing = match exporters.running_nodes() {
            Some(nodes) => {
                let missing: Vec<String> =
                    nodes.iter().filter(|node| store.get_visible(node).is_none()).cloned().collect();
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
            None => Vec::new(),
        };
        if Instant::now() >= deadline {
            if exporters.synced() {
                tracing::warn!(?bound, objects = store.len(), missing = missing.len(), first_missing = ?missing.first(),
                    "declaring the store warm at the bound: some exporters have not reported");
            } else {
                tracing::warn!(
                    ?bound,
                    "the exporter pods could not be listed; the store is declared warm at the bound"
                );
            }
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    readiness.set(STORE_WARM_CHECK, true);
}

/// Follows the exporter pods with `client` (for good: the node restriction reads them too) and
/// holds [`STORE_WARM_CHECK`] failing until the store is warm (see [`warm_up`]).
pub(crate) async fn follow_and_warm_up(
    client: kube::Client,
    selector: String,
    store: Arc<Store>,
    readiness: Arc<Readiness>,
    exporters: Arc<ExporterPods>,
    bound: Duration,
) {
    tokio::join!(exporters.follow(client, &selector), warm_up(store, readiness, exporters.clone(), bound));
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::Event;

    use super::*;

    fn pod(node: &str, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("rte-{node}"), "uid": format!("u-{node}")},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn listed(pods: &[Pod]) -> Arc<ExporterPods> {
        let exporters = Arc::new(ExporterPods::new("numaresources"));
        exporters.apply(Event::Init);
        for pod in pods {
            exporters.apply(Event::InitApply(pod.clone()));
        }
        exporters.apply(Event::InitDone);
        exporters
    }

    #[tokio::test(start_paused = true)]
    async fn warm_once_every_running_exporter_has_reported() {
        let store = Arc::new(Store::starting_at(0, 10));
        let readiness = Arc::new(Readiness::default());
        let exporters = listed(&[pod("a", "Running"), pod("b", "Pending"), pod("c", "Running")]);
        let task = tokio::spawn(warm_up(store.clone(), readiness.clone(), exporters, Duration::from_secs(3600)));

        store.create(numaresources_api::nrt::NodeResourceTopology::new("a"), false).unwrap();
        tokio::time::sleep(POLL * 2).await;
        assert_eq!(readiness.get(STORE_WARM_CHECK), Some(false), "c has not reported");

        store.create(numaresources_api::nrt::NodeResourceTopology::new("c"), false).unwrap();
        task.await.unwrap();
        assert_eq!(readiness.get(STORE_WARM_CHECK), Some(true), "b's exporter is not running: not waited for");
    }

    #[tokio::test(start_paused = true)]
    async fn warm_at_the_bound_when_an_exporter_never_reports_or_pods_cannot_be_listed() {
        for exporters in [listed(&[pod("a", "Running")]), Arc::new(ExporterPods::new("numaresources"))] {
            let store = Arc::new(Store::starting_at(0, 10));
            let readiness = Arc::new(Readiness::default());
            warm_up(store, readiness.clone(), exporters, Duration::from_secs(3)).await;
            assert_eq!(readiness.get(STORE_WARM_CHECK), Some(true));
        }
    }
}
