//! API types shared by every numaresources component. Plain data and pure functions only:
//! no I/O, no async runtime, no client.
//!
//! ```text
//!   nrt       NodeResourceTopology v1alpha2 (+ v1alpha1), canonical form, semantic equality
//!   operator  NUMAResourcesOperator, NUMAResourcesScheduler: types, defaults, validation
//!   qos       a pod's QoS class and the requests the kubelet aligns to NUMA zones
//!   fit       the NUMA-aware scheduler's filter and scorer, as pure functions
//!   crds      the CustomResourceDefinitions generated from those types
//!   direct_write  the exporter → API server direct path: flags, token audience, extras
//!   exporter  the exporter's ConfigMap, topology manager settings, metrics port, mount paths
//!   webhook   the admission webhook's paths
//!   request_info  a request line read as kube-apiserver reads it before authorizing it
//!   metadata  apimachinery's ObjectMeta validation (names, labels, annotations, finalizers)
//!   quantity, duration, selector, field
//!             the apimachinery pieces they are made of, with Go-identical text forms
//! ```
//!
//! The API server, the webhook, the exporter and the controllers all read and write these
//! types, so what one accepts the others understand.

pub mod crds;
pub mod direct_write;
pub mod duration;
pub mod exporter;
pub mod extender;
pub mod field;
pub mod fingerprint;
pub mod fit;
pub mod metadata;
pub mod nrt;
pub mod operator;
pub mod qos;
pub mod quantity;
pub mod request_info;
mod schema;
pub mod selector;
mod string_enum;
pub mod webhook;

pub use duration::GoDuration;
pub use field::{FieldError, FieldErrors, FieldPath};
pub use quantity::Quantity;
pub use string_enum::StringEnum;

/// The name of the product, as it appears in labels and field managers.
pub const PRODUCT: &str = "numaresources";

/// The namespace the components and their operands run in when not told otherwise (`POD_NAMESPACE`).
pub const DEFAULT_NAMESPACE: &str = "numaresources";
