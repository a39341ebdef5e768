//! `-o json`: NDJSON for pipelines, one schema with the record files
//! (docs/schema.md, docs/schema/record.schema.json). The same `session`
//! line opens the output, each record follows as one line (`"v"` first,
//! then its `"type"`), the latency tables come as `cri_method_summary` and
//! `hook_summary` lines at the end, and a `session_end` line closes it.

use std::io::{self, Write};

use serde::Serialize;

use super::finding_message::ViolationLine;
use crate::{
    engine::{
        conformance::ClauseTally, cri_latency::MethodSummary, hook_latency::HookSummary,
        record::Record,
    },
    pipeline::{Ending, Progress, Sink},
    store::ndjson::LineWriter,
    store::record_file::{Header, SessionInfo},
};

/// A latency table row as a line.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TableRow<'a> {
    CriMethodSummary(&'a MethodSummary),
    HookSummary(&'a HookSummary),
    Conformance(&'a ClauseTally),
}

/// A record as its JSON line: a finding also gets its sentence
/// (`message`, beside the data in `detail`).
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum RecordLine<'a> {
    Violation(ViolationLine<'a>),
    Other(&'a Record),
}

impl<'a> RecordLine<'a> {
    pub(crate) fn of(r: &'a Record) -> Self {
        match r {
            Record::Violation(v) => RecordLine::Violation(ViolationLine::new(v)),
            r => RecordLine::Other(r),
        }
    }
}

/// Records as NDJSON lines on `W`.
pub struct JsonSink<W: Write> {
    out: LineWriter<W>,
}

impl<W: Write> JsonSink<W> {
    /// Start the output with the `session` line.
    pub fn new(w: W, session: &SessionInfo) -> io::Result<Self> {
        let mut out = LineWriter::new(w);
        out.write_record(&Header::Session(session), true)?;
        Ok(JsonSink { out })
    }
}

impl<W: Write> Sink for JsonSink<W> {
    fn record(&mut self, r: &Record) -> io::Result<()> {
        self.out.write_record(&RecordLine::of(r), false)
    }

    fn idle(&mut self, _: &Progress<'_>) -> io::Result<()> {
        self.out.flush()
    }

    fn finish(&mut self, end: &Ending<'_>) -> io::Result<()> {
        for m in &end.tables.methods {
            self.out
                .write_record(&TableRow::CriMethodSummary(m), false)?;
        }
        for h in &end.tables.hooks {
            self.out.write_record(&TableRow::HookSummary(h), false)?;
        }
        for c in &end.tables.conformance {
            self.out.write_record(&TableRow::Conformance(c), false)?;
        }
        self.out
            .write_record(&Header::SessionEnd(&end.session_end), true)
    }
}
