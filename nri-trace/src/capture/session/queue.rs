//! The event channel's sender, bounded in bytes as well as in events.

use std::{collections::VecDeque, time::Duration};

use tokio::sync::mpsc;

use crate::capture::CaptureEvent;

/// The event channel's sender, bounded in bytes too: what the consumer has
/// not taken yet is the newest `max_capacity - capacity` events sent (a
/// FIFO), so their sizes are known without the receiver's help.
pub(super) struct Queue {
    tx: mpsc::Sender<CaptureEvent>,
    limit: usize,
    /// Sizes of the events sent and maybe not taken yet, oldest first.
    sizes: VecDeque<usize>,
    bytes: usize,
}

impl Queue {
    pub(super) fn new(tx: mpsc::Sender<CaptureEvent>, limit: usize) -> Self {
        Self {
            tx,
            limit,
            sizes: VecDeque::new(),
            bytes: 0,
        }
    }

    /// What `ev` holds in memory while queued.
    fn size(ev: &CaptureEvent) -> usize {
        size_of::<CaptureEvent>()
            + match ev {
                CaptureEvent::Chunk(c) => c.bytes.len(),
                _ => 0,
            }
    }

    /// Forget the events the consumer took. Events sent by others on the
    /// same channel (the CRI state) count as ours still queued: an
    /// overestimate, gone once they are taken.
    fn settle(&mut self) {
        let queued = self.tx.max_capacity() - self.tx.capacity();
        while self.sizes.len() > queued {
            self.bytes -= self.sizes.pop_front().unwrap_or(0);
        }
    }

    /// Send `ev` once it fits (an event alone always does); false when the
    /// consumer is gone. While it waits, the drain does not run: the ring
    /// fills and the kernel counts what it drops.
    pub(super) async fn send(&mut self, ev: CaptureEvent) -> bool {
        let n = Self::size(&ev);
        loop {
            self.settle();
            if self.bytes == 0 || self.bytes + n <= self.limit {
                break;
            }
            if self.tx.is_closed() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if self.tx.send(ev).await.is_err() {
            return false;
        }
        self.sizes.push_back(n);
        self.bytes += n;
        true
    }
}

#[cfg(test)]
mod tests {
    /// The event channel holds at most `queue_bytes`: a second chunk that
    /// would pass the bound waits until the consumer took the first, though
    /// the channel has room for 16 events.
    #[tokio::test]
    async fn the_queue_is_bounded_in_bytes() {
        use super::{mpsc, Duration, Queue};
        use crate::capture::{CaptureEvent, Chunk, ConnId, Direction, Syscall, Timestamp};
        let chunk = |n: usize| {
            CaptureEvent::Chunk(Chunk {
                conn: ConnId(1),
                direction: Direction::In,
                ts: Timestamp {
                    mono_ns: 0,
                    wall_ns: 0,
                },
                tid: 1,
                syscall: Syscall::Read,
                bytes: vec![0; n],
                truncated: false,
                gap_before: false,
                syscall_len: n as u64,
            })
        };
        let (tx, mut rx) = mpsc::channel(16);
        let limit = 2 * Queue::size(&chunk(600));
        let mut q = Queue::new(tx, limit);
        let sender = tokio::spawn(async move {
            for _ in 0..3 {
                assert!(q.send(chunk(1000)).await);
            }
            q.sizes.len()
        });
        // Only one 1000-byte chunk fits; the sender waits for as long as
        // nothing is taken, however long this test is scheduled away.
        while rx.is_empty() {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(rx.len(), 1);
        assert!(!sender.is_finished());
        for _ in 0..3 {
            assert!(rx.recv().await.is_some());
        }
        let left = sender.await.unwrap();
        assert!(left <= 1, "{left}");
        // An event alone always goes, whatever its size.
        let (tx, mut rx) = mpsc::channel(16);
        let mut q = Queue::new(tx, 10);
        assert!(q.send(chunk(1 << 20)).await);
        assert!(rx.recv().await.is_some());
    }
}
