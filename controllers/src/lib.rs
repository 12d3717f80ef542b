//! The numaresources controllers: one leader-elected process running three independent
//! kube-runtime controllers and the self-managed certificate lifecycle.
//!
//! ```text
//!   NUMAResourcesOperator ──operator──► exporter DaemonSet per node group, exporter RBAC,
//!        │                              NRT API server (Deployment, Service, RBAC, APIService +
//!        │                              caBundle; not with --apiserver-deployment=installed), status
//!        └──────────kubeletconfig──► ConfigMap <nro>-<pool>: topology manager policy/scope
//!                                     (from kubelet configz or MCO KubeletConfigs) + podExcludes
//!   NUMAResourcesScheduler ─scheduler─► secondary scheduler Deployment, KubeSchedulerConfiguration
//!                                      ConfigMap, RBAC, status
//!   certificates (--certificate-mode=self-managed) ─► Secrets numaresources-ca, -apiserver-tls,
//!                                      -webhook-tls; caBundle of the APIService and webhooks
//!   Pending pods of the NUMA-aware scheduler ─placement─► a NUMAPlacement Event on each, saying
//!                                      which nodes would take it and why the others do not
//! ```
//!
//! Decisions are pure ([`render`], [`nodegroups`], `conditions`); the reconcilers apply them
//! with server-side apply under one field manager ([`names::FIELD_MANAGER`]), set owner
//! references on everything they create, and report through status conditions and Events.

mod apply;
pub mod certificates;
pub mod cluster_nodes;
mod conditions;
mod context;
#[cfg(test)]
mod fake;
mod guarded;
pub mod hash;
mod kubeletconfig;
#[cfg(test)]
mod leader_tests;
mod metrics;
mod mode;
pub mod names;
pub mod nodegroups;
mod operator;
pub mod placement;
pub mod render;
mod run;
mod scheduler;
mod server_version;

pub use context::Settings;
pub use mode::{ApiserverDeployment, CertificateMode, check_compatible};
pub use run::{Config, Controllers, LeaderElection};

/// What a kubelet runs, read through kube-apiserver's node proxy, and what keeps it from
/// NUMA-aligned placement (`kubectl numa doctor` asks as the kubeletconfig controller does).
pub mod kubelet {
    pub use crate::kubeletconfig::{alignment_gaps, configz, describe_alignment};
}
