//! Transformations of real recordings for the replay property tests: the
//! same bytes cut into other chunks, or joined mid-stream.
#![allow(dead_code)]

use nri_trace::capture::{CaptureEvent, Chunk};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// `cases` cases, proptest's fast RNG, no failure files in the tree;
/// `PROPTEST_CASES=N` runs N instead (as the decoders' own properties,
/// nri-trace/src/decode/test_strategies.rs).
pub(crate) fn config(cases: u32) -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(cases),
        failure_persistence: None,
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..Config::default()
    }
}

/// Piece sizes for [`resplit`], used in turn.
pub(crate) fn piece_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..4096, 1..64)
}

/// The same byte streams in other chunks: each chunk cut into pieces of
/// the `sizes` in turn (each at most what is left of the chunk), or into
/// one byte each when `sizes` is empty. Gap and truncation flags stay on
/// the first and last piece of their chunk.
pub(crate) fn resplit(events: &[CaptureEvent], sizes: &[usize]) -> Vec<CaptureEvent> {
    let mut split = Vec::with_capacity(events.len() * 2);
    let mut next = sizes.iter().copied().cycle();
    for ev in events {
        let CaptureEvent::Chunk(c) = ev else {
            split.push(ev.clone());
            continue;
        };
        let mut rest: &[u8] = &c.bytes;
        let mut first = true;
        while !rest.is_empty() {
            let n = next.next().unwrap_or(1).clamp(1, rest.len());
            let (a, b) = rest.split_at(n);
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

/// `check` on `events` cut into one-byte chunks, then on `cases` random
/// re-chunkings of them (a failing one is shrunk and reported).
pub(crate) fn for_splits(events: &[CaptureEvent], cases: u32, check: impl Fn(Vec<CaptureEvent>)) {
    check(resplit(events, &[]));
    TestRunner::new(config(cases))
        .run(&piece_sizes(), |sizes| {
            check(resplit(events, &sizes));
            Ok(())
        })
        .unwrap();
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
