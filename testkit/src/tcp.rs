//! The machine's TCP counters from `/proc/net/snmp`.

/// TCP connections accepted on this machine so far (`PassiveOpens`, every process's); 0 when
/// the counters cannot be read.
pub fn tcp_accepted() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "PassiveOpens")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}
