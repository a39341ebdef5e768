//! Stream offsets to capture timestamps: a decoded unit (message, header
//! block) is stamped with the syscall that carried its last byte, even when
//! a decoder releases it later (after resynchronization or a partial frame
//! held across chunks).

use std::collections::VecDeque;

use crate::basic_types::Timestamp;

/// Most chunk ends remembered (per connection direction).
const MAX_MARKS: usize = 4096;

/// The ends of the chunks pushed into one decoder, in stream offsets.
#[derive(Debug, Default)]
pub(super) struct ChunkStamps {
    /// (bytes pushed after the chunk, its timestamp), oldest first.
    marks: VecDeque<(u64, Timestamp)>,
    pushed: u64,
}

impl ChunkStamps {
    /// A chunk of `len` bytes at `ts` was pushed.
    pub(super) fn push(&mut self, len: usize, ts: Timestamp) {
        self.pushed += len as u64;
        if self.marks.len() == MAX_MARKS {
            self.marks.pop_front();
        }
        self.marks.push_back((self.pushed, ts));
    }

    /// The timestamp of the chunk holding the byte just before stream
    /// offset `end`; `fallback` when unknown (or already trimmed).
    pub(super) fn stamp(&self, end: Option<u64>, fallback: Timestamp) -> Timestamp {
        end.and_then(|end| {
            let i = self.marks.partition_point(|(e, _)| *e < end);
            self.marks.get(i).map(|(_, ts)| *ts)
        })
        .unwrap_or(fallback)
    }

    /// Forget chunks wholly before the oldest of the `buffered` bytes the
    /// decoder still holds.
    pub(super) fn trim(&mut self, buffered: usize) {
        let keep_from = self.pushed.saturating_sub(buffered as u64);
        while self.marks.len() > 1 && self.marks[0].0 < keep_from {
            self.marks.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(n: u64) -> Timestamp {
        Timestamp {
            mono_ns: n,
            wall_ns: n,
        }
    }

    #[test]
    fn stamps_by_last_byte() {
        let mut s = ChunkStamps::default();
        s.push(10, ts(1));
        s.push(5, ts(2));
        assert_eq!(s.stamp(Some(10), ts(9)), ts(1));
        assert_eq!(s.stamp(Some(11), ts(9)), ts(2));
        assert_eq!(s.stamp(Some(99), ts(9)), ts(9));
        assert_eq!(s.stamp(None, ts(9)), ts(9));
        s.trim(3);
        assert_eq!(s.stamp(Some(14), ts(9)), ts(2));
    }
}
