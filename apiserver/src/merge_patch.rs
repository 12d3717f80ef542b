//! JSON merge patches (RFC 7386) in the shape exporters send, applied to the typed object.
//!
//! The generic path turns the current object into a JSON value, merges, checks and decodes the
//! result: most of the cost of an exporter's update. A patch that only replaces `zones`,
//! `attributes` or `topologyPolicies` (arrays: a merge patch replaces them whole) and sets or
//! removes labels and annotations gives the same object when each of those parts is decoded on
//! its own and put in place, so that is what [`TypedMergePatch`] does, ahead of the store's write
//! lock. Any other shape, or a part that does not decode, takes the generic path, which also
//! words the errors.
//!
//! Such a patch is first decoded straight from the body's bytes ([`TypedMergePatch::from_slice`]),
//! without building a JSON value, checking repeated keys or walking for unknown fields: that
//! decoding accepts only what needs none of those (every field known, no key given twice, no
//! `null` but a label's or annotation's), so anything else is parsed again the generic way, which
//! reports repeated keys and unknown fields as before.

use std::collections::BTreeMap;

use std::fmt;

use numaresources_api::nrt::{
    AttributeInfo, CompactString, CostInfo, NodeResourceTopology, Quantity, ResourceInfo, Zone,
};
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

/// How deep the exporters' shape nests (`{"zones": [{"resources": [{…}]}]}`): with a nesting
/// bound below this, patches take the generic path, which enforces the bound.
const TYPED_SHAPE_DEPTH: usize = 5;

/// Bodies larger than this are not decoded straight from the bytes: they are parsed off the
/// async workers (see [`crate::body::parse_off_the_runtime`]), and exporters' patches are far
/// smaller.
const MAX_TYPED_BODY_BYTES: usize = crate::body::INLINE_PARSE_BYTES;

/// A merge patch decoded into the parts it replaces.
#[derive(Debug, Default)]
pub struct TypedMergePatch {
    topology_policies: Option<Vec<String>>,
    zones: Option<Vec<Zone>>,
    attributes: Option<Vec<AttributeInfo>>,
    labels: MapPatch,
    annotations: MapPatch,
}

/// What a merge patch does to a string map of the metadata.
#[derive(Debug, Default)]
enum MapPatch {
    /// Leaves it alone.
    #[default]
    Keep,
    /// Removes it (`null`).
    Remove,
    /// Sets (`Some`) or removes (`None`) single keys.
    Merge(Vec<(String, Option<String>)>),
}

impl TypedMergePatch {
    /// The typed form of the merge patch in `body`, decoded without a JSON value, or `None` when
    /// the body is not plainly that shape (see the module's documentation), or the nesting bound
    /// `max_depth` is below it: the generic path then parses it, reports what it must and words
    /// the errors.
    pub fn from_slice(body: &[u8], max_depth: usize) -> Option<Self> {
        // serde also reads a struct from an array; a merge patch must be an object.
        let is_object = body.iter().find(|byte| !byte.is_ascii_whitespace()) == Some(&b'{');
        if max_depth < TYPED_SHAPE_DEPTH || body.len() > MAX_TYPED_BODY_BYTES || !is_object {
            return None;
        }
        // Checked as UTF-8 once, whole: read from bytes, serde_json checks every string on its
        // own (a hundred calls per exporter patch, ≈5% of the patch's instructions).
        let wire: WirePatch = serde_json::from_str(std::str::from_utf8(body).ok()?).ok()?;
        let metadata = wire.metadata.unwrap_or_default();
        Some(Self {
            topology_policies: wire.topology_policies,
            zones: wire.zones.map(|zones| zones.into_iter().map(Zone::from).collect()),
            attributes: wire.attributes.map(|attributes| attributes.into_iter().map(AttributeInfo::from).collect()),
            labels: metadata.labels,
            annotations: metadata.annotations,
        })
    }

    /// The typed form of `patch`, or `None` when it has another shape or a part does not
    /// decode (the generic path then applies it).
    pub fn decode(patch: &Value) -> Option<Self> {
        let mut typed = Self::default();
        for (key, value) in patch.as_object()? {
            match key.as_str() {
                "topologyPolicies" => typed.topology_policies = Some(array_of(value)?),
                "zones" => typed.zones = Some(array_of(value)?),
                "attributes" => typed.attributes = Some(array_of(value)?),
                "metadata" => {
                    for (field, value) in value.as_object()? {
                        match field.as_str() {
                            "labels" => typed.labels = MapPatch::decode(value)?,
                            "annotations" => typed.annotations = MapPatch::decode(value)?,
                            _ => return None,
                        }
                    }
                }
                _ => return None,
            }
        }
        Some(typed)
    }

