//! The scheduler extender's contract with the kube-scheduler configuration that calls it: where
//! it listens and its verbs (the controllers render the `extenders` stanza from these; the
//! extender serves them).

/// The port the extender listens on beside kube-scheduler (loopback by default).
pub const DEFAULT_PORT: u16 = 8888;
/// The port of the extender's `/healthz` and `/readyz` (all addresses: the kubelet probes it
/// over the pod's IP, while the verbs stay on loopback).
pub const HEALTH_PORT: u16 = 8889;
/// `filterVerb`.
pub const FILTER_VERB: &str = "filter";
/// `prioritizeVerb`.
pub const PRIORITIZE_VERB: &str = "prioritize";
/// `bindVerb`.
pub const BIND_VERB: &str = "bind";
