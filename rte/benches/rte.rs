//! Benchmarks of discovery, fingerprint and placement (being written).

fn main() {}
