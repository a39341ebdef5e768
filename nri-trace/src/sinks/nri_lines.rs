//! NRI calls and plugin events as text lines, and the hook latency table.
//!
//! Text shows wire strings (pod names, error messages, process names)
//! through [`sanitize`]: captured bytes must not drive the terminal.

use crate::model::nri_call::{join_events, Event, NriMethod};
use std::io::{self, Write};

use crate::{
    basic_types::{ConnId, Timestamp},
    capture::Loss,
    engine::hook_latency::{Hook, HookSummary},
    human::{clock, sanitize},
    model::nri_call::{Caller, IdentitySource, NriCall, NriOutcome, NriVersions, PluginId},
};

/// A plugin's name for people: its `IDX-NAME` (or `comm[pid]`),
/// sanitized, with " (inferred)" when the name and index were worked out
/// from its process rather than read from its RegisterPlugin: it
/// registered before nri-trace started (docs/nri.md, "Plugins registered
/// before the attach"). JSON carries how, in `plugin.inferred`.
pub(crate) fn plugin_name(p: &PluginId) -> String {
    let label = sanitize(&p.label());
    match p.source {
        IdentitySource::Inferred => format!("{label} (inferred)"),
        _ => label,
    }
}

fn subject(c: &NriCall) -> String {
    let mut s = c.pod.as_ref().map(ToString::to_string).unwrap_or_default();
    if let Some(k) = &c.container {
        s.push('/');
        s.push_str(&k.to_string());
    }
    sanitize(&s)
}

/// An NRI outcome for people.
pub(crate) fn outcome_text(o: &NriOutcome) -> String {
    match o {
        NriOutcome::Ok => "ok".into(),
        NriOutcome::Error { code, message } => {
            format!("ERROR code {code}: {}", sanitize(message))
        }
        NriOutcome::TimedOut => "TIMED OUT (no response by its deadline)".into(),
        NriOutcome::ConnectionClosed => "CONNECTION CLOSED before a response".into(),
        NriOutcome::NoResponse => "no response yet (capture ended)".into(),
    }
}

/// An NRI call as the decoders made it (`debug nri`: no queueing, which
/// the engine works out), as a text line.
pub(crate) fn call_text(w: &mut impl Write, c: &NriCall) -> io::Result<()> {
    let hook = if c.partial {
        "(response only)".to_string()
    } else {
        Hook::of(c).to_string()
    };
    call_line(w, c, &hook, c.plugin_ns.or(c.duration_ns))?;
    if !c.summary.is_empty() {
        write!(w, "  {}", sanitize(&c.summary))?;
    }
    writeln!(w)
}

/// The line's start: when, direction, plugin, hook, subject, own time,
/// outcome, and the runtime's wait when the plugin's own time is known.
fn call_line(w: &mut impl Write, c: &NriCall, hook: &str, own_ns: Option<u64>) -> io::Result<()> {
    let when = c.start.or(c.end).map(|t| clock(&t)).unwrap_or_default();
    let arrow = match c.caller {
        Caller::Runtime => "->",
        Caller::Plugin => "<-",
    };
    // The plugin's own time when its end was captured, else the
    // runtime's wait.
    let dur = own_ns.map_or_else(|| "-".into(), crate::human::duration);
    write!(
        w,
        "{when} {arrow} {:<18} {:<28} {:<36} {:>10}  {}",
        plugin_name(&c.plugin),
        hook,
        subject(c),
        dur,
        if c.is_fallback_refusal() {
            // Not a failure: the StateChange of the same event follows.
            format!(
                "unimplemented {}: falls back to StateChange",
                sanitize(c.method.map_or("?", NriMethod::name))
            )
        } else {
            outcome_text(&c.outcome)
        }
    )?;
    if let (Some(d), Some(_)) = (c.duration_ns, c.plugin_ns) {
        write!(w, "  [runtime waited {}]", crate::human::duration(d))?;
    }
    Ok(())
}

