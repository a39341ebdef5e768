//! Replays committed recordings of `nri-trace watch` on the lab (the real
//! containerd's CRI and NRI sockets with the lab's plugins and driver,
//! captured by the probes) and checks the correlation and the contract
//! findings against the truth the actors wrote. No root needed.
//!
//! Fixtures: `tests/fixtures/trace/<scenario>/{recording,truth}.ndjson.gz`,
//! made by tests/tests/trace_lab/ (target/tmp/trace-lab/<scenario>).

use crate::cri_check;
use crate::replay_util;
use crate::trace_check;
use crate::truth_file;

use std::path::Path;

use nri_trace::{
    capture::CaptureEvent,
    engine::Record,
    model::{CriOutcome, Observation},
    pipeline::replay::records_of_events_in,
    store::raw_capture,
    store::record_file::SessionInfo,
};
use nri_trace_lab::truth::Truth;
use trace_check::findings;
use trace_check::rule_ids::{
    HOOK_OVER_BUDGET, NAME_RESERVATION_RETRY, PLUGIN_TIMEOUT, POD_UNKNOWN_TO_PLUGIN,
    TEARDOWN_HOOK_FAILED, UNEXPLAINED_AFTER_RESTART,
};

const CRI: &str = "/var/lib/nri-trace-lab/run/containerd.sock";
const NRI: &str = "/var/lib/nri-trace-lab/run/nri.sock";

/// A finding as (rule, plugin).
type Finding = (&'static str, Option<&'static str>);

/// (scenario, the findings it must give).
const FIXTURES: &[(&str, &[Finding])] = &[
    ("happy", &[]),
    // A happy run in which two StopContainer calls of a pod overlapped so
    // that one ended first (it once took the other's STOP_CONTAINER).
    ("happy-concurrent-stops", &[]),
    ("slow-plugin", &[]),
    (
        "teardown-error",
        &[
            (TEARDOWN_HOOK_FAILED, Some("05-failer")),
            (TEARDOWN_HOOK_FAILED, Some("05-failer")),
        ],
    ),
    (
        "late-registration",
        &[
            (HOOK_OVER_BUDGET, Some("10-slow")),
            (POD_UNKNOWN_TO_PLUGIN, Some("20-late")),
        ],
    ),
    (
        "plugin-timeout",
        &[
            (PLUGIN_TIMEOUT, Some("10-hang")),
            (PLUGIN_TIMEOUT, Some("10-hang")),
        ],
    ),
    (
        "cri-deadline-retry",
        &[
            (PLUGIN_TIMEOUT, Some("10-slow")),
            (NAME_RESERVATION_RETRY, None),
        ],
    ),
];

fn dir(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/trace")
        .join(name)
}

fn events(name: &str) -> Vec<CaptureEvent> {
    raw_capture::read_file(dir(name).join("recording.ndjson.gz")).expect("recording fixture")
}

fn truth(name: &str) -> Vec<Truth> {
    truth_file::read(&dir(name).join("truth.ndjson.gz"))
}

/// The lab's runtime, as a session line names it.
fn session() -> SessionInfo {
    SessionInfo {
        tool: "nri-trace test".into(),
        runtime: Some("containerd".into()),
        runtime_pid: None,
        cri_socket: CRI.into(),
        nri_socket: NRI.into(),
        started_unix_ns: 0,
        redacted: false,
    }
}

/// The records the replay pipeline gives, traced as on the lab.
fn replay(evs: Vec<CaptureEvent>) -> Vec<Record> {
    records_of_events_in(&evs, &session(), Default::default()).records
}

#[test]
fn fixtures_correlate_and_find_what_they_should() {
    for (name, want) in FIXTURES {
        let records = replay(events(name));
        let (checked, _) = trace_check::check_correlation(name, &records, &truth(name));
        assert!(checked > 0, "{name}: no delivery checked");
        let got = findings(&records);
        assert!(
            got.iter().all(|(_, _, certain)| *certain),
            "{name}: uncertain findings on a lossless capture: {got:?}"
        );
        let got: Vec<(&str, Option<&str>)> =
            got.iter().map(|(r, p, _)| (*r, p.as_deref())).collect();
        assert_eq!(&got, want, "{name}");
    }
}

/// Any re-chunking of the real streams gives the same records, findings
/// included.
#[test]
fn any_split_gives_the_same_records() {
    for (name, _) in FIXTURES {
        let evs = events(name);
        let want = replay(evs.clone());
        replay_util::for_splits(&evs, 4, |split| {
            assert_eq!(replay(split), want, "{name}");
        });
    }
}

