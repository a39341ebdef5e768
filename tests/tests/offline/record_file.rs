//! `nri-trace watch --save` files (docs/schema.md) made from the committed lab
//! recordings (tests/fixtures/trace): every line validates against the
//! JSON Schema (docs/schema/record.schema.json), reads back to the same
//! observation, and replaying the file through the engine gives exactly
//! the records, findings and latency histograms that tracing the capture
//! gave. No root needed.

use crate::record_schema;
use crate::replay_util;

use std::path::{Path, PathBuf};

use nri_trace::{
    capture::{CaptureEvent, Loss},
    engine::{contract::ContractConfig, Record},
    model::Observation,
    pipeline::{
        replay::{self, records_of_events_in, records_of_observations},
        Pipeline,
    },
    store::ndjson::{LineError, LineReader},
    store::raw_capture,
    store::record_file::{RecordLine, RecordWriter, SessionInfo},
};
use nri_trace_tests::SharedBuf;
use serde_json::Value;

const CRI: &str = "/var/lib/nri-trace-lab/run/containerd.sock";
const NRI: &str = "/var/lib/nri-trace-lab/run/nri.sock";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixtures() -> Vec<(String, PathBuf)> {
    let dir = root().join("tests/fixtures/trace");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures dir")
        .filter_map(Result::ok)
        .map(|e| e.path().join("recording.ndjson.gz"))
        .filter(|p| p.exists())
        .map(|p| {
            let name = p.parent().unwrap().file_name().unwrap();
            (name.to_string_lossy().into_owned(), p)
        })
        .collect();
    v.sort();
    assert!(v.len() >= 7, "expected the trace fixtures, found {v:?}");
    v
}

fn session(redacted: bool) -> SessionInfo {
    SessionInfo {
        tool: "nri-trace test".into(),
        runtime: Some("containerd".into()),
        runtime_pid: Some(1),
        cri_socket: CRI.into(),
        nri_socket: NRI.into(),
        started_unix_ns: 1,
        redacted,
    }
}

/// The record file of a raw capture, as `watch --save` writes it (the
/// replay of a raw capture runs the same pipeline as the live trace).
fn record_file(raw: &Path, redacted: bool) -> Vec<u8> {
    let events: Vec<CaptureEvent> = raw_capture::open(raw)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    record_events(&events, redacted)
}

fn record_events(events: &[CaptureEvent], redacted: bool) -> Vec<u8> {
    let buf = SharedBuf::default();
    let info = session(redacted);
    let mut p = Pipeline::new(&info, ContractConfig::default());
    let w = RecordWriter::<Box<dyn std::io::Write>>::new(Box::new(buf.clone()), &info).unwrap();
    p.save_to("the record file".into(), w);
    replay::events(events, p).unwrap();
    buf.bytes()
}

fn read_lines(bytes: &[u8]) -> Vec<Result<RecordLine, LineError>> {
    LineReader::<_, RecordLine>::new(bytes).collect()
}

fn observations(bytes: &[u8]) -> Vec<Observation> {
    read_lines(bytes)
        .into_iter()
        .filter_map(|l| match l.expect("a valid line") {
            RecordLine::Observation(o) => Some(o),
            _ => None,
        })
        .collect()
}

#[test]
fn every_line_validates_against_the_json_schema() {
    let v = record_schema::validator();
    let mut types = std::collections::BTreeMap::<String, usize>::new();
    for (name, raw) in fixtures() {
        // Also attached mid-stream (resyncs) and with a loss report.
        let events: Vec<_> = raw_capture::open(&raw)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        let chunks = replay_util::chunk_indices(&events);
        let mut cut = replay_util::attach_at(&events, chunks[chunks.len() / 3]);
        cut.insert(
            cut.len() / 2,
            CaptureEvent::Loss(Loss {
                lost_records: 3,
                lost_bytes: 4096,
                ..Loss::default()
            }),
        );
        for bytes in [
            record_file(&raw, true),
            record_file(&raw, false),
            record_events(&cut, true),
        ] {
            for (t, n) in record_schema::validate_lines(&v, &name, &bytes) {
                *types.entry(t).or_default() += n;
            }
        }
    }
    // The fixtures exercise the common kinds of line.
    for t in [
        "session",
        "session_end",
        "cri_call",
        "cri_connection",
        "cri_resync",
        "nri_call",
        "nri_plugin",
        "nri_plugin_gone",
        "nri_resync",
        "capture_loss",
        "runtime_exited",
        "runtime_started",
        "clock",
    ] {
        assert!(
            types.get(t).copied().unwrap_or(0) > 0,
            "no {t} line: {types:?}"
        );
    }
    eprintln!("validated lines by type: {types:?}");
}

