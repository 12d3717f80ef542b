//! The pods fingerprint, algorithm v001: a short signature of a set of pods that lets the
//! scheduler check whether an NRT reflects the pods it believes are on the node. Bit-exact with
//! upstream `k8stopologyawareschedwg/podfingerprint`:
//!
//! 1. each pod (namespace, name) hashes to `XXH64(name, seed = XXH64(namespace, seed 0))`;
//! 2. the hashes are sorted ascending (duplicates kept);
//! 3. they are fed to one XXH64 (seed 0) as consecutive 8-byte little-endian words;
//! 4. the signature is `pfp0` + `v001` + the digest as 16 lowercase hex digits (big-endian).
//!
//! Which pods count depends on the [`Method`]; the selection needs what each pod holds, so it is
//! expressed through the [`FingerprintPod`] trait: the exporter implements it from podresources,
//! the scheduler side from the pod spec.
//!
//! Shared by the exporter, which publishes the signature, and by every reader that checks an
//! NRT against the pods it knows on the node.

use std::fmt;
use std::str::FromStr;

use xxhash_rust::xxh64::{Xxh64, xxh64};

use serde::Serialize;

/// Every signature starts with this.
pub const PREFIX: &str = "pfp0";
/// The algorithm version we compute and accept.
pub const VERSION: &str = "v001";
/// The shortest string [`Fingerprint::check`] reads as a signature (upstream's bound).
const MIN_SIGNATURE_LEN: usize = 16;

/// Why an expected signature does not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// Too short, or not starting with `pfp0`.
    #[error("malformed pods fingerprint {0:?}")]
    Malformed(String),
    /// A version other than `v001`.
    #[error("incompatible pods fingerprint version {found:?} (supported: {VERSION})")]
    IncompatibleVersion {
        /// The version found.
        found: String,
    },
    /// Well formed, but of another pod set.
    #[error("pods fingerprint mismatch: expected {expected}, computed {computed}")]
    Mismatch {
        /// The signature checked.
        expected: String,
        /// Ours.
        computed: String,
    },
}

/// Which pods the fingerprint covers; published as `nodeTopologyPodsFingerprintMethod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Method {
    /// Every pod podresources lists.
    All,
    /// Pods with at least one exclusive resource (upstream's default).
    #[default]
    WithExclusiveResources,
}

/// An unknown method name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown pods fingerprint method {0:?} (known: all, with-exclusive-resources)")]
pub struct UnknownMethod(pub String);

impl Method {
    /// The wire string: `all` or `with-exclusive-resources`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::WithExclusiveResources => "with-exclusive-resources",
        }
    }

    /// Whether `pod` counts under this method.
    pub fn includes<P: FingerprintPod + ?Sized>(self, pod: &P) -> bool {
        match self {
            Self::All => true,
            Self::WithExclusiveResources => pod.has_exclusive_resources(),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = UnknownMethod;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(Self::All),
            "with-exclusive-resources" => Ok(Self::WithExclusiveResources),
            other => Err(UnknownMethod(other.to_owned())),
        }
    }
}

/// A pod as the fingerprint selection sees it. The podresources side implements it for its pod
/// type; [`Fingerprint::from_pods`] then does the rest.
pub trait FingerprintPod {
    /// The pod's namespace.
    fn namespace(&self) -> &str;
    /// The pod's name.
    fn name(&self) -> &str;
    /// True when some container has exclusive CPUs (non-empty `cpu_ids`), a memory block whose
    /// topology has a NUMA id ≥ 0, or a device entry with at least one device id and a NUMA id
    /// ≥ 0 (upstream's selection, docs/exporter-accounting.md). Consulted only under
    /// [`Method::WithExclusiveResources`].
    fn has_exclusive_resources(&self) -> bool;
}

/// A pod's identity as upstream's fingerprint status file spells it (capitalised keys: the Go
/// struct has no JSON tags).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NamespacedName {
    /// The namespace.
    #[serde(rename = "Namespace")]
    pub namespace: String,
    /// The name.
    #[serde(rename = "Name")]
    pub name: String,
}

/// A pods fingerprint being built: add pods in any order, then [`sign`](Self::sign).
#[derive(Debug, Clone, Default)]
pub struct Fingerprint {
    hashes: Vec<u64>,
    /// The pods added, kept only when tracing (for the status dump).
    traced: Option<Vec<NamespacedName>>,
}

impl Fingerprint {
    /// An empty fingerprint.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty fingerprint with room for `pods` pods.
    pub fn with_capacity(pods: usize) -> Self {
        Self { hashes: Vec::with_capacity(pods), traced: None }
    }

    /// An empty fingerprint that also remembers the pods added (the exporter's status dump).
    pub fn traced() -> Self {
        Self { hashes: Vec::new(), traced: Some(Vec::new()) }
    }

    /// The fingerprint of the pods `method` selects.
    pub fn from_pods<'a, P: FingerprintPod + 'a>(method: Method, pods: impl IntoIterator<Item = &'a P>) -> Self {
        let mut fingerprint = Self::new();
        for pod in pods.into_iter().filter(|pod| method.includes(*pod)) {
            fingerprint.add(pod.namespace(), pod.name());
        }
        fingerprint
    }

    /// Adds a pod. Adding the same pod twice counts it twice, as upstream does.
    pub fn add(&mut self, namespace: &str, name: &str) {
        self.hashes.push(pod_hash(namespace, name));
        if let Some(traced) = &mut self.traced {
            traced.push(NamespacedName { namespace: namespace.to_owned(), name: name.to_owned() });
        }
    }

    /// How many pods were added.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True when no pod was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The pods added, in order, if this fingerprint is [traced](Self::traced).
    pub fn pods(&self) -> Option<&[NamespacedName]> {
        self.traced.as_deref()
    }

    /// The 64-bit digest of the pod set.
    pub fn digest(&self) -> u64 {
        let mut sorted = self.hashes.clone();
        sorted.sort_unstable();
        let mut digest = Xxh64::new(0);
        for hash in sorted {
            digest.update(&hash.to_le_bytes());
        }
        digest.digest()
    }

    /// The signature: `pfp0v001` + 16 lowercase hex digits.
    pub fn sign(&self) -> String {
        format!("{PREFIX}{VERSION}{:016x}", self.digest())
    }

    /// Checks a signature (for instance the one the scheduler expects) against this pod set.
    pub fn check(&self, expected: &str) -> Result<(), CheckError> {
        let bytes = expected.as_bytes();
        if bytes.len() < MIN_SIGNATURE_LEN || !bytes.starts_with(PREFIX.as_bytes()) {
            return Err(CheckError::Malformed(expected.to_owned()));
        }
        let version = &bytes[PREFIX.len()..PREFIX.len() + VERSION.len()];
        if version != VERSION.as_bytes() {
            return Err(CheckError::IncompatibleVersion { found: String::from_utf8_lossy(version).into_owned() });
        }
        let computed = self.sign();
        if expected != computed {
            return Err(CheckError::Mismatch { expected: expected.to_owned(), computed });
        }
        Ok(())
    }
}

/// The hash of one pod: `XXH64(name, seed = XXH64(namespace, 0))`.
pub fn pod_hash(namespace: &str, name: &str) -> u64 {
    xxh64(name.as_bytes(), xxh64(namespace.as_bytes(), 0))
}

#[cfg(test)]
mod tests;
