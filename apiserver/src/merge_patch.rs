//! JSON merge patches (RFC 7386) in the shape exporters send, applied to the typed object.
//!
//! The generic path turns the current object into a JSON value, merges, checks and decodes the
//! result: most of the cost of an exporter's update. A patch that only replaces `zones`,
//! `attributes` or `topologyPolicies` (arrays: a merge patch replaces them whole) and sets or
//! removes labels and annotations gives the same object when each of those parts is decoded on
//! its own and put in place, so that is what [`TypedMergePatch`] does, ahead of the store's write
//! lock. Any other shape, or a part that does not decode, takes the generic path, which also
//! words the errors.

use std::collections::BTreeMap;

use numaresources_api::nrt::{AttributeInfo, NodeResourceTopology, Zone};
use serde::Deserialize;
use serde_json::{Map, Value};

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
