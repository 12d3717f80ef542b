//! The timing loop of the std-only benches.

use std::time::{Duration, Instant};

/// Runs `f` in `rounds` rounds of `iterations` calls each and returns the median time per call:
/// the median keeps one round disturbed by the other core's work from moving the figure.
pub fn median_per_iteration(rounds: usize, iterations: u32, mut f: impl FnMut()) -> Duration {
    let mut per_call: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iterations {
                f();
            }
            start.elapsed() / iterations
        })
        .collect();
    per_call.sort();
    per_call[per_call.len() / 2]
}
