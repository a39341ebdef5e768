//! The one pipeline every command runs: a source, the decoder stage, the
//! engine, and the sinks.
//!
//! ```text
//! source ──CaptureEvent──> TraceDecoder ──Observation──> TraceEngine ──Record──> Filter ──> sinks
//!  live session             (model)          │  (--save)      (engine)                  text, json, report,
//!  raw capture file                          ├─> record file                            tui, metrics, explain
//!                                            └─> recorder segments (`record`)
//!  record file, recorder dir ───Observation───────────────┘
//! ```
//!
//! [`Pipeline`] is that chain; [`live::run`] is the one live loop (a
//! capture session until a signal, `--duration` or a sink asks to stop)
//! and [`replay::run`] the one replay loop (a file read to its end). The
//! binary, the tests and the benches all go through them, so a recording
//! replays to exactly what the live run gave.

mod filter;
pub mod live;
pub mod replay;
mod source;
mod target;
mod wait;

use std::{
    io::{self, Write},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use crate::{
    assemble::TraceDecoder,
    capture::CaptureEvent,
    engine::{
        conformance::ClauseTally, contract::ContractConfig, cri_latency::MethodSummary,
        hook_latency::HookSummary, record::Record, trace_engine::TraceEngine,
    },
    model::observation::Observation,
    store::ndjson::LineWriter,
    store::{
        flight_recorder::FlightRecorder,
        record_file::{redact, RecordWriter, SessionEnd, SessionInfo},
    },
};
pub use filter::Filter;
// The two loops are namespaces the binary calls by name (`live::run`,
// `replay::run`); the rest of the stage is behind these (issue 35).
pub use source::{open_source, session_of_events, Source, SourceError};
pub use target::{
    cri_session, nri_session, runtime_name, runtime_session, Follow, Target, TargetError,
};
pub use wait::{find_target, Announce, Awaited, OnServed};

/// What stops a pipeline's run.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A sink could not write (a closed pipe, a full disk, the terminal).
    #[error("writing the output")]
    Sink(#[source] io::Error),
    /// The record file (`--save`) could not be written.
    #[error("writing {path}")]
    Save {
        path: String,
        #[source]
        source: io::Error,
    },
    /// The input could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The capture session could not start.
    #[error(transparent)]
    Session(#[from] crate::capture::session::SessionError),
}

/// The engine's latency tables, as the sinks show them at the end (rows
/// of other plugins left out under `--plugin`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tables {
    pub hooks: Vec<HookSummary>,
    pub methods: Vec<MethodSummary>,
    /// The contract's by-design clauses, held and broken over every pod
    /// (engine/conformance.rs).
    pub conformance: Vec<ClauseTally>,
}

impl Tables {
    /// `engine`'s tables now, the rows `filter` keeps.
    fn of(engine: &TraceEngine, filter: &Filter) -> Self {
        Tables {
            hooks: engine
                .hook_summary()
                .into_iter()
                .filter(|h| filter.keeps_plugin(&h.plugin))
                .collect(),
            methods: engine.method_summary(),
            conformance: engine.conformance(),
        }
    }
}

/// How the run ended, for the sinks' last words.
pub struct Ending<'a> {
    pub tables: &'a Tables,
    /// Capture time reached (monotonic ns), if any input came.
    pub now_ns: Option<u64>,
    /// What the `session_end` line of a record file says.
    pub session_end: SessionEnd,
    pub engine: &'a TraceEngine,
}

/// Where the run is, for sinks that show it while it goes (the TUI's
/// status line, metrics).
pub struct Progress<'a> {
    pub engine: &'a TraceEngine,
    /// Capture time reached (monotonic ns), if any event came.
    pub now_ns: Option<u64>,
    /// Inputs read so far (capture events, or observations on replay).
    pub inputs: u64,
    filter: &'a Filter,
}

impl Progress<'_> {
    /// The latency tables so far, as the sinks show them (rows of other
    /// plugins left out under `--plugin`, as at the end).
    pub fn tables(&self) -> Tables {
        Tables::of(self.engine, self.filter)
    }
}

/// Where records go: text, JSON, the report, the TUI, metrics, explain.
/// A sink only renders what it is given; it decides nothing about the
/// records (the engine did).
pub trait Sink {
    /// One record that passed the filters.
    fn record(&mut self, r: &Record) -> io::Result<()>;
    /// Every CRI call and NRI delivery that started before `before_ns`
    /// (capture time) has been given ([`TraceEngine::settled_before`]):
    /// for sinks that print in start order.
    fn settled(&mut self, _before_ns: u64) -> io::Result<()> {
        Ok(())
    }
    /// Nothing more is queued for now (flush), and at least every 500 ms
    /// while live.
    fn idle(&mut self, _p: &Progress<'_>) -> io::Result<()> {
        Ok(())
    }
    /// The input ended: the tables, then whatever the sink shows last.
    fn finish(&mut self, end: &Ending<'_>) -> io::Result<()>;
    /// After [`Self::finish`]: what it adds to the run's `session_end`
    /// (an exporter's counts).
    fn add_to_session_end(&self, _end: &mut SessionEnd) {}
}

/// Asks a live run to stop: a signal, `--duration`, or a sink (the TUI's
/// `q`). Cheap to clone; the live loop waits on it.
#[derive(Clone, Default)]
pub struct Stop {
    inner: Arc<(AtomicBool, tokio::sync::Notify)>,
}

impl Stop {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask for the stop (idempotent).
    pub fn request(&self) {
        self.inner.0.store(true, Ordering::SeqCst);
        self.inner.1.notify_waiters();
        self.inner.1.notify_one();
    }

