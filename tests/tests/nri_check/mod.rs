//! Checks nri-trace's NRI records against the lab's ground truth: what each
//! test plugin recorded, at the moment it acted, as received and answered.
//! Shared by the live lab tests (trace_lab/ on every runtime, nri_lab.rs's
//! split Synchronize) and the replay of committed recordings
//! (nri_replay.rs).
#![allow(dead_code)]

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use nri_trace::{
    capture::{CaptureEvent, ConnId},
    engine::{HookSpan, Record},
    model::{NriCall, NriOutcome},
    pipeline::{
        replay::{records_of_events_in, Collected},
        session_of_events,
    },
    store::raw_capture,
};
use nri_trace_lab::truth::{self, Action, Truth};

/// Hook durations must agree with the plugin's own handler time this well
/// (issue 4).
pub(crate) const DURATION_TOLERANCE_NS: u64 = 1_000_000;

/// See `compare`: how long after the capture began following a plugin's end
/// a call may still have begun before it. A call's start is its request's
/// last byte, and a large request's first bytes come that much earlier: CI
/// (ci24, nri_lab split-synchronize on containerd 2.3) followed 20-stale's
/// end 37 ms after its accept (the reader behind on the first plugin's
/// split Synchronize) and 5.5 ms before the plugin had read its 4 MB
/// Synchronize part, which the followed end therefore caught mid-message.
pub(crate) const FOLLOW_MARGIN_NS: u64 = 20_000_000;

/// See `compare`: how far two stamps of one byte's passage may be out of
/// order. The runtime's write is stamped at its syscall's exit, after the
/// data is queued, and the plugin on the other CPU may read it first; the
/// plugin stamps its reply after its write returned, and the runtime may
/// read it first. An interrupt on either side widens that.
pub(crate) const STAMP_SLACK_NS: u64 = 1_000_000;

/// The capture events of a recording (plain or gzip).
pub(crate) fn read_recording(rec: &Path) -> Vec<CaptureEvent> {
    raw_capture::read_file(rec)
        .unwrap_or_else(|e| panic!("reading recording {}: {e}", rec.display()))
}

/// Recorded events through the pipeline, as `nri-trace replay` runs a raw
/// capture, with `nri_socket` as the runtime's NRI socket.
pub(crate) fn replay(events: &[CaptureEvent], nri_socket: &Path) -> Collected {
    let mut session = session_of_events(events);
    session.nri_socket = nri_socket.display().to_string();
    records_of_events_in(events, &session, Default::default())
}

/// Every NRI call the records hold, with its hook timing (under the CRI
/// call that caused it, or without a cause).
pub(crate) fn hooks(records: &[Record]) -> Vec<&HookSpan> {
    records.iter().flat_map(Record::hooks).collect()
}

/// When the capture began following the plugin's end of each runtime-side
/// connection (the peer end's Open): calls that started before cannot have
/// a plugin time. A connection whose peer nri-trace never found (its Open
/// says `peer: null`: the runtime had closed its fd before the session's
/// pidfd_getfd + SO_PEERCRED looked, docs/capture.md) is never followed:
/// all its calls count as begun before. So is one that closed within
/// [`SHORT_LIVED_NS`] of its Open with its peer end never followed: the
/// follow scans the peer's /proc/PID/fd once the accept is read (1.4 ms
/// after it for 10-late in the same run), and a plugin that lived 48 ms
/// while the reader drained the split Synchronize before it was gone by
/// then (nri_lab on containerd 2.3, 2026-11-28: 20-stale, whose
/// Synchronize answer made the runtime close it). A long-lived
/// connection never followed stays a problem: its calls need a plugin
/// time.
pub(crate) fn plugin_end_since(events: &[CaptureEvent]) -> HashMap<ConnId, u64> {
    let mut since = HashMap::new();
    let mut runtime_side = HashMap::new();
    let mut closed = HashMap::new();
    for e in events {
        match e {
            CaptureEvent::Open(o) => match o.other_end {
                Some(c) => {
                    since.insert(c, o.ts.mono_ns);
                }
                None if o.peer.is_none() => {
                    since.insert(o.conn, NEVER_FOLLOWED);
                }
                None => {
                    runtime_side.insert(o.conn, o.ts.mono_ns);
                }
            },
            CaptureEvent::Close(c) => {
                closed.insert(c.conn, c.ts.mono_ns);
            }
            _ => {}
        }
    }
    for (conn, opened) in runtime_side {
        let short_lived = closed
            .get(&conn)
            .is_some_and(|&c| c.saturating_sub(opened) < SHORT_LIVED_NS);
        if short_lived {
            since.entry(conn).or_insert(NEVER_FOLLOWED);
        }
    }
    since
}

