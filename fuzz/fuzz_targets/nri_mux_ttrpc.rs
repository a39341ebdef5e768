//! NRI's framing: the multiplexer (NRI's pkg/net/multiplex) carrying ttrpc,
//! and plain ttrpc, fed a stream in random pushes with losses; every
//! message's envelope and body decoded as the NRI call assembler does.
//! Input: see `nri_trace_fuzz::pieces`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::nri::{
    message::{self, Method, RequestBody, ResponseBody},
    ttrpc::{MessageType, MuxTtrpc, TtrpcDecoder, TtrpcEvent},
};
use nri_trace_fuzz::{pieces, Piece};

fuzz_target!(|data: &[u8]| {
    let mut mux = MuxTtrpc::new();
    let mut plain = TtrpcDecoder::new();
    for piece in pieces(data) {
        match piece {
            Piece::Bytes(b) => {
                mux.push(b);
                plain.push(b);
            }
            Piece::Gap => {
                mux.gap();
                plain.gap();
            }
        }
        while let Some((_conn, ev, _end)) = mux.next_with_end() {
            decode(&ev);
        }
        while let Some((ev, _end)) = plain.next_with_end() {
            decode(&ev);
        }
        // Partial state stays within the decoders' own bounds.
        assert!(mux.buffered() <= mux.max_buffered());
        assert!(plain.buffered() <= plain.max_buffered());
    }
});

fn decode(ev: &TtrpcEvent) {
    let TtrpcEvent::Message(m) = ev else { return };
    match m.kind {
        MessageType::Request => {
            if let Ok(req) = message::decode_request(&m.payload) {
                if let Some(method) = Method::from_wire(&req.service, &req.method) {
                    let _ = RequestBody::decode(method, &req.payload);
                }
            }
        }
        MessageType::Response => {
            if let Ok(resp) = message::decode_response(&m.payload) {
                // The request is not known here: try the body as every
                // method's response, as a mismatch would be decoded.
                for method in methods() {
                    let _ = ResponseBody::decode(method, &resp.payload);
                }
            }
        }
        _ => {}
    }
}

fn methods() -> impl Iterator<Item = Method> {
    nri_trace_fuzz::nri_methods()
}
