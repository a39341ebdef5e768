//! gRPC Length-Prefixed-Messages (grpc/doc/PROTOCOL-HTTP2.md) reassembled
//! from one stream direction's DATA payloads in random pushes, with losses
//! and END_STREAM; the reassembler's bound lowered so that the refusal of
//! an oversize declared length is reached. Input: see
//! `nri_trace_fuzz::pieces`; a byte value 0xff push ends the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::cri::grpc::{MessageEvent, MessageReassembler};
use nri_trace_fuzz::{pieces, Piece};

fuzz_target!(|data: &[u8]| {
    let mut small = MessageReassembler::with_max_message(4096);
    let mut default = MessageReassembler::new();
    for piece in pieces(data) {
        for r in [&mut small, &mut default] {
            match piece {
                Piece::Bytes([0xff]) => r.end_stream(),
                Piece::Bytes(b) => r.push(b),
                Piece::Gap => r.gap(),
            }
            while let Some(ev) = r.next_event() {
                if let MessageEvent::Message(m) = ev {
                    assert!(m.payload.len() <= r.max_message());
                }
            }
        }
        // The reassembler holds no more than what has arrived.
        assert!(small.buffered() <= data.len());
        assert!(default.buffered() <= data.len());
    }
});
