//! The resource endpoints: get, list, create, update, patch, delete, deletecollection.
//! Watches (`?watch=true`) are handed to [`crate::watch`].

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, StatusCode};
use numaresources_api::field::{FieldError, FieldErrors, FieldPath};
use numaresources_api::nrt::NodeResourceTopology;
use serde::Deserialize;
use serde_json::Value;

use crate::AppState;
use crate::auth::NodeScope;
use crate::body::{self, Parsed, Syntax};
use crate::merge_patch::TypedMergePatch;
use crate::negotiate::{Representation, negotiate};
use crate::paging::{self, ContinueToken};
use crate::patch_limits::{self, PatchBounds};
use crate::query::{FieldValidation, Options, RawQuery, ResourceVersion, VersionMatch};
use crate::render;
use crate::response::json_response;
use crate::status::ApiError;
use crate::store::{Preconditions, Propagation, Snapshot, StoreError, Stored};
use crate::validate::{body_syntax, decode, unknown_fields, validate_create, validate_update};

/// Patch types we apply, and the ones we refuse with a reason.
const PATCH_TYPES: &[&str] = &["application/merge-patch+json", "application/json-patch+json"];

/// How long a list or watch waits for a resourceVersion newer than this replica shows
/// (kube-apiserver's watch cache blocks 3 s before answering "Too large resource version").
pub const TOO_LARGE_RESOURCE_VERSION_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `GET` on the collection: a list, or a watch with `watch=true`.
pub async fn list_or_watch(
    State(state): State<Arc<AppState>>,
    Query(raw): Query<RawQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let options = Options::try_from(raw)?;
    let representation = negotiate(accept(&headers))?;
    // A resourceVersion this replica does not show yet (a write acknowledged through the leader
    // a moment ago) is waited for, as kube-apiserver's watch cache waits, before "too large".
    if let Some(ResourceVersion::At(wanted)) = options.resource_version {
        state.store.wait_visible(wanted, TOO_LARGE_RESOURCE_VERSION_WAIT).await;
    }
    if options.watch {
        return crate::watch::serve(&state, options, representation);
    }
    list(&state, &options, representation)
}

fn list(state: &AppState, options: &Options, representation: Representation) -> Result<Response, ApiError> {
    options.check_list()?;
    let (snapshot, start) = match options.continue_token.as_deref() {
        Some(text) => continued_snapshot(state, options, text)?,
        None => (fresh_snapshot(state, options)?, None),
    };
    let matching = snapshot.items.into_iter().filter(|s| start.as_deref().is_none_or(|start| s.name() >= start));
    let items: Vec<_> = if options.selects_everything() {
        matching.collect()
    } else {
        matching.filter(|s| options.selects(s.name(), s.labels())).collect()
    };
    let (page, meta) = paginate(items, snapshot.revision, options);
    Ok(json_response(StatusCode::OK, render::list(&page, &meta, representation, options.include_object)?))
}

/// The snapshot a first (or only) page comes from, checked against `resourceVersion`.
///
/// A specific resourceVersion is read exactly with `resourceVersionMatch=Exact`, and also, as
/// kube-apiserver's storage does for the legacy paging semantics, with a `limit` and no
/// `resourceVersionMatch`; otherwise it means "not older than" and the latest state serves.
fn fresh_snapshot(state: &AppState, options: &Options) -> Result<Snapshot, ApiError> {
    let Some(ResourceVersion::At(wanted)) = options.resource_version else { return Ok(state.store.snapshot()) };
    // Revisions only grow: one newer than the current one now was never handed out.
    let current = state.store.visible_revision();
    if wanted > current {
        return Err(ApiError::too_large_resource_version(wanted, current));
    }
    let exact = match options.resource_version_match {
        Some(VersionMatch::Exact) => true,
        None => options.limit.is_some(),
        Some(VersionMatch::NotOlderThan) => false,
    };
    if !exact {
        return Ok(state.store.snapshot());
    }
    // The state at exactly that revision (the current one included: writes may land meanwhile),
    // as long as the history reaches back to it.
    state
        .store
        .snapshot_at(wanted)
        .map_err(|oldest| ApiError::expired(format!("too old resource version: {wanted} ({oldest})")))
}

