//! Noticing within seconds that the API server lost this node's object, where that is cheap.
//!
//! The agent publishes only on change (plus a heartbeat a minute apart), so without this an
//! object someone deleted stays missing until the next publish, and the scheduler plugin reads
//! a missing object as "no constraint". The agent watches its own object (a field selector on
//! its name): a DELETED event, or a (re)list that does not find it, makes the agent publish
//! again at once.
//!
//! While the agent publishes through kube-apiserver (the cluster serves NRT itself, or our
//! server cannot be reached directly), the watch goes there too. On the direct write path it
//! would be a connection held open to a replica of our server by every agent, ≈40 KiB each
//! (hyper's and rustls' buffers, the watch's state): 200 MiB per replica for 5,000 nodes,
//! several times the objects themselves (BENCHMARKS.md, the fleet defaults, "No own-object
//! watch"). So [`follow`] watches only while the agent publishes
//! through kube-apiserver. On the direct path the agent asks instead, every few seconds over
//! plain HTTP, whether the server holds its object ([`crate::direct::held`]), which also
//! notices a cold store (every replica gone): such a store answers reads, watches included,
//! with 503 until the exporters have written, so a watch could not notice it anyway.

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use numaresources_api::nrt::NodeResourceTopology;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// Tells the agent that the API server does not hold its object, and from when that view is:
/// the start of the list that did not find it, or when the deletion was seen. The agent
/// publishes again only if it has not published since; a list that raced with its first
/// publish (started before the create, answered after) is no loss. That race made every start
/// publish twice.
#[derive(Debug, Default)]
pub struct Lost {
    notify: Notify,
    /// The earliest view reported and not yet taken.
    seen_at: Mutex<Option<Instant>>,
}

impl Lost {
    /// Nothing reported yet.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The object was found missing in a view from `seen_at`.
    pub fn report(&self, seen_at: Instant) {
        let mut seen = self.seen_at.lock().unwrap_or_else(PoisonError::into_inner);
        *seen = Some(seen.map_or(seen_at, |earlier| earlier.min(seen_at)));
        self.notify.notify_one();
    }

    /// Waits for a report; the view's instant.
    pub async fn reported(&self) -> Instant {
        self.notify.notified().await;
        self.seen_at.lock().unwrap_or_else(PoisonError::into_inner).take().unwrap_or_else(Instant::now)
    }
}

/// What the watch of the own object concludes from one event, given whether the current list
/// has shown the object so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Nothing to do.
    Fine,
    /// The object is gone: publish again.
    Lost,
}

/// Folds one watch event into `listed` (whether the list under way has shown the object).
pub(crate) fn observe(event: &Event<NodeResourceTopology>, listed: &mut bool) -> Seen {
    match event {
        Event::Init => {
            *listed = false;
            Seen::Fine
        }
        Event::InitApply(_) => {
            *listed = true;
            Seen::Fine
        }
        Event::InitDone if !*listed => Seen::Lost,
        Event::Delete(_) => Seen::Lost,
        Event::InitDone | Event::Apply(_) => Seen::Fine,
    }
}

/// The range of this watch's `timeoutSeconds`: up to kube's default for a watch (290 s), down
/// to half of it.
pub(crate) const WATCH_TIMEOUT_SECONDS: std::ops::RangeInclusive<u32> = 145..=290;

/// This node's watch timeout, spread over [`WATCH_TIMEOUT_SECONDS`] by its name. With one
/// timeout for all, the watches of a fleet that started together (a rollout) are renewed
/// together every 290 s, thousands of requests at once on the server; client-go spreads its
/// reflectors' watch timeouts for the same reason. A hash of the name, not a random draw: the
/// same node keeps the same period across restarts, and nothing random is needed.
pub(crate) fn watch_timeout(node: &str) -> u32 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    node.hash(&mut hasher);
    let (low, high) = (*WATCH_TIMEOUT_SECONDS.start(), *WATCH_TIMEOUT_SECONDS.end());
    let offset = u32::try_from(hasher.finish() % u64::from(high - low + 1)).unwrap_or(0);
    low + offset
}

