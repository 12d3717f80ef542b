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
//! ```
//!
//! Decisions are pure ([`render`], [`nodegroups`], [`conditions`]); the reconcilers apply them
//! with server-side apply under one field manager ([`names::FIELD_MANAGER`]), set owner
//! references on everything they create, and report through status conditions and Events.

pub mod apply;
pub mod certificates;
pub mod cluster_nodes;
pub mod conditions;
pub mod context;
#[cfg(test)]
mod fake;
pub mod guarded;
pub mod hash;
pub mod kubeletconfig;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod nodegroups;
pub mod operator;
pub mod render;
pub mod run;
pub mod scheduler;
pub mod server_version;

pub use context::{Context, Error, Result, Settings};
pub use run::{Config, Controllers, LeaderElection};
