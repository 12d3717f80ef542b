//! The bearer token presented to our API server, read from the projected token file.
//!
//! The kubelet rotates a projected token well before it expires (at 80 % of its life) by writing
//! a new file and swapping a `..data` symlink. The file is looked at (one `stat`) before every
//! request and read again only when it changed (another inode, size or modification time), so a
//! rotated token is sent from the next request on. A file that cannot be read keeps the last
//! good token: it is still valid for a while, and the server's 401 says when it no longer is.

use std::fs;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use http::HeaderValue;

/// The largest token file read. A projected ServiceAccount token (a signed JWT) is about
/// 1 KiB; anything this large is not one, and is not sent.
pub const MAX_TOKEN_BYTES: u64 = 16 * 1024;

/// What identifies one version of the file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    device: u64,
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(path: &Path) -> Option<Self> {
        let meta = fs::metadata(path).ok()?;
        Some(Self { device: meta.dev(), inode: meta.ino(), len: meta.len(), modified: meta.modified().ok() })
    }
}

#[derive(Debug, Default)]
struct Cached {
    stamp: Option<Stamp>,
    header: Option<HeaderValue>,
}

/// Why a token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Reading failed.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_TOKEN_BYTES`].
    #[error("the token file {0} is larger than {MAX_TOKEN_BYTES} bytes; not a token")]
    TooLarge(PathBuf),
    /// Empty, or not a valid header value.
    #[error("the token file {0} holds no usable token")]
    Unusable(PathBuf),
}

/// A token file, read again when it changes.
#[derive(Debug)]
pub struct BearerFile {
    path: PathBuf,
    cached: Mutex<Cached>,
}

impl BearerFile {
    /// The token in `path`, read on first use.
    pub fn new(path: PathBuf) -> Self {
        Self { path, cached: Mutex::default() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `Authorization` header for the file's current token: the last good one when the file
    /// changed into something unusable, `None` when it never held one.
    pub fn header(&self) -> Option<HeaderValue> {
        let stamp = Stamp::of(&self.path);
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        if stamp.is_some() && stamp != cached.stamp {
            match read_header(&self.path) {
                Ok(header) => {
                    if cached.header.is_some() {
                        tracing::debug!(file = %self.path.display(), "the token file changed; sending the new token");
                    }
                    cached.header = Some(header);
                }
                // Logged once per version of the file, not per request.
                Err(error) => tracing::warn!(%error, "keeping the last token read"),
            }
        }
        cached.stamp = stamp;
        cached.header.clone()
    }
}

/// Reads the file into `Bearer <token>`, bounded by [`MAX_TOKEN_BYTES`].
fn read_header(path: &Path) -> Result<HeaderValue, TokenError> {
    let read = |source| TokenError::Read { path: path.to_owned(), source };
    let mut text = Vec::new();
    fs::File::open(path).map_err(read)?.take(MAX_TOKEN_BYTES + 1).read_to_end(&mut text).map_err(read)?;
    if text.len() as u64 > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLarge(path.to_owned()));
    }
    let token = std::str::from_utf8(&text).map(str::trim).unwrap_or_default();
    if token.is_empty() {
        return Err(TokenError::Unusable(path.to_owned()));
    }
    let mut header =
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| TokenError::Unusable(path.to_owned()))?;
    header.set_sensitive(true);
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `text` as the kubelet does: a new file renamed over the old one.
    fn rotate(path: &Path, text: &str) {
        let next = path.with_extension("next");
        fs::write(&next, text).unwrap();
        fs::rename(&next, path).unwrap();
    }

    #[test]
    fn a_rotated_token_is_sent_from_the_next_request_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let bearer = BearerFile::new(path.clone());
        assert_eq!(bearer.header(), None, "no file yet");
        rotate(&path, "first\n");
        assert_eq!(bearer.header().unwrap(), "Bearer first");
        assert!(bearer.header().unwrap().is_sensitive());
        rotate(&path, "second");
        assert_eq!(bearer.header().unwrap(), "Bearer second");
    }

    #[test]
    fn an_unusable_file_keeps_the_last_good_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        rotate(&path, "good");
        let bearer = BearerFile::new(path.clone());
        assert_eq!(bearer.header().unwrap(), "Bearer good");
        for bad in ["", "  \n", "bad\u{0}token", &"x".repeat(MAX_TOKEN_BYTES as usize + 1)] {
            rotate(&path, bad);
            assert_eq!(bearer.header().unwrap(), "Bearer good", "{:?}", &bad[..bad.len().min(10)]);
        }
        fs::remove_file(&path).unwrap();
        assert_eq!(bearer.header().unwrap(), "Bearer good");
    }

    #[test]
    fn a_file_that_never_held_a_token_gives_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        rotate(&path, "");
        assert_eq!(BearerFile::new(path).header(), None);
    }
}