/// The snapshot a continue token pins, and the first name of the page.
fn continued_snapshot(state: &AppState, options: &Options, text: &str) -> Result<(Snapshot, Option<String>), ApiError> {
    if matches!(options.resource_version, Some(ResourceVersion::At(_))) {
        return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
    }
    if options.resource_version_match.is_some() {
        return Err(ApiError::invalid_options(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    let token = ContinueToken::decode(text)?;
    let snapshot = match token.snapshot_revision() {
        Some(revision) => state.store.snapshot_at(revision).map_err(|_| paging::expired(&token))?,
        None => state.store.snapshot(),
    };
    Ok((snapshot, Some(token.start)))
}

/// Cuts the first page of `items` (already narrowed to the ones after the continue position),
/// with the token and count for the rest. As kube-apiserver does, `remainingItemCount` is given
/// only when no selector narrows the list.
fn paginate(mut items: Vec<Arc<Stored>>, revision: u64, options: &Options) -> (Vec<Arc<Stored>>, render::ListMeta) {
    let mut meta = render::ListMeta::at(revision);
    let Some(limit) = options.limit.filter(|limit| *limit < items.len()) else { return (items, meta) };
    let remaining = items.len() - limit;
    items.truncate(limit);
    let last = items.last().map(|s| s.name().to_owned()).unwrap_or_default();
    meta.continue_token = Some(ContinueToken::after(&last, i64::try_from(revision).unwrap_or(i64::MAX)).encode());
    meta.remaining_item_count = options.selects_everything().then_some(remaining);
    (items, meta)
}

/// `GET` on one object.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(raw): Query<RawQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let options = Options::try_from(raw)?;
    let representation = negotiate(accept(&headers))?;
    let stored = state.store.get_visible(&name).ok_or_else(|| ApiError::not_found(&name))?;
    Ok(json_response(StatusCode::OK, render::object(&stored, representation, options.include_object)?))
}

/// `POST` on the collection.
pub async fn create(
    State(state): State<Arc<AppState>>,
    scope: Option<axum::Extension<NodeScope>>,
    Query(raw): Query<RawQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let options = Options::try_from(raw)?;
    let (mut object, warnings) = read_object(&state, &headers, body, &options, None).await?;
    if object.metadata.name.as_deref().is_none_or(str::is_empty)
        && let Some(prefix) = object.metadata.generate_name.as_deref().filter(|p| !p.is_empty())
    {
        object.metadata.name = Some(generated_name(prefix, &state));
    }
    validate_create(&object)?;
    let name = object.metadata.name.clone().unwrap_or_default();
    if let Some(axum::Extension(NodeScope(node))) = scope
        && node != name
    {
        return Err(crate::auth::forbidden_for_node(&node, &name));
    }
    // What YAML aliases made of the body must still fit where the body had to: the store
    // measures the encoding it makes of the object (no second serialization).
    let limit = state.limits.max_body_bytes;
    let stored = state.store.create_within(object, options.dry_run, limit).map_err(|e| store_error(e, &name))?;
    tracing::debug!(%name, revision = stored.revision, dry_run = options.dry_run, "created");
    Ok(with_warnings(json_response(StatusCode::CREATED, stored.json.clone()), &warnings))
}

/// `PUT` on one object.
pub async fn update(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(raw): Query<RawQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let options = Options::try_from(raw)?;
    let (object, warnings) = read_object(&state, &headers, body, &options, Some(&name)).await?;
    // What YAML aliases made of the body must still fit where the body had to: the store
    // measures the encoding it makes of the new version (no second serialization).
    let limit = state.limits.max_body_bytes;
    let result = state.store.modify_within(&name, &Preconditions::default(), options.dry_run, limit, |current| {
        validate_update(&object, current).map_err(PatchError::Api)?;
        Ok(object)
    });
    let (stored, changed) = result.map_err(|e| patch_error(e, &name))?;
    tracing::debug!(%name, revision = stored.revision, changed, "updated");
    Ok(with_warnings(json_response(StatusCode::OK, stored.json.clone()), &warnings))
}

/// Reads, parses, field-checks and decodes a create or update body; returns the object and the
/// unknown-field warnings.
async fn read_object(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    options: &Options,
    url_name: Option<&str>,
) -> Result<(NodeResourceTopology, Vec<String>), ApiError> {
    let body = read_body(body, state.limits.max_body_bytes).await?;
    let syntax = body_syntax(content_type(headers))?;
    let parsed = body::parse_off_the_runtime(body, syntax, state.limits.max_nesting_depth).await?;
    let warnings = field_check(&parsed.value, &parsed.duplicates, options.field_validation)?;
    Ok((decode(parsed.value, url_name)?, warnings))
}

/// `PATCH` on one object: JSON merge patch (RFC 7386) or JSON patch (RFC 6902), applied to the
/// current state under the store's write lock so no concurrent write is lost.
pub async fn patch(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(raw): Query<RawQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let options = Options::try_from(raw)?;
    let media = content_type(&headers).unwrap_or_default().split(';').next().unwrap_or_default().trim().to_owned();
    let kind = match media.as_str() {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/json-patch+json" => PatchKind::Json,
        "application/strategic-merge-patch+json" => {
            return Err(unsupported_patch(
                &media,
                "strategic merge patch is not supported for NodeResourceTopology (as for every custom resource); use --type=merge or --type=json",
            ));
        }
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            return Err(unsupported_patch(
                &media,
                "server-side apply is not supported by this API server; use a merge patch, or kubectl apply without --server-side",
            ));
        }
        other => return Err(ApiError::unsupported_media_type(other, PATCH_TYPES)),
    };
    let limits = &state.limits;
    let body = read_body(body, limits.max_body_bytes).await?;
    let bounds = PatchBounds {
        max_operations: limits.max_json_patch_operations,
        max_copy_bytes: limits.max_body_bytes,
        max_depth: limits.max_nesting_depth,
    };
    let typed = match kind {
        PatchKind::Merge => TypedMergePatch::from_slice(&body, limits.max_nesting_depth),
        PatchKind::Json => None,
    };
    let mut patch = match typed {
        Some(typed) => PatchBody::typed(typed),
        None => {
            let parsed = body::parse_off_the_runtime(body, Syntax::Json, limits.max_nesting_depth).await?;
            PatchBody::parsed(parsed, kind, options.field_validation, &name)?
        }
    };
    if let (PatchKind::Json, Some(current)) = (kind, state.store.get(&name)) {
        try_json_patch(current, &patch.value, &name, bounds, options.field_validation).await?;
    }
    let mut warnings = std::mem::take(&mut patch.warnings);
    // Every patch's result is validated as an update is, and must fit where a body had to: the
    // store measures the encoding it makes of the result (no second serialization).
    let max_bytes = limits.max_body_bytes;
    let result = state.store.modify_within(&name, &Preconditions::default(), options.dry_run, max_bytes, |current| {
        let next = patch.apply(current, kind, &name, &bounds, options.field_validation, &mut warnings)?;
        validate_update(&next, current).map_err(PatchError::Api)?;
        Ok(next)
    });
    let (stored, changed) = result.map_err(|e| patch_error(e, &name))?;
    tracing::debug!(%name, revision = stored.revision, changed, "patched");
    Ok(with_warnings(json_response(StatusCode::OK, stored.json.clone()), &warnings))
}

/// A patch body, decoded.
struct PatchBody {
    /// The exporters' shape of merge patch, typed, with what field validation says of it; that
    /// is answered only once the store has had its say (404, preconditions), as on the generic
    /// path.
    typed: Option<(TypedMergePatch, Result<Vec<String>, ApiError>)>,
    /// The body as JSON, for the generic path (`null` when the typed shape was decoded straight
    /// from the bytes: nothing reads it then).
    value: Value,
    /// What `fieldValidation=Warn` says of repeated keys.
    warnings: Vec<String>,
}

impl PatchBody {
    /// A merge patch decoded straight from the bytes: nothing in it to report.
    fn typed(typed: TypedMergePatch) -> Self {
        Self { typed: Some((typed, Ok(Vec::new()))), value: Value::Null, warnings: Vec::new() }
    }

    /// A patch parsed the generic way: repeated keys answered (422 with `Strict`), and a merge
    /// patch of the exporters' shape typed, its unknown fields checked.
    fn parsed(parsed: Parsed, kind: PatchKind, validation: FieldValidation, name: &str) -> Result<Self, ApiError> {
        let warnings = patch_duplicates(&parsed.duplicates, validation, name)?;
        let typed = match kind {
            PatchKind::Merge => {
                TypedMergePatch::decode(&parsed.value).map(|typed| (typed, field_check(&parsed.value, &[], validation)))
            }
            PatchKind::Json => None,
        };
        Ok(Self { typed, value: parsed.value, warnings })
    }

    /// The patched object (under the store's write lock), adding warnings to `warnings`.
    fn apply(
        self,
        current: &NodeResourceTopology,
        kind: PatchKind,
        name: &str,
        bounds: &PatchBounds,
        validation: FieldValidation,
        warnings: &mut Vec<String>,
    ) -> Result<NodeResourceTopology, PatchError> {
        match self.typed {
            Some((typed, checked)) => {
                warnings.extend(checked.map_err(PatchError::Api)?);
                Ok(typed.apply(current))
            }
            None => apply_patch(current, &self.value, kind, name, bounds, validation, warnings),
        }
    }
}

/// How many JSON patches are tried (see [`try_json_patch`]) at once: each may build up to the
/// body limit in copies and keeps an async worker busy meanwhile, so one at a time leaves the
/// other workers to everything else (writes are one at a time anyway).
const JSON_PATCHES_TRIED_AT_ONCE: usize = 1;

/// Applies a JSON patch to the current object once before the write, outside the store's write
/// lock, and answers its error. A JSON patch may copy up to the body limit before it fails (a
/// copy bomb): applied only under the write lock, which every read also takes, it
/// held back every GET meanwhile. The write then applies it again to the object as it is at that
/// moment. (On the blocking pool instead, the copies' memory stayed in another allocator arena:
/// twice the RSS under the attack.)
async fn try_json_patch(
    current: Arc<Stored>,
    patch: &Value,
    name: &str,
    bounds: PatchBounds,
    validation: FieldValidation,
) -> Result<(), ApiError> {
    static TRYING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(JSON_PATCHES_TRIED_AT_ONCE);
    let _permit = TRYING.acquire().await.map_err(|e| ApiError::internal("waiting to apply the patch", &e))?;
    let object = current.object().map_err(|e| ApiError::internal("decoding the stored object", &e))?;
    match apply_patch(&object, patch, PatchKind::Json, name, &bounds, validation, &mut Vec::new()) {
        Err(PatchError::Api(error)) => Err(error),
        Ok(_) | Err(PatchError::Store(_)) => Ok(()),
    }
}

#[derive(Debug, Clone, Copy)]
enum PatchKind {
    Merge,
    Json,
}

/// What can go wrong while patching: the patch itself (400/422) or the write (404/409).
#[derive(Debug)]
pub enum PatchError {
    /// The patch does not apply, or the result is not a valid object.
    Api(ApiError),
    /// The store refused the write.
    Store(StoreError),
}

impl From<StoreError> for PatchError {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

fn patch_error(error: PatchError, name: &str) -> ApiError {
    match error {
        PatchError::Api(api) => api,
        PatchError::Store(store) => store_error(store, name),
    }
}

/// The generic path: the current object as JSON, patched (within [`PatchBounds`] for a JSON
/// patch), field-checked and decoded.
fn apply_patch(
    current: &NodeResourceTopology,
    patch: &Value,
    kind: PatchKind,
    name: &str,
    bounds: &PatchBounds,
    validation: FieldValidation,
    warnings: &mut Vec<String>,
) -> Result<NodeResourceTopology, PatchError> {
    let mut document =
        serde_json::to_value(current).map_err(|e| PatchError::Api(ApiError::internal("encoding", &e)))?;
    match kind {
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(PatchError::Api(ApiError::bad_request("a merge patch must be a JSON object")));
            }
            json_patch::merge(&mut document, patch);
        }
        PatchKind::Json => patch_limits::apply(&mut document, patch, bounds, name).map_err(PatchError::Api)?,
    }
    // As kube-apiserver's patch handler checks: the result must still be the object on the URL
    // (`{"metadata": null}` or `remove /metadata/name` would otherwise pass as "no name given").
    let patched_name = document.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    if patched_name != name {
        return Err(PatchError::Api(ApiError::bad_request(format!(
            "the name of the object ({patched_name}) does not match the name on the URL ({name})"
        ))));
    }
    warnings.extend(field_check(&document, &[], validation).map_err(PatchError::Api)?);
    decode(document, Some(name)).map_err(PatchError::Api)
}

