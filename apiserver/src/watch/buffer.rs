//! The queue between a watcher and its response body, bounded by bytes rather than by lines:
//! one event of a megabyte object weighs as much as a thousand small ones, so a count bound
//! alone lets a client that stops reading hold megabytes per watch.
//!
//! The sender takes a share of the byte budget for each line; the share returns when the HTTP
//! layer takes the line from the body. A line larger than the whole budget waits until the
//! queue is empty and then goes alone, so what one watch queues stays within the budget plus
//! one line.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// The sending half, held by the watcher.
pub(super) struct Sender {
    lines: mpsc::UnboundedSender<(Bytes, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
    capacity: u32,
}

/// Why a line was not queued.
pub(super) enum TrySendError {
    /// The budget is spent: the client has not read what was queued before.
    Full(Bytes),
    /// The response is gone (the client left).
    Closed,
}

/// A queue holding at most `max_bytes` (plus one line larger than that), and the response
/// body stream that drains it.
pub(super) fn channel(max_bytes: usize) -> (Sender, impl Stream<Item = Bytes> + Send + 'static) {
    let capacity = u32::try_from(max_bytes.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
    let (lines, receiver) = mpsc::unbounded_channel();
    let sender = Sender { lines, budget: Arc::new(Semaphore::new(capacity as usize)), capacity };
    // The share of the budget is released here, when hyper takes the line.
    let body = futures_util::StreamExt::map(UnboundedReceiverStream::new(receiver), |(line, _share)| line);
    (sender, body)
}

impl Sender {
    /// What a line costs against the budget (never more than the whole budget).
    fn cost(&self, line: &Bytes) -> u32 {
        u32::try_from(line.len()).unwrap_or(u32::MAX).clamp(1, self.capacity)
    }

    /// Queues `line` if the budget has room now.
    pub(super) fn try_send(&self, line: Bytes) -> Result<(), TrySendError> {
        if self.lines.is_closed() {
            return Err(TrySendError::Closed);
        }
        match Arc::clone(&self.budget).try_acquire_many_owned(self.cost(&line)) {
            Ok(share) => self.lines.send((line, share)).map_err(|_| TrySendError::Closed),
            Err(_) => Err(TrySendError::Full(line)),
        }
    }

    /// Queues `line` once the budget has room; false when the response is gone.
    pub(super) async fn send(&self, line: Bytes) -> bool {
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
    use futures_util::StreamExt;

    use super::*;

    #[tokio::test]
    async fn the_budget_counts_bytes_and_returns_as_lines_are_taken() {
        let (sender, body) = channel(10);
        let mut body = Box::pin(body);
        assert!(sender.try_send(Bytes::from_static(b"0123456")).is_ok());
        // 7 of 10 bytes queued: a 4-byte line waits, a 3-byte one fits.
        assert!(matches!(sender.try_send(Bytes::from_static(b"abcd")), Err(TrySendError::Full(_))));
        assert!(sender.try_send(Bytes::from_static(b"abc")).is_ok());
        assert_eq!(body.next().await.unwrap(), Bytes::from_static(b"0123456"));
        assert!(sender.try_send(Bytes::from_static(b"abcd")).is_ok(), "taken lines give their share back");
    }

    #[tokio::test]
    async fn a_line_larger_than_the_budget_goes_alone() {
        let (sender, body) = channel(4);
        let mut body = Box::pin(body);
        assert!(sender.try_send(Bytes::from_static(b"a")).is_ok());
        assert!(matches!(sender.try_send(Bytes::from_static(b"0123456789")), Err(TrySendError::Full(_))));
        assert_eq!(body.next().await.unwrap(), Bytes::from_static(b"a"));
        assert!(sender.try_send(Bytes::from_static(b"0123456789")).is_ok(), "an empty queue takes it");
        assert!(matches!(sender.try_send(Bytes::from_static(b"b")), Err(TrySendError::Full(_))));
    }

    #[tokio::test]
    async fn a_dropped_body_closes_the_queue() {
        let (sender, body) = channel(4);
        drop(body);
        assert!(matches!(sender.try_send(Bytes::from_static(b"a")), Err(TrySendError::Closed)));
        assert!(!sender.send(Bytes::from_static(b"a")).await);
        sender.closed().await;
    }
}
