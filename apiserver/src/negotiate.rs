//! Content negotiation: which representation of our objects a request's `Accept` asks for.
//!
//! kubectl asks for a `meta.k8s.io` Table first, the garbage collector's metadata client for
//! `PartialObjectMetadata(List)`, and clients configured for protobuf or CBOR still offer JSON
//! as a fallback. NRT has no protobuf form, so we answer JSON whenever JSON is acceptable and
//! 406 only when nothing we can produce is.

use crate::status::ApiError;

/// What to send back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The objects themselves.
    Json,
    /// A `meta.k8s.io` Table of the given version (`v1` or `v1beta1`).
    Table(MetaVersion),
    /// Metadata only: `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata(MetaVersion),
}

/// The `meta.k8s.io` version a Table or metadata answer is labelled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaVersion {
    /// `meta.k8s.io/v1`.
    V1,
    /// `meta.k8s.io/v1beta1` (older kubectl's second choice).
    V1beta1,
}

impl MetaVersion {
    /// The apiVersion string.
    pub fn api_version(&self) -> &'static str {
        match self {
            Self::V1 => "meta.k8s.io/v1",
            Self::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// Picks the first representation in `accept` (in the client's order) that we can produce.
/// No header means JSON.
pub fn negotiate(accept: Option<&str>) -> Result<Representation, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Representation::Json);
    };
    let mut ranges: Vec<(f32, usize, Representation)> = Vec::new();
    for (position, (media, params)) in media_ranges(accept).enumerate() {
        if !is_json(&media) {
            continue; // protobuf, CBOR, YAML: not produced here; the client offers JSON too.
        }
        if let Some(representation) = params.representation() {
            ranges.push((params.quality, position, representation));
        }
    }
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranges.first().map(|r| r.2).ok_or_else(|| ApiError::not_acceptable(accept))
}

/// The forms an OpenAPI document is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenApiForm {
    /// `application/json`.
    Json,
    /// gnostic's protobuf (`/openapi/v2` only; see [`OPENAPI_V2_PROTOBUF`]).
    Protobuf,
}

/// The protobuf form of `/openapi/v2` as kube-apiserver labels it. Clients also ask for it
/// under the name with `@` ([`OPENAPI_V2_PROTOBUF_AT`]), but Go's `mime.ParseMediaType`, which
/// client-go runs on the answer's Content-Type, refuses that one.
pub const OPENAPI_V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The name client-go's `OpenAPISchema()` asks for the protobuf form by.
const OPENAPI_V2_PROTOBUF_AT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// Which form of an OpenAPI document `accept` asks for, as kube-apiserver picks it: the
/// client's most preferred range that names a form we serve, JSON for wildcards; `protobuf` says
/// whether this document has a protobuf form (v2 does, our v3 does not). Nothing we serve is a
/// 406, never JSON labelled as something else: a client that asked only for protobuf would
/// decode JSON as protobuf.
pub fn openapi_form(accept: Option<&str>, protobuf: bool) -> Result<OpenApiForm, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(OpenApiForm::Json);
    };
    let mut ranges: Vec<(usize, (String, MediaParams))> = media_ranges(accept).enumerate().collect();
    ranges.sort_by(|(a_at, a), (b_at, b)| b.1.quality.total_cmp(&a.1.quality).then(a_at.cmp(b_at)));
    let found = ranges.into_iter().find_map(|(_, (media, params))| match media.as_str() {
        _ if params.as_.is_some() => None,
        OPENAPI_V2_PROTOBUF | OPENAPI_V2_PROTOBUF_AT if protobuf => Some(OpenApiForm::Protobuf),
        media if is_json(media) => Some(OpenApiForm::Json),
        _ => None,
    });
    let mut offered = vec!["application/json"];
    if protobuf {
        offered.push(OPENAPI_V2_PROTOBUF);
    }
    found.ok_or_else(|| ApiError::not_acceptable_of(accept, &offered))
}