/// Applies `fieldValidation` to a written object: `Strict` refuses repeated keys and unknown
/// fields (400, worded as kube-apiserver words it: `strict decoding error: duplicate field
/// "metadata.name", unknown field "…"`), `Warn` returns them as warnings, `Ignore` says nothing.
fn field_check(value: &Value, duplicates: &[String], validation: FieldValidation) -> Result<Vec<String>, ApiError> {
    if validation == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let problems: Vec<String> = duplicate_problems(duplicates)
        .chain(unknown_fields(value).into_iter().map(|path| format!("unknown field \"{path}\"")))
        .collect();
    if validation == FieldValidation::Strict && !problems.is_empty() {
        return Err(ApiError::bad_request(format!("strict decoding error: {}", problems.join(", "))));
    }
    Ok(problems)
}

/// Repeated keys in a patch body: with `Strict`, the patch is invalid (422, as kube-apiserver
/// answers); with `Warn`, warnings.
fn patch_duplicates(duplicates: &[String], validation: FieldValidation, name: &str) -> Result<Vec<String>, ApiError> {
    if validation == FieldValidation::Ignore || duplicates.is_empty() {
        return Ok(Vec::new());
    }
    let problems: Vec<String> = duplicate_problems(duplicates).collect();
    if validation == FieldValidation::Strict {
        return Err(ApiError::invalid_patch(name, &format!("strict decoding error: {}", problems.join(", "))));
    }
    Ok(problems)
}

