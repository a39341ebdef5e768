//! End to end against the lab: `nri-trace watch` traces the lab
//! containerd's CRI and NRI sockets together while a scenario runs; every
//! NRI delivery a test plugin recorded must be attached to the CRI call the
//! driver was making for that pod or container at the time (the method that
//! makes that event), and deliveries with no CRI cause labeled as such. The
//! recording must replay to the same output. Where a scenario's point is
//! the decoding itself (happy, plugin-timeout, slow-plugin, teardown-error,
//! upstream-witness, cri-deadline-retry, cri-late-attach), every delivery
//! and CRI call is also checked as the plugins and the driver recorded it
//! (`nri_check`, `cri_check`), on each runtime.
//!
//! Needs root, the eBPF object and the lab (mandatory under CI=true).
//!
//! This file holds what the scenarios share (running one traced on a
//! runtime, reading its records, explain); each module holds a group of
//! scenarios, a test per runtime each.
//!
//! The runtime matrix (docs/lab.md, "The runtime matrix"): every scenario
//! runs on the default runtime (`trace_*`); the other runtimes
//! (`ctrd21_`, `ctrd22_`, `ctrd23_`, `crio_`) run the scenarios where the
//! runtimes differ: the conformance clauses, teardown-error,
//! plugin-timeout, late attach with plugins, late registration (CRI-O),
//! restart, the Terminating causes, the name-reservation retry, and the
//! happy path each runtime's other tests stand on. A scenario whose point
//! is nri-trace's own decoding (the pods before the attach, a late attach
//! without plugins, slow-plugin, the upstream witness) runs once: the
//! suite has to fit CI's budget (docs/benchmarks.md, "The suite").

#[path = "../cri_check/mod.rs"]
mod cri_check;
#[path = "../lab_trace/mod.rs"]
mod lab_trace;
#[path = "../nri_check/mod.rs"]
mod nri_check;
#[path = "../otel_collector/mod.rs"]
mod otel_collector;
#[path = "../output_check/mod.rs"]
mod output_check;
#[path = "../record_schema/mod.rs"]
mod record_schema;
#[path = "../trace_check/mod.rs"]
mod trace_check;

mod attach;
mod conformance;
mod crictl;
mod go_plugins;
mod lifecycle;
mod otlp;
mod resize;
mod retry;
mod terminating;
mod validation;

use std::{ffi::OsStr, path::Path, sync::Arc};

use lab_trace::{json_lines, TraceProc};
use nri_trace::{
    capture::SandboxOp,
    engine::{Detail, NoCause, Record},
    model::{CriCall, CriOutcome, Identified, Observation},
    sinks::finding_message,
};
use nri_trace_lab::{
    labctl::{Lab, Runtime},
    truth::{self, PluginEvent, Truth},
};
use trace_check::rule_ids::{
    HOOK_OVER_BUDGET, NAME_RESERVATION_RETRY, PLUGIN_TIMEOUT, POD_UNKNOWN_TO_PLUGIN,
    PROCESS_SURVIVES_SIGKILL, TEARDOWN_HOOK_FAILED, TEARDOWN_UNMOUNT_FAILED,
    UNEXPLAINED_AFTER_RESTART,
};
use trace_check::{finding_details, findings};

fn records(scenario: &str, out: &Path) -> Vec<Record> {
    lab_trace::live_equals_replay(scenario, out).records
}

/// `nri-trace ARGS`, which must succeed: its stdout.
fn nri_trace_stdout<I, S>(what: &str, args: I) -> Vec<u8>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    lab_trace::nri_trace_stdout(what, args)
}

/// The kernel events an explain result lists, as lines (`kernel_lines`).
fn kernel_lines(v: &serde_json::Value) -> Vec<&str> {
    v["kernel_lines"]
        .as_array()
        .expect("explain's kernel list")
        .iter()
        .filter_map(|l| l.as_str())
        .collect()
}

/// `nri-trace explain POD FILE -o json` on a run's saved calls.
fn explain(out: &Path, pod: &str) -> serde_json::Value {
    let obs = TraceProc::observations(out);
    let args = [OsStr::new("explain"), OsStr::new(pod), obs.as_os_str()];
    let stdout = nri_trace_stdout(
        &format!("explain {pod}"),
        args.into_iter().chain(["-o", "json"].map(OsStr::new)),
    );
    record_schema::validate_lines(&record_schema::validator(), "explain -o json", &stdout);
    serde_json::from_slice(&stdout).expect("explain -o json")
}

