//! Record files (docs/recorder.md: NDJSON of a session line, observation
//! lines and a session_end line, gzipped or not), as `replay FILE` reads
//! one: the record reader over the bytes, then its observations through
//! the engine, traced as its session line says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::{
    engine::contract::ContractConfig,
    pipeline::replay,
    store::ndjson,
    store::record_file::{RecordLine, SessionInfo},
};

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = ndjson::reader_as::<RecordLine>(Box::new(std::io::Cursor::new(data.to_vec())))
    else {
        return;
    };
    let mut session = None;
    let mut observations = Vec::new();
    for line in reader.flatten() {
        match line {
            RecordLine::Session(s) => session = session.or(Some(s)),
            RecordLine::Observation(o) => observations.push(o),
            RecordLine::SessionEnd(_) | RecordLine::Unknown(_) => {}
        }
    }
    let session = session.unwrap_or_else(|| SessionInfo {
        tool: nri_trace::TOOL.into(),
        runtime: None,
        runtime_pid: None,
        cri_socket: nri_trace_fuzz::CRI_SOCKET.into(),
        nri_socket: nri_trace_fuzz::NRI_SOCKET.into(),
        started_unix_ns: 0,
        redacted: true,
    });
    let _ = replay::records_of_observations(observations, &session, ContractConfig::default());
});
