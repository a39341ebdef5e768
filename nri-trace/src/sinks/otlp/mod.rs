//! `--otlp-endpoint`: the records as OpenTelemetry spans (issue 33).
//!
//! [`spans`] makes the spans from the records (pure: which span is whose
//! parent is written there); [`export`] ships them. This sink joins the
//! two: records in, spans out as their hold for findings ends (capture
//! time), everything at the end of the input.

pub(crate) mod export;
pub(crate) mod spans;

use std::{
    io,
    sync::Arc,
    time::{Duration, Instant},
};

pub use export::{ExportCounters, ExportError};

use crate::{
    engine::record::Record,
    pipeline::{Ending, Progress, Sink},
    store::record_file::SessionEnd,
};

/// The OTLP sink.
pub struct OtlpSink {
    maker: spans::SpanMaker,
    exporter: export::Exporter,
    out: Vec<spans::OtelSpan>,
    /// Live: the capture time last seen, and since when (wall) it has not
    /// moved. A quiet node moves no capture time, so held spans go out
    /// after [`spans::HOLD_NS`] of wall time instead.
    last_now: Option<u64>,
    quiet_since: Instant,
}

impl OtlpSink {
    /// A sink exporting to `endpoint` (`--otlp-endpoint`), or where the
    /// `OTEL_EXPORTER_OTLP_*` variables say.
    pub fn start(endpoint: Option<&str>) -> Result<Self, ExportError> {
        Ok(OtlpSink {
            maker: spans::SpanMaker::new(),
            exporter: export::Exporter::start(endpoint)?,
            out: Vec::new(),
            last_now: None,
            quiet_since: Instant::now(),
        })
    }

    /// What export did so far (the pipeline's `session_end`, the metrics).
    pub fn counters(&self) -> Arc<ExportCounters> {
        Arc::clone(&self.exporter.counters)
    }

    fn ship(&mut self) {
        self.exporter.send(self.out.drain(..));
    }
}

impl Sink for OtlpSink {
    fn record(&mut self, r: &Record) -> io::Result<()> {
        self.maker.record(r, &mut self.out);
        self.ship();
        Ok(())
    }

    fn settled(&mut self, before_ns: u64) -> io::Result<()> {
        self.maker.advance(before_ns, &mut self.out);
        self.ship();
        Ok(())
    }

    fn idle(&mut self, p: &Progress<'_>) -> io::Result<()> {
        if p.now_ns != self.last_now {
            self.last_now = p.now_ns;
            self.quiet_since = Instant::now();
        } else if self.quiet_since.elapsed() >= Duration::from_nanos(spans::HOLD_NS) {
            self.maker.flush(&mut self.out);
            self.ship();
        }
        Ok(())
    }

    fn finish(&mut self, _end: &Ending<'_>) -> io::Result<()> {
        self.maker.flush(&mut self.out);
        self.ship();
        self.exporter.finish();
        Ok(())
    }

    fn add_to_session_end(&self, end: &mut SessionEnd) {
        end.otlp = Some(self.exporter.counters.totals());
    }
}
