//! The admission webhook's contract: the paths the webhook serves and the controllers register
//! in the webhook configurations they render.

/// The path of the pod-routing mutating webhook (sets `schedulerName` on pods that need NUMA-aware
/// scheduling).
pub const MUTATE_PODS_PATH: &str = "/mutate-pods";
