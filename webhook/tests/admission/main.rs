//! The webhook from the outside: the real router on AdmissionReview bodies captured from a
//! kube-apiserver (`tests/fixtures/admission/`), bad bodies, and real TLS with certificate
//! rotation under load.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod bad_bodies;
mod custom_resources;
mod pods;
mod properties;
mod support;
mod tls;
