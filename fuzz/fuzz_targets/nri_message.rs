//! NRI messages (protobuf, proto/nri/v1alpha1/api.proto): a ttrpc payload
//! decoded as request and response envelopes, and as the request and
//! response body of every NRI method.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::nri::message::{self, RequestBody, ResponseBody};

fuzz_target!(|data: &[u8]| {
    let _ = message::decode_request(data);
    if let Ok(r) = message::decode_response(data) {
        let _ = r.error();
    }
    for method in nri_trace_fuzz::nri_methods() {
        let _ = RequestBody::decode(method, data);
        let _ = ResponseBody::decode(method, data);
    }
});
