//! The health checks: named readiness checks that parts of the server set as they start and
//! stop being ready, answered on `/healthz`, `/livez`, `/readyz` and `/<endpoint>/<check>` by the
//! shared runtime's probes (kube-apiserver's `[+]`/`[-]` format).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::response::Response;
use numaresources_runtime::admin::{self, Checks};
use tower::ServiceExt;

use crate::AppState;

/// Named readiness checks: `/readyz` is 200 only when every one passes. A check that was never
/// set counts as passing, so components register theirs as failing until they are ready.
#[derive(Debug, Default)]
pub struct Readiness {
    checks: RwLock<BTreeMap<String, bool>>,
}

impl Readiness {
    /// Records the state of a check.
    pub fn set(&self, name: &str, ok: bool) {
        self.checks.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.to_owned(), ok);
    }

    /// The state of one check (None: never set, which counts as passing).
    pub fn get(&self, name: &str) -> Option<bool> {
        self.checks.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(name).copied()
    }

    /// The checks set so far, in name order, each reading its state when run.
    pub fn checks(self: &Arc<Self>) -> Checks {
        let names: Vec<String> =
            self.checks.read().unwrap_or_else(std::sync::PoisonError::into_inner).keys().cloned().collect();
        names.into_iter().fold(Checks::new(), |checks, name| {
            let (readiness, key) = (self.clone(), name.clone());
            checks.with(name, move || match readiness.get(&key) {
                Some(false) => Err("not ready".to_owned()),
                _ => Ok(()),
            })
        })
    }
}

/// `/healthz`, `/livez`, `/readyz` and `/<endpoint>/<check>`, answered by the runtime's probes
/// over the checks set at the time of the request: parts of the server register theirs as they
/// start (replication, warm-up, authentication), after the routes exist, and probes come seconds
/// apart, so the probes' router is made per request.
pub async fn probes(State(state): State<Arc<AppState>>, request: Request) -> Response {
    answer_with(admin::probes(state.readiness.checks()), request).await
}

/// `request` answered by one of the runtime's admin routers.
pub(crate) async fn answer_with(router: Router, request: Request) -> Response {
    // Without this router's extensions: its path parameters would add to the admin router's own.
    let (mut parts, body) = request.into_parts();
    parts.extensions = http::Extensions::new();
    match router.oneshot(Request::from_parts(parts, body)).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}
