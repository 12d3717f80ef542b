//! The cluster's ServiceAccount token issuer and its public keys, read through kube-apiserver:
//! the issuer from `/.well-known/openid-configuration`, the keys from `/openid/v1/jwks` (which
//! kube-apiserver serves whatever external `jwks_uri` its discovery document names). Reading
//! them needs the `system:service-account-issuer-discovery` ClusterRole.
//!
//! The keys are read again on a timer and when a token names a key id they lack (a rotation),
//! at most once per [`MIN_REFRESH_INTERVAL`], so tokens with made-up key ids cannot make this
//! server hammer kube-apiserver. Until a first read succeeds there are no keys, and every token
//! goes to TokenReview as before.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use super::jwt::{IssuerKeys, JwksError};

/// The discovery document's path.
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";
/// Where kube-apiserver serves the issuer's public keys.
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// The shortest time between two reads of the keys that a token's unknown key id may cause.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(10);
/// The largest discovery document or key set read (kube-apiserver's are a few KiB).
const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// Why the keys could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// kube-apiserver did not answer, or refused.
    #[error("reading {path}: {source}{}", forbidden_hint(source))]
    Request {
        /// The path asked for.
        path: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The discovery document is not one.
    #[error("{DISCOVERY_PATH} is not an OpenID discovery document: {0}")]
    Discovery(String),
    /// The key set is not usable.
    #[error("{JWKS_PATH}: {0}")]
    Keys(#[from] JwksError),
    /// A document larger than [`MAX_DOCUMENT_BYTES`].
    #[error("{0} is larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge(&'static str),
}

/// What to do about a 403: the ClusterRole that grants reading the issuer's documents.
fn forbidden_hint(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(status) if status.code == 403 => {
            " (bind the ClusterRole system:service-account-issuer-discovery to this server's ServiceAccount; until then \
             every token goes to TokenReview)"
        }
        _ => "",
    }
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
}

/// The issuer's keys as last read, and when a read was last tried.
pub struct IssuerKeysSource {
    client: kube::Client,
    keys: RwLock<Option<Arc<IssuerKeys>>>,
    last_try: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for IssuerKeysSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerKeysSource").field("keys", &self.keys()).finish_non_exhaustive()
    }
}

impl IssuerKeysSource {
    /// Reads through `client` (nothing is read until [`IssuerKeysSource::refresh`]).
    pub fn new(client: kube::Client) -> Self {
        Self { client, keys: RwLock::new(None), last_try: Mutex::new(None) }
    }

