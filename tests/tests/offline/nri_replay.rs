//! Replays committed recordings of the lab (real containerd 1.7.24 talking
//! to the lab's ttrpc-crate plugins and the NRI project's own logger
//! plugin, captured with nri-trace's probes) and checks the decoded calls
//! against the ground truth the plugins wrote at the time. No root needed.
//!
//! Fixtures: `tests/fixtures/nri/<scenario>/{recording,truth}.ndjson.gz`,
//! made by the live tests in trace_lab/ and nri_lab.rs (see
//! tests/fixtures/nri/README.md).

use crate::nri_check;
use crate::replay_util;
use crate::truth_file;

use std::path::Path;

use nri_trace::{
    capture::CaptureEvent,
    engine::Record,
    model::{IdentitySource, NriOutcome},
};

const LAB_NRI_SOCKET: &str = "/var/lib/nri-trace-lab/run/nri.sock";

fn fixture_events(scenario: &str) -> Vec<CaptureEvent> {
    nri_check::read_recording(&nri_check::fixture_dir(scenario).join("recording.ndjson.gz"))
}

/// The records and hook table of a replay through the pipeline.
fn analyze(
    events: Vec<CaptureEvent>,
    nri: Vec<std::path::PathBuf>,
) -> (Vec<Record>, Vec<nri_trace::engine::HookSummary>) {
    let c = nri_check::replay(&events, &nri[0]);
    (c.records, c.tables.hooks)
}

fn check_fixture(scenario: &str) -> Vec<Record> {
    let dir = nri_check::fixture_dir(scenario);
    let events = fixture_events(scenario);
    let records = nri_check::replay(&events, Path::new(LAB_NRI_SOCKET)).records;
    let truth = truth_file::read(&dir.join("truth.ndjson.gz"));
    nri_check::assert_every_delivery(scenario, &truth, &records, &events);
    records
}

#[test]
fn happy_fixture_matches_truth() {
    let records = check_fixture("happy");
    let calls = nri_check::calls(&records);
    // Decoded, not guessed: every call has a method and a named plugin
    // (the pre-launched 30-gamma registered before the capture: its name
    // comes from its environment).
    assert!(calls.iter().all(|c| c.method.is_some() && !c.partial));
    assert!(calls.iter().all(|c| c.plugin.name.is_some()));
    assert!(calls
        .iter()
        .any(|c| c.plugin.label() == "30-gamma" && c.plugin.source == IdentitySource::Inferred));
}

#[test]
fn plugin_timeout_fixture_matches_truth() {
    let records = check_fixture("plugin-timeout");
    let calls = nri_check::calls(&records);
    let hung: Vec<_> = calls
        .iter()
        .filter(|c| c.outcome == NriOutcome::TimedOut)
        .collect();
    assert_eq!(hung.len(), 1);
    assert_eq!(hung[0].plugin.label(), "10-hang");
    // The runtime waited its whole request timeout (1 s in this scenario).
    let waited = hung[0].duration_ns.unwrap_or(0);
    assert!(hung[0].end.is_none());
    assert!(
        hung[0]
            .timeout_nano
            .is_some_and(|t| waited + 50_000_000 >= t as u64),
        "waited {waited} ns, timeout {:?}",
        hung[0].timeout_nano
    );
}

#[test]
fn teardown_error_fixture_matches_truth() {
    let records = check_fixture("teardown-error");
    let calls = nri_check::calls(&records);
    let errors: Vec<_> = calls
        .iter()
        .filter(|c| matches!(&c.outcome, NriOutcome::Error { message, .. } if message.contains("teardown refused")))
        .filter_map(|c| c.event.map(|e| e.as_str_name()))
        .collect();
    assert_eq!(errors, ["STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"]);
}

#[test]
fn slow_plugin_fixture_matches_truth() {
    let records = check_fixture("slow-plugin");
    let queued = nri_check::hooks(&records).iter().any(|s| {
        s.call.plugin.label() == "20-plain"
            && s.hook == "RUN_POD_SANDBOX"
            && s.queued_ns.is_some_and(|q| q >= 500_000_000)
            && s.queued_behind == ["10-slow"]
    });
    assert!(queued);
}

#[test]
fn upstream_logger_fixture_decoded() {
    let records = check_fixture("upstream-witness");
    let calls = nri_check::calls(&records);
    let logger: Vec<_> = calls
        .iter()
        .filter(|c| c.plugin.label() == "99-upstream-logger" && c.event.is_some())
        .collect();
    assert!(!logger.is_empty());
    assert!(logger.iter().all(|c| c.outcome == NriOutcome::Ok));
}

