//! A serving certificate that follows its files on disk, so a `ServerConfig` built once always
//! serves the current pair.
//!
//! Secret volumes are updated by the kubelet swapping a `..data` symlink in the mount directory;
//! an inotify watch on the file paths would follow the old inodes and miss that. So the watcher
//! watches the *directories* holding the files, debounces bursts of events, rereads both files,
//! and also polls in case inotify is unavailable (limits exhausted, some overlay filesystems).

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::tls::{Error, ServingCertificate};

/// A certificate and key read from two files and replaced when the files change.
///
/// Implements rustls' `ResolvesServerCert`: every handshake gets the pair current at that moment;
/// established connections keep the one they started with.
///
/// **Validity policy.** A pair that is expired or not yet valid is *served* at start-up, with an
/// error log, rather than refused: refusing would crash-loop the pod, and Kubernetes' restart
/// back-off (up to five minutes) would delay recovery after the Secret is renewed, whereas the
/// watcher picks up a renewed pair within seconds. Health and readiness stay reachable (the
/// aggregator's availability probe does not verify our certificate either), and
/// [`ReloadingCertificate::not_after`] lets readiness and metrics report the problem. On reload,
/// a replacement that is not valid now is refused while the current pair is still valid (never
/// trade a good certificate for a bad one), and taken otherwise (a pair that is not valid *yet*
/// is often a fresh one seen through a little clock skew, and is better than an expired one).
#[derive(Clone)]
pub struct ReloadingCertificate {
    shared: Arc<Shared>,
}

struct Shared {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<ServingCertificate>>,
    /// Hash of the file contents the current pair was built from; unchanged files are not
    /// parsed again. `None` while a generated fallback is served (the files did not exist).
    fingerprint: Mutex<Option<u64>>,
}

impl fmt::Debug for ReloadingCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCertificate")
            .field("cert_path", &self.shared.cert_path)
            .field("key_path", &self.shared.key_path)
            .field("not_after", &crate::tls::time::rfc3339(self.not_after()))
            .finish()
    }
}

/// What a [`ReloadingCertificate::reload`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The files hold the pair already served.
    Unchanged,
    /// A new pair is served from now on.
    Replaced,
}

impl ReloadingCertificate {
    /// Loads the pair; fails if it cannot be served at all (see [`ServingCertificate`] for the
    /// errors). Call [`Self::watch`] to follow changes.
    pub fn load(cert_path: impl Into<PathBuf>, key_path: impl Into<PathBuf>) -> Result<Self, Error> {
        let (cert_path, key_path) = (cert_path.into(), key_path.into());
        let (certificate, fingerprint) = read_pair(&cert_path, &key_path)?;
        Ok(Self::serving(cert_path, key_path, certificate, Some(fingerprint)))
    }

