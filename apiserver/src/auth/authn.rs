//! Who is calling: the front proxy's request headers (on a connection whose client certificate
//! chains to the request-header CA and has an allowed CN), a client certificate from the client
//! CA (CN is the user, O the groups), or a bearer token (checked by the caller with a
//! TokenReview). Everything else is anonymous.
//!
//! The `X-Remote-*` headers are trusted only on a verified front-proxy connection, and are
//! removed from every request before handlers run, whatever the connection.

use std::collections::BTreeMap;

use http::HeaderMap;
use numaresources_runtime::tls::CaBundle;
use rustls_pki_types::CertificateDer;
use serde::Deserialize;

/// An authenticated identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// User uid, when known.
    pub uid: String,
    /// Groups; `system:authenticated` is appended to every authenticated user.
    pub groups: Vec<String>,
    /// Extra attributes (e.g. `authentication.kubernetes.io/node-name`).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What the token caches key a bearer token by: an HMAC-SHA256 of it under a key drawn at
/// random when the process starts, as kube-apiserver's token cache keys by one. A replica of a
/// 5,000-node cluster holds every exporter's token in its cache, ≈1 KiB each for a projected
/// token: as digests they take 32 bytes, the credentials themselves do not stay in memory, and
/// a digest means nothing outside this process. Computing one costs ≈0.3 µs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TokenDigest([u8; 32]);

impl TokenDigest {
    pub(crate) fn of(token: &str) -> Self {
        static KEY: std::sync::OnceLock<ring::hmac::Key> = std::sync::OnceLock::new();
        let key = KEY.get_or_init(|| {
            let rng = ring::rand::SystemRandom::new();
            ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).unwrap_or_else(|_| {
                // The system's random source failed (never seen on Linux): a key from the
                // standard library's randomly seeded hashers, which is still per process.
                let words: Vec<u8> = (0..4).flat_map(|i| numaresources_runtime::random_word(i).to_le_bytes()).collect();
                ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &words)
            })
        });
        let tag = ring::hmac::sign(key, token.as_bytes());
        let mut bytes = [0; 32];
        bytes.copy_from_slice(tag.as_ref());
        Self(bytes)
    }
}

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest(..)")
    }
}

/// The extra attribute bound service-account tokens carry for the node they run on.
pub(crate) const NODE_NAME_EXTRA: &str = numaresources_api::direct_write::EXTRA_NODE_NAME;

impl UserInfo {
    /// The anonymous user.
    pub fn anonymous() -> Self {
        Self { name: "system:anonymous".into(), groups: vec!["system:unauthenticated".into()], ..Self::default() }
    }

    /// Adds `system:authenticated`, as kube-apiserver does for every authenticated identity.
    pub fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == "system:authenticated") {
            self.groups.push("system:authenticated".into());
        }
        self
    }

    /// The node an identity is bound to, if its token says so.
    pub fn node_name(&self) -> Option<&str> {
        self.extra.get(NODE_NAME_EXTRA).and_then(|values| values.first()).map(String::as_str)
    }
}

/// The request-header settings of `kube-system/extension-apiserver-authentication`.
#[derive(Debug, Clone, Default)]
pub struct RequestHeaderConfig {
    /// CAs that sign the front proxy's client certificate.
    pub client_ca: Option<CaBundle>,
    /// Allowed CNs of that certificate; empty means any.
    pub allowed_names: Vec<String>,
    /// Headers naming the user (first non-empty wins).
    pub username_headers: Vec<String>,
    /// Headers naming groups (every value of every header).
    pub group_headers: Vec<String>,
    /// Prefixes of extra-attribute headers.
    pub extra_header_prefixes: Vec<String>,
    /// Headers naming the uid.
    pub uid_headers: Vec<String>,
}

/// Everything authentication needs from the ConfigMap.
#[derive(Debug, Clone, Default)]
pub struct AuthenticationConfig {
    /// Front proxy settings.
    pub request_header: RequestHeaderConfig,
    /// CAs of ordinary client certificates.
    pub client_ca: Option<CaBundle>,
}

