//! A serving certificate chain and its private key, loaded from PEM and checked to belong together.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::sign::CertifiedKey;
use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

use crate::tls::Error;
use crate::tls::pem;

/// The period in which a certificate is valid (its notBefore and notAfter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// notBefore.
    pub not_before: SystemTime,
    /// notAfter.
    pub not_after: SystemTime,
}

impl Validity {
    /// Whether `now` lies inside the period (both ends inclusive, as X.509 defines it).
    pub fn contains(&self, now: SystemTime) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// A certificate chain (end entity first) with its private key, ready for rustls.
///
/// Construction checks that the key is usable and matches the end-entity certificate, and reads
/// the validity period; it does **not** refuse a certificate for being expired or not yet valid.
/// That is a policy decision left to the caller: see [`ServingCertificate::check_valid_at`] and
/// the policy documented on [`crate::tls::ReloadingCertificate`].
#[derive(Clone, Debug)]
pub struct ServingCertificate {
    key: Arc<CertifiedKey>,
    validity: Validity,
    names: Vec<String>,
    origin: String,
}

impl ServingCertificate {
    /// Loads a chain and key from two PEM files (they may be the same file).
    pub fn from_files(cert_path: &Path, key_path: &Path) -> Result<Self, Error> {
        let cert_pem = pem::read_file(cert_path)?;
        let key_pem = pem::read_file(key_path)?;
        Self::from_pem_with_origin(
            &cert_pem,
            &key_pem,
            &cert_path.display().to_string(),
            &key_path.display().to_string(),
        )
    }

    /// Builds from PEM bytes: the chain (end entity first) and the private key (PKCS#8, PKCS#1
    /// or SEC1).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, Error> {
        Self::from_pem_with_origin(cert_pem, key_pem, "certificate PEM", "key PEM")
    }

    pub(crate) fn from_pem_with_origin(
        cert_pem: &[u8],
        key_pem: &[u8],
        cert_origin: &str,
        key_origin: &str,
    ) -> Result<Self, Error> {
        let chain = pem::certificates(cert_pem, cert_origin)?;
        let key_der = pem::private_key(key_pem, key_origin)?;
        let (validity, names) = describe(&chain[0], cert_origin)?;

        let signing_key = crate::tls::config::provider()
            .key_provider
            .load_private_key(key_der)
            .map_err(|err| Error::UnsupportedKey { origin: key_origin.to_owned(), reason: err.to_string() })?;
        let key = CertifiedKey::new(chain, signing_key);
        match key.keys_match() {
            Ok(()) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                return Err(Error::KeyMismatch { cert: cert_origin.to_owned(), key: key_origin.to_owned() });
            }
            // The key cannot tell its public half; ring's keys always can, so this is unexpected
            // but not a reason to refuse: a real mismatch still fails every handshake loudly.
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
                tracing::warn!(
                    cert = cert_origin,
                    key = key_origin,
                    "cannot check that the key matches the certificate"
                );
            }
            Err(err) => {
                return Err(Error::MalformedCertificate { origin: cert_origin.to_owned(), reason: err.to_string() });
            }
        }
        Ok(Self { key: Arc::new(key), validity, names, origin: cert_origin.to_owned() })
    }

    /// What rustls serves.
    pub fn certified_key(&self) -> &Arc<CertifiedKey> {
        &self.key
    }

    /// The chain as loaded, end entity first.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.key.cert
    }

    /// The end-entity certificate's validity period.
    pub fn validity(&self) -> Validity {
        self.validity
    }

    /// The end-entity certificate's subjectAltNames: DNS names as written, IP addresses as text.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// `Err(Expired)` or `Err(NotYetValid)` unless `now` lies inside the validity period.
    pub fn check_valid_at(&self, now: SystemTime) -> Result<(), Error> {
        if now > self.validity.not_after {
            Err(Error::Expired { origin: self.origin.clone(), not_after: self.validity.not_after })
        } else if now < self.validity.not_before {
            Err(Error::NotYetValid { origin: self.origin.clone(), not_before: self.validity.not_before })
        } else {
            Ok(())
        }
    }
}