    /// Like [`Self::load`], but when a file does not exist (an optional Secret volume whose
    /// Secret is not written yet) serves what `fallback` makes (a generated self-signed pair)
    /// until both files appear; [`Self::watch`] or [`Self::reload`] then switch to them with no
    /// restart. Files that exist but do not load are an error, as with [`Self::load`].
    pub fn load_or_fallback(
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
        fallback: impl FnOnce() -> Result<ServingCertificate, Error>,
    ) -> Result<Self, Error> {
        let (cert_path, key_path) = (cert_path.into(), key_path.into());
        match read_pair(&cert_path, &key_path) {
            Ok((certificate, fingerprint)) => Ok(Self::serving(cert_path, key_path, certificate, Some(fingerprint))),
            Err(Error::Read { path, source }) if source.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(
                    missing = %path.display(),
                    "no serving certificate there yet: serving a generated one until the files appear"
                );
                Ok(Self::serving(cert_path, key_path, fallback()?, None))
            }
            Err(err) => Err(err),
        }
    }

    fn serving(
        cert_path: PathBuf,
        key_path: PathBuf,
        certificate: ServingCertificate,
        fingerprint: Option<u64>,
    ) -> Self {
        if let Err(err) = certificate.check_valid_at(SystemTime::now()) {
            tracing::error!(error = %err, "serving a certificate that is not valid now; clients will reject it until it is replaced");
        } else {
            let origin = if fingerprint.is_some() {
                cert_path.display().to_string()
            } else {
                "the generated fallback".to_owned()
            };
            tracing::info!(
                from = %origin,
                names = ?certificate.names(),
                not_after = %crate::tls::time::rfc3339(certificate.validity().not_after),
                "loaded the serving certificate"
            );
        }
        let shared = Shared {
            cert_path,
            key_path,
            current: RwLock::new(Arc::new(certificate)),
            fingerprint: Mutex::new(fingerprint),
        };
        Self { shared: Arc::new(shared) }
    }

    /// Whether the generated fallback of [`Self::load_or_fallback`] is served (the files have
    /// not appeared yet).
    pub fn is_fallback(&self) -> bool {
        self.shared.fingerprint.lock().unwrap_or_else(PoisonError::into_inner).is_none()
    }

    /// The pair served now.
    pub fn current(&self) -> Arc<ServingCertificate> {
        Arc::clone(&self.shared.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// What the next handshake will serve (the resolver's whole work: one read lock and one
    /// reference count).
    pub fn certified_key(&self) -> Arc<CertifiedKey> {
        Arc::clone(self.shared.current.read().unwrap_or_else(PoisonError::into_inner).certified_key())
    }

    /// The served certificate's notAfter, for metrics and readiness.
    pub fn not_after(&self) -> SystemTime {
        self.current().validity().not_after
    }

    /// Rereads both files now and swaps the pair in if they changed and load. On error the
    /// current pair stays in service.
    pub fn reload(&self) -> Result<Reloaded, Error> {
        let (cert_pem, key_pem) = match read_files(&self.shared.cert_path, &self.shared.key_path) {
            Ok(files) => files,
            // Still waiting for the files while the fallback serves: nothing to report.
            Err(Error::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound && self.is_fallback() => {
                return Ok(Reloaded::Unchanged);
            }
            Err(err) => return Err(err),
        };
        let fingerprint = fingerprint(&cert_pem, &key_pem);
        let mut served = self.shared.fingerprint.lock().unwrap_or_else(PoisonError::into_inner);
        if *served == Some(fingerprint) {
            return Ok(Reloaded::Unchanged);
        }
        let candidate = ServingCertificate::from_pem_with_origin(
            &cert_pem,
            &key_pem,
            &self.shared.cert_path.display().to_string(),
            &self.shared.key_path.display().to_string(),
        )?;
        let now = SystemTime::now();
        if let Err(err) = candidate.check_valid_at(now) {
            if self.current().check_valid_at(now).is_ok() {
                return Err(err);
            }
            tracing::error!(error = %err, "replacing an invalid serving certificate with another invalid one");
        }
        tracing::info!(
            cert = %self.shared.cert_path.display(),
            names = ?candidate.names(),
            not_after = %crate::tls::time::rfc3339(candidate.validity().not_after),
            "serving a new certificate"
        );
        *self.shared.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(candidate);
        *served = Some(fingerprint);
        Ok(Reloaded::Replaced)
    }

    /// Starts following the files in a tokio task: directory events (debounced) and a periodic
    /// poll each trigger [`Self::reload`]; a failed reload is logged as a warning and retried at
    /// the next event or poll. The task stops when the returned guard is dropped or
    /// [`CertificateWatcher::stop`] is awaited.
    ///
    /// If inotify cannot be set up (e.g. `fs.inotify.max_user_instances` exhausted) this logs a
    /// warning and relies on polling alone. Fails only outside a tokio runtime.
    pub fn watch(&self, options: WatchOptions) -> Result<CertificateWatcher, Error> {
        let certificate = self.clone();
        let paths = [self.shared.cert_path.as_path(), self.shared.key_path.as_path()];
        follow_files(&paths, options, "ReloadingCertificate::watch", move |trigger| match certificate.reload() {
            Ok(Reloaded::Replaced) => tracing::debug!(trigger, "serving certificate reloaded"),
            Ok(Reloaded::Unchanged) => {}
            Err(err) => tracing::warn!(
                trigger,
                error = %err,
                "keeping the current serving certificate: the files on disk do not load"
            ),
        })
    }
}

/// Follows files mounted from a Secret or ConfigMap volume (or any files): calls `changed` on the
/// blocking pool after events in the directories holding them (debounced, so the kubelet's
/// `..data` symlink swap is one call) and on every poll of `options`, with `"file event"` or
/// `"poll"`. `changed` rereads the files and decides whether anything changed. Stops when the
/// returned guard is dropped or stopped. Fails only outside a tokio runtime (`caller` names
/// the caller in that error).
pub fn follow_files(
    paths: &[&Path],
    options: WatchOptions,
    caller: &'static str,
    changed: impl Fn(&'static str) + Send + Sync + 'static,
) -> Result<CertificateWatcher, Error> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime(caller))?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let (events_tx, events_rx) = mpsc::channel(1);
    let watcher = if options.file_events { watch_directories(paths, events_tx) } else { None };
    let task = runtime.spawn(follow(Arc::new(changed), options, stop_rx, events_rx, watcher));
    Ok(CertificateWatcher { stop: Some(stop_tx), task: Some(task) })
}

/// A notify watcher on each directory holding one of the files, sending a wake-up per
/// relevant event (the channel holds one, so bursts coalesce).
fn watch_directories(paths: &[&Path], events: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    let handler = move |event: notify::Result<notify::Event>| match event {
        Ok(event) if is_change(&event.kind) => {
            let _ = events.try_send(()); // full: a wake-up is already pending
        }
        Ok(_) => {}
        Err(err) => tracing::warn!(error = %err, "file directory watch reported an error"),
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(watcher) => watcher,
        Err(err) => {
            tracing::warn!(error = %err, "cannot watch the files' directories; relying on polling");
            return None;
        }
    };
    let mut directories: Vec<PathBuf> = paths.iter().map(|path| parent(path)).collect();
    directories.sort();
    directories.dedup();
    for directory in directories {
        if let Err(err) = watcher.watch(&directory, RecursiveMode::NonRecursive) {
            tracing::warn!(directory = %directory.display(), error = %err, "cannot watch a directory; relying on polling");
        }
    }
    Some(watcher)
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.certified_key())
    }
}