/// A mid-stream attach never makes a finding fire on the happy path (what
/// came before the cut is unknown: rules stay silent, never guess).
#[test]
fn mid_stream_attach_on_the_happy_path_finds_nothing() {
    let evs = events("happy");
    for cut in replay_util::chunk_indices(&evs).iter().step_by(9).copied() {
        let got = replay(replay_util::attach_at(&evs, cut));
        let f = findings(&got);
        assert!(f.is_empty(), "cut at event {cut}: {f:?}");
    }
}

/// containerd restarted under a running pod (lab `runtime-restart`): the
/// capture followed the new runtime process; after the restart, the
/// relaunched pre-launched plugin got the old pod's container events with
/// no Synchronize (uncertain: its registration went before the capture
/// found the new process), and the old pod's StopPodSandbox and
/// RemovePodSandbox delivered no NRI event at all.
#[test]
fn runtime_restart_fixture() {
    let name = "runtime-restart";
    let records = replay(events(name));
    let kinds: Vec<&str> = records
        .iter()
        .filter_map(|r| match r {
            Record::Observed(Observation::RuntimeExited { .. }) => Some("runtime_exited"),
            Record::Observed(Observation::RuntimeStarted { .. }) => Some("runtime_started"),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, vec!["runtime_exited", "runtime_started"]);
    let (checked, _) = trace_check::check_correlation(name, &records, &truth(name));
    assert!(checked > 0);
    let got: Vec<(&str, Option<String>, bool)> = findings(&records);
    assert_eq!(
        got,
        vec![
            (UNEXPLAINED_AFTER_RESTART, Some("05-pre".to_string()), false),
            (UNEXPLAINED_AFTER_RESTART, None, true),
            (UNEXPLAINED_AFTER_RESTART, None, true),
        ]
    );
}

/// The conformance table's Synchronize clause on the recordings where a
/// plugin registers with pods about: broken on containerd 1.7.24 for the
/// pod whose RunPodSandbox was in flight (the nri#63 race), held for the
/// pod a reconnecting plugin's Synchronize lists after a restart; as the
/// plugins' and the driver's own records imply.
#[test]
fn synchronize_clause_as_the_plugins_records_imply() {
    use nri_trace::engine::SYNCHRONIZE_TELLS_EXISTING_PODS;
    for (name, want) in [("late-registration", (0, 1)), ("runtime-restart", (1, 0))] {
        let truth = truth(name);
        assert_eq!(
            trace_check::sync_clause_expected(&truth),
            want,
            "{name}: the truth"
        );
        let tables = records_of_events_in(&events(name), &session(), Default::default()).tables;
        let c = tables
            .conformance
            .iter()
            .find(|c| c.clause == SYNCHRONIZE_TELLS_EXISTING_PODS)
            .unwrap_or_else(|| panic!("{name}: no Synchronize clause: {:?}", tables.conformance));
        assert_eq!((c.held, c.broken), want, "{name}: {c:?}");
        assert!(c
            .runtime
            .as_deref()
            .is_some_and(|r| r.starts_with("containerd 1.7.24")));
        if let Some(case) = &c.broken_case {
            let sync = case.sync.as_ref().expect("the wire's side");
            assert_eq!((case.plugin.as_str(), sync.told), ("20-late", "not_told"));
            assert!(case.pod.ends_with("late-pod"), "{case:?}");
        }
    }
}

/// A plugin closed after a fatal error (its timeout) and what it missed:
/// the second plugin-timeout finding counts the events 10-hang was
/// subscribed to (all, its Configure says) that reached the other plugin
/// after the runtime closed 10-hang's connection, each event once, as the
/// plugins' own records have them.
#[test]
fn plugin_timeout_counts_what_the_closed_plugin_missed() {
    use nri_trace::engine::Detail;
    use nri_trace_lab::truth::PluginEvent;
    let name = "plugin-timeout";
    let truth = truth(name);
    let gone = truth
        .iter()
        .find_map(|t| match t {
            Truth::Plugin {
                plugin,
                mono_ns,
                what: PluginEvent::Disconnected { .. },
                ..
            } if plugin == "hang" => Some(*mono_ns),
            _ => None,
        })
        .expect("10-hang's disconnection in the truth");
    let missed: std::collections::BTreeSet<_> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Nri {
                plugin,
                event: Some(event),
                pod,
                container,
                recv_mono_ns,
                ..
            } if plugin != "hang" && *recv_mono_ns > gone => Some((
                event.clone(),
                pod.as_ref().map(|p| p.id.clone()),
                container.as_ref().map(|c| c.id.clone()),
            )),
            _ => None,
        })
        .collect();
    assert!(!missed.is_empty());
    let records = replay(events(name));
    let details = trace_check::finding_details(&records, PLUGIN_TIMEOUT);
    let counted: Vec<u64> = details
        .iter()
        .filter_map(|(_, d)| match d {
            Detail::MissedAfterDisconnect { missed } => Some(*missed),
            _ => None,
        })
        .collect();
    assert_eq!(counted, [missed.len() as u64], "{details:?}");
}

