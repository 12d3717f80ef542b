//! NUMA placement of pinned containers, published in the NRT for the scheduler's NUMA-aware
//! preemption: format `npv0v001` with LEB89 vectors, bit-exact with upstream
//! `k8stopologyawareschedwg/numaplacement` v0.1.0.
//!
//! Producer and consumer both know the set of containers, so the producer only publishes, per
//! NUMA node, which positions of the *sorted list of container hashes* sit there:
//! - identity = (namespace, pod, container); hash = XXH64 (seed 0) of `ns ‖ 0 ‖ pod ‖ 0 ‖ cnt`;
//! - the distinct hashes sorted ascending give each container its offset;
//! - the busiest node (most containers, ties to the lowest id) gets no vector: every container
//!   not listed elsewhere is there;
//! - every other node with containers gets its offsets delta-encoded in [LEB89](leb89);
//! - the node attribute `topology.node.k8s.io/numaplacement-metadata` carries
//!   `npv0v001::ve=leb89::cc=<containers>::nn=<numa nodes>::bn=<busiest>`, and the zone `node-<id>`
//!   carries its vector in `topology.node.k8s.io/numaplacement-vector`.
//!
//! # Input shape
//!
//! The encoder takes plain `(namespace, pod, container, numa node)` [`Placement`]s and a node
//! count `nn`; [`scan_payload`] does the exporter's selection over [`PodAffinity`] values (pods
//! with, per container, `cpu_ids`, devices and memory blocks with their NUMA ids) and a CPU → NUMA
//! function (from `sysfs`). NUMA ids are `i64` as podresources reports them.
//!
//! # Sparse NUMA ids
//!
//! The format indexes NUMA nodes by `0..nn` and the scheduler's decoder rejects vectors and a busiest
//! node outside that range. Upstream RTE passes the node *count* as `nn` (and names zones by
//! position), so on a machine with nodes 0 and 2 a container on node 2 makes it drop the payload.
//! We name zones by id; pass `nn` = highest id + 1 ([`Machine::numa_id_bound`]) so every real id
//! is encodable. On contiguous machines that is the node count: the output is upstream's.
//!
//! [`Machine::numa_id_bound`]: crate::sysfs::Machine::numa_id_bound

mod decoder;
pub mod leb89;
mod metadata;
mod scan;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use numaresources_api::nrt::well_known::{
    ATTR_NUMA_PLACEMENT_METADATA, ATTR_NUMA_PLACEMENT_VECTOR, numa_id_from_zone_name,
};
use numaresources_api::nrt::{AttributeInfo, NodeResourceTopology};
use xxhash_rust::xxh64::xxh64;

pub use decoder::{Decoder, Placements};
pub use metadata::Metadata;
pub use scan::{ContainerAffinity, DeviceAffinity, MemoryAffinity, PodAffinity, scan_payload};

/// The metadata prefix and version.
pub(crate) const METADATA_PREFIX: &str = "npv0v001";
/// Separates the metadata fields.
pub(crate) const SEPARATOR: &str = "::";
/// The only vector encoding.
pub(crate) const ENCODING_LEB89: &str = "leb89";

