//! The in-memory store of NodeResourceTopology objects, with a bounded watch history.
//!
//! One writer at a time (a write lock held only for map updates and one serialization), many
//! readers: a GET by name is a hash lookup that clones an `Arc`, and the object's JSON is
//! serialized once per write, so reads never serialize.
//!
//! Every accepted write gets the next resourceVersion of one monotonic sequence. The sequence
//! starts at the server's start time in microseconds, so it does not go backwards across a
//! restart: a client holding a resourceVersion from before the restart is older than anything
//! the history holds and gets `410 Expired`, and relists, instead of a silently wrong stream.
//!
//! Writes that do not change the object (same topology after canonical ordering, same labels,
//! annotations, owners and finalizers) keep the old resourceVersion and emit no event: every
//! NRT event makes kube-scheduler requeue pods.
//!
//! Freshness: every object carries [`LAST_CHANGE_ANNOTATION`], the time of the last accepted
//! write that changed it, set by the server alone. A write that changes nothing leaves it as it
//! is (bumping it would be a change, hence an event, on every heartbeat); the time of every
//! report, changed or not, is kept beside the object ([`Stored::last_report`]) for the per-node
//! age metric and the table's `Reported` column.
//!
//! Memory: the current version of an object is shared by `Arc` between the map and the history
//! event that created it. Once a write replaces it, the history keeps a slim copy instead (the
//! JSON bytes, shared, plus the name and labels selectors read, and its Table and metadata parts
//! when they were rendered already; a deletion's last state has them rendered up front). An old
//! version is decoded again only on the rare paths that need it (a Table of an exact LIST at an
//! old revision); if that ever failed the request gets a 500, never a made-up object. The
//! history is bounded by event count and by bytes, oldest events first.

mod clock;
mod history;
mod replica;
mod semantics;
mod stored;
#[cfg(test)]
pub(crate) mod tests;
mod wakeups;

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use numaresources_api::nrt::NodeResourceTopology;

pub use history::{DEFAULT_HISTORY, DEFAULT_HISTORY_BYTES, Event, EventType, WatchRefusal, WatchStart};
use history::{rebuild, retire};
pub use replica::{Replica, ReplicaError, ReplicationBatch};
pub use semantics::{FOREGROUND_FINALIZER, LAST_CHANGE_ANNOTATION, ORPHAN_FINALIZER, Preconditions, Propagation};
use semantics::{check_preconditions, finalizers, now, same_set, stamp_last_change, unchanged, unix_seconds};
pub use stored::Stored;
use stored::{ENCODING_SLACK_BYTES, stored, stored_sized};
use wakeups::Wakeups;

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No object by that name.
    #[error("not found")]
    NotFound,
    /// An object by that name exists already.
    #[error("already exists")]
    AlreadyExists,
    /// A precondition (resourceVersion or uid) does not hold.
    #[error("{0}")]
    Conflict(String),
    /// The object could not be serialized, or a stored one decoded (never expected: our types
    /// always serialize, and the stored bytes are their serialization).
    #[error("encoding the object: {0}")]
    Serialize(#[from] serde_json::Error),
    /// The written object's JSON is larger than the caller allows.
    #[error("the object is larger than {limit} bytes once encoded")]
    TooLarge {
        /// The most bytes allowed.
        limit: usize,
    },
}

/// A consistent view of all objects.
#[derive(Debug)]
pub struct Snapshot {
    /// Objects sorted by name.
    pub items: Vec<Arc<Stored>>,
    /// The revision the snapshot reflects.
    pub revision: u64,
}

/// The store.
#[derive(Debug)]
pub struct Store {
    state: RwLock<State>,
    /// The last revision written, for watchers waiting for changes: of every object, or of one
    /// name only ([`Wakeups`]: a change wakes the watchers of its own name, not every watch).
    ///
    /// Lock order: `state`, then this channel (writes publish while holding `state`). Code that
    /// holds the channel borrowed (`borrow`, `wait_for`'s closure) must never take `state`:
    /// with a writer waiting in between, each side would wait for the other forever.
    revisions: Wakeups,
    history_limit: usize,
    history_bytes_limit: usize,
    uid_seed: std::collections::hash_map::RandomState,
    /// Clients see changes up to this revision only ([`u64::MAX`]: all of them). A replicated
    /// leader sets it to what its in-sync followers hold, so no client ever sees a change that a
    /// failover could lose (followers see everything: that is how they come to hold it).
    visible: AtomicU64,
}

