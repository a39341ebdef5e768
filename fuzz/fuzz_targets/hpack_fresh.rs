//! HPACK (RFC 7541) from the start of a connection: the header blocks of
//! one direction, in order, through one decoder (its dynamic table carried
//! from block to block). Input: blocks separated by `nri_trace_fuzz::SEP`;
//! a block of one byte `n` instead sets the table size bound to
//! `n * 64` (SETTINGS_HEADER_TABLE_SIZE).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::cri::hpack::{Decoder, Limits};

fuzz_target!(|data: &[u8]| {
    let mut dec = Decoder::new(Limits::default());
    nri_trace_fuzz::hpack_blocks(&mut dec, data);
});
