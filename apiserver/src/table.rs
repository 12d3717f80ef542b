//! `meta.k8s.io` Tables (what kubectl prints) and `PartialObjectMetadata`, assembled from parts
//! each stored object renders once and keeps ([`RowParts`], in `row_parts`). Only the two time columns depend on
//! when the request comes, so they are the only cells formatted per request.
//!
//! The output is what serializing a `serde_json::Value` gives (keys in sorted order), written
//! by hand so a LIST of thousands of rows costs copies of bytes, not a value tree per row.

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde_json::Value;

use crate::negotiate::MetaVersion;
use crate::query::IncludeObject;
use crate::row_parts::RowParts;
use crate::status::ApiError;
use crate::store::Stored;

/// Whether a Table carries its column definitions (a watch sends them with the first event only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Columns {
    /// With the definitions.
    Defined,
    /// With an empty list.
    Omitted,
}

/// A Table of `items`; `list_metadata` is the list's `metadata` JSON (`{}` for a single object).
/// Fails, as a 500, when a replaced version kept by the history cannot be rendered.
pub fn table(
    items: &[&Stored],
    version: MetaVersion,
    include: IncludeObject,
    list_metadata: &[u8],
    columns: Columns,
) -> Result<Bytes, ApiError> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let parts = items.iter().map(|s| s.row_parts()).collect::<Result<Vec<_>, _>>().map_err(undecodable)?;
    let per_row = parts.first().map_or(0, |p| p.leading_cells.len() * 2 + 64);
    let object_size: usize = match include {
        IncludeObject::None => 0,
        IncludeObject::Metadata => parts.iter().map(|p| p.metadata.len() + 80).sum(),
        IncludeObject::Object => items.iter().map(|s| s.json.len()).sum(),
    };
    let mut out =
        BytesMut::with_capacity(COLUMNS.len() + list_metadata.len() + items.len() * per_row + object_size + 128);
    out.put_slice(b"{\"apiVersion\":\"");
    out.put_slice(version.api_version().as_bytes());
    out.put_slice(b"\",\"columnDefinitions\":");
    out.put_slice(if columns == Columns::Defined { &COLUMNS } else { b"[]" });
    out.put_slice(b",\"kind\":\"Table\",\"metadata\":");
    out.put_slice(list_metadata);
    out.put_slice(b",\"rows\":[");
    for (i, (stored, parts)) in items.iter().zip(&parts).enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        row(&mut out, stored, parts, version, include, now)?;
    }
    out.put_slice(b"]}");
    Ok(out.freeze())
}

fn row(
    out: &mut BytesMut,
    stored: &Stored,
    parts: &RowParts,
    version: MetaVersion,
    include: IncludeObject,
    now: u64,
) -> Result<(), ApiError> {
    out.put_slice(b"{\"cells\":[");
    out.put_slice(parts.leading_cells.as_bytes());
    // Ages are digits and a unit, or `<unknown>`: nothing to escape.
    for age in [human_age(Some(stored.last_report_unix()), now), human_age(parts.created, now)] {
        out.put_slice(b",\"");
        out.put_slice(age.as_bytes());
        out.put_u8(b'"');
    }
    out.put_u8(b',');
    out.put_slice(parts.trailing_cells.as_bytes());
    out.put_u8(b']');
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            out.put_slice(b",\"object\":");
            put_partial_metadata(out, &parts.metadata, version);
        }
        IncludeObject::Object => {
            // Rarely asked for: re-encoded through a value so its keys are sorted like the rest.
            let object: Value = serde_json::from_slice(&stored.json).map_err(undecodable)?;
            out.put_slice(b",\"object\":");
            out.put_slice(object.to_string().as_bytes());
        }
    }
    out.put_u8(b'}');
    Ok(())
}

/// `PartialObjectMetadata` of one object.
pub(crate) fn partial_metadata(stored: &Stored, version: MetaVersion) -> Result<Bytes, ApiError> {
    let metadata = stored.metadata_json().map_err(undecodable)?;
    let mut out = BytesMut::with_capacity(metadata.len() + 80);
    put_partial_metadata(&mut out, &metadata, version);
    Ok(out.freeze())
}

/// `PartialObjectMetadataList` of `items`; `list_metadata` is the list's `metadata` JSON.
pub(crate) fn partial_metadata_list(
    items: &[&Stored],
    version: MetaVersion,
    list_metadata: &[u8],
) -> Result<Bytes, ApiError> {
    let metadata = items.iter().map(|s| s.metadata_json()).collect::<Result<Vec<_>, _>>().map_err(undecodable)?;
    let size: usize = metadata.iter().map(|m| m.len() + 80).sum();
    let mut out = BytesMut::with_capacity(size + list_metadata.len() + 128);
    out.put_slice(b"{\"apiVersion\":\"");
    out.put_slice(version.api_version().as_bytes());
    out.put_slice(b"\",\"items\":[");
    for (i, metadata) in metadata.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        put_partial_metadata(&mut out, metadata, version);
    }
    out.put_slice(b"],\"kind\":\"PartialObjectMetadataList\",\"metadata\":");
    out.put_slice(list_metadata);
    out.put_u8(b'}');
    Ok(out.freeze())
}

fn put_partial_metadata(out: &mut BytesMut, metadata: &str, version: MetaVersion) {
    out.put_slice(b"{\"apiVersion\":\"");
    out.put_slice(version.api_version().as_bytes());
    out.put_slice(b"\",\"kind\":\"PartialObjectMetadata\",\"metadata\":");
    out.put_slice(metadata.as_bytes());
    out.put_u8(b'}');
}