fn duplicate_problems(duplicates: &[String]) -> impl Iterator<Item = String> + '_ {
    duplicates.iter().map(|path| format!("duplicate field \"{path}\""))
}

/// Adds one `Warning: 299 - "…"` header per warning (kubectl prints them).
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - {:?}", warning);
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

fn unsupported_patch(media: &str, why: &str) -> ApiError {
    let mut error = ApiError::unsupported_media_type(media, PATCH_TYPES);
    error.append_message(why);
    error
}

/// The body of a DELETE, when there is one.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteOptions {
    #[serde(default)]
    preconditions: Option<DeletePreconditions>,
    #[serde(default)]
    dry_run: Vec<String>,
    /// Accepted, and without effect: custom resources have no graceful deletion.
    #[serde(default)]
    #[allow(dead_code)]
    grace_period_seconds: Option<i64>,
    #[serde(default)]
    orphan_dependents: Option<bool>,
    #[serde(default)]
    propagation_policy: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeletePreconditions {
    resource_version: Option<String>,
    uid: Option<String>,
}

/// What a DELETE asks for, read and checked once for `delete` and `deletecollection`.
#[derive(Debug)]
struct Deletion {
    preconditions: Preconditions,
    propagation: Propagation,
    dry_run: bool,
    /// `orphanDependents=false`: kube-apiserver answers 202 when such a deletion leaves the
    /// object in place (and 200 in every other case, to keep older clients working).
    orphan_dependents_false: bool,
}

