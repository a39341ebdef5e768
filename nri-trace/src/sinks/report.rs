//! `nri-trace report`: a human summary of a trace: pods and where their
//! time went, the slowest hooks, the latency tables, and the findings with
//! their evidence. Renders the engine's pod model; no logic of its own.

use std::io::{self, Write};

use crate::{
    engine::record::Record,
    pipeline::{Ending, Sink, Tables},
};

use super::lines;
use crate::{
    engine::{
        findings::{Certainty, Violation},
        pods::PodModel,
    },
    human::sanitize,
};

/// `report` (and `replay -o report`): the pod model and the findings,
/// rendered when the input ends.
pub struct ReportSink<W: Write> {
    out: W,
    model: PodModel,
    findings: Vec<Violation>,
}

impl<W: Write> ReportSink<W> {
    pub fn new(out: W) -> Self {
        ReportSink {
            out,
            model: PodModel::new(),
            findings: Vec::new(),
        }
    }
}

impl<W: Write> Sink for ReportSink<W> {
    fn record(&mut self, r: &Record) -> io::Result<()> {
        self.model.on_record(r);
        if let Record::Violation(v) = r {
            self.findings.push(v.clone());
        }
        Ok(())
    }

    fn finish(&mut self, end: &Ending<'_>) -> io::Result<()> {
        render(&mut self.out, &self.model, &self.findings, end.tables)?;
        self.out.flush()
    }
}

/// How many slowest hooks to list.
pub(crate) const SLOWEST_HOOKS: usize = 10;

pub(crate) fn render(
    w: &mut impl Write,
    model: &PodModel,
    findings: &[Violation],
    tables: &Tables,
) -> io::Result<()> {
    writeln!(w, "PODS ({})", model.len())?;
    writeln!(
        w,
        "{:<40} {:<8} {:>5} {:>10} {:>10} {:>5}  SLOWEST CALL",
        "NAMESPACE/NAME", "PHASE", "CALLS", "CRI TIME", "NRI TIME", "FIND"
    )?;
    for p in model.pods() {
        let slowest = p
            .slowest()
            .map(|e| {
                format!(
                    "{} {}{}",
                    e.method,
                    e.duration_ns
                        .map_or_else(|| "-".into(), crate::human::duration),
                    if e.nri_ns > 0 {
                        format!(" ({} in NRI)", crate::human::duration(e.nri_ns))
                    } else {
                        String::new()
                    }
                )
            })
            .unwrap_or_default();
        writeln!(
            w,
            "{:<40} {:<8} {:>5} {:>10} {:>10} {:>5}  {}",
            sanitize(&p.label()),
            format!("{:?}", p.phase).to_lowercase(),
            p.timeline.len(),
            crate::human::duration(p.cri_ns),
            crate::human::duration(p.nri_ns),
            p.findings,
            sanitize(&slowest)
        )?;
    }

    writeln!(w, "\nSLOWEST HOOKS")?;
    let mut all: Vec<(u64, String, &str, String)> = model
        .pods()
        .flat_map(|p| {
            p.timeline.iter().flat_map(move |e| {
                e.hooks.iter().filter_map(move |(plugin, hook, own)| {
                    own.map(|o| (o, plugin.clone(), hook.as_str(), p.label()))
                })
            })
        })
        .collect();
    all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    for (own, plugin, hook, pod) in all.iter().take(SLOWEST_HOOKS) {
        writeln!(
            w,
            "{:>10}  {:<20} {:<28} {}",
            crate::human::duration(*own),
            sanitize(plugin),
            hook,
            sanitize(pod)
        )?;
    }

    writeln!(w)?;
    lines::summary_text(w, &tables.hooks, &tables.methods)?;
    lines::conformance_text(w, &tables.conformance)?;

    let certain = findings
        .iter()
        .filter(|f| f.certainty == Certainty::Certain)
        .count();
    writeln!(
        w,
        "\nFINDINGS ({}, {certain} certain; rules in docs/contract.md)",
        findings.len()
    )?;
    for f in findings {
        lines::violation_text(w, f, "")?;
    }
    if findings.is_empty() {
        writeln!(w, "none")?;
    }
    Ok(())
}
