//! HPACK attached mid-connection: the dynamic table holds entries from
//! before the attach (unknown slots), which later blocks may name; a
//! connection's CRI call assembler teaches the decoder what it infers
//! (`Decoder::learn`). Input: as `hpack_fresh`; each unknown slot a block
//! names is taught a name and value taken from the block's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::cri::hpack::{Decoder, Limits};

fuzz_target!(|data: &[u8]| {
    let mut dec = Decoder::attached(Limits::default());
    nri_trace_fuzz::hpack_blocks(&mut dec, data);
});