impl Deletion {
    /// DeleteOptions from the body or, as kube-apiserver reads them, from the query parameters
    /// when there is no body; validated as `ValidateDeleteOptions` does (422 `DeleteOptions`).
    /// A `dryRun=All` parameter counts with a body too: a dry run never deletes.
    async fn read(state: &AppState, options: &Options, body: Body) -> Result<Self, ApiError> {
        let body = read_body(body, state.limits.max_body_bytes).await?;
        let given = if body.iter().all(u8::is_ascii_whitespace) {
            DeleteOptions {
                orphan_dependents: options.delete.orphan_dependents,
                propagation_policy: options.delete.propagation_policy.clone(),
                ..DeleteOptions::default()
            }
        } else {
            serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
        };
        let path = || FieldPath::new("propagationPolicy");
        let mut errors = FieldErrors::default();
        if let (Some(_), Some(policy)) = (given.orphan_dependents, given.propagation_policy.as_deref()) {
            errors.push(FieldError::invalid(
                path(),
                policy,
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        let propagation = match (given.propagation_policy.as_deref(), given.orphan_dependents) {
            (Some("Foreground"), _) => Propagation::Foreground,
            (Some("Background"), _) => Propagation::Background,
            (Some("Orphan"), _) => Propagation::Orphan,
            (Some(other), _) => {
                errors.push(FieldError::not_supported(path(), other, &["Foreground", "Background", "Orphan", "nil"]));
                Propagation::Default
            }
            (None, Some(true)) => Propagation::Orphan,
            (None, Some(false)) => Propagation::Background,
            (None, None) => Propagation::Default,
        };
        errors.into_result().map_err(|errors| ApiError::invalid_options_of("DeleteOptions", &errors))?;
        Ok(Self {
            preconditions: given
                .preconditions
                .map(|p| Preconditions { resource_version: p.resource_version, uid: p.uid })
                .unwrap_or_default(),
            propagation,
            dry_run: options.dry_run || given.dry_run.iter().any(|d| d == "All"),
            orphan_dependents_false: given.orphan_dependents == Some(false),
        })
    }
}

/// `DELETE` on one object. Answers with the object as deleted (or as marked, when finalizers
/// hold it), as kube-apiserver does for custom resources.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(raw): Query<RawQuery>,
    body: Body,
) -> Result<Response, ApiError> {
    let options = Options::try_from(raw)?;
    let deletion = Deletion::read(&state, &options, body).await?;
    let (stored, gone) = state
        .store
        .delete_with(&name, &deletion.preconditions, deletion.propagation, deletion.dry_run)
        .map_err(|e| store_error(e, &name))?;
    tracing::debug!(%name, gone, dry_run = deletion.dry_run, propagation = ?deletion.propagation, "deleted");
    let status = if !gone && deletion.orphan_dependents_false { StatusCode::ACCEPTED } else { StatusCode::OK };
    Ok(json_response(status, stored.json.clone()))
}

/// `DELETE` on the collection, narrowed by the selectors; each object is deleted as a DELETE
/// with the same DeleteOptions would delete it.
pub async fn delete_collection(
    State(state): State<Arc<AppState>>,
    Query(raw): Query<RawQuery>,
    body: Body,
) -> Result<Response, ApiError> {
    let options = Options::try_from(raw)?;
    // Its list options are checked as a list's are.
    options.check_list()?;
    let deletion = Deletion::read(&state, &options, body).await?;
    let snapshot = state.store.snapshot();
    let mut deleted = Vec::new();
    for stored in snapshot.items.iter().filter(|s| options.selects(s.name(), s.labels())) {
        let name = stored.name();
        match state.store.delete_with(name, &deletion.preconditions, deletion.propagation, deletion.dry_run) {
            Ok((object, _)) => deleted.push(object),
            Err(StoreError::NotFound) => {} // deleted concurrently
            Err(error) => return Err(store_error(error, name)),
        }
    }
    let revision = state.store.visible_revision();
    Ok(json_response(
        StatusCode::OK,
        render::list(&deleted, &render::ListMeta::at(revision), Representation::Json, Default::default())?,
    ))
}

/// Answers a path we do not serve.
pub async fn not_found(uri: http::Uri) -> ApiError {
    ApiError::no_such_path(uri.path())
}

/// Answers a method a path does not support.
pub async fn method_not_allowed(method: http::Method, uri: http::Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

/// Maps a store refusal to the Status kube-apiserver would send.
pub fn store_error(error: StoreError, name: &str) -> ApiError {
    match error {
        StoreError::NotFound => ApiError::not_found(name),
        StoreError::AlreadyExists => ApiError::already_exists(name),
        StoreError::Conflict(why) => ApiError::conflict(name, &why),
        StoreError::Serialize(e) => ApiError::internal("serializing the object", &e),
        StoreError::TooLarge { limit } => ApiError::too_large(limit),
    }
}

/// Reads a request body, refusing more than `limit` bytes with 413.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|error| {
        let too_large = std::error::Error::source(&error).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
            || error.to_string().contains("length limit");
        if too_large { ApiError::too_large(limit) } else { ApiError::bad_request(format!("reading the body: {error}")) }
    })
}