/// Why the ConfigMap could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A CA bundle does not parse.
    #[error("{key}: {source}")]
    Ca {
        /// The ConfigMap key.
        key: &'static str,
        /// The reason.
        #[source]
        source: numaresources_runtime::tls::Error,
    },
    /// A list value is not a JSON array of strings.
    #[error("{key}: expected a JSON array of strings: {source}")]
    List {
        /// The ConfigMap key.
        key: &'static str,
        /// The reason.
        #[source]
        source: serde_json::Error,
    },
}

impl AuthenticationConfig {
    /// Reads the ConfigMap's data.
    pub fn from_configmap(data: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let ca = |key: &'static str| -> Result<Option<CaBundle>, ConfigError> {
            data.get(key)
                .filter(|pem| !pem.trim().is_empty())
                .map(|pem| CaBundle::from_pem(pem.as_bytes()).map_err(|source| ConfigError::Ca { key, source }))
                .transpose()
        };
        let list = |key: &'static str| -> Result<Vec<String>, ConfigError> {
            match data.get(key).filter(|v| !v.trim().is_empty()) {
                None => Ok(Vec::new()),
                Some(text) => Vec::<String>::deserialize(&mut serde_json::Deserializer::from_str(text))
                    .map_err(|source| ConfigError::List { key, source }),
            }
        };
        Ok(Self {
            request_header: RequestHeaderConfig {
                client_ca: ca("requestheader-client-ca-file")?,
                allowed_names: list("requestheader-allowed-names")?,
                username_headers: list("requestheader-username-headers")?,
                group_headers: list("requestheader-group-headers")?,
                extra_header_prefixes: list("requestheader-extra-headers-prefix")?,
                uid_headers: list("requestheader-uid-headers")?,
            },
            client_ca: ca("client-ca-file")?,
        })
    }

    /// Every CA bundle a client certificate may chain to (for the TLS handshake).
    pub(crate) fn bundles(&self) -> Vec<CaBundle> {
        self.request_header.client_ca.iter().chain(&self.client_ca).cloned().collect()
    }
}

/// The identity a request's connection and headers establish, without bearer tokens:
/// `Some(user)` from the front proxy or a client certificate, `None` otherwise.
pub(crate) fn from_connection(
    config: &AuthenticationConfig,
    chain: &[CertificateDer<'_>],
    headers: &HeaderMap,
) -> Option<UserInfo> {
    if chain.is_empty() {
        return None;
    }
    let front_proxy = &config.request_header;
    if let Some(ca) = &front_proxy.client_ca
        && ca.verifies_client(chain)
    {
        let cn_allowed = front_proxy.allowed_names.is_empty()
            || subject(&chain[0]).is_some_and(|(cn, _)| front_proxy.allowed_names.contains(&cn));
        if cn_allowed && let Some(user) = from_request_headers(front_proxy, headers) {
            return Some(user.authenticated());
        }
    }
    if let Some(ca) = &config.client_ca
        && ca.verifies_client(chain)
        && let Some((name, groups)) = subject(&chain[0])
    {
        return Some(UserInfo { name, groups, ..UserInfo::default() }.authenticated());
    }
    None
}

fn from_request_headers(config: &RequestHeaderConfig, headers: &HeaderMap) -> Option<UserInfo> {
    let values =
        |name: &String| headers.get_all(name.as_str()).iter().filter_map(|v| v.to_str().ok()).map(str::to_owned);
    let name = config.username_headers.iter().flat_map(values).find(|v| !v.is_empty())?;
    let groups = config.group_headers.iter().flat_map(values).filter(|g| !g.is_empty()).collect();
    let uid = config.uid_headers.iter().flat_map(values).find(|v| !v.is_empty()).unwrap_or_default();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (header, value) in headers {
        let lower = header.as_str();
        for prefix in &config.extra_header_prefixes {
            if let Some(key) = lower.strip_prefix(prefix.to_ascii_lowercase().as_str())
                && let Ok(value) = value.to_str()
            {
                extra.entry(percent_decode(&key.to_ascii_lowercase())).or_default().push(value.to_owned());
            }
        }
    }
    Some(UserInfo { name, uid, groups, extra })
}

/// Removes every header the front proxy may set, so no handler ever sees a claimed identity.
/// Runs on every request: nothing is allocated unless an extra header is there to remove.
pub(crate) fn strip_identity_headers(config: &RequestHeaderConfig, headers: &mut HeaderMap) {
    for name in config.username_headers.iter().chain(&config.group_headers).chain(&config.uid_headers) {
        headers.remove(name.as_str());
    }
    // Header names are lower case; the configured prefixes may not be.
    let extra = |name: &http::HeaderName| {
        config
            .extra_header_prefixes
            .iter()
            .any(|prefix| name.as_str().get(..prefix.len()).is_some_and(|start| start.eq_ignore_ascii_case(prefix)))
    };
    if headers.keys().any(extra) {
        let doomed: Vec<http::HeaderName> = headers.keys().filter(|name| extra(name)).cloned().collect();
        for name in doomed {
            headers.remove(name);
        }
    }
}

/// CN and O values of a certificate's subject.
fn subject(certificate: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let subject = parsed.subject();
    let cn = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_owned)).collect();
    Some((cn, groups))
}