#[derive(Debug)]
struct State {
    objects: HashMap<String, Arc<Stored>>,
    history: VecDeque<Arc<Event>>,
    /// The sum of the history's [`Event::charge`]s.
    history_bytes: usize,
    /// The last revision handed out.
    revision: u64,
    /// Watches may resume from this revision or any later one.
    oldest_resumable: u64,
}

impl Default for Store {
    fn default() -> Self {
        Self::new(DEFAULT_HISTORY)
    }
}

impl Store {
    /// An empty store keeping `history_limit` events for resuming watches.
    pub fn new(history_limit: usize) -> Self {
        let start = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_micros() as u64);
        Self::starting_at(start, history_limit)
    }

    /// An empty store whose first write gets revision `start + 1`.
    pub fn starting_at(start: u64, history_limit: usize) -> Self {
        let revisions = Wakeups::new(start);
        Self {
            state: RwLock::new(State {
                objects: HashMap::new(),
                history: VecDeque::new(),
                history_bytes: 0,
                revision: start,
                oldest_resumable: start,
            }),
            revisions,
            history_limit: history_limit.max(1),
            history_bytes_limit: DEFAULT_HISTORY_BYTES,
            uid_seed: std::collections::hash_map::RandomState::new(),
            visible: AtomicU64::new(u64::MAX),
        }
    }

    /// Bounds the watch history by bytes as well (see [`Event::charge`]); the newest event is
    /// kept whatever its size.
    pub fn with_history_bytes(mut self, bytes: usize) -> Self {
        self.history_bytes_limit = bytes;
        self
    }

    /// The object named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Stored>> {
        self.read().objects.get(name).cloned()
    }

    /// The object named `name` as clients may see it: at the visible revision, so a version a
    /// replicated leader holds back (its followers do not have it yet) is never handed out.
    pub fn get_visible(&self, name: &str) -> Option<Arc<Stored>> {
        let state = self.read();
        let visible = self.visible_in(&state);
        let mut answer = state.objects.get(name).cloned();
        // Walk back over the changes clients may not see yet: the object as it was before the
        // first of them (as `rebuild` does for every object).
        for event in state.history.iter().rev().take_while(|event| event.revision > visible) {
            if event.object.name() == name {
                answer = event.previous.clone();
            }
        }
        answer
    }

    /// Every object clients may see, sorted by name, and the revision they reflect.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.read();
        let revision = self.visible_in(&state);
        let mut items: Vec<Arc<Stored>> = if revision < state.revision {
            rebuild(&state, revision).into_values().collect()
        } else {
            state.objects.values().cloned().collect()
        };
        drop(state);
        items.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        Snapshot { items, revision }
    }

    /// How many objects the store holds.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// True when the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Creates `object`. Server-owned metadata is set here; `dry_run` validates without storing.
    pub fn create(&self, object: NodeResourceTopology, dry_run: bool) -> Result<Arc<Stored>, StoreError> {
        self.create_within(object, dry_run, usize::MAX)
    }

    /// [`Store::create`], refusing ([`StoreError::TooLarge`]) an object whose JSON, as stored, is
    /// larger than `max_json_bytes` (read off the encoding the store makes anyway).
    pub fn create_within(
        &self,
        mut object: NodeResourceTopology,
        dry_run: bool,
        max_json_bytes: usize,
    ) -> Result<Arc<Stored>, StoreError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let mut state = self.write();
        if state.objects.contains_key(&name) {
            return Err(StoreError::AlreadyExists);
        }
        let revision = state.revision + 1;
        let now = now();
        let meta = &mut object.metadata;
        meta.namespace = None;
        meta.uid = Some(self.new_uid(&name, revision));
        meta.creation_timestamp = Some(Time(now));
        meta.generation = Some(1);
        meta.deletion_timestamp = None;
        meta.deletion_grace_period_seconds = None;
        meta.self_link = None;
        meta.managed_fields = None;
        meta.resource_version = Some(revision.to_string());
        stamp_last_change(meta, now);
        let stored = Arc::new(stored(object, revision, Arc::new(AtomicU64::new(unix_seconds(now))))?);
        if stored.json.len() > max_json_bytes {
            return Err(StoreError::TooLarge { limit: max_json_bytes });
        }
        if !dry_run {
            state.revision = revision;
            state.objects.insert(name, stored.clone());
            self.publish(&mut state, EventType::Added, &stored, None);
        }
        Ok(stored)
    }

    /// Replaces the object named like `object`, if `preconditions` hold (the object's own
    /// `metadata.resourceVersion`, when set, is a precondition too). Returns the stored object
    /// and whether anything changed.
    pub fn update(
        &self,
        object: NodeResourceTopology,
        preconditions: &Preconditions,
        dry_run: bool,
    ) -> Result<(Arc<Stored>, bool), StoreError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        self.modify_within(&name, preconditions, dry_run, usize::MAX, |_| Ok::<_, StoreError>(object))
    }

    /// Computes the new object from the current one under the write lock (patches apply to the
    /// exact state they replace), then writes it like [`Store::update`], refusing
    /// ([`StoreError::TooLarge`]) a new version whose JSON, as stored (server-set metadata
    /// included), is larger than `max_json_bytes`: the size is read off the encoding the store
    /// makes anyway rather than from a second serialization.
    pub fn modify_within<E: From<StoreError>>(
        &self,
        name: &str,
        preconditions: &Preconditions,
        dry_run: bool,
        max_json_bytes: usize,
        change: impl FnOnce(&NodeResourceTopology) -> Result<NodeResourceTopology, E>,
    ) -> Result<(Arc<Stored>, bool), E> {
        let mut state = self.write();
        let current = state.objects.get(name).cloned().ok_or(StoreError::NotFound)?;
        check_preconditions(&current, preconditions)?;
        let current_object = current.object().map_err(StoreError::from)?;
        let mut next = change(&current_object)?;
        let given_rv = next.metadata.resource_version.clone().filter(|rv| !rv.is_empty());
        if let Some(rv) = given_rv
            && rv != current.revision.to_string()
        {
            return Err(StoreError::Conflict(format!(
                "the object has been modified; please apply your changes to the latest version and try again \
                 (you sent resourceVersion {rv}, the current one is {})",
                current.revision
            ))
            .into());
        }
        if let Some(uid) = next.metadata.uid.as_deref().filter(|u| !u.is_empty())
            && Some(uid) != current_object.metadata.uid.as_deref()
        {
            return Err(StoreError::Conflict(format!(
                "Precondition failed: UID in object meta: {uid}, does not match the stored object's UID"
            ))
            .into());
        }
        next.metadata.name = Some(name.to_owned());
        let now = now();
        let now_secs = unix_seconds(now);
        if unchanged(&current_object, &next) {
            if !dry_run {
                current.last_report.store(now_secs, Ordering::Relaxed);
            }
            return Ok((current, false));
        }
        let revision = state.revision + 1;
        let topology_changed = !current_object.same_topology(&next);
        let old = &current_object.metadata;
        let meta = &mut next.metadata;
        meta.namespace = None;
        meta.uid.clone_from(&old.uid);
        meta.creation_timestamp.clone_from(&old.creation_timestamp);
        meta.deletion_timestamp.clone_from(&old.deletion_timestamp);
        meta.deletion_grace_period_seconds = old.deletion_grace_period_seconds;
        meta.self_link = None;
        meta.managed_fields = None;
        meta.generation = Some(old.generation.unwrap_or(1) + i64::from(topology_changed));
        meta.resource_version = Some(revision.to_string());
        stamp_last_change(meta, now);
        // A deletion that waited for finalizers completes when the last one is removed.
        let finished = next.metadata.deletion_timestamp.is_some() && finalizers(&next.metadata).is_empty();
        let capacity = current.json.len().saturating_add(ENCODING_SLACK_BYTES);
        let stored = Arc::new(stored_sized(next, revision, current.last_report.clone(), capacity).map_err(E::from)?);
        if stored.json.len() > max_json_bytes {
            return Err(StoreError::TooLarge { limit: max_json_bytes }.into());
        }
        if dry_run {
            return Ok((stored, true));
        }
        current.last_report.store(now_secs, Ordering::Relaxed);
        self.commit(&mut state, name, &current, &stored, finished);
        Ok((stored, true))
    }

    /// Deletes the object named `name` as [`Store::delete_with`] does when the request names
    /// no propagation policy.
    pub fn delete(
        &self,
        name: &str,
        preconditions: &Preconditions,
        dry_run: bool,
    ) -> Result<(Arc<Stored>, bool), StoreError> {
        self.delete_with(name, preconditions, Propagation::Default, dry_run)
    }

    /// Deletes the object named `name`, as kube-apiserver deletes a custom resource: the
    /// propagation policy first sets the garbage collector's finalizers ([`Propagation`]); an
    /// object left with finalizers is only marked for deletion (deletionTimestamp set, generation
    /// bumped the first time) and goes once its finalizers are removed. Returns the object as it
    /// was deleted (or marked) and whether it is gone.
    pub fn delete_with(
        &self,
        name: &str,
        preconditions: &Preconditions,
        propagation: Propagation,
        dry_run: bool,
    ) -> Result<(Arc<Stored>, bool), StoreError> {
        let mut state = self.write();
        let current = state.objects.get(name).cloned().ok_or(StoreError::NotFound)?;
        check_preconditions(&current, preconditions)?;
        let revision = state.revision + 1;
        let mut object = current.object()?.into_owned();
        let wanted = propagation.finalizers(finalizers(&object.metadata));
        let gone = wanted.is_empty();
        let finalizers_change = !same_set(finalizers(&object.metadata), &wanted);
        if !gone && object.metadata.deletion_timestamp.is_some() && !finalizers_change {
            // Already marked: nothing changes until the finalizers go.
            return Ok((current, false));
        }
        if finalizers_change {
            object.metadata.finalizers = Some(wanted).filter(|f| !f.is_empty());
        }
        if !gone {
            // Marking is a change like any other: a new revision, a MODIFIED event, a new stamp.
            let now = now();
            let meta = &mut object.metadata;
            if meta.deletion_timestamp.is_none() {
                meta.deletion_timestamp = Some(Time(now));
                meta.generation = meta.generation.map(|g| g + 1);
            }
            meta.deletion_grace_period_seconds = Some(0);
            stamp_last_change(meta, now);
        }
        object.metadata.resource_version = Some(revision.to_string());
        let stored = Arc::new(stored(object, revision, current.last_report.clone())?);
        if dry_run {
            return Ok((stored, gone));
        }
        self.commit(&mut state, name, &current, &stored, gone);
        Ok((stored, gone))
    }

    /// Puts `stored` (the next revision of `current`) in place: removed and DELETED when `gone`,
    /// else replaced and MODIFIED; the replaced version goes to the history.
    fn commit(&self, state: &mut State, name: &str, current: &Arc<Stored>, stored: &Arc<Stored>, gone: bool) {
        state.revision = stored.revision;
        let previous = retire(state, current);
        if gone {
            state.objects.remove(name);
            self.publish(state, EventType::Deleted, &Arc::new(stored.replaced(true)), Some(previous));
        } else {
            state.objects.insert(name.to_owned(), stored.clone());
            self.publish(state, EventType::Modified, stored, Some(previous));
        }
    }

    fn publish(&self, state: &mut State, kind: EventType, object: &Arc<Stored>, previous: Option<Arc<Stored>>) {
        let event = Arc::new(Event { kind, revision: object.revision, object: object.clone(), previous });
        state.history_bytes += event.charge();
        state.history.push_back(event.clone());
        while state.history.len() > 1
            && (state.history.len() > self.history_limit || state.history_bytes > self.history_bytes_limit)
        {
            if let Some(dropped) = state.history.pop_front() {
                state.history_bytes -= dropped.charge();
                state.oldest_resumable = dropped.revision;
            }
        }
        // Watchers read the event from the history; this only wakes them: the watchers of every
        // object, and those of this object's name alone once clients may see it.
        let visible = event.revision <= self.visible.load(Ordering::Acquire);
        self.revisions.publish(event.revision, object.name(), state.oldest_resumable, visible);
    }

    /// A random version-4-shaped UUID (no extra dependency: the std hasher is seeded randomly
    /// per process, and the name and revision make each input unique).
    fn new_uid(&self, name: &str, revision: u64) -> String {
        let mut words = [0u64; 2];
        for (i, word) in words.iter_mut().enumerate() {
            let mut hasher = self.uid_seed.build_hasher();
            hasher.write(name.as_bytes());
            hasher.write_u64(revision);
            hasher.write_usize(i);
            *word = hasher.finish();
        }
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&words[0].to_be_bytes());
        bytes[8..].copy_from_slice(&words[1].to_be_bytes());
        bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
        bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-written (every mutation is a
        // single insert/remove), so a poisoned lock is still consistent.
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
