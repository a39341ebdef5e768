//! `nri-trace doctor`: what works on this node, and what to fix.

use std::io::Write;

use anyhow::Result;
use nri_trace::{
    capture::BackendChoice,
    doctor::{self, Check, Status},
    store::ndjson::LineWriter,
};
use serde::Serialize;

use crate::cli::args::LineOutput;

/// A check as a JSON line.
#[derive(Serialize)]
struct CheckLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    check: &'a Check,
}

/// Run the checks; exit status 1 when one failed.
pub(crate) fn run(output: LineOutput, backend: BackendChoice) -> Result<()> {
    let checks = doctor::run(backend);
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    let stdout = std::io::stdout();
    match output {
        LineOutput::Json => {
            let mut w = LineWriter::new(stdout.lock());
            for c in &checks {
                w.write_record(
                    &CheckLine {
                        kind: "doctor_check",
                        check: c,
                    },
                    false,
                )?;
            }
            w.flush()?;
        }
        LineOutput::Text => {
            let mut w = stdout.lock();
            for c in &checks {
                let tag = match c.status {
                    Status::Ok => "ok  ",
                    Status::Warn => "warn",
                    Status::Fail => "FAIL",
                };
                writeln!(w, "[{tag}] {:<24} {}", c.name, c.detail)?;
                if !c.fix.is_empty() && c.status != Status::Ok {
                    writeln!(w, "       {:<24} fix: {}", "", c.fix)?;
                }
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
