//! The file `nri-trace watch --save` writes and `nri-trace replay` reads: the
//! model's [`Observation`] stream as NDJSON (docs/schema.md, JSON Schema
//! in docs/schema/record.schema.json).
//!
//! Every line is one JSON object with `"v"` (the record version,
//! [`ndjson::SCHEMA_VERSION`]) first and a `"type"`: a `session` line opens the
//! file (what was traced, whether secrets were redacted), observation
//! lines follow in capture-time order, and a `session_end` line closes a
//! file whose capture ended cleanly (a file without one was cut short).
//! Lines are read and written as every file's ([`ndjson`]): capped in size,
//! errors name their line, a newer version is refused. A reader of
//! version 1 skips a `"type"` it does not know, so new kinds of record can
//! be added without a version change.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ndjson::{self, FileReader, LineError, LineType};
use crate::model::observation::Observation;

/// What the `session` line says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// "nri-trace 0.1.0".
    pub tool: String,
    /// "containerd" or "cri-o", when found.
    #[serde(default)]
    pub runtime: Option<String>,
    #[serde(default)]
    pub runtime_pid: Option<u32>,
    pub cri_socket: String,
    pub nri_socket: String,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub started_unix_ns: u64,
    /// Secrets were redacted ([`redact`]); false with `--no-redact`.
    pub redacted: bool,
}

/// What the `session_end` line says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEnd {
    /// Observation lines written.
    pub observations: u64,
    /// Capture records lost (the last loss counters' `lost_records`).
    pub lost_records: u64,
    /// What OTLP export did, when it ran (`--otlp-endpoint`): written by
    /// the `-o json` output, not by a record file (closed before export
    /// ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<ExportTotals>,
}

/// `session_end`'s `otlp`: the spans exported and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportTotals {
    /// Spans the collector accepted.
    pub exported_spans: u64,
    /// Spans given up: the queue was full, or the run ended before the
    /// collector took them.
    pub dropped_spans: u64,
    /// Export requests that failed (each retried until it went or the run
    /// ended).
    pub failed_exports: u64,
}

/// One line of the file.
// Lines are handled one by one; observations dominate.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordLine {
    Session(SessionInfo),
    Observation(Observation),
    SessionEnd(SessionEnd),
    /// A line of a kind this build does not know (written by a later
    /// build of the same version): skipped.
    Unknown(String),
}

/// The `"type"` tags of the observation lines.
pub(crate) const OBSERVATION_TYPES: &[&str] = &[
    "cri_call",
    "cri_pending",
    "cri_connection",
    "cri_connection_gone",
    "cri_resync",
    "nri_call",
    "nri_pending",
    "nri_plugin",
    "nri_plugin_gone",
    "nri_resync",
    "capture_loss",
    "runtime_exited",
    "runtime_started",
    "sandbox",
    "cri_state",
    "clock",
];

impl LineType for RecordLine {
    fn parse(kind: Option<&str>, text: &[u8]) -> serde_json::Result<Self> {
        #[derive(Deserialize)]
        struct Session {
            #[serde(flatten)]
            info: SessionInfo,
        }
        #[derive(Deserialize)]
        struct End {
            #[serde(flatten)]
            end: SessionEnd,
        }
        Ok(match kind {
            Some("session") => RecordLine::Session(serde_json::from_slice::<Session>(text)?.info),
            Some("session_end") => RecordLine::SessionEnd(serde_json::from_slice::<End>(text)?.end),
            Some(k) if !OBSERVATION_TYPES.contains(&k) => RecordLine::Unknown(k.to_string()),
            // A missing "type" falls through to serde's own message.
            _ => RecordLine::Observation(serde_json::from_slice(text)?),
        })
    }
}