const FIXTURES: [&str; 5] = [
    "happy",
    "plugin-timeout",
    "teardown-error",
    "slow-plugin",
    "upstream-witness",
];

/// Split every captured chunk at pseudo-random points (keeping its
/// timestamp): the decoded records must not change, however the bytes were
/// cut into syscalls.
#[test]
fn any_split_of_a_real_stream_decodes_identically() {
    for f in FIXTURES {
        split_decodes_identically(f);
    }
}

fn split_decodes_identically(fixture: &str) {
    let events = fixture_events(fixture);
    let (want, _) = analyze(events.clone(), vec![LAB_NRI_SOCKET.into()]);
    assert!(!want.is_empty());
    replay_util::for_splits(&events, 20, |split| {
        let (got, _) = analyze(split, vec![LAB_NRI_SOCKET.into()]);
        assert_eq!(got, want, "{fixture}: a split changed the decoded records");
    });
}

/// Start the replay at every point of a real stream (a mid-stream attach):
/// calls whose request was seen are decoded correctly, a response whose
/// request was not seen is a partial call, and nothing is mislabelled.
#[test]
fn mid_stream_attach_at_any_point() {
    for f in FIXTURES {
        attach_mid_stream(f);
    }
}

fn attach_mid_stream(fixture: &str) {
    let events = fixture_events(fixture);
    let (full, _) = analyze(events.clone(), vec![LAB_NRI_SOCKET.into()]);
    let full_calls = nri_check::calls(&full);
    // Cut inside the stream: drop the first k chunk events (keep opens so the
    // connections are known, as discovery finds them at attach).
    let chunk_idx = replay_util::chunk_indices(&events);
    for cut in chunk_idx.iter().step_by(7).copied() {
        let tail = replay_util::attach_at(&events, cut);
        let (got, _) = analyze(tail, vec![LAB_NRI_SOCKET.into()]);
        for c in nri_check::calls(&got) {
            if c.partial {
                assert!(c.method.is_none() && c.start.is_none());
                continue;
            }
            // A complete call must be one of the full replay's calls,
            // exactly, except for the plugin identity when its RegisterPlugin
            // fell before the cut: then it comes from the peer process (the
            // same pid), never a wrong name.
            let f = full_calls
                .iter()
                .find(|f| {
                    (f.conn, f.mux_conn, f.stream_id, f.start)
                        == (c.conn, c.mux_conn, c.stream_id, c.start)
                })
                .unwrap_or_else(|| {
                    panic!("cut at event {cut}: call not in the full replay: {c:?}")
                });
            let mut f = (*f).clone();
            if c.plugin.source != f.plugin.source {
                assert_eq!(c.plugin.pid, f.plugin.pid, "cut at event {cut}");
                assert!(c.plugin.name.is_none() || c.plugin.name == f.plugin.name);
                f.plugin = c.plugin.clone();
            }
            if c.plugin_ns.is_none() {
                // The plugin's read of the request fell before the cut.
                f.plugin_ns = None;
            }
            if c.end.is_none() && f.end.is_some() {
                // Its response was in the bytes cut away: it ends without
                // one (connection closed or capture ended), nothing else.
                f.end = None;
                f.duration_ns = c.duration_ns;
                f.outcome = c.outcome.clone();
                f.summary.clone_from(&c.summary);
            }
            let same = f == *c;
            assert!(
                same,
                "cut at event {cut}: call not in the full replay: {c:?}"
            );
        }
        // Everything that started after the cut's next boundary is there.
        let cut_ts = match &events[cut] {
            CaptureEvent::Chunk(c) => c.ts.mono_ns,
            _ => unreachable!(),
        };
        let later = full_calls
            .iter()
            .filter(|c| c.start.is_some_and(|s| s.mono_ns > cut_ts + 50_000_000))
            .count();
        let got_later = nri_check::calls(&got)
            .iter()
            .filter(|c| !c.partial && c.start.is_some_and(|s| s.mono_ns > cut_ts + 50_000_000))
            .count();
        assert_eq!(got_later, later, "cut at event {cut}: later calls missing");
    }
}

/// Replaying is deterministic: same records, same summary.
#[test]
fn replay_is_deterministic() {
    let events = fixture_events("happy");
    let a = analyze(events.clone(), vec![LAB_NRI_SOCKET.into()]);
    let b = analyze(events, vec![LAB_NRI_SOCKET.into()]);
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    assert!(nri_check::calls(&a.0)
        .iter()
        .all(|c| c.outcome == NriOutcome::Ok));
}
