//! CRI shape inference: the methods whose request and response shapes fit
//! the bytes of a call seen without its HEADERS (a late attach), as the
//! CRI call assembler asks. Input: request, `nri_trace_fuzz::SEP`,
//! response; a missing part is a message not seen.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::cri::message;

fuzz_target!(|data: &[u8]| {
    let parts = nri_trace_fuzz::parts(data);
    let request = parts.first().copied();
    let response = parts.get(1).copied();
    let both = message::candidates(request, response);
    // Every candidate fits each message seen.
    for m in &both {
        if let Some(q) = request {
            assert!(m.request_fit(q).is_some(), "{m:?} request");
        }
        if let Some(r) = response {
            assert!(m.response_fit(r).is_some(), "{m:?} response");
        }
    }
    let _ = message::candidates(request, None);
    let _ = message::candidates(None, response);
});
