//! The one error type of this crate.

use std::path::PathBuf;
use std::time::SystemTime;

/// Why a certificate, key, CA bundle or TLS configuration could not be loaded, generated or used.
///
/// `origin` fields name where the bytes came from (a file path, or a short label for in-memory
/// PEM) so that a log line alone tells an operator which file to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read (missing, unreadable, a dangling symlink, ...).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },

    /// A file or directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },

    /// The PEM text itself is broken (bad base64, a section without its END line, ...).
    #[error("malformed PEM in {origin}: {reason}")]
    MalformedPem {
        /// Where the PEM came from.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },

    /// No `CERTIFICATE` section was found.
    #[error("no PEM certificate found in {origin}")]
    NoCertificate {
        /// Where the PEM came from.
        origin: String,
    },

    /// A certificate is not valid DER X.509.
    #[error("malformed certificate in {origin}: {reason}")]
    MalformedCertificate {
        /// Where the certificate came from.
        origin: String,
        /// What the parser said.
        reason: String,
    },

    /// No private key section was found.
    #[error(
        "no private key found in {origin} (expected a PEM \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\")"
    )]
    NoPrivateKey {
        /// Where the PEM came from.
        origin: String,
    },

    /// A private key was found but cannot be used (encrypted, unknown algorithm or curve, ...).
    #[error("unsupported private key in {origin}: {reason}")]
    UnsupportedKey {
        /// Where the key came from.
        origin: String,
        /// Why it cannot be used.
        reason: String,
    },

    /// The private key does not belong to the certificate's public key.
    #[error("the private key in {key} does not match the certificate in {cert}")]
    KeyMismatch {
        /// Where the certificate came from.
        cert: String,
        /// Where the key came from.
        key: String,
    },

    /// The certificate's notAfter is in the past.
    #[error("the certificate in {origin} expired at {}", crate::tls::time::rfc3339(*not_after))]
    Expired {
        /// Where the certificate came from.
        origin: String,
        /// Its notAfter.
        not_after: SystemTime,
    },

    /// The certificate's notBefore is in the future (often a clock skew between issuer and us).
    #[error("the certificate in {origin} is not valid before {}", crate::tls::time::rfc3339(*not_before))]
    NotYetValid {
        /// Where the certificate came from.
        origin: String,
        /// Its notBefore.
        not_before: SystemTime,
    },

    /// A client CA bundle is unusable.
    #[error("invalid client CA bundle: {reason}")]
    InvalidCaBundle {
        /// Why.
        reason: String,
    },

    /// A certificate authority cannot be loaded or cannot issue.
    #[error("invalid certificate authority: {reason}")]
    InvalidCa {
        /// Why.
        reason: String,
    },

    /// A certificate was asked for without any name to put in its subjectAltName.
    #[error("a serving certificate needs at least one DNS name or IP address")]
    NoSubjectAltNames,

    /// rcgen refused to generate or sign a certificate.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),

    /// A minimum TLS version or cipher suite list that cannot be honoured.
    #[error("TLS policy: {0}")]
    TlsPolicy(String),

    /// The TLS library refused the configuration.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),

    /// Work that needs a tokio runtime was started outside one.
    #[error("{0} must be called from within a tokio runtime")]
    NoRuntime(&'static str),
}
