//! `nri-trace trace` output: each CRI call with the NRI hooks it caused
//! indented under it, NRI calls with no CRI cause, and both tables at the
//! end; text or NDJSON.

use std::io::{self, Write};

use super::{cri_lines, nri_lines};
use crate::{
    engine::{
        cri_analysis::{CriRecord, MethodSummary},
        findings::{Certainty, Violation},
        hook_latency::HookSummary,
        nri_analysis::NriRecord,
        record::Record,
    },
    model::observation::Observation,
    output::sanitize,
};

/// One record as text.
pub fn text(w: &mut impl Write, r: &Record) -> io::Result<()> {
    match r {
        Record::CriSpan(span) => {
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
        Record::NriUncaused(u) => nri_lines::text(w, &NriRecord::NriCall(u.span.clone())),
        Record::Violation(v) => violation_text(w, v, "!! "),
        Record::Observed(o) => observation_text(w, o),
    }
}

/// An observation the engine passed on, as text.
fn observation_text(w: &mut impl Write, o: &Observation) -> io::Result<()> {
    use crate::output::clock;
    match o {
        Observation::Sandbox(s) => writeln!(w, "{} ~~ {}", clock(&s.ts), sanitize(&s.describe())),
        Observation::RuntimeExited { ts, pid } => {
            writeln!(w, "{} == runtime pid {pid} exited", clock(ts))
        }
        Observation::RuntimeStarted { ts, pid } => writeln!(
            w,
            "{} == runtime pid {pid} now serves the sockets (runtime restarted)",
            clock(ts)
        ),
        Observation::CriConnection { conn, ts, client } => cri_lines::text(
            w,
            &CriRecord::CriConnection {
                conn: *conn,
                ts: *ts,
                client: client.clone(),
            },
        ),
        Observation::CriResync { conn, ts, skipped } => cri_lines::text(
            w,
            &CriRecord::CriResync {
                conn: *conn,
                ts: *ts,
                skipped: *skipped,
            },
        ),
        Observation::NriPlugin {
            conn,
            ts,
            plugin,
            events,
        } => nri_lines::text(
            w,
            &NriRecord::NriPlugin {
                conn: *conn,
                ts: *ts,
                plugin: plugin.clone(),
                events: events.clone(),
            },
        ),
        Observation::NriPluginGone { conn, ts, plugin } => nri_lines::text(
            w,
            &NriRecord::NriPluginGone {
                conn: *conn,
                ts: *ts,
                plugin: plugin.clone(),
            },
        ),
        Observation::NriResync {
            conn,
            ts,
            mux_conn,
            skipped,
        } => nri_lines::text(
            w,
            &NriRecord::NriResync {
                conn: *conn,
                ts: *ts,
                mux_conn: *mux_conn,
                skipped: *skipped,
            },
        ),
        Observation::CaptureLoss(l) => nri_lines::text(w, &NriRecord::CaptureLoss(*l)),
        Observation::NriPending(c) => nri_lines::text(w, &NriRecord::NriPending(c.clone())),
        // Not passed on by the engine.
        Observation::CriCall(_) | Observation::NriCall(_) | Observation::Clock { .. } => Ok(()),
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
pub fn ndjson(w: &mut impl Write, r: &Record) -> io::Result<()> {
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
