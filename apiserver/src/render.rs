//! Turning stored objects into response bodies: the object itself, `NodeResourceTopologyList`,
//! `meta.k8s.io` Tables for kubectl, and `PartialObjectMetadata(List)` for the garbage collector
//! (the last two in [`crate::table`]).
//!
//! Lists are assembled from each object's pre-serialized JSON, so a LIST costs a copy of bytes
//! rather than a serialization per object.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use numaresources_api::nrt::LIST_KIND;
use serde_json::{Value, json};

use crate::negotiate::Representation;
use crate::query::IncludeObject;
use crate::status::ApiError;
use crate::store::Stored;
use crate::table::{self, Columns};

use numaresources_api::nrt::API_VERSION;

/// `value` as JSON bytes (a response body, or a line of a watch).
pub(crate) fn json_bytes(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// A single object in the requested representation.
/// Fails, as a 500, when a replaced version cannot be rendered (see [`table::table`]).
pub fn object(stored: &Stored, representation: Representation, include: IncludeObject) -> Result<Bytes, ApiError> {
    match representation {
        Representation::Json => Ok(stored.json.clone()),
        Representation::Metadata(version) => table::partial_metadata(stored, version),
        Representation::Table(version) => table::table(&[stored], version, include, b"{}", Columns::Defined),
    }
}

/// The `metadata` of a list (`ListMeta`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListMeta {
    /// The revision the list reflects.
    pub revision: u64,
    /// The token for the next page, when there is one.
    pub continue_token: Option<String>,
    /// How many objects the next pages hold, when known.
    pub remaining_item_count: Option<usize>,
}

impl ListMeta {
    /// A complete list at `revision`.
    pub fn at(revision: u64) -> Self {
        Self { revision, ..Self::default() }
    }

    fn to_value(&self) -> Value {
        let mut metadata = json!({"resourceVersion": self.revision.to_string()});
        if let Some(token) = &self.continue_token {
            metadata["continue"] = json!(token);
        }
        if let Some(count) = self.remaining_item_count {
            metadata["remainingItemCount"] = json!(count);
        }
        metadata
    }

    fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_value()).unwrap_or_default()
    }
}

/// A list of objects in the requested representation.
/// Fails like [`object`].
pub fn list(
    items: &[Arc<Stored>],
    meta: &ListMeta,
    representation: Representation,
    include: IncludeObject,
) -> Result<Bytes, ApiError> {
    let items_ref = || items.iter().map(AsRef::as_ref).collect::<Vec<&Stored>>();
    match representation {
        Representation::Json => Ok(json_list(items, meta)),
        Representation::Metadata(version) => table::partial_metadata_list(&items_ref(), version, &meta.to_json()),
        Representation::Table(version) => {
            table::table(&items_ref(), version, include, &meta.to_json(), Columns::Defined)
        }
    }
}

fn json_list(items: &[Arc<Stored>], meta: &ListMeta) -> Bytes {
    let size: usize = items.iter().map(|s| s.json.len() + 1).sum();
    let mut out = BytesMut::with_capacity(size + 160);
    out.put_slice(b"{\"apiVersion\":\"");
    out.put_slice(API_VERSION.as_bytes());
    out.put_slice(b"\",\"kind\":\"");
    out.put_slice(LIST_KIND.as_bytes());
    out.put_slice(b"\",\"metadata\":");
    out.put_slice(&meta.to_json());
    out.put_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(&item.json);
    }
    out.put_slice(b"]}");
    out.freeze()
}
