//! `nri-trace replay FILE` and `nri-trace report FILE`: a saved file
//! through the same pipeline a live trace runs.

use std::path::Path;

use anyhow::Result;
use nri_trace::{
    pipeline::{open_source, replay, Pipeline, Stop},
    sinks::{
        tui::{self, Mode, TuiOptions, TuiSink},
        ReportSink,
    },
};

use super::{contract, filter, json_sink, on_terminal, otlp_sink, text_sink};
use crate::cli::{
    args::{CallLines, DecodeArgs, FilterArgs, ReplayOutput},
    ReplayArgs, ReportArgs,
};

pub(crate) fn run(a: ReplayArgs) -> Result<()> {
    let output = a.output.unwrap_or_else(|| {
        if on_terminal() {
            ReplayOutput::Tui
        } else {
            ReplayOutput::Report
        }
    });
    replay_to(
        &super::record::input(a.file)?,
        output,
        &a.filter,
        &a.decode,
        a.no_redact,
        a.otlp_endpoint.as_deref(),
    )
}

pub(crate) fn report(a: ReportArgs) -> Result<()> {
    replay_to(
        &super::record::input(a.file)?,
        ReplayOutput::Report,
        &a.filter,
        &a.decode,
        a.no_redact,
        None,
    )
}

fn replay_to(
    file: &Path,
    output: ReplayOutput,
    f: &FilterArgs,
    d: &DecodeArgs,
    no_redact: bool,
    otlp: Option<&str>,
) -> Result<()> {
    let src = open_source(file)?.keep_raw_secrets(no_redact);
    let info = src.session().clone();
    let name = src.name().to_string();
    let mut p = Pipeline::new(&info, contract(d)).with_filter(filter(f));
    if let Some(s) = otlp_sink(otlp)? {
        p.export_to(Box::new(s));
    }
    match output {
        ReplayOutput::Text => p.add_sink(text_sink(d)),
        ReplayOutput::Json => p.add_sink(json_sink(&info)?),
        ReplayOutput::Report => p.add_sink(Box::new(ReportSink::new(std::io::stdout()))),
        ReplayOutput::Tui => {
            let status = tui::status_of(&info, format!("replay {name}"));
            p.add_sink(Box::new(TuiSink::open(
                Mode::Replay,
                status,
                TuiOptions {
                    all_calls: d.calls == CallLines::All,
                    ..TuiOptions::default()
                },
                Stop::new(),
            )));
        }
    }
    let r = replay::run(src, p)?;
    warn(&name, &r);
    Ok(())
}

/// What a replay met besides the records, on stderr.
pub(crate) fn warn(name: &str, r: &replay::Replayed) {
    if let Some(e) = &r.truncated {
        eprintln!("nri-trace: {name}: {e}; replayed what came before");
    }
    if !r.ended {
        eprintln!("nri-trace: {name} has no session_end line: the recording was cut short");
    }
    if r.skipped > 0 {
        eprintln!(
            "nri-trace: {name}: {} lines of kinds this build does not know, skipped",
            r.skipped
        );
    }
}
