//! `nri-trace cri` output: one line per [`CriRecord`], as text for a
//! terminal or as NDJSON for pipelines, and the per-method table at the end.
//! Wire strings go through [`sanitize`].

use std::io::{self, Write};

use super::nri_lines::human_ns;
use crate::{
    engine::cri_analysis::{CriRecord, MethodSummary},
    model::cri_call::{CriCall, CriOutcome, Identified},
    output::{clock, sanitize},
};

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

fn subject(c: &CriCall) -> String {
    let mut s = String::new();
    if let Some(p) = &c.pod {
        s = format!("{}/{}", p.namespace, p.name);
        if p.attempt > 0 {
            s.push_str(&format!(" (attempt {})", p.attempt));
        }
    } else if let Some(id) = &c.sandbox_id {
        s = format!("sandbox {}", short(id));
    }
    if let Some(k) = &c.container {
        s.push_str(&format!("/{}", k.name));
    } else if let Some(id) = &c.container_id {
        s.push_str(&format!(" container {}", short(id)));
    }
    sanitize(&s)
}

fn outcome(c: &CriCall) -> String {
    let mut s = match &c.outcome {
        CriOutcome::Ok => "ok".to_string(),
        CriOutcome::Error {
            code,
            status,
            message,
        } => format!("{status} ({code}): {}", sanitize(message)),
        CriOutcome::DeadlineExceeded => format!(
            "CLIENT DEADLINE EXCEEDED{}",
            c.deadline_ns
                .map(|d| format!(" after {}", human_ns(d)))
                .unwrap_or_default()
        ),
        CriOutcome::Cancelled => "CANCELLED by the client".into(),
        CriOutcome::Reset {
            by,
            error_code,
            error,
        } => format!("RESET by the {by}: {error} ({error_code})"),
        CriOutcome::ConnectionClosed => "CONNECTION CLOSED before the end".into(),
        CriOutcome::NoResponse => "no response yet (capture ended)".into(),
        CriOutcome::Unknown => "status unknown (hidden by HPACK)".into(),
    };
    if c.outcome_evidence.is_some() {
        s.push_str(" (inferred)");
    }
    s
}

/// One CRI call as a text line (with its newline).
pub fn call_text(w: &mut impl Write, c: &CriCall) -> io::Result<()> {
    let when = c.start.or(c.end).map(|t| clock(&t)).unwrap_or_default();
    let method = match (&c.method, &c.identified) {
        (Some(m), Identified::Known) => sanitize(m),
        (Some(m), _) => format!("{}?", sanitize(m)),
        (None, Identified::Unknown { candidates }) if !candidates.is_empty() => {
            format!("({})", candidates.join("|"))
        }
        (None, _) => "(unknown)".into(),
    };
    let dur = c.duration_ns.map(human_ns).unwrap_or_else(|| "-".into());
    write!(
        w,
        "{when} {:<24} {:<40} {:>10}  {}",
        method,
        subject(c),
        dur,
        outcome(c)
    )?;
    if c.partial {
        write!(w, "  [began before the trace]")?;
    }
    if !c.summary.is_empty() {
        write!(w, "  {}", sanitize(&c.summary))?;
    }
    if let Identified::Inferred { evidence } = &c.identified {
        write!(w, "  [inferred: {}]", sanitize(evidence))?;
    }
    writeln!(w)
}

/// One record as a text line.
pub fn text(w: &mut impl Write, r: &CriRecord) -> io::Result<()> {
    match r {
        CriRecord::CriCall(c) => call_text(w, c),
        CriRecord::CriConnection { conn, ts, client } => writeln!(
            w,
            "{} ** CRI connection {conn}{}",
            clock(ts),
            client
                .as_ref()
                .map(|c| format!(" from {}", sanitize(c)))
                .unwrap_or_default()
        ),
        CriRecord::CriResync { conn, ts, skipped } => writeln!(
            w,
            "{} ** {conn}: skipped {skipped} bytes to find an HTTP/2 frame",
            clock(ts)
        ),
        CriRecord::CaptureLoss(l) => writeln!(
            w,
            "!! capture loss: {} records ({} bytes) lost, {} read faults, {} fds untracked: calls may be missing",
            l.lost_records, l.lost_bytes, l.read_faults, l.fd_map_full
        ),
    }
}

/// One record as an NDJSON line.
pub fn ndjson(w: &mut impl Write, r: &CriRecord) -> io::Result<()> {
    serde_json::to_writer(&mut *w, r).map_err(io::Error::other)?;
    writeln!(w)
}

/// The per-method table, as text.
pub fn summary_text(w: &mut impl Write, s: &[MethodSummary]) -> io::Result<()> {
    if s.is_empty() {
        return writeln!(w, "no CRI calls seen");
    }
    writeln!(
        w,
        "{:<26} {:>6} {:>6} {:>8} {:>7} {:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10}",
        "METHOD",
        "CALLS",
        "KNOWN",
        "INFERRED",
        "UNKNOWN",
        "ERRORS",
        "CANCELLED",
        "P50",
        "P90",
        "P99",
        "MAX",
        "1M CALLS",
        "1M P99"
    )?;
    for m in s {
        writeln!(
            w,
            "{:<26} {:>6} {:>6} {:>8} {:>7} {:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10}",
            sanitize(&m.method),
            m.calls,
            m.known,
            m.inferred,
            m.unknown,
            m.errors,
            m.cancelled,
            human_ns(m.p50_ns),
            human_ns(m.p90_ns),
            human_ns(m.p99_ns),
            human_ns(m.max_ns),
            m.last_minute.calls,
            human_ns(m.last_minute.p99_ns)
        )?;
    }
    Ok(())
}

/// The per-method table, as NDJSON lines `{"type":"cri_method_summary",...}`.
pub fn summary_ndjson(w: &mut impl Write, s: &[MethodSummary]) -> io::Result<()> {
    for m in s {
        let mut v = serde_json::to_value(m).map_err(io::Error::other)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("type".into(), "cri_method_summary".into());
        }
        serde_json::to_writer(&mut *w, &v).map_err(io::Error::other)?;
        writeln!(w)?;
    }
    Ok(())
}
