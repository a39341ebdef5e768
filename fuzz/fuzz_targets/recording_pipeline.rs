//! Structure-aware: a real lab recording (tests/fixtures/*/*/
//! recording.ndjson.gz) attached late, cut and damaged, through the whole
//! pipeline (decode -> model -> engine), as `replay` runs a raw capture.
//!
//! Input: byte 0 picks the recording; bytes 1-2 (u16, a fraction of its
//! length) where the observer attaches: chunks before it are not seen,
//! connections opened before it are kept (the capture reports them as it
//! finds them at attach); byte 3 how long it watches: 0 to the end, `n`
//! for `8 * n` events (short runs keep executions fast: a whole recording
//! is up to 1.6 MB of traffic); then 4-byte operations
//! `[op, i_hi, i_lo, x]` on the chunk at index `i` (mod the number of
//! chunks):
//!
//! - 0: split it at byte `x` (one syscall read in two);
//! - 1: flip byte `x` (`x` xor 0xa5): damage;
//! - 2: drop it, the next chunk of its stream marked `gap_before` (a ring
//!   overflow the capture reports);
//! - 3: drop it silently (a loss nothing reports);
//! - 4: keep its first `x` bytes, marked `truncated` (snap length);
//! - 5: send it twice;
//! - 6: swap it with the next event (out-of-order delivery);
//! - 7: insert a `Loss` event before it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::{
    capture::{CaptureEvent, Loss},
    engine::contract::ContractConfig,
    pipeline::replay,
};

fuzz_target!(|data: &[u8]| {
    let all = nri_trace_fuzz::recordings();
    let [pick, a0, a1, span, ops @ ..] = data else {
        return;
    };
    let (_, recording) = &all[usize::from(*pick) % all.len()];
    let attach = usize::from(u16::from_be_bytes([*a0, *a1])) * recording.len() / 65536;
    let end = match span {
        0 => recording.len(),
        n => attach + 8 * usize::from(*n),
    };
    let mut events: Vec<CaptureEvent> = recording
        .iter()
        .enumerate()
        .take(end)
        .filter(|(i, e)| *i >= attach || matches!(e, CaptureEvent::Open(_)))
        .map(|(_, e)| e.clone())
        .collect();
    for op in ops.chunks_exact(4) {
        damage(
            &mut events,
            op[0] % 8,
            usize::from(u16::from_be_bytes([op[1], op[2]])),
            op[3],
        );
    }
    let _ = replay::records_of_events(&events, ContractConfig::default());
});

fn damage(events: &mut Vec<CaptureEvent>, op: u8, i: usize, x: u8) {
    let chunks: Vec<usize> = (0..events.len())
        .filter(|&j| matches!(events[j], CaptureEvent::Chunk(_)))
        .collect();
    if chunks.is_empty() {
        return;
    }
    let at = chunks[i % chunks.len()];
    let CaptureEvent::Chunk(c) = &mut events[at] else {
        unreachable!("an index of a chunk")
    };
    let x = usize::from(x);
    match op {
        0 => {
            let cut = x.min(c.bytes.len());
            let mut tail = c.clone();
            tail.bytes = c.bytes.split_off(cut);
            tail.gap_before = false;
            events.insert(at + 1, CaptureEvent::Chunk(tail));
        }
        1 => {
            if !c.bytes.is_empty() {
                let n = c.bytes.len();
                c.bytes[x % n] ^= 0xa5;
            }
        }
        2 | 3 => {
            let (conn, direction) = (c.conn, c.direction);
            events.remove(at);
            if op == 2 {
                if let Some(CaptureEvent::Chunk(next)) = events[at..].iter_mut().find(
                    |e| matches!(e, CaptureEvent::Chunk(n) if n.conn == conn && n.direction == direction),
                ) {
                    next.gap_before = true;
                }
            }
        }
        4 => {
            c.bytes.truncate(x);
            c.truncated = true;
        }
        5 => {
            let again = CaptureEvent::Chunk(c.clone());
            events.insert(at, again);
        }
        6 => {
            if at + 1 < events.len() {
                events.swap(at, at + 1);
            }
        }
        _ => {
            let loss = Loss {
                lost_records: 1 + x as u64,
                lost_bytes: 4096 * (1 + x as u64),
                ..Loss::default()
            };
            events.insert(at, CaptureEvent::Loss(loss));
        }
    }
}
