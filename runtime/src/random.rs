//! Random words for names that must not repeat across processes (tokens, identities' suffixes,
//! stream names): no cryptographic strength is asked of them, so no generator crate either.

use std::hash::{BuildHasher, Hasher};

/// 64 random bits, from the std hasher's per-process random keys and the clock, told apart by
/// `salt` within one call site.
pub fn random_word(salt: u64) -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(salt);
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn words_differ_between_calls_and_salts() {
        let words: std::collections::BTreeSet<u64> = (0..100).map(|i| super::random_word(i % 2)).collect();
        assert_eq!(words.len(), 100);
    }
}
