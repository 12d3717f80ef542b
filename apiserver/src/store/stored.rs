//! One stored version of an object: its JSON, encoded once at write time, and the typed object
//! while it is current (a slim copy once the watch history keeps it as a replaced version).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use numaresources_api::nrt::NodeResourceTopology;

use super::StoreError;
use crate::row_parts::RowParts;

/// One stored version of an object with its pre-serialized JSON.
#[derive(Debug)]
pub struct Stored {
    /// The typed object, or only what selectors need of a replaced version.
    pub(super) content: Content,
    /// The object as JSON, computed once at write time (metadata complete: uid,
    /// resourceVersion, creationTimestamp, generation).
    pub json: Bytes,
    /// The resourceVersion of `object`, as a number.
    pub revision: u64,
    /// When a writer last reported this object, changed or not.
    pub last_report: Arc<AtomicU64>,
    /// A current version's Table row and metadata JSON, rendered by the first read that needs
    /// them (writes, which outnumber Table reads, do not pay for them).
    pub(super) row_parts: OnceLock<RowParts>,
}

#[derive(Debug)]
pub(super) enum Content {
    /// A current version (or one just written): the typed object (boxed, so a replaced version
    /// does not carry its size).
    Typed(Box<NodeResourceTopology>),
    /// A replaced version kept by the watch history: `json` holds the rest, and `row_parts`
    /// the Table and metadata parts when they were rendered before it was replaced.
    Replaced { name: String, labels: Option<BTreeMap<String, String>>, row_parts: Option<RowParts> },
}

impl Stored {
    /// The object's name.
    pub fn name(&self) -> &str {
        match &self.content {
            Content::Typed(object) => object.metadata.name.as_deref().unwrap_or_default(),
            Content::Replaced { name, .. } => name,
        }
    }

    /// The object's labels.
    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        match &self.content {
            Content::Typed(object) => object.metadata.labels.as_ref(),
            Content::Replaced { labels, .. } => labels.as_ref(),
        }
    }

    /// The typed object: borrowed for a current version, decoded from the JSON for a replaced
    /// one. A decoding failure (never expected: the bytes are our own serialization of this
    /// type) is an error for the caller to report, never an invented object.
    pub fn object(&self) -> Result<Cow<'_, NodeResourceTopology>, serde_json::Error> {
        match &self.content {
            Content::Typed(object) => Ok(Cow::Borrowed(object)),
            Content::Replaced { .. } => serde_json::from_slice(&self.json).map(Cow::Owned),
        }
    }

    /// This version as the history keeps it once replaced: the same JSON bytes, the name, the
    /// labels and the Table and metadata parts when they are rendered already, no typed object.
    /// `render` renders the parts first (for a deletion's last state, which metadata and Table
    /// watchers are sent as it is).
    pub(super) fn replaced(&self, render: bool) -> Self {
        let row_parts = match (&self.content, self.row_parts.get()) {
            (_, Some(parts)) => Some(parts.clone()),
            (Content::Typed(object), None) if render => Some(RowParts::of(object)),
            (Content::Replaced { row_parts, .. }, None) => row_parts.clone(),
            _ => None,
        };
        Self {
            content: Content::Replaced { name: self.name().to_owned(), labels: self.labels().cloned(), row_parts },
            json: self.json.clone(),
            revision: self.revision,
            last_report: self.last_report.clone(),
            row_parts: OnceLock::new(),
        }
    }

    /// Seconds since the Unix epoch of the last accepted report.
    pub fn last_report_unix(&self) -> u64 {
        self.last_report.load(Ordering::Relaxed)
    }

    /// The object's Table row and metadata JSON: rendered once for a current version; for a
    /// replaced one, the parts it kept or, failing those, parts rendered from its JSON (not
    /// kept, so what the history holds does not grow after the fact).
    pub fn row_parts(&self) -> Result<Cow<'_, RowParts>, serde_json::Error> {
        match &self.content {
            Content::Typed(object) => Ok(Cow::Borrowed(self.row_parts.get_or_init(|| RowParts::of(object)))),
            Content::Replaced { row_parts: Some(parts), .. } => Ok(Cow::Borrowed(parts)),
            Content::Replaced { row_parts: None, .. } => Ok(Cow::Owned(RowParts::of(&*self.object()?))),
        }
    }

    /// The object's `metadata` as JSON, keys sorted (what [`RowParts`] holds): a replaced
    /// version without parts reads it from its JSON, without decoding the whole object.
    pub fn metadata_json(&self) -> Result<Cow<'_, str>, serde_json::Error> {
        if let Content::Replaced { row_parts: None, .. } = &self.content {
            let mut value: serde_json::Value = serde_json::from_slice(&self.json)?;
            return match value.get_mut("metadata").map(serde_json::Value::take) {
                Some(metadata @ serde_json::Value::Object(_)) => Ok(Cow::Owned(metadata.to_string())),
                _ => Err(serde::de::Error::missing_field("metadata")),
            };
        }
        Ok(match self.row_parts()? {
            Cow::Borrowed(parts) => Cow::Borrowed(parts.metadata()),
            Cow::Owned(parts) => Cow::Owned(parts.metadata().to_owned()),
        })
    }

    /// What this version costs the history beside its JSON: the parts a replaced version
    /// keeps (fixed once it is replaced; a current version's parts are the map's cost).
    pub(super) fn kept_parts_size(&self) -> usize {
        match &self.content {
            Content::Replaced { row_parts: Some(parts), .. } => parts.size(),
            _ => 0,
        }
    }
}

