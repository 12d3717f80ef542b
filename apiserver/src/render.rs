//! Turning stored objects into response bodies: the object itself, `NodeResourceTopologyList`,
//! `meta.k8s.io` Tables for kubectl, and `PartialObjectMetadata(List)` for the garbage collector.
//!
//! Lists are assembled from each object's pre-serialized JSON, so a LIST costs a copy of bytes
//! rather than a serialization per object.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use numaresources_api::nrt::{LIST_KIND, NodeResourceTopology, well_known};
use serde_json::{Value, json};

use crate::negotiate::{MetaVersion, Representation};
use crate::query::IncludeObject;
use crate::store::Stored;

const API_VERSION: &str = "topology.node.k8s.io/v1alpha2";

/// A single object in the requested representation.
pub fn object(stored: &Stored, representation: Representation, include: IncludeObject) -> Bytes {
    match representation {
        Representation::Json => stored.json.clone(),
        Representation::Metadata(version) => to_bytes(&partial_metadata(&stored.object, version)),
        Representation::Table(version) => to_bytes(&table(&[stored], version, include, None)),
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
}

/// A list of objects in the requested representation.
pub fn list(items: &[Arc<Stored>], meta: &ListMeta, representation: Representation, include: IncludeObject) -> Bytes {
    match representation {
        Representation::Json => json_list(items, meta),
        Representation::Metadata(version) => {
            let items: Vec<Value> = items.iter().map(|s| partial_metadata(&s.object, version)).collect();
            to_bytes(&json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": version.api_version(),
                "metadata": meta.to_value(),
                "items": items,
            }))
        }
        Representation::Table(version) => {
            let items: Vec<&Stored> = items.iter().map(AsRef::as_ref).collect();
            to_bytes(&table(&items, version, include, Some(meta)))
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
    out.put_slice(&to_bytes(&meta.to_value()));
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

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(object: &NodeResourceTopology, version: MetaVersion) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": version.api_version(),
        "metadata": object.metadata,
    })
}

/// The Table kubectl prints: columns a person wants to see for NUMA-aware scheduling.
pub fn table(items: &[&Stored], version: MetaVersion, include: IncludeObject, meta: Option<&ListMeta>) -> Value {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let rows: Vec<Value> = items
        .iter()
        .map(|stored| {
            let nrt = &stored.object;
            let mut row = json!({"cells": cells(stored, now)});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(nrt, version),
                IncludeObject::Object => {
                    row["object"] = serde_json::from_slice(&stored.json).unwrap_or(Value::Null);
                }
            }
            row
        })
        .collect();
    let metadata = meta.map_or_else(|| json!({}), ListMeta::to_value);
    json!({
        "kind": "Table",
        "apiVersion": version.api_version(),
        "metadata": metadata,
        "columnDefinitions": columns(),
        "rows": rows,
    })
}

fn columns() -> Value {
    json!([
        {"name": "Name", "type": "string", "format": "name", "description": "Name of the node", "priority": 0},
        {"name": "Zones", "type": "integer", "format": "", "description": "NUMA zones reported", "priority": 0},
        {"name": "Policy", "type": "string", "format": "", "description": "Kubelet topology manager policy", "priority": 0},
        {"name": "CPU Available", "type": "string", "format": "", "description": "Available/allocatable CPUs per NUMA zone", "priority": 0},
        {"name": "Reported", "type": "string", "format": "", "description": "Time since the node's exporter last reported", "priority": 0},
        {"name": "Age", "type": "string", "format": "", "description": "Time since the object was created", "priority": 0},
        {"name": "Scope", "type": "string", "format": "", "description": "Kubelet topology manager scope", "priority": 1},
        {"name": "Memory Available", "type": "string", "format": "", "description": "Available memory per NUMA zone", "priority": 1},
        {"name": "Fingerprint", "type": "string", "format": "", "description": "Pods fingerprint", "priority": 1},
    ])
}

fn cells(stored: &Stored, now: u64) -> Value {
    let nrt = &stored.object;
    let numa_zones: Vec<_> = nrt.zones.iter().filter(|z| z.zone_type == well_known::ZONE_TYPE_NODE).collect();
    let per_zone = |resource: &str, show: &dyn Fn(&numaresources_api::nrt::ResourceInfo) -> String| -> String {
        let parts: Vec<String> = numa_zones
            .iter()
            .map(|zone| zone.resources.iter().find(|r| r.name == resource).map_or_else(|| "-".to_owned(), show))
            .collect();
        if parts.is_empty() { "<none>".to_owned() } else { parts.join(" ") }
    };
    let cpus = per_zone("cpu", &|r| format!("{}/{}", r.available, r.allocatable));
    let memory = per_zone("memory", &|r| human_bytes(r.available.as_i64()));
    let created = nrt.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()).and_then(|s| u64::try_from(s).ok());
    json!([
        nrt.metadata.name.as_deref().unwrap_or_default(),
        numa_zones.len(),
        nrt.attribute(well_known::ATTR_TOPOLOGY_MANAGER_POLICY).unwrap_or("<unknown>"),
        cpus,
        human_age(Some(stored.last_report_unix()), now),
        human_age(created, now),
        nrt.attribute(well_known::ATTR_TOPOLOGY_MANAGER_SCOPE).unwrap_or("<unknown>"),
        memory,
        nrt.attribute(well_known::ATTR_PODS_FINGERPRINT).unwrap_or("<none>"),
    ])
}

/// kubectl's short ages: `45s`, `5m`, `3h`, `2d`.
pub fn human_age(then: Option<u64>, now: u64) -> String {
    let Some(then) = then.filter(|t| *t > 0) else {
        return "<unknown>".to_owned();
    };
    let seconds = now.saturating_sub(then);
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7_200 => format!("{}m", seconds / 60),
        7_200..172_800 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

fn human_bytes(bytes: Option<i64>) -> String {
    let Some(bytes) = bytes else {
        return "?".to_owned();
    };
    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;
    if bytes >= GI { format!("{}Gi", bytes / GI) } else { format!("{}Mi", bytes / MI) }
}

fn to_bytes(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_age(Some(100), 145), "45s");
        assert_eq!(human_age(Some(0), 145), "<unknown>");
        assert_eq!(human_age(Some(100), 100 + 300), "5m");
        assert_eq!(human_age(Some(100), 100 + 3 * 3600), "3h");
        assert_eq!(human_age(Some(100), 100 + 3 * 86_400), "3d");
    }
}
