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

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use numaresources_api::nrt::NodeResourceTopology;
use tokio::sync::watch;

use crate::row_parts::RowParts;
use crate::watch::wakeups::{NameEvents, Wakeups};

/// The server-set annotation holding when the object last changed (RFC 3339, UTC, seconds).
/// Named in our own API domain; clients cannot set it: a value they send is replaced, and a stale
/// copy sent back with an otherwise unchanged object is not a change.
pub const LAST_CHANGE_ANNOTATION: &str = "nodetopology.openshift.io/last-change";

/// How many events the watch history keeps by default.
pub const DEFAULT_HISTORY: usize = 10_000;
/// How many bytes of object versions the watch history may hold by default: with objects of
/// ≈1.5 KB, ≈2,400 changes (each holds the new and the replaced version), which keeps a server
/// with 5,000 such objects within its 64 MiB (BENCHMARKS.md).
pub const DEFAULT_HISTORY_BYTES: usize = 8 * 1024 * 1024;
/// What one history entry costs beside the JSON it holds (the event and the slim version).
const ENTRY_OVERHEAD: usize = std::mem::size_of::<Event>() + std::mem::size_of::<Stored>() + 64;

/// One stored version of an object with its pre-serialized JSON.
#[derive(Debug)]
pub struct Stored {
    /// The typed object, or only what selectors need of a replaced version.
    content: Content,
    /// The object as JSON, computed once at write time (metadata complete: uid,
    /// resourceVersion, creationTimestamp, generation).
    pub json: Bytes,
    /// The resourceVersion of `object`, as a number.
    pub revision: u64,
    /// When a writer last reported this object, changed or not.
    pub last_report: Arc<AtomicU64>,
    /// A current version's Table row and metadata JSON, rendered by the first read that needs
    /// them (writes, which outnumber Table reads, do not pay for them).
    row_parts: OnceLock<RowParts>,
}

#[derive(Debug)]
enum Content {
    /// A current version (or one just written): the typed object (boxed, so a replaced version
    /// does not carry its size).
    Typed(Box<NodeResourceTopology>),
    /// A replaced version kept by the watch history: `json` holds the rest, and `row_parts`
    /// the Table and metadata parts when they were rendered before it was replaced.
    Replaced { name: String, labels: Option<BTreeMap<String, String>>, row_parts: Option<RowParts> },
}

impl Stored {
    /// The object's name.
    pub fn name(&self) -> &str {
        match &self.content {
            Content::Typed(object) => object.metadata.name.as_deref().unwrap_or_default(),
            Content::Replaced { name, .. } => name,
        }
    }

    /// The object's labels.
    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        match &self.content {
            Content::Typed(object) => object.metadata.labels.as_ref(),
            Content::Replaced { labels, .. } => labels.as_ref(),
        }
    }

    /// The typed object: borrowed for a current version, decoded from the JSON for a replaced
    /// one. A decoding failure (never expected: the bytes are our own serialization of this
    /// type) is an error for the caller to report, never an invented object.
    pub fn object(&self) -> Result<Cow<'_, NodeResourceTopology>, serde_json::Error> {
        match &self.content {
            Content::Typed(object) => Ok(Cow::Borrowed(object)),
            Content::Replaced { .. } => serde_json::from_slice(&self.json).map(Cow::Owned),
        }
    }

    /// This version as the history keeps it once replaced: the same JSON bytes, the name, the
    /// labels and the Table and metadata parts when they are rendered already, no typed object.
    /// `render` renders the parts first (for a deletion's last state, which metadata and Table
    /// watchers are sent as it is).
    fn replaced(&self, render: bool) -> Self {
        let row_parts = match (&self.content, self.row_parts.get()) {
            (_, Some(parts)) => Some(parts.clone()),
            (Content::Typed(object), None) if render => Some(RowParts::of(object)),
            (Content::Replaced { row_parts, .. }, None) => row_parts.clone(),
            _ => None,
        };
        Self {
            content: Content::Replaced { name: self.name().to_owned(), labels: self.labels().cloned(), row_parts },
            json: self.json.clone(),
            revision: self.revision,
            last_report: self.last_report.clone(),
            row_parts: OnceLock::new(),
        }
    }

    /// Seconds since the Unix epoch of the last accepted report.
    pub fn last_report_unix(&self) -> u64 {
        self.last_report.load(Ordering::Relaxed)
    }

    /// The object's Table row and metadata JSON: rendered once for a current version; for a
    /// replaced one, the parts it kept or, failing those, parts rendered from its JSON (not
    /// kept, so what the history holds does not grow after the fact).
    pub fn row_parts(&self) -> Result<Cow<'_, RowParts>, serde_json::Error> {
        match &self.content {
            Content::Typed(object) => Ok(Cow::Borrowed(self.row_parts.get_or_init(|| RowParts::of(object)))),
            Content::Replaced { row_parts: Some(parts), .. } => Ok(Cow::Borrowed(parts)),
            Content::Replaced { row_parts: None, .. } => Ok(Cow::Owned(RowParts::of(&*self.object()?))),
        }
    }

    /// The object's `metadata` as JSON, keys sorted (what [`RowParts`] holds): a replaced
    /// version without parts reads it from its JSON, without decoding the whole object.
    pub fn metadata_json(&self) -> Result<Cow<'_, str>, serde_json::Error> {
        if let Content::Replaced { row_parts: None, .. } = &self.content {
            let mut value: serde_json::Value = serde_json::from_slice(&self.json)?;
            return match value.get_mut("metadata").map(serde_json::Value::take) {
                Some(metadata @ serde_json::Value::Object(_)) => Ok(Cow::Owned(metadata.to_string())),
                _ => Err(serde::de::Error::missing_field("metadata")),
            };
        }
        Ok(match self.row_parts()? {
            Cow::Borrowed(parts) => Cow::Borrowed(parts.metadata()),
            Cow::Owned(parts) => Cow::Owned(parts.metadata().to_owned()),
        })
    }

    /// What this version costs the history beside its JSON: the parts a replaced version
    /// keeps (fixed once it is replaced; a current version's parts are the map's cost).
    fn kept_parts_size(&self) -> usize {
        match &self.content {
            Content::Replaced { row_parts: Some(parts), .. } => parts.size(),
            _ => 0,
        }
    }
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The watch event type as the API spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers see it.
#[derive(Debug)]
pub struct Event {
    /// What happened.
    pub kind: EventType,
    /// The resourceVersion of the change.
    pub revision: u64,
    /// The object after the change (for a deletion: the last state, at the deletion's revision).
    pub object: Arc<Stored>,
    /// The object before the change, for modifications (selector-filtered watches need it).
    pub previous: Option<Arc<Stored>>,
}

impl Event {
    /// What the history charges for this event against its byte bound: the versions it holds.
    /// A version created by one retained event and replaced by the next is counted by both, so
    /// the bound errs on the safe side.
    fn charge(&self) -> usize {
        let version = |stored: &Stored| stored.json.len() + stored.kept_parts_size() + ENTRY_OVERHEAD;
        version(&self.object) + self.previous.as_deref().map_or(0, version)
    }
}

/// Why a watch cannot start where it was asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchRefusal {
    /// The history no longer reaches back that far (or the version is from before a restart);
    /// watches may resume from `oldest` on.
    TooOld {
        /// The oldest revision a watch may resume from.
        oldest: u64,
    },
    /// The version is newer than any this store has handed out.
    TooLarge {
        /// The store's current revision.
        current: u64,
    },
}

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

/// What a leader streams next to a follower.
#[derive(Debug)]
pub struct ReplicationBatch {
    /// The events after the follower's position, oldest first.
    pub events: Vec<Arc<Event>>,
    /// The head revision when they were read.
    pub head: u64,
    /// The revision up to which clients may see changes (what the followers hold).
    pub visible: u64,
}