/// A stored version that does not decode (never expected: the bytes are our own serialization).
fn undecodable(error: serde_json::Error) -> ApiError {
    ApiError::internal("a stored version of the object does not decode", &error)
}

/// The column definitions, as JSON: columns a person wants to see for NUMA-aware scheduling.
static COLUMNS: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let column = |name: &str, kind: &str, format: &str, description: &str, priority: u8| ColumnDefinition {
        description: description.to_owned(),
        format: format.to_owned(),
        name: name.to_owned(),
        priority,
        kind: kind.to_owned(),
    };
    let columns = [
        column("Name", "string", "name", "Name of the node", 0),
        column("Zones", "integer", "", "NUMA zones reported", 0),
        column("Policy", "string", "", "Kubelet topology manager policy", 0),
        column("CPU Available", "string", "", "Available/allocatable CPUs per NUMA zone", 0),
        column("Reported", "string", "", "Time since the node's exporter last reported", 0),
        column("Age", "string", "", "Time since the object was created", 0),
        column("Scope", "string", "", "Kubelet topology manager scope", 1),
        column("Memory Available", "string", "", "Available memory per NUMA zone", 1),
        column("Fingerprint", "string", "", "Pods fingerprint", 1),
    ];
    serde_json::to_vec(&columns).unwrap_or_default()
});

/// A `TableColumnDefinition`, fields in sorted order like the rest of the Table.
#[derive(Serialize)]
struct ColumnDefinition {
    description: String,
    format: String,
    name: String,
    priority: u8,
    #[serde(rename = "type")]
    kind: String,
}

/// kubectl's short ages (`45s`, `5m`, `3h`, `2d`) from `then` to `now`; `<unknown>` without a time.
pub(crate) fn human_age(then: Option<u64>, now: u64) -> String {
    match then.filter(|t| *t > 0) {
        Some(then) => numaresources_api::duration::kubectl_age(now.saturating_sub(then)),
        None => "<unknown>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use numaresources_api::nrt::{AttributeInfo, Zone};
    use numaresources_api::nrt::{NodeResourceTopology, ResourceInfo};
    use numaresources_api::quantity::Quantity;
    use serde_json::json;

    use super::*;
    use crate::store::{Preconditions, Store};

    fn two_zones(name: &str, cpus: [i64; 2]) -> NodeResourceTopology {
        let mut object = NodeResourceTopology::new(name);
        let zone = |id: usize| Zone {
            name: format!("node-{id}").into(),
            zone_type: "Node".into(),
            resources: vec![
                ResourceInfo {
                    name: "cpu".into(),
                    capacity: Quantity::from_i64(8),
                    allocatable: Quantity::from_i64(8),
                    available: Quantity::from_i64(cpus[id]),
                },
                ResourceInfo {
                    name: "memory".into(),
                    capacity: Quantity::from_i64(4 << 30),
                    allocatable: Quantity::from_i64(4 << 30),
                    available: Quantity::from_i64(3 << 30),
                },
            ],
            ..Zone::default()
        };
        object.zones = vec![zone(0), zone(1)];
        object.attributes = vec![AttributeInfo::new("topologyManagerPolicy", "single-numa-node")];
        object
    }

    fn render(stored: &Stored, include: IncludeObject, columns: Columns) -> Value {
        serde_json::from_slice(&table(&[stored], MetaVersion::V1, include, b"{}", columns).unwrap()).unwrap()
    }

    #[test]
    fn rows_show_every_cell_and_follow_writes() {
        let store = Store::starting_at(0, 10);
        let created = store.create(two_zones("worker-0", [2, 8]), false).unwrap();
        let table = render(&created, IncludeObject::Metadata, Columns::Defined);
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["columnDefinitions"].as_array().unwrap().len(), 9);
        let cells = table["rows"][0]["cells"].as_array().unwrap();
        let fixed: Vec<&Value> =
            cells.iter().enumerate().filter(|(i, _)| ![4, 5].contains(i)).map(|(_, c)| c).collect();
        let want = json!(["worker-0", 2, "single-numa-node", "2/8 8/8", "<unknown>", "3Gi 3Gi", "<none>"]);
        assert_eq!(Value::from(fixed.into_iter().cloned().collect::<Vec<_>>()), want);
        for age in [&cells[4], &cells[5]] {
            assert!(age.as_str().unwrap().ends_with('s'), "{age}");
        }
        let object = &table["rows"][0]["object"];
        assert_eq!(object["kind"], "PartialObjectMetadata");
        assert_eq!(object["metadata"], serde_json::to_value(&created.object().unwrap().metadata).unwrap());

        // A write stores a new object, so the next Table renders the new values.
        let (updated, _) = store.update(two_zones("worker-0", [5, 8]), &Preconditions::default(), false).unwrap();
        let table = render(&updated, IncludeObject::Object, Columns::Omitted);
        assert_eq!(table["rows"][0]["cells"][3], "5/8 8/8");
        assert_eq!(table["columnDefinitions"], json!([]));
        assert_eq!(table["rows"][0]["object"], serde_json::from_slice::<Value>(&updated.json).unwrap());
        assert!(render(&updated, IncludeObject::None, Columns::Defined)["rows"][0].get("object").is_none());
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_age(Some(100), 145), "45s");
        assert_eq!(human_age(Some(0), 145), "<unknown>");
        assert_eq!(human_age(Some(100), 100 + 300), "5m");
        assert_eq!(human_age(Some(100), 100 + 3 * 3600), "3h");
        assert_eq!(human_age(Some(100), 100 + 3 * 86_400), "3d");
    }
}
