//! CRI calls and connection events as text lines, and the per-method
//! table. Wire strings go through [`sanitize`].

use std::io::{self, Write};

use crate::{
    basic_types::{ConnId, Timestamp},
    engine::cri_latency::MethodSummary,
    human::{clock, sanitize, short_id},
    model::{
        cri_call::{CriCall, CriMethod, CriOutcome, Identified, LOST_END_EVIDENCE},
        cri_client::CriClient,
    },
};

fn subject(c: &CriCall) -> String {
    let mut s = String::new();
    if let Some(p) = &c.pod {
        s = p.to_string();
        if p.attempt > 0 {
            s.push_str(&format!(" (attempt {})", p.attempt));
        }
    } else if let Some(id) = &c.sandbox_id {
        s = format!("sandbox {}", short_id(id));
    }
    if let Some(k) = &c.container {
        s.push_str(&format!("/{}", k.name));
    } else if let Some(id) = &c.container_id {
        s.push_str(&format!(" container {}", short_id(id)));
    }
    sanitize(&s)
}

pub(crate) fn outcome(c: &CriCall) -> String {
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
                .map(|d| format!(" after {}", crate::human::duration(d)))
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
        // Its connection lost bytes while it was open, then closed
        // (model::cri_call::LOST_END_EVIDENCE).
        CriOutcome::Unknown if c.outcome_evidence.as_deref() == Some(LOST_END_EVIDENCE) => {
            return "END LOST (capture loss): status unknown".into();
        }
        CriOutcome::Unknown => "status unknown (hidden by HPACK)".into(),
        CriOutcome::Failed => "FAILED, status hidden by HPACK (no response message)".into(),
    };
    if c.outcome_evidence.is_some() {
        s.push_str(" (inferred)");
    }
    s
}

/// Who a CRI client is, for a line: `comm[pid]`, then where it runs, its
/// systemd unit or else its cgroup (not the root, which says nothing):
/// `crictl[4242] (session-3.scope)`, `cri-driver[77] (/lab/drivers)`.
/// Sanitized: a comm is whatever the process chose, a cgroup name whatever
/// its maker did.
pub(crate) fn client_words(c: &CriClient) -> String {
    let place = c
        .unit
        .as_deref()
        .or_else(|| c.cgroup.as_deref().filter(|g| *g != "/"));
    match place {
        Some(p) => format!("{} ({})", sanitize(&c.label()), sanitize(p)),
        None => sanitize(&c.label()),
    }
}

/// One CRI call as a text line (with its newline).
pub(crate) fn call_text(w: &mut impl Write, c: &CriCall) -> io::Result<()> {
    let when = c.start.or(c.end).map(|t| clock(&t)).unwrap_or_default();
    let method = match (&c.method, &c.identified) {
        (Some(m), Identified::Known) => sanitize(m.name()),
        (Some(m), _) => format!("{}?", sanitize(m.name())),
        (None, Identified::Unknown { candidates }) if !candidates.is_empty() => {
            format!("({})", CriMethod::join(candidates, "|"))
        }
        (None, _) => "(unknown)".into(),
    };
    let dur = c
        .duration_ns
        .map_or_else(|| "-".into(), crate::human::duration);
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
    if let Some(client) = &c.client {
        write!(w, "  by {}", client_words(client))?;
    }
    writeln!(w)
}

/// A teardown call made, not answered yet (`debug cri`, `-o text` of a
/// record file's pending line).
pub(crate) fn pending_text(w: &mut impl Write, c: &CriCall) -> io::Result<()> {
    write!(
        w,
        "{} {:<24} {:<40} called (teardown; its end follows)",
        c.start.map(|t| clock(&t)).unwrap_or_default(),
        sanitize(c.method_name().unwrap_or("?")),
        subject(c),
    )?;
    if !c.summary.is_empty() {
        write!(w, "  {}", sanitize(&c.summary))?;
    }
    writeln!(w)
}

/// A CRI connection seen for the first time: its client as
/// [`client_words`] says it, or the label alone (a record file written
/// before the client was recorded whole).
pub(crate) fn connection_text(
    w: &mut impl Write,
    conn: ConnId,
    ts: &Timestamp,
    label: Option<&str>,
    client: Option<&CriClient>,
) -> io::Result<()> {
    let from = match (client, label) {
        (Some(c), _) => format!(" from {}", client_words(c)),
        (None, Some(l)) => format!(" from {}", sanitize(l)),
        (None, None) => String::new(),
    };
    writeln!(w, "{} ** CRI connection {conn}{from}", clock(ts))
}

/// A CRI connection closed.
pub(crate) fn connection_gone_text(
    w: &mut impl Write,
    conn: ConnId,
    ts: &Timestamp,
    label: Option<&str>,
) -> io::Result<()> {
    let of = label
        .map(|l| format!(" of {}", sanitize(l)))
        .unwrap_or_default();
    writeln!(w, "{} ** CRI connection {conn}{of} closed", clock(ts))
}

/// The CRI decoder skipped bytes.
pub(crate) fn resync_text(
    w: &mut impl Write,
    conn: ConnId,
    ts: &Timestamp,
    skipped: usize,
) -> io::Result<()> {
    writeln!(
        w,
        "{} ** {conn}: skipped {skipped} bytes to find an HTTP/2 frame",
        clock(ts)
    )
}

/// The per-method table, as text.
pub(crate) fn summary_text(w: &mut impl Write, s: &[MethodSummary]) -> io::Result<()> {
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
            crate::human::duration(m.p50_ns),
            crate::human::duration(m.p90_ns),
            crate::human::duration(m.p99_ns),
            crate::human::duration(m.max_ns),
            m.last_minute.calls,
            crate::human::duration(m.last_minute.p99_ns)
        )?;
    }
    Ok(())
}