/// A replicated change that does not follow from a follower's state: it must resynchronize.
#[derive(Debug, thiserror::Error)]
#[error("replication: {0}")]
pub struct ReplicaError(String);

/// A point from which a watch starts.
///
/// Watchers read changes from the history ([`Store::events_after`]) rather than from a channel
/// of their own: a watcher that stops reading holds no versions, so what the history holds,
/// which its bounds cover, is all that changes keep alive. One that falls behind the history
/// is told to relist.
#[derive(Debug)]
pub struct WatchStart {
    /// Synthetic `ADDED` events for the current state, when the watch starts with it.
    pub backlog: Vec<Arc<Event>>,
    /// Where the watch stands once the backlog is sent: the changes after this revision follow.
    pub revision: u64,
    /// Tells of every new revision.
    pub changes: watch::Receiver<u64>,
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

/// The garbage collector's finalizer for an `Orphan` deletion: it removes the dependents' owner
/// references, then this finalizer, and the object goes.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The garbage collector's finalizer for a `Foreground` deletion: it deletes the dependents
/// (those with `blockOwnerDeletion` first), then removes this finalizer.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// What a deletion does with the object's dependents: DeleteOptions' `propagationPolicy`, or
/// the deprecated `orphanDependents` (true is `Orphan`, false `Background`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Neither option given: a garbage-collector finalizer the object carries already decides;
    /// without one, `Background` (kube-apiserver's default for custom resources).
    #[default]
    Default,
    /// The object goes now (unless other finalizers hold it); the collector deletes the
    /// dependents afterwards.
    Background,
    /// The object stays, with [`FOREGROUND_FINALIZER`], until its dependents are gone.
    Foreground,
    /// The object stays, with [`ORPHAN_FINALIZER`], until its dependents no longer name it.
    Orphan,
}

impl Propagation {
    /// The object's finalizers once this deletion sets the garbage collector's: the other
    /// finalizers as they are, then at most one of [`ORPHAN_FINALIZER`] and
    /// [`FOREGROUND_FINALIZER`] (kube-apiserver's `deletionFinalizersForGarbageCollection`).
    pub fn finalizers(self, current: &[String]) -> Vec<String> {
        let policy = match self {
            // The first collector finalizer the object carries wins, as in kube-apiserver.
            Self::Default => match current.iter().find(|f| is_collector_finalizer(f)).map(String::as_str) {
                Some(ORPHAN_FINALIZER) => Self::Orphan,
                Some(_) => Self::Foreground,
                None => Self::Background,
            },
            other => other,
        };
        let mut out: Vec<String> = current.iter().filter(|f| !is_collector_finalizer(f)).cloned().collect();
        match policy {
            Self::Orphan => out.push(ORPHAN_FINALIZER.to_owned()),
            Self::Foreground => out.push(FOREGROUND_FINALIZER.to_owned()),
            Self::Default | Self::Background => {}
        }
        out
    }
}

fn is_collector_finalizer(finalizer: &str) -> bool {
    finalizer == ORPHAN_FINALIZER || finalizer == FOREGROUND_FINALIZER
}

/// Whether two finalizer lists hold the same names (kube-apiserver compares them as sets).
fn same_set(a: &[String], b: &[String]) -> bool {
    a.iter().all(|f| b.contains(f)) && b.iter().all(|f| a.contains(f))
}

/// Preconditions a write must meet.
#[derive(Debug, Default, Clone)]
pub struct Preconditions {
    /// The object's current resourceVersion must be this.
    pub resource_version: Option<String>,
    /// The object's uid must be this.
    pub uid: Option<String>,
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

    /// Limits what clients see to the changes up to `revision` (None: every change), and wakes
    /// the watchers that waited for it: those of every object, and the watchers of one name
    /// whose events just became visible, not every watch of one name (a replicated leader calls
    /// this on every acknowledgement).
    pub fn set_visible(&self, revision: Option<u64>) {
        // Under the state lock, as writes publish: an event published while it was not visible
        // (it woke no watcher of its name) is after `previous` here, so this wakes them.
        let state = self.read();
        let next = revision.unwrap_or(u64::MAX);
        let previous = self.visible.swap(next, Ordering::AcqRel);
        if previous == next {
            return;
        }
        let (from, to) = (previous.min(state.revision), next.min(state.revision));
        if from < state.oldest_resumable {
            // Some of what became visible left the history unseen: every watch of one name
            // looks (those that missed an event of theirs relist).
            self.revisions.reveal_to_all(state.revision);
            return;
        }
        let first = history_index_after(&state.history, from);
        let revealed = state.history.range(first..).take_while(|e| e.revision <= to);
        self.revisions.reveal(state.revision, revealed.map(|event| event.object.name()));
    }

    fn visible_in(&self, state: &State) -> u64 {
        state.revision.min(self.visible.load(Ordering::Acquire))
    }

    /// The last revision handed out, visible to clients or not (replication's own view).
    pub fn head_revision(&self) -> u64 {
        self.read().revision
    }

    /// Every object as it was at `revision`, sorted by name, rebuilt from the current state and
    /// the watch history (what a continue token needs to page through one consistent list).
    /// `Err(oldest)` when the history no longer reaches back that far, or `revision` is not ours.
    pub fn snapshot_at(&self, revision: u64) -> Result<Snapshot, u64> {
        let state = self.read();
        if revision < state.oldest_resumable || revision > state.revision {
            return Err(state.oldest_resumable);
        }
        let objects = rebuild(&state, revision);
        drop(state);
        let mut items: Vec<Arc<Stored>> = objects.into_values().collect();
        items.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        Ok(Snapshot { items, revision })
    }

    /// How many objects the store holds.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// True when the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last revision clients may see (the last one handed out, unless a replicated leader
    /// holds changes back until its followers have them).
    pub fn revision(&self) -> u64 {
        let state = self.read();
        self.visible_in(&state)
    }

