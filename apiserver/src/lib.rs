//! The aggregated NodeResourceTopology API server.
