//! The aggregated NodeResourceTopology API server: `topology.node.k8s.io/v1alpha2`
//! `noderesourcetopologies`, served from memory behind an `APIService`.
//!
//! ```text
//!   request ─► negotiate (Accept) ─► handler (rest / watch / discovery / openapi)
//!                                          │ reads: Arc clones of stored objects and their JSON
//!                                          ▼
//!                                   store (one writer at a time, bounded watch history)
//! ```

pub mod store;
