//! The NUMA placement engine for the stock kube-scheduler, as an HTTP extender: it filters and
//! scores by what the node's kubelet would admit (its Topology Manager's own rules, for every
//! policy and scope: [`numaresources_api::fit::kubelet`]) over the NRTs as they are now, and it
//! binds, so it knows every pod it placed and holds it against its node until the node's NRT
//! counts it.
//!
//! ```text
//!   protocol  kube-scheduler's extender v1 JSON
//!   engine    the decisions: filter, prioritize, holds and their release
//!   score     a node's 0..=10 over the NUMA nodes the kubelet would use
//!   server    the HTTP routes
//!   watch     NRTs and bound pods, fed to the engine
//! ```

pub mod engine;
pub mod protocol;
mod score;
pub mod server;
pub mod watch;