/// Why placement could not be encoded, parsed or decoded. The messages follow upstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `nn` is 0 (encoder) or not positive (decoder).
    #[error("inconsistent NUMA node count")]
    InconsistentNodeCount,
    /// A container with NUMA node -1.
    #[error("unknown NUMA affinity not supported")]
    UnknownNumaAffinity,
    /// A container on a NUMA node outside `0..nn`.
    #[error("wrong NUMA affinity: {numa_node} with {numa_nodes} NUMA nodes")]
    WrongNumaAffinity {
        /// The NUMA node given.
        numa_node: i64,
        /// `nn`.
        numa_nodes: u32,
    },
    /// The Topology Manager policy is not `single-numa-node`.
    #[error("topology manager policy not supported for NUMA placement: {0}")]
    UnsupportedPolicy(String),
    /// A container's device or memory block spans several NUMA nodes.
    #[error("multiple NUMA nodes found for container {0}")]
    MultipleNumaNodes(String),
    /// A CPU id the CPU → NUMA map does not know.
    #[error("CPU ID {0} not found in the CPU to NUMA node map")]
    UnknownCpu(i64),
    /// The metadata does not start with `npv0v001::`.
    #[error("malformed metadata {0:?}")]
    MalformedMetadata(String),
    /// A metadata piece without `=`.
    #[error("malformed metadata pair {0:?}")]
    MalformedMetadataPair(String),
    /// A metadata piece with an empty key.
    #[error("missing metadata key in {0:?}")]
    MissingMetadataKey(String),
    /// A metadata piece with an empty value.
    #[error("missing metadata value in {0:?}")]
    MissingMetadataValue(String),
    /// A metadata value that is not a decimal integer.
    #[error("invalid metadata value in {0:?}")]
    MetadataValue(String),
    /// A metadata key other than `ve`, `cc`, `nn`, `bn`.
    #[error("unknown metadata field {0:?}")]
    UnknownMetadataField(String),
    /// `ve` is not `leb89`.
    #[error("unsupported vector encoding {0:?}")]
    UnsupportedEncoding(String),
    /// `bn` is missing.
    #[error("unknown busiest node")]
    UnknownBusiestNode,
    /// `bn` outside `0..nn`.
    #[error("inconsistent busiest node data: {busiest_node} with {numa_nodes} NUMA nodes")]
    InconsistentBusiestNode {
        /// `bn`.
        busiest_node: i64,
        /// `nn`.
        numa_nodes: i64,
    },
    /// Too many vectors, or vectors with no containers.
    #[error("inconsistent NUMA vector data")]
    InconsistentVectorData,
    /// A vector on the busiest node or outside `0..nn`, undecodable, or pointing past `cc`.
    #[error("corrupted NUMA vector for NUMA node {numa_node}")]
    CorruptedVector {
        /// The vector's NUMA node.
        numa_node: i64,
    },
    /// The containers given do not match `cc`, or `cc` is negative.
    #[error("inconsistent container set")]
    InconsistentContainerSet,
    /// A container listed twice.
    #[error("duplicated data in multiple NUMA vectors")]
    DuplicatedVectorData,
    /// A zone carrying a vector is not named `node-<int>`.
    #[error("zone {0:?} carries a NUMA vector but is not named node-<id>")]
    ZoneName(String),
}

/// The hash of a container identity: XXH64 (seed 0) over `namespace ‖ 0x00 ‖ pod ‖ 0x00 ‖ container`.
pub(crate) fn container_hash(namespace: &str, pod: &str, container: &str) -> u64 {
    let len = namespace.len() + pod.len() + container.len() + 2;
    // Kubernetes names fit the stack buffer (63 + 253 + 63 + 2 bytes); one-shot hashing of the
    // concatenation is cheaper than streaming five pieces, and gives the same digest.
    let mut stack = [0u8; 384];
    let mut heap = Vec::new();
    let bytes: &mut [u8] = if len <= stack.len() {
        &mut stack[..len]
    } else {
        heap.resize(len, 0);
        &mut heap
    };
    let (ns, rest) = bytes.split_at_mut(namespace.len());
    ns.copy_from_slice(namespace.as_bytes());
    let (p, rest) = rest[1..].split_at_mut(pod.len());
    p.copy_from_slice(pod.as_bytes());
    rest[1..].copy_from_slice(container.as_bytes());
    xxh64(bytes, 0)
}

/// One container on one NUMA node: the encoder's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's name.
    pub pod: &'a str,
    /// The container's name.
    pub container: &'a str,
    /// Its NUMA node (`-1` is podresources' "unknown", an error here).
    pub numa_node: i64,
}

/// Collects placements; [`finish`](Self::finish) encodes them.
#[derive(Debug, Clone)]
pub struct Encoder {
    numa_nodes: u32,
    /// (hash, NUMA node) in the order added; a repeated identity keeps its last node.
    placements: Vec<(u64, u32)>,
}

impl Encoder {
    /// An encoder for a machine with `numa_nodes` (`nn`, > 0) NUMA nodes.
    pub fn new(numa_nodes: u32) -> Result<Self, Error> {
        if numa_nodes == 0 {
            return Err(Error::InconsistentNodeCount);
        }
        Ok(Self { numa_nodes, placements: Vec::new() })
    }

    /// Adds a container. `-1` and nodes outside `0..nn` are errors, which fail the whole
    /// encoding; adding an identity again replaces its node.
    pub fn add(&mut self, namespace: &str, pod: &str, container: &str, numa_node: i64) -> Result<(), Error> {
        self.add_hash(container_hash(namespace, pod, container), numa_node)
    }