    /// `current` with the patch applied.
    pub fn apply(self, current: &NodeResourceTopology) -> NodeResourceTopology {
        let mut metadata = current.metadata.clone();
        self.labels.apply(&mut metadata.labels);
        self.annotations.apply(&mut metadata.annotations);
        NodeResourceTopology {
            metadata,
            topology_policies: self.topology_policies.unwrap_or_else(|| current.topology_policies.clone()),
            zones: self.zones.unwrap_or_else(|| current.zones.clone()),
            attributes: self.attributes.unwrap_or_else(|| current.attributes.clone()),
        }
    }
}

/// An array replaces the field whole; `null` (which removes it) and anything else go the generic
/// way.
fn array_of<T: for<'de> Deserialize<'de>>(value: &Value) -> Option<Vec<T>> {
    if !value.is_array() {
        return None;
    }
    Vec::<T>::deserialize(value).ok()
}

impl MapPatch {
    fn decode(value: &Value) -> Option<Self> {
        let entries: &Map<String, Value> = match value {
            Value::Null => return Some(Self::Remove),
            Value::Object(entries) => entries,
            _ => return None,
        };
        let changes = entries
            .iter()
            .map(|(key, value)| match value {
                Value::Null => Some((key.clone(), None)),
                Value::String(text) => Some((key.clone(), Some(text.clone()))),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self::Merge(changes))
    }

    /// As RFC 7386 merges into a JSON object: a map that was absent becomes present (possibly
    /// empty) as soon as the patch names it.
    fn apply(self, map: &mut Option<BTreeMap<String, String>>) {
        match self {
            Self::Keep => {}
            Self::Remove => *map = None,
            Self::Merge(changes) => {
                let map = map.get_or_insert_default();
                for (key, value) in changes {
                    match value {
                        Some(value) => map.insert(key, value),
                        None => map.remove(&key),
                    };
                }
            }
        }
    }
}

/// The exporters' shape as it may be decoded straight from the bytes: every field known
/// (`deny_unknown_fields`), none given twice (serde refuses a repeated field), no `null` (the
/// fields are plain types), so that nothing here needs a report. Anything else fails to decode.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WirePatch {
    #[serde(default, deserialize_with = "present")]
    topology_policies: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    zones: Option<Vec<WireZone>>,
    #[serde(default, deserialize_with = "present")]
    attributes: Option<Vec<WireAttribute>>,
    #[serde(default, deserialize_with = "present")]
    metadata: Option<WireMetadata>,
}

