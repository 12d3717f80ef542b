//! What the tests and benches of several crates share, and nothing ships: a dev-only crate (no
//! component depends on it outside `[dev-dependencies]`, and it depends on no component but the
//! runtime, besides the api crate's types).
//!
//! - [`fake_api`]: an in-memory API server behind kube-rs' client (objects, watches, server-side
//!   apply, patches, injected failures), authorizing each request against RBAC manifests, for
//!   the controllers' scenario tests;
//! - [`https`]: kept-alive HTTP/1.1 and HTTP/2 connections over TLS, each request read whole;
//! - [`kube_double`]: kube-apiserver as our components meet it (Leases, exporter pods, token and
//!   access reviews), in process or on a loopback port, for the API server's tests and benches
//!   and the workspace's replication tests;
//! - [`median`]: the timing loop of the std-only benches;
//! - [`nrt`]: NRTs of CPU zones for the scheduling tests;
//! - [`proc_status`] and [`tcp`]: a process's memory and the machine's TCP counters, as the
//!   whole-process benches report them;
//! - [`tls`]: bounded waits, rustls clients and a Secret mounted the kubelet's way, for the TLS
//!   tests of the runtime, the webhook and the exporter's metrics.

#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

pub mod fake_api;
pub mod https;
pub mod kube_double;
pub mod median;
pub mod nrt;
pub mod proc_status;
pub mod tcp;
pub mod tls;