fn check_correlation(scenario: &str, out: &Path) -> (usize, usize) {
    let records = records(scenario, out);
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    trace_check::check_correlation(scenario, &records, &truth)
}

fn traced(scenario: &str) -> Option<(std::path::PathBuf, Vec<Record>)> {
    traced_on(None, scenario)
}

/// `scenario`'s records against the plugins' and the driver's own records
/// of the run: every NRI delivery a test plugin recorded after the attach
/// as it got and answered it (`nri_check::assert_every_delivery`: plugin,
/// method, event, pod, container, outcome, hook time within 1 ms of the
/// handler), and every CRI call the driver made after the attach as it
/// made it (`cri_check::assert_every_call`: method, identity, deadline,
/// outcome, none mislabeled). The driver's truth and the CRI report.
fn check_against_truth(
    scenario: &str,
    out: &Path,
    records: &[Record],
) -> (Vec<Truth>, cri_check::CriReport) {
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    nri_check::assert_every_delivery(scenario, &truth, records, &lab_trace::raw_events(out));
    let cri = cri_check::assert_every_call(scenario, &truth, records, cri_check::Allow::default());
    (truth, cri)
}

/// The runtime a test runs on: `runtime`, or NRI_TRACE_LAB_RUNTIME's
/// (containerd 2.3 when unset).
fn runtime_of(runtime: Option<Runtime>) -> Runtime {
    runtime.unwrap_or_else(|| Lab::from_env().runtime)
}

/// Where the runs on `runtime` keep their output (`None`: the runtime of
/// NRI_TRACE_LAB_RUNTIME, as every test without a runtime prefix).
fn group_of(runtime: Option<Runtime>) -> &'static str {
    match runtime {
        None => "trace-lab",
        Some(Runtime::Containerd17) => "trace-lab-ctrd17",
        Some(Runtime::Containerd21) => "trace-lab-ctrd21",
        Some(Runtime::Containerd22) => "trace-lab-ctrd22",
        Some(Runtime::Containerd23) => "trace-lab-ctrd23",
        Some(Runtime::CriO) => "trace-lab-crio",
    }
}

/// `scenario` traced on `runtime` (None: NRI_TRACE_LAB_RUNTIME's), with
/// the records of its replay (equal to the live output); on CRI-O,
/// nri-trace must have found it as on a node.
fn traced_on(
    runtime: Option<Runtime>,
    scenario: &str,
) -> Option<(std::path::PathBuf, Vec<Record>)> {
    let out = lab_trace::run_traced_on(group_of(runtime), scenario, runtime, TraceProc::new())?;
    let records = records(scenario, &out);
    eprintln!(
        "{scenario} on {}: findings {:?}",
        runtime_of(runtime).name(),
        findings(&records)
    );
    if runtime_of(runtime) == Runtime::CriO {
        // Found as on a node: no socket was given.
        let session = &json_lines(&out, "session")[0];
        assert_eq!(session["runtime"], "cri-o", "{session}");
        assert!(
            session["cri_socket"]
                .as_str()
                .is_some_and(|s| s.ends_with("/run/crio.sock")),
            "{session}"
        );
    }
    Some((out, records))
}

/// The pods of the runtime's state (`cri_state` lines), by name.
fn listed_pods(records: &[Record]) -> Vec<Vec<String>> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Observed(Observation::CriState(s)) => {
                Some(s.pods.iter().map(|p| p.name.clone()).collect())
            }
            _ => None,
        })
        .collect()
}