/// A field that, when given, is not `null` (a `null` removes the field: the generic path's
/// business).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMetadata {
    #[serde(default)]
    labels: MapPatch,
    #[serde(default)]
    annotations: MapPatch,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireZone {
    name: CompactString,
    #[serde(rename = "type")]
    zone_type: CompactString,
    #[serde(default)]
    parent: CompactString,
    #[serde(default)]
    costs: Vec<WireCost>,
    #[serde(default)]
    attributes: Vec<WireAttribute>,
    #[serde(default)]
    resources: Vec<WireResource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireResource {
    name: CompactString,
    capacity: Quantity,
    allocatable: Quantity,
    available: Quantity,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireCost {
    name: CompactString,
    value: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireAttribute {
    name: CompactString,
    value: CompactString,
}

impl From<WireZone> for Zone {
    fn from(zone: WireZone) -> Self {
        Self {
            name: zone.name,
            zone_type: zone.zone_type,
            parent: zone.parent,
            costs: zone.costs.into_iter().map(|c| CostInfo { name: c.name, value: c.value }).collect(),
            attributes: zone.attributes.into_iter().map(AttributeInfo::from).collect(),
            resources: zone
                .resources
                .into_iter()
                .map(|r| ResourceInfo {
                    name: r.name,
                    capacity: r.capacity,
                    allocatable: r.allocatable,
                    available: r.available,
                })
                .collect(),
        }
    }
}

impl From<WireAttribute> for AttributeInfo {
    fn from(attribute: WireAttribute) -> Self {
        Self { name: attribute.name, value: attribute.value }
    }
}

/// A label or annotation map of a patch, from the bytes: `null` removes the map, an object sets
/// (a string) or removes (`null`) single keys; a key given twice, or any other value, fails.
impl<'de> Deserialize<'de> for MapPatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_option(MapPatchVisitor)
    }
}

struct MapPatchVisitor;

impl<'de> Visitor<'de> for MapPatchVisitor {
    type Value = MapPatch;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or a map of strings (or nulls)")
    }

    fn visit_none<E>(self) -> Result<MapPatch, E> {
        Ok(MapPatch::Remove)
    }

    fn visit_unit<E>(self) -> Result<MapPatch, E> {
        Ok(MapPatch::Remove)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<MapPatch, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MapPatch, A::Error> {
        let mut changes: Vec<(String, Option<String>)> = Vec::new();
        while let Some(change) = map.next_entry()? {
            changes.push(change);
        }
        // A repeated key needs a report: the generic path's (n log n, whatever the count).
        let mut keys: Vec<&str> = changes.iter().map(|(key, _)| key.as_str()).collect();
        keys.sort_unstable();
        if keys.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(serde::de::Error::custom("a repeated key"));
        }
        Ok(MapPatch::Merge(changes))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validate::{decode, unknown_fields};

    fn current() -> NodeResourceTopology {
        let body = json!({"metadata": {"name": "worker-0", "uid": "u-1", "resourceVersion": "7", "generation": 2,
                "creationTimestamp": "2026-01-02T03:04:05Z",
                "labels": {"pool": "cnf", "zone": "a"}, "annotations": {"team": "x", "owned": "1"},
                "finalizers": ["example.com/keep"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "worker-0", "uid": "n-1"}]},
            "topologyPolicies": ["SingleNUMANodeContainerLevel"],
            "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
            "zones": [{"name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": 10}],
                "resources": [{"name": "cpu", "capacity": "4", "allocatable": "3500m", "available": "1500m"},
                              {"name": "memory", "capacity": "8Gi", "allocatable": "7Gi", "available": "3000000000"}]}]});
        decode(body, None).unwrap()
    }

    /// What RFC 7386 gives through the generic path: merge into the JSON value, decode.
    fn generic(current: &NodeResourceTopology, patch: &Value) -> NodeResourceTopology {
        let mut document = serde_json::to_value(current).unwrap();
        json_patch::merge(&mut document, patch);
        decode(document, Some("worker-0")).unwrap()
    }

    #[test]
    fn the_typed_merge_gives_what_the_generic_one_gives() {
        let zones = json!([{"name": "node-0", "type": "Node", "typo": 1,
            "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": "250m"}]},
            {"name": "node-1", "type": "Node", "parent": "socket-0", "attributes": [{"name": "a", "value": "b"}]}]);
        let patches = [
            json!({}),
            json!({"zones": zones}),
            json!({"zones": []}),
            json!({"metadata": {"annotations": {"owned": "2", "new": "n", "gone": null}}, "zones": zones,
                   "attributes": [{"name": "topologyManagerScope", "value": "pod"}]}),
            json!({"metadata": {"labels": {"pool": null, "added": "yes"}}}),
            json!({"metadata": {"labels": null, "annotations": {}}}),
            json!({"metadata": {}, "topologyPolicies": [], "attributes": []}),
        ];
        let mut bare = current();
        bare.metadata.labels = None;
        bare.metadata.annotations = None;
        for base in [current(), bare] {
            for patch in &patches {
                let typed = TypedMergePatch::decode(patch).unwrap_or_else(|| panic!("{patch} is the typed shape"));
                let typed = typed.apply(&base);
                let generic = generic(&base, patch);
                assert_eq!(typed, generic, "{patch}");
                assert_eq!(serde_json::to_string(&typed).unwrap(), serde_json::to_string(&generic).unwrap());
                let mut document = serde_json::to_value(&base).unwrap();
                json_patch::merge(&mut document, patch);
                assert_eq!(unknown_fields(patch), unknown_fields(&document), "{patch}");
            }
        }
        // Naming a label on an object without labels creates the map, even when it removes it.
        let mut bare = current();
        bare.metadata.labels = None;
        let patch = json!({"metadata": {"labels": {"pool": null}}});
        let typed = TypedMergePatch::decode(&patch).unwrap().apply(&bare);
        assert_eq!(typed.metadata.labels, Some(BTreeMap::new()));
        assert_eq!(typed, generic(&bare, &patch));
    }

    #[test]
    fn other_shapes_and_bad_parts_take_the_generic_path() {
        for patch in [
            json!([1]),
            json!({"zones": null}),
            json!({"attributes": null}),
            json!({"zones": {"name": "node-0"}}),
            json!({"zones": [{"name": 1}]}),
            json!({"zones": [{"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "capacity": "lots"}]}]}),
            json!({"kind": "NodeResourceTopology"}),
            json!({"spec": {}}),
            json!({"metadata": null}),
            json!({"metadata": {"name": "other"}}),
            json!({"metadata": {"resourceVersion": "1"}}),
            json!({"metadata": {"labels": {"a": 1}}}),
            json!({"metadata": {"labels": ["a"]}}),
        ] {
            assert!(TypedMergePatch::decode(&patch).is_none(), "{patch}");
        }
    }
}
