//! Exponential backoff with jitter between dials of a socket that failed.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

/// How long to wait before dialing again after consecutive failures.
///
/// The n-th consecutive failure waits `initial × 2^(n−1)`, capped at `max`, then spread by
/// ±`jitter` (a fraction) so that exporters on many nodes do not hammer in step, and capped again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Wait after the first failure.
    pub initial: Duration,
    /// Longest wait.
    pub max: Duration,
    /// Relative spread, clamped to `0.0..=1.0`.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(5), jitter: 0.2 }
    }
}

impl Backoff {
    /// The wait after `failures` consecutive failures (0 means no wait), given `unit` drawn
    /// uniformly from `0.0..1.0`.
    #[must_use]
    pub(crate) fn delay_with(&self, failures: u32, unit: f64) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let doublings = failures.saturating_sub(1).min(32);
        let base = self.initial.saturating_mul(1u32 << doublings.min(31)).min(self.max);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 + jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        // try_from: a huge `max` times the factor must not panic as `mul_f64` would.
        Duration::try_from_secs_f64(base.as_secs_f64() * factor).unwrap_or(self.max).min(self.max)
    }

    /// The wait after `failures` consecutive failures, with fresh jitter.
    #[must_use]
    pub fn delay(&self, failures: u32) -> Duration {
        self.delay_with(failures, unit_random())
    }
}

/// A number in `0.0..1.0` good enough for jitter (std's per-process random hash keys).
fn unit_random() -> f64 {
    let bits = RandomState::new().hash_one(std::time::Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_initial_wait_and_stops_at_the_cap() {
        let backoff = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(1), jitter: 0.0 };
        let waits: Vec<u128> = (0..7).map(|n| backoff.delay_with(n, 0.5).as_millis()).collect();
        assert_eq!(waits, [0, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.delay_with(u32::MAX, 0.5), Duration::from_secs(1));
        let unbounded = Backoff { max: Duration::MAX, jitter: f64::NAN, ..backoff };
        assert_eq!(unbounded.delay_with(u32::MAX, 1.0), Duration::MAX);
    }

    #[test]
    fn jitter_spreads_the_wait_both_ways_but_never_past_the_cap() {
        let backoff = Backoff { initial: Duration::from_millis(100), max: Duration::from_millis(1000), jitter: 0.2 };
        assert_eq!(backoff.delay_with(1, 0.0), Duration::from_millis(80));
        assert_eq!(backoff.delay_with(1, 1.0), Duration::from_millis(120));
        assert_eq!(backoff.delay_with(10, 1.0), Duration::from_millis(1000));
        assert_eq!(backoff.delay_with(10, 0.0), Duration::from_millis(800));
    }

    #[test]
    fn random_jitter_stays_within_its_bounds() {
        let backoff = Backoff::default();
        for _ in 0..1000 {
            let wait = backoff.delay(1);
            assert!(wait >= Duration::from_millis(80) && wait <= Duration::from_millis(120), "{wait:?}");
        }
    }
}
