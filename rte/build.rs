//! Generates the kubelet podresources gRPC code from `proto/podresources/v1/api.proto`.
//!
//! The proto is parsed by `protox` (pure Rust), so no `protoc` is ever needed; its descriptor set
//! goes to `tonic-prost-build`, which writes `v1.rs` into `OUT_DIR`.

use std::error::Error;

const PROTO: &str = "proto/podresources/v1/api.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-changed=build.rs");

    let descriptors = protox::compile([PROTO], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server exists for the fake kubelet of tests and benchmarks only.
        .build_server(true)
        .server_mod_attribute("v1", r#"#[cfg(feature = "test-kubelet")]"#)
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
