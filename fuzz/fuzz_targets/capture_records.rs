//! Capture ring records (nri-trace-common's EntryHeader layout) as the
//! live session drains them: each parsed, handed to the connection
//! tracker (listeners on a CRI and an NRI socket), the batch's peers
//! resolved, stale partial syscalls flushed, and the events the tracker
//! makes decoded by the pipeline's decoder stage. Input: records separated
//! by `nri_trace_fuzz::SEP`; every 16 records are one drained batch.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::{
    assemble::TraceDecoder,
    testing::capture::{
        ring_entry,
        tracker::{ConnFacts, ConnTracker},
    },
};
use nri_trace_fuzz::{parts, CRI_SOCKET, NRI_SOCKET};

fuzz_target!(|data: &[u8]| {
    let mut tracker = ConnTracker::new(0);
    // The runtime (tgid 1) listens on both sockets, as containerd does.
    tracker.add_listener(1, 3, CRI_SOCKET.into());
    tracker.add_listener(1, 4, NRI_SOCKET.into());
    let mut decoder = TraceDecoder::new(vec![CRI_SOCKET.into()], vec![NRI_SOCKET.into()]);
    let mut events = Vec::new();
    let mut observations = Vec::new();
    let mut last_ts = 0u64;
    for batch in parts(data).chunks(16) {
        for bytes in batch {
            if let Ok(r) = ring_entry::parse(bytes) {
                last_ts = last_ts.max(r.ts_ns);
                tracker.on_record(&r, &mut events);
            }
        }
        let _ = tracker.resolve_peers(&mut events, &mut |_, _| ConnFacts::default());
        let _ = tracker.take_bound();
        let _ = tracker.take_ignored_fds();
        // Each batch is read as a drain that empties the ring.
        tracker.flush_stale(Some(last_ts), 1_000_000_000, &mut events);
        for ev in events.drain(..) {
            decoder.on_capture(&ev, &mut observations);
        }
        observations.clear();
    }
    tracker.close_all(last_ts, &mut events);
    for ev in events.drain(..) {
        decoder.on_capture(&ev, &mut observations);
    }
    decoder.finish(&mut observations);
});
