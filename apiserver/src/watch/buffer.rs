//! The queue between a watcher and its response body, bounded by bytes rather than by lines:
//! one event of a megabyte object weighs as much as a thousand small ones, so a count bound
//! alone lets a client that stops reading hold megabytes per watch.
//!
//! The sender takes a share of the byte budget for each line; the share returns when the HTTP
//! layer has taken the whole line from the body. A line larger than the whole budget waits until
//! the queue is empty and then goes alone, so what one watch queues stays within the budget plus
//! one line.
//!
//! A line is its pieces ([`Line`]): the event's framing and the object's JSON as the store holds
//! it, shared rather than copied, so watchers stalled on the same large object hold one copy.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// One line of the response: `{"type":"…","object":`, the object, `}` and a newline.
pub(super) type Line = [Bytes; 3];

fn len(line: &Line) -> usize {
    line.iter().map(Bytes::len).sum()
}

/// The sending half, held by the watcher.
pub(super) struct Sender {
    lines: mpsc::UnboundedSender<(Line, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
    capacity: u32,
}

/// Why a line was not queued.
pub(super) enum TrySendError {
    /// The budget is spent: the client has not read what was queued before.
    Full(Line),
    /// The response is gone (the client left).
    Closed,
}

/// A queue holding at most `max_bytes` (plus one line larger than that), and the response
/// body stream that drains it.
pub(super) fn channel(max_bytes: usize) -> (Sender, impl Stream<Item = Bytes> + Send + 'static) {
    let capacity = u32::try_from(max_bytes.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
    let (lines, receiver) = mpsc::unbounded_channel();
    let sender = Sender { lines, budget: Arc::new(Semaphore::new(capacity as usize)), capacity };
    let body = futures_util::StreamExt::flat_map(UnboundedReceiverStream::new(receiver), |(line, share): (Line, _)| {
        let pieces: Vec<Bytes> = line.into_iter().filter(|piece| !piece.is_empty()).collect();
        let last = pieces.len().saturating_sub(1);
        let mut share = Some(share);
        futures_util::StreamExt::map(futures_util::stream::iter(pieces.into_iter().enumerate()), move |(i, piece)| {
            // The share of the budget returns as hyper takes the line's last piece.
            if i == last {
                share.take();
            }
            piece
        })
    });
    (sender, body)
}

impl Sender {
    /// What a line costs against the budget (never more than the whole budget).
    fn cost(&self, line: &Line) -> u32 {
        u32::try_from(len(line)).unwrap_or(u32::MAX).clamp(1, self.capacity)
    }

    /// Queues `line` if the budget has room now.
    pub(super) fn try_send(&self, line: Line) -> Result<(), TrySendError> {
        if self.lines.is_closed() {
            return Err(TrySendError::Closed);
        }
        match Arc::clone(&self.budget).try_acquire_many_owned(self.cost(&line)) {
            Ok(share) => self.lines.send((line, share)).map_err(|_| TrySendError::Closed),
            Err(_) => Err(TrySendError::Full(line)),
        }
    }

    /// Queues `line` once the budget has room; false when the response is gone.
    pub(super) async fn send(&self, line: Line) -> bool {
        let cost = self.cost(&line);
        let share = tokio::select! {
            share = Arc::clone(&self.budget).acquire_many_owned(cost) => share,
            () = self.lines.closed() => return false,
        };
        match share {
            Ok(share) => self.lines.send((line, share)).is_ok(),
            Err(_) => false,
        }
    }

    /// Completes when the response is gone.
    pub(super) async fn closed(&self) {
        self.lines.closed().await;
    }
}

#[cfg(test)]
mod tests {
    use futures_util::{FutureExt, StreamExt};

    use super::*;

    fn line(text: &'static str) -> Line {
        let (head, tail) = text.split_at(text.len() / 2);
        [Bytes::from_static(head.as_bytes()), Bytes::from_static(tail.as_bytes()), Bytes::new()]
    }

    /// Takes the next piece of the body, if one is there.
    fn take(body: &mut (impl Stream<Item = Bytes> + Unpin)) -> Option<Bytes> {
        body.next().now_or_never().flatten()
    }

    #[tokio::test]
    async fn the_budget_counts_bytes_and_returns_as_lines_are_taken() {
        let (sender, body) = channel(10);
        let mut body = Box::pin(body);
        assert!(sender.try_send(line("0123456")).is_ok());
        // 7 of 10 bytes queued: a 4-byte line waits, a 3-byte one fits.
        assert!(matches!(sender.try_send(line("abcd")), Err(TrySendError::Full(_))));
        assert!(sender.try_send(line("abc")).is_ok());
        assert_eq!(take(&mut body).unwrap(), Bytes::from_static(b"012"));
        assert!(matches!(sender.try_send(line("abcd")), Err(TrySendError::Full(_))), "the line is not all taken");
        assert_eq!(take(&mut body).unwrap(), Bytes::from_static(b"3456"));
        assert!(sender.try_send(line("abcd")).is_ok(), "taken lines give their share back");
    }

    #[tokio::test]
    async fn a_line_larger_than_the_budget_goes_alone() {
        let (sender, body) = channel(4);
        let mut body = Box::pin(body);
        assert!(sender.try_send(line("a")).is_ok());
        assert!(matches!(sender.try_send(line("0123456789")), Err(TrySendError::Full(_))));
        assert_eq!(take(&mut body).unwrap(), Bytes::from_static(b"a"));
        assert!(sender.try_send(line("0123456789")).is_ok(), "an empty queue takes it");
        assert!(matches!(sender.try_send(line("b")), Err(TrySendError::Full(_))));
    }

    #[tokio::test]
    async fn a_dropped_body_closes_the_queue() {
        let (sender, body) = channel(4);
        drop(body);
        assert!(matches!(sender.try_send(line("a")), Err(TrySendError::Closed)));
        assert!(!sender.send(line("a")).await);
        sender.closed().await;
    }
}
