//! `limit`/`continue` on LIST, as kube-apiserver pages a list served from etcd: at most `limit`
//! objects ordered by name, and a continue token that names the snapshot's resourceVersion and
//! the name to resume from, so every page comes from the same consistent snapshot. The token is
//! opaque to clients; it has kube-apiserver's shape (URL-safe base64 of
//! `{"v":"meta.k8s.io/v1","rv":<revision>,"start":"<name>\u0000"}`).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::status::ApiError;

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// What a continue token says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinueToken {
    #[serde(rename = "v")]
    version: String,
    /// The snapshot's revision; `-1` continues from the latest state (the inconsistent token a
    /// `410 Expired` answer carries).
    #[serde(rename = "rv")]
    pub revision: i64,
    /// The first name the next page may hold.
    pub start: String,
}

impl ContinueToken {
    /// The token for a page that continues after `last_name` in the snapshot at `revision`.
    pub fn after(last_name: &str, revision: i64) -> Self {
        // The smallest string greater than `last_name`.
        Self { version: TOKEN_VERSION.to_owned(), revision, start: format!("{last_name}\u{0}") }
    }

    /// The token as sent to clients.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Reads a token; a malformed one is a 400, worded as kube-apiserver words it.
    pub fn decode(text: &str) -> Result<Self, ApiError> {
        let invalid = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .map_err(|_| invalid("the token is not base64-encoded"))?;
        let token: Self = serde_json::from_slice(&bytes).map_err(|_| invalid("the token is not a list position"))?;
        if token.version != TOKEN_VERSION {
            return Err(invalid(&format!("incorrect encoded version {:?}", token.version)));
        }
        if token.revision == 0 || token.revision < -1 {
            return Err(invalid(&format!("incorrect encoded start resourceVersion {}", token.revision)));
        }
        Ok(token)
    }

    /// The snapshot revision the token pins, or `None` to continue from the latest state.
    pub fn snapshot_revision(&self) -> Option<u64> {
        u64::try_from(self.revision).ok()
    }
}

/// The `410 Expired` answer for a token whose snapshot the history no longer reaches, carrying an
/// inconsistent token for the rest of the list, as kube-apiserver does.
pub fn expired(token: &ContinueToken) -> ApiError {
    let mut error = ApiError::expired(
        "The provided continue parameter is too old to display a consistent list result. You can start a new list \
         without the continue parameter, or use the continue token in this response to retrieve the remainder of the \
         results. Continuing with the provided token results in an inconsistent list - objects that were created, \
         modified, or deleted between the time the first chunk was returned and now may show up in the list.",
    );
    let inconsistent = ContinueToken { revision: -1, ..token.clone() };
    error.set_list_continue(inconsistent.encode());
    error
}

/// Parses the `limit` parameter: `None` when absent, zero or negative (kube-apiserver pages only
/// for a positive limit); a non-integer or an integer beyond int64 is a 400.
pub fn parse_limit(text: Option<&str>) -> Result<Option<usize>, ApiError> {
    let Some(text) = text.filter(|t| !t.is_empty()) else { return Ok(None) };
    let limit: i64 = text.parse().map_err(|_| {
        ApiError::bad_request(format!("invalid limit {text:?}: must be an integer (a page size; 0 for no limit)"))
    })?;
    Ok(usize::try_from(limit).ok().filter(|l| *l > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_have_kube_apiservers_shape() {
        let token = ContinueToken::after("worker-1", 42);
        let text = token.encode();
        assert!(!text.contains(['+', '/', '=']), "URL-safe: {text}");
        let json: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&text).unwrap()).unwrap();
        assert_eq!(json, serde_json::json!({"v": "meta.k8s.io/v1", "rv": 42, "start": "worker-1\u{0}"}));
        assert_eq!(ContinueToken::decode(&text).unwrap(), token);
        assert_eq!(token.snapshot_revision(), Some(42));
    }

    #[test]
    fn malformed_tokens_are_400() {
        let encode = |v: serde_json::Value| URL_SAFE_NO_PAD.encode(v.to_string());
        for text in [
            "not base64!".to_owned(),
            URL_SAFE_NO_PAD.encode("not json"),
            encode(serde_json::json!({"v": "other/v1", "rv": 3, "start": "a"})),
            encode(serde_json::json!({"v": "meta.k8s.io/v1", "rv": 0, "start": "a"})),
            encode(serde_json::json!({"v": "meta.k8s.io/v1", "rv": -7, "start": "a"})),
        ] {
            let error = ContinueToken::decode(&text).unwrap_err();
            assert_eq!(error.code(), http::StatusCode::BAD_REQUEST, "{text}");
        }
        let latest = ContinueToken { revision: -1, ..ContinueToken::after("a", 1) };
        assert_eq!(ContinueToken::decode(&latest.encode()).unwrap().snapshot_revision(), None);
    }

    #[test]
    fn limits_page_only_when_positive() {
        assert_eq!(parse_limit(None).unwrap(), None);
        assert_eq!(parse_limit(Some("")).unwrap(), None);
        assert_eq!(parse_limit(Some("0")).unwrap(), None);
        assert_eq!(parse_limit(Some("-5")).unwrap(), None);
        assert_eq!(parse_limit(Some("3")).unwrap(), Some(3));
        assert_eq!(parse_limit(Some("9223372036854775807")).unwrap(), usize::try_from(i64::MAX).ok());
        for bad in ["x", "1.5", "99999999999999999999"] {
            assert_eq!(parse_limit(Some(bad)).unwrap_err().code(), http::StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
