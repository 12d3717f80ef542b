//! What the connection loop watches: connections per client, requests open on a connection
//! (so an idle one can be closed) and writes a client has left blocked (so a client that stopped
//! reading cannot keep a connection and its buffers forever).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use http::Response;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Open connections per client address, bounded.
#[derive(Clone, Debug)]
pub(super) struct Clients {
    max: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One admitted connection; frees its place when dropped.
#[derive(Debug)]
pub(super) struct Slot {
    address: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Clients {
    pub(super) fn new(max: usize) -> Self {
        Self { max, open: Arc::default() }
    }

    /// A place for one more connection from `address`, unless it holds as many as it may.
    pub(super) fn admit(&self, address: IpAddr) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(address).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Slot { address, open: Arc::clone(&self.open) })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Milliseconds since `epoch`, plus one, so that zero can mean "never".
fn stamp(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
}

fn since(epoch: Instant, stamp: u64) -> Duration {
    match stamp {
        0 => Duration::ZERO,
        at => epoch.elapsed().saturating_sub(Duration::from_millis(at - 1)),
    }
}

/// The requests open on one connection: from arrival until the response body is dropped
/// (sent, or abandoned).
#[derive(Clone, Debug)]
pub(super) struct Requests(Arc<RequestCount>);

#[derive(Debug)]
struct RequestCount {
    epoch: Instant,
    open: AtomicUsize,
    /// When the last request ended (see [`stamp`]); the connection's start before any.
    idle_since: AtomicU64,
}

impl Default for Requests {
    fn default() -> Self {
        Self(Arc::new(RequestCount { epoch: Instant::now(), open: AtomicUsize::new(0), idle_since: AtomicU64::new(1) }))
    }
}

/// Counts one request as open while alive.
struct Open(Arc<RequestCount>);

impl Drop for Open {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle_since.store(stamp(self.0.epoch), Ordering::Release);
        }
    }
}

impl Requests {
    /// Counts the request that `response` answers as open until its body is dropped.
    pub(super) fn track<F>(&self, response: F) -> impl Future<Output = Result<Response<Body>, Infallible>> + use<F>
    where
        F: Future<Output = Result<Response<Body>, Infallible>>,
    {
        self.0.open.fetch_add(1, Ordering::AcqRel);
        let open = Open(Arc::clone(&self.0));
        async move {
            let response = response.await?;
            Ok(response.map(|body| {
                Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
                    let _open = &open; // dropped with the body
                    frame
                }))
            }))
        }
    }

    /// How long the connection has had no request open (zero while one is).
    pub(super) fn idle_for(&self) -> Duration {
        if self.0.open.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        since(self.0.epoch, self.0.idle_since.load(Ordering::Acquire))
    }
}

/// A connection's transport, noting when its writes began to wait for the client to read.
#[derive(Debug)]
pub(super) struct StallWatch<S> {
    inner: S,
    stall: Arc<Stall>,
}

/// The loop's view of a [`StallWatch`].
#[derive(Debug)]
pub(super) struct Writes(Arc<Stall>);

#[derive(Debug)]
struct Stall {
    epoch: Instant,
    /// When the pending write began to wait (see [`stamp`]); zero while writes flow.
    since: AtomicU64,
}

impl<S> StallWatch<S> {
    pub(super) fn new(inner: S) -> (Self, Writes) {
        let stall = Arc::new(Stall { epoch: Instant::now(), since: AtomicU64::new(0) });
        (Self { inner, stall: Arc::clone(&stall) }, Writes(stall))
    }

    fn note<T>(&self, poll: Poll<T>) -> Poll<T> {
        if poll.is_pending() {
            // Only the first wait of a stall is stamped.
            let _ = self.stall.since.compare_exchange(0, stamp(self.stall.epoch), Ordering::AcqRel, Ordering::Acquire);
        } else {
            self.stall.since.store(0, Ordering::Release);
        }
        poll
    }
}

impl Writes {
    /// How long the connection's writes have been waiting for the client (zero while they flow).
    pub(super) fn stalled_for(&self) -> Duration {
        since(self.0.epoch, self.0.since.load(Ordering::Acquire))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallWatch<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallWatch<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.note(poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_holds_at_most_its_share_of_connections() {
        let clients = Clients::new(2);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let first = clients.admit(a).unwrap();
        let _second = clients.admit(a).unwrap();
        assert!(clients.admit(a).is_none());
        assert!(clients.admit(b).is_some(), "another client is not affected");
        drop(first);
        assert!(clients.admit(a).is_some(), "a closed connection frees its place");
    }

    #[tokio::test]
    async fn a_request_is_open_until_its_body_is_dropped() {
        let requests = Requests::default();
        let response = requests.track(async { Ok(Response::new(Body::from("x"))) }).await.unwrap();
        assert_eq!(requests.idle_for(), Duration::ZERO);
        drop(response);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(requests.idle_for() > Duration::ZERO);
    }
}
