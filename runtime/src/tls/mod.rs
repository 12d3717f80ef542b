//! TLS and PKI for every numaresources server and client.
//!
//! One code path serves certificates from any source (OLM-mounted files, cert-manager or
//! service-ca Secrets, or certificates we generate ourselves):
//!
//! - [`ServingCertificate`] loads a PEM chain and key (PKCS#8, PKCS#1 or SEC1) and checks that
//!   they belong together;
//! - [`ReloadingCertificate`] serves the current pair from disk and follows changes without a
//!   restart (directory watch for the kubelet's `..data` swap, plus polling), keeping the old
//!   pair when a new one does not load; until the files exist it can serve a generated
//!   fallback ([`ReloadingCertificate::load_or_fallback`]) and switches once they appear;
//! - [`ClientCaVerifier`] and [`CaBundle`] verify optional client certificates against CA
//!   bundles that can be replaced at runtime (front proxy and client CAs);
//! - [`ServerConfigBuilder`] assembles the rustls `ServerConfig` (TLS 1.2+, ALPN, ring provider
//!   passed explicitly);
//! - [`crate::serve`] runs an axum `Router` over it, with the peer's identity
//!   ([`crate::PeerInfo`]) on every request;
//! - [`CertificateAuthority`], [`self_signed`] and [`ensure_self_signed`] generate certificates
//!   with rcgen;
//! - [`rotation`] decides, for self-managed certificates, when to create, renew and rotate them so
//!   that no handshake fails while new bundles and Secrets propagate;
//! - [`own_client`] builds the clients of our own servers (the replicas' peers, the exporters'
//!   direct path), which trust the named CA file and nothing else.

mod certificate;
mod client_auth;
pub(crate) mod config;
mod error;
mod generate;
pub mod own_client;
pub(crate) mod pem;
mod policy;
mod reload;
pub mod rotation;
pub(crate) mod time;

pub use certificate::{ServingCertificate, Validity};
pub use client_auth::{CaBundle, ClientCaVerifier};
pub use config::ServerConfigBuilder;
pub use error::Error;
pub use generate::{
    CertificateAuthority, PemPair, SELF_SIGNED_MIN_REMAINING, SELF_SIGNED_VALIDITY, SelfSignedFiles,
    ensure_self_signed, load_self_signed, self_signed,
};
pub use policy::{TlsPolicy, TlsVersion};
pub use reload::{CertificateWatcher, Reloaded, ReloadingCertificate, WatchOptions, follow_files};
