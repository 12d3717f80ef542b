//! `limit`/`continue` on LIST, as kube-apiserver pages a list served from etcd: at most `limit`
//! objects ordered by name, and a continue token that names the snapshot's resourceVersion and
//! the name to resume from, so every page comes from the same consistent snapshot. The token is
//! opaque to clients; it has kube-apiserver's shape (URL-safe base64 of
//! `{"v":"meta.k8s.io/v1","rv":<revision>,"start":"<name>\u0000"}`).

use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::{DecodeError, Engine};
use serde::{Deserialize, Serialize};

use crate::status::ApiError;

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// Reads tokens as Go's `base64.RawURLEncoding` does (kube-apiserver's decoder): unpadded
/// URL-safe base64, with any trailing bits in the last character ignored. Padding is tolerated.
const TOKEN_DECODER: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// What a continue token says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ContinueToken {
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

    /// Reads a token; a malformed one is a 400, worded as kube-apiserver words it
    /// (`continue key is not valid: <what the decoder said>`).
    pub fn decode(text: &str) -> Result<Self, ApiError> {
        let invalid = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
        let bytes = TOKEN_DECODER.decode(text).map_err(|error| invalid(&base64_error(&error, text)))?;
        let token: Self = serde_json::from_slice(&bytes).map_err(|error| invalid(&error.to_string()))?;
        if token.version != TOKEN_VERSION {
            return Err(invalid(&format!("incorrect encoded version {:?}", token.version)));
        }
        if token.revision == 0 || token.revision < -1 {
            return Err(invalid(&format!("incorrect encoded start resourceVersion {}", token.revision)));
        }
        Ok(token)
    }

    /// The snapshot revision the token pins, or `None` to continue from the latest state.
    pub(crate) fn snapshot_revision(&self) -> Option<u64> {
        u64::try_from(self.revision).ok()
    }
}

/// Go's wording of a base64 error (`illegal base64 data at input byte N`).
fn base64_error(error: &DecodeError, text: &str) -> String {
    let at = match error {
        DecodeError::InvalidByte(at, _) | DecodeError::InvalidLastSymbol(at, _) => *at,
        DecodeError::InvalidLength(_) | DecodeError::InvalidPadding => text.trim_end_matches('=').len(),
    };
    format!("illegal base64 data at input byte {at}")
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
pub(crate) fn parse_limit(text: Option<&str>) -> Result<Option<usize>, ApiError> {
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
            let message = error.to_status()["message"].as_str().unwrap().to_owned();
            assert!(message.starts_with("continue key is not valid: "), "{message}");
        }
        let latest = ContinueToken { revision: -1, ..ContinueToken::after("a", 1) };
        assert_eq!(ContinueToken::decode(&latest.encode()).unwrap().snapshot_revision(), None);
    }

    #[test]
    fn only_what_is_not_base64_is_called_so() {
        let message =
            |text: &str| ContinueToken::decode(text).unwrap_err().to_status()["message"].as_str().unwrap().to_owned();
        // Valid base64 that is not a token of ours: the JSON decoder's complaint.
        let foreign = message(&URL_SAFE_NO_PAD.encode("hello world"));
        assert!(foreign.starts_with("continue key is not valid: expected value"), "{foreign}");
        // Trailing bits Go's decoder ignores are ignored here too ("aGk" and "aGl" are both "hi").
        assert!(message("aGl").starts_with("continue key is not valid: expected value"));
        assert_eq!(message("ab!d"), "continue key is not valid: illegal base64 data at input byte 2");
        assert_eq!(message("a+b/"), "continue key is not valid: illegal base64 data at input byte 1");
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
