//! Standalone authentication and authorization, for running outside a cluster (and for the
//! `local` mode): static bearer tokens from a kube-apiserver-style CSV file, client certificates
//! from a client CA, and a deliberately simple authorizer:
//!
//! - `system:masters` may do everything;
//! - every other authenticated user may read (get, list, watch, and GET on non-resource paths);
//! - anonymous callers reach only the health paths.
//!
//! It is permissive compared with RBAC, and the binary says so loudly when it starts.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderMap;
use numaresources_runtime::tls::CaBundle;
use rustls_pki_types::CertificateDer;

use super::authn::{AuthenticationConfig, TokenDigest, UserInfo, from_connection};
use crate::request_info::Attributes;

/// Why a token file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("token file line {line}: {reason}")]
pub struct TokenFileError {
    line: usize,
    reason: String,
}

/// A bearer token the token file does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown bearer token")]
pub struct UnknownToken;

/// Static identities.
#[derive(Debug, Default)]
pub struct Standalone {
    /// Identities by token digest (the file's tokens are not kept).
    tokens: HashMap<TokenDigest, Arc<UserInfo>>,
    certificates: AuthenticationConfig,
}

impl Standalone {
    /// Reads kube-apiserver's `--token-auth-file` format: `token,user,uid[,"group1,group2"]`,
    /// one per line; blank lines and `#` comments are skipped.
    pub fn from_token_file(text: &str) -> Result<Self, TokenFileError> {
        let mut tokens = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fail = |reason: &str| TokenFileError { line: index + 1, reason: reason.to_owned() };
            let fields = split_csv(line).map_err(|reason| fail(&reason))?;
            let [token, name, uid, rest @ ..] = fields.as_slice() else {
                return Err(fail("expected at least token,user,uid"));
            };
            if token.is_empty() || name.is_empty() {
                return Err(fail("the token and the user name must not be empty"));
            }
            let groups = rest
                .first()
                .map(|g| g.split(',').map(str::trim).filter(|g| !g.is_empty()).map(str::to_owned).collect());
            let user = UserInfo {
                name: name.clone(),
                uid: uid.clone(),
                groups: groups.unwrap_or_default(),
                ..UserInfo::default()
            };
            if tokens.insert(TokenDigest::of(token), Arc::new(user.authenticated())).is_some() {
                return Err(fail("the token appears twice"));
            }
        }
        Ok(Self { tokens, certificates: AuthenticationConfig::default() })
    }

    /// Also accepts client certificates issued by `client_ca` (CN is the user, O the groups).
    pub fn with_client_ca(mut self, client_ca: CaBundle) -> Self {
        self.certificates.client_ca = Some(client_ca);
        self
    }

    /// The client CAs, for the TLS handshake.
    pub fn client_cas(&self) -> Vec<CaBundle> {
        self.certificates.bundles()
    }

    /// The identity of a request: `Ok(None)` for anonymous, an error for a presented but unknown
    /// token.
    pub fn authenticate(
        &self,
        chain: &[CertificateDer<'_>],
        headers: &HeaderMap,
        token: Option<&str>,
    ) -> Result<Option<Arc<UserInfo>>, UnknownToken> {
        if let Some(user) = from_connection(&self.certificates, chain, headers) {
            return Ok(Some(Arc::new(user)));
        }
        match token {
            Some(token) => self.tokens.get(&TokenDigest::of(token)).cloned().map(Some).ok_or(UnknownToken),
            None => Ok(None),
        }
    }

    /// The standalone authorization rule.
    pub(crate) fn authorize(user: &UserInfo, attributes: &Attributes) -> bool {
        if user.groups.iter().any(|g| g == "system:masters") {
            return true;
        }
        let authenticated = user.groups.iter().any(|g| g == "system:authenticated");
        authenticated
            && match attributes {
                Attributes::Resource { verb, .. } => matches!(*verb, "get" | "list" | "watch"),
                Attributes::NonResource { verb, .. } => verb == "get",
            }
    }
}

/// Splits one CSV line, honouring double quotes (`"a,b"` is one field; `""` inside quotes is a quote).
fn split_csv(line: &str) -> Result<Vec<String>, String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', false) if fields.last().is_some_and(String::is_empty) => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                if let Some(field) = fields.last_mut() {
                    field.push('"');
                }
            }
            ('"', true) => quoted = false,
            (',', false) => fields.push(String::new()),
            (c, _) => {
                if let Some(field) = fields.last_mut() {
                    field.push(c);
                }
            }
        }
    }
    if quoted {
        return Err("an unterminated quote".into());
    }
    Ok(fields.into_iter().map(|f| f.trim().to_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(verb: &'static str) -> Attributes {
        Attributes::Resource { verb, name: None }
    }

    #[test]
    fn token_files_read_like_kube_apiservers() {
        let file = "# admin\nadmin-token,admin,uid-1,\"system:masters,ops\"\n\nreader-token,reader,uid-2\n";
        let auth = Standalone::from_token_file(file).unwrap();
        let admin = auth.authenticate(&[], &HeaderMap::new(), Some("admin-token")).unwrap().unwrap();
        assert_eq!(admin.name, "admin");
        assert_eq!(admin.groups, ["system:masters", "ops", "system:authenticated"]);
        let reader = auth.authenticate(&[], &HeaderMap::new(), Some("reader-token")).unwrap().unwrap();
        assert_eq!(reader.groups, ["system:authenticated"]);
        assert!(auth.authenticate(&[], &HeaderMap::new(), Some("nope")).is_err());
        assert_eq!(auth.authenticate(&[], &HeaderMap::new(), None), Ok(None));
    }

    #[test]
    fn bad_token_files_name_the_line() {
        for (file, line) in [("a,b\n", 1), ("ok,u,1\n,user,2\n", 2), ("t,u,1\nt,v,2\n", 2), ("t,u,1,\"open\n", 1)] {
            let error = Standalone::from_token_file(file).unwrap_err();
            assert!(error.to_string().starts_with(&format!("token file line {line}:")), "{file:?}: {error}");
        }
    }

    #[test]
    fn masters_write_others_read_anonymous_nothing() {
        let admin =
            UserInfo { name: "a".into(), groups: vec!["system:masters".into()], ..UserInfo::default() }.authenticated();
        let reader = UserInfo { name: "r".into(), ..UserInfo::default() }.authenticated();
        let anonymous = UserInfo::anonymous();
        for verb in ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"] {
            let read = matches!(verb, "get" | "list" | "watch");
            assert!(Standalone::authorize(&admin, &resource(verb)), "{verb}");
            assert_eq!(Standalone::authorize(&reader, &resource(verb)), read, "{verb}");
            assert!(!Standalone::authorize(&anonymous, &resource(verb)), "{verb}");
        }
        let openapi = Attributes::NonResource { verb: "get".into(), path: "/openapi/v3".into() };
        assert!(Standalone::authorize(&reader, &openapi));
        assert!(!Standalone::authorize(&anonymous, &openapi));
    }
}
