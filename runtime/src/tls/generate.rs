//! Certificates we make ourselves with rcgen: a CA that issues serving and client certificates,
//! and kube-apiserver's `--cert-dir` self-signed fallback.
//!
//! Keys are ECDSA P-256 in PKCS#8 PEM. Every certificate starts one hour in the past, as
//! Kubernetes' own helpers do, so a peer whose clock runs a little behind still accepts it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use crate::tls::{Error, ServingCertificate};

/// How far back every certificate's notBefore is set, for clock skew between peers.
pub(crate) const BACKDATE: Duration = Duration::from_secs(3600);

/// Validity of the `--cert-dir` self-signed certificate (kube-apiserver uses one year too).
pub const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A `--cert-dir` certificate closer than this to its notAfter is regenerated instead of reused,
/// so that a restart always yields one that lasts a while.
pub const SELF_SIGNED_MIN_REMAINING: Duration = Duration::from_secs(30 * 24 * 3600);

/// A certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    /// The certificate (`CERTIFICATE`), leaf only: the issuing CA goes into `caBundle`, not here.
    pub cert_pem: String,
    /// The private key (`PRIVATE KEY`, PKCS#8).
    pub key_pem: String,
}

impl fmt::Debug for PemPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a private key, even in a debug log.
        f.debug_struct("PemPair").field("cert_pem", &self.cert_pem).field("key_pem", &"<redacted>").finish()
    }
}

impl PemPair {
    /// Writes both files atomically (a temporary file renamed over the target); the key with mode
    /// 0600, the certificate with 0644.
    pub fn write(&self, cert_path: &Path, key_path: &Path) -> Result<(), Error> {
        write_atomically(key_path, self.key_pem.as_bytes(), 0o600)?;
        write_atomically(cert_path, self.cert_pem.as_bytes(), 0o644)
    }
}

/// A certificate authority that issues serving and client certificates.
pub struct CertificateAuthority {
    cert_pem: String,
    not_after: SystemTime,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("not_after", &crate::tls::time::rfc3339(self.not_after))
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// A new self-signed CA named `common_name`, valid for `validity` from now.
    pub fn generate(common_name: &str, validity: Duration) -> Result<Self, Error> {
        Self::generate_at(common_name, SystemTime::now(), validity)
    }

