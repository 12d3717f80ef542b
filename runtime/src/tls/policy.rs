//! The TLS policy a cluster asks of its servers: a minimum protocol version and the TLS 1.2
//! cipher suites, named as Go's `crypto/tls` and Kubernetes flags name them
//! (`--tls-min-version=VersionTLS12`, `--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,…`).
//!
//! Operators render these flags from the cluster's TLS profile (OpenShift's `APIServer`
//! `tlsSecurityProfile`), so a server of ours must accept every name such a profile can carry.
//! As in Go, the list constrains TLS 1.2 only; TLS 1.3 suites are fixed and their names are
//! accepted and ignored. Names of suites rustls never implements (CBC, 3DES, RC4: the legacy ones
//! an "Old" profile lists) are accepted and skipped, since serving fewer weak suites than asked is
//! what the profile means; a name that is no cipher suite at all is an error.

use std::sync::Arc;

use rustls::SupportedCipherSuite;
use rustls::crypto::CryptoProvider;
use rustls::crypto::ring::cipher_suite as ring;

use crate::tls::Error;

/// The oldest TLS version a server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3 (our default, and the oldest rustls speaks).
    #[default]
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl TlsVersion {
    /// Parses a Go version name (`VersionTLS12`, `VersionTLS13`). `VersionTLS10` and
    /// `VersionTLS11` are refused: rustls does not speak them and silently raising the floor
    /// would hide a misconfiguration.
    pub fn parse(name: &str) -> Result<Self, Error> {
        match name.trim() {
            "VersionTLS12" => Ok(Self::Tls12),
            "VersionTLS13" => Ok(Self::Tls13),
            "VersionTLS10" | "VersionTLS11" => {
                Err(Error::TlsPolicy(format!("{name} is not supported: the oldest TLS version served is VersionTLS12")))
            }
            other => {
                Err(Error::TlsPolicy(format!("unknown TLS version {other:?}: expected VersionTLS12 or VersionTLS13")))
            }
        }
    }
}

/// A minimum TLS version and, optionally, the TLS 1.2 cipher suites allowed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsPolicy {
    min_version: TlsVersion,
    /// `None`: every suite the provider implements.
    tls12_suites: Option<Vec<SupportedCipherSuite>>,
}

/// TLS 1.3 suite names (Go's spelling): accepted, never restricted.
const TLS13_NAMES: &[&str] = &["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"];

/// IANA/Go names of TLS 1.0–1.2 suites that exist but that rustls does not implement.
const UNIMPLEMENTED_NAMES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// The TLS 1.2 suites rustls implements, under every name Go accepts for them.
fn implemented(name: &str) -> Option<SupportedCipherSuite> {
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => ring::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => ring::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            ring::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => ring::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => ring::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            ring::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        _ => return None,
    })
}

impl TlsPolicy {
    /// From the two flag values; empty strings mean "not given" (operators render empty values
    /// for TLS 1.3-only profiles).
    pub fn from_flags(min_version: Option<&str>, cipher_suites: Option<&str>) -> Result<Self, Error> {
        let min_version = match min_version.map(str::trim).filter(|v| !v.is_empty()) {
            Some(name) => TlsVersion::parse(name)?,
            None => TlsVersion::default(),
        };
        let names: Vec<&str> =
            cipher_suites.unwrap_or("").split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        if names.is_empty() {
            return Ok(Self { min_version, tls12_suites: None });
        }
        let mut suites = Vec::new();
        for name in names {
            if let Some(suite) = implemented(name) {
                if !suites.contains(&suite) {
                    suites.push(suite);
                }
            } else if TLS13_NAMES.contains(&name) || UNIMPLEMENTED_NAMES.contains(&name) {
                // Accepted (see the module comment), nothing to enable.
            } else {
                return Err(Error::TlsPolicy(format!("unknown cipher suite {name:?}")));
            }
        }
        if suites.is_empty() && min_version == TlsVersion::Tls12 {
            return Err(Error::TlsPolicy(
                "none of the listed cipher suites can serve TLS 1.2 (only ECDHE with AES-GCM or \
                 ChaCha20-Poly1305 are implemented); list one of them or set the minimum version to VersionTLS13"
                    .to_owned(),
            ));
        }
        Ok(Self { min_version, tls12_suites: Some(suites) })
    }