/// A session's first or last line as written: its type tag and body
/// (what `-o json` prints around its records too).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Header<'a> {
    Session(&'a SessionInfo),
    SessionEnd(&'a SessionEnd),
}

/// Writes a record file. It writes the observations it is given: the
/// pipeline redacts them first when the session says so.
pub struct RecordWriter<W: std::io::Write> {
    out: ndjson::LineWriter<W>,
    written: u64,
    lost_records: u64,
}

impl<W: std::io::Write> RecordWriter<W> {
    /// Start a file on `inner` with its `session` line.
    pub fn new(inner: W, info: &SessionInfo) -> std::io::Result<Self> {
        let mut out = ndjson::LineWriter::new(inner);
        out.write_record(&Header::Session(info), true)?;
        Ok(RecordWriter {
            out,
            written: 0,
            lost_records: 0,
        })
    }

    /// Append one observation. Lines are buffered; `flush` when idle.
    pub fn write(&mut self, o: &Observation) -> std::io::Result<()> {
        self.stage(o)?;
        self.write_staged(o)
    }

    /// Serialize `o` without writing it: the bytes its line will take.
    /// [`write_staged`](Self::write_staged) with the same `o` writes it.
    pub fn stage(&mut self, o: &Observation) -> std::io::Result<u64> {
        self.out.stage_record(o)
    }

    /// Write the line [`stage`](Self::stage) made of `o`.
    pub fn write_staged(&mut self, o: &Observation) -> std::io::Result<()> {
        if let Observation::CaptureLoss(l) = o {
            self.lost_records = l.lost_records;
        }
        self.written += 1;
        self.out.write_staged(false)
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// Bytes written so far, the session line and buffered lines included.
    pub fn bytes(&self) -> u64 {
        self.out.bytes()
    }

    /// Write the `session_end` line and flush.
    pub fn finish(mut self) -> std::io::Result<W> {
        let end = SessionEnd {
            observations: self.written,
            lost_records: self.lost_records,
            otlp: None,
        };
        self.out.write_record(&Header::SessionEnd(&end), true)?;
        self.out.finish()
    }
}

/// The most bytes a `session_end` line can take (its counters at their
/// widest), and a `session` line of `info` (its start time at its widest):
/// what closing a segment and starting the next one add.
pub(crate) fn header_bytes_at_most(info: &SessionInfo) -> std::io::Result<u64> {
    let end = SessionEnd {
        observations: u64::MAX,
        lost_records: u64::MAX,
        otlp: None,
    };
    let mut widest = info.clone();
    widest.started_unix_ns = u64::MAX;
    let mut w = ndjson::LineWriter::new(std::io::sink());
    let end_bytes = w.stage_record(&Header::SessionEnd(&end))?;
    let start_bytes = w.stage_record(&Header::Session(&widest))?;
    Ok(end_bytes + start_bytes)
}

/// Open a record file (gzipped or not) for streaming.
pub fn open(path: impl AsRef<Path>) -> Result<FileReader<RecordLine>, LineError> {
    ndjson::open_as(path)
}

/// Secrets out of observations: what every output of a run shows unless
/// `--no-redact` (the pipeline applies it before the engine and `--save`).
///
/// Decoded calls carry no environment values, mount contents or
/// annotations (NRI adjustments are summarized as counts, docs/nri.md);
/// what can carry a secret is free text: an exec command line (CRI
/// ExecSync/Exec summaries) and error messages that quote a
/// `NAME=value` pair. Those are redacted; identities, methods, timings and
/// outcomes are kept, so the engine gives the same findings.
pub mod redact {
    use super::Observation;
    use crate::model::{
        cri_call::{CriMethod, CriOutcome},
        nri_call::NriOutcome,
    };

    /// What a redacted value becomes.
    pub const REDACTED: &str = "<redacted>";

    /// `o` with its secrets redacted.
    pub fn observation(o: Observation) -> Observation {
        match o {
            Observation::CriCall(mut c) => {
                cri_call(&mut c);
                Observation::CriCall(c)
            }
            Observation::CriPending(mut c) => {
                cri_call(&mut c);
                Observation::CriPending(c)
            }
            Observation::NriCall(mut c) => {
                nri_call(&mut c);
                Observation::NriCall(c)
            }
            Observation::NriPending(mut c) => {
                nri_call(&mut c);
                Observation::NriPending(c)
            }
            other => other,
        }
    }

    fn cri_call(c: &mut crate::model::cri_call::CriCall) {
        if matches!(c.cri_method(), Some(CriMethod::ExecSync | CriMethod::Exec)) {
            c.summary = exec_summary(&c.summary);
        } else {
            c.summary = text(&c.summary);
        }
        if let CriOutcome::Error { message, .. } = &mut c.outcome {
            *message = text(message);
        }
    }

    fn nri_call(c: &mut crate::model::nri_call::NriCall) {
        c.summary = text(&c.summary);
        if let NriOutcome::Error { message, .. } = &mut c.outcome {
            *message = text(message);
        }
    }

    /// An exec summary (`cmd ["sh", "-c", "..."]`, decode/cri/message.rs)
    /// keeps the program and drops its arguments.
    fn exec_summary(s: &str) -> String {
        let Some(rest) = s.strip_prefix("cmd [\"") else {
            return text(s);
        };
        // The program: up to the first unescaped quote.
        let mut prog = String::new();
        let mut escaped = false;
        for ch in rest.chars() {
            match (escaped, ch) {
                (false, '\\') => escaped = true,
                (false, '"') => break,
                _ => {
                    escaped = false;
                    prog.push(ch);
                }
            }
        }
        format!("cmd [{prog:?}, {REDACTED}]")
    }

    /// Free text with the value of every `NAME=value` redacted (NAME an
    /// environment-variable-like word).
    pub fn text(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(eq) = rest.find('=') {
            let (before, after) = rest.split_at(eq);
            let name_start = before
                .char_indices()
                .rev()
                .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
                .last()
                .map(|(i, _)| i);
            out.push_str(before);
            out.push('=');
            let after = &after[1..];
            let is_name = name_start.is_some_and(|i| {
                before[i..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            });
            if is_name {
                // The value: quoted, up to its closing quote; else up to
                // whitespace, a quote or a separator.
                let quote = after.chars().next().filter(|c| matches!(c, '"' | '\''));
                let (open, end) = match quote {
                    Some(q) => (1, after[1..].find(q).map_or(after.len(), |e| e + 1)),
                    None => (
                        0,
                        after
                            .find(|c: char| {
                                c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';')
                            })
                            .unwrap_or(after.len()),
                    ),
                };
                out.push_str(&after[..open]);
                if end > open {
                    out.push_str(REDACTED);
                }
                rest = &after[end..];
            } else {
                rest = after;
            }
        }
        out.push_str(rest);
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn values_of_name_value_pairs_go() {
            assert_eq!(
                text("env TOKEN=abc123 and PASS=x,y"),
                "env TOKEN=<redacted> and PASS=<redacted>,y"
            );
            assert_eq!(text("a == b; 3=4"), "a == b; 3=4");
            assert_eq!(text("no pairs here"), "no pairs here");
            assert_eq!(text("K=\"v w\" x"), "K=\"<redacted>\" x");
            assert_eq!(text("K='v"), "K='<redacted>");
            assert_eq!(text("ünï=1 x"), "ünï=1 x");
        }

        #[test]
        fn exec_keeps_the_program_only() {
            assert_eq!(
                exec_summary(r#"cmd ["sh", "-c", "echo $SECRET"]"#),
                r#"cmd ["sh", <redacted>]"#
            );
            assert_eq!(
                exec_summary(r#"cmd ["a\"b"]"#),
                r#"cmd ["a\"b", <redacted>]"#
            );
            assert_eq!(exec_summary("cmd []"), "cmd []");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        basic_types::{ConnId, Timestamp},
        capture::Peer,
        engine::test_calls::cri,
        model::cri_client::CriClient,
    };

    /// A line as `--save` writes it, with `drop` taken out: what a record
    /// file written before that field existed holds.
    fn line_without(o: &Observation, drop: &str) -> Vec<u8> {
        let mut v = serde_json::to_value(o).expect("an observation serializes");
        assert!(v.as_object_mut().expect("an object").remove(drop).is_some());
        serde_json::to_vec(&v).expect("JSON")
    }

    fn parse(kind: &str, line: &[u8]) -> Observation {
        match RecordLine::parse(Some(kind), line).expect("the line parses") {
            RecordLine::Observation(o) => o,
            other => panic!("{other:?}"),
        }
    }

    /// Record files written before clients were recorded still read: their
    /// calls have no client, their connections only the label.
    #[test]
    fn lines_from_before_the_client_read_as_unknown() {
        let client = CriClient::of_peer(&Peer {
            pid: 4242,
            uid: 0,
            comm: Some("crictl".into()),
            cmdline: vec![],
            env: Default::default(),
            cgroup: Some("/user.slice/user-0.slice/session-3.scope".into()),
        });
        let mut call = cri(Some("StopPodSandbox"), "sb1", 10, 20);
        call.client = Some(client.clone());
        let call = Observation::CriCall(call);
        assert_eq!(parse("cri_call", &serde_json::to_vec(&call).unwrap()), call);
        match parse("cri_call", &line_without(&call, "client")) {
            Observation::CriCall(c) => assert_eq!(c.client, None),
            other => panic!("{other:?}"),
        }
        let conn = Observation::CriConnection {
            conn: ConnId(3),
            ts: Timestamp {
                mono_ns: 1,
                wall_ns: 2,
            },
            client: Some(client.label()),
            client_process: Some(client),
        };
        assert_eq!(
            parse("cri_connection", &serde_json::to_vec(&conn).unwrap()),
            conn
        );
        match parse("cri_connection", &line_without(&conn, "client_process")) {
            Observation::CriConnection {
                client,
                client_process,
                ..
            } => {
                assert_eq!(client.as_deref(), Some("crictl[4242]"));
                assert_eq!(client_process, None);
            }
            other => panic!("{other:?}"),
        }
    }
}
