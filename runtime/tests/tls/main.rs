//! End-to-end tests over real sockets: a TLS listener on 127.0.0.1:0 served by `serve`, and real
//! rustls clients. One test binary (fewer links on a shared machine), one module per topic.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup step is a failed test

mod client_auth;
mod reload;
mod serve;
use numaresources_testkit::tls as shared;
mod support;