pub(super) fn stored(
    object: NodeResourceTopology,
    revision: u64,
    last_report: Arc<AtomicU64>,
) -> Result<Stored, StoreError> {
    stored_sized(object, revision, last_report, INITIAL_ENCODING_BYTES)
}

/// Gives back the spare room of an object's lists. A list decoded straight from JSON text grows
/// by doubling from four elements, so it holds up to twice the room it uses (a list decoded
/// through a `serde_json::Value`, as requests are, has none): a follower, which decodes the
/// leader's stream from its text, held 11–13 % more memory than its leader for the same objects.
fn compact(object: &mut NodeResourceTopology) {
    fit(&mut object.topology_policies);
    fit(&mut object.attributes);
    fit(&mut object.zones);
    for zone in &mut object.zones {
        fit(&mut zone.costs);
        fit(&mut zone.attributes);
        fit(&mut zone.resources);
    }
    let meta = &mut object.metadata;
    meta.finalizers.as_mut().map(fit);
    meta.owner_references.as_mut().map(fit);
}

/// Moves a list with spare room into an allocation of its length. Not `shrink_to_fit`: that
/// shrinks in place, leaving a hole smaller than the next decoded list asks for after every
/// object (what the follower's memory measured); the room freed here is what the next decoded
/// list takes again.
fn fit<T>(list: &mut Vec<T>) {
    if list.capacity() > list.len() {
        let mut fitted = Vec::with_capacity(list.len());
        fitted.append(list);
        *list = fitted;
    }
}

/// What an encoding buffer starts with when nothing better is known (serde_json's own start).
const INITIAL_ENCODING_BYTES: usize = 128;
/// Room a new version's encoding gets beyond the size of the version it replaces: a write
/// changes a few numbers, a timestamp and the resourceVersion, rarely more.
pub(super) const ENCODING_SLACK_BYTES: usize = 256;

/// [`stored`], encoding into a buffer of `capacity` bytes to begin with: a new version is about
/// as large as the one it replaces, so sizing the buffer from it saves the serializer's
/// doublings (each a reallocation and a copy).
pub(super) fn stored_sized(
    object: NodeResourceTopology,
    revision: u64,
    last_report: Arc<AtomicU64>,
    capacity: usize,
) -> Result<Stored, StoreError> {
    let mut json = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut json, &object)?;
    // Versions live long (in the map, then in the history), so they keep only the bytes they
    // use.
    json.shrink_to_fit();
    let mut object = object;
    compact(&mut object);
    let json = Bytes::from(json);
    Ok(Stored { content: Content::Typed(Box::new(object)), json, revision, last_report, row_parts: OnceLock::new() })
}