    pub fn requested(&self) -> bool {
        self.inner.0.load(Ordering::SeqCst)
    }

    /// Resolves once a stop is requested.
    pub async fn wait(&self) {
        while !self.requested() {
            let notified = self.inner.1.notified();
            if self.requested() {
                return;
            }
            notified.await;
        }
    }
}

/// The chain from decoder to sinks, fed capture events (live or from a
/// raw capture file) or observations (from a record file).
pub struct Pipeline {
    decoder: TraceDecoder,
    engine: TraceEngine,
    filter: Filter,
    sinks: Vec<Box<dyn Sink>>,
    save: Option<(String, RecordWriter<Box<dyn Write>>)>,
    save_raw: Option<(String, LineWriter<Box<dyn Write>>)>,
    /// The flight recorder (`nri-trace record`).
    recorder: Option<(String, FlightRecorder)>,
    /// Reused buffers.
    obs: Vec<Observation>,
    records: Vec<Record>,
    now_ns: Option<u64>,
    inputs: u64,
    observations: u64,
    lost_records: u64,
    /// Secrets out of every observation before anything sees it.
    redact: bool,
    /// What the sinks were last told of [`TraceEngine::settled_before`].
    settled: u64,
    /// An exporter (OTLP, `--otlp-endpoint`): a sink kept apart so that
    /// it finishes first and `session_end` can say what it shipped.
    exporter: Option<Box<dyn Sink>>,
}

/// Every sink, the exporter first.
fn all_sinks<'a>(
    exporter: &'a mut Option<Box<dyn Sink>>,
    sinks: &'a mut [Box<dyn Sink>],
) -> impl Iterator<Item = &'a mut Box<dyn Sink>> {
    exporter.iter_mut().chain(sinks.iter_mut())
}

impl Pipeline {
    /// A pipeline for the runtime `session` describes (its sockets route
    /// the decoder; its `redacted` says whether secrets are taken out of
    /// every observation), with the contract settings `contract`.
    pub fn new(session: &SessionInfo, contract: ContractConfig) -> Self {
        Pipeline {
            decoder: TraceDecoder::new(
                vec![PathBuf::from(&session.cri_socket)],
                vec![PathBuf::from(&session.nri_socket)],
            ),
            engine: TraceEngine::new(contract),
            filter: Filter::default(),
            sinks: Vec::new(),
            save: None,
            save_raw: None,
            recorder: None,
            obs: Vec::new(),
            records: Vec::new(),
            now_ns: None,
            inputs: 0,
            observations: 0,
            lost_records: 0,
            redact: session.redacted,
            settled: 0,
            exporter: None,
        }
    }

