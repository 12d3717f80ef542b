//! The pods fingerprint: the algorithm is [`numaresources_api::fingerprint`] (the scheduler side
//! checks NRTs with it too); the exporter adds the optional status dump.

mod status;

pub use numaresources_api::fingerprint::*;
pub(crate) use status::write_status_file;
pub use status::{Status, StatusError};

#[cfg(test)]
mod tests;