/// A plugin connecting (or its identity or subscription learnt).
pub(crate) fn plugin_text(
    w: &mut impl Write,
    conn: ConnId,
    ts: &Timestamp,
    plugin: &PluginId,
    events: Option<&[Event]>,
    nri_version: &NriVersions,
) -> io::Result<()> {
    write!(
        w,
        "{} ** plugin {} on {conn} (identity from {:?}",
        clock(ts),
        plugin_name(plugin),
        plugin.source
    )?;
    if let Some(pid) = plugin.pid {
        write!(w, ", pid {pid}")?;
    }
    if let Some(v) = &nri_version.plugin {
        write!(w, ", NRI {}", sanitize(v))?;
    }
    if let Some(v) = &nri_version.runtime {
        write!(w, ", runtime's NRI {}", sanitize(v))?;
    }
    write!(w, ")")?;
    if let Some(e) = events {
        write!(w, " subscribed to {}", join_events(e, "|"))?;
    }
    writeln!(w)
}

/// A plugin's connection closed.
pub(crate) fn plugin_gone_text(
    w: &mut impl Write,
    conn: ConnId,
    ts: &Timestamp,
    plugin: &PluginId,
) -> io::Result<()> {
    writeln!(
        w,
        "{} ** plugin {} disconnected ({conn} closed)",
        clock(ts),
        plugin_name(plugin)
    )
}

/// The NRI decoder skipped bytes.
pub(crate) fn resync_text(
    w: &mut impl Write,
    conn: ConnId,
    ts: &Timestamp,
    mux_conn: u32,
    skipped: usize,
) -> io::Result<()> {
    writeln!(
        w,
        "{} ** {conn}: skipped {skipped} bytes to resynchronize ({})",
        clock(ts),
        if mux_conn == 0 {
            "multiplexer".to_string()
        } else {
            format!("ttrpc on mux conn {mux_conn}")
        }
    )
}

/// A teardown hook called and not answered yet.
pub(crate) fn pending_text(w: &mut impl Write, c: &NriCall) -> io::Result<()> {
    writeln!(
        w,
        "{} NRI -> {} {} called (teardown hook; its end follows)",
        c.start.map(|t| clock(&t)).unwrap_or_default(),
        plugin_name(&c.plugin),
        c.event.map_or("?", |e| e.as_str_name())
    )
}

/// Capture loss (cumulative counters).
pub(crate) fn loss_text(w: &mut impl Write, l: &Loss) -> io::Result<()> {
    writeln!(
        w,
        "!! capture loss: {} records ({} bytes) lost, {} read faults, {} fds untracked, {} sandbox records over the rate limit: calls may be missing",
        l.lost_records, l.lost_bytes, l.read_faults, l.fd_map_full, l.sandbox_suppressed
    )
}

/// The latency table, as text.
pub(crate) fn summary_text(w: &mut impl Write, s: &[HookSummary]) -> io::Result<()> {
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
            crate::human::duration(h.p50_ns),
            crate::human::duration(h.p90_ns),
            crate::human::duration(h.p99_ns),
            crate::human::duration(h.max_ns),
            crate::human::duration(h.runtime_p99_ns),
            crate::human::duration(h.queued_total_ns),
            h.last_minute.calls,
            crate::human::duration(h.last_minute.p99_ns)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(source: IdentitySource) -> PluginId {
        PluginId {
            name: Some("logger".into()),
            index: Some("10".into()),
            pid: Some(42),
            comm: Some("logger\x1b[2J".into()),
            source,
            inferred: None,
        }
    }

    /// A name worked out from the process says so; a registered one and
    /// a process name do not; control bytes never reach the terminal.
    #[test]
    fn an_inferred_plugin_name_is_marked() {
        assert_eq!(
            plugin_name(&plugin(IdentitySource::Inferred)),
            "10-logger (inferred)"
        );
        assert_eq!(
            plugin_name(&plugin(IdentitySource::RegisterPlugin)),
            "10-logger"
        );
        let mut by_process = plugin(IdentitySource::PeerProcess);
        by_process.name = None;
        let shown = plugin_name(&by_process);
        assert!(
            shown.starts_with("logger") && shown.ends_with("[42]"),
            "{shown}"
        );
        assert!(!shown.contains('\x1b'), "{shown}");
    }
}
