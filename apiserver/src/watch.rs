//! Watches: a chunked stream of `{"type": …, "object": …}` lines, one per event. Events go
//! out as they happen, except that a watch writes at most once per flush interval
//! (`--watch-flush-interval`, 10 ms): changes that come sooner after a write wait for it and
//! go out together, their lines joined in one chunk (one write instead of one per change, what
//! most of a busy fleet's fan-out cost was); a change after a quiet spell goes out at once.
//!
//! Start points follow kube-apiserver: no resourceVersion (or `"0"`) replays the current state as
//! `ADDED` events; a resourceVersion resumes after it from the history, or, when the history no
//! longer reaches back that far, sends one `ERROR` event with a 410 `Expired` Status so the client
//! relists; a resourceVersion newer than the server's gets 504 with a `ResourceVersionTooLarge`
//! cause, as a LIST does. `sendInitialEvents=true` (the streaming list) replays the state and then marks its end
//! with a `BOOKMARK` annotated `k8s.io/initial-events-end`. Selector-filtered watches turn an
//! object entering the selection into `ADDED` and one leaving it into `DELETED`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue};
use numaresources_api::nrt::KIND;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::AppState;
use crate::negotiate::Representation;
use crate::query::{Options, ResourceVersion, VersionMatch};
use crate::render::json_bytes;
use crate::status::ApiError;
use crate::store::{Event, EventType, WatchRefusal, WatchStart};
use crate::table::{self, Columns};

mod buffer;

