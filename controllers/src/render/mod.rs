//! Desired objects as pure functions of the normalized specs: no client, no clock.
//!
//! Objects are written as JSON literals shaped like the YAML a person would write, then typed;
//! a literal that does not type is a bug, reported as [`RenderError`] rather than a panic.

pub mod apiserver;
pub mod kubeletconfig;
pub mod network_policy;
pub mod pod_routing;
pub mod rte;
pub mod scheduler;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// A rendered literal did not match its type (a bug in the renderer).
#[derive(Debug, thiserror::Error)]
#[error("failed to render {what}: {source}")]
pub struct RenderError {
    what: &'static str,
    #[source]
    source: serde_json::Error,
}

/// Types a JSON literal.
pub(crate) fn typed<T: DeserializeOwned>(what: &'static str, value: Value) -> Result<T, RenderError> {
    serde_json::from_value(value).map_err(|source| RenderError { what, source })
}
