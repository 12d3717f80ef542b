//! NodeResourceTopology, `topology.node.k8s.io`: one cluster-scoped object per node, named after
//! the node, listing each NUMA zone's capacity, allocatable and available resources.
//!
//! The wire form is upstream's (`k8stopologyawareschedwg/noderesourcetopology-api`) to the letter:
//! the same JSON names, empty lists omitted except `zones`, which is always an array.
//! [`v1alpha2`](NodeResourceTopology) is what everything current reads and writes; [`v1alpha1`]
//! is read for old producers and converts losslessly up.

mod canonical;
pub mod v1alpha1;
pub mod well_known;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::de::Deserializer;
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

/// The string of zone, resource, cost and attribute names and attribute values: the ones our
/// objects hold (`node-0`, `Node`, `cpu`, `hugepages-1Gi`, `single-numa-node`, a pods
/// fingerprint) fit its 24 bytes inline, where a `String` would allocate each of them; a server
/// holding thousands of objects saves two dozen allocations per object, and decoding a patch as
/// many.
pub use compact_str::CompactString;

pub use crate::quantity::Quantity;

/// The API group of NodeResourceTopology.
pub const GROUP: &str = "topology.node.k8s.io";
/// The version we serve and write (v1alpha1 is read only, to convert old objects).
pub const VERSION: &str = "v1alpha2";
/// `group/version`, as objects carry it in `apiVersion`.
pub const API_VERSION: &str = "topology.node.k8s.io/v1alpha2";
/// The plural resource name.
pub const PLURAL: &str = "noderesourcetopologies";
/// The singular resource name.
pub const SINGULAR: &str = "noderesourcetopology";
/// The kind.
pub const KIND: &str = "NodeResourceTopology";
/// The list kind.
pub const LIST_KIND: &str = "NodeResourceTopologyList";
/// Short names `kubectl` resolves (upstream has only the first; `nrt` is ours).
pub const SHORT_NAMES: &[&str] = &["node-res-topo", "nrt"];

/// The resource topology of one node (`topology.node.k8s.io/v1alpha2`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = root_schema)]
pub struct NodeResourceTopology {
    /// Standard object metadata; the name is the node's name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// DEPRECATED (to be removed in v1beta1): use top level attributes if needed.
    #[serde(default, deserialize_with = "null_as_default")]
    pub topology_policies: Vec<String>,
    /// The zones of the node; NUMA nodes are zones of type `Node` named `node-<id>`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub zones: Vec<Zone>,
    /// Node-wide attributes: topology manager policy and scope, pods fingerprint, …
    #[serde(default, deserialize_with = "null_as_default")]
    pub attributes: Vec<AttributeInfo>,
}

/// A resource topology zone, e.g. a NUMA node, socket, die or core.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Zone {
    /// Zone name; NUMA zones are `node-<id>`.
    pub name: CompactString,
    /// Zone type; NUMA zones are `Node`.
    #[serde(rename = "type")]
    pub zone_type: CompactString,
    /// Name of the enclosing zone (unused by every known producer and consumer).
    #[serde(default, skip_serializing_if = "CompactString::is_empty")]
    pub parent: CompactString,
    /// Distances to every zone, this one included.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_default")]
    pub costs: Vec<CostInfo>,
    /// Zone attributes.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_default")]
    pub attributes: Vec<AttributeInfo>,
    /// Per-resource amounts in this zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_default")]
    pub resources: Vec<ResourceInfo>,
}

/// One resource's amounts in one zone. CPUs count logical CPUs; memory and hugepages are bytes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ResourceInfo {
    /// Name of the resource.
    pub name: CompactString,
    /// Capacity of the resource, corresponding to capacity in node status, i.e. total amount of
    /// this resource that the node has.
    pub capacity: Quantity,
    /// Allocatable quantity of the resource, corresponding to allocatable in node status, i.e.
    /// total amount of this resource available to be used by pods.
    pub allocatable: Quantity,
    /// Available is the amount of this resource currently available for new (to be scheduled)
    /// pods, i.e. Allocatable minus the resources reserved by currently running pods.
    pub available: Quantity,
}

/// The cost (or distance) between two zones.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub struct CostInfo {
    /// Name of the other zone.
    pub name: CompactString,
    /// Distance (ACPI SLIT: 10 is local).
    pub value: i64,
}

/// A named attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub struct AttributeInfo {
    /// Attribute name.
    pub name: CompactString,
    /// Attribute value.
    pub value: CompactString,
}

impl AttributeInfo {
    /// An attribute.
    pub fn new(name: impl Into<CompactString>, value: impl Into<CompactString>) -> Self {
        Self { name: name.into(), value: value.into() }
    }
}

impl NodeResourceTopology {
    /// An empty topology for `node`.
    pub fn new(node: &str) -> Self {
        Self { metadata: ObjectMeta { name: Some(node.to_owned()), ..ObjectMeta::default() }, ..Self::default() }
    }

    /// The first value of a node-wide attribute (upstream's `attribute.Get`).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.iter().find(|a| a.name == name).map(|a| a.value.as_str())
    }
}

impl Serialize for NodeResourceTopology {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct(KIND, 6)?;
        state.serialize_field("apiVersion", <Self as k8s_openapi::Resource>::API_VERSION)?;
        state.serialize_field("kind", KIND)?;
        state.serialize_field("metadata", &self.metadata)?;
        if !self.topology_policies.is_empty() {
            state.serialize_field("topologyPolicies", &self.topology_policies)?;
        }
        state.serialize_field("zones", &self.zones)?;
        if !self.attributes.is_empty() {
            state.serialize_field("attributes", &self.attributes)?;
        }
        state.end()
    }
}

/// A list of NodeResourceTopology objects (`NodeResourceTopologyList`).
pub type NodeResourceTopologyList = k8s_openapi::List<NodeResourceTopology>;

/// The `k8s_openapi` traits of one version's NodeResourceTopology: cluster-scoped, listable, with
/// standard metadata.
macro_rules! resource_impls {
    ($type:ty, $version:expr, $api_version:expr) => {
        impl k8s_openapi::Resource for $type {
            const API_VERSION: &'static str = $api_version;
            const GROUP: &'static str = $crate::nrt::GROUP;
            const KIND: &'static str = $crate::nrt::KIND;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $crate::nrt::PLURAL;
            type Scope = k8s_openapi::ClusterResourceScope;
        }

        impl k8s_openapi::ListableResource for $type {
            const LIST_KIND: &'static str = $crate::nrt::LIST_KIND;
        }

        impl k8s_openapi::Metadata for $type {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
use resource_impls;

resource_impls!(NodeResourceTopology, VERSION, API_VERSION);

/// The root schema as upstream has it: `zones` required, no defaults (we read leniently, but
/// the schema is what writers are validated against).
fn root_schema(schema: &mut schemars::Schema) {
    crate::schema::kubernetes_root(schema, &["zones"]);
}

/// Go writes a nil slice as `null`; read it as empty.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_version_is_the_group_and_the_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
        assert_eq!(<NodeResourceTopology as k8s_openapi::Resource>::VERSION, VERSION);
    }
}
