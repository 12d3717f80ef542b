//! The `configmap.hash` value: changes whenever the configuration a pod reads changes, so a new
//! value in the pod template rolls the pods (the exporter DaemonSets and the scheduler
//! Deployment carry it as the `configmap.hash` annotation).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `SHA256:<hex>` over the map's keys and values in key order (upstream's format).
pub fn config_hash(data: &BTreeMap<String, String>) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for (key, value) in data {
        // Length-prefixed, so {"ab": "c"} and {"a": "bc"} hash differently.
        context.update(&(key.len() as u64).to_be_bytes());
        context.update(key.as_bytes());
        context.update(&(value.len() as u64).to_be_bytes());
        context.update(value.as_bytes());
    }
    let digest = context.finish();
    let mut text = String::with_capacity(7 + 64);
    text.push_str("SHA256:");
    for byte in digest.as_ref() {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn hash_is_stable_and_sensitive_to_every_byte_and_boundary() {
        let a = config_hash(&map(&[("config.yaml", "kubelet: {}")]));
        assert_eq!(a, config_hash(&map(&[("config.yaml", "kubelet: {}")])));
        assert!(a.starts_with("SHA256:") && a.len() == 7 + 64, "{a}");
        assert_ne!(a, config_hash(&map(&[("config.yaml", "kubelet: {} ")])));
        assert_ne!(config_hash(&map(&[("ab", "c")])), config_hash(&map(&[("a", "bc")])));
        assert_ne!(config_hash(&BTreeMap::new()), a);
    }
}
