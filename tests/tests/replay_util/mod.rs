//! Transformations of real recordings for the replay property tests: the
//! same bytes cut into other chunks, or joined mid-stream.
#![allow(dead_code)]

use nri_trace::capture::{CaptureEvent, Chunk};

/// Deterministic xorshift64.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The same byte streams in other chunks: random sizes, or (round 0) one
/// byte per chunk. Gap and truncation flags stay on the first and last
/// piece of their chunk.
pub(crate) fn resplit(events: &[CaptureEvent], round: u32, rng: &mut Rng) -> Vec<CaptureEvent> {
    let mut split = Vec::with_capacity(events.len() * 2);
    for ev in events {
        let CaptureEvent::Chunk(c) = ev else {
            split.push(ev.clone());
            continue;
        };
        let mut rest: &[u8] = &c.bytes;
        let mut first = true;
        while !rest.is_empty() {
            let x = rng.next();
            let n = if round == 0 {
                1
            } else {
                1 + (x % (rest.len() as u64)) as usize
            };
            let (a, b) = rest.split_at(n.min(rest.len()));
            split.push(CaptureEvent::Chunk(Chunk {
                bytes: a.to_vec(),
                gap_before: c.gap_before && first,
                truncated: c.truncated && b.is_empty(),
                ..c.clone()
            }));
            first = false;
            rest = b;
        }
    }
    split
}

/// Indices of the chunk events.
pub(crate) fn chunk_indices(events: &[CaptureEvent]) -> Vec<usize> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, CaptureEvent::Chunk(_)))
        .map(|(i, _)| i)
        .collect()
}

/// A mid-stream attach at chunk event `cut`, 3 bytes into it: the opens
/// before it are kept (discovery finds those connections at attach).
pub(crate) fn attach_at(events: &[CaptureEvent], cut: usize) -> Vec<CaptureEvent> {
    let mut tail: Vec<CaptureEvent> = events[..cut]
        .iter()
        .filter(|e| matches!(e, CaptureEvent::Open(_)))
        .cloned()
        .collect();
    tail.extend(events[cut..].iter().cloned());
    if let Some(CaptureEvent::Chunk(c)) = tail
        .iter_mut()
        .find(|e| matches!(e, CaptureEvent::Chunk(_)))
    {
        c.bytes.drain(..c.bytes.len().min(3));
    }
    tail
}