    /// The oldest version served.
    pub fn min_version(&self) -> TlsVersion {
        self.min_version
    }

    /// The protocol versions to enable, newest first.
    pub(crate) fn versions(&self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static TLS12_AND_13: [&rustls::SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self.min_version {
            TlsVersion::Tls12 => &TLS12_AND_13,
            TlsVersion::Tls13 => &TLS13_ONLY,
        }
    }

    /// `base` with its TLS 1.2 suites narrowed to the allowed ones (TLS 1.3 suites kept).
    pub(crate) fn provider(&self, base: &Arc<CryptoProvider>) -> Arc<CryptoProvider> {
        let Some(allowed) = &self.tls12_suites else { return Arc::clone(base) };
        let mut provider = CryptoProvider::clone(base);
        provider.cipher_suites.retain(|suite| suite.tls13().is_some() || allowed.contains(suite));
        Arc::new(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_go_names_them() {
        assert_eq!(TlsVersion::parse("VersionTLS12").unwrap(), TlsVersion::Tls12);
        assert_eq!(TlsVersion::parse("VersionTLS13").unwrap(), TlsVersion::Tls13);
        assert!(TlsVersion::parse("VersionTLS11").unwrap_err().to_string().contains("oldest TLS version"));
        assert!(TlsVersion::parse("1.3").unwrap_err().to_string().contains("unknown TLS version"));
    }

    #[test]
    fn empty_flags_mean_the_defaults() {
        let policy = TlsPolicy::from_flags(Some(""), Some("")).unwrap();
        assert_eq!(policy, TlsPolicy::default());
        assert_eq!(policy.versions().len(), 2);
    }

    #[test]
    fn the_intermediate_profile_keeps_exactly_its_tls12_suites() {
        // OpenShift's Intermediate profile, as operators render it.
        let flag = "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,\
                    TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,\
                    TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,\
                    TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256";
        let policy = TlsPolicy::from_flags(Some("VersionTLS12"), Some(flag)).unwrap();
        let provider = policy.provider(&crate::tls::config::provider());
        assert_eq!(provider.cipher_suites.len(), 9, "3 TLS 1.3 + 6 TLS 1.2");
    }

    #[test]
    fn a_narrow_list_narrows_tls12_and_leaves_tls13_alone() {
        let policy =
            TlsPolicy::from_flags(None, Some("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_RSA_WITH_AES_128_CBC_SHA"))
                .unwrap();
        let provider = policy.provider(&crate::tls::config::provider());
        let tls12: Vec<_> = provider.cipher_suites.iter().filter(|s| s.tls13().is_none()).collect();
        assert_eq!(tls12.len(), 1);
        assert_eq!(provider.cipher_suites.iter().filter(|s| s.tls13().is_some()).count(), 3);
    }

    #[test]
    fn bad_lists_are_refused_with_the_reason() {
        let unknown = TlsPolicy::from_flags(None, Some("TLS_FANCY")).unwrap_err().to_string();
        assert!(unknown.contains("unknown cipher suite \"TLS_FANCY\""), "{unknown}");
        let only_cbc = TlsPolicy::from_flags(None, Some("TLS_RSA_WITH_AES_128_CBC_SHA")).unwrap_err().to_string();
        assert!(only_cbc.contains("none of the listed cipher suites"), "{only_cbc}");
        // The same list is fine when TLS 1.2 is off anyway.
        TlsPolicy::from_flags(Some("VersionTLS13"), Some("TLS_RSA_WITH_AES_128_CBC_SHA")).unwrap();
    }
}