/// Watches `node`'s object until the task is dropped; reports to `lost` each time it is found
/// missing.
pub async fn watch(client: kube::Client, node: String, lost: Arc<Lost>) {
    let api: kube::Api<NodeResourceTopology> = kube::Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={node}")).timeout(watch_timeout(&node));
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    let mut listed = false;
    // When the list under way started: what it did not find may have been created since.
    let mut list_started = Instant::now();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                if matches!(event, Event::Init) {
                    list_started = Instant::now();
                }
                if observe(&event, &mut listed) == Seen::Lost {
                    let seen_at = if matches!(event, Event::InitDone) { list_started } else { Instant::now() };
                    tracing::debug!(%node, "the API server does not hold this node's topology");
                    lost.report(seen_at);
                }
            }
            Err(error) => tracing::debug!(%error, "watching this node's topology failed; retrying"),
        }
    }
}

/// Watches `node`'s object through the client `clients` holds while it holds one (the agent
/// publishes through kube-apiserver), not while it holds none (the agent publishes directly),
/// following each change until the task is dropped.
pub async fn follow(mut clients: watch::Receiver<Option<kube::Client>>, node: String, lost: Arc<Lost>) {
    loop {
        let client = clients.borrow_and_update().clone();
        let Some(client) = client else {
            if clients.changed().await.is_err() {
                return; // The publisher is gone while publishing directly: nothing to watch.
            }
            tracing::debug!(%node, "the agent publishes through kube-apiserver now; watching its topology there");
            continue;
        };
        tokio::select! {
            () = watch(client.clone(), node.clone(), Arc::clone(&lost)) => return,
            changed = clients.changed() => if changed.is_err() {
                // The publisher is gone; keep watching where it last wrote.
                return watch(client, node, lost).await;
            },
        }
        tracing::debug!(%node, "the agent publishes directly now; its own-object watch stops");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_without_the_object_or_a_deletion_means_lost() {
        let object = NodeResourceTopology::new("worker-0");
        let mut listed = false;
        let fold = |events: Vec<Event<NodeResourceTopology>>, listed: &mut bool| {
            events.iter().map(|e| observe(e, listed)).collect::<Vec<_>>()
        };
        assert_eq!(
            fold(vec![Event::Init, Event::InitApply(object.clone()), Event::InitDone], &mut listed),
            [Seen::Fine, Seen::Fine, Seen::Fine]
        );
        assert_eq!(fold(vec![Event::Apply(object.clone()), Event::Delete(object.clone())], &mut listed)[1], Seen::Lost);
        // A restarted server: the watch breaks, the relist finds nothing.
        assert_eq!(fold(vec![Event::Init, Event::InitDone], &mut listed), [Seen::Fine, Seen::Lost]);
    }

    /// A fleet's watches are renewed spread over the range, not all at once: 5,000 nodes named
    /// as a cluster names them land in every second of it, none holding more than a few times
    /// its share; and one node always gets the same timeout.
    #[test]
    fn a_fleets_watch_timeouts_spread_over_the_range() {
        let mut per_second = std::collections::BTreeMap::<u32, usize>::new();
        for i in 0..5_000 {
            let timeout = watch_timeout(&format!("worker-{i}.example.internal"));
            assert!(WATCH_TIMEOUT_SECONDS.contains(&timeout), "{timeout}");
            *per_second.entry(timeout).or_default() += 1;
        }
        let seconds = WATCH_TIMEOUT_SECONDS.count();
        assert_eq!(per_second.len(), seconds, "every second of the range is used");
        let share = 5_000 / seconds;
        assert!(per_second.values().all(|n| *n <= 3 * share), "{per_second:?}");
        assert_eq!(watch_timeout("worker-7"), watch_timeout("worker-7"));
    }
}