/// Every CRI call the driver recorded has its span in `records` (same
/// method, the nearest start while the driver waited for it: the runtime
/// reads a request after the client sent it, CRI-O's StartContainer 7 ms
/// later in one run), failed exactly when the driver saw it fail. The
/// methods of the failed calls.
fn failed_calls_traced_failed(scenario: &str, truth: &[Truth], records: &[Record]) -> Vec<String> {
    let mut failed = Vec::new();
    for t in truth {
        let Truth::Cri {
            method,
            start_mono_ns,
            end_mono_ns,
            outcome,
            ..
        } = t
        else {
            continue;
        };
        // The two clocks are the same (CLOCK_MONOTONIC); 1 ms of slack for
        // the driver's own stamp taken just after the send.
        let while_waited = start_mono_ns.saturating_sub(1_000_000)..=*end_mono_ns;
        let span = records
            .iter()
            .filter_map(|r| match r {
                Record::CriSpan(s)
                    if s.call.method_name() == Some(method.as_str())
                        && s.call
                            .start
                            .is_some_and(|t| while_waited.contains(&t.mono_ns)) =>
                {
                    Some(&s.call)
                }
                _ => None,
            })
            .min_by_key(|c| {
                c.start
                    .map_or(u64::MAX, |t| t.mono_ns.abs_diff(*start_mono_ns))
            });
        let span =
            span.unwrap_or_else(|| panic!("{scenario}: no {method} span at {start_mono_ns}"));
        let ok = matches!(outcome, truth::Outcome::Ok);
        assert_eq!(
            span.outcome.is_ok(),
            ok,
            "{scenario}: {method} at {start_mono_ns}: driver {outcome:?}, nri-trace {:?}",
            span.outcome
        );
        if !ok {
            failed.push(method.clone());
        }
    }
    eprintln!("{scenario}: CRI calls failed: {failed:?}");
    failed
}

/// Wait for the scenario's note starting with `held` and saying what it
/// keeps (" kept ": the pod is stuck from then on),
/// then run `nri-trace explain POD` on the observations written so far.
fn explain_while_held(
    out: &Path,
    pod: &str,
    held: &str,
    traced_done: &std::sync::atomic::AtomicBool,
) -> Option<serde_json::Value> {
    // No time limit of its own: the traced run may first wait for the lab
    // lock (other lab tests run in parallel), and it ends either way.
    while !traced_done.load(std::sync::atomic::Ordering::SeqCst) {
        let is_held = truth::read(&out.join("truth.ndjson"))
            .unwrap_or_default()
            .iter()
            .any(|t| matches!(t, Truth::Note { text, .. } if text.starts_with(held) && text.contains(" kept ")));
        if is_held {
            // The held note is written before the hold: let the capture
            // drain what led to it.
            std::thread::sleep(std::time::Duration::from_millis(500));
            return Some(explain(out, pod));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    None
}

/// Start `scenario` traced, with the pod held stuck for 10 s once the note
/// `held` is written, and `nri-trace explain POD` run on the node then.
fn traced_and_explained(
    rt: Option<Runtime>,
    scenario: &str,
    pod: &'static str,
    held: &'static str,
) -> Option<(std::path::PathBuf, Vec<Record>, serde_json::Value)> {
    // The scenarios that keep a pod stuck read it (lab/src/scenario/
    // terminating.rs, hung_teardown.rs).
    std::env::set_var("NRI_TRACE_LAB_HOLD_SECS", "10");
    let out_dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(group_of(rt))
        .join(scenario);
    // A previous run's files must not pass for this one's.
    let _ = std::fs::remove_file(out_dir.join("truth.ndjson"));
    let _ = std::fs::remove_file(TraceProc::observations(&out_dir));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traced_done = Arc::clone(&done);
    let explained =
        std::thread::spawn(move || explain_while_held(&out_dir, pod, held, &traced_done));
    let run = traced_on(rt, scenario);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let explained = explained.join().expect("explain thread");
    let (out, records) = run?;
    let v = explained.expect("explain ran while the pod was stuck");
    eprintln!("{scenario}: explain: {v}");
    Some((out, records, v))
}

/// A note's text that starts with `prefix`.
fn note<'a>(truth: &'a [Truth], prefix: &str) -> &'a str {
    truth
        .iter()
        .find_map(|t| match t {
            Truth::Note { text, .. } if text.starts_with(prefix) => Some(text.as_str()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no note {prefix:?}"))
}

// CRI-O 1.36.3 (lab/crio.sh; until 2026-11-28 1.33.13), in CI: nri-trace
// finds CRI-O as on a node (its process `crio`, its sockets `crio.sock` and
// `nri.sock`) and traces it; its conformance differs from containerd's by design
// (docs/contract.md, docs/lab.md "Scenarios on CRI-O").

fn traced_on_crio(scenario: &str) -> Option<(std::path::PathBuf, Vec<Record>)> {
    traced_on(Some(Runtime::CriO), scenario)
}
