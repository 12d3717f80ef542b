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

/// The OpenAPI documents exist as JSON only: Ok when `accept` takes JSON (or is absent), else
/// 406, as kube-apiserver answers a media type it does not serve. Answering JSON to a client
/// that asked only for the protobuf form would have it decode JSON as protobuf.
pub fn openapi_json(accept: Option<&str>) -> Result<(), ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(());
    };
    if media_ranges(accept).any(|(media, params)| is_json(&media) && params.as_.is_none()) {
        Ok(())
    } else {
        Err(ApiError::not_acceptable_of(accept, &["application/json"]))
    }
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
    fn openapi_documents_are_json_or_406() {
        let json = [None, Some(""), Some("application/json"), Some("*/*"), Some("application/*;q=0.5, text/html")];
        for accept in json {
            assert!(openapi_json(accept).is_ok(), "{accept:?}");
        }
        let protobuf = [
            "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            "application/json;q=0, application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        ];
        for accept in protobuf {
            let error = openapi_json(Some(accept)).unwrap_err();
            assert_eq!(error.code(), http::StatusCode::NOT_ACCEPTABLE, "{accept}");
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