use numaresources_api::nrt::API_VERSION;
/// How many events a watcher takes from the history at a time (and fewer when they weigh more
/// than its buffer): what a watcher whose client stopped reading holds besides the history.
const READ_AT_ONCE: usize = 64;
/// The annotation that marks the end of the initial events of a streaming list.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Starts a watch and returns the streaming response.
pub fn serve(state: &Arc<AppState>, options: Options, representation: Representation) -> Result<Response, ApiError> {
    if options.send_initial_events
        && (!options.allow_bookmarks || options.resource_version_match != Some(VersionMatch::NotOlderThan))
    {
        return Err(ApiError::invalid_options(
            "sendInitialEvents is forbidden for watch unless allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan",
        ));
    }
    if options.resource_version_match.is_some() && !options.send_initial_events {
        return Err(ApiError::invalid_options(
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let pinned = pinned_name(&options);
    let start = match (options.send_initial_events, options.resource_version) {
        (true, _) | (false, None | Some(ResourceVersion::Any)) => {
            Ok(state.store.watch_with_snapshot_of(pinned.as_deref()))
        }
        (false, Some(ResourceVersion::At(from))) => match state.store.watch(Some(from)) {
            Ok(start) => Ok(start),
            Err(WatchRefusal::TooOld { oldest }) => Err((from, oldest)),
            // As for a LIST: the client asked for a state this server has not reached.
            Err(WatchRefusal::TooLarge { current }) => {
                return Err(ApiError::too_large_resource_version(from, current));
            }
        },
    };
    let timeout = options.timeout_seconds.map_or_else(default_timeout, Duration::from_secs);
    let (sender, lines) = buffer::channel(state.limits.watch_buffer_bytes);
    let stream = Watch {
        store: state.store.clone(),
        open: state.metrics.watch_opened(),
        stopping: state.stopping.clone(),
        representation,
        sender,
        buffer_bytes: state.limits.watch_buffer_bytes,
        blocked_limit: state.limits.watch_blocked_timeout,
        flush_interval: state.limits.watch_flush_interval,
        bookmark_every: state.limits.bookmark_interval,
        deadline: Instant::now() + timeout,
        headers_sent: false,
        pinned,
        options,
    };
    match start {
        Ok(mut start) => {
            if let Some(name) = &stream.pinned {
                // Subscribed after the start was taken: the watcher's first read, after the
                // subscription, finds whatever was written in between.
                start.changes = state.store.subscribe_named(name);
            }
            tokio::spawn(stream.run(start));
        }
        Err((from, oldest)) => {
            tokio::spawn(stream.expired(format!("too old resource version: {from} ({oldest})")));
        }
    }
    let lines = futures_util::StreamExt::map(lines, Ok::<Bytes, std::convert::Infallible>);
    let mut response = Response::new(Body::from_stream(lines));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// Without `timeoutSeconds`, a watch still ends after 30–60 minutes so long-lived connections
/// rebalance across replicas.
fn default_timeout() -> Duration {
    let jitter = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    Duration::from_secs(1_800 + u64::from(jitter % 1_800))
}

struct Watch {
    store: Arc<crate::store::Store>,
    open: crate::metrics::WatchGuard,
    stopping: tokio_util::sync::CancellationToken,
    options: Options,
    representation: Representation,
    sender: buffer::Sender,
    /// What the watcher may queue for its client, in bytes (see [`buffer`]).
    buffer_bytes: usize,
    /// How long the watcher may wait for a client that does not read before it ends the watch.
    blocked_limit: Duration,
    /// The shortest time between two writes (see [`crate::Limits::watch_flush_interval`]).
    flush_interval: Duration,
    bookmark_every: Duration,
    deadline: Instant,
    headers_sent: bool,
    /// The one name the field selector lets through, if it pins one: the watch then wakes
    /// only on that object's changes and reads only its events.
    pinned: Option<String>,
}

/// Where a watcher stands in the history.
struct Cursor {
    /// Every event up to this revision has been sent (or was not for this watcher).
    position: u64,
    /// Every event up to this revision has been sent or is in `ready`.
    read_through: u64,
    /// Events read but not yet sent.
    ready: Vec<Arc<Event>>,
}

impl Watch {
    async fn run(mut self, start: WatchStart) {
        let WatchStart { backlog, revision, mut changes } = start;
        let state_written = !backlog.is_empty();
        if !self.send_events(&backlog).await {
            return;
        }
        drop(backlog);
        if self.options.send_initial_events && !self.send(self.bookmark(revision, true)).await {
            return;
        }
        let mut cursor = Cursor { position: revision, read_through: revision, ready: Vec::new() };
        let mut bookmarks = tokio::time::interval_at(Instant::now() + self.bookmark_every, self.bookmark_every);
        // When the last changes were written (the current state counts): the next ones wait
        // until the flush interval has passed since, and go out together.
        let mut last_write = state_written.then(Instant::now);
        loop {
            if cursor.ready.is_empty() {
                // Marked seen before reading, so a write after the read wakes the wait below.
                changes.borrow_and_update();
                if !self.read(&mut cursor).await {
                    return;
                }
            }
            // Biased: the deadline and stopping come first even while events keep coming.
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(self.deadline) => return,
                () = self.stopping.cancelled() => {
                    // A last bookmark lets the client resume from here against another replica
                    // (or this one after a restart, which answers 410 and it relists).
                    if self.options.allow_bookmarks && self.catch_up(&mut cursor).await {
                        self.send(self.bookmark(cursor.position, false)).await;
                    }
                    return;
                }
                _ = self.sender.closed() => return,
                _ = bookmarks.tick(), if self.options.allow_bookmarks => {
                    if !self.catch_up(&mut cursor).await {
                        return;
                    }
                    if !self.send(self.bookmark(cursor.position, false)).await {
                        return;
                    }
                }
                () = std::future::ready(()), if !cursor.ready.is_empty() => {
                    let events = std::mem::take(&mut cursor.ready);
                    if !self.send_events(&events).await {
                        return;
                    }
                    last_write = Some(Instant::now());
                    cursor.position = cursor.read_through;
                }
                changed = changes.changed(), if cursor.ready.is_empty() => {
                    if changed.is_err() {
                        return;
                    }
                    // A change soon after the last write waits for the ones that follow it.
                    if let Some(next_write) = last_write.map(|at| at + self.flush_interval)
                        && next_write > Instant::now()
                    {
                        tokio::time::sleep_until(next_write).await;
                    }
                }
            }
        }
    }

    /// Before a bookmark: a watch of one name is not woken by other objects' changes, so it
    /// reads first, and its bookmark carries a current resourceVersion (events it finds are sent
    /// after the bookmark, which then names the revision before them). False as [`Watch::read`].
    async fn catch_up(&self, cursor: &mut Cursor) -> bool {
        if self.pinned.is_none() || !cursor.ready.is_empty() {
            return true;
        }
        self.read(cursor).await
    }

    /// Reads the next events after `cursor.read_through` into `cursor.ready`. False when the
    /// watcher fell behind the history: it has told the client to relist.
    async fn read(&self, cursor: &mut Cursor) -> bool {
        let after = cursor.read_through;
        let read = match &self.pinned {
            Some(name) => self.store.named_events_after(name, after, READ_AT_ONCE),
            None => self.store.events_after(after, READ_AT_ONCE).map(|events| {
                let through = events.last().map_or(after, |event| event.revision);
                (events, through)
            }),
        };
        let Ok((events, through)) = read else {
            tracing::warn!(position = after, "a watcher fell behind the history; telling it to relist");
            self.send_expired(format!("the watch fell behind the history at {after}; relist")).await;
            return false;
        };
        let read = events.len();
        cursor.ready = within(events, self.buffer_bytes);
        cursor.read_through = match cursor.ready.last() {
            Some(last) if cursor.ready.len() < read => last.revision,
            _ => through,
        };
        if cursor.ready.is_empty() {
            cursor.position = cursor.read_through;
        }
        true
    }

    /// Sends one ERROR event carrying a 410 Expired Status, then ends the stream.
    async fn expired(self, message: String) {
        self.send_expired(message).await;
    }

    async fn send_expired(&self, message: String) {
        let status = ApiError::expired(message).to_status();
        let line = line("ERROR", &json_bytes(&status));
        self.send(line).await;
    }

    /// Encodes and sends the events the selectors let through, in as few queue entries as it
    /// can: the lines of small objects joined into one piece up to [`BATCH_BYTES`] (one chunk,
    /// one write for the HTTP and TLS layers), a large object's line as it is. False when the
    /// client left, or an event could not be rendered: then, as kube-apiserver does for an
    /// object its storage cannot decode, the watcher gets an ERROR event with the Status and
    /// the watch ends (the client relists), rather than a made-up object.
    async fn send_events(&mut self, events: &[Arc<Event>]) -> bool {
        let batch_bytes = BATCH_BYTES.min(self.buffer_bytes);
        let mut batch = BytesMut::new();
        for event in events {
            match self.render(event) {
                Rendered::Hidden => {}
                // Written straight into the batch: the object copied once.
                Rendered::Event { kind, object } if object.len() < SHARED_OBJECT_BYTES => {
                    let full = batch.len() + object.len() + LINE_FRAMING_BYTES > batch_bytes;
                    if !batch.is_empty() && full && !self.flush(&mut batch).await {
                        return false;
                    }
                    put_line(&mut batch, kind, &object);
                }
                Rendered::Event { kind, object } => {
                    if !self.flush(&mut batch).await || !self.send(line(kind, &object)).await {
                        return false;
                    }
                }
                Rendered::Failed(error) => {
                    if self.flush(&mut batch).await {
                        self.send(error).await;
                    }
                    return false;
                }
            }
        }
        self.flush(&mut batch).await
    }

    /// Sends what `batch` holds, if anything, as one piece.
    async fn flush(&self, batch: &mut BytesMut) -> bool {
        if batch.is_empty() {
            return true;
        }
        self.send([batch.split().freeze(), Bytes::new(), Bytes::new()]).await
    }

    /// What `event` is for this watcher.
    fn render(&mut self, event: &Event) -> Rendered {
        let Some(kind) = self.visible_as(event) else {
            return Rendered::Hidden;
        };
        let object = match self.representation {
            Representation::Json => Ok(event.object.json.clone()),
            Representation::Metadata(version) => table::partial_metadata(&event.object, version),
            Representation::Table(version) => {
                // Column definitions go with the first event only, as kube-apiserver does.
                let columns = if self.headers_sent { Columns::Omitted } else { Columns::Defined };
                self.headers_sent = true;
                table::table(&[&event.object], version, self.options.include_object, b"{}", columns)
            }
        };
        match object {
            Ok(object) => Rendered::Event { kind: kind.as_str(), object },
            Err(error) => Rendered::Failed(line("ERROR", &json_bytes(&error.to_status()))),
        }
    }

    /// How a selector-filtered watcher sees an event: entering the selection is ADDED, leaving
    /// it is DELETED, and changes outside it are not seen at all.
    fn visible_as(&self, event: &Event) -> Option<EventType> {
        let selects = |s: &crate::store::Stored| self.options.selects(s.name(), s.labels());
        let now = selects(&event.object);
        match (event.kind, event.previous.as_deref().map(selects)) {
            (EventType::Modified, Some(false)) if now => Some(EventType::Added),
            (EventType::Modified, Some(true)) if !now => Some(EventType::Deleted),
            (kind, _) if now => Some(kind),
            _ => None,
        }
    }

    fn bookmark(&self, revision: u64, initial_events_end: bool) -> buffer::Line {
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
        }
        let object: Value = match self.representation {
            Representation::Metadata(version) => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": version.api_version(), "metadata": metadata})
            }
            _ => json!({"kind": KIND, "apiVersion": API_VERSION, "metadata": metadata}),
        };
        line("BOOKMARK", &json_bytes(&object))
    }

    /// Queues `line` for the client. False when the client left, or when the deadline passes or
    /// the server stops while a client that stopped reading keeps the queue full: a stalled
    /// client never holds a watch open past its timeout or a shutdown. A client that leaves the
    /// queue full for longer than the blocked limit has its watch ended, as kube-apiserver ends
    /// an unresponsive watcher: it resumes from the last event it read, and until then holds
    /// nothing but what is queued.
    async fn send(&self, line: buffer::Line) -> bool {
        // The common case costs no timer: the queue has room.
        let line = match self.sender.try_send(line) {
            Ok(()) => return true,
            Err(buffer::TrySendError::Closed) => return false,
            Err(buffer::TrySendError::Full(line)) => line,
        };
        let blocked_until = Instant::now() + self.blocked_limit;
        tokio::select! {
            biased;
            sent = self.sender.send(line) => sent,
            _ = tokio::time::sleep_until(self.deadline) => false,
            () = self.stopping.cancelled() => false,
            _ = tokio::time::sleep_until(blocked_until) => {
                tracing::debug!(limit = ?self.blocked_limit, "ending the watch of a client that stopped reading");
                self.open.terminated();
                false
            }
        }
    }
}

/// The name a watch's field selector pins (`metadata.name=x`), if it pins one: no other object
/// can pass it.
fn pinned_name(options: &Options) -> Option<String> {
    if options.selects_nothing {
        return None;
    }
    options.fields.iter().find(|term| !term.negated).map(|term| term.value.clone())
}

/// The first of `events` that fit in `budget` bytes (at least one): a watcher whose client
/// stopped reading keeps no more replaced versions alive than its buffer would hold.
fn within(mut events: Vec<Arc<Event>>, budget: usize) -> Vec<Arc<Event>> {
    let weight = |event: &Event| event.object.json.len() + event.previous.as_ref().map_or(0, |p| p.json.len());
    let mut total = 0usize;
    let fitting = events
        .iter()
        .position(|event| {
            total = total.saturating_add(weight(event));
            total > budget
        })
        .map_or(events.len(), |over| over.max(1));
    events.truncate(fitting);
    events
}

/// What one event is for one watcher.
enum Rendered {
    /// The selectors do not let it through.
    Hidden,
    /// Its type and the object as the watcher sees it, for its line.
    Event { kind: &'static str, object: Bytes },
    /// It could not be rendered: the ERROR line that ends the watch.
    Failed(buffer::Line),
}

/// The most bytes of lines joined into one piece: a batch is one chunk and one write for the
/// HTTP and TLS layers (a TLS record carries 16 KiB), and no batch waits for more than this.
const BATCH_BYTES: usize = 32 * 1024;

/// From this size on, an object's stored JSON goes out shared, as its own piece of the line,
/// rather than copied into it: watchers stalled on the same large object then hold one copy.
/// Smaller objects are copied: one piece per line costs the HTTP and TLS layers less than three.
const SHARED_OBJECT_BYTES: usize = 16 * 1024;

/// What a line adds to its object, at most (`{"type":"<kind>","object":` … `}` and a newline).
const LINE_FRAMING_BYTES: usize = 32;

/// Appends `{"type":"<kind>","object":<object>}` and a newline to `out`.
fn put_line(out: &mut BytesMut, kind: &str, object: &[u8]) {
    out.put_slice(b"{\"type\":\"");
    out.put_slice(kind.as_bytes());
    out.put_slice(b"\",\"object\":");
    out.put_slice(object);
    out.put_slice(b"}\n");
}

/// `{"type":"<kind>","object":<object>}` and a newline.
fn line(kind: &str, object: &Bytes) -> buffer::Line {
    if object.len() < SHARED_OBJECT_BYTES {
        let mut out = BytesMut::with_capacity(object.len() + LINE_FRAMING_BYTES);
        put_line(&mut out, kind, object);
        return [out.freeze(), Bytes::new(), Bytes::new()];
    }
    let prefix = match kind {
        "ADDED" => Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":"),
        "MODIFIED" => Bytes::from_static(b"{\"type\":\"MODIFIED\",\"object\":"),
        "DELETED" => Bytes::from_static(b"{\"type\":\"DELETED\",\"object\":"),
        "BOOKMARK" => Bytes::from_static(b"{\"type\":\"BOOKMARK\",\"object\":"),
        other => Bytes::from(format!("{{\"type\":\"{other}\",\"object\":")),
    };
    [prefix, object.clone(), Bytes::from_static(b"}\n")]
}