fn accept(headers: &HeaderMap) -> Option<&str> {
    headers.get(ACCEPT).and_then(|v| v.to_str().ok())
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())
}

/// The longest `generateName` prefix used: longer ones are cut, so that the name stays within
/// 63 characters with the suffix (apimachinery's `MaxGeneratedNameLength`).
const MAX_GENERATED_NAME_PREFIX: usize = 63 - 5;

/// `generateName` + 5 characters from kube's alphabet (no vowels, no look-alike digits).
fn generated_name(prefix: &str, state: &AppState) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    // Cut at a byte count, as Go does; a prefix that is not ASCII there fails validation anyway.
    let prefix = prefix.get(..MAX_GENERATED_NAME_PREFIX).unwrap_or(prefix);
    let mut seed = state.store.visible_revision() ^ std::process::id() as u64 ^ prefix.len() as u64;
    let suffix: String = (0..5)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ALPHABET[(seed >> 33) as usize % ALPHABET.len()] as char
        })
        .collect();
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::body::DEFAULT_MAX_NESTING_DEPTH;

    const NAME: &str = "worker-0";

    fn objects() -> Vec<NodeResourceTopology> {
        let full = json!({"metadata": {"name": NAME, "uid": "u-1", "resourceVersion": "7", "generation": 2,
                "creationTimestamp": "2026-01-02T03:04:05Z",
                "labels": {"pool": "cnf", "zone": "a"}, "annotations": {"team": "x", "owned": "1"}},
            "topologyPolicies": ["SingleNUMANodeContainerLevel"],
            "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
            "zones": [{"name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": 10}],
                "resources": [{"name": "cpu", "capacity": "4", "allocatable": "3500m", "available": "1500m"}]}]});
        let bare = json!({"metadata": {"name": NAME, "uid": "u-1"}, "zones": []});
        vec![decode(full, None).unwrap(), decode(bare, None).unwrap()]
    }

    /// Members of a merge patch, well-formed or not: every body below is made of up to three of
    /// them (some repeat a key, on purpose).
    const MEMBERS: &[&str] = &[
        r#""zones": [{"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": "250m"}]}]"#,
        r#""zones": [{"name": "node-0", "type": "Node", "parent": "s", "costs": [{"name": "node-0", "value": 10}], "attributes": [{"name": "x", "value": "y"}], "resources": [{"name": "memory", "capacity": 1.5, "allocatable": 2, "available": "1Gi"}]}]"#,
        r#""zones": [{"name": "node-0", "type": "Node", "typo": 1}]"#,
        r#""zones": [{"name": "node-0", "type": "Node", "type": "Socket"}]"#,
        r#""zones": [{"name": "node-0", "type": "Node", "parent": null}]"#,
        r#""zones": [{"name": "node-0", "type": "Node", "costs": null}]"#,
        r#""zones": [{"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "capacity": "lots", "allocatable": "1", "available": "1"}]}]"#,
        r#""zones": [{"name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": 10, "unit": "x"}]}]"#,
        r#""zones": []"#,
        r#""zones": null"#,
        r#""zones": {"name": "node-0"}"#,
        r#""attributes": [{"name": "a", "value": "b"}]"#,
        r#""attributes": [{"name": "a", "value": "b", "vaule": "c"}]"#,
        r#""attributes": null"#,
        r#""topologyPolicies": ["None"]"#,
        r#""topologyPolicies": null"#,
        r#""metadata": {"labels": {"pool": null, "added": "yes"}, "annotations": {"owned": "2"}}"#,
        r#""metadata": {"annotations": {"a": "1", "a": "2"}}"#,
        r#""metadata": {"labels": null}"#,
        r#""metadata": {"labels": {"a": 1}}"#,
        r#""metadata": {"labels": ["a"]}"#,
        r#""metadata": null"#,
        r#""metadata": {"name": "other"}"#,
        r#""metadata": {"resourceVersion": "1"}"#,
        r#""metadata": {}"#,
        r#""kind": "NodeResourceTopology""#,
        r#""spec": {}"#,
        r#""zones": [["node-0", "Node", "socket-0", [["node-0", 10]]]], "attributes": [["a", "b"]]"#,
        r#""zones": [["node-0", "Node", null]]"#,
        " \n\"topologyPolicies\"\t:[ \"a\\u0041\" ] ",
    ];

    /// Every body of up to three members, and a few that are not objects at all.
    fn bodies() -> Vec<String> {
        let mut bodies: Vec<String> = ["{}", "[]", "[1]", "null", "{", r#"{"zones": []} x"#, "\"zones\""]
            .iter()
            .map(|body| (*body).to_owned())
            .collect();
        for (a, first) in MEMBERS.iter().enumerate() {
            bodies.push(format!("{{{first}}}"));
            for (b, second) in MEMBERS.iter().enumerate().skip(a + 1) {
                bodies.push(format!("{{{first}, {second}}}"));
                for third in &MEMBERS[b + 1..] {
                    bodies.push(format!("{{{third}, {first}, {second}}}"));
                }
            }
        }
        bodies
    }

    type Outcome = Result<(String, Vec<String>), Value>;

    fn outcome(patch: Result<PatchBody, ApiError>, current: &NodeResourceTopology, v: FieldValidation) -> Outcome {
        let bounds = PatchBounds { max_operations: 10, max_copy_bytes: 1 << 20, max_depth: DEFAULT_MAX_NESTING_DEPTH };
        let mut warnings = Vec::new();
        let patch = patch.map_err(|e| e.to_status())?;
        warnings.extend(patch.warnings.iter().cloned());
        match patch.apply(current, PatchKind::Merge, NAME, &bounds, v, &mut warnings) {
            Ok(next) => Ok((serde_json::to_string(&next).unwrap(), warnings)),
            Err(error) => Err(patch_error(error, NAME).to_status()),
        }
    }

    /// The generic path: a JSON value with its repeated keys, then the typed shape or the merge.
    fn generic(body: &str, depth: usize, v: FieldValidation) -> Result<PatchBody, ApiError> {
        let parsed = body::parse(body.as_bytes(), Syntax::Json, depth)?;
        PatchBody::parsed(parsed, PatchKind::Merge, v, NAME)
    }

    #[test]
    fn a_merge_patch_decoded_from_the_bytes_does_what_the_generic_path_does() {
        let bodies = bodies();
        let mut typed_from_bytes = 0;
        for body in &bodies {
            let Some(typed) = TypedMergePatch::from_slice(body.as_bytes(), DEFAULT_MAX_NESTING_DEPTH) else { continue };
            typed_from_bytes += 1;
            drop(typed);
            for current in &objects() {
                for v in [FieldValidation::Ignore, FieldValidation::Warn, FieldValidation::Strict] {
                    let fast = TypedMergePatch::from_slice(body.as_bytes(), DEFAULT_MAX_NESTING_DEPTH).unwrap();
                    let fast = outcome(Ok(PatchBody::typed(fast)), current, v);
                    let slow = outcome(generic(body, DEFAULT_MAX_NESTING_DEPTH, v), current, v);
                    assert_eq!(fast, slow, "{body} with {v:?}");
                }
            }
        }
        // Both sides of the split are exercised: what the exporters send, and everything that
        // needs a report (unknown fields, repeated keys), removes a field or does not decode.
        assert!(typed_from_bytes > 50, "{typed_from_bytes} of {}", bodies.len());
        assert!(bodies.len() - typed_from_bytes > 1000, "{typed_from_bytes} of {}", bodies.len());
    }

    /// Random patches around the exporters' shape: each field present or not, of the right type
    /// or not, `null`s, unknown fields, and now and then a member repeated in the text.
    mod random {
        use proptest::collection::{btree_map, vec};
        use proptest::option::weighted;
        use proptest::prelude::*;
        use serde_json::{Map, Value, json};

        fn text() -> BoxedStrategy<Value> {
            prop_oneof![40 => "[a-z0-9-]{0,6}".prop_map(Value::from), 1 => Just(Value::Null), 1 => Just(json!(1)),
                1 => Just(json!("é\\\"\n"))]
            .boxed()
        }

        fn quantity() -> BoxedStrategy<Value> {
            prop_oneof![20 => "[0-9]{1,4}(m|Ki|Gi)?".prop_map(Value::from), 20 => (0i64..100_000).prop_map(Value::from),
                1 => Just(json!(1.5)), 1 => Just(json!(-3)), 1 => Just(json!("lots")), 1 => Just(Value::Null)]
            .boxed()
        }

        /// An object with each of `fields` most of the time, and sometimes one no schema has.
        fn object_of(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
            let members: Vec<_> = fields
                .into_iter()
                .map(|(key, value)| weighted(0.8, value).prop_map(move |v| v.map(|v| (key, v))).boxed())
                .collect();
            (members, weighted(0.02, Just(("extra", json!(1)))))
                .prop_map(|(members, extra)| {
                    Value::Object(members.into_iter().flatten().chain(extra).map(|(k, v)| (k.to_owned(), v)).collect())
                })
                .boxed()
        }

        fn list(item: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
            prop_oneof![40 => vec(item, 0..3).prop_map(Value::Array), 1 => Just(Value::Null), 1 => Just(json!({}))]
                .boxed()
        }

        fn string_map() -> BoxedStrategy<Value> {
            let entries = btree_map("[a-z./]{1,5}", prop_oneof![8 => text(), 1 => Just(Value::Null)], 0..3);
            prop_oneof![30 => entries.prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
                1 => Just(Value::Null), 1 => Just(json!([]))]
            .boxed()
        }

        pub(super) fn patch() -> impl Strategy<Value = String> {
            let name_value = || object_of(vec![("name", text()), ("value", text())]);
            let cost = object_of(vec![
                ("name", text()),
                ("value", prop_oneof![(0i64..100).prop_map(Value::from), Just(json!(1.5)), Just(json!("10"))].boxed()),
            ]);
            let resource = object_of(vec![
                ("name", text()),
                ("capacity", quantity()),
                ("allocatable", quantity()),
                ("available", quantity()),
            ]);
            let zone = object_of(vec![
                ("name", text()),
                ("type", text()),
                ("parent", text()),
                ("costs", list(cost)),
                ("attributes", list(name_value())),
                ("resources", list(resource)),
            ]);
            let metadata = object_of(vec![("labels", string_map()), ("annotations", string_map())]);
            let patch = object_of(vec![
                ("zones", list(zone)),
                ("attributes", list(name_value())),
                ("topologyPolicies", list(text())),
                ("metadata", metadata),
            ]);
            (patch, proptest::bool::weighted(0.1)).prop_map(|(patch, repeat_first)| {
                let text = patch.to_string();
                match patch.as_object().and_then(|members| members.iter().next()) {
                    // The first member once more, in front: a repeated key the value cannot hold.
                    Some((key, value)) if repeat_first => {
                        format!("{{{}: {value}, {}", Value::from(key.as_str()), &text[1..])
                    }
                    _ => text,
                }
            })
        }
    }

    /// The random patches exercise both sides: the property above is not vacuous.
    #[test]
    fn random_patches_take_both_paths() {
        use proptest::strategy::{Strategy, ValueTree};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = random::patch();
        let typed = (0..1_000)
            .filter(|_| {
                let body = strategy.new_tree(&mut runner).unwrap().current();
                TypedMergePatch::from_slice(body.as_bytes(), DEFAULT_MAX_NESTING_DEPTH).is_some()
            })
            .count();
        assert!((100..900).contains(&typed), "{typed} of 1,000 decoded from the bytes");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        #[test]
        fn a_random_patch_decoded_from_the_bytes_does_what_the_generic_path_does(body in random::patch()) {
            if TypedMergePatch::from_slice(body.as_bytes(), DEFAULT_MAX_NESTING_DEPTH).is_some() {
                for current in &objects() {
                    for v in [FieldValidation::Ignore, FieldValidation::Warn, FieldValidation::Strict] {
                        let fast = TypedMergePatch::from_slice(body.as_bytes(), DEFAULT_MAX_NESTING_DEPTH).unwrap();
                        let fast = outcome(Ok(PatchBody::typed(fast)), current, v);
                        let slow = outcome(generic(&body, DEFAULT_MAX_NESTING_DEPTH, v), current, v);
                        proptest::prop_assert_eq!(fast, slow, "{} with {:?}", body, v);
                    }
                }
            }
        }
    }

    #[test]
    fn what_needs_a_report_removes_a_field_or_does_not_decode_is_not_decoded_from_the_bytes() {
        let generic_only = [2, 3, 4, 5, 6, 7, 9, 10, 12, 13, 15, 17, 19, 20, 21, 22, 23, 25, 26, 28];
        for (index, member) in MEMBERS.iter().enumerate() {
            let body = format!("{{{member}}}");
            let typed = TypedMergePatch::from_slice(body.as_bytes(), DEFAULT_MAX_NESTING_DEPTH);
            assert_eq!(typed.is_none(), generic_only.contains(&index), "{body}");
        }
    }

    #[test]
    fn a_nesting_bound_below_the_shape_leaves_the_bound_to_the_generic_path() {
        let body = format!("{{{}}}", MEMBERS[0]);
        assert!(TypedMergePatch::from_slice(body.as_bytes(), 5).is_some());
        assert!(TypedMergePatch::from_slice(body.as_bytes(), 4).is_none());
        assert_eq!(generic(&body, 4, FieldValidation::Warn).err().map(|e| e.code().as_u16()), Some(400));
    }
}