/// `explain` of the committed recordings: every pod of these scenarios is
/// gone, with its teardown steps; teardown-error's failed hook is shown
/// under its step and in the pod's findings.
#[test]
fn explain_says_every_pod_of_the_fixtures_is_gone() {
    use nri_trace::engine::{TeardownLog, Verdict};
    for name in ["happy", "teardown-error", "runtime-restart", "slow-plugin"] {
        let mut log = TeardownLog::new();
        for r in replay(events(name)) {
            log.on_record(&r);
        }
        let pods = log.pods();
        assert!(!pods.is_empty(), "{name}");
        for p in &pods {
            let e = log.explain(p, 0).expect("explained");
            let sentence = nri_trace::sinks::explain::sentence(&e, None);
            assert_eq!(e.verdict, Verdict::Gone, "{name} {p}: {sentence}");
            assert!(
                sentence.contains("RemovePodSandbox succeeded"),
                "{sentence}"
            );
            assert!(
                e.steps.iter().any(|s| s.method == "StopPodSandbox"),
                "{name} {p}: {:?}",
                e.steps
            );
        }
    }
    let mut log = TeardownLog::new();
    for r in replay(events("teardown-error")) {
        log.on_record(&r);
    }
    let e = log.explain("tderr-0", 0).unwrap();
    let stop = e
        .steps
        .iter()
        .find(|s| s.method == "StopPodSandbox")
        .unwrap();
    let failed: Vec<_> = stop
        .failed_hooks()
        .map(|h| (h.plugin.as_str(), h.hook.as_str(), h.outcome.describe()))
        .collect();
    assert_eq!(
        failed,
        vec![(
            "05-failer",
            "STOP_POD_SANDBOX",
            "error 2: teardown refused".to_string()
        )]
    );
    assert!(e.findings.iter().any(|f| f.rule == "teardown-hook-failed"));
}

/// Late attaches with NRI plugins connected before the observer
/// (trace_lab/ `trace_cri_late_attach_with_plugins_names_the_calls`).
const LATE_WITH_PLUGINS: &[&str] = &["cri-late-attach-nri", "cri-late-attach-go-nri"];

