//! The legacy `/apis/<group>/<version>/watch/<plural>[/<name>]` prefix, which kube-apiserver
//! still serves: a watch on the collection or on one object.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use http::HeaderMap;
use http::header::ACCEPT;

use crate::AppState;
use crate::query::{FieldTerm, RawQuery};
use crate::status::ApiError;

/// `/watch/<plural>`: a watch on the collection.
pub async fn collection(
    state: State<Arc<AppState>>,
    Query(mut raw): Query<RawQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    raw.force_watch();
    crate::rest::list_or_watch(state, Query(raw), headers).await
}

/// `/watch/<plural>/<name>`: a watch on one object.
pub async fn object(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(mut raw): Query<RawQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    raw.force_watch();
    let mut options = crate::query::Options::try_from(raw)?;
    options.fields.push(FieldTerm { value: name, negated: false });
    let representation = crate::negotiate::negotiate(headers.get(ACCEPT).and_then(|v| v.to_str().ok()))?;
    crate::watch::serve(&state, options, representation)
}