/// The certificate file's bytes, then the key file's.
fn read_files(cert_path: &Path, key_path: &Path) -> Result<(Vec<u8>, Vec<u8>), Error> {
    Ok((crate::tls::pem::read_file(cert_path)?, crate::tls::pem::read_file(key_path)?))
}

/// Reads and parses a pair, with the fingerprint of the bytes it came from.
fn read_pair(cert_path: &Path, key_path: &Path) -> Result<(ServingCertificate, u64), Error> {
    let (cert_pem, key_pem) = read_files(cert_path, key_path)?;
    let certificate = ServingCertificate::from_pem_with_origin(
        &cert_pem,
        &key_pem,
        &cert_path.display().to_string(),
        &key_path.display().to_string(),
    )?;
    Ok((certificate, fingerprint(&cert_pem, &key_pem)))
}

/// Change detection only (not security): a collision would at worst delay a reload to the next
/// change.
fn fingerprint(cert_pem: &[u8], key_pem: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    cert_pem.hash(&mut hasher);
    key_pem.hash(&mut hasher);
    hasher.finish()
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Whether an event can mean new contents. Opens and reads (our own reloads among them) cannot,
/// and reacting to them would make every reload trigger the next.
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// How a [`ReloadingCertificate`] follows its files.
#[derive(Clone, Copy, Debug)]
pub struct WatchOptions {
    debounce: Duration,
    poll_interval: Duration,
    file_events: bool,
}

impl Default for WatchOptions {
    /// Debounce 250 ms, poll every 60 s, directory events on.
    fn default() -> Self {
        Self { debounce: Duration::from_millis(250), poll_interval: Duration::from_secs(60), file_events: true }
    }
}

impl WatchOptions {
    /// How long to wait after a directory event for the burst to end before rereading (the
    /// kubelet's swap and a `cp` of two files are each several events).
    pub fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// How often to reread the files regardless of events (at least one millisecond).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Whether to use directory events at all (off: poll only).
    pub fn file_events(mut self, enabled: bool) -> Self {
        self.file_events = enabled;
        self
    }
}

/// Keeps a [`ReloadingCertificate`] (or the callback of [`follow_files`]) following its files;
/// dropping it stops the task (and with it the inotify watch) promptly (the stop signal wakes it).
#[derive(Debug)]
pub struct CertificateWatcher {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl CertificateWatcher {
    /// Stops following and waits for the task to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for CertificateWatcher {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn follow(
    changed: Arc<dyn Fn(&'static str) + Send + Sync>,
    options: WatchOptions,
    mut stop: oneshot::Receiver<()>,
    mut events: mpsc::Receiver<()>,
    watcher: Option<notify::RecommendedWatcher>,
) {
    let start = tokio::time::Instant::now() + options.poll_interval;
    let mut poll = tokio::time::interval_at(start, options.poll_interval);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // With no watcher the sender is gone and `recv` would return at once forever.
    let mut events_open = watcher.is_some();
    loop {
        let trigger = tokio::select! {
            _ = &mut stop => break,
            event = events.recv(), if events_open => {
                if event.is_none() {
                    events_open = false;
                    continue;
                }
                tokio::select! {
                    _ = &mut stop => break,
                    () = tokio::time::sleep(options.debounce) => {}
                }
                while events.try_recv().is_ok() {}
                "file event"
            }
            _ = poll.tick() => "poll",
        };
        let changed = Arc::clone(&changed);
        if let Err(err) = tokio::task::spawn_blocking(move || changed(trigger)).await {
            tracing::warn!(error = %err, "file reload task failed");
        }
    }
    drop(watcher);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_or_reading_a_file_is_not_a_change_but_closing_a_written_one_is() {
        use notify::event::{CreateKind, ModifyKind, RenameMode};
        assert!(!is_change(&EventKind::Access(AccessKind::Open(AccessMode::Any))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(AccessMode::Read))));
        assert!(is_change(&EventKind::Access(AccessKind::Close(AccessMode::Write))));
        assert!(is_change(&EventKind::Create(CreateKind::Any)));
        assert!(is_change(&EventKind::Modify(ModifyKind::Name(RenameMode::To))));
    }

    #[test]
    fn a_bare_file_name_is_watched_in_the_current_directory() {
        assert_eq!(parent(Path::new("tls.crt")), PathBuf::from("."));
        assert_eq!(parent(Path::new("/certs/tls.crt")), PathBuf::from("/certs"));
    }
}
