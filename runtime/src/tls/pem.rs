//! PEM decoding with this crate's errors (rustls-pki-types does the parsing).

use std::path::Path;

use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::tls::Error;

/// Reads a whole file, naming it in the error.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read { path: path.to_owned(), source })
}

/// Every `CERTIFICATE` section, in order; other sections are skipped. At least one is required.
pub(crate) fn certificates(pem: &[u8], origin: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs =
        CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|err| malformed(err, origin))?;
    if certs.is_empty() {
        return Err(Error::NoCertificate { origin: origin.to_owned() });
    }
    Ok(certs)
}

/// The first private key: PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE KEY`) or SEC1
/// (`EC PRIVATE KEY`, which OLM writes). Other sections, such as the `EC PARAMETERS` block
/// `openssl ecparam -genkey` puts first, are skipped.
pub(crate) fn private_key(pem: &[u8], origin: &str) -> Result<PrivateKeyDer<'static>, Error> {
    match PrivateKeyDer::from_pem_slice(pem) {
        Ok(key) => Ok(key),
        // Name the common unsupported form instead of saying "no key".
        Err(pem::Error::NoItemsFound) if contains(pem, b"-----BEGIN ENCRYPTED PRIVATE KEY-----") => {
            Err(Error::UnsupportedKey {
                origin: origin.to_owned(),
                reason: "the key is encrypted; mount it unencrypted (PKCS#8, PKCS#1 or SEC1)".to_owned(),
            })
        }
        Err(pem::Error::NoItemsFound) => Err(Error::NoPrivateKey { origin: origin.to_owned() }),
        Err(err) => Err(malformed(err, origin)),
    }
}

fn malformed(err: pem::Error, origin: &str) -> Error {
    Error::MalformedPem { origin: origin.to_owned(), reason: err.to_string() }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}