/// See [`plugin_end_since`].
const SHORT_LIVED_NS: u64 = 1_000_000_000;

/// [`plugin_end_since`] of a connection never followed.
const NEVER_FOLLOWED: u64 = u64::MAX / 2;

/// The NRI calls among the records.
pub(crate) fn calls(records: &[Record]) -> Vec<&NriCall> {
    hooks(records).into_iter().map(|h| &h.call).collect()
}

/// What a comparison found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Truth records compared (plugin deliveries after the attach).
    pub compared: usize,
    pub matched: usize,
    /// Largest |nri-trace duration - plugin handler time|.
    pub max_duration_diff_ns: u64,
    /// Deliveries timed from the runtime's side only (they started before
    /// the plugin's end was followed, or its reply came late: below).
    pub runtime_side_only: usize,
    /// Of those, deliveries on a plugin end the capture follows (other
    /// deliveries on it have plugin time) whose reply was not paired: the
    /// NRI stage lets the capture move PLUGIN_REPLY_WAIT_NS (5 ms,
    /// assemble/nri/) past the runtime's read of the reply before it
    /// gives up on the plugin's write, and a plugin
    /// thread descheduled inside its write longer than that (a busy
    /// machine: stop 39's CI-like run, builds beside the lab) is stamped
    /// later. Its runtime-side wait must still enclose the handler.
    pub late_plugin_reply: usize,
    /// Largest (runtime's wait - plugin handler time) of those: the time
    /// the request and the response spent between the two processes.
    pub max_runtime_side_excess_ns: u64,
    /// Every |nri-trace plugin time - plugin handler time|, for the record.
    pub duration_diffs_ns: Vec<u64>,
    pub problems: Vec<String>,
    /// Deliveries not decoded (or not timed) that a counted loss covers:
    /// what went wrong with each, for the record (not problems: the issue
    /// asks that every delivery be decoded *or* the gap that lost it be
    /// counted and said).
    pub lost: Vec<String>,
}

/// How far a delivery may sit outside a hole and still be one it took: the
/// runtime's write is stamped at its exit (see [`STAMP_SLACK_NS`]) and the
/// hole's ends are the first and last drop, on any CPU.
pub(crate) const HOLE_MARGIN_NS: u64 = 100_000_000;

fn in_hole(holes: &[(u64, u64)], recv: u64, reply: Option<u64>) -> bool {
    let end = reply.unwrap_or(recv);
    holes.iter().any(|&(from, to)| {
        from.saturating_sub(HOLE_MARGIN_NS) <= end && recv <= to.saturating_add(HOLE_MARGIN_NS)
    })
}

fn outcome_matches(truth_outcome: &truth::Outcome, action: &Action, got: &NriOutcome) -> bool {
    match (action, truth_outcome, got) {
        (Action::Hang, _, NriOutcome::TimedOut) => true,
        (Action::Crash, _, NriOutcome::ConnectionClosed) => true,
        (Action::Hang | Action::Crash, _, _) => false,
        (_, truth::Outcome::Ok, NriOutcome::Ok) => true,
        (_, truth::Outcome::Error { message, .. }, NriOutcome::Error { message: m, .. }) => {
            m.contains(message.as_str())
        }
        _ => false,
    }
}

