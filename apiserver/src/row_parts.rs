//! The parts of an object's Table row and metadata that each stored object renders once and
//! keeps (the store holds them; `table` assembles rows from them).

use numaresources_api::nrt::{NodeResourceTopology, ResourceInfo, well_known};
use serde_json::{Value, json};

/// The parts of an object's Table row and metadata that do not change until the object does.
#[derive(Debug, Clone)]
pub struct RowParts {
    /// The JSON of the cells before the time columns, comma-separated, without brackets.
    pub(crate) leading_cells: String,
    /// The JSON of the cells after the time columns.
    pub(crate) trailing_cells: String,
    /// Seconds since the Unix epoch of `creationTimestamp`.
    pub(crate) created: Option<u64>,
    /// `metadata` as JSON, keys sorted.
    pub(crate) metadata: String,
}

impl RowParts {
    /// Renders the parts of `object`.
    pub fn of(object: &NodeResourceTopology) -> Self {
        let numa_zones: Vec<_> = object.zones.iter().filter(|z| z.zone_type == well_known::ZONE_TYPE_NODE).collect();
        let per_zone = |resource: &str, show: &dyn Fn(&ResourceInfo) -> String| -> String {
            let parts: Vec<String> = numa_zones
                .iter()
                .map(|zone| zone.resources.iter().find(|r| r.name == resource).map_or_else(|| "-".to_owned(), show))
                .collect();
            if parts.is_empty() { "<none>".to_owned() } else { parts.join(" ") }
        };
        let cpus = per_zone("cpu", &|r| format!("{}/{}", r.available, r.allocatable));
        let memory = per_zone("memory", &|r| human_bytes(r.available.as_i64()));
        let attribute = |name: &str, missing: &'static str| object.attribute(name).unwrap_or(missing).to_owned();
        let leading = [
            json!(object.metadata.name.as_deref().unwrap_or_default()),
            json!(numa_zones.len()),
            json!(attribute(well_known::ATTR_TOPOLOGY_MANAGER_POLICY, "<unknown>")),
            json!(cpus),
        ];
        let trailing = [
            json!(attribute(well_known::ATTR_TOPOLOGY_MANAGER_SCOPE, "<unknown>")),
            json!(memory),
            json!(attribute(well_known::ATTR_PODS_FINGERPRINT, "<none>")),
        ];
        let metadata = serde_json::to_value(&object.metadata).unwrap_or(Value::Null);
        Self {
            leading_cells: comma_separated(&leading),
            trailing_cells: comma_separated(&trailing),
            created: object.metadata.creation_timestamp.as_ref().and_then(|t| u64::try_from(t.0.as_second()).ok()),
            metadata: metadata.to_string(),
        }
    }
}

impl RowParts {
    /// `metadata` as JSON, keys sorted.
    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    /// The bytes the parts hold.
    pub fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.leading_cells.len() + self.trailing_cells.len() + self.metadata.len()
    }
}

fn comma_separated(values: &[Value]) -> String {
    values.iter().map(Value::to_string).collect::<Vec<_>>().join(",")
}

fn human_bytes(bytes: Option<i64>) -> String {
    let Some(bytes) = bytes else {
        return "?".to_owned();
    };
    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;
    if bytes >= GI { format!("{}Gi", bytes / GI) } else { format!("{}Mi", bytes / MI) }
}
