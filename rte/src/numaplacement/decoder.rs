//! The consumer side: metadata + zone vectors + the container identities one knows → the NUMA
//! node of each container. Validation follows upstream's `NewDecoder` and `Result` (in
//! scheduler-plugins) in order, so the same payload fails for the same reason; vectors are visited
//! in ascending NUMA id order (upstream's order is random, which only matters when a payload
//! has several faults).

use std::collections::{BTreeMap, HashMap};

use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::{ATTR_NUMA_PLACEMENT_METADATA, ATTR_NUMA_PLACEMENT_VECTOR};

use super::{ENCODING_LEB89, Error, Metadata, container_hash, leb89};

/// A validated payload, ready to place containers.
#[derive(Debug, Clone)]
pub struct Decoder {
    metadata: Metadata,
    vectors: BTreeMap<i64, String>,
}

/// Where each known container sits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placements {
    by_hash: HashMap<u64, i64>,
}

impl Decoder {
    /// Checks the metadata against the vectors (keyed by NUMA id).
    pub fn new(metadata: &Metadata, vectors: BTreeMap<i64, String>) -> Result<Self, Error> {
        let Metadata { encoding, container_count: cc, numa_nodes: nn, busiest_node: bn } = metadata;
        let (cc, nn, bn) = (*cc, *nn, *bn);
        if encoding != ENCODING_LEB89 {
            return Err(Error::UnsupportedEncoding(encoding.clone()));
        }
        if bn == -1 {
            return Err(Error::UnknownBusiestNode);
        }
        if bn < 0 || bn >= nn {
            return Err(Error::InconsistentBusiestNode { busiest_node: bn, numa_nodes: nn });
        }
        if i64::try_from(vectors.len()).unwrap_or(i64::MAX) >= nn {
            return Err(Error::InconsistentVectorData);
        }
        if vectors.contains_key(&bn) {
            return Err(Error::CorruptedVector { numa_node: bn });
        }
        if cc < 0 {
            return Err(Error::InconsistentContainerSet);
        }
        if nn <= 0 {
            return Err(Error::InconsistentNodeCount);
        }
        if cc == 0 && !vectors.is_empty() {
            return Err(Error::InconsistentVectorData);
        }
        if let Some(&key) = vectors.keys().find(|&&key| key < 0 || key >= nn) {
            return Err(Error::CorruptedVector { numa_node: key });
        }
        Ok(Self { metadata: metadata.clone(), vectors })
    }

    /// Reads the payload an NRT carries: the metadata attribute and the vector attribute of zones
    /// named `node-<int>`. `Ok(None)` when there is no metadata attribute.
    pub fn from_nrt(nrt: &NodeResourceTopology) -> Result<Option<Self>, Error> {
        let Some(text) = nrt.attribute(ATTR_NUMA_PLACEMENT_METADATA) else {
            return Ok(None);
        };
        let metadata = Metadata::parse(text)?;
        let mut vectors = BTreeMap::new();
        for zone in &nrt.zones {
            let Some(vector) = zone.attributes.iter().find(|a| a.name == ATTR_NUMA_PLACEMENT_VECTOR) else {
                continue;
            };
            let id = zone
                .name
                .strip_prefix("node-")
                .and_then(|id| id.parse::<i64>().ok())
                .ok_or_else(|| Error::ZoneName(zone.name.to_string()))?;
            vectors.insert(id, vector.value.to_string());
        }
        Self::new(&metadata, vectors).map(Some)
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Places the containers, given as (namespace, pod, container); their distinct identities
    /// must be exactly the `cc` the producer encoded.
    pub fn result<'a>(
        &self,
        containers: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> Result<Placements, Error> {
        let mut hashes: Vec<u64> = containers.into_iter().map(|(ns, pod, cnt)| container_hash(ns, pod, cnt)).collect();
        hashes.sort_unstable();
        hashes.dedup();
        if i64::try_from(hashes.len()).ok() != Some(self.metadata.container_count) {
            return Err(Error::InconsistentContainerSet);
        }
        let mut by_hash: HashMap<u64, i64> = HashMap::with_capacity(hashes.len());
        for (&numa_node, vector) in &self.vectors {
            let offsets = leb89::decode_offsets(vector.as_bytes()).map_err(|_| Error::CorruptedVector { numa_node })?;
            for offset in offsets {
                let hash = *hashes.get(offset as usize).ok_or(Error::CorruptedVector { numa_node })?;
                if by_hash.insert(hash, numa_node).is_some() {
                    return Err(Error::DuplicatedVectorData);
                }
            }
        }
        for hash in hashes {
            by_hash.entry(hash).or_insert(self.metadata.busiest_node);
        }
        Ok(Placements { by_hash })
    }
}

impl Placements {
    /// The NUMA node of a container, `None` for one the decoder was not given.
    pub fn numa_node(&self, namespace: &str, pod: &str, container: &str) -> Option<i64> {
        self.by_hash.get(&container_hash(namespace, pod, container)).copied()
    }

    /// How many containers are placed.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}