/// Replayed whole, then started at many points (mid-chunk too): every CRI
/// call after the cut is found and none mislabeled against the driver's
/// truth; among the calls during which the runtime delivered an NRI event
/// at most 2 % stay unknown (over all cuts); replayed whole, every delivery
/// sits under a CRI call; every plugin (pre-launched and external, all
/// registered before the attach) hooks by its IDX-NAME, marked inferred, at
/// every cut.
#[test]
fn late_attach_with_plugins_never_mislabels() {
    let allow = cri_check::Allow {
        deadline_hidden: true,
        identity_missing: true,
    };
    for name in LATE_WITH_PLUGINS {
        let evs = events(name);
        let truth = truth(name);
        let with_nri = cri_check::with_nri_during(&truth);
        let since = nri_trace_lab::truth::observer_attached_ns(&truth).expect("attach note");
        let whole = replay(evs.clone());
        let uncaused = trace_check::uncaused_in_flight(&whole);
        assert_eq!(
            uncaused,
            Vec::<String>::new(),
            "{name}: deliveries with no CRI cause"
        );
        trace_check::check_late_plugins(name, &whole);
        let calls = cri_check::calls(&whole);
        let all = cri_check::compare(&truth, &calls, since, allow);
        let nri = cri_check::compare(&with_nri, &calls, since, allow);
        assert!(
            all.problems.is_empty(),
            "{name}:\n{}",
            all.problems.join("\n")
        );
        eprintln!(
            "{name}: all calls: {}\n{name}: calls with an NRI delivery: {}",
            all.line(),
            nri.line()
        );
        assert!(nri.unknown * 50 <= nri.matched, "{name}: {}", nri.line());
        let chunks = replay_util::chunk_indices(&evs);
        let step = (chunks.len() / 40).max(1);
        let (mut cuts, mut matched, mut unknown, mut inferred, mut known) = (0, 0, 0, 0, 0);
        for cut in chunks.iter().step_by(step).copied() {
            let cut_ts = match &evs[cut] {
                CaptureEvent::Chunk(c) => c.ts.mono_ns,
                _ => unreachable!(),
            };
            let got = replay(replay_util::attach_at(&evs, cut));
            // Every plugin named as at the whole replay (those that hook
            // after the cut).
            let named = trace_check::hook_plugins(&got);
            let want = trace_check::late_attach_plugins(name);
            assert!(
                named.keys().all(|l| want.contains(&l.as_str())),
                "{name} cut at event {cut}: {named:?}"
            );
            let calls = cri_check::calls(&got);
            let from = cut_ts.max(since) + 1;
            let r = cri_check::compare(&truth, &calls, from, allow);
            assert!(
                r.problems.is_empty(),
                "{name} cut at event {cut}:\n{}",
                r.problems.join("\n")
            );
            assert_eq!(r.matched, r.compared, "{name} cut at event {cut}");
            let n = cri_check::compare(&with_nri, &calls, from, allow);
            cuts += 1;
            matched += n.matched;
            unknown += n.unknown;
            inferred += n.inferred;
            known += n.known;
        }
        eprintln!(
            "{name}: attach at {cuts} points: calls with an NRI delivery after the cut: \
             {matched}, known {known}, inferred {inferred}, unknown {unknown}"
        );
        assert!(
            unknown * 50 <= matched,
            "{name}: {unknown} unknown of {matched}"
        );
    }
}

/// A runtime that goes quiet after a call: the call is settled on the
/// capture's tick (capture/session/clock.rs sends one once the sockets are
/// quiet), not held until the next captured event, and with the tick in
/// the stream a replay gives the same records as without it.
#[test]
fn a_tick_settles_the_last_call_of_a_quiet_runtime() {
    use nri_trace::{
        capture::Timestamp,
        engine::contract::ContractConfig,
        pipeline::{replay::Collect, Pipeline},
    };
    let evs = events("happy");
    let spans = |rs: &[Record]| {
        rs.iter()
            .filter(|r| matches!(r, Record::CriSpan(_)))
            .count()
    };
    // The connections of the CRI socket, and the last event on one: the
    // last call's response.
    let cri: Vec<_> = evs
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Open(o) if o.socket_path.as_deref() == Some(Path::new(CRI)) => {
                Some(o.conn)
            }
            _ => None,
        })
        .collect();
    let last = evs
        .iter()
        .rposition(|e| matches!(e, CaptureEvent::Chunk(c) if cri.contains(&c.conn)))
        .expect("CRI chunks in the happy recording");
    let CaptureEvent::Chunk(end) = &evs[last] else {
        unreachable!()
    };
    let all = spans(&replay(evs.clone()));

    let mut p = Pipeline::new(&session(), ContractConfig::default());
    let (sink, got) = Collect::new();
    p.add_sink(Box::new(sink));
    for e in &evs[..=last] {
        p.on_capture(e).unwrap();
    }
    let before = spans(&got.borrow().records);
    assert!(
        before < all,
        "the last call is still held ({before} of {all})"
    );
    let tick = CaptureEvent::Tick {
        ts: Timestamp {
            mono_ns: end.ts.mono_ns + 60_000_000,
            wall_ns: end.ts.wall_ns + 60_000_000,
        },
    };
    p.on_capture(&tick).unwrap();
    let after = spans(&got.borrow().records);
    assert_eq!(
        after, all,
        "every call settled on the tick ({before} before it)"
    );

    // The tick changes when, never what.
    let mut with_tick = evs.clone();
    with_tick.insert(last + 1, tick);
    assert_eq!(replay(with_tick), replay(evs));
}

/// A flood fixture's events, truth, and its first connection's open (the
/// attach).
fn flood(name: &str) -> (Vec<CaptureEvent>, Vec<Truth>, u64) {
    let evs = events(name);
    let attach = evs
        .iter()
        .find_map(|e| match e {
            CaptureEvent::Open(o) => Some(o.ts.mono_ns),
            _ => None,
        })
        .expect("an open");
    (evs, truth(name), attach)
}

