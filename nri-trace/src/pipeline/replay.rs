//! The one replay loop: a file read to its end through the pipeline.
//! A record file's observations go to the engine as they are; a raw
//! capture's events through the decoders first (`source`).

use std::{cell::RefCell, io, rc::Rc};

use super::{
    live::Stage,
    source::{Source, SourceError},
    Ending, Pipeline, PipelineError, Sink, Tables,
};
use crate::{
    capture::CaptureEvent,
    engine::{contract::ContractConfig, record::Record},
    model::observation::Observation,
    store::ndjson::LineError,
    store::record_file::{RecordLine, SessionEnd, SessionInfo},
};

/// What a replay met besides the records.
#[derive(Debug, Default)]
pub struct Replayed {
    /// What the pipeline counted (observations, lost records).
    pub end: SessionEnd,
    /// The record file had its `session_end` line (not cut short).
    pub ended: bool,
    /// Lines of kinds this build does not know, skipped.
    pub skipped: u64,
    /// The last line was cut in the middle (a writer killed mid-line):
    /// what came before was replayed.
    pub truncated: Option<LineError>,
}

/// Replay `source` through `p`.
pub fn run(source: Source, mut p: Pipeline) -> Result<Replayed, PipelineError> {
    let mut out = Replayed::default();
    match source {
        Source::Records { name, lines, .. } => {
            for line in lines {
                let line = match line {
                    Ok(l) => l,
                    Err(e @ LineError::Truncated { .. }) => {
                        out.truncated = Some(e);
                        break;
                    }
                    Err(source) => return Err(SourceError::Read { name, source }.into()),
                };
                match line {
                    RecordLine::Observation(o) => p.on_observation(o)?,
                    RecordLine::SessionEnd(_) => out.ended = true,
                    RecordLine::Unknown(_) => out.skipped += 1,
                    // A second session line (files concatenated): its
                    // observations carry on the same clock.
                    RecordLine::Session(_) => {}
                }
            }
        }
        Source::Capture { name, events, .. } => {
            out.ended = true;
            let (end, truncated) = run_capture(&name, events, p)?;
            out.end = end;
            out.truncated = truncated;
            return Ok(out);
        }
    }
    out.end = p.finish()?;
    Ok(out)
}

/// Feed a raw capture's events to `stage` (the pipeline, or one stage
/// alone: `debug nri FILE`) and finish it; a last line cut in the middle
/// ends the input early and is returned.
pub fn run_capture<S: Stage>(
    name: &str,
    events: impl IntoIterator<Item = Result<CaptureEvent, LineError>>,
    mut stage: S,
) -> Result<(S::Output, Option<LineError>), PipelineError> {
    let mut truncated = None;
    for ev in events {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e @ LineError::Truncated { .. }) => {
                truncated = Some(e);
                break;
            }
            Err(source) => {
                return Err(SourceError::Read {
                    name: name.to_string(),
                    source,
                }
                .into())
            }
        };
        stage.on_capture(&ev)?;
    }
    Ok((stage.finish()?, truncated))
}

/// Replay capture events held in memory through `p` (tests, benchmarks).
pub fn events<E: std::borrow::Borrow<CaptureEvent>>(
    events: impl IntoIterator<Item = E>,
    mut p: Pipeline,
) -> Result<SessionEnd, PipelineError> {
    for ev in events {
        p.on_capture(ev.borrow())?;
    }
    p.finish()
}

/// Replay observations held in memory through `p`.
pub fn observations(
    observations: impl IntoIterator<Item = Observation>,
    mut p: Pipeline,
) -> Result<SessionEnd, PipelineError> {
    for o in observations {
        p.on_observation(o)?;
    }
    p.finish()
}

/// What a [`Collect`] sink kept.
#[derive(Debug, Default, Clone)]
pub struct Collected {
    pub records: Vec<Record>,
    pub tables: Tables,
}

/// A sink that keeps every record and the tables (tests, benchmarks).
pub struct Collect(Rc<RefCell<Collected>>);

impl Collect {
    /// The sink, and where it keeps what it is given.
    pub fn new() -> (Self, Rc<RefCell<Collected>>) {
        let c = Rc::new(RefCell::new(Collected::default()));
        (Collect(Rc::clone(&c)), c)
    }
}

impl Sink for Collect {
    fn record(&mut self, r: &Record) -> io::Result<()> {
        self.0.borrow_mut().records.push(r.clone());
        Ok(())
    }

    fn finish(&mut self, end: &Ending<'_>) -> io::Result<()> {
        self.0.borrow_mut().tables = end.tables.clone();
        Ok(())
    }
}

/// The records and tables capture `events` give, on the sockets their
/// opens name (the way `replay FILE` runs a raw capture).
pub fn records_of_events(events: &[CaptureEvent], contract: ContractConfig) -> Collected {
    records_of_events_in(events, &super::source::session_of_events(events), contract)
}

/// The records and tables capture `events` give, traced as `session`
/// says.
pub fn records_of_events_in(
    events: &[CaptureEvent],
    session: &SessionInfo,
    contract: ContractConfig,
) -> Collected {
    collected(session, contract, |p| self::events(events, p))
}

/// The records and tables `observations` give (a record file's).
pub fn records_of_observations(
    observations: impl IntoIterator<Item = Observation>,
    session: &SessionInfo,
    contract: ContractConfig,
) -> Collected {
    collected(session, contract, |p| self::observations(observations, p))
}

/// What `feed` gives a fresh pipeline with a [`Collect`] sink.
fn collected<T>(
    session: &SessionInfo,
    contract: ContractConfig,
    feed: impl FnOnce(Pipeline) -> Result<T, PipelineError>,
) -> Collected {
    let (sink, got) = Collect::new();
    let mut p = Pipeline::new(session, contract);
    p.add_sink(Box::new(sink));
    // Only sinks fail, and Collect does not.
    let _ = feed(p);
    let out = got.borrow().clone();
    out
}