    /// The keys as last read, if a read has succeeded.
    pub fn keys(&self) -> Option<Arc<IssuerKeys>> {
        self.keys.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Reads the issuer and its keys now; on failure the last keys stay in force.
    pub async fn refresh(&self) -> Result<Arc<IssuerKeys>, FetchError> {
        *self.last_try.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        let discovery: Discovery = serde_json::from_slice(&self.get(DISCOVERY_PATH).await?)
            .map_err(|error| FetchError::Discovery(error.to_string()))?;
        let keys = Arc::new(IssuerKeys::from_jwks(&discovery.issuer, &self.get(JWKS_PATH).await?)?);
        *self.keys.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(keys.clone());
        Ok(keys)
    }

    /// The keys, read again first when they lack `key_id` and the last try is at least
    /// [`MIN_REFRESH_INTERVAL`] old (a key rotated in since).
    pub async fn keys_holding(&self, key_id: &str) -> Option<Arc<IssuerKeys>> {
        let current = self.keys();
        if current.as_ref().is_some_and(|keys| keys.has_key(key_id)) {
            return current;
        }
        let last_try = *self.last_try.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if last_try.is_some_and(|at| at.elapsed() < MIN_REFRESH_INTERVAL) {
            return current;
        }
        match self.refresh().await {
            Ok(keys) => Some(keys),
            Err(error) => {
                tracing::warn!(%error, "reading the ServiceAccount issuer's keys; keeping the last ones");
                current
            }
        }
    }

    /// Reads the keys now and every `period`, until dropped.
    pub async fn keep_current(&self, period: Duration) {
        loop {
            if let Err(error) = self.refresh().await {
                tracing::warn!(%error, "reading the ServiceAccount issuer's keys; tokens go to TokenReview meanwhile");
            }
            tokio::time::sleep(period).await;
        }
    }

    async fn get(&self, path: &'static str) -> Result<Vec<u8>, FetchError> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|error| FetchError::Request { path, source: kube::Error::HttpError(error) })?;
        let text = self.client.request_text(request).await.map_err(|source| FetchError::Request { path, source })?;
        if text.len() > MAX_DOCUMENT_BYTES {
            return Err(FetchError::TooLarge(path));
        }
        Ok(text.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use numaresources_testkit::kube_double::{ISSUER, KubeDouble, OUR_AUDIENCE};

    use super::*;
    use crate::auth::jwt::verify;

    fn now() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
    }

    #[tokio::test]
    async fn the_issuers_keys_verify_the_tokens_it_signs() {
        let double = KubeDouble::new(true);
        double.add_pod("numaresources-rte-a", "worker-0");
        let source = IssuerKeysSource::new(double.client());
        assert!(source.keys().is_none(), "nothing is read before the first refresh");
        let keys = source.refresh().await.unwrap();
        assert_eq!(keys.issuer(), ISSUER);
        assert!(keys.has_key(&double.signing_key_id()));
        let token = double.signed_exporter_token("numaresources-rte-a", &[OUR_AUDIENCE]);
        let verified = verify(&keys, &token, OUR_AUDIENCE, now()).unwrap();
        assert_eq!(verified.pod.name, "numaresources-rte-a");
        assert_eq!(verified.node.unwrap().name, "worker-0");
    }

    /// The issuer rotates its key: a token naming the new key id makes the keys be read again
    /// (at most once per interval), and verifies then, without a restart.
    #[tokio::test(start_paused = true)]
    async fn a_rotated_key_is_read_on_its_first_token_at_most_once_per_interval() {
        let double = KubeDouble::new(true);
        double.add_pod("numaresources-rte-a", "worker-0");
        let source = IssuerKeysSource::new(double.client());
        source.refresh().await.unwrap();
        let (reads, token_reviews) = (double.requests(), double.token_reviews());
        double.rotate_signing_key();
        let rotated = double.signing_key_id();
        let token = double.signed_exporter_token("numaresources-rte-a", &[OUR_AUDIENCE]);
        let keys = source.keys_holding(&rotated).await.unwrap();
        assert!(!keys.has_key(&rotated), "a read just happened: none other within the interval");
        assert_eq!(double.requests(), reads);

        tokio::time::advance(MIN_REFRESH_INTERVAL).await;
        let keys = source.keys_holding(&rotated).await.unwrap();
        assert_eq!(double.requests(), reads + 2, "the discovery document and the key set, once");
        assert!(keys.has_key(&rotated));
        assert_eq!(verify(&keys, &token, OUR_AUDIENCE, now()).unwrap().pod.name, "numaresources-rte-a");
        assert!(source.keys_holding(&rotated).await.is_some());
        assert_eq!(double.requests(), reads + 2, "a known key id reads nothing");
        assert_eq!(double.token_reviews(), token_reviews);
    }

    #[tokio::test]
    async fn a_failed_read_keeps_the_last_keys() {
        let double = KubeDouble::new(true);
        let source = IssuerKeysSource::new(double.client());
        source.refresh().await.unwrap();
        double.set_down(true);
        assert!(matches!(source.refresh().await, Err(FetchError::Request { path: DISCOVERY_PATH, .. })));
        assert!(source.keys().is_some_and(|keys| keys.has_key(&double.signing_key_id())));
    }
}