/// The media ranges of an `Accept` header with their parameters, in the client's order, without
/// the ones it refuses (`q=0`).
fn media_ranges(accept: &str) -> impl Iterator<Item = (String, MediaParams)> + '_ {
    accept.split(',').filter_map(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut params = MediaParams::default();
        for param in parts {
            if let Some((key, value)) = param.split_once('=') {
                let value = value.trim().trim_matches('"');
                match key.trim() {
                    "as" => params.as_ = Some(value.to_owned()),
                    "g" => params.group = Some(value.to_owned()),
                    "v" => params.version = Some(value.to_owned()),
                    "q" => params.quality = value.parse().unwrap_or(1.0),
                    _ => {}
                }
            }
        }
        (params.quality > 0.0).then_some((media, params))
    })
}

fn is_json(media: &str) -> bool {
    matches!(media, "application/json" | "application/*" | "*/*")
}

#[derive(Debug)]
struct MediaParams {
    as_: Option<String>,
    group: Option<String>,
    version: Option<String>,
    quality: f32,
}

impl Default for MediaParams {
    fn default() -> Self {
        Self { as_: None, group: None, version: None, quality: 1.0 }
    }
}

impl MediaParams {
    fn representation(&self) -> Option<Representation> {
        let Some(as_) = self.as_.as_deref() else {
            return Some(Representation::Json);
        };
        if self.group.as_deref() != Some("meta.k8s.io") {
            return None;
        }
        let version = match self.version.as_deref() {
            Some("v1") => MetaVersion::V1,
            Some("v1beta1") => MetaVersion::V1beta1,
            _ => return None,
        };
        match as_ {
            "Table" => Some(Representation::Table(version)),
            "PartialObjectMetadata" | "PartialObjectMetadataList" => Some(Representation::Metadata(version)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_gets_what_it_asks_for() {
        let rows: [(Option<&str>, Representation); 8] = [
            (None, Representation::Json),
            (Some("application/json"), Representation::Json),
            (
                Some(
                    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
                ),
                Representation::Table(MetaVersion::V1),
            ),
            (Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io"), Representation::Table(MetaVersion::V1beta1)),
            (
                Some(
                    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
                ),
                Representation::Metadata(MetaVersion::V1),
            ),
            (Some("application/vnd.kubernetes.protobuf, */*"), Representation::Json),
            (Some("application/cbor, application/json"), Representation::Json),
            (
                Some("application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io"),
                Representation::Table(MetaVersion::V1),
            ),
        ];
        for (accept, want) in rows {
            assert_eq!(negotiate(accept).unwrap(), want, "{accept:?}");
        }
    }

    #[test]
    fn openapi_documents_are_json_protobuf_for_v2_or_406() {
        let v2_protobuf = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
        let v3_protobuf = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf";
        let rows: [(Option<&str>, bool, Option<OpenApiForm>); 11] = [
            (None, true, Some(OpenApiForm::Json)),
            (Some(""), false, Some(OpenApiForm::Json)),
            (Some("application/json"), true, Some(OpenApiForm::Json)),
            (Some("*/*"), true, Some(OpenApiForm::Json)),
            (Some("application/*;q=0.5, text/html"), false, Some(OpenApiForm::Json)),
            // What client-go's OpenAPISchema() sends.
            (Some(v2_protobuf), true, Some(OpenApiForm::Protobuf)),
            (Some("application/com.github.proto-openapi.spec.v2.v1.0+protobuf"), true, Some(OpenApiForm::Protobuf)),
            (
                Some("application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
                true,
                Some(OpenApiForm::Protobuf),
            ),
            (Some(v3_protobuf), false, None),
            (Some("application/json;q=0, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"), false, None),
            (Some("application/json;as=Table;v=v1;g=meta.k8s.io"), true, None),
        ];
        for (accept, protobuf, want) in rows {
            match (openapi_form(accept, protobuf), want) {
                (Ok(got), Some(want)) => assert_eq!(got, want, "{accept:?}"),
                (Err(error), None) => assert_eq!(error.code(), http::StatusCode::NOT_ACCEPTABLE, "{accept:?}"),
                (got, want) => panic!("{accept:?} (protobuf {protobuf}): {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn nothing_we_can_produce_is_406() {
        for accept in
            ["application/vnd.kubernetes.protobuf", "application/json;as=Table;v=v2;g=meta.k8s.io", "text/html"]
        {
            let error = negotiate(Some(accept)).unwrap_err();
            assert_eq!(error.code(), http::StatusCode::NOT_ACCEPTABLE, "{accept}");
        }
    }
}
