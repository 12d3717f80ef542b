//! The scenario tests' API server: testkit's in-memory fake ([`FakeApi`]), authorizing every
//! request against the controllers' checked-in `manifests/controllers/rbac.yaml`, so a call the
//! RBAC misses fails every scenario that makes it; and what only the controllers' tests need.

use std::path::Path;
use std::sync::{Arc, LazyLock};

use numaresources_testkit::fake_api::Rbac;
pub use numaresources_testkit::fake_api::{FakeApi, one_pass, run_controller_until};

/// The controllers' RBAC, read once per test binary.
static CONTROLLERS_RBAC: LazyLock<Arc<Rbac>> = LazyLock::new(|| {
    Arc::new(Rbac::from_file(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/controllers/rbac.yaml"))))
});

/// A fake authorizing as the controllers' ServiceAccount is authorized, and a client of it.
pub fn start() -> (FakeApi, kube::Client) {
    FakeApi::start(CONTROLLERS_RBAC.clone())
}

/// `ctx` publishing Events (into the fake, for [`FakeApi::events`]).
pub fn recording(ctx: &crate::context::Context) -> Arc<crate::context::Context> {
    let reporter = kube::runtime::events::Reporter::from("numaresources-controllers");
    Arc::new(crate::context::Context::new(ctx.client.clone(), ctx.settings.clone(), Some(reporter)))
}