/// Every delivery a test plugin recorded after `since` must appear among
/// `calls` with the right plugin, method, event, pod, container and
/// outcome, and (when it answered) a duration within
/// [`DURATION_TOLERANCE_NS`] of its handler time.
///
/// The plugin's own time (`plugin_ns`, from the plugin's end of the
/// connection) is what is compared. A call that started before the capture
/// followed the plugin's end (`plugin_end_since`) has no plugin time: what
/// nri-trace reports for it is the runtime's wait (`duration_ns`), which
/// also holds the request's and the response's way between the processes
/// (a plugin descheduled after its handler returned adds milliseconds on a
/// loaded machine; CI saw 1.0 and 1.25 ms). That wait must enclose the
/// handler: the request stamped before the plugin received it and the
/// response after the plugin replied (both within [`STAMP_SLACK_NS`]).
/// Those stamps are nri-trace's, the receipt and reply the plugin's own
/// clock readings, so a wrong pairing or a wrong stamp fails.
///
/// A delivery the capture's counted losses cover (`holes`, from
/// `trace_check::holes`) that fails any of this is [`Report::lost`], not a
/// problem.
pub(crate) fn compare(
    truth: &[Truth],
    calls: &[&NriCall],
    since: u64,
    plugin_end_since: &HashMap<ConnId, u64>,
    holes: &[(u64, u64)],
) -> Report {
    let mut r = Report::default();
    let mut used = vec![false; calls.len()];
    // Plugin ends the capture follows: some call on it has plugin time.
    let timed_conns: std::collections::HashSet<ConnId> = calls
        .iter()
        .filter(|c| c.plugin_ns.is_some())
        .map(|c| c.conn)
        .collect();
    // The previous delivery's problems so far and whether a hole covers it.
    let mut prev: Option<(usize, bool)> = None;
    let settle = |r: &mut Report, prev: Option<(usize, bool)>| {
        if let Some((before, true)) = prev {
            let taken: Vec<String> = r.problems.drain(before..).collect();
            r.lost.extend(taken);
        }
    };
    for t in truth {
        settle(&mut r, prev.take());
        let Truth::Nri {
            plugin,
            index,
            method,
            event,
            pod,
            container,
            recv_mono_ns,
            reply_mono_ns,
            action,
            outcome,
        } = t
        else {
            continue;
        };
        if *recv_mono_ns < since {
            continue;
        }
        r.compared += 1;
        prev = Some((
            r.problems.len(),
            in_hole(holes, *recv_mono_ns, *reply_mono_ns),
        ));
        let label = format!("{index}-{plugin}");
        let candidates = calls.iter().enumerate().filter(|(i, c)| {
            !used[*i]
                && c.plugin.label() == label
                && c.method_name() == Some(method.as_str())
                && c.event.map(|e| e.as_str_name()) == event.as_deref()
                && c.pod.as_ref().map(|p| p.id.as_str()) == pod.as_ref().map(|p| p.id.as_str())
                && c.container.as_ref().map(|k| k.id.as_str())
                    == container.as_ref().map(|k| k.id.as_str())
        });
        // The candidate whose start is nearest the plugin's receive time.
        let best = candidates.min_by_key(|(_, c)| {
            c.start
                .map_or(u64::MAX, |s| s.mono_ns.abs_diff(*recv_mono_ns))
        });
        let what = format!(
            "{label} {method} {} pod {:?} container {:?} at {recv_mono_ns}",
            event.as_deref().unwrap_or("-"),
            pod.as_ref().map(|p| &p.name),
            container.as_ref().map(|k| &k.name)
        );
        let Some((i, c)) = best else {
            r.problems.push(format!("missing: {what}"));
            continue;
        };
        used[i] = true;
        if !outcome_matches(outcome, action, &c.outcome) {
            r.problems.push(format!(
                "outcome of {what}: truth {outcome:?} (action {action:?}), nri-trace {:?}",
                c.outcome
            ));
            continue;
        }
        // The plugin's own time as nri-trace saw it from the plugin's end
        // of the connection; the runtime's wait (duration_ns) is checked to
        // enclose it.
        // A call's start is its request's *last* byte; its first bytes (the
        // mux header is a separate write) may precede the moment the capture
        // began following the plugin's end, so the plugin end may have
        // missed them: calls starting up to FOLLOW_MARGIN_NS after that
        // moment count as begun before it.
        let before_follow = c.start.is_some_and(|s| {
            plugin_end_since
                .get(&c.conn)
                .is_some_and(|&f| s.mono_ns < f + FOLLOW_MARGIN_NS)
        });
        let late_reply = !before_follow && c.plugin_ns.is_none() && timed_conns.contains(&c.conn);
        if late_reply {
            r.late_plugin_reply += 1;
        }
        let runtime_side = (before_follow || late_reply) && c.plugin_ns.is_none();
        let own = if runtime_side {
            r.runtime_side_only += 1;
            c.duration_ns
        } else {
            c.plugin_ns
        };
        if let (Some(reply), Some(d)) = (reply_mono_ns, own) {
            // The right request paired with the right reply: the runtime
            // read the reply after the plugin's handler got the request.
            // Not "the runtime's wait encloses the plugin's time": both are
            // stamped at syscall exits, and a thread descheduled inside its
            // write (the runtime's request, 1.4 ms; the plugin's reply,
            // 0.4-1.8 ms, under load on 2026-11-28) moves its stamp past
            // what the other side already did.
            if c.end
                .is_some_and(|e| e.mono_ns + STAMP_SLACK_NS < *recv_mono_ns)
            {
                r.problems.push(format!(
                    "{what}: the runtime read the reply at {:?} ns, before the plugin got the \
                     request at {recv_mono_ns} ns",
                    c.end.map(|e| e.mono_ns)
                ));
                continue;
            }
            let handler = reply.saturating_sub(*recv_mono_ns);
            if runtime_side {
                let (Some(start), Some(end)) = (c.start, c.end) else {
                    r.problems
                        .push(format!("{what}: a runtime wait without start and end"));
                    continue;
                };
                // A late reply is one whose plugin thread was descheduled
                // after its write: the plugin's own stamp of the reply (the
                // truth's) is as late, so only the request's side bounds.
                let reply_bound = if late_reply { *recv_mono_ns } else { *reply };
                if start.mono_ns > recv_mono_ns + STAMP_SLACK_NS
                    || end.mono_ns + STAMP_SLACK_NS < reply_bound
                {
                    r.problems.push(format!(
                        "{what}: the runtime's wait {} - {} ns does not enclose the plugin's \
                         handler {recv_mono_ns} - {reply} ns",
                        start.mono_ns, end.mono_ns
                    ));
                    continue;
                }
                r.max_runtime_side_excess_ns =
                    r.max_runtime_side_excess_ns.max(d.saturating_sub(handler));
                r.matched += 1;
                continue;
            }
            let diff = d.abs_diff(handler);
            r.max_duration_diff_ns = r.max_duration_diff_ns.max(diff);
            r.duration_diffs_ns.push(diff);
            if diff > DURATION_TOLERANCE_NS {
                // Where the difference sits: runtime write -> plugin read,
                // and plugin write -> runtime read.
                let to_plugin = c.start.map(|s| *recv_mono_ns as i64 - s.mono_ns as i64);
                let back = c.end.map(|e| e.mono_ns as i64 - *reply as i64);
                r.problems.push(format!(
                    "plugin time of {what}: nri-trace {d} ns, plugin handler {handler} ns \
                     (request reached the plugin after {to_plugin:?} ns, response the \
                     runtime after {back:?} ns)"
                ));
                continue;
            }
        } else if reply_mono_ns.is_some() {
            r.problems.push(format!(
                "{what}: no plugin time (the plugin's end of the connection was not captured)"
            ));
            continue;
        }
        r.matched += 1;
    }
    settle(&mut r, prev);
    r
}

