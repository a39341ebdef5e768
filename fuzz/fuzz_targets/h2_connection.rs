//! One HTTP/2 connection, both directions: frames, HPACK (tables start
//! attached, and become known at a preface), stream bookkeeping and gRPC
//! messages, as the CRI call assembler drives `H2Connection`. Input: the
//! client's stream, `nri_trace_fuzz::SEP`, the server's stream, each as
//! `nri_trace_fuzz::pieces` reads it; their pushes alternate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::cri::connection::{H2Connection, Side};
use nri_trace_fuzz::{parts, pieces, Piece};

fuzz_target!(|data: &[u8]| {
    let streams = parts(data);
    let client = pieces(streams[0]);
    let server = streams.get(1).map(|s| pieces(s)).unwrap_or_default();
    let mut conn = H2Connection::new();
    for i in 0..client.len().max(server.len()) {
        for (side, stream) in [(Side::Client, &client), (Side::Server, &server)] {
            match stream.get(i) {
                Some(Piece::Bytes(b)) => conn.push(side, b),
                Some(Piece::Gap) => conn.gap(side),
                None => continue,
            }
            for s in [Side::Client, Side::Server] {
                while conn.next_with_end(s).is_some() {}
            }
        }
    }
    let _ = conn.stats();
});