    /// Adds a container by its [`container_hash`].
    pub(crate) fn add_hash(&mut self, hash: u64, numa_node: i64) -> Result<(), Error> {
        if numa_node == -1 {
            return Err(Error::UnknownNumaAffinity);
        }
        let node = u32::try_from(numa_node)
            .ok()
            .filter(|&n| n < self.numa_nodes)
            .ok_or(Error::WrongNumaAffinity { numa_node, numa_nodes: self.numa_nodes })?;
        self.placements.push((hash, node));
        Ok(())
    }

    /// The payload.
    pub fn finish(&self) -> Payload {
        // Sorting is stable, so among equal hashes the last one added comes last and wins.
        let mut sorted = self.placements.clone();
        sorted.sort_by_key(|&(hash, _)| hash);
        let mut distinct: Vec<u32> = Vec::with_capacity(sorted.len());
        for (i, &(hash, node)) in sorted.iter().enumerate() {
            if sorted.get(i + 1).is_none_or(|&(next, _)| next != hash) {
                distinct.push(node);
            }
        }
        let mut offsets: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (offset, &node) in (0u32..).zip(&distinct) {
            offsets.entry(node).or_default().push(offset);
        }
        // Ascending ids, strictly greater wins: ties go to the lowest id.
        let mut busiest: Option<(u32, usize)> = None;
        for (&node, list) in &offsets {
            if busiest.is_none_or(|(_, count)| list.len() > count) {
                busiest = Some((node, list.len()));
            }
        }
        let busiest_node = busiest.map_or(0, |(node, _)| node);
        let vectors = offsets
            .into_iter()
            .filter(|&(node, _)| node != busiest_node)
            .map(|(node, list)| {
                let mut vector = String::with_capacity(list.len());
                let mut previous = None;
                for offset in list {
                    // Offsets of one node increase strictly, so deltas are positive.
                    leb89::encode_value(previous.map_or(offset, |p| offset - p), &mut vector);
                    previous = Some(offset);
                }
                (node, vector)
            })
            .collect();
        Payload { container_count: distinct.len(), numa_nodes: self.numa_nodes, busiest_node, vectors }
    }
}

/// Encodes placements in one go; see [`Encoder`].
pub fn encode<'a>(numa_nodes: u32, placements: impl IntoIterator<Item = Placement<'a>>) -> Result<Payload, Error> {
    let mut encoder = Encoder::new(numa_nodes)?;
    for p in placements {
        encoder.add(p.namespace, p.pod, p.container, p.numa_node)?;
    }
    Ok(encoder.finish())
}

/// What is published: the metadata and a vector per NUMA node other than the busiest that has
/// containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// `cc`: distinct containers.
    pub container_count: usize,
    /// `nn`.
    pub numa_nodes: u32,
    /// `bn` (0 when there are no containers).
    pub busiest_node: u32,
    /// NUMA id → vector (never empty).
    pub vectors: BTreeMap<u32, String>,
}

impl Payload {
    /// The metadata.
    pub fn metadata(&self) -> Metadata {
        Metadata::leb89(self.container_count, self.numa_nodes, self.busiest_node)
    }

    /// The metadata attribute's value, e.g. `npv0v001::ve=leb89::cc=2::nn=2::bn=0`.
    pub fn metadata_string(&self) -> String {
        self.metadata().to_string()
    }

    /// Writes the payload into an NRT: sets the node attribute (in place if present, else
    /// appended) and, on every zone `node-<id>`, the vector for `id` or no vector attribute.
    pub(crate) fn apply_to(&self, nrt: &mut NodeResourceTopology) {
        let metadata = self.metadata_string();
        match nrt.attributes.iter_mut().find(|a| a.name == ATTR_NUMA_PLACEMENT_METADATA) {
            Some(attribute) => attribute.value = metadata.into(),
            None => nrt.attributes.push(AttributeInfo::new(ATTR_NUMA_PLACEMENT_METADATA, metadata)),
        }
        // Keep only the first metadata attribute: the scheduler reads the first.
        let mut seen = false;
        nrt.attributes.retain(|a| a.name != ATTR_NUMA_PLACEMENT_METADATA || !std::mem::replace(&mut seen, true));
        for zone in &mut nrt.zones {
            zone.attributes.retain(|a| a.name != ATTR_NUMA_PLACEMENT_VECTOR);
            let vector = numa_id_from_zone_name(&zone.name).and_then(|id| self.vectors.get(&id));
            if let Some(vector) = vector {
                zone.attributes.push(AttributeInfo::new(ATTR_NUMA_PLACEMENT_VECTOR, vector.clone()));
            }
        }
    }
}
