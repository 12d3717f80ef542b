//! The node-level metadata string, `npv0v001::ve=leb89::cc=<n>::nn=<n>::bn=<n>`, both ways.

use std::fmt;

use super::{ENCODING_LEB89, Error, METADATA_PREFIX, SEPARATOR};

/// The metadata of a placement payload. Parsing starts from "unknown" (`-1`, and `""` for the
/// encoding), so a field the string leaves out stays unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// `ve`: the vector encoding (only `leb89` exists).
    pub encoding: String,
    /// `cc`: the number of distinct containers encoded.
    pub container_count: i64,
    /// `nn`: the number of NUMA nodes.
    pub numa_nodes: i64,
    /// `bn`: the busiest NUMA node, which has no vector.
    pub busiest_node: i64,
}

impl Default for Metadata {
    fn default() -> Self {
        Self { encoding: String::new(), container_count: -1, numa_nodes: -1, busiest_node: -1 }
    }
}

impl fmt::Display for Metadata {
    /// The producer's form: always `ve`, `cc`, `nn`, `bn` in this order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{METADATA_PREFIX}{SEPARATOR}ve={}{SEPARATOR}cc={}{SEPARATOR}nn={}{SEPARATOR}bn={}",
            self.encoding, self.container_count, self.numa_nodes, self.busiest_node
        )
    }
}

impl Metadata {
    /// Metadata for a payload encoded here.
    pub(super) fn leb89(container_count: usize, numa_nodes: u32, busiest_node: u32) -> Self {
        Self {
            encoding: ENCODING_LEB89.to_owned(),
            container_count: i64::try_from(container_count).unwrap_or(i64::MAX),
            numa_nodes: i64::from(numa_nodes),
            busiest_node: i64::from(busiest_node),
        }
    }

    /// Parses a metadata string the way upstream's `UnpackMetadataInto` does.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut metadata = Self::default();
        metadata.unpack(text)?;
        Ok(metadata)
    }

    /// Resets every field to unknown, then reads `text` into `self`. As upstream, on error the
    /// fields read before the faulty piece stay set.
    ///
    /// Rules: the string starts with exactly `npv0v001::`; the rest splits on `::` into
    /// `key=value` pieces (split at the first `=`; an empty key or value is an error, so is an
    /// empty piece); `ve` takes its value verbatim, other values are Go `Atoi` decimals (sign and
    /// leading zeros allowed), parsed *before* the key is looked at; keys come in any order, the
    /// last duplicate wins, and an unknown key is an error.
    pub fn unpack(&mut self, text: &str) -> Result<(), Error> {
        *self = Self::default();
        let body = text
            .strip_prefix(METADATA_PREFIX)
            .and_then(|rest| rest.strip_prefix(SEPARATOR))
            .ok_or_else(|| Error::MalformedMetadata(text.to_owned()))?;
        for piece in body.split(SEPARATOR) {
            let Some(eq) = piece.find('=') else {
                return Err(Error::MalformedMetadataPair(piece.to_owned()));
            };
            if eq == 0 {
                return Err(Error::MissingMetadataKey(piece.to_owned()));
            }
            if eq == piece.len() - 1 {
                return Err(Error::MissingMetadataValue(piece.to_owned()));
            }
            let (key, value) = (&piece[..eq], &piece[eq + 1..]);
            if key == "ve" {
                self.encoding = value.to_owned();
                continue;
            }
            // Go's strconv.Atoi and Rust's i64 parser accept exactly the same base-10 strings.
            let number: i64 = value.parse().map_err(|_| Error::MetadataValue(piece.to_owned()))?;
            match key {
                "cc" => self.container_count = number,
                "nn" => self.numa_nodes = number,
                "bn" => self.busiest_node = number,
                _ => return Err(Error::UnknownMetadataField(key.to_owned())),
            }
        }
        Ok(())
    }
}