    /// Keep only the records `filter` matches (for every sink).
    #[must_use]
    pub fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }

    pub fn add_sink(&mut self, sink: Box<dyn Sink>) {
        self.sinks.push(sink);
    }

    /// Also export the records (the OTLP sink of `--otlp-endpoint`): it
    /// finishes before the other sinks, and adds to `session_end`
    /// ([`Sink::add_to_session_end`]).
    pub fn export_to(&mut self, sink: Box<dyn Sink>) {
        self.exporter = Some(sink);
    }

    /// Also write every observation to a record file (`--save`): `writer`
    /// has written its session line; `name` is for error messages.
    pub fn save_to(&mut self, name: String, writer: RecordWriter<Box<dyn Write>>) {
        self.save = Some((name, writer));
    }

    /// Also write every observation to the flight recorder's segments
    /// (`nri-trace record`); `name` (its directory) is for error messages.
    pub fn record_to(&mut self, name: String, recorder: FlightRecorder) {
        self.recorder = Some((name, recorder));
    }

    /// Also write every capture event to a raw capture file (`--save-raw`).
    pub fn save_raw_to(&mut self, name: String, writer: LineWriter<Box<dyn Write>>) {
        self.save_raw = Some((name, writer));
    }

    /// One capture event: decoded, and what it completes run through.
    pub fn on_capture(&mut self, ev: &CaptureEvent) -> Result<(), PipelineError> {
        self.inputs += 1;
        if let Some((name, w)) = self.save_raw.as_mut() {
            w.write(ev).map_err(|source| PipelineError::Save {
                path: name.clone(),
                source,
            })?;
        }
        let mut obs = std::mem::take(&mut self.obs);
        self.decoder.on_capture(ev, &mut obs);
        let r = self.observe_all(&mut obs);
        self.obs = obs;
        r
    }

    /// One observation read back from a record file.
    pub fn on_observation(&mut self, o: Observation) -> Result<(), PipelineError> {
        self.inputs += 1;
        self.observe(o)
    }

    fn observe_all(&mut self, obs: &mut Vec<Observation>) -> Result<(), PipelineError> {
        for o in obs.drain(..) {
            self.observe(o)?;
        }
        Ok(())
    }

    fn observe(&mut self, o: Observation) -> Result<(), PipelineError> {
        let o = if self.redact {
            redact::observation(o)
        } else {
            o
        };
        if let Some(t) = o.ts() {
            self.now_ns = Some(self.now_ns.map_or(t.mono_ns, |n| n.max(t.mono_ns)));
        }
        self.observations += 1;
        if let Observation::CaptureLoss(l) = &o {
            self.lost_records = l.lost_records;
        }
        if let Some((name, w)) = self.save.as_mut() {
            w.write(&o).map_err(|source| PipelineError::Save {
                path: name.clone(),
                source,
            })?;
        }
        if let Some((name, r)) = self.recorder.as_mut() {
            r.write(&o).map_err(|source| PipelineError::Save {
                path: name.clone(),
                source,
            })?;
        }
        self.engine.on_observation(o, &mut self.records);
        self.emit()?;
        let settled = self.engine.settled_before();
        if settled != self.settled {
            self.settled = settled;
            for s in all_sinks(&mut self.exporter, &mut self.sinks) {
                s.settled(settled).map_err(PipelineError::Sink)?;
            }
        }
        Ok(())
    }

    /// Hand the records the engine gave to the sinks.
    fn emit(&mut self) -> Result<(), PipelineError> {
        for r in self.records.drain(..) {
            if !self.filter.keeps(&r) {
                continue;
            }
            for s in all_sinks(&mut self.exporter, &mut self.sinks) {
                s.record(&r).map_err(PipelineError::Sink)?;
            }
        }
        Ok(())
    }

    /// Nothing more is queued: sinks and files flush.
    pub fn idle(&mut self) -> Result<(), PipelineError> {
        if let Some((name, w)) = self.save.as_mut() {
            w.flush().map_err(|source| PipelineError::Save {
                path: name.clone(),
                source,
            })?;
        }
        if let Some((name, w)) = self.save_raw.as_mut() {
            w.flush().map_err(|source| PipelineError::Save {
                path: name.clone(),
                source,
            })?;
        }
        if let Some((name, r)) = self.recorder.as_mut() {
            r.flush().map_err(|source| PipelineError::Save {
                path: name.clone(),
                source,
            })?;
        }
        let p = Progress {
            engine: &self.engine,
            now_ns: self.now_ns,
            inputs: self.inputs,
            filter: &self.filter,
        };
        for s in all_sinks(&mut self.exporter, &mut self.sinks) {
            s.idle(&p).map_err(PipelineError::Sink)?;
        }
        Ok(())
    }

    /// The input ended: calls still in decoding come out, the engine
    /// settles what it holds, files are closed and the sinks finish.
    pub fn finish(mut self) -> Result<SessionEnd, PipelineError> {
        let mut obs = std::mem::take(&mut self.obs);
        self.decoder.finish(&mut obs);
        self.observe_all(&mut obs)?;
        self.engine.finish(&mut self.records);
        self.emit()?;
        let mut end = SessionEnd {
            observations: self.observations,
            lost_records: self.lost_records,
            otlp: None,
        };
        if let Some((name, w)) = self.save.take() {
            w.finish()
                .map_err(|source| PipelineError::Save { path: name, source })?;
        }
        if let Some((name, w)) = self.save_raw.take() {
            w.finish()
                .map_err(|source| PipelineError::Save { path: name, source })?;
        }
        if let Some((name, r)) = self.recorder.take() {
            r.finish()
                .map_err(|source| PipelineError::Save { path: name, source })?;
        }
        let tables = Tables::of(&self.engine, &self.filter);
        let mut ending = Ending {
            tables: &tables,
            now_ns: self.now_ns,
            session_end: end,
            engine: &self.engine,
        };
        if let Some(x) = self.exporter.as_mut() {
            x.finish(&ending).map_err(PipelineError::Sink)?;
            x.add_to_session_end(&mut end);
            ending.session_end = end;
        }
        for s in &mut self.sinks {
            s.finish(&ending).map_err(PipelineError::Sink)?;
        }
        Ok(end)
    }

    /// The engine (tables, histograms, finding counts) as it is now.
    pub fn engine(&self) -> &TraceEngine {
        &self.engine
    }
}

impl live::Stage for Pipeline {
    type Output = SessionEnd;
    fn on_capture(&mut self, ev: &CaptureEvent) -> Result<(), PipelineError> {
        Pipeline::on_capture(self, ev)
    }
    fn idle(&mut self) -> Result<(), PipelineError> {
        Pipeline::idle(self)
    }
    fn finish(self) -> Result<SessionEnd, PipelineError> {
        Pipeline::finish(self)
    }
}