    /// [`Self::generate`] as if the clock read `now` (planned rotations and their tests).
    pub fn generate_at(common_name: &str, now: SystemTime, validity: Duration) -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        set_validity(&mut params, now, validity);
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            not_after: crate::tls::time::from_unix_seconds(params.not_after.unix_timestamp()),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA from its certificate and PKCS#8 key (what [`Self::cert_pem`] and
    /// [`Self::key_pem`] give). Refuses a key that does not match, a certificate that is not a
    /// CA, and an expired CA (nothing it issued would verify).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        Self::from_pem_at(cert_pem, key_pem, SystemTime::now())
    }

    /// [`Self::from_pem`] as if the clock read `now` (planned rotations and their tests).
    pub fn from_pem_at(cert_pem: &str, key_pem: &str, now: SystemTime) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidCa { reason };
        let der = crate::tls::pem::certificates(cert_pem.as_bytes(), "CA certificate")?.swap_remove(0);
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).map_err(|err| Error::MalformedCertificate {
            origin: "CA certificate".to_owned(),
            reason: err.to_string(),
        })?;
        let is_ca = parsed.basic_constraints().ok().flatten().is_some_and(|constraints| constraints.value.ca);
        if !is_ca {
            return Err(invalid("the certificate is not a CA (basicConstraints CA:TRUE is missing)".to_owned()));
        }
        let key = KeyPair::from_pem(key_pem).map_err(|err| {
            invalid(format!("the CA key cannot be used (PKCS#8 ECDSA, Ed25519 or RSA expected): {err}"))
        })?;
        if key.public_key_raw() != parsed.public_key().subject_public_key.data.as_ref() {
            return Err(Error::KeyMismatch { cert: "CA certificate".to_owned(), key: "CA key".to_owned() });
        }
        let not_after = crate::tls::time::from_unix_seconds(parsed.validity().not_after.timestamp());
        if now > not_after {
            return Err(Error::Expired { origin: "CA certificate".to_owned(), not_after });
        }
        let issuer = Issuer::from_ca_cert_der(&der, key)?;
        Ok(Self { cert_pem: cert_pem.to_owned(), not_after, issuer })
    }

    /// The CA certificate, PEM: what goes into `caBundle`.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// When the CA expires.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// A serving certificate (EKU serverAuth) for `names` (DNS names or IP addresses, e.g.
    /// `svc.ns.svc` and `svc.ns.svc.cluster.local`), valid for `validity` but never past the CA.
    pub fn issue_serving(&self, names: &[String], validity: Duration) -> Result<PemPair, Error> {
        self.issue_serving_at(names, SystemTime::now(), validity)
    }

    /// [`Self::issue_serving`] as if the clock read `now`.
    pub fn issue_serving_at(&self, names: &[String], now: SystemTime, validity: Duration) -> Result<PemPair, Error> {
        let mut params = named(names)?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params, now, validity)
    }

    /// A peer certificate for replicas that talk to each other over mutual TLS: each serves it on
    /// its peer port and presents it as a client, so it carries both serverAuth and clientAuth
    /// EKUs, for `names` (the name peers verify, DNS or IP).
    pub fn issue_peer(&self, names: &[String], validity: Duration) -> Result<PemPair, Error> {
        self.issue_peer_at(names, SystemTime::now(), validity)
    }

    /// [`Self::issue_peer`] as if the clock read `now`.
    pub fn issue_peer_at(&self, names: &[String], now: SystemTime, validity: Duration) -> Result<PemPair, Error> {
        let mut params = named(names)?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, now, validity)
    }

    /// A client certificate (EKU clientAuth) in Kubernetes' convention: the user in the CN, the
    /// groups as O entries. Used by tests and tools that stand in for the front proxy.
    pub fn issue_client(&self, user: &str, groups: &[String], validity: Duration) -> Result<PemPair, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params.distinguished_name.push(DnType::OrganizationName, group.as_str());
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, SystemTime::now(), validity)
    }

    fn issue(&self, mut params: CertificateParams, now: SystemTime, validity: Duration) -> Result<PemPair, Error> {
        let remaining = self.not_after.duration_since(now).unwrap_or_default();
        set_validity(&mut params, now, validity.min(remaining));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(PemPair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// Parameters for a certificate covering `names` (subjectAltNames), named after the first.
fn named(names: &[String]) -> Result<CertificateParams, Error> {
    let first = names.first().ok_or(Error::NoSubjectAltNames)?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, first.as_str());
    Ok(params)
}

fn set_validity(params: &mut CertificateParams, now: SystemTime, validity: Duration) {
    params.not_before = crate::tls::time::offset_from_now(now.checked_sub(BACKDATE).unwrap_or(now), Duration::ZERO);
    params.not_after = crate::tls::time::offset_from_now(now, validity);
}

/// A self-signed serving certificate (not a CA) for `localhost`, `127.0.0.1` and `names`.
pub fn self_signed(names: &[String], validity: Duration) -> Result<PemPair, Error> {
    let names = self_signed_names(names);
    let mut params = CertificateParams::new(names.clone())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    // kube-apiserver names its self-signed certificate `<host>@<timestamp>`; the timestamp keeps
    // successive certificates distinguishable in logs.
    let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    params.distinguished_name.push(DnType::CommonName, format!("{}@{stamp}", names[0]));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    set_validity(&mut params, SystemTime::now(), validity);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(PemPair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

fn self_signed_names(names: &[String]) -> Vec<String> {
    let mut all = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    for name in names {
        if !all.contains(name) {
            all.push(name.clone());
        }
    }
    all
}

/// The files [`ensure_self_signed`] settled on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfSignedFiles {
    /// `<dir>/apiserver.crt`.
    pub cert_path: PathBuf,
    /// `<dir>/apiserver.key`.
    pub key_path: PathBuf,
    /// Whether they were written now (false: the existing pair was reused).
    pub generated: bool,
}

/// kube-apiserver's `--cert-dir` behaviour when no certificate files are given: use
/// `<dir>/apiserver.crt` and `<dir>/apiserver.key`, generating a self-signed pair for
/// `localhost`, `127.0.0.1` and `names` unless a usable one is already there.
///
/// An existing pair is reused when it loads, its key matches, it is valid now for at least
/// [`SELF_SIGNED_MIN_REMAINING`], and it covers every requested name; otherwise it is replaced
/// (and the reason logged).
pub fn ensure_self_signed(dir: &Path, names: &[String]) -> Result<SelfSignedFiles, Error> {
    let cert_path = dir.join("apiserver.crt");
    let key_path = dir.join("apiserver.key");
    match reusable(&cert_path, &key_path, names) {
        Ok(()) => {
            tracing::info!(cert = %cert_path.display(), "reusing the self-signed serving certificate");
            return Ok(SelfSignedFiles { cert_path, key_path, generated: false });
        }
        Err(reason) => {
            tracing::info!(cert = %cert_path.display(), %reason, "generating a self-signed serving certificate");
        }
    }
    std::fs::create_dir_all(dir).map_err(|source| Error::Write { path: dir.to_owned(), source })?;
    self_signed(names, SELF_SIGNED_VALIDITY)?.write(&cert_path, &key_path)?;
    Ok(SelfSignedFiles { cert_path, key_path, generated: true })
}

/// [`ensure_self_signed`], loaded: the fallback a server serves while its mounted certificate
/// has not appeared (see [`crate::tls::ReloadingCertificate::load_or_fallback`]).
pub fn load_self_signed(dir: &Path, names: &[String]) -> Result<ServingCertificate, Error> {
    let files = ensure_self_signed(dir, names)?;
    ServingCertificate::from_files(&files.cert_path, &files.key_path)
}

/// Why an existing `--cert-dir` pair cannot be reused, if it cannot.
fn reusable(cert_path: &Path, key_path: &Path, names: &[String]) -> Result<(), String> {
    if !cert_path.exists() && !key_path.exists() {
        return Err("no certificate there yet".to_owned());
    }
    let existing = ServingCertificate::from_files(cert_path, key_path).map_err(|err| err.to_string())?;
    let soon = SystemTime::now() + SELF_SIGNED_MIN_REMAINING;
    existing.check_valid_at(SystemTime::now()).map_err(|err| err.to_string())?;
    if existing.validity().not_after < soon {
        return Err(format!("it expires at {}", crate::tls::time::rfc3339(existing.validity().not_after)));
    }
    match self_signed_names(names).into_iter().find(|name| !existing.names().contains(name)) {
        Some(missing) => Err(format!("it does not cover {missing}")),
        None => Ok(()),
    }
}

/// Writes `contents` to a temporary file next to `path` and renames it over `path`, so a reader
/// (our own watcher included) never sees a half-written file.
fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> Result<(), Error> {
    use std::io::Write;

    let write_error = |source| Error::Write { path: path.to_owned(), source };
    let file_name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!(".{file_name}.tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary); // a leftover of a crash could carry looser permissions

    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let result = options.open(&temporary).and_then(|mut file| {
        file.write_all(contents)?;
        file.sync_all()
    });
    if let Err(source) = result.and_then(|()| std::fs::rename(&temporary, path)) {
        let _ = std::fs::remove_file(&temporary);
        return Err(write_error(source));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::{ServerName, UnixTime};

    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    /// Verifies `cert_pem` as a TLS client would for `server_name`, trusting `roots_pem`.
    fn verify_as_server(roots_pem: &str, cert_pem: &str, server_name: &str) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        for root in crate::tls::pem::certificates(roots_pem.as_bytes(), "roots").unwrap() {
            roots.add(root).unwrap();
        }
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), crate::tls::config::provider())
            .build()
            .unwrap();
        let chain = crate::tls::pem::certificates(cert_pem.as_bytes(), "leaf").unwrap();
        let name = ServerName::try_from(server_name.to_owned()).unwrap();
        verifier.verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now()).map(|_| ())
    }

    #[test]
    fn a_ca_issued_serving_certificate_verifies_for_its_dns_names_only() {
        let ca = CertificateAuthority::generate("numaresources-ca", Duration::from_secs(10 * 365 * 86_400)).unwrap();
        let pair = ca
            .issue_serving(&names(&["svc.ns.svc", "svc.ns.svc.cluster.local"]), Duration::from_secs(365 * 86_400))
            .unwrap();
        verify_as_server(ca.cert_pem(), &pair.cert_pem, "svc.ns.svc").unwrap();
        verify_as_server(ca.cert_pem(), &pair.cert_pem, "svc.ns.svc.cluster.local").unwrap();
        assert!(verify_as_server(ca.cert_pem(), &pair.cert_pem, "other.ns.svc").is_err());

        let other = CertificateAuthority::generate("other-ca", Duration::from_secs(3600)).unwrap();
        assert!(verify_as_server(other.cert_pem(), &pair.cert_pem, "svc.ns.svc").is_err());
    }

    #[test]
    fn an_issued_certificate_has_the_asked_validity_and_never_outlives_its_ca() {
        let ca = CertificateAuthority::generate("ca", Duration::from_secs(2 * 86_400)).unwrap();
        let day = ca.issue_serving(&names(&["a.example"]), Duration::from_secs(86_400)).unwrap();
        let day = ServingCertificate::from_pem(day.cert_pem.as_bytes(), day.key_pem.as_bytes()).unwrap().validity();
        let lifetime = day.not_after.duration_since(day.not_before).unwrap();
        assert_eq!(lifetime, Duration::from_secs(86_400) + BACKDATE);

        let year = ca.issue_serving(&names(&["a.example"]), Duration::from_secs(365 * 86_400)).unwrap();
        let year = ServingCertificate::from_pem(year.cert_pem.as_bytes(), year.key_pem.as_bytes()).unwrap().validity();
        assert!(year.not_after <= ca.not_after());
    }

    #[test]
    fn a_ca_survives_a_round_trip_through_pem_and_keeps_issuing() {
        let ca = CertificateAuthority::generate("ca", Duration::from_secs(3600)).unwrap();
        let loaded = CertificateAuthority::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
        let pair = loaded.issue_serving(&names(&["svc.ns.svc"]), Duration::from_secs(600)).unwrap();
        verify_as_server(ca.cert_pem(), &pair.cert_pem, "svc.ns.svc").unwrap();
    }

    #[test]
    fn loading_a_ca_refuses_a_foreign_key_and_a_leaf() {
        let ca = CertificateAuthority::generate("ca", Duration::from_secs(3600)).unwrap();
        let other = CertificateAuthority::generate("other", Duration::from_secs(3600)).unwrap();
        let err = CertificateAuthority::from_pem(ca.cert_pem(), &other.key_pem()).unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { .. }), "{err}");

        let leaf = ca.issue_serving(&names(&["a.example"]), Duration::from_secs(600)).unwrap();
        let err = CertificateAuthority::from_pem(&leaf.cert_pem, &leaf.key_pem).unwrap_err();
        assert!(matches!(err, Error::InvalidCa { .. }), "{err}");
    }

    #[test]
    fn a_peer_certificate_serves_its_names_and_authenticates_as_a_client() {
        let ca = CertificateAuthority::generate("peer-ca", Duration::from_secs(3600)).unwrap();
        let pair = ca.issue_peer(&names(&["localhost", "127.0.0.1"]), Duration::from_secs(600)).unwrap();
        verify_as_server(ca.cert_pem(), &pair.cert_pem, "localhost").unwrap();
        verify_as_server(ca.cert_pem(), &pair.cert_pem, "127.0.0.1").unwrap();
        let der = crate::tls::pem::certificates(pair.cert_pem.as_bytes(), "peer").unwrap().swap_remove(0);
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        let usages = parsed.extended_key_usage().unwrap().unwrap().value;
        assert!(usages.server_auth && usages.client_auth, "{usages:?}");
        assert!(ca.issue_peer(&[], Duration::from_secs(600)).is_err());
    }

    #[test]
    fn a_serving_certificate_needs_a_name() {
        let ca = CertificateAuthority::generate("ca", Duration::from_secs(3600)).unwrap();
        let err = ca.issue_serving(&[], Duration::from_secs(600)).unwrap_err();
        assert!(matches!(err, Error::NoSubjectAltNames), "{err}");
    }

    #[test]
    fn a_self_signed_certificate_covers_localhost_and_the_given_names() {
        let pair = self_signed(&names(&["svc.ns.svc"]), Duration::from_secs(600)).unwrap();
        let cert = ServingCertificate::from_pem(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes()).unwrap();
        assert_eq!(cert.names(), ["localhost", "127.0.0.1", "svc.ns.svc"]);
        // Trusting the certificate itself is how a test client (or `caBundle`) accepts it.
        verify_as_server(&pair.cert_pem, &pair.cert_pem, "svc.ns.svc").unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn the_cert_dir_is_filled_once_then_reused_with_a_private_key_file() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("apiserver.local.config/certificates");
        let first = ensure_self_signed(&certs, &names(&["svc.ns.svc"])).unwrap();
        assert!(first.generated);
        assert_eq!(first.cert_path, certs.join("apiserver.crt"));
        let mode = std::fs::metadata(&first.key_path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let written = std::fs::read(&first.cert_path).unwrap();

        let second = ensure_self_signed(&certs, &names(&["svc.ns.svc"])).unwrap();
        assert!(!second.generated);
        assert_eq!(std::fs::read(&second.cert_path).unwrap(), written);

        // A name the existing certificate lacks forces a new one.
        let third = ensure_self_signed(&certs, &names(&["svc.ns.svc", "svc.ns.svc.cluster.local"])).unwrap();
        assert!(third.generated);
    }

    #[test]
    fn an_expired_or_broken_cert_dir_pair_is_regenerated() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = (dir.path().join("apiserver.crt"), dir.path().join("apiserver.key"));
        let expired = expired_pair();
        expired.write(&cert_path, &key_path).unwrap();
        let outcome = ensure_self_signed(dir.path(), &[]).unwrap();
        assert!(outcome.generated);
        let cert = ServingCertificate::from_files(&cert_path, &key_path).unwrap();
        cert.check_valid_at(SystemTime::now()).unwrap();

        std::fs::write(&key_path, b"garbage").unwrap();
        assert!(ensure_self_signed(dir.path(), &[]).unwrap().generated);
        ServingCertificate::from_files(&cert_path, &key_path).unwrap();
    }

    /// A self-signed pair whose notAfter is in the past.
    fn expired_pair() -> PemPair {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names(&["localhost", "127.0.0.1"])).unwrap();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        PemPair { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }
}