/// The holes a flood's loss reports place (a flood loses over 600,000
/// records).
fn holes_of(evs: &[CaptureEvent]) -> Vec<(u64, u64)> {
    let (lost, holes) = trace_check::holes(evs);
    assert!(lost > 600_000, "{lost} records lost");
    holes
}

/// A flood's hole (`flood-loss`: nri-trace `b` of tests/tests/faults_lab.rs,
/// a loaded containerd 1.7 whose NRI socket a hostile peer flooded with a
/// million empty multiplexer frames): the kernel dropped 675,129 records
/// for 11 s while the reader was seconds behind, and counted them long
/// before it reached the hole. The loss reports say where the hole is;
/// each real connection marks it (`gap_before`) and its decoders start
/// again after it; a delivery whose CRI call the hole took is said to be
/// so, never "no CRI call in flight"; every delivery after the hole is
/// under its CRI call; and every finding is uncertain.
#[test]
fn a_flood_hole_is_placed_marked_and_correlated_after() {
    let name = "flood-loss";
    let (evs, truth, attach) = flood(name);
    // Where the hole is: the loss reports' stamps, not their place.
    let holes = holes_of(&evs);
    let hole_end = holes.iter().map(|h| h.1).max().expect("a hole");
    // The real connections (the plugins', their ends, the driver's): each
    // marks the hole at its first syscall after it.
    let real: std::collections::BTreeSet<_> = (1..=7).map(nri_trace::capture::ConnId).collect();
    let marked: std::collections::BTreeSet<_> = evs
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Chunk(c) if c.gap_before && real.contains(&c.conn) => Some(c.conn),
            _ => None,
        })
        .collect();
    assert_eq!(marked, real, "connections that marked the hole");
    let records = replay(evs);
    // Nothing mislabeled once the calls in flight at the attach settled.
    let since = trace_check::settled_after(&truth, attach);
    let mislabeled = trace_check::no_call_since(&records, since);
    assert!(mislabeled.is_empty(), "{mislabeled:?}");
    let taken = trace_check::cause_lost(&records);
    assert!(taken > 0, "no delivery said to have lost its cause");
    // After the hole, once every call begun before its end has ended:
    // every delivery under its CRI call.
    let after = trace_check::check_window(
        "flood-loss after the hole",
        &records,
        &truth,
        trace_check::settled_after(&truth, hole_end),
        u64::MAX,
    );
    assert!(after >= 500, "{after} deliveries checked after the hole");
    let f = findings(&records);
    assert!(f.iter().all(|(_, _, certain)| !certain), "{f:?}");
}

/// A call cut by a hole (`flood-cut`, tests/fixtures/trace/README.md):
/// the driver's StartContainer of load-71 was in flight when the floods'
/// loss began; its response was lost, and the three plugins'
/// START_CONTAINER deliveries, made 10 ms before the hole, are under it,
/// not "no CRI call in flight" (as a faults_lab run said, 4 runs in 11).
#[test]
fn a_call_whose_response_a_hole_took_keeps_its_deliveries() {
    let name = "flood-cut";
    let (evs, truth, attach) = flood(name);
    let holes = holes_of(&evs);
    let hole_start = holes.iter().map(|h| h.0).min().expect("a hole");
    let records = replay(evs);
    let since = trace_check::settled_after(&truth, attach);
    let mislabeled = trace_check::no_call_since(&records, since);
    assert!(mislabeled.is_empty(), "{mislabeled:?}");
    let cut: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s)
                if s.call.end.is_none()
                    && s.call.start.is_some_and(|t| t.mono_ns < hole_start)
                    && s.call.method_name() == Some("StartContainer") =>
            {
                Some(s)
            }
            _ => None,
        })
        .collect();
    assert_eq!(cut.len(), 1, "{cut:#?}");
    let s = cut[0];
    assert_eq!(s.call.outcome, CriOutcome::Unknown, "{s:#?}");
    let got: Vec<(String, String)> = s
        .hooks
        .iter()
        .map(|h| (h.call.plugin.label(), h.hook.to_string()))
        .collect();
    assert_eq!(
        got,
        ["10-alpha", "20-beta", "30-gamma"].map(|p| (p.to_string(), "START_CONTAINER".to_string())),
        "{s:#?}"
    );
    for h in &s.hooks {
        let start = h.call.start.expect("the delivery's start").mono_ns;
        assert!(start < hole_start, "{h:#?}");
        assert_eq!(
            h.call.container.as_ref().map(|c| c.id.as_str()),
            s.call.container_id.as_deref()
        );
    }
}
