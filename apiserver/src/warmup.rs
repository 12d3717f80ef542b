//! When a fresh store is warm, from real signals: every exporter that exists has reported.
//!
//! A store that starts empty (every replica gone, as at a cluster restart) must not answer as if
//! it knew: the scheduler plugin reads a missing NodeResourceTopology as "no constraint", and an
//! informer that lists an empty store drops every node's topology from its cache, while one that
//! gets 503 keeps what it had. The exporters re-create their objects with their next publish, so
//! the store is warm once each node that runs a Running exporter pod has its object.
//!
//! A node whose exporter cannot reach us must not hold every other node's answers back forever,
//! so past a bound the store is declared warm with what it has, with one exception: while
//! exporters that write to us directly exist and fewer than half of them have reported, the
//! store stays cold past the bound. Those exporters reach a replica that is not Ready (through
//! the write Service), so their silence is a failure to fix, not a deadlock to break, and
//! serving a (largely) empty store would make the scheduler place blindly. Exporters that
//! publish only through kube-apiserver cannot reach a replica before one is Ready (the
//! APIService is unavailable until then): for them only the bound breaks the wait. No exporter
//! at all means nothing to wait for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::Store;
use crate::exporter_pods::ExporterPods;
use crate::health::Readiness;
use crate::replication::STORE_WARM_CHECK;

/// How often the exporters are looked at while warming up.
const POLL: Duration = Duration::from_secs(1);

/// Past the bound, the store stays cold while fewer than one in this many exporters that write
/// directly have reported (half).
const DIRECT_WRITERS_REPORTED_AT_BOUND: usize = 2;

/// What one look at the store and the exporters concludes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Every running exporter has reported.
    Warm,
    /// Some have not; the bound has not passed.
    Waiting { missing: Vec<String> },
    /// The bound has passed: warm with what the store holds.
    WarmAtBound { missing: Vec<String> },
    /// The bound has passed, but most exporters that write directly have not reported.
    HoldingPastBound { missing: Vec<String>, direct: usize, direct_reported: usize },
    /// The bound has passed and the exporter pods could not be listed.
    UnknownAtBound,
}

/// The verdict for the running exporters `exporters` (node → writes directly; `None`: not
/// listed yet), `reported` telling whether a node has its object.
fn judge(exporters: Option<&BTreeMap<String, bool>>, reported: impl Fn(&str) -> bool, past_bound: bool) -> Verdict {
    let Some(exporters) = exporters else {
        return if past_bound { Verdict::UnknownAtBound } else { Verdict::Waiting { missing: Vec::new() } };
    };
    let missing: Vec<String> = exporters.keys().filter(|node| !reported(node)).cloned().collect();
    if missing.is_empty() {
        return Verdict::Warm;
    }
    if !past_bound {
        return Verdict::Waiting { missing };
    }
    let direct = exporters.values().filter(|direct| **direct).count();
    let direct_reported = exporters.iter().filter(|(node, direct)| **direct && reported(node)).count();
    if direct > 0 && direct_reported * DIRECT_WRITERS_REPORTED_AT_BOUND < direct {
        Verdict::HoldingPastBound { missing, direct, direct_reported }
    } else {
        Verdict::WarmAtBound { missing }
    }
}

/// Holds [`STORE_WARM_CHECK`] failing until every node running an exporter has its object in
/// `store`, or `bound` has passed (see the module's notes for the exception). The exporters
/// come from `exporters`, the pod cache the node restriction uses too (one watch for both),
/// which [`ExporterPods::follow`] must keep current.
pub(crate) async fn warm_up(
    store: Arc<Store>,
    readiness: Arc<Readiness>,
    exporters: Arc<ExporterPods>,
    bound: Duration,
) {
    readiness.set(STORE_WARM_CHECK, false);
    let deadline = Instant::now() + bound;
    let mut said_holding = false;
    loop {
        let running = exporters.running_nodes();
        let verdict = judge(running.as_ref(), |node| store.get_visible(node).is_some(), Instant::now() >= deadline);
        match verdict {
            Verdict::Warm => {
                tracing::info!(
                    objects = store.len(),
                    exporters = running.map_or(0, |r| r.len()),
                    "the store is warm: every exporter has reported"
                );
                break;
            }
            Verdict::Waiting { missing } => tracing::debug!(missing = missing.len(), "warming up"),
            Verdict::WarmAtBound { missing } => {
                tracing::warn!(?bound, objects = store.len(), missing = missing.len(), first_missing = ?missing.first(),
                    "declaring the store warm at the bound: some exporters have not reported");
                break;
            }
            Verdict::HoldingPastBound { missing, direct, direct_reported } => {
                if !said_holding {
                    said_holding = true;
                    tracing::warn!(?bound, objects = store.len(), missing = missing.len(), first_missing = ?missing.first(),
                        direct, direct_reported,
                        "the store stays cold past the bound: most exporters that write here directly have not \
                         reported, and an empty store would make the scheduler place pods blindly; check the \
                         exporters' logs (numaresources_rte_direct_write_in_use) and the write Service");
                }
            }
            Verdict::UnknownAtBound => {
                tracing::warn!(
                    ?bound,
                    "the exporter pods could not be listed; the store is declared warm at the bound"
                );
                break;
            }
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

    #[test]
    fn past_the_bound_a_store_missing_most_direct_writers_stays_cold() {
        let exporters = |nodes: &[(&str, bool)]| -> BTreeMap<String, bool> {
            nodes.iter().map(|(node, direct)| ((*node).to_owned(), *direct)).collect()
        };
        let reported = |have: &'static [&'static str]| move |node: &str| have.contains(&node);
        let missing = |nodes: &[&str]| nodes.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let direct = exporters(&[("a", true), ("b", true), ("c", true)]);
        assert_eq!(judge(Some(&direct), reported(&["a", "b", "c"]), false), Verdict::Warm);
        assert_eq!(judge(Some(&direct), reported(&["a"]), false), Verdict::Waiting { missing: missing(&["b", "c"]) });
        // Past the bound: one of three is "largely empty"; two of three is enough.
        assert_eq!(
            judge(Some(&direct), reported(&["a"]), true),
            Verdict::HoldingPastBound { missing: missing(&["b", "c"]), direct: 3, direct_reported: 1 }
        );
        assert_eq!(
            judge(Some(&direct), reported(&[]), true),
            Verdict::HoldingPastBound { missing: missing(&["a", "b", "c"]), direct: 3, direct_reported: 0 }
        );
        assert_eq!(
            judge(Some(&direct), reported(&["a", "c"]), true),
            Verdict::WarmAtBound { missing: missing(&["b"]) }
        );
        // Writers only through kube-apiserver cannot reach a cold replica: the bound stays.
        let stock = exporters(&[("a", false), ("b", false)]);
        assert_eq!(judge(Some(&stock), reported(&[]), true), Verdict::WarmAtBound { missing: missing(&["a", "b"]) });
        // Mixed: the direct writers decide.
        let mixed = exporters(&[("a", true), ("b", false), ("c", false)]);
        assert!(matches!(judge(Some(&mixed), reported(&["b", "c"]), true), Verdict::HoldingPastBound { .. }));
        assert!(matches!(judge(Some(&mixed), reported(&["a"]), true), Verdict::WarmAtBound { .. }));
        assert_eq!(judge(None, reported(&[]), true), Verdict::UnknownAtBound);
        assert_eq!(
            judge(Some(&BTreeMap::new()), reported(&[]), true),
            Verdict::Warm,
            "no exporter: nothing to wait for"
        );
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