#[test]
fn the_schema_rejects_what_nri_trace_would_not_write() {
    let v = record_schema::validator();
    let bytes = record_file(&fixtures()[0].1, true);
    let call = bytes
        .split(|&b| b == b'\n')
        .map(|l| serde_json::from_slice::<Value>(l).ok())
        .find_map(|v| v.filter(|v| v["type"] == "cri_call"))
        .expect("a cri_call line");
    assert!(v.is_valid(&call));
    let mut missing = call.clone();
    missing.as_object_mut().unwrap().remove("outcome");
    assert!(!v.is_valid(&missing), "a call without its outcome");
    let mut extra = call.clone();
    extra["surprise"] = Value::Bool(true);
    assert!(!v.is_valid(&extra), "an unknown field");
    let mut version = call.clone();
    version["v"] = 2.into();
    assert!(!v.is_valid(&version), "another version");
    let mut outcome = call;
    outcome["outcome"] = serde_json::json!({"kind": "exploded"});
    assert!(!v.is_valid(&outcome), "an unknown outcome");
}

#[test]
fn lines_read_back_to_what_was_written() {
    for (name, raw) in fixtures() {
        let bytes = record_file(&raw, false);
        let lines = read_lines(&bytes);
        assert!(matches!(lines.first(), Some(Ok(RecordLine::Session(s))) if *s == session(false)));
        assert!(matches!(lines.last(), Some(Ok(RecordLine::SessionEnd(_)))));
        // Each observation re-encodes to the bytes it was read from.
        let obs = observations(&bytes);
        let mut again = RecordWriter::new(Vec::new(), &session(false)).unwrap();
        for o in &obs {
            again.write(o).unwrap();
        }
        assert_eq!(
            String::from_utf8(again.finish().unwrap()).unwrap(),
            String::from_utf8(bytes).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn replaying_the_record_file_gives_the_trace_records_and_histograms() {
    for (name, raw) in fixtures() {
        let events: Vec<_> = raw_capture::open(&raw)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        let live = records_of_events_in(&events, &session(false), ContractConfig::default());
        for redacted in [false, true] {
            let bytes = record_file(&raw, redacted);
            let replayed = records_of_observations(
                observations(&bytes),
                &session(redacted),
                ContractConfig::default(),
            );
            let findings = |rs: &[Record]| {
                rs.iter()
                    .filter(|r| matches!(r, Record::Violation(_)))
                    .count()
            };
            assert_eq!(
                findings(&replayed.records),
                findings(&live.records),
                "{name} redacted={redacted}"
            );
            // The lab's calls carry no secret: redaction changes nothing.
            assert!(
                replayed.records == live.records,
                "{name} redacted={redacted}: records differ"
            );
            assert_eq!(replayed.tables, live.tables, "{name}");
        }
    }
}

#[test]
fn versions_and_unknown_kinds() {
    let lines = read_lines(
        b"{\"v\":1,\"type\":\"session\",\"tool\":\"t\",\"cri_socket\":\"c\",\"nri_socket\":\"n\",\
          \"started_unix_ns\":0,\"redacted\":true}\n\
          {\"v\":1,\"type\":\"sandbox_event\",\"pid\":3}\n\
          {\"v\":2,\"type\":\"clock\",\"now_ns\":5}\n\
          {\"v\":1,\"type\":\"clock\",\"now_ns\":\"soon\"}\n\
          {\"v\":1,\"type\":\"clock\",\"now_ns\":7}\n\
          {\"v\":1,\"type\":\"clock\",\"now",
    );
    assert!(matches!(lines[0], Ok(RecordLine::Session(_))));
    assert!(matches!(&lines[1], Ok(RecordLine::Unknown(k)) if k == "sandbox_event"));
    assert!(matches!(
        lines[2],
        Err(LineError::UnsupportedVersion {
            line: 3,
            version: 2
        })
    ));
    assert!(matches!(lines[3], Err(LineError::Invalid { line: 4, .. })));
    assert!(matches!(
        lines[4],
        Ok(RecordLine::Observation(Observation::Clock {
            now_ns: 7,
            ..
        }))
    ));
    assert!(matches!(lines[5], Err(LineError::Truncated { line: 6 })));
}
