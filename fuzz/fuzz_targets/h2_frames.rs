//! HTTP/2 framing (RFC 9113): the frame decoder fed a stream in random
//! pushes with losses, and each frame header it sees parsed on its own.
//! Input: see `nri_trace_fuzz::pieces`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::cri::frame::{self, FrameDecoder, FrameEvent, FrameHeader, HEADER_LEN};
use nri_trace_fuzz::{pieces, Piece};

fuzz_target!(|data: &[u8]| {
    let mut dec = FrameDecoder::new();
    for piece in pieces(data) {
        match piece {
            Piece::Bytes(b) => dec.push(b),
            Piece::Gap => dec.gap(),
        }
        while let Some((ev, _end)) = dec.next_with_end() {
            // A SETTINGS frame's MAX_FRAME_SIZE is applied by the
            // connection; do it here too, within the RFC's range.
            if let FrameEvent::Frame(frame::Frame::Settings { settings, .. }) = &ev {
                for &(id, v) in settings {
                    if id == frame::SETTINGS_MAX_FRAME_SIZE {
                        let _ = dec.set_max_frame_size(v);
                    }
                }
            }
        }
        assert!(dec.buffered() <= dec.max_buffered());
    }
    // A frame header and payload taken as one frame, as parse_frame is
    // called on each.
    if let Some(h) = data.get(..HEADER_LEN).and_then(FrameHeader::parse) {
        let _ = frame::parse_frame(&h, &data[HEADER_LEN..]);
    }
});
