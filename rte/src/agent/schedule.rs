//! When to scan and when to publish: pure decisions over instants, so the loop around them is
//! only plumbing.

use std::num::NonZeroU32;
use std::time::Duration;

use numaresources_api::nrt::NodeResourceTopology;
use tokio::time::Instant;

use crate::trigger::Trigger;

/// At most `n` scans per second. Triggers arriving faster are coalesced into one scan at the
/// earliest allowed instant; none is dropped, so the last event always gets a scan after it.
#[derive(Debug, Clone)]
pub(crate) struct RateLimiter {
    gap: Duration,
    last_scan: Option<Instant>,
    pending: Option<Trigger>,
}

impl RateLimiter {
    /// A limiter allowing `per_second` scans per second.
    pub fn new(per_second: NonZeroU32) -> Self {
        Self { gap: Duration::from_secs(1) / per_second.get(), last_scan: None, pending: None }
    }

    /// Records a trigger.
    pub fn offer(&mut self, trigger: Trigger) {
        self.pending = Some(self.pending.map_or(trigger, |p| p.merge(trigger)));
    }

    /// When the pending scan may run, if one is pending.
    pub fn due(&self) -> Option<Instant> {
        self.pending?;
        Some(self.last_scan.map_or_else(Instant::now, |last| last + self.gap))
    }

    /// Takes the pending trigger if its scan may run at `now`, and counts the scan.
    pub fn take(&mut self, now: Instant) -> Option<Trigger> {
        let due = self.last_scan.map(|last| last + self.gap);
        if self.pending.is_none() || due.is_some_and(|due| now < due) {
            return None;
        }
        self.last_scan = Some(now);
        self.pending.take()
    }
}

/// What was last accepted by the API server.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    /// The object as sent.
    pub topology: NodeResourceTopology,
    /// When.
    pub at: Instant,
}

/// Why a scan's result is (or is not) published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nothing was published yet (or the last publish failed).
    First,
    /// The topology changed.
    Changed,
    /// Unchanged, but the heartbeat is due.
    Heartbeat,
    /// Unchanged: skip.
    Unchanged,
}

impl Decision {
    /// True when the result should be sent.
    pub fn publishes(self) -> bool {
        self != Self::Unchanged
    }
}

/// Decides whether to publish `desired`, given the last published object and the heartbeat.
pub fn decide(
    last: Option<&Published>,
    desired: &NodeResourceTopology,
    now: Instant,
    heartbeat: Option<Duration>,
) -> Decision {
    let Some(last) = last else { return Decision::First };
    if !last.topology.same_topology(desired) {
        Decision::Changed
    } else if heartbeat.is_some_and(|beat| now.saturating_duration_since(last.at) >= beat) {
        Decision::Heartbeat
    } else {
        Decision::Unchanged
    }
}

#[cfg(test)]
mod tests {
    use numaresources_api::nrt::{AttributeInfo, Zone};

    use super::*;

    fn nrt(policy: &str, zones: &[&str]) -> NodeResourceTopology {
        let mut nrt = NodeResourceTopology::new("n");
        nrt.attributes.push(AttributeInfo::new("topologyManagerPolicy", policy));
        nrt.zones =
            zones.iter().map(|z| Zone { name: (*z).into(), zone_type: "Node".into(), ..Zone::default() }).collect();
        nrt
    }

    #[test]
    fn publishing_happens_first_on_change_and_on_heartbeat_only() {
        let t0 = Instant::now();
        let last = Published { topology: nrt("none", &["node-0", "node-1"]), at: t0 };
        let minute = Some(Duration::from_secs(60));
        let cases = [
            (None, nrt("none", &["node-0"]), 0, minute, Decision::First),
            (Some(&last), nrt("none", &["node-1", "node-0"]), 10, minute, Decision::Unchanged),
            (Some(&last), nrt("none", &["node-0", "node-1"]), 59, minute, Decision::Unchanged),
            (Some(&last), nrt("none", &["node-0", "node-1"]), 60, minute, Decision::Heartbeat),
            (Some(&last), nrt("none", &["node-0", "node-1"]), 6000, None, Decision::Unchanged),
            (Some(&last), nrt("restricted", &["node-0", "node-1"]), 1, minute, Decision::Changed),
            (Some(&last), nrt("none", &["node-0"]), 1, None, Decision::Changed),
        ];
        for (i, (last, desired, after, heartbeat, want)) in cases.into_iter().enumerate() {
            let got = decide(last, &desired, t0 + Duration::from_secs(after), heartbeat);
            assert_eq!(got, want, "case {i}");
            assert_eq!(got.publishes(), want != Decision::Unchanged);
        }
    }

    #[test]
    fn a_burst_of_triggers_becomes_one_scan_after_the_gap_and_keeps_the_event() {
        let mut limiter = RateLimiter::new(NonZeroU32::new(2).unwrap());
        let t0 = Instant::now();
        assert_eq!(limiter.take(t0), None, "nothing pending");
        limiter.offer(Trigger::Periodic);
        assert!(limiter.due().unwrap() <= Instant::now(), "the first scan is due at once");
        assert_eq!(limiter.take(t0), Some(Trigger::Periodic));
        // A burst right after: coalesced, due half a second after the last scan.
        limiter.offer(Trigger::Reactive);
        limiter.offer(Trigger::Periodic);
        limiter.offer(Trigger::Reactive);
        assert_eq!(limiter.due(), Some(t0 + Duration::from_millis(500)));
        assert_eq!(limiter.take(t0 + Duration::from_millis(499)), None);
        assert_eq!(limiter.take(t0 + Duration::from_millis(500)), Some(Trigger::Reactive));
        assert_eq!(limiter.take(t0 + Duration::from_secs(5)), None, "the burst gave exactly one scan");
        assert_eq!(limiter.due(), None);
    }

    #[test]
    fn timer_triggers_coalesce_as_periodic() {
        let mut limiter = RateLimiter::new(NonZeroU32::MIN);
        let t0 = Instant::now();
        limiter.offer(Trigger::Periodic);
        assert_eq!(limiter.take(t0), Some(Trigger::Periodic));
        limiter.offer(Trigger::Periodic);
        limiter.offer(Trigger::Periodic);
        assert_eq!(limiter.take(t0 + Duration::from_secs(1)), Some(Trigger::Periodic));
        assert_eq!(Trigger::Reactive.as_str(), "reactive");
    }
}
