//! `nri-trace trace` output: each CRI call with the NRI hooks it caused
//! indented under it, NRI calls with no CRI cause, and both tables at the
//! end; text or NDJSON.

use std::io::{self, Write};

use super::{cri_lines, nri_lines};
use crate::{
    engine::{
        contract::{Certainty, Violation},
        cri_analysis::MethodSummary,
        hook_latency::HookSummary,
        nri_analysis::NriRecord,
        trace_analysis::TraceRecord,
    },
    output::sanitize,
};

/// One record as text.
pub fn text(w: &mut impl Write, r: &TraceRecord) -> io::Result<()> {
    match r {
        TraceRecord::CriSpan(s) => {
            let span = &s.record;
            cri_lines::call_text(w, &span.call)?;
            for h in &span.hooks {
                let own = h
                    .own_ns
                    .map(nri_lines::human_ns)
                    .unwrap_or_else(|| "-".into());
                write!(
                    w,
                    "      NRI {:<28} {:<18} {:>10}  {}",
                    h.hook,
                    sanitize(&h.call.plugin.label()),
                    own,
                    nri_lines::outcome_text(&h.call.outcome)
                )?;
                if let Some(q) = h.queued_ns.filter(|q| *q > 0) {
                    write!(w, "  [queued {}]", nri_lines::human_ns(q))?;
                }
                writeln!(w)?;
            }
            if let Some(p) = span.nri_permille {
                writeln!(
                    w,
                    "      = {} in NRI hooks ({}.{}% of the call)",
                    nri_lines::human_ns(span.nri_ns),
                    p / 10,
                    p % 10
                )?;
            }
            Ok(())
        }
        TraceRecord::NriUncaused(u) => {
            nri_lines::text(w, &NriRecord::NriCall(u.record.span.clone()))
        }
        TraceRecord::Violation(v) => violation_text(w, &v.record, "!! "),
        TraceRecord::Nri(n) => nri_lines::text(w, n),
        TraceRecord::Cri(c) => cri_lines::text(w, c),
        TraceRecord::Sandbox(s) => writeln!(
            w,
            "{} ~~ {}",
            crate::output::clock(&s.record.ts),
            crate::output::sanitize(&s.record.describe())
        ),
        TraceRecord::Runtime(r) => {
            let what = if r.kind == "runtime_exited" {
                "exited"
            } else {
                "now serves the sockets (runtime restarted)"
            };
            writeln!(
                w,
                "{} == runtime pid {} {what}",
                crate::output::clock(&r.record.ts),
                r.record.pid
            )
        }
    }
}

/// A finding: `prefix`, severity, rule, pod, certainty, message; then its
/// evidence, one call a line.
pub fn violation_text(w: &mut impl Write, v: &Violation, prefix: &str) -> io::Result<()> {
    let certainty = match &v.certainty {
        Certainty::Certain => String::new(),
        Certainty::Uncertain { why } => format!(" (uncertain: {})", sanitize(why)),
    };
    writeln!(
        w,
        "{prefix}{:?} {} [{}]{}: {}",
        v.severity,
        v.rule,
        sanitize(v.pod.as_deref().unwrap_or("-")),
        certainty,
        sanitize(&v.message)
    )?;
    for e in &v.evidence {
        writeln!(
            w,
            "      evidence: {} {} on {} stream {}: {}",
            e.kind,
            sanitize(&e.what),
            e.conn,
            e.stream_id,
            sanitize(&e.outcome)
        )?;
    }
    Ok(())
}

/// One record as an NDJSON line.
pub fn ndjson(w: &mut impl Write, r: &TraceRecord) -> io::Result<()> {
    serde_json::to_writer(&mut *w, r).map_err(io::Error::other)?;
    writeln!(w)
}

/// Both tables, as text.
pub fn summary_text(
    w: &mut impl Write,
    hooks: &[HookSummary],
    methods: &[MethodSummary],
) -> io::Result<()> {
    cri_lines::summary_text(w, methods)?;
    writeln!(w)?;
    nri_lines::summary_text(w, hooks)
}

/// Both tables, as NDJSON lines.
pub fn summary_ndjson(
    w: &mut impl Write,
    hooks: &[HookSummary],
    methods: &[MethodSummary],
) -> io::Result<()> {
    cri_lines::summary_ndjson(w, methods)?;
    nri_lines::summary_ndjson(w, hooks)
}
