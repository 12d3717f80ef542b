//! A process's figures from `/proc/<pid>/status`.

/// A KiB field of `/proc/<pid>/status` (`pid` may be `self`): `VmRSS`, or its parts `RssAnon`
/// (heap, stacks: what the process holds) and `RssFile` (the binary's code and data pages mapped
/// from the file, clean and reclaimable).
pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