/// Every delivery the test plugins recorded after the observer attached
/// (the truth's attach note) is among `records` as they recorded it
/// ([`compare`]; `events` is the raw capture the records came from, for
/// when the capture began following each plugin's end). Prints the
/// figures; fails on any problem. The report.
pub(crate) fn assert_every_delivery(
    scenario: &str,
    truth: &[Truth],
    records: &[Record],
    events: &[CaptureEvent],
) -> Report {
    let since = truth::observer_attached_ns(truth).expect("attach note in the truth");
    let calls = calls(records);
    let (lost_records, holes) = super::trace_check::holes(events);
    let report = compare(truth, &calls, since, &plugin_end_since(events), &holes);
    eprintln!(
        "{scenario}: {} NRI calls decoded; {}/{} plugin deliveries matched; \
         |plugin time - handler| p50/p90/p99/max {} µs; {} timed from the runtime side only \
         ({} of them for a late plugin reply; their wait exceeds the handler by at most {} µs)",
        calls.len(),
        report.matched,
        report.compared,
        report.diff_quantiles_us(),
        report.runtime_side_only,
        report.late_plugin_reply,
        report.max_runtime_side_excess_ns / 1000
    );
    if !report.lost.is_empty() {
        eprintln!(
            "{scenario}: {} deliveries in the capture's counted losses ({lost_records} records \
             lost, holes {holes:?}):\n{}",
            report.lost.len(),
            report.lost.join("\n")
        );
    }
    assert!(report.compared > 0, "{scenario}: no truth to compare");
    assert!(
        report.problems.is_empty(),
        "{scenario}: {} problems:\n{}",
        report.problems.len(),
        report.problems.join("\n")
    );
    assert_eq!(
        report.matched + report.lost.len(),
        report.compared,
        "{scenario}"
    );
    report
}

impl Report {
    /// "p50 / p90 / p99 / max" of the duration differences, in µs.
    pub(crate) fn diff_quantiles_us(&self) -> String {
        let mut d = self.duration_diffs_ns.clone();
        if d.is_empty() {
            return "-".into();
        }
        d.sort_unstable();
        let q = |p: f64| d[((d.len() - 1) as f64 * p).round() as usize] / 1000;
        format!("{} / {} / {} / {}", q(0.5), q(0.9), q(0.99), q(1.0))
    }
}

/// Committed fixtures: `tests/fixtures/nri/<scenario>/`.
pub(crate) fn fixture_dir(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/nri")
        .join(scenario)
}