    /// Waits until clients may see `revision`, for at most `wait`. True when they may.
    pub async fn wait_visible(&self, revision: u64, wait: std::time::Duration) -> bool {
        let mut changes = self.revisions.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Marked seen before the check, so a change after it ends the wait below; the
            // borrow ends with the statement, before `revision()` takes the state lock.
            changes.borrow_and_update();
            if self.revision() >= revision {
                return true;
            }
            if !matches!(tokio::time::timeout_at(deadline, changes.changed()).await, Ok(Ok(()))) {
                return self.revision() >= revision;
            }
        }
    }

    /// Starts a watch after `from` (None: from now). Refused when `from` is older than the
    /// history reaches back (or not one of ours: the client must relist), or newer than the
    /// store's revision.
    pub fn watch(&self, from: Option<u64>) -> Result<WatchStart, WatchRefusal> {
        let state = self.read();
        let visible = self.visible_in(&state);
        let revision = match from {
            None => visible,
            Some(from) if from < state.oldest_resumable => {
                return Err(WatchRefusal::TooOld { oldest: state.oldest_resumable });
            }
            Some(from) if from > visible => return Err(WatchRefusal::TooLarge { current: visible }),
            Some(from) => from,
        };
        Ok(WatchStart { backlog: Vec::new(), revision, changes: self.revisions.subscribe() })
    }

    /// Up to `max` events after revision `after` that clients may see, oldest first. Refused
    /// when the history no longer reaches back that far: the watcher fell behind and must relist.
    pub fn events_after(&self, after: u64, max: usize) -> Result<Vec<Arc<Event>>, WatchRefusal> {
        let state = self.read();
        let visible = self.visible_in(&state);
        Self::events_in(&state, after, max, visible)
    }

    /// Tells of the changes to the object named `name` (and of changes to the store as a whole),
    /// not of others: what a watch whose selector pins the name waits on.
    pub fn subscribe_named(&self, name: &str) -> watch::Receiver<u64> {
        // Under the lock, so every event after the index's start is indexed.
        let state = self.read();
        self.revisions.subscribe_named(name, state.revision)
    }

    /// Up to `max` events of the object named `name` after revision `after` that clients may
    /// see, oldest first, and the revision read through: the watcher has seen every event of
    /// that name up to it. Refused when one of them left the history: the watcher fell behind.
    /// A watcher that has read everything of its name is not behind when other objects' changes
    /// push the history past it.
    pub fn named_events_after(
        &self,
        name: &str,
        after: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), WatchRefusal> {
        let state = self.read();
        let visible = self.visible_in(&state);
        let oldest = state.oldest_resumable;
        let revisions = match self.revisions.events_of(name, after, oldest) {
            NameEvents::At(revisions) => revisions,
            NameEvents::Lost => return Err(WatchRefusal::TooOld { oldest }),
            NameEvents::Unknown if after < oldest => return Err(WatchRefusal::TooOld { oldest }),
            NameEvents::Unknown => return Ok(scan_named(&state, name, after, max, visible)),
        };
        let mut events: Vec<Arc<Event>> = revisions
            .into_iter()
            .filter(|&revision| revision <= visible)
            .filter_map(|revision| event_at(&state, revision))
            .filter(|event| event.object.name() == name)
            .cloned()
            .collect();
        events.sort_unstable_by_key(|event| event.revision);
        events.dedup_by_key(|event| event.revision);
        if events.len() > max {
            events.truncate(max);
            let through = events.last().map_or(after, |event| event.revision);
            return Ok((events, through));
        }
        Ok((events, visible.max(after)))
    }

    /// Like [`Store::events_after`], visible or not (what a leader streams to its followers),
    /// with the head revision and the visible one read under the same lock: when fewer than
    /// `max` events come back, nothing happened between the last of them and that head.
    pub fn replication_events_after(&self, after: u64, max: usize) -> Result<ReplicationBatch, WatchRefusal> {
        let state = self.read();
        let events = Self::events_in(&state, after, max, u64::MAX)?;
        Ok(ReplicationBatch { events, head: state.revision, visible: self.visible_in(&state) })
    }

    /// Every object at the visible (committed) revision, and that revision: where a follower
    /// that synchronizes from nothing starts (the stream carries the events after it, committed
    /// or not).
    pub fn replication_snapshot(&self) -> (Vec<Arc<Stored>>, u64) {
        let state = self.read();
        let visible = self.visible_in(&state);
        let objects = if visible < state.revision {
            rebuild(&state, visible).into_values().collect()
        } else {
            state.objects.values().cloned().collect()
        };
        (objects, visible)
    }

    /// Drops every change after `revision` (a follower's changes that its new leader never
    /// committed; no client saw them, since clients see committed changes only), so the store
    /// is as it was at `revision`. False when the history does not reach back that far.
    pub fn truncate_to(&self, revision: u64) -> bool {
        let mut state = self.write();
        if revision < state.oldest_resumable || revision > state.revision {
            return revision == state.revision;
        }
        state.objects = rebuild(&state, revision);
        let keep = history_index_after(&state.history, revision);
        for dropped in state.history.drain(keep..).collect::<Vec<_>>() {
            state.history_bytes = state.history_bytes.saturating_sub(dropped.charge());
        }
        state.revision = revision;
        self.revisions.send_replace(revision);
        true
    }

    fn events_in(state: &State, after: u64, max: usize, up_to: u64) -> Result<Vec<Arc<Event>>, WatchRefusal> {
        if after < state.oldest_resumable {
            return Err(WatchRefusal::TooOld { oldest: state.oldest_resumable });
        }
        let first = history_index_after(&state.history, after);
        Ok(state.history.range(first..).take_while(|e| e.revision <= up_to).take(max).cloned().collect())
    }

    /// Starts a watch with every current object as a synthetic `ADDED` event, then every change;
    /// the backlog holds only the object named `name` when one is given (a watch whose selector
    /// pins the name: it would drop every other one).
    pub fn watch_with_snapshot_of(&self, name: Option<&str>) -> WatchStart {
        let state = self.read();
        let revision = self.visible_in(&state);
        let visible_objects;
        let all = if revision < state.revision {
            visible_objects = rebuild(&state, revision);
            &visible_objects
        } else {
            &state.objects
        };
        let mut objects: Vec<&Arc<Stored>> = match name {
            Some(name) => all.get(name).into_iter().collect(),
            None => all.values().collect(),
        };
        objects.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        let backlog = objects
            .into_iter()
            .map(|object| {
                Arc::new(Event {
                    kind: EventType::Added,
                    revision: object.revision,
                    object: object.clone(),
                    previous: None,
                })
            })
            .collect();
        WatchStart { backlog, revision, changes: self.revisions.subscribe() }
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

    /// Applies one change the leader made, at the leader's revision (`object`'s
    /// resourceVersion), exactly as the leader stored it: followers keep the same objects, the
    /// same resourceVersions and the same watch history as the leader. A change that does not
    /// follow from this store's state (out of order, or about an object it does not hold) is
    /// refused: the follower must resynchronize.
    pub fn apply_replicated(&self, kind: EventType, object: NodeResourceTopology) -> Result<(), ReplicaError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let revision = object
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok())
            .ok_or_else(|| ReplicaError(format!("{name}: the change carries no numeric resourceVersion")))?;
        let mut state = self.write();
        if revision <= state.revision {
            return Err(ReplicaError(format!(
                "{name}: revision {revision} is not after this replica's revision {}",
                state.revision
            )));
        }
        let current = state.objects.get(&name).cloned();
        let last_report = Arc::new(AtomicU64::new(unix_seconds(now())));
        let stored = Arc::new(stored(object, revision, last_report).map_err(|e| ReplicaError(e.to_string()))?);
        match (kind, current) {
            (EventType::Added, None) => {
                state.revision = revision;
                state.objects.insert(name, stored.clone());
                self.publish(&mut state, EventType::Added, &stored, None);
            }
            (EventType::Modified, Some(current)) => self.commit(&mut state, &name, &current, &stored, false),
            (EventType::Deleted, Some(current)) => self.commit(&mut state, &name, &current, &stored, true),
            (kind, current) => {
                return Err(ReplicaError(format!(
                    "{name}: {} of an object this replica {}",
                    kind.as_str(),
                    if current.is_some() { "holds already" } else { "does not hold" }
                )));
            }
        }
        Ok(())
    }

    /// Moves the revision forward without a change: a leader's bookmark on a follower, or a new
    /// leader's jump past every revision any replica may have handed out.
    pub fn advance_to(&self, revision: u64) {
        let mut state = self.write();
        if revision > state.revision {
            state.revision = revision;
            self.revisions.send_replace(revision);
        }
    }

    /// Replaces every object with `items`, as the leader holds them at `revision`. The history
    /// starts anew there: a watch from before gets `410 Expired` and relists.
    pub fn reset(&self, items: Vec<NodeResourceTopology>, revision: u64) -> Result<(), StoreError> {
        let report = unix_seconds(now());
        let mut objects = HashMap::with_capacity(items.len());
        for object in items {
            let name = object.metadata.name.clone().unwrap_or_default();
            let object_revision =
                object.metadata.resource_version.as_deref().and_then(|rv| rv.parse().ok()).unwrap_or(revision);
            objects.insert(name, Arc::new(stored(object, object_revision, Arc::new(AtomicU64::new(report)))?));
        }
        let mut state = self.write();
        state.objects = objects;
        state.history.clear();
        state.history_bytes = 0;
        state.revision = revision;
        state.oldest_resumable = revision;
        self.revisions.send_replace(revision);
        Ok(())
    }

    /// Every object's name and resourceVersion, and the revision they reflect, committed or not
    /// (the replication tests compare stores by it).
    #[cfg(test)]
    pub fn revisions_by_name(&self) -> (HashMap<String, u64>, u64) {
        let state = self.read();
        (state.objects.iter().map(|(name, stored)| (name.clone(), stored.revision)).collect(), state.revision)
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

/// The objects as they were at `revision` (not older than the history reaches): the current
/// ones with the later events undone, newest first, so each name ends up as it was before its
/// earliest later event (absent if that event created it).
fn rebuild(state: &State, revision: u64) -> HashMap<String, Arc<Stored>> {
    let mut objects = state.objects.clone();
    let first_later = history_index_after(&state.history, revision);
    for event in state.history.range(first_later..).rev() {
        let name = event.object.name().to_owned();
        match &event.previous {
            Some(previous) => objects.insert(name, previous.clone()),
            None => objects.remove(&name),
        };
    }
    objects
}

/// The history's event at exactly `revision`.
fn event_at(state: &State, revision: u64) -> Option<&Arc<Event>> {
    let at = history_index(&state.history, revision);
    state.history.get(at).filter(|event| event.revision == revision)
}

/// [`Store::named_events_after`] without the index: every visible event after `after` read in
/// turn (a watcher that resumes from before the index followed its name).
fn scan_named(state: &State, name: &str, after: u64, max: usize, visible: u64) -> (Vec<Arc<Event>>, u64) {
    let first = history_index_after(&state.history, after);
    let mut events = Vec::new();
    for event in state.history.range(first..).take_while(|event| event.revision <= visible) {
        if event.object.name() == name {
            events.push(event.clone());
            if events.len() == max {
                return (events, event.revision);
            }
        }
    }
    (events, visible.max(after))
}

/// The index of the first event in `history` at `revision` or later (its length when there is
/// none). Revisions in the history are increasing and nearly always consecutive (only a bookmark
/// or a new leader's jump skips some), so the offset from the oldest one finds it at once; a
/// binary search, which reads an event behind a pointer at every step (a cache miss each: ≈3% of
/// a write's CPU, run at every write and every watcher's wake-up), is only the fallback.
fn history_index(history: &VecDeque<Arc<Event>>, revision: u64) -> usize {
    let (Some(oldest), Some(newest)) = (history.front(), history.back()) else { return 0 };
    if revision <= oldest.revision {
        return 0;
    }
    if revision > newest.revision {
        return history.len();
    }
    let guess = usize::try_from(revision - oldest.revision).unwrap_or(usize::MAX);
    if history.get(guess).is_some_and(|event| event.revision == revision) {
        return guess;
    }
    history.partition_point(|event| event.revision < revision)
}

/// The index of the first event in `history` after `revision` (its length when there is none).
fn history_index_after(history: &VecDeque<Arc<Event>>, revision: u64) -> usize {
    revision.checked_add(1).map_or(history.len(), |next| history_index(history, next))
}

/// Swaps the history's reference to `current`, the version a write is replacing, for a slim
/// copy, and returns that copy for the new event's `previous`: once the map lets go of `current`,
/// nothing holds its typed object.
fn retire(state: &mut State, current: &Arc<Stored>) -> Arc<Stored> {
    let slim = Arc::new(current.replaced(false));
    let at = history_index(&state.history, current.revision);
    if let Some(event) = state.history.get_mut(at)
        && Arc::ptr_eq(&event.object, current)
    {
        // The slim copy may keep parts the current version had rendered: charge them.
        state.history_bytes += slim.kept_parts_size();
        *event = Arc::new(Event {
            kind: event.kind,
            revision: event.revision,
            object: slim.clone(),
            previous: event.previous.clone(),
        });
    }
    slim
}

fn stored(object: NodeResourceTopology, revision: u64, last_report: Arc<AtomicU64>) -> Result<Stored, StoreError> {
    stored_sized(object, revision, last_report, INITIAL_ENCODING_BYTES)
}

/// Gives back the spare room of an object's lists. A list decoded straight from JSON text grows
/// by doubling from four elements, so it holds up to twice the room it uses (a list decoded
/// through a `serde_json::Value`, as requests are, has none): a follower, which decodes the
/// leader's stream from its text, held 11–13 % more memory than its leader for the same objects.
fn compact(object: &mut NodeResourceTopology) {
    fit(&mut object.topology_policies);
    fit(&mut object.attributes);
    fit(&mut object.zones);
    for zone in &mut object.zones {
        fit(&mut zone.costs);
        fit(&mut zone.attributes);
        fit(&mut zone.resources);
    }
    let meta = &mut object.metadata;
    meta.finalizers.as_mut().map(fit);
    meta.owner_references.as_mut().map(fit);
}

/// Moves a list with spare room into an allocation of its length. Not `shrink_to_fit`: that
/// shrinks in place, leaving a hole smaller than the next decoded list asks for after every
/// object (what the follower's memory measured); the room freed here is what the next decoded
/// list takes again.
fn fit<T>(list: &mut Vec<T>) {
    if list.capacity() > list.len() {
        let mut fitted = Vec::with_capacity(list.len());
        fitted.append(list);
        *list = fitted;
    }
}

/// What an encoding buffer starts with when nothing better is known (serde_json's own start).
const INITIAL_ENCODING_BYTES: usize = 128;
/// Room a new version's encoding gets beyond the size of the version it replaces: a write
/// changes a few numbers, a timestamp and the resourceVersion, rarely more.
const ENCODING_SLACK_BYTES: usize = 256;

/// [`stored`], encoding into a buffer of `capacity` bytes to begin with: a new version is about
/// as large as the one it replaces, so sizing the buffer from it saves the serializer's
/// doublings (each a reallocation and a copy).
fn stored_sized(
    object: NodeResourceTopology,
    revision: u64,
    last_report: Arc<AtomicU64>,
    capacity: usize,
) -> Result<Stored, StoreError> {
    let mut json = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut json, &object)?;
    // Versions live long (in the map, then in the history), so they keep only the bytes they
    // use.
    json.shrink_to_fit();
    let mut object = object;
    compact(&mut object);
    let json = Bytes::from(json);
    Ok(Stored { content: Content::Typed(Box::new(object)), json, revision, last_report, row_parts: OnceLock::new() })
}

