//! What a person reads in the log instead of one line per pod: counts of what the pod webhook
//! did, logged at info at most once per [`SUMMARY_INTERVAL`] and only when something happened.
//! Each request itself is logged at debug (a busy cluster admits hundreds of pods a second).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::Webhook;

/// How often the activity summary may be logged.
pub(crate) const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);

/// Counters since the last summary (the Prometheus metrics keep the running totals).
#[derive(Debug, Default)]
pub(crate) struct Activity {
    routed: AtomicU64,
    left: AtomicU64,
    not_synced: AtomicU64,
    refused: AtomicU64,
}

/// The counts one summary reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Pods sent to the NUMA-aware scheduler.
    pub routed: u64,
    /// Pod creations left to their scheduler, for any reason but the caches.
    pub left: u64,
    /// Pod creations left alone because the caches were not synced yet.
    pub not_synced: u64,
    /// Requests refused before or while decoding the review (any endpoint).
    pub refused: u64,
}

impl Activity {
    pub fn routed(&self) {
        self.routed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn left(&self) {
        self.left.fetch_add(1, Ordering::Relaxed);
    }

    pub fn not_synced(&self) {
        self.not_synced.fetch_add(1, Ordering::Relaxed);
    }

    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts since the last call, which start again from zero.
    pub fn take(&self) -> Counts {
        Counts {
            routed: self.routed.swap(0, Ordering::Relaxed),
            left: self.left.swap(0, Ordering::Relaxed),
            not_synced: self.not_synced.swap(0, Ordering::Relaxed),
            refused: self.refused.swap(0, Ordering::Relaxed),
        }
    }
}

impl Counts {
    fn is_empty(self) -> bool {
        self == Self::default()
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} pods routed to the NUMA-aware scheduler, {} left to their scheduler", self.routed, self.left)?;
        if self.not_synced > 0 {
            write!(f, ", {} not routed because the caches were not synced yet", self.not_synced)?;
        }
        if self.refused > 0 {
            write!(f, ", {} unreadable requests refused", self.refused)?;
        }
        Ok(())
    }
}

/// Logs the activity summary every [`SUMMARY_INTERVAL`] while something happens; runs until
/// the task is dropped.
pub(crate) async fn summarize_activity(webhook: Arc<Webhook>) {
    let mut ticks = tokio::time::interval(SUMMARY_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is immediate
    loop {
        ticks.tick().await;
        log_summary(&webhook);
    }
}

/// Logs what happened since the last summary, if anything did.
fn log_summary(webhook: &Webhook) -> Option<Counts> {
    let counts = webhook.activity.take();
    if counts.is_empty() {
        return None;
    }
    tracing::info!(
        routed = counts.routed,
        left = counts.left,
        not_synced = counts.not_synced,
        refused = counts.refused,
        "in the last {}s: {counts}",
        SUMMARY_INTERVAL.as_secs()
    );
    Some(counts)
}

/// A subscriber that counts the events at info or above, to prove what a request logs there.
#[cfg(test)]
pub(crate) mod capture {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    #[derive(Clone, Default)]
    pub struct InfoOrAbove(pub Arc<AtomicUsize>);

    impl InfoOrAbove {
        pub fn count(&self) -> usize {
            self.0.load(Ordering::Relaxed)
        }
    }

    impl Subscriber for InfoOrAbove {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            if *event.metadata().level() <= Level::INFO {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}

#[cfg(test)]
mod tests {
    use super::capture::InfoOrAbove;
    use super::*;
    use crate::ClusterCache;

    #[test]
    fn a_summary_reports_what_happened_since_the_last_one_and_nothing_when_idle() {
        let (cluster, _feeds) = ClusterCache::new();
        let webhook = Webhook::with_cluster(crate::Config::new("numaresources").unwrap(), cluster);
        let lines = InfoOrAbove::default();
        tracing::subscriber::with_default(lines.clone(), || {
            assert_eq!(log_summary(&webhook), None, "nothing happened: no line");
            webhook.activity.routed();
            webhook.activity.routed();
            webhook.activity.left();
            webhook.activity.refused();
            let counts = log_summary(&webhook).unwrap();
            assert_eq!(counts, Counts { routed: 2, left: 1, not_synced: 0, refused: 1 });
            assert_eq!(log_summary(&webhook), None, "counted once");
        });
        assert_eq!(lines.count(), 1);
        let text = Counts { routed: 2, left: 1, not_synced: 3, refused: 0 }.to_string();
        assert_eq!(
            text,
            "2 pods routed to the NUMA-aware scheduler, 1 left to their scheduler, 3 not routed because the caches were not synced yet"
        );
    }
}