/// Header-name-safe encoding of an extra's key: kube-apiserver's convention for
/// `X-Remote-Extra-` headers (percent-encoding, lower case).
pub(crate) fn percent_encode(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            b'A'..=b'Z' => ((b + 32) as char).to_string(),
            _ => format!("%{b:02x}"),
        })
        .collect()
}

/// `%2F` → `/`; malformed escapes are kept as they are (the inverse of [`percent_encode`]).
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use numaresources_runtime::tls::CertificateAuthority;
    use rustls_pki_types::pem::PemObject;

    use super::*;

    #[test]
    fn a_tokens_digest_is_stable_in_the_process_and_keyed() {
        let token = "eyJhbGciOiJSUzI1NiJ9.a-projected-token";
        assert_eq!(TokenDigest::of(token), TokenDigest::of(token));
        assert_ne!(TokenDigest::of(token), TokenDigest::of("eyJhbGciOiJSUzI1NiJ9.another-token"));
        // Keyed: not the token's plain SHA-256, which anyone could compute from the token.
        let plain = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        assert_ne!(TokenDigest::of(token).0[..], *plain.as_ref());
    }

    fn chain(ca: &CertificateAuthority, user: &str, groups: &[&str]) -> Vec<CertificateDer<'static>> {
        let groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        let pair = ca.issue_client(user, &groups, Duration::from_secs(3600)).unwrap();
        vec![CertificateDer::from_pem_slice(pair.cert_pem.as_bytes()).unwrap()]
    }

    fn config(
        front_proxy: &CertificateAuthority,
        clients: &CertificateAuthority,
        allowed: &[&str],
    ) -> AuthenticationConfig {
        let data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file", front_proxy.cert_pem().to_owned()),
            ("client-ca-file", clients.cert_pem().to_owned()),
            ("requestheader-allowed-names", serde_json::to_string(allowed).unwrap()),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#.to_owned()),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#.to_owned()),
            ("requestheader-extra-headers-prefix", r#"["X-Remote-Extra-"]"#.to_owned()),
            ("requestheader-uid-headers", r#"["X-Remote-Uid"]"#.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        AuthenticationConfig::from_configmap(&data).unwrap()
    }

    fn proxy_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "system:serviceaccount:numaresources:rte".parse().unwrap());
        headers.append("x-remote-group", "system:serviceaccounts".parse().unwrap());
        headers.append("x-remote-group", "system:serviceaccounts:numaresources".parse().unwrap());
        headers.insert("x-remote-uid", "1234".parse().unwrap());
        headers.insert("x-remote-extra-authentication.kubernetes.io%2fnode-Name", "worker-0".parse().unwrap());
        headers
    }

    #[test]
    fn the_front_proxy_is_believed_only_with_its_certificate_and_an_allowed_name() {
        let proxy_ca = CertificateAuthority::generate("front-proxy-ca", Duration::from_secs(86_400)).unwrap();
        let client_ca = CertificateAuthority::generate("client-ca", Duration::from_secs(86_400)).unwrap();
        let cfg = config(&proxy_ca, &client_ca, &["front-proxy-client"]);

        let user = from_connection(&cfg, &chain(&proxy_ca, "front-proxy-client", &[]), &proxy_headers()).unwrap();
        assert_eq!(user.name, "system:serviceaccount:numaresources:rte");
        assert_eq!(user.uid, "1234");
        assert_eq!(
            user.groups,
            ["system:serviceaccounts", "system:serviceaccounts:numaresources", "system:authenticated"]
        );
        assert_eq!(user.node_name(), Some("worker-0"));

        // Another CN from the right CA: headers ignored.
        assert_eq!(from_connection(&cfg, &chain(&proxy_ca, "someone-else", &[]), &proxy_headers()), None);
        // No client certificate at all: headers ignored.
        assert_eq!(from_connection(&cfg, &[], &proxy_headers()), None);
        // A client certificate from the client CA: its own identity, never the headers'.
        let user = from_connection(&cfg, &chain(&client_ca, "alice", &["ops"]), &proxy_headers()).unwrap();
        assert_eq!(
            (user.name.as_str(), user.groups.as_slice()),
            ("alice", &["ops".to_owned(), "system:authenticated".into()][..])
        );
        // A certificate from neither CA: nobody.
        let stranger = CertificateAuthority::generate("stranger", Duration::from_secs(86_400)).unwrap();
        assert_eq!(from_connection(&cfg, &chain(&stranger, "front-proxy-client", &[]), &proxy_headers()), None);
    }

    #[test]
    fn an_empty_allowed_list_admits_any_front_proxy_name() {
        let proxy_ca = CertificateAuthority::generate("front-proxy-ca", Duration::from_secs(86_400)).unwrap();
        let client_ca = CertificateAuthority::generate("client-ca", Duration::from_secs(86_400)).unwrap();
        let cfg = config(&proxy_ca, &client_ca, &[]);
        assert!(from_connection(&cfg, &chain(&proxy_ca, "anything", &[]), &proxy_headers()).is_some());
        // Without a user header the front proxy authenticates nobody.
        assert_eq!(from_connection(&cfg, &chain(&proxy_ca, "anything", &[]), &HeaderMap::new()), None);
    }

    #[test]
    fn identity_headers_are_stripped() {
        let proxy_ca = CertificateAuthority::generate("front-proxy-ca", Duration::from_secs(86_400)).unwrap();
        let cfg = config(&proxy_ca, &proxy_ca, &[]);
        let mut headers = proxy_headers();
        headers.insert("accept", "application/json".parse().unwrap());
        strip_identity_headers(&cfg.request_header, &mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key("accept"));
    }

    #[test]
    fn broken_configmaps_are_reported() {
        let data = BTreeMap::from([("requestheader-allowed-names".to_owned(), "front-proxy-client".to_owned())]);
        assert!(AuthenticationConfig::from_configmap(&data).is_err());
        let data = BTreeMap::from([("client-ca-file".to_owned(), "not a pem".to_owned())]);
        assert!(AuthenticationConfig::from_configmap(&data).is_err());
        assert!(AuthenticationConfig::from_configmap(&BTreeMap::new()).is_ok());
    }

    #[test]
    fn extra_keys_are_lower_cased_then_percent_decoded() {
        assert_eq!(percent_decode("authentication.kubernetes.io%2fpod-name"), "authentication.kubernetes.io/pod-name");
        assert_eq!(percent_decode("bad%zzescape%"), "bad%zzescape%");
    }
}