fn check_preconditions(current: &Stored, preconditions: &Preconditions) -> Result<(), StoreError> {
    if let Some(rv) = preconditions.resource_version.as_deref()
        && rv != current.revision.to_string()
    {
        return Err(StoreError::Conflict(format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
            current.revision
        )));
    }
    if let Some(uid) = preconditions.uid.as_deref() {
        let object = current.object()?;
        let current_uid = object.metadata.uid.as_deref().unwrap_or_default();
        if uid != current_uid {
            return Err(StoreError::Conflict(format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}"
            )));
        }
    }
    Ok(())
}

/// Same topology and same user-owned metadata: the write would change nothing. The server-set
/// freshness annotation is not the user's and does not count.
fn unchanged(current: &NodeResourceTopology, next: &NodeResourceTopology) -> bool {
    let (a, b): (&ObjectMeta, &ObjectMeta) = (&current.metadata, &next.metadata);
    current.same_topology(next)
        && a.labels.as_ref().filter(|m| !m.is_empty()) == b.labels.as_ref().filter(|m| !m.is_empty())
        && user_annotations(a).eq(user_annotations(b))
        && a.owner_references.as_deref().unwrap_or_default() == b.owner_references.as_deref().unwrap_or_default()
        && finalizers(a) == finalizers(b)
        && b.deletion_timestamp.is_none() == a.deletion_timestamp.is_none()
}

