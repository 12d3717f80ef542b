//! The operator's own API, `nodetopology.openshift.io/v1`: [`NUMAResourcesOperator`] (RTE node
//! groups) and [`NUMAResourcesScheduler`] (the NUMA-aware secondary scheduler). Both are
//! cluster-scoped singletons, field-compatible with upstream so existing YAML applies unchanged,
//! plus our optional additions: `NodeGroup.nodeSelector` and `NUMAResourcesScheduler.spec.podRouting`.
//!
//! Defaults ([`defaults`]) and validation ([`validation`]) are pure functions used by the webhook
//! at admission and by the controllers at reconcile, so both always agree.

pub mod defaults;
mod numaresourcesoperator;
mod numaresourcesscheduler;
pub mod scheduler_image;
pub mod validation;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use numaresourcesoperator::*;
pub use numaresourcesscheduler::*;

use crate::string_enum::string_enum;

/// The API group of the operator's CRDs.
pub const GROUP: &str = "nodetopology.openshift.io";
/// The served and stored version.
pub const VERSION: &str = "v1";

/// The only name a `NUMAResourcesOperator` may have.
pub const OPERATOR_SINGLETON_NAME: &str = "numaresourcesoperator";
/// The only name a `NUMAResourcesScheduler` may have.
pub const SCHEDULER_SINGLETON_NAME: &str = "numaresourcesscheduler";

string_enum! {
    /// Operand log verbosity (OpenShift's `operatorv1.LogLevel`).
    pub enum LogLevel {
        /// Unset; treated as `Normal`.
        Unset = "",
        /// `-v=2`.
        Normal = "Normal",
        /// `-v=4`.
        Debug = "Debug",
        /// `-v=6`.
        Trace = "Trace",
        /// `-v=8`.
        TraceAll = "TraceAll",
    }
}

impl LogLevel {
    /// The klog verbosity the operand runs with (anything but a known level is 2, as upstream).
    pub fn klog_verbosity(&self) -> u8 {
        match self {
            Self::Debug => 4,
            Self::Trace => 6,
            Self::TraceAll => 8,
            _ => 2,
        }
    }
}

/// A namespace and a name (both optional on the wire, as upstream).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub struct NamespacedName {
    /// Namespace (for `podExcludes`, a glob pattern).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name (for `podExcludes`, a glob pattern).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl NamespacedName {
    /// True when neither part is set.
    pub fn is_empty(&self) -> bool {
        self.namespace.is_empty() && self.name.is_empty()
    }
}

/// A reference to an object of interest (OpenShift's `configv1.ObjectReference`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub struct ObjectReference {
    /// API group of the referent ("" for the core group).
    pub group: String,
    /// Resource (plural) of the referent.
    pub resource: String,
    /// Namespace of the referent, for namespaced resources.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name of the referent.
    pub name: String,
}
