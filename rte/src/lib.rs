//! The resource topology exporter (RTE).

pub(crate) mod accounting;
pub mod fingerprint;
pub mod numaplacement;
pub mod podresources;
pub mod sysfs;
pub mod topology;

pub mod agent;
pub mod config;
pub mod direct;
pub mod exporter;
pub mod metrics;
pub mod metrics_endpoint;
pub mod podreadiness;
pub mod publish;
pub mod terminal;
pub mod trigger;