fn user_annotations(meta: &ObjectMeta) -> impl Iterator<Item = (&String, &String)> {
    meta.annotations.iter().flatten().filter(|(key, _)| *key != LAST_CHANGE_ANNOTATION)
}

/// Records `now` as the object's last change.
fn stamp_last_change(meta: &mut ObjectMeta, now: Timestamp) {
    meta.annotations.get_or_insert_default().insert(LAST_CHANGE_ANNOTATION.to_owned(), now.to_string());
}

fn finalizers(meta: &ObjectMeta) -> &[String] {
    meta.finalizers.as_deref().unwrap_or_default()
}

/// Now, at the second precision Kubernetes timestamps have.
fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn unix_seconds(time: Timestamp) -> u64 {
    u64::try_from(time.as_second()).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use numaresources_api::nrt::{AttributeInfo, ResourceInfo, Zone};
    use numaresources_api::quantity::Quantity;

    use super::*;

    #[test]
    fn the_history_index_finds_what_a_bisection_finds() {
        let object = Arc::new(stored(nrt("n", 1), 1, Arc::new(AtomicU64::new(0))).unwrap());
        let event =
            |revision| Arc::new(Event { kind: EventType::Modified, revision, object: object.clone(), previous: None });
        // Consecutive revisions, then gaps (a bookmark, a new leader's jump), at the start, the
        // middle and the end, and the empty history.
        let histories: [&[u64]; 5] = [&[], &[7], &[3, 4, 5, 6], &[3, 4, 9, 10, 11, 40], &[2, 5, 6, 7, 8]];
        for revisions in histories {
            let history: VecDeque<Arc<Event>> = revisions.iter().copied().map(event).collect();
            for revision in 0..45 {
                let bisected = history.partition_point(|e| e.revision < revision);
                assert_eq!(history_index(&history, revision), bisected, "{revisions:?} at {revision}");
                let after = history.partition_point(|e| e.revision <= revision);
                assert_eq!(history_index_after(&history, revision), after, "{revisions:?} after {revision}");
            }
            assert_eq!(history_index_after(&history, u64::MAX), history.len());
        }
    }

    /// A one-zone object with `cpus` CPUs (the replication tests use it too).
    pub(crate) fn nrt(name: &str, cpus: i64) -> NodeResourceTopology {
        let mut object = NodeResourceTopology::new(name);
        object.zones = vec![Zone {
            name: "node-0".into(),
            zone_type: "Node".into(),
            resources: vec![ResourceInfo {
                name: "cpu".into(),
                capacity: Quantity::from_i64(cpus),
                allocatable: Quantity::from_i64(cpus),
                available: Quantity::from_i64(cpus),
            }],
            ..Zone::default()
        }];
        object.attributes = vec![AttributeInfo::new("topologyManagerPolicy", "single-numa-node")];
        object
    }

    #[test]
    fn a_get_shows_only_what_clients_may_see() {
        let store = Store::starting_at(0, 100);
        store.create(nrt("kept", 1), false).unwrap();
        store.create(nrt("changed", 1), false).unwrap();
        store.create(nrt("deleted", 1), false).unwrap();
        let visible = store.head_revision();
        store.set_visible(Some(visible));
        store.update(nrt("changed", 8), &Preconditions::default(), false).unwrap();
        store.delete("deleted", &Preconditions::default(), false).unwrap();
        store.create(nrt("added", 1), false).unwrap();

        let version = |stored: Option<Arc<Stored>>| stored.map(|s| s.revision);
        assert_eq!(version(store.get_visible("changed")), Some(2), "the held-back update is not shown");
        assert!(store.get_visible("deleted").is_some(), "the held-back deletion is not shown");
        assert!(store.get_visible("added").is_none(), "the held-back creation is not shown");
        assert_eq!(version(store.get_visible("kept")), Some(1));
        store.set_visible(None);
        assert!(store.get_visible("changed").unwrap().revision > visible);
        assert!(store.get_visible("deleted").is_none());
        assert!(store.get_visible("added").is_some());
    }

    /// Waiting for a revision while writes publish: a waiter that took the state lock while
    /// holding the change channel deadlocked a replica (the writer holds them the other way).
    #[test]
    fn waiting_for_a_revision_while_writes_publish_never_deadlocks() {
        const WRITES: i64 = 3_000;
        let store = Arc::new(Store::starting_at(0, 100));
        let (done, finished) = std::sync::mpsc::channel();
        let run = {
            let store = store.clone();
            std::thread::spawn(move || {
                let runtime =
                    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
                runtime.block_on(async {
                    let waiters: Vec<_> = (0..8)
                        .map(|_| {
                            let store = store.clone();
                            tokio::spawn(async move {
                                while store.revision() < WRITES as u64 {
                                    let next = store.revision() + 1;
                                    store.wait_visible(next, std::time::Duration::from_secs(1)).await;
                                }
                            })
                        })
                        .collect();
                    for i in 0..WRITES {
                        store.create(nrt(&format!("worker-{i}"), 4), false).unwrap();
                    }
                    for waiter in waiters {
                        waiter.await.unwrap();
                    }
                });
                let _ = done.send(());
            })
        };
        // Not a timing assertion: a deadlock never ends (its threads, timers included, stay
        // blocked), and this bound, kept outside them, turns it into a failure.
        finished.recv_timeout(std::time::Duration::from_secs(120)).expect("waiters and the writer deadlocked");
        run.join().unwrap();
        assert_eq!(store.revision(), WRITES as u64);
    }

    #[test]
    fn create_sets_server_owned_metadata_and_bumps_the_revision() {
        let store = Store::starting_at(100, 10);
        let mut object = nrt("worker-0", 4);
        object.metadata.uid = Some("client-chosen".into());
        object.metadata.namespace = Some("default".into());
        let created = store.create(object, false).unwrap();
        let meta = &created.object().unwrap().metadata;
        assert_eq!(meta.resource_version.as_deref(), Some("101"));
        assert_eq!(meta.generation, Some(1));
        assert!(meta.creation_timestamp.is_some());
        assert_eq!(meta.namespace, None);
        let uid = meta.uid.as_deref().unwrap();
        assert_ne!(uid, "client-chosen");
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert!(matches!(store.create(nrt("worker-0", 4), false), Err(StoreError::AlreadyExists)));
        assert_eq!(store.revision(), 101);
    }

    #[test]
    fn unchanged_writes_keep_the_revision_and_emit_nothing() {
        let store = Store::starting_at(0, 10);
        store.create(nrt("n", 4), false).unwrap();
        let mut reordered = nrt("n", 4);
        reordered.zones[0].resources[0].capacity = Quantity::parse("4").unwrap();
        let (stored, changed) = store.update(reordered, &Preconditions::default(), false).unwrap();
        assert!(!changed);
        assert_eq!(stored.revision, 1);
        assert_eq!(store.revision(), 1);
        assert!(store.events_after(1, usize::MAX).unwrap().is_empty());
    }

    #[test]
    fn real_changes_bump_revision_and_generation_and_are_watched() {
        let store = Store::starting_at(0, 10);
        store.create(nrt("n", 4), false).unwrap();
        let start = store.watch(Some(1)).unwrap();
        let (stored, changed) = store.update(nrt("n", 3), &Preconditions::default(), false).unwrap();
        assert!(start.changes.has_changed().unwrap());
        assert!(changed);
        assert_eq!(stored.revision, 2);
        assert_eq!(stored.object().unwrap().metadata.generation, Some(2));
        let event = store.events_after(start.revision, 1).unwrap().remove(0);
        assert_eq!((event.kind, event.revision), (EventType::Modified, 2));
        assert_eq!(event.previous.as_ref().unwrap().revision, 1);

        // A label change is a change, but not a new generation.
        let mut labelled = nrt("n", 3);
        labelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        let (stored, changed) = store.update(labelled, &Preconditions::default(), false).unwrap();
        assert!(changed);
        assert_eq!(stored.object().unwrap().metadata.generation, Some(2));
    }

    fn last_change(stored: &Stored) -> String {
        stored
            .object()
            .unwrap()
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LAST_CHANGE_ANNOTATION))
            .unwrap()
            .clone()
    }

    #[test]
    fn the_last_change_annotation_is_the_servers_alone() {
        let store = Store::starting_at(0, 10);
        let forged = || {
            let mut object = nrt("n", 4);
            let annotations = [(LAST_CHANGE_ANNOTATION.to_owned(), "1999-01-01T00:00:00Z".to_owned())];
            object.metadata.annotations = Some(annotations.into());
            object
        };
        let created = store.create(forged(), false).unwrap();
        let stamped = last_change(&created);
        assert_ne!(stamped, "1999-01-01T00:00:00Z", "a client cannot set it");
        assert!(stamped.parse::<Timestamp>().is_ok(), "RFC 3339: {stamped}");
        assert!(std::str::from_utf8(&created.json).unwrap().contains(LAST_CHANGE_ANNOTATION));

        // Sending back a stale value, or none, with the same content is no change.
        for same in [forged(), nrt("n", 4)] {
            let (stored, changed) = store.update(same, &Preconditions::default(), false).unwrap();
            assert!(!changed);
            assert_eq!((stored.revision, last_change(&stored)), (1, stamped.clone()));
        }
        // A real change is stamped by the server, whatever the client sent.
        let mut changed_object = forged();
        changed_object.zones[0].resources[0].available = Quantity::from_i64(2);
        let (stored, changed) = store.update(changed_object, &Preconditions::default(), false).unwrap();
        assert!(changed);
        assert_ne!(last_change(&stored), "1999-01-01T00:00:00Z");
        // Other annotations are the user's: changing one is a change.
        let mut annotated = stored.object().unwrap().into_owned();
        annotated.metadata.annotations.get_or_insert_default().insert("team".into(), "a".into());
        assert!(store.update(annotated, &Preconditions::default(), false).unwrap().1);
    }

    #[test]
    fn stale_resource_versions_and_uids_conflict() {
        let store = Store::starting_at(0, 10);
        store.create(nrt("n", 4), false).unwrap();
        let mut stale = nrt("n", 3);
        stale.metadata.resource_version = Some("0".into());
        assert!(matches!(store.update(stale, &Preconditions::default(), false), Err(StoreError::Conflict(_))));
        let mut wrong_uid = nrt("n", 3);
        wrong_uid.metadata.uid = Some("other".into());
        assert!(matches!(store.update(wrong_uid, &Preconditions::default(), false), Err(StoreError::Conflict(_))));
        let pre = Preconditions { uid: Some("other".into()), ..Preconditions::default() };
        assert!(matches!(store.delete("n", &pre, false), Err(StoreError::Conflict(_))));
        assert!(matches!(store.update(nrt("missing", 1), &Preconditions::default(), false), Err(StoreError::NotFound)));
    }

    #[test]
    fn dry_run_never_stores() {
        let store = Store::starting_at(0, 10);
        let created = store.create(nrt("n", 4), true).unwrap();
        assert_eq!(created.revision, 1);
        assert!(store.get("n").is_none());
        store.create(nrt("n", 4), false).unwrap();
        store.update(nrt("n", 2), &Preconditions::default(), true).unwrap();
        store.delete("n", &Preconditions::default(), true).unwrap();
        let kept = store.get("n").unwrap();
        assert_eq!(kept.revision, 1);
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let store = Store::starting_at(0, 10);
        let mut object = nrt("n", 4);
        object.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        store.create(object, false).unwrap();
        let (marked, gone) = store.delete("n", &Preconditions::default(), false).unwrap();
        assert!(!gone);
        assert!(marked.object().unwrap().metadata.deletion_timestamp.is_some());
        let mut events = store.events_after(1, usize::MAX).unwrap();
        assert_eq!(events.pop().map(|e| (e.kind, e.revision)), Some((EventType::Modified, 2)));
        assert!(events.is_empty());
        let mut released = marked.object().unwrap().into_owned();
        released.metadata.finalizers = None;
        let watch = store.watch(Some(store.revision())).unwrap();
        store.update(released, &Preconditions::default(), false).unwrap();
        assert!(store.get("n").is_none());
        assert_eq!(store.events_after(watch.revision, usize::MAX).unwrap()[0].kind, EventType::Deleted);
    }

    #[test]
    fn propagation_sets_the_collectors_finalizers_as_kube_apiserver_does() {
        let names = |list: &[&str]| list.iter().map(|f| (*f).to_owned()).collect::<Vec<_>>();
        let rows: [(Propagation, &[&str], &[&str]); 9] = [
            (Propagation::Default, &[], &[]),
            (Propagation::Default, &["a"], &["a"]),
            (Propagation::Default, &["orphan", "a"], &["a", "orphan"]),
            (Propagation::Default, &["foregroundDeletion", "orphan"], &["foregroundDeletion"]),
            (Propagation::Background, &["orphan", "a"], &["a"]),
            (Propagation::Orphan, &[], &["orphan"]),
            (Propagation::Orphan, &["a", "foregroundDeletion"], &["a", "orphan"]),
            (Propagation::Foreground, &["orphan"], &["foregroundDeletion"]),
            (Propagation::Foreground, &["a"], &["a", "foregroundDeletion"]),
        ];
        for (propagation, current, want) in rows {
            assert_eq!(propagation.finalizers(&names(current)), names(want), "{propagation:?} {current:?}");
        }
    }

    #[test]
    fn an_orphan_or_foreground_deletion_marks_and_waits_for_the_collector() {
        for (propagation, finalizer) in
            [(Propagation::Orphan, ORPHAN_FINALIZER), (Propagation::Foreground, FOREGROUND_FINALIZER)]
        {
            let store = Store::starting_at(0, 10);
            store.create(nrt("n", 4), false).unwrap(); // 1
            let (marked, gone) = store.delete_with("n", &Preconditions::default(), propagation, false).unwrap(); // 2
            assert!(!gone);
            let meta = marked.object().unwrap().metadata.clone();
            assert!(meta.deletion_timestamp.is_some());
            assert_eq!(meta.finalizers, Some(vec![finalizer.to_owned()]));
            assert_eq!(meta.generation, Some(2), "marking bumps the generation, as kube-apiserver does");
            assert_eq!(store.events_after(1, 10).unwrap()[0].kind, EventType::Modified);
            // Deleting again changes nothing; a different policy swaps the collector finalizer.
            let (again, _) = store.delete("n", &Preconditions::default(), false).unwrap();
            assert_eq!(again.revision, 2);
            // The collector removes its finalizer when done: the object goes, DELETED.
            let mut released = store.get("n").unwrap().object().unwrap().into_owned();
            released.metadata.finalizers = None;
            store.update(released, &Preconditions::default(), false).unwrap(); // 3
            assert!(store.get("n").is_none());
            assert_eq!(store.events_after(2, 10).unwrap()[0].kind, EventType::Deleted);
        }
        // A Background deletion of an object the collector was asked to hold releases it.
        let store = Store::starting_at(0, 10);
        store.create(nrt("n", 4), false).unwrap();
        store.delete_with("n", &Preconditions::default(), Propagation::Orphan, false).unwrap();
        let (_, gone) = store.delete_with("n", &Preconditions::default(), Propagation::Background, false).unwrap();
        assert!(gone && store.get("n").is_none());
        // A dry run marks nothing.
        store.create(nrt("m", 4), false).unwrap();
        store.delete_with("m", &Preconditions::default(), Propagation::Orphan, true).unwrap();
        assert!(store.get("m").unwrap().object().unwrap().metadata.deletion_timestamp.is_none());
    }

    #[test]
    fn marking_for_deletion_stamps_the_last_change() {
        let store = Store::starting_at(0, 10);
        let mut object = nrt("n", 4);
        object.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        store.create(object, false).unwrap();
        // Age the stamp, so the one the marking sets is told apart from it.
        {
            let mut state = store.write();
            let mut aged = state.objects["n"].object().unwrap().into_owned();
            aged.metadata
                .annotations
                .get_or_insert_default()
                .insert(LAST_CHANGE_ANNOTATION.into(), "2000-01-01T00:00:00Z".into());
            let aged = stored(aged, 1, Arc::new(AtomicU64::new(0))).unwrap();
            state.objects.insert("n".into(), Arc::new(aged));
        }
        let (marked, _) = store.delete("n", &Preconditions::default(), false).unwrap();
        let deleted_at = marked.object().unwrap().metadata.deletion_timestamp.clone().unwrap();
        assert_eq!(last_change(&marked), deleted_at.0.to_string());
        assert!(std::str::from_utf8(&marked.json).unwrap().contains(&deleted_at.0.to_string()));
    }

    #[test]
    fn the_history_keeps_replaced_versions_slim_and_shares_current_ones() {
        let store = Store::starting_at(0, 10);
        let mut labelled = nrt("n", 4);
        labelled.metadata.labels = Some([("pool".to_owned(), "a".to_owned())].into());
        store.create(labelled.clone(), false).unwrap(); // 1
        labelled.zones[0].resources[0].available = Quantity::from_i64(3);
        store.update(labelled, &Preconditions::default(), false).unwrap(); // 2
        let state = store.read();
        let (created, modified) = (&state.history[0], &state.history[1]);
        // The current version is one allocation, shared by the map and its event.
        assert!(Arc::ptr_eq(&state.objects["n"], &modified.object));
        assert!(matches!(modified.object.content, Content::Typed(_)));
        // The replaced one is kept once, slim, by both events that refer to it.
        let previous = modified.previous.as_ref().unwrap();
        assert!(Arc::ptr_eq(previous, &created.object));
        assert!(matches!(previous.content, Content::Replaced { .. }));
        assert_eq!((previous.name(), previous.revision), ("n", 1));
        assert_eq!(previous.labels().unwrap()["pool"], "a");
        // The typed object comes back from the JSON when asked for.
        let decoded = previous.object().unwrap();
        assert_eq!(decoded.zones[0].resources[0].available, Quantity::from_i64(4));
        assert_eq!(decoded.metadata.resource_version.as_deref(), Some("1"));
        drop(state);
        // A deletion's last state is history only: slim too.
        store.delete("n", &Preconditions::default(), false).unwrap(); // 3
        let state = store.read();
        assert!(matches!(state.history[2].object.content, Content::Replaced { .. }));
        assert!(matches!(state.history[1].object.content, Content::Replaced { .. }));
    }

    #[test]
    fn replaced_versions_keep_rendered_parts_and_deletions_render_them() {
        let store = Store::starting_at(0, 10);
        let mut labelled = nrt("n", 4);
        labelled.metadata.labels = Some([("pool".to_owned(), "a".to_owned())].into());
        let created = store.create(labelled.clone(), false).unwrap(); // 1
        let rendered = created.metadata_json().unwrap().into_owned();
        labelled.zones[0].resources[0].available = Quantity::from_i64(3);
        store.update(labelled, &Preconditions::default(), false).unwrap(); // 2
        store.delete("n", &Preconditions::default(), false).unwrap(); // 3
        let state = store.read();
        let kept = |stored: &Stored| matches!(&stored.content, Content::Replaced { row_parts: Some(_), .. });
        // Rendered while current (a Table or metadata read did it): carried over, not decoded.
        assert!(kept(&state.history[0].object));
        assert_eq!(state.history[0].object.metadata_json().unwrap(), rendered);
        // Never rendered while current: nothing kept, read from the JSON when asked for, with
        // the same bytes the typed path renders.
        let modified = &state.history[1].object;
        assert!(!kept(modified));
        let typed = RowParts::of(&modified.object().unwrap()).metadata().to_owned();
        assert_eq!(modified.metadata_json().unwrap(), typed);
        // A deletion's last state goes out to metadata watchers as it is: rendered up front,
        // with its uid, resourceVersion and labels.
        let deleted = &state.history[2].object;
        assert!(kept(deleted));
        let metadata: serde_json::Value = serde_json::from_str(&deleted.metadata_json().unwrap()).unwrap();
        assert_eq!(metadata["resourceVersion"], "3");
        assert_eq!(metadata["labels"]["pool"], "a");
        assert_eq!(metadata["uid"], created.object().unwrap().metadata.uid.clone().unwrap());
        // What the kept parts cost is charged, and given back, exactly.
        assert_eq!(state.history_bytes, state.history.iter().map(|e| e.charge()).sum::<usize>());
    }

    #[test]
    fn a_version_that_does_not_decode_is_an_error_never_an_invented_object() {
        let broken = Stored {
            content: Content::Replaced { name: "n".into(), labels: None, row_parts: None },
            json: Bytes::from_static(br#"{"metadata":{"name":"n""#),
            revision: 1,
            last_report: Arc::new(AtomicU64::new(0)),
            row_parts: OnceLock::new(),
        };
        assert!(broken.object().is_err());
        assert!(broken.row_parts().is_err());
        assert!(broken.metadata_json().is_err());
        let version = crate::negotiate::MetaVersion::V1;
        let table = crate::table::table(&[&broken], version, Default::default(), b"{}", crate::table::Columns::Defined);
        assert_eq!(table.unwrap_err().code(), http::StatusCode::INTERNAL_SERVER_ERROR);
        let metadata = crate::table::partial_metadata(&broken, version).unwrap_err();
        assert_eq!(metadata.to_status()["reason"], "InternalError");
    }

    #[test]
    fn a_watcher_that_stops_reading_keeps_no_replaced_version_alive() {
        let store = Store::starting_at(0, 10);
        store.create(nrt("n", 1), false).unwrap();
        let paused = store.watch(Some(1)).unwrap();
        let written = Arc::downgrade(&store.update(nrt("n", 2), &Preconditions::default(), false).unwrap().0);
        for cpus in 3..5 {
            store.update(nrt("n", cpus), &Preconditions::default(), false).unwrap();
        }
        // The typed versions a write replaced are gone, though the watcher has not read them;
        // the history keeps slim copies.
        assert!(written.upgrade().is_none());
        assert!(paused.changes.has_changed().unwrap());
        let kinds: Vec<EventType> = store.events_after(paused.revision, 10).unwrap().iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventType::Modified; 3]);
    }

    /// A watch of one name starts with that object alone (at the visible revision), not with
    /// every object for the selector to drop.
    #[test]
    fn a_snapshot_watch_of_one_name_starts_with_that_object_alone() {
        let store = Store::starting_at(0, 10);
        for i in 0..3 {
            store.create(nrt(&format!("n{i}"), 1), false).unwrap();
        }
        let names = |start: WatchStart| start.backlog.iter().map(|e| e.object.name().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(store.watch_with_snapshot_of(Some("n1"))), ["n1"]);
        assert!(names(store.watch_with_snapshot_of(Some("absent"))).is_empty());
        assert_eq!(names(store.watch_with_snapshot_of(None)), ["n0", "n1", "n2"]);
        // Clients see up to revision 1: n1 did not exist yet.
        store.visible.store(1, Ordering::Release);
        assert!(names(store.watch_with_snapshot_of(Some("n1"))).is_empty());
    }

    /// The size bound is read off the stored encoding: a larger new version is refused (dry run
    /// too) and nothing is written; one that fits is written as `modify` writes it.
    #[test]
    fn a_bounded_modification_refuses_a_version_larger_than_the_bound() {
        let store = Store::starting_at(0, 10);
        let created = store.create(nrt("n", 1), false).unwrap();
        let size = created.json.len();
        for dry_run in [true, false] {
            let refused = store.modify_within("n", &Preconditions::default(), dry_run, size, |_| {
                let mut bigger = nrt("n", 1);
                bigger.metadata.labels = Some(BTreeMap::from([("grown".to_owned(), "x".repeat(64))]));
                Ok::<_, StoreError>(bigger)
            });
            assert!(matches!(refused, Err(StoreError::TooLarge { limit }) if limit == size), "{refused:?}");
        }
        assert_eq!(store.revision(), 1, "nothing was written");
        let (written, changed) = store
            .modify_within("n", &Preconditions::default(), false, size + 16, |_| Ok::<_, StoreError>(nrt("n", 2)))
            .unwrap();
        assert!(changed && written.json.len() <= size + 16);
        // A create is bounded the same way.
        for dry_run in [true, false] {
            let refused = store.create_within(nrt("m", 1), dry_run, size - 16);
            assert!(matches!(refused, Err(StoreError::TooLarge { .. })), "{refused:?}");
        }
        assert!(store.get("m").is_none());
        assert!(store.create_within(nrt("m", 1), false, size + 16).is_ok());
    }

    /// The fan-out to watches of one name each does not grow with their number: a change wakes
    /// its name's watchers and no other, and each reads its own events alone.
    #[test]
    fn a_change_wakes_only_the_watchers_of_its_name() {
        for watched in [10, 1_000, 5_000] {
            let store = Store::starting_at(0, 100);
            let mut receivers: Vec<_> = (0..watched)
                .map(|i| {
                    store.create(nrt(&format!("n{i}"), 1), false).unwrap();
                    store.subscribe_named(&format!("n{i}"))
                })
                .collect();
            let after = store.revision();
            for cpus in 2..12 {
                store.update(nrt("n3", cpus), &Preconditions::default(), false).unwrap();
            }
            let woken = receivers.iter_mut().filter(|r| r.has_changed().unwrap()).count();
            assert_eq!(woken, 1, "{watched} watched names");
            let (events, through) = store.named_events_after("n3", after, 64).unwrap();
            assert_eq!(events.len(), 10);
            assert_eq!(through, store.revision());
            let (events, _) = store.named_events_after("n4", after, 64).unwrap();
            assert!(events.is_empty());
            // Read in pieces, each ending at its last event.
            let (events, through) = store.named_events_after("n3", after, 4).unwrap();
            assert_eq!((events.len(), through), (4, after + 4));
        }
    }

    #[test]
    fn the_history_is_bounded_by_bytes_oldest_first() {
        let size = |store: &Store| store.read().history.iter().map(|e| e.charge()).sum::<usize>();
        let one = {
            let store = Store::starting_at(0, 100);
            store.create(nrt("n0", 1), false).unwrap();
            size(&store)
        };
        // Room for three creations' worth of bytes, whatever the count bound allows.
        let store = Store::starting_at(0, 100).with_history_bytes(3 * one + one / 2);
        for i in 0..5 {
            store.create(nrt(&format!("n{i}"), 1), false).unwrap();
        }
        let retained: Vec<u64> = store.read().history.iter().map(|e| e.revision).collect();
        assert_eq!(retained, [3, 4, 5]);
        assert_eq!(store.read().history_bytes, size(&store));
        assert!(size(&store) <= 3 * one + one / 2);
        assert_eq!(store.events_after(2, usize::MAX).unwrap().len(), 3);
        assert_eq!(store.watch(Some(1)).unwrap_err(), WatchRefusal::TooOld { oldest: 2 });
        // A modification holds two versions, so it costs about twice as much: older events go.
        store.update(nrt("n4", 2), &Preconditions::default(), false).unwrap(); // 6
        let retained: Vec<u64> = store.read().history.iter().map(|e| e.revision).collect();
        assert_eq!(retained, [5, 6]);
        assert_eq!(store.read().history_bytes, size(&store));
        // The newest event stays, however large.
        let tiny = Store::starting_at(0, 100).with_history_bytes(1);
        tiny.create(nrt("a", 1), false).unwrap();
        tiny.create(nrt("b", 1), false).unwrap();
        assert_eq!(tiny.events_after(1, usize::MAX).unwrap().len(), 1);
    }

    #[test]
    fn watches_resume_from_history_or_expire() {
        let store = Store::starting_at(0, 3);
        for i in 0..5 {
            store.create(nrt(&format!("n{i}"), 1), false).unwrap();
        }
        // Revisions 1..=5; the history keeps 3..=5, so resuming after 2 still works.
        let start = store.watch(Some(2)).unwrap();
        let revisions: Vec<u64> =
            store.events_after(start.revision, usize::MAX).unwrap().iter().map(|e| e.revision).collect();
        assert_eq!(revisions, [3, 4, 5]);
        let first_two: Vec<u64> = store.events_after(2, 2).unwrap().iter().map(|e| e.revision).collect();
        assert_eq!(first_two, [3, 4]);
        // A watcher that fell behind what the history keeps is told to relist.
        assert_eq!(store.events_after(1, 1).unwrap_err(), WatchRefusal::TooOld { oldest: 2 });
        assert_eq!(store.watch(Some(1)).unwrap_err(), WatchRefusal::TooOld { oldest: 2 });
        // A revision from the future is too large, not too old: the client may retry.
        assert_eq!(store.watch(Some(99)).unwrap_err(), WatchRefusal::TooLarge { current: 5 });
        assert!(store.watch(None).unwrap().backlog.is_empty());
    }

    #[test]
    fn snapshots_of_earlier_revisions_are_rebuilt_from_the_history() {
        let store = Store::starting_at(0, 4);
        store.create(nrt("a", 1), false).unwrap(); // 1
        store.create(nrt("b", 1), false).unwrap(); // 2
        store.update(nrt("a", 2), &Preconditions::default(), false).unwrap(); // 3
        store.delete("b", &Preconditions::default(), false).unwrap(); // 4
        store.create(nrt("c", 1), false).unwrap(); // 5
        let at = |revision| {
            let snapshot = store.snapshot_at(revision).unwrap();
            snapshot.items.iter().map(|s| (s.name().to_owned(), s.revision)).collect::<Vec<_>>()
        };
        assert_eq!(at(5), [("a".to_owned(), 3), ("c".to_owned(), 5)]);
        assert_eq!(at(3), [("a".to_owned(), 3), ("b".to_owned(), 2)]);
        assert_eq!(at(2), [("a".to_owned(), 1), ("b".to_owned(), 2)]);
        // The history keeps the changes 2..=5: the state at 1 is the oldest it can rebuild;
        // 6 is not ours yet.
        assert_eq!(at(1), [("a".to_owned(), 1)]);
        assert_eq!(store.snapshot_at(0).unwrap_err(), 1);
        assert!(store.snapshot_at(6).is_err());
    }

    #[test]
    fn a_restarted_store_starts_above_any_earlier_revision() {
        let first = Store::new(10);
        first.create(nrt("n", 1), false).unwrap();
        let old_revision = first.revision();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = Store::new(10);
        assert!(second.revision() > old_revision);
        assert!(second.watch(Some(old_revision)).is_err());
    }
}
