//! `nri-trace nri` output: one line per [`NriRecord`], as text for a
//! terminal or as NDJSON for pipelines, and the latency table at the end.
//!
//! Text shows wire strings (pod names, error messages, process names)
//! through [`sanitize`]: captured bytes must not drive the terminal.

use std::io::{self, Write};

use crate::{
    engine::{hook_latency::HookSummary, nri_analysis::NriRecord},
    model::nri_call::{Caller, NriCall, Outcome},
    output::{clock, sanitize},
};

/// Version of the NDJSON records of `nri-trace nri` (docs/nri.md).
pub const NRI_SCHEMA_VERSION: u32 = 1;

/// A duration for people: "412µs", "1.234ms", "2.001s".
pub fn human_ns(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{}µs", ns / 1000)
    } else if ns < 1_000_000_000 {
        format!("{:.3}ms", ns as f64 / 1e6)
    } else {
        format!("{:.3}s", ns as f64 / 1e9)
    }
}

fn subject(c: &NriCall) -> String {
    let mut s = String::new();
    if let Some(p) = &c.pod {
        s = if p.namespace.is_empty() {
            p.name.clone()
        } else {
            format!("{}/{}", p.namespace, p.name)
        };
    }
    if let Some(k) = &c.container {
        s.push('/');
        s.push_str(&k.name);
    }
    sanitize(&s)
}

/// An NRI outcome for people.
pub fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Ok => "ok".into(),
        Outcome::Error { code, message } => {
            format!("ERROR code {code}: {}", sanitize(message))
        }
        Outcome::TimedOut => "TIMED OUT (no response by its deadline)".into(),
        Outcome::ConnectionClosed => "CONNECTION CLOSED before a response".into(),
        Outcome::NoResponse => "no response yet (capture ended)".into(),
    }
}

/// One record as a text line.
pub fn text(w: &mut impl Write, r: &NriRecord) -> io::Result<()> {
    match r {
        NriRecord::NriCall(span) => {
            let c = &span.call;
            let when = c.start.or(c.end).map(|t| clock(&t)).unwrap_or_default();
            let arrow = match c.caller {
                Caller::Runtime => "->",
                Caller::Plugin => "<-",
            };
            let hook = if c.partial {
                "(response only)".to_string()
            } else {
                span.hook.clone()
            };
            // The plugin's own time when its end was captured, else the
            // runtime's wait.
            let dur = span.own_ns.map(human_ns).unwrap_or_else(|| "-".into());
            write!(
                w,
                "{when} {arrow} {:<18} {:<28} {:<36} {:>10}  {}",
                sanitize(&c.plugin.label()),
                hook,
                subject(c),
                dur,
                outcome_text(&c.outcome)
            )?;
            if let (Some(d), Some(_)) = (c.duration_ns, c.plugin_ns) {
                write!(w, "  [runtime waited {}]", human_ns(d))?;
            }
            if let Some(q) = span.queued_ns.filter(|q| *q > 0) {
                write!(
                    w,
                    "  [queued {} behind {}]",
                    human_ns(q),
                    sanitize(&span.queued_behind.join(", "))
                )?;
            }
            if !c.summary.is_empty() {
                write!(w, "  {}", sanitize(&c.summary))?;
            }
            writeln!(w)
        }
        NriRecord::NriPlugin {
            conn,
            ts,
            plugin,
            events,
        } => {
            write!(
                w,
                "{} ** plugin {} on {conn} (identity from {:?}",
                clock(ts),
                sanitize(&plugin.label()),
                plugin.source
            )?;
            if let Some(pid) = plugin.pid {
                write!(w, ", pid {pid}")?;
            }
            write!(w, ")")?;
            if let Some(e) = events {
                write!(w, " subscribed to {}", e.join("|"))?;
            }
            writeln!(w)
        }
        NriRecord::NriPluginGone { conn, ts, plugin } => writeln!(
            w,
            "{} ** plugin {} disconnected ({conn} closed)",
            clock(ts),
            sanitize(&plugin.label())
        ),
        NriRecord::NriResync {
            conn,
            ts,
            mux_conn,
            skipped,
        } => writeln!(
            w,
            "{} ** {conn}: skipped {skipped} bytes to resynchronize ({})",
            clock(ts),
            if *mux_conn == 0 {
                "multiplexer".to_string()
            } else {
                format!("ttrpc on mux conn {mux_conn}")
            }
        ),
        NriRecord::CaptureLoss(l) => writeln!(
            w,
            "!! capture loss: {} records ({} bytes) lost, {} read faults, {} fds untracked, {} sandbox records over the rate limit: calls may be missing",
            l.lost_records, l.lost_bytes, l.read_faults, l.fd_map_full, l.sandbox_suppressed
        ),
        NriRecord::NriPending(c) => writeln!(
            w,
            "{} NRI -> {} {} called (teardown hook; its end follows)",
            c.start.map(|t| clock(&t)).unwrap_or_default(),
            sanitize(&c.plugin.label()),
            c.event.map(|e| e.as_str_name()).unwrap_or("?")
        ),
    }
}

/// One record as an NDJSON line.
pub fn ndjson(w: &mut impl Write, r: &NriRecord) -> io::Result<()> {
    serde_json::to_writer(&mut *w, r).map_err(io::Error::other)?;
    writeln!(w)
}

/// The latency table, as text.
pub fn summary_text(w: &mut impl Write, s: &[HookSummary]) -> io::Result<()> {
    if s.is_empty() {
        return writeln!(w, "no NRI calls seen");
    }
    writeln!(
        w,
        "{:<18} {:<28} {:>6} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>8} {:>10}",
        "PLUGIN",
        "HOOK",
        "CALLS",
        "ERRORS",
        "TIMEOUTS",
        "P50",
        "P90",
        "P99",
        "MAX",
        "RUNTIME P99",
        "QUEUED",
        "1M CALLS",
        "1M P99"
    )?;
    for h in s {
        writeln!(
            w,
            "{:<18} {:<28} {:>6} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>8} {:>10}",
            sanitize(&h.plugin),
            h.hook,
            h.calls,
            h.errors,
            h.timeouts,
            human_ns(h.p50_ns),
            human_ns(h.p90_ns),
            human_ns(h.p99_ns),
            human_ns(h.max_ns),
            human_ns(h.runtime_p99_ns),
            human_ns(h.queued_total_ns),
            h.last_minute.calls,
            human_ns(h.last_minute.p99_ns)
        )?;
    }
    Ok(())
}

/// The latency table, as NDJSON lines `{"type":"hook_summary",...}`.
pub fn summary_ndjson(w: &mut impl Write, s: &[HookSummary]) -> io::Result<()> {
    for h in s {
        let mut v = serde_json::to_value(h).map_err(io::Error::other)?;
        if let Some(m) = v.as_object_mut() {
            m.insert("type".into(), "hook_summary".into());
        }
        serde_json::to_writer(&mut *w, &v).map_err(io::Error::other)?;
        writeln!(w)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(human_ns(412_000), "412µs");
        assert_eq!(human_ns(1_234_000), "1.234ms");
        assert_eq!(human_ns(2_001_000_000), "2.001s");
    }
}
