//! TLS for every numaresources server.
