//! Raw capture files (docs/capture.md: NDJSON of CaptureEvent lines,
//! gzipped or not), as `replay FILE` reads one: the recording reader over
//! the bytes, then the events it accepts through the whole pipeline
//! (decode -> model -> engine) on the sockets their opens name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::{
    capture::CaptureEvent, engine::contract::ContractConfig, pipeline::replay, store::ndjson,
};

fuzz_target!(|data: &[u8]| {
    let Ok(reader) =
        ndjson::reader_as::<CaptureEvent>(Box::new(std::io::Cursor::new(data.to_vec())))
    else {
        return;
    };
    let events: Vec<CaptureEvent> = reader.filter_map(Result::ok).collect();
    let _ = replay::records_of_events(&events, ContractConfig::default());
});
