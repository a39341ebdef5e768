//! CRI messages (k8s.io/cri-api runtime/v1 api.proto): a gRPC message
//! decoded as the request and the response of every CRI method, as the
//! CRI call assembler does once the method is known, and read for an id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::cri::message::{self, CriMethod};

fuzz_target!(|data: &[u8]| {
    let _ = message::request_id(data);
    for &m in CriMethod::ALL {
        let _ = message::decode_request(m, data);
        let _ = message::decode_response(m, data);
    }
});