/// The validity period and subjectAltNames of a DER certificate.
fn describe(cert: &CertificateDer<'_>, origin: &str) -> Result<(Validity, Vec<String>), Error> {
    let malformed = |reason: String| Error::MalformedCertificate { origin: origin.to_owned(), reason };
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).map_err(|err| malformed(err.to_string()))?;
    let validity = parsed.validity();
    let validity = Validity {
        not_before: crate::tls::time::from_unix_seconds(validity.not_before.timestamp()),
        not_after: crate::tls::time::from_unix_seconds(validity.not_after.timestamp()),
    };
    let names = match parsed.subject_alternative_name().map_err(|err| malformed(err.to_string()))? {
        None => Vec::new(),
        Some(san) => san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                GeneralName::IPAddress(bytes) => ip_text(bytes),
                _ => None,
            })
            .collect(),
    };
    Ok((validity, names))
}

fn ip_text(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(|ip| std::net::Ipv4Addr::from(ip).to_string()),
        16 => <[u8; 16]>::try_from(bytes).ok().map(|ip| std::net::Ipv6Addr::from(ip).to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tls::CertificateAuthority;

    const RSA_CERT: &[u8] = include_bytes!("../../tests/data/rsa.crt");
    const RSA_PKCS1_KEY: &[u8] = include_bytes!("../../tests/data/rsa-pkcs1.key");

    fn issued(names: &[&str]) -> crate::tls::PemPair {
        let ca = CertificateAuthority::generate("test-ca", Duration::from_secs(3600)).unwrap();
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        ca.issue_serving(&names, Duration::from_secs(3600)).unwrap()
    }

    /// Rewrites a PKCS#8 P-256 key as SEC1 the way Go's `x509.MarshalECPrivateKey` (and so OLM)
    /// writes it: with the curve parameters and the public key.
    fn pkcs8_to_sec1_pem(pkcs8_pem: &str) -> String {
        use rustls_pki_types::PrivatePkcs8KeyDer;
        use rustls_pki_types::pem::PemObject;
        let pkcs8 = PrivatePkcs8KeyDer::from_pem_slice(pkcs8_pem.as_bytes()).unwrap();
        let (private, public) = test_der::p256_parts(pkcs8.secret_pkcs8_der());
        let sec1 = test_der::sec1(&private, &public);
        let body = test_der::base64(&sec1);
        let lines: Vec<&str> = body.as_bytes().chunks(64).map(|line| std::str::from_utf8(line).unwrap()).collect();
        format!("-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n", lines.join("\n"))
    }

    #[test]
    fn a_pkcs8_ecdsa_key_loads() {
        let pair = issued(&["svc.ns.svc"]);
        assert!(pair.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        let cert = ServingCertificate::from_pem(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes()).unwrap();
        assert_eq!(cert.names(), ["svc.ns.svc"]);
        assert_eq!(cert.chain().len(), 1);
    }

    #[test]
    fn a_sec1_ecdsa_key_with_curve_parameters_loads() {
        let pair = issued(&["svc.ns.svc"]);
        let sec1 = pkcs8_to_sec1_pem(&pair.key_pem);
        assert!(sec1.starts_with("-----BEGIN EC PRIVATE KEY-----"));
        ServingCertificate::from_pem(pair.cert_pem.as_bytes(), sec1.as_bytes()).unwrap();
    }

    #[test]
    fn a_sec1_key_mismatching_the_certificate_is_reported_as_a_mismatch() {
        let (one, other) = (issued(&["a.example"]), issued(&["b.example"]));
        let err = ServingCertificate::from_pem(one.cert_pem.as_bytes(), pkcs8_to_sec1_pem(&other.key_pem).as_bytes())
            .unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { .. }), "{err}");
    }

    #[test]
    fn a_pkcs1_rsa_key_loads() {
        assert!(RSA_PKCS1_KEY.starts_with(b"-----BEGIN RSA PRIVATE KEY-----"));
        let cert = ServingCertificate::from_pem(RSA_CERT, RSA_PKCS1_KEY).unwrap();
        assert_eq!(cert.names(), ["localhost", "127.0.0.1"]);
    }

    #[test]
    fn ec_parameters_before_the_key_and_cert_and_key_in_one_file_load() {
        let pair = issued(&["svc.ns.svc"]);
        let params = "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n";
        let combined = format!("{params}{}{}", pair.cert_pem, pair.key_pem);
        ServingCertificate::from_pem(combined.as_bytes(), combined.as_bytes()).unwrap();
    }

    #[test]
    fn a_key_of_another_certificate_is_a_mismatch() {
        let (one, other) = (issued(&["a.example"]), issued(&["b.example"]));
        let err = ServingCertificate::from_pem(one.cert_pem.as_bytes(), other.key_pem.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { .. }), "{err}");
        let err = ServingCertificate::from_pem(RSA_CERT, one.key_pem.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { .. }), "{err}");
    }

    #[test]
    fn empty_input_has_no_certificate_and_no_key() {
        let pair = issued(&["a.example"]);
        let err = ServingCertificate::from_pem(b"", pair.key_pem.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::NoCertificate { .. }), "{err}");
        let err = ServingCertificate::from_pem(pair.cert_pem.as_bytes(), b"").unwrap_err();
        assert!(matches!(err, Error::NoPrivateKey { .. }), "{err}");
    }

    #[test]
    fn garbage_is_reported_without_panicking() {
        let pair = issued(&["a.example"]);
        let garbage: &[u8] = b"\x00\xffnot pem at all\n\x13\x37";
        let err = ServingCertificate::from_pem(garbage, pair.key_pem.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::NoCertificate { .. }), "{err}");
        let err = ServingCertificate::from_pem(pair.cert_pem.as_bytes(), garbage).unwrap_err();
        assert!(matches!(err, Error::NoPrivateKey { .. }), "{err}");

        let bad_base64 = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        let err = ServingCertificate::from_pem(bad_base64.as_bytes(), pair.key_pem.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::MalformedPem { .. }), "{err}");

        let not_x509 = "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n";
        let err = ServingCertificate::from_pem(not_x509.as_bytes(), pair.key_pem.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::MalformedCertificate { .. }), "{err}");

        let unterminated = "-----BEGIN PRIVATE KEY-----\nAAECAwQF\n";
        let err = ServingCertificate::from_pem(pair.cert_pem.as_bytes(), unterminated.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::MalformedPem { .. }), "{err}");

        let not_a_key = "-----BEGIN PRIVATE KEY-----\nAAECAwQF\n-----END PRIVATE KEY-----\n";
        let err = ServingCertificate::from_pem(pair.cert_pem.as_bytes(), not_a_key.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::UnsupportedKey { .. }), "{err}");
    }

    #[test]
    fn an_encrypted_key_is_named_as_such() {
        let pair = issued(&["a.example"]);
        let encrypted = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAECAwQF\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let err = ServingCertificate::from_pem(pair.cert_pem.as_bytes(), encrypted.as_bytes()).unwrap_err();
        assert!(matches!(&err, Error::UnsupportedKey { reason, .. } if reason.contains("encrypted")), "{err}");
    }

    #[test]
    fn missing_files_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("tls.crt");
        let err = ServingCertificate::from_files(&missing, &missing).unwrap_err();
        assert!(matches!(&err, Error::Read { path, .. } if *path == missing), "{err}");
        assert!(err.to_string().contains("tls.crt"), "{err}");
    }

    #[test]
    fn an_expired_certificate_loads_but_fails_the_validity_check() {
        let ca = CertificateAuthority::generate("test-ca", Duration::from_secs(3600)).unwrap();
        let pair = ca.issue_serving(&["a.example".to_owned()], Duration::from_secs(3600)).unwrap();
        let cert = ServingCertificate::from_pem(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes()).unwrap();
        let validity = cert.validity();
        assert!(validity.contains(SystemTime::now()));
        cert.check_valid_at(SystemTime::now()).unwrap();

        let later = validity.not_after + Duration::from_secs(1);
        let err = cert.check_valid_at(later).unwrap_err();
        assert!(matches!(err, Error::Expired { not_after, .. } if not_after == validity.not_after), "{err}");
        assert!(err.to_string().contains("expired at"), "{err}");

        let earlier = validity.not_before - Duration::from_secs(1);
        let err = cert.check_valid_at(earlier).unwrap_err();
        assert!(matches!(err, Error::NotYetValid { .. }), "{err}");
    }

    /// Just enough DER to turn ring's PKCS#8 P-256 key into SEC1 for the tests above.
    mod test_der {
        /// Reads one TLV at the start of `input`: (tag, value, rest).
        fn tlv(input: &[u8]) -> (u8, &[u8], &[u8]) {
            let tag = input[0];
            let (len, header) = match input[1] {
                short if short < 0x80 => (usize::from(short), 2),
                0x81 => (usize::from(input[2]), 3),
                0x82 => (usize::from(input[2]) << 8 | usize::from(input[3]), 4),
                other => panic!("unexpected DER length byte {other:#x}"),
            };
            (tag, &input[header..header + len], &input[header + len..])
        }

        fn encode(tag: u8, value: &[u8]) -> Vec<u8> {
            let mut out = vec![tag];
            if value.len() < 0x80 {
                out.push(u8::try_from(value.len()).unwrap());
            } else {
                out.push(0x81);
                out.push(u8::try_from(value.len()).unwrap());
            }
            out.extend_from_slice(value);
            out
        }

        /// (private scalar, uncompressed public point) of a PKCS#8 P-256 key as ring writes it.
        pub(super) fn p256_parts(pkcs8: &[u8]) -> (Vec<u8>, Vec<u8>) {
            let (_, info, _) = tlv(pkcs8); // PrivateKeyInfo
            let (_, _, rest) = tlv(info); // version
            let (_, _, rest) = tlv(rest); // algorithm
            let (_, octets, _) = tlv(rest); // privateKey OCTET STRING
            let (_, ec, _) = tlv(octets); // ECPrivateKey
            let (_, _, rest) = tlv(ec); // version
            let (_, private, mut rest) = tlv(rest);
            loop {
                let (tag, value, next) = tlv(rest);
                if tag == 0xa1 {
                    let (_, bits, _) = tlv(value);
                    return (private.to_vec(), bits[1..].to_vec()); // skip the unused-bits byte
                }
                rest = next;
            }
        }

        /// SEC1 ECPrivateKey with version, key, [0] namedCurve prime256v1 and [1] public key.
        pub(super) fn sec1(private: &[u8], public: &[u8]) -> Vec<u8> {
            const PRIME256V1: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
            let mut bits = vec![0];
            bits.extend_from_slice(public);
            let mut body = vec![0x02, 0x01, 0x01];
            body.extend(encode(0x04, private));
            body.extend(encode(0xa0, PRIME256V1));
            body.extend(encode(0xa1, &encode(0x03, &bits)));
            encode(0x30, &body)
        }

        pub(super) fn base64(bytes: &[u8]) -> String {
            const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut out = String::new();
            for chunk in bytes.chunks(3) {
                let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
                let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
                for i in 0..4 {
                    if i <= chunk.len() {
                        out.push(char::from(ALPHABET[usize::try_from((n >> (18 - 6 * i)) & 63).unwrap()]));
                    } else {
                        out.push('=');
                    }
                }
            }
            out
        }
    }
}
