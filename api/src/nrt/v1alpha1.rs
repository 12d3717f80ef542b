//! `topology.node.k8s.io/v1alpha1`: read for old producers; converts losslessly to v1alpha2.
//!
//! It differs from v1alpha2 only at the top level: `topologyPolicies` is required and there are
//! no node-wide `attributes`. Zones are the same types.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

use super::{KIND, Zone, null_as_default};

/// The resource topology of one node (`topology.node.k8s.io/v1alpha1`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = root_schema)]
pub struct NodeResourceTopology {
    /// Standard object metadata; the name is the node's name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Topology manager policies (`SingleNUMANodeContainerLevel`, …).
    #[serde(deserialize_with = "null_as_default")]
    pub topology_policies: Vec<String>,
    /// The zones of the node.
    #[serde(default, deserialize_with = "null_as_default")]
    pub zones: Vec<Zone>,
}

/// The root schema as upstream has it: both lists required, no defaults.
fn root_schema(schema: &mut schemars::Schema) {
    crate::schema::kubernetes_root(schema, &["topologyPolicies", "zones"]);
}

impl Serialize for NodeResourceTopology {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct(KIND, 5)?;
        state.serialize_field("apiVersion", <Self as k8s_openapi::Resource>::API_VERSION)?;
        state.serialize_field("kind", KIND)?;
        state.serialize_field("metadata", &self.metadata)?;
        state.serialize_field("topologyPolicies", &self.topology_policies)?;
        state.serialize_field("zones", &self.zones)?;
        state.end()
    }
}

super::resource_impls!(NodeResourceTopology, "v1alpha1", "topology.node.k8s.io/v1alpha1");

impl From<NodeResourceTopology> for super::NodeResourceTopology {
    fn from(old: NodeResourceTopology) -> Self {
        Self {
            metadata: old.metadata,
            topology_policies: old.topology_policies,
            zones: old.zones,
            attributes: Vec::new(),
        }
    }
}

impl From<super::NodeResourceTopology> for NodeResourceTopology {
    /// Drops the node-wide attributes, which v1alpha1 cannot carry.
    fn from(new: super::NodeResourceTopology) -> Self {
        Self { metadata: new.metadata, topology_policies: new.topology_policies, zones: new.zones }
    }
}
