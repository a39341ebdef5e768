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

mod cri_check;
mod lab_trace;
mod nri_check;
mod output_check;
mod record_schema;
mod trace_check;

use std::{ffi::OsStr, path::Path, sync::Arc};

use lab_trace::{json_lines, TraceProc};
use nri_trace::{
    capture::sandbox::SandboxOp,
    engine::{
        findings::{
            Detail, HOOK_OVER_BUDGET, NAME_RESERVATION_RETRY, PLUGIN_TIMEOUT,
            POD_UNKNOWN_TO_PLUGIN, PROCESS_SURVIVES_SIGKILL, TEARDOWN_HOOK_FAILED,
            TEARDOWN_UNMOUNT_FAILED, UNEXPLAINED_AFTER_RESTART,
        },
        record::Record,
    },
    model::{
        cri_call::{CriOutcome, Identified},
        observation::Observation,
    },
    sinks::finding_message::message,
};
use nri_trace_lab::{
    labctl::{Lab, Runtime},
    truth::{self, PluginEvent, Truth},
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
/// (containerd 1.7 when unset).
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

/// `watch` attached after two pods were made, then they were torn down:
/// the runtime's lists, asked at start over nri-trace's own CRI
/// connection, name their StopPodSandbox spans (namespace/name, not a
/// sandbox id); that connection is not traced. With `--no-cri-state`
/// nothing is asked: nri-trace holds no connection to the runtime. The
/// same on every runtime (CRI-O's pods listed by its CRI server as
/// containerd's are).
#[test]
fn trace_pods_before_attach_named_from_the_runtime_state() {
    check_pods_before_attach(None);
}

#[test]
fn ctrd21_trace_pods_before_attach_named_from_the_runtime_state() {
    check_pods_before_attach(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_pods_before_attach_named_from_the_runtime_state() {
    check_pods_before_attach(Some(Runtime::CriO));
}

fn check_pods_before_attach(rt: Option<Runtime>) {
    let Some((out, records)) = traced_on(rt, "pods-before-attach") else {
        return;
    };
    let mut listed = listed_pods(&records);
    assert_eq!(listed.len(), 1, "one cri_state line: {listed:?}");
    listed[0].sort();
    assert_eq!(listed[0], ["early-0", "early-1"]);
    for name in ["early-0", "early-1"] {
        let stop = records.iter().find_map(|r| match r {
            Record::CriSpan(s)
                if s.call.method.as_deref() == Some("StopPodSandbox")
                    && s.call.pod.as_ref().is_some_and(|p| p.name == name) =>
            {
                s.call.pod.clone()
            }
            _ => None,
        });
        let pod = stop.unwrap_or_else(|| panic!("no StopPodSandbox span names {name}"));
        assert!(!pod.namespace.is_empty(), "{pod:?}");
        eprintln!("pods-before-attach: StopPodSandbox of {pod}");
    }
    // nri-trace's own connection: not a traced CRI connection or call, but
    // there (the runtime's end of it is nri-trace's peer).
    let clients: Vec<String> = records
        .iter()
        .filter_map(|r| match r {
            Record::Observed(Observation::CriConnection { client, .. }) => client.clone(),
            _ => None,
        })
        .collect();
    assert!(
        !clients.iter().any(|c| c.contains("nri-trace")),
        "{clients:?}"
    );
    // The runtime's process: containerd, or CRI-O's `crio`.
    let runtime_peer = |peers: &str| peers.contains("containerd[") || peers.contains("crio[");
    let process = match runtime_of(rt) {
        Runtime::Containerd17 | Runtime::Containerd21 => "containerd[",
        Runtime::CriO => "crio[",
    };
    let peers = std::fs::read_to_string(TraceProc::peers(&out)).unwrap();
    assert!(peers.contains(process), "peers of nri-trace: {peers}");

    let Some(off) = lab_trace::run_traced_on(
        &format!("{}-no-cri-state", group_of(rt)),
        "pods-before-attach",
        rt,
        TraceProc::with_args(&["--no-cri-state"]),
    ) else {
        return;
    };
    let records = lab_trace::live_equals_replay("pods-before-attach", &off).records;
    assert_eq!(listed_pods(&records), Vec::<Vec<String>>::new());
    let peers = std::fs::read_to_string(TraceProc::peers(&off)).unwrap();
    assert!(
        !runtime_peer(&peers),
        "--no-cri-state: nri-trace is connected to the runtime: {peers}"
    );
    let spans = records
        .iter()
        .filter(|r| matches!(r, Record::CriSpan(s) if s.call.method.as_deref() == Some("StopPodSandbox")))
        .count();
    assert_eq!(spans, 2, "the teardowns are still traced");
}

#[test]
fn trace_happy_hooks_under_their_cri_calls() {
    check_happy(None);
}

#[test]
fn ctrd21_trace_happy_hooks_under_their_cri_calls() {
    check_happy(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_happy_hooks_under_their_cri_calls() {
    check_happy(Some(Runtime::CriO));
}

/// `happy` traced on `rt`: every delivery under its CRI call, no finding,
/// each pod's story, the report, the metrics, and the conformance table as
/// the runtime behaves (below).
fn check_happy(rt: Option<Runtime>) {
    let runtime = runtime_of(rt);
    let Some((out, records)) = traced_on(rt, "happy") else {
        return;
    };
    let (_, cri) = check_against_truth("happy", &out, &records);
    // Each driver run opens its connection while traced: every :path is
    // on the wire.
    assert_eq!(cri.known, cri.compared, "{}", cri.line());
    // The pre-launched plugin registered before nri-trace attached: its
    // identity comes from its environment, not "unknown".
    let calls = nri_check::calls(&records);
    assert!(calls.iter().any(|c| c.plugin.label() == "30-gamma"));
    // External plugins registered while traced: RegisterPlugin, Configure,
    // Synchronize all decoded.
    for m in ["RegisterPlugin", "Configure", "Synchronize"] {
        assert!(
            calls
                .iter()
                .any(|c| c.plugin.label() == "10-alpha" && c.method.as_deref() == Some(m)),
            "no {m} of 10-alpha"
        );
    }
    let (checked, hooks) = check_correlation("happy", &out);
    assert!(checked > 0 && hooks >= checked);
    // The happy path breaks no rule.
    assert_eq!(findings(&records), vec![]);
    // explain: each pod is gone, with each step's time, and the kernel saw
    // its processes go: the containers' SIGTERM, the pause SIGKILL, exits.
    // CRI-O runs no pause process for these pods (`drop_infra_ctr = true`,
    // its default, and they do not share their PID namespace): the kernel
    // saw none go.
    for pod in ["happy-0", "happy-1", "happy-2"] {
        let v = explain(&out, pod);
        assert_eq!(v["verdict"], "gone", "{v}");
        let s = v["sentence"].as_str().unwrap();
        for step in [
            "StopContainer (c0) ",
            "StopPodSandbox ",
            "RemovePodSandbox ",
        ] {
            assert!(s.contains(step), "{pod}: no {step:?} in {s}");
        }
        let kernel = kernel_lines(&v);
        let pause_killed = "(pause) exited: killed by SIGKILL";
        for what in ["sent SIGTERM to pid ", pause_killed] {
            if what == pause_killed && runtime == Runtime::CriO {
                assert!(
                    !kernel.iter().any(|l| l.contains("(pause)")),
                    "{pod}: a pause process on CRI-O: {kernel:#?}"
                );
                continue;
            }
            assert!(
                kernel.iter().any(|l| l.contains(what)),
                "{pod}: no {what:?} in {kernel:#?}"
            );
        }
    }
    // `report` on the saved calls: the three pods, all removed, no finding.
    let report = std::process::Command::new(lab_trace::bin("nri-trace"))
        .arg("report")
        .arg(TraceProc::observations(&out))
        .output()
        .expect("nri-trace report");
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let text = String::from_utf8_lossy(&report.stdout);
    eprintln!("{text}");
    assert!(text.contains("PODS (3)"), "{text}");
    let removed = text
        .lines()
        .filter(|l| l.starts_with("nri-trace/happy-") && l.contains(" removed "))
        .count();
    assert_eq!(removed, 3, "{text}");
    assert!(text.contains("FINDINGS (0, 0 certain"), "{text}");
    // The metrics it served while live: a hook histogram per plugin, the
    // CRI durations, no finding, no loss.
    let metrics = std::fs::read_to_string(out.join("metrics.txt")).expect("metrics scraped");
    assert!(
        metrics.contains(
            "nri_trace_hook_duration_seconds_count{plugin=\"10-alpha\",operation=\"RunPodSandbox\"} 3"
        ),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("nri_trace_cri_call_duration_seconds_count{grpc_method=\"RunPodSandbox\"} 3"),
        "{metrics}"
    );
    assert!(!metrics.contains("nri_trace_findings_total{"), "{metrics}");
    assert!(metrics.contains("nri_trace_capture_lost_records_total 0"));
    // The lab went quiet after the last call: it was printed then, on the
    // capture's tick, not when nri-trace was stopped.
    let spans = |p: &Path| {
        std::fs::read_to_string(p)
            .expect("nri-trace's output")
            .lines()
            .filter(|l| l.contains(r#""type":"cri_span""#))
            .count()
    };
    let (stdout, _, _) = TraceProc::paths(&out);
    let (before, all) = (spans(&TraceProc::before_stop(&out)), spans(&stdout));
    assert!(all >= 21, "{all} CRI spans");
    assert_eq!(before, all, "CRI spans printed before the stop");
    let ticks = lab_trace::raw_events(&out)
        .iter()
        .filter(|e| matches!(e, nri_trace::capture::CaptureEvent::Tick { .. }))
        .count();
    assert!(ticks > 0, "no tick in the raw capture");
    // The conformance table, clause by clause as each runtime behaves
    // (docs/contract.md, docs/lab.md "The lab tests per runtime").
    let conformance = json_lines(&out, "conformance");
    eprintln!("happy: conformance on {}: {conformance:#?}", runtime.name());
    let clause = |name: &str| {
        let c: Vec<_> = conformance.iter().filter(|c| c["clause"] == name).collect();
        assert!(c.len() <= 1, "{c:?}");
        c.first().copied()
    };
    let counts =
        |c: &serde_json::Value| (c["held"].as_u64().unwrap(), c["broken"].as_u64().unwrap());
    let version = match runtime {
        Runtime::Containerd17 => "containerd 1.7.",
        Runtime::Containerd21 => "containerd 2.1.",
        Runtime::CriO => "cri-o 1.33.",
    };
    for c in &conformance {
        let named = c["runtime"].as_str().expect("the runtime's version");
        assert!(named.starts_with(version), "{c}");
    }
    let report = String::from_utf8_lossy(&report.stdout);
    match runtime {
        // The pause process and the plugins' RunPodSandbox (the contract
        // draft's "the sandbox is running"): containerd 1.7 calls the
        // plugins after `runc create` and before `runc start` of the
        // sandbox's container, on every pod (its pause starts tens of ms
        // later). Host-network pods: the netns
        // clause is never decided on containerd (it gives them no netns).
        Runtime::Containerd17 => {
            assert_eq!(conformance.len(), 1, "{conformance:?}");
            let c = clause("sandbox-running-at-run-pod-sandbox").expect("the sandbox clause");
            assert_eq!(counts(c), (0, 3), "broken on every pod: {c}");
            assert_eq!(c["broken_case"]["kernel"]["path"], "/pause", "{c}");
            let case = &c["broken_case"];
            assert!(
                case["kernel"]["at"]["mono_ns"].as_u64() > case["delivered"]["mono_ns"].as_u64(),
                "{c}"
            );
            check_runc_before_hook(&records, false);
            assert!(
                report.contains("sandbox-running-at-run-pod-sandbox: "),
                "{report}"
            );
        }
        // 2.1 calls the plugins once `runc start` returned: the sandbox's
        // container runs (runc create and start ran before the delivery,
        // checked below), held at the runtime's level; its pause program's
        // execve then races the hook (docs/contract.md: 3 of 3 held in two
        // runs, 2 of 3 in another): every pod is decided, with /pause as
        // its program, and the clause held on at least one (1.7: on none).
        Runtime::Containerd21 => {
            assert_eq!(conformance.len(), 1, "{conformance:?}");
            let c = clause("sandbox-running-at-run-pod-sandbox").expect("the sandbox clause");
            let (held, broken) = counts(c);
            assert_eq!(held + broken, 3, "every pod decided: {c}");
            assert!(held >= 1, "{c}");
            for case in [&c["broken_case"], &c["held_case"]] {
                assert!(
                    case.is_null() || case["kernel"]["path"] == "/pause",
                    "the sandbox's program: {c}"
                );
            }
            check_runc_before_hook(&records, true);
            assert!(
                report.contains("sandbox-running-at-run-pod-sandbox: "),
                "{report}"
            );
        }
        // CRI-O pins a netns file even for a host-network pod (pinns
        // -n=host: the host's netns, bind-mounted under namespaces_dir) and
        // gives it to the plugins; it unpins it before their StopPodSandbox
        // as for an own netns: broken on each of the 3 pods, counted once
        // per pod. No pause process: the sandbox clause is not decided.
        Runtime::CriO => {
            assert_eq!(conformance.len(), 1, "{conformance:?}");
            let c = clause("stop-pod-sandbox-before-netns-teardown").expect("the netns clause");
            assert_eq!(counts(c), (0, 3), "{c}");
            assert!(
                report.contains("stop-pod-sandbox-before-netns-teardown: "),
                "{report}"
            );
        }
    }
}

/// The OCI runtime's runs (`runc` execs: create, then start) within each
/// RunPodSandbox before the first RUN_POD_SANDBOX delivery, as the probes
/// saw them (the pods are made one after the other). containerd 2.x calls
/// the plugins once the sandbox controller's Start returned
/// (internal/cri/server/sandbox_run.go), i.e. after `runc create` and
/// `runc start`: at least 2, the sandbox is running at the runtime's level
/// (`started_first`). containerd 1.7.24 calls them between the two: its
/// `runc create` (with runc's init: `/proc/self/exe`, `/dev/fd/N`) comes
/// before, its `runc start` after, on every pod as measured: exactly 1.
/// (On 2.x the pause program's own execve then races the hook: the
/// clause's count.)
fn check_runc_before_hook(records: &[Record], started_first: bool) {
    let runc: Vec<u64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Observed(Observation::Sandbox(e)) => match &e.op {
                SandboxOp::Exec { path } if e.comm == "runc" && path.ends_with("/runc") => {
                    Some(e.ts.mono_ns)
                }
                _ => None,
            },
            _ => None,
        })
        .collect();
    let mut pods = 0;
    for r in records {
        let Record::CriSpan(s) = r else { continue };
        if s.call.method.as_deref() != Some("RunPodSandbox") {
            continue;
        }
        let start = s.call.start.expect("the call's start").mono_ns;
        let delivered = s
            .hooks
            .iter()
            .filter(|h| h.hook == "RUN_POD_SANDBOX")
            .filter_map(|h| h.call.start.map(|t| t.mono_ns))
            .min()
            .expect("a RUN_POD_SANDBOX delivery");
        let before = runc
            .iter()
            .filter(|at| (start..delivered).contains(*at))
            .count();
        eprintln!(
            "sandbox {:?}: runc run {before} times in RunPodSandbox before the first delivery",
            s.call.sandbox_id
        );
        if started_first {
            assert!(
                before >= 2,
                "{:?}: the plugins were told before runc create and start ran",
                s.call.sandbox_id
            );
        } else {
            assert_eq!(
                before, 1,
                "{:?}: not runc create alone before the plugins",
                s.call.sandbox_id
            );
        }
        pods += 1;
    }
    assert_eq!(pods, 3, "RunPodSandbox spans");
}

#[test]
fn trace_plugin_timeout_found() {
    check_plugin_timeout(None);
}

#[test]
fn ctrd21_trace_plugin_timeout_found() {
    check_plugin_timeout(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_plugin_timeout_found() {
    check_plugin_timeout(Some(Runtime::CriO));
}

fn check_plugin_timeout(rt: Option<Runtime>) {
    let Some((out, records)) = traced_on(rt, "plugin-timeout") else {
        return;
    };
    let (truth, _) = check_against_truth("plugin-timeout", &out, &records);
    // Each delivery 10-hang's record shows it left unanswered is one
    // timed-out call (checked one by one above): one, on every runtime.
    let hung = truth
        .iter()
        .filter(|t| {
            matches!(t, Truth::Nri { plugin, action: truth::Action::Hang, .. } if plugin == "hang")
        })
        .count();
    let timed_out = nri_check::calls(&records)
        .iter()
        .filter(|c| {
            c.plugin.label() == "10-hang"
                && c.outcome == nri_trace::model::nri_call::Outcome::TimedOut
        })
        .count();
    assert_eq!((timed_out, hung), (1, 1), "timed-out calls of 10-hang");
    // The runtime closed its connection.
    assert!(records.iter().any(|r| matches!(
        r,
        Record::Observed(Observation::NriPluginGone { plugin, .. }) if plugin.label() == "10-hang"
    )));
    let f = findings(&records);
    assert!(
        f.iter()
            .any(|(r, p, c)| *r == PLUGIN_TIMEOUT && p.as_deref() == Some("10-hang") && *c),
        "{f:?}"
    );
    // containerd's own timer fired: it closed the plugin's connection.
    let m = finding_details(&records, PLUGIN_TIMEOUT);
    assert!(
        m.iter().any(|(_, d)| matches!(
            d,
            Detail::PluginTimeout {
                connection_closed: true,
                ..
            }
        )),
        "{m:?}"
    );
}

#[test]
fn trace_teardown_error_found() {
    check_teardown_error(None);
}

#[test]
fn ctrd21_trace_teardown_error_found() {
    check_teardown_error(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_teardown_error_found() {
    check_teardown_error(Some(Runtime::CriO));
}

fn check_teardown_error(rt: Option<Runtime>) {
    let runtime = runtime_of(rt);
    let Some((out, records)) = traced_on(rt, "teardown-error") else {
        return;
    };
    let (truth, _) = check_against_truth("teardown-error", &out, &records);
    check_correlation("teardown-error", &out);
    // containerd goes on past the failing hook: the pod is gone, and
    // explain says which hook failed on the way.
    let v = explain(&out, "tderr-0");
    assert_eq!(v["verdict"], "gone", "{v}");
    let s = v["sentence"].as_str().unwrap();
    assert!(
        s.contains("on the way, plugin hook 05-failer STOP_POD_SANDBOX: error ")
            && s.contains("teardown refused during StopPodSandbox"),
        "{s}"
    );
    let f = findings(&records);
    let teardown: Vec<_> = f
        .iter()
        .filter(|(r, _, _)| *r == TEARDOWN_HOOK_FAILED)
        .collect();
    // StopPodSandbox and RemovePodSandbox both refused by 05-failer.
    assert!(teardown.len() >= 2, "{f:?}");
    assert!(teardown
        .iter()
        .all(|(_, p, c)| p.as_deref() == Some("05-failer") && *c));
    // containerd 1.7 stops the teardown delivery at the failing plugin: the
    // higher-index observer, subscribed, never got StopPodSandbox (its
    // own truth agrees), and the finding names it.
    let observer_got_stop = truth.iter().any(|t| {
        matches!(t, Truth::Nri { plugin, event: Some(e), .. }
            if plugin == "observer" && e == "STOP_POD_SANDBOX")
    });
    let named = records.iter().any(|r| {
        matches!(r, Record::Violation(v)
            if v.rule == TEARDOWN_HOOK_FAILED
                && matches!(&v.detail, Detail::TeardownHookFailed { not_called, .. }
                    if not_called.iter().any(|p| p == "50-observer")))
    });
    assert_eq!(named, !observer_got_stop);
    // What the runtime answered the CRI caller: containerd logs the
    // plugin's StopPodSandbox error and goes on (sandbox_stop.go); CRI-O
    // returns it (server/sandbox_stop_linux.go returns
    // `s.nri.stopPodSandbox`'s error), on every try. nri-trace reports
    // each call failed exactly when the driver saw it fail.
    let failed = failed_calls_traced_failed("teardown-error", &truth, &records);
    let stop_failed = failed.iter().any(|m| m == "StopPodSandbox");
    assert_eq!(stop_failed, runtime == Runtime::CriO, "{failed:?}");
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
                    if s.call.method.as_deref() == Some(method.as_str())
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

/// A RunPodSandbox held 3 s by a plugin, a 1 s client deadline, retries:
/// the name-reservation finding, certain; the slow hook over its budget
/// (containerd passes the CRI deadline left as the hook's timeout); when
/// containerd's own deadline fires first, plugin-timeout (a race). Nothing
/// else: in particular the plugin, which got the RunPodSandbox (still busy
/// with it when containerd gave up and sent StopPodSandbox), is not "never
/// told" of the pod.
///
/// Other runtimes answer the retries otherwise (docs/lab.md): containerd
/// 2.1 answers the second try "name is reserved" and the driver adopts the
/// sandbox it lists; CRI-O makes the retry wait for the first request, or
/// tears the timed-out sandbox down and makes a new one (its first try may
/// even succeed once NRI closed the slow plugin). So the finding is
/// expected exactly when the driver's own record shows a RunPodSandbox
/// requested again after a try ran into its deadline; and each try nri-trace
/// reports failed exactly when the driver saw it fail.
fn check_deadline_retry(rt: Option<Runtime>, scenario: &str) {
    let runtime = runtime_of(rt);
    let Some((out, records)) = traced_on(rt, scenario) else {
        return;
    };
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let tries: Vec<&truth::Outcome> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Cri {
                method, outcome, ..
            } if method == "RunPodSandbox" => Some(outcome),
            _ => None,
        })
        .collect();
    eprintln!("{scenario}: the driver's RunPodSandbox tries: {tries:?}");
    let retried_after_deadline = tries
        .iter()
        .position(|o| matches!(o, truth::Outcome::DeadlineExceeded))
        .is_some_and(|i| i + 1 < tries.len());
    if runtime == Runtime::Containerd17 {
        // 1.7 holds the name until the first request ends: the driver
        // always retries (third try ok).
        assert!(retried_after_deadline, "{tries:?}");
    }
    failed_calls_traced_failed(scenario, &truth, &records);
    cri_check::assert_every_call(scenario, &truth, &records, cri_check::Allow::default());
    assert_expiry_and_retry(scenario, runtime, &truth, &records);
    let f = findings(&records);
    assert_eq!(
        f.iter().any(|(r, _, c)| *r == NAME_RESERVATION_RETRY && *c),
        retried_after_deadline,
        "{scenario} on {}: {f:?}",
        runtime.name()
    );
    assert!(
        f.iter().all(
            |(r, _, _)| [NAME_RESERVATION_RETRY, HOOK_OVER_BUDGET, PLUGIN_TIMEOUT].contains(r)
        ),
        "{scenario}: {f:?}"
    );
}

/// The traced RunPodSandbox calls are the driver's tries, one for one and
/// in order, each ending as the driver saw it: a try that ran into its
/// deadline as the client's expiry of about its 1 s deadline, the retries
/// asking for the first try's name, uid and attempt (the name reservation
/// kubelet runs into). The last try succeeds, or, where the driver's
/// record says it adopted the sandbox of the timed-out try, is the
/// runtime's "name is reserved" (containerd 2.1 lists the sandbox READY
/// while its NRI RunPodSandbox hook is still held: docs/lab.md, "Scenarios
/// on containerd 2.1"; the scenario's verify allows this on 2.x only).
/// On containerd (1.7 and 2.1) the plugin's 3 s hook always holds the
/// first try past its deadline, and the driver retries; CRI-O calls NRI
/// with the request's context and closes the slow plugin once the hook
/// outlives it, so its first try may yet succeed (docs/lab.md, "Scenarios
/// on CRI-O"): there the tries are whatever the driver's record shows.
fn assert_expiry_and_retry(scenario: &str, runtime: Runtime, truth: &[Truth], records: &[Record]) {
    let since = truth::observer_attached_ns(truth).expect("attach note");
    let tries: Vec<(&truth::Outcome, Option<u64>)> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Cri {
                method,
                outcome,
                deadline_ms,
                start_mono_ns,
                ..
            } if method == "RunPodSandbox" && *start_mono_ns >= since => {
                Some((outcome, *deadline_ms))
            }
            _ => None,
        })
        .collect();
    let runs: Vec<_> = cri_check::calls(records)
        .into_iter()
        .filter(|c| c.method.as_deref() == Some("RunPodSandbox"))
        .collect();
    eprintln!(
        "{scenario} on {}: RunPodSandbox traced {:?}",
        runtime.name(),
        runs.iter().map(|r| &r.outcome).collect::<Vec<_>>()
    );
    assert_eq!(
        runs.len(),
        tries.len(),
        "{scenario}: the driver's tries {tries:?}"
    );
    if runtime != Runtime::CriO {
        assert!(
            runs.len() >= 2 && matches!(tries[0].0, truth::Outcome::DeadlineExceeded),
            "{scenario}: a timed-out try and a retry: {tries:?}"
        );
    }
    for (run, (outcome, deadline_ms)) in runs.iter().zip(&tries) {
        match outcome {
            truth::Outcome::DeadlineExceeded => {
                assert_eq!(run.outcome, CriOutcome::DeadlineExceeded, "{run:?}");
                let d = deadline_ms.expect("the try's deadline") * 1_000_000;
                assert!(
                    run.deadline_ns.is_some_and(|x| x > d - d / 10 && x <= d),
                    "{run:?}"
                );
            }
            truth::Outcome::Ok => assert_eq!(run.outcome, CriOutcome::Ok, "{run:?}"),
            truth::Outcome::Error { message, .. } => assert!(
                matches!(&run.outcome, CriOutcome::Error { message: m, .. } if m.contains(message.as_str())),
                "{run:?}: the driver got {message:?}"
            ),
        }
    }
    let last = runs.last().expect("a RunPodSandbox");
    let adopted = truth
        .iter()
        .any(|t| matches!(t, Truth::Note { text, .. } if text.starts_with("adopted sandbox")));
    if adopted {
        assert!(
            matches!(&last.outcome, CriOutcome::Error { message, .. } if message.contains("is reserved for")),
            "{last:?}"
        );
    } else {
        assert_eq!(last.outcome, CriOutcome::Ok, "{last:?}");
    }
    let first = runs[0].pod.as_ref().expect("pod of the first try");
    for r in &runs[1..] {
        let p = r.pod.as_ref().expect("pod of a retry");
        assert_eq!(
            (&p.name, &p.uid, p.attempt),
            (&first.name, &first.uid, first.attempt)
        );
    }
}

#[test]
fn trace_name_reservation_retry_found() {
    check_deadline_retry(None, "cri-deadline-retry");
}

#[test]
fn ctrd21_trace_name_reservation_retry_found() {
    check_deadline_retry(Some(Runtime::Containerd21), "cri-deadline-retry");
}

#[test]
fn crio_trace_name_reservation_retry_found() {
    check_deadline_retry(Some(Runtime::CriO), "cri-deadline-retry");
}

/// The same with grpc-go's client (kubelet's gRPC stack): the client
/// resets the stream when its context expires (containerd 2.1's server
/// resets it first, grpc/grpc-go#8071: docs/lab.md).
#[test]
fn trace_name_reservation_retry_found_go() {
    check_deadline_retry(None, "cri-deadline-retry-go");
}

#[test]
fn ctrd21_trace_name_reservation_retry_found_go() {
    check_deadline_retry(Some(Runtime::Containerd21), "cri-deadline-retry-go");
}

#[test]
fn crio_trace_name_reservation_retry_found_go() {
    check_deadline_retry(Some(Runtime::CriO), "cri-deadline-retry-go");
}

/// `watch` attached to a CRI connection mid-stream (its HPACK table holds
/// entries it never saw), tonic and grpc-go clients: no plugins, no
/// finding, and the calls after the attach are still traced as spans,
/// each call the driver made after the attach found and agreeing, none
/// mislabeled (a deadline may hide in a pre-attach HPACK slot). h2
/// (tonic's HPACK encoder) sends :path as a literal it does not index:
/// methods stay known. grpc-go indexes every header: the paths of methods
/// called before the attach are hidden, and most are recovered.
#[test]
fn trace_cri_late_attach_finds_nothing() {
    check_cri_late_attach(None);
}

#[test]
fn ctrd21_trace_cri_late_attach_finds_nothing() {
    check_cri_late_attach(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_cri_late_attach_finds_nothing() {
    check_cri_late_attach(Some(Runtime::CriO));
}

fn check_cri_late_attach(rt: Option<Runtime>) {
    for scenario in ["cri-late-attach", "cri-late-attach-go"] {
        let Some((out, records)) = traced_on(rt, scenario) else {
            return;
        };
        let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
        let allow = cri_check::Allow {
            deadline_hidden: true,
            identity_missing: false,
        };
        let report = cri_check::assert_every_call(scenario, &truth, &records, allow);
        // Calls whose `:path` was hidden by HPACK (inferred or unknown).
        let hidden = cri_check::calls(&records)
            .iter()
            .filter(|c| !matches!(c.identified, Identified::Known))
            .count();
        eprintln!(
            "{scenario}: {} calls after attach; {hidden} with :path hidden by HPACK",
            report.compared
        );
        if scenario == "cri-late-attach-go" {
            assert!(hidden > 0, "expected hidden :path values from grpc-go");
            assert!(report.inferred > 0, "no hidden method recovered");
        }
        assert_eq!(findings(&records), vec![], "{scenario}");
        let spans = records
            .iter()
            .filter(|r| matches!(r, Record::CriSpan(_)))
            .count();
        assert!(spans >= 40, "{scenario}: {spans} CRI spans");
    }
}

/// A late attach to a connection that made the same mix before, with NRI
/// plugins registered before the observer (a pre-launched and external
/// test plugins; with grpc-go also the NRI project's logger), each hooking
/// by its IDX-NAME, marked inferred: every CRI call after the attach is found and
/// none mislabeled (against the driver's truth); among the calls during
/// which the runtime delivered an NRI event at most 2 % stay unknown; every
/// delivery sits under a CRI call; nothing is found.
#[test]
fn trace_cri_late_attach_with_plugins_names_the_calls() {
    check_cri_late_attach_with_plugins(None);
}

#[test]
fn ctrd21_trace_cri_late_attach_with_plugins_names_the_calls() {
    check_cri_late_attach_with_plugins(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_cri_late_attach_with_plugins_names_the_calls() {
    check_cri_late_attach_with_plugins(Some(Runtime::CriO));
}

fn check_cri_late_attach_with_plugins(rt: Option<Runtime>) {
    for scenario in ["cri-late-attach-nri", "cri-late-attach-go-nri"] {
        let Some((out, records)) = traced_on(rt, scenario) else {
            return;
        };
        let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
        let since = truth::observer_attached_ns(&truth).expect("attach note");
        let calls = cri_check::calls(&records);
        let allow = cri_check::Allow {
            deadline_hidden: true,
            identity_missing: true,
        };
        let all = cri_check::compare(&truth, &calls, since, allow);
        let nri = cri_check::compare(&cri_check::with_nri_during(&truth), &calls, since, allow);
        eprintln!(
            "{scenario}: all calls: {}\n{scenario}: calls with an NRI delivery: {}",
            all.line(),
            nri.line()
        );
        assert!(
            all.problems.is_empty(),
            "{scenario}:\n{}",
            all.problems.join("\n")
        );
        assert_eq!(all.mislabeled, 0, "{scenario}");
        assert_eq!(all.matched, all.compared, "{scenario}");
        assert!(nri.compared >= 20, "{scenario}: {}", nri.line());
        assert!(
            nri.unknown * 50 <= nri.matched,
            "{scenario}: {}",
            nri.line()
        );
        let uncaused = trace_check::uncaused_in_flight(&records);
        assert_eq!(
            uncaused,
            Vec::<String>::new(),
            "{scenario}: deliveries with no CRI cause"
        );
        assert_eq!(findings(&records), vec![], "{scenario}");
        trace_check::check_late_plugins(scenario, &records);
    }
}

#[test]
fn trace_slow_plugin_share_of_run_pod_sandbox() {
    check_slow_plugin(None);
}

#[test]
fn ctrd21_trace_slow_plugin_share_of_run_pod_sandbox() {
    check_slow_plugin(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_slow_plugin_share_of_run_pod_sandbox() {
    check_slow_plugin(Some(Runtime::CriO));
}

fn check_slow_plugin(rt: Option<Runtime>) {
    let Some((out, records)) = traced_on(rt, "slow-plugin") else {
        return;
    };
    check_against_truth("slow-plugin", &out, &records);
    // The plain plugin's RunPodSandbox waited ~500 ms behind the slow one.
    let queued = nri_check::hooks(&records).iter().any(|s| {
        s.call.plugin.label() == "20-plain"
            && s.hook == "RUN_POD_SANDBOX"
            && s.queued_ns.is_some_and(|q| q >= 500_000_000)
    });
    assert!(queued, "20-plain queued behind 10-slow");
    check_correlation("slow-plugin", &out);
    assert_eq!(
        findings(&records),
        vec![],
        "a 500 ms hook within a 2 s timeout (budget 1 s) is fine"
    );
    // RunPodSandbox is held 500 ms by the slow plugin: most of the call is
    // NRI time.
    let run = records
        .iter()
        .find_map(|r| match r {
            Record::CriSpan(s) if s.call.method.as_deref() == Some("RunPodSandbox") => Some(s),
            _ => None,
        })
        .expect("a RunPodSandbox span");
    assert!(run.nri_ns >= 500_000_000, "{run:?}");
    assert!(run.nri_permille.is_some_and(|p| p >= 500), "{run:?}");
}

/// A plugin that registers while a RunPodSandbox is in flight (held 3 s by
/// a slow plugin): whatever the runtime then does with the pod for the late
/// plugin, nri-trace reports it against the truth the late plugin wrote.
#[test]
fn trace_late_registration() {
    check_late_registration(None);
}

#[test]
fn ctrd21_trace_late_registration() {
    check_late_registration(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_late_registration() {
    check_late_registration(Some(Runtime::CriO));
}

fn check_late_registration(rt: Option<Runtime>) {
    let Some((out, records)) = traced_on(rt, "late-registration") else {
        return;
    };
    check_correlation("late-registration", &out);
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let late_got_run = truth.iter().any(|t| {
        matches!(t, Truth::Nri { plugin, event: Some(e), pod: Some(p), .. }
            if plugin == "late" && e == "RUN_POD_SANDBOX" && p.name == "late-pod")
    });
    let late_got_later = truth.iter().any(|t| {
        matches!(t, Truth::Nri { plugin, event: Some(e), pod: Some(p), .. }
            if plugin == "late" && e != "RUN_POD_SANDBOX" && p.name == "late-pod")
    });
    // containerd 2.1 and CRI-O 1.33 (NRI 0.9.1-pre) hold the late
    // plugin's Synchronize until the RunPodSandbox in flight is done, and
    // list late-pod in it (nri#63 closed): no race, no finding for 20-late
    // (both measured); 1.7 synchronizes at once, without it.
    let late_synced = truth.iter().any(|t| {
        matches!(t, Truth::Plugin { plugin, what: PluginEvent::Synchronized { pods, .. }, .. }
            if plugin == "late" && pods.iter().any(|p| p.name == "late-pod"))
    });
    let f = findings(&records);
    let race = f
        .iter()
        .any(|(r, p, c)| *r == POD_UNKNOWN_TO_PLUGIN && p.as_deref() == Some("20-late") && *c);
    eprintln!(
        "late-registration: the late plugin got RunPodSandbox of late-pod: {late_got_run}, \
         late-pod in its Synchronize: {late_synced}, later events of it: {late_got_later}; \
         Synchronize-race finding: {race}"
    );
    // The finding fires exactly when the late plugin's own record shows
    // the race: later events for a pod it heard of neither in a
    // RunPodSandbox nor in its Synchronize.
    assert_eq!(
        race,
        !late_got_run && !late_synced && late_got_later,
        "{f:?}"
    );
    // The conformance table's Synchronize clause, as the plugins' and the
    // driver's records imply it: broken on 1.7 (late-pod in flight, not
    // listed, no RunPodSandbox), held where the runtime waits.
    let want = trace_check::sync_clause_expected(&truth);
    let clause: Vec<_> = json_lines(&out, "conformance")
        .into_iter()
        .filter(|c| c["clause"] == "synchronize-tells-existing-pods")
        .collect();
    eprintln!("late-registration: Synchronize clause {clause:?}, from the truth {want:?}");
    assert_eq!(clause.len(), 1, "{clause:?}");
    assert_eq!(
        (clause[0]["held"].as_u64(), clause[0]["broken"].as_u64()),
        (Some(want.0), Some(want.1)),
        "{clause:?}"
    );
    assert_eq!(
        want.1 > 0,
        !late_got_run && !late_synced,
        "the truth's clause and its race"
    );
}

/// A container that ignores SIGTERM: StopContainer waits for the grace
/// period and SIGKILL. Slow, but the NRI contract holds: no finding. The
/// kernel shows why it was slow: explain lists the SIGTERM the kernel
/// reports ignored, the SIGKILL 2 s later and the exit it caused. The
/// same on the three runtimes (docs/lab.md: StopContainer 2081, 2055 and
/// 2036 ms).
#[test]
fn trace_ignore_sigterm_finds_nothing() {
    check_ignore_sigterm(None);
}

#[test]
fn ctrd21_trace_ignore_sigterm_finds_nothing() {
    check_ignore_sigterm(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_ignore_sigterm_finds_nothing() {
    check_ignore_sigterm(Some(Runtime::CriO));
}

fn check_ignore_sigterm(rt: Option<Runtime>) {
    let Some((out, records)) = traced_on(rt, "ignore-sigterm") else {
        return;
    };
    check_correlation("ignore-sigterm", &out);
    // Every CRI call ok (the scenario's verify), and so for nri-trace.
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let failed = failed_calls_traced_failed("ignore-sigterm", &truth, &records);
    assert_eq!(failed, Vec::<String>::new());
    assert_eq!(findings(&records), vec![]);
    let v = explain(&out, "ignore-sigterm-0");
    assert_eq!(v["verdict"], "gone", "{v}");
    let kernel = kernel_lines(&v);
    let at = |what: &str| {
        kernel
            .iter()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {kernel:#?}"))
    };
    let term = at("sent SIGTERM to pid ");
    assert!(kernel[term].ends_with(": ignored"), "{}", kernel[term]);
    let kill = at("sent SIGKILL to pid ");
    let exit = at("exited: killed by SIGKILL");
    assert!(term < kill && kill < exit, "{kernel:#?}");
}

/// The NRI project's own logger plugin (Go) beside a test plugin: decoded,
/// correlated, no finding. The logger's stub is an encoder independent of
/// ours: every call it got is decoded with its registered name, and every
/// event it logged itself is one of those calls; every delivery either
/// plugin recorded, and every CRI call the driver made, is matched
/// ([`check_against_truth`]). The same on every runtime (the scenario's
/// verify: the logger and the test plugin saw the same events in the same
/// order on each).
#[test]
fn trace_upstream_witness_finds_nothing() {
    check_upstream_witness(None);
}

#[test]
fn ctrd21_trace_upstream_witness_finds_nothing() {
    check_upstream_witness(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_upstream_witness_finds_nothing() {
    check_upstream_witness(Some(Runtime::CriO));
}

fn check_upstream_witness(rt: Option<Runtime>) {
    use nri_trace::model::nri_call::{IdentitySource, Outcome};
    let scenario = "upstream-witness";
    let Some((out, records)) = traced_on(rt, scenario) else {
        return;
    };
    let (checked, _) = check_correlation(scenario, &out);
    assert!(checked > 0);
    assert_eq!(findings(&records), vec![]);
    let (truth, _) = check_against_truth(scenario, &out, &records);
    // The logger registered while traced: named by its RegisterPlugin.
    let calls = nri_check::calls(&records);
    assert!(
        calls
            .iter()
            .any(|c| c.plugin.source == IdentitySource::RegisterPlugin
                && c.plugin.label() == "99-upstream-logger"
                && c.event.is_some()
                && c.outcome == Outcome::Ok),
        "no event delivered to the upstream logger"
    );
    // Every event the logger itself logged (truth notes "upstream-logger:
    // EVENT pod|container ID") is a call nri-trace decoded for it.
    let (mut logged, mut own) = (0, 0);
    for t in &truth {
        let Truth::Note { text, .. } = t else {
            continue;
        };
        let Some(rest) = text.strip_prefix("upstream-logger: ") else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let (Some(event), Some(kind), Some(id)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if event == "SYNCHRONIZE" {
            continue;
        }
        logged += 1;
        // The logger logs a container event's pod too: the event's own
        // object is the pod for pod events, the container otherwise.
        if event.ends_with("POD_SANDBOX") == (kind == "pod") {
            own += 1;
        }
        let found = calls.iter().any(|c| {
            c.plugin.label() == "99-upstream-logger"
                && c.event.map(|e| e.as_str_name()) == Some(event)
                && match kind {
                    "pod" => c.pod.as_ref().is_some_and(|p| p.id == id),
                    _ => c.container.as_ref().is_some_and(|k| k.id == id),
                }
        });
        assert!(
            found,
            "logger logged {event} {kind} {id}; nri-trace has no such call"
        );
    }
    eprintln!(
        "{scenario} on {}: {checked} deliveries under their CRI calls; the logger logged {own} \
         events ({logged} objects), each decoded",
        runtime_of(rt).name()
    );
    // As many as the test plugin beside it got (the scenario's verify
    // checked they are the same events in the same order).
    let alpha = truth
        .iter()
        .filter(|t| {
            matches!(t, Truth::Nri { plugin, event: Some(e), .. }
                if plugin == "alpha" && e != "SYNCHRONIZE")
        })
        .count();
    assert_eq!(own, alpha, "events the logger logged, and alpha got");
}

/// Seven plugins (six test plugins and the upstream logger; five external,
/// two pre-launched) all registered before nri-trace attached: no
/// RegisterPlugin is seen, yet every plugin is named by its IDX-NAME,
/// inferred from its process, with the source that decided it; every
/// delivery the plugins recorded is under its CRI call with that name
/// (`check_correlation` compares the truth's index-name), and no rule
/// fires.
#[test]
fn trace_plugins_registered_before_attach_are_named() {
    check_plugins_before_attach(None);
}

#[test]
fn ctrd21_trace_plugins_registered_before_attach_are_named() {
    check_plugins_before_attach(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_plugins_registered_before_attach_are_named() {
    check_plugins_before_attach(Some(Runtime::CriO));
}

fn check_plugins_before_attach(rt: Option<Runtime>) {
    use nri_trace::model::{
        nri_call::{IdentitySource, PluginId},
        plugin_identity::{Clue, Confidence},
    };
    use nri_trace_lab::scenario::BEFORE_ATTACH_PLUGINS;
    let scenario = "plugins-before-attach";
    let Some((out, records)) = traced_on(rt, scenario) else {
        return;
    };
    let (checked, _) = check_correlation(scenario, &out);
    assert!(checked > 0);
    assert_eq!(findings(&records), vec![]);
    // The latest identity of each connection.
    let mut plugins: std::collections::BTreeMap<_, PluginId> = Default::default();
    for r in &records {
        if let Record::Observed(Observation::NriPlugin { conn, plugin, .. }) = r {
            plugins.insert(*conn, plugin.clone());
        }
    }
    let labels: Vec<String> = plugins.values().map(PluginId::label).collect();
    eprintln!("{scenario}: plugins {labels:?}");
    // Which source decides (name, index), per plugin.
    let want = |name: &str| match name {
        "gamma" | "pre-plain" => (Clue::Env, Clue::Env),
        "delta-long-plugin-name" => (Clue::Argv0, Clue::Argv0),
        "epsilon" => (Clue::Argv0, Clue::Flag),
        _ => (Clue::Flag, Clue::Flag),
    };
    for (name, idx) in BEFORE_ATTACH_PLUGINS {
        let label = format!("{idx}-{name}");
        let p = plugins
            .values()
            .find(|p| p.label() == label)
            .unwrap_or_else(|| panic!("no plugin {label} in {labels:?}"));
        assert_eq!(p.source, IdentitySource::Inferred, "{p:?}");
        let how = p.inferred.as_ref().expect("inferred");
        assert_eq!(
            (how.name_from, how.index_from),
            (Some(want(name).0), Some(want(name).1)),
            "{p:?}"
        );
        assert_eq!(how.confidence, Confidence::High, "{p:?}");
        assert!(
            how.conflicts.is_empty() && !how.evidence.is_empty(),
            "{p:?}"
        );
    }
    // The comm the issue saw alone, cut at 15 bytes, beside the full name.
    let delta = plugins
        .values()
        .find(|p| p.name.as_deref() == Some("delta-long-plugin-name"))
        .unwrap();
    assert_eq!(delta.comm.as_deref(), Some("40-delta-long-p"));
    // Nothing left as comm[pid], nothing registered under our eyes.
    assert_eq!(plugins.len(), BEFORE_ATTACH_PLUGINS.len(), "{labels:?}");
    // Every delivery is named.
    for r in &records {
        if let Record::CriSpan(s) = r {
            for h in &s.hooks {
                let l = h.call.plugin.label();
                assert!(
                    BEFORE_ATTACH_PLUGINS
                        .iter()
                        .any(|(n, i)| l == format!("{i}-{n}")),
                    "{l}"
                );
            }
        }
    }
}

/// A process holding the container's rootfs (its cwd) while the pod is torn
/// down with a 12 s deadline: the teardown blocks until the deadline.
/// Every delivery is correlated; no NRI rule fires, the kernel rule
/// teardown-unmount-failed does (the shim's unmount fails with EBUSY); each
/// CRI call the driver saw fail is reported failed by nri-trace, at the
/// same time. While the pod is stuck (the scenario keeps the holder 10 s
/// more), `nri-trace explain` on the observations recorded so far names the
/// blocked call, the failed unmount and the holder: its pid and the rootfs
/// it holds.
#[test]
fn trace_busy_mount() {
    check_busy_mount(None);
}

#[test]
fn ctrd21_trace_busy_mount() {
    check_busy_mount(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_busy_mount() {
    check_busy_mount(Some(Runtime::CriO));
}

fn check_busy_mount(rt: Option<Runtime>) {
    let runtime = runtime_of(rt);
    let Some((out, records, v)) = traced_and_explained(rt, "busy-mount", "busy", "holder") else {
        return;
    };
    check_correlation("busy-mount", &out);
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    // Each CRI call nri-trace reports failed exactly when the driver saw it
    // fail, at the same time.
    let failed = failed_calls_traced_failed("busy-mount", &truth, &records);
    // explain, while the mount was held: the holder the scenario started.
    let (holder_pid, rootfs) = truth
        .iter()
        .find_map(|t| match t {
            Truth::Note { text, .. } if text.starts_with("holder pid ") => {
                let mut w = text.split_whitespace();
                let pid: u32 = w.nth(2)?.parse().ok()?;
                Some((pid, text.rsplit(' ').next()?.to_string()))
            }
            _ => None,
        })
        .expect("holder note");
    if runtime == Runtime::CriO {
        check_busy_mount_crio(&records, &failed, &v, &rootfs);
        return;
    }
    // No NRI rule; the kernel's side: the shim's unmount of the rootfs
    // fails with EBUSY (retried every 50 ms, one finding).
    assert_eq!(
        findings(&records),
        vec![(TEARDOWN_UNMOUNT_FAILED, None, true)]
    );
    assert!(!failed.is_empty(), "the teardown did not block: {truth:?}");
    assert_eq!(v["verdict"], "blocked", "{v}");
    // Waited from the failed call to the moment explain ran (on the node).
    assert!(v["waited_ns"].as_u64().unwrap_or(0) > 0, "{v}");
    let sentence = v["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("StopContainer of container main did not complete"),
        "{sentence}"
    );
    assert!(
        sentence.contains(&format!(
            "pid {holder_pid} (sleep) holds container main's rootfs {rootfs} (its cwd"
        )),
        "{sentence}"
    );
    assert!(
        sentence.contains(&format!("unmounting {rootfs} failed with EBUSY")),
        "{sentence}"
    );
}

/// CRI-O tears the pod down with its rootfs held (docs/lab.md): every CRI
/// call of the driver succeeded, so no finding, and explain, while the
/// holder still had its cwd there, finds the pod gone; the kernel shows
/// why.
fn check_busy_mount_crio(
    records: &[Record],
    failed: &[String],
    v: &serde_json::Value,
    rootfs: &str,
) {
    assert_eq!(
        failed,
        Vec::<String>::new(),
        "the teardown blocked on CRI-O"
    );
    assert_eq!(findings(records), vec![]);
    assert_eq!(v["verdict"], "gone", "{v}");
    let umounts: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Observed(Observation::Sandbox(e)) => match &e.op {
                SandboxOp::Umount { path, flags, errno }
                    if path.starts_with(rootfs.trim_end_matches("/merged")) =>
                {
                    Some((path.clone(), *flags, *errno, e.comm.clone()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect();
    eprintln!("busy-mount on CRI-O: unmounts of the container's storage: {umounts:?}");
    // Why it does not block: crio unmounts the rootfs lazily (umount2 with
    // MNT_DETACH, containers/storage's overlay driver), which succeeds
    // with the holder's cwd inside; the probes saw it succeed.
    const MNT_DETACH: u64 = 2;
    assert!(
        umounts
            .iter()
            .any(|(path, flags, errno, comm)| path == rootfs
                && flags & MNT_DETACH != 0
                && *errno == 0
                && comm == "crio"),
        "no lazy unmount of {rootfs} by crio: {umounts:?}"
    );
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
    // The scenarios that keep a pod stuck read it (lab/src/scenario.rs).
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

/// A container process stuck in a FUSE read (state D) survives SIGKILL:
/// StopContainer runs into its deadline. The sandbox probes see the SIGKILL
/// and no exit: the finding process-survives-sigkill, for that pod; and
/// `explain`, while the pod is stuck, names the pid the scenario saw in
/// state D, alive after SIGKILL, with its state from /proc. The same on
/// the three runtimes (docs/lab.md: the first StopContainer runs into the
/// driver's deadline on each); each CRI call is reported failed exactly
/// when the driver saw it fail.
#[test]
fn trace_unkillable() {
    check_unkillable(None);
}

#[test]
fn ctrd21_trace_unkillable() {
    check_unkillable(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_unkillable() {
    check_unkillable(Some(Runtime::CriO));
}

fn check_unkillable(rt: Option<Runtime>) {
    let Some((out, records, v)) =
        traced_and_explained(rt, "unkillable", "unkillable", "stuck pid ")
    else {
        return;
    };
    check_correlation("unkillable", &out);
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    // The first StopContainer ran into its deadline (the scenario's
    // verify): nri-trace reports it failed, and every later call as the
    // driver saw it.
    let failed = failed_calls_traced_failed("unkillable", &truth, &records);
    assert!(failed.iter().any(|m| m == "StopContainer"), "{failed:?}");
    let pid: u32 = note(&truth, "stuck pid ")
        .split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .expect("stuck pid");
    assert_eq!(v["verdict"], "blocked", "{v}");
    let sentence = v["sentence"].as_str().unwrap();
    assert!(
        sentence.contains(&format!("pid {pid} (cat) of container ")),
        "{sentence}"
    );
    assert!(sentence.contains(" after SIGKILL "), "{sentence}");
    assert!(
        sentence.contains(&format!("on this node pid {pid} (cat) is in state D")),
        "{sentence}"
    );
    let f = findings(&records);
    assert!(
        f.iter()
            .any(|(rule, _, _)| *rule == PROCESS_SURVIVES_SIGKILL),
        "{f:?}"
    );
    assert!(
        f.iter()
            .all(|(rule, _, _)| *rule == PROCESS_SURVIVES_SIGKILL),
        "{f:?}"
    );
    // After the release the process exits, killed by the SIGKILL.
    let exited = records.iter().any(|r| {
        matches!(r, Record::Observed(Observation::Sandbox(s)) if s.tgid == pid
            && s.op == SandboxOp::Exit { status: Some(9) })
    });
    assert!(exited, "no exit of pid {pid} killed by SIGKILL");
}

/// An NRI plugin hangs in StopPodSandbox: the CRI call fails at its 5 s
/// deadline while the hook's request is unanswered (or containerd closed
/// the plugin at the deadline: both happen, see the scenario). `explain`
/// while the pod is stuck names the plugin and its StopPodSandbox hook.
/// containerd may then deliver StopPodSandbox to the next plugin after the
/// CRI call is over (with the expired context): that delivery has no CRI
/// cause, and nri-trace says so; any other uncaused delivery is an error.
///
/// CRI-O differs (docs/lab.md): the pod is not marked stopped, so the
/// retry delivers StopPodSandbox to the hung plugin again, and returns
/// only when NRI's 30 s request timeout closes it; the plain plugin is
/// told then. And CRI-O tears the pod's network down before it tells the
/// plugins (the netns clause broken, as in netns-teardown).
#[test]
fn trace_hung_teardown_hook() {
    check_hung_teardown_hook(None);
}

#[test]
fn ctrd21_trace_hung_teardown_hook() {
    check_hung_teardown_hook(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_hung_teardown_hook() {
    check_hung_teardown_hook(Some(Runtime::CriO));
}

fn check_hung_teardown_hook(rt: Option<Runtime>) {
    use nri_trace::model::nri_call::Outcome;
    let crio = runtime_of(rt) == Runtime::CriO;
    let Some((out, records, v)) =
        traced_and_explained(rt, "hung-teardown-hook", "hung-teardown", "hung hook kept")
    else {
        return;
    };
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    // Each CRI call reported failed exactly when the driver saw it fail:
    // the first StopPodSandbox (the scenario's verify), not the retry.
    let failed = failed_calls_traced_failed("hung-teardown-hook", &truth, &records);
    assert_eq!(failed, vec!["StopPodSandbox".to_string()], "{failed:?}");
    let stops: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) if s.call.method.as_deref() == Some("StopPodSandbox") => Some(s),
            _ => None,
        })
        .collect();
    let stop = stops
        .iter()
        .find(|s| !s.call.outcome.is_ok())
        .expect("a failed StopPodSandbox span");
    let stop_end = stop.call.end.expect("its end").mono_ns;
    // The hung hook is in the span, timed out, whether the runtime closed
    // 10-hung's connection (its deadline fired first) or left it open (the
    // client's cancel came first).
    let hung_in = |s: &nri_trace::engine::correlate::CriSpan| -> Vec<(String, Outcome)> {
        s.hooks
            .iter()
            .filter(|h| h.call.plugin.label() == "10-hung")
            .map(|h| (h.hook.as_str().to_string(), h.call.outcome.clone()))
            .collect()
    };
    assert_eq!(
        hung_in(stop),
        vec![("STOP_POD_SANDBOX".to_string(), Outcome::TimedOut)],
        "{stop:?}"
    );
    // As many StopPodSandbox hooks of 10-hung traced as the plugin
    // recorded deliveries: one on containerd (it calls a pod's hook once),
    // two on CRI-O.
    let delivered = truth
        .iter()
        .filter(|t| {
            matches!(t, Truth::Nri { plugin, event: Some(e), .. }
                if plugin == "hung" && e == "STOP_POD_SANDBOX")
        })
        .count();
    let traced: usize = stops
        .iter()
        .map(|s| {
            hung_in(s)
                .iter()
                .filter(|(h, _)| h == "STOP_POD_SANDBOX")
                .count()
        })
        .sum();
    assert_eq!(traced, delivered, "{stops:?}");
    assert_eq!(delivered, if crio { 2 } else { 1 });
    if crio {
        // The retry: 10-hung told again, unanswered until NRI's request
        // timeout closed it (plugin-timeout, the connection closed); then
        // 20-plain, in the same call.
        let retry = stops
            .iter()
            .find(|s| s.call.outcome.is_ok())
            .expect("an ok StopPodSandbox span");
        assert_eq!(
            hung_in(retry),
            vec![("STOP_POD_SANDBOX".to_string(), Outcome::TimedOut)],
            "{retry:?}"
        );
        assert!(
            retry
                .hooks
                .iter()
                .any(|h| h.call.plugin.label() == "20-plain" && h.hook == "STOP_POD_SANDBOX"),
            "{retry:?}"
        );
        let m = finding_details(&records, PLUGIN_TIMEOUT);
        assert!(
            m.iter().any(|(p, d)| *p == Some("10-hung")
                && matches!(d, Detail::PluginTimeout { hook, connection_closed: true, .. }
                    if hook == "STOP_POD_SANDBOX")),
            "{m:?}"
        );
    }
    for r in &records {
        if let Record::NriUncaused(u) = r {
            if u.no_cri_cause != nri_trace::engine::correlate::NoCause::NoCriCallInFlight {
                continue; // plugin lifecycle calls (register, configure, ...)
            }
            let c = &u.span.call;
            assert_eq!(u.span.hook, "STOP_POD_SANDBOX", "{c:?}");
            assert!(
                c.start.is_some_and(|t| t.mono_ns + 50_000_000 >= stop_end),
                "uncaused before the CRI call ended: {c:?}"
            );
        }
    }
    assert_eq!(v["verdict"], "blocked", "{v}");
    let sentence = v["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("10-hung") && sentence.contains("STOP_POD_SANDBOX"),
        "{sentence}"
    );
    assert!(
        sentence.contains("hook has not returned for")
            || sentence.contains("plugin hook 10-hung STOP_POD_SANDBOX: "),
        "{sentence}"
    );
    // The pod has its own netns: containerd told the plugins StopPodSandbox
    // before it unmounted it (it does so once the hook is over); CRI-O
    // tears the network down first (docs/contract.md).
    let netns: Vec<_> = json_lines(&out, "conformance")
        .into_iter()
        .filter(|c| c["clause"] == "stop-pod-sandbox-before-netns-teardown")
        .collect();
    assert_eq!(netns.len(), 1, "{netns:?}");
    let c = &netns[0];
    let (held, broken, case) = if crio {
        (0, 1, &c["broken_case"])
    } else {
        (1, 0, &c["held_case"])
    };
    assert_eq!(
        (c["held"].as_u64(), c["broken"].as_u64()),
        (Some(held), Some(broken)),
        "{c}"
    );
    assert!(
        case["kernel"]["path"]
            .as_str()
            .is_some_and(|p| p.contains("/netns/")),
        "{c}"
    );
}

/// The CRI client is killed while 10-hung holds StopPodSandbox: the
/// runtime gives up without closing the plugin's connection (its context
/// was cancelled, not expired), so nothing on the wire ends the hook. It
/// comes out timed out at its deadline, inside the StopPodSandbox span that
/// the client's going ended, on a connection that goes on carrying events:
/// the events the plugin recorded after the kill, traced on it in order.
/// Those differ (docs/lab.md): containerd sends REMOVE_CONTAINER and
/// REMOVE_POD_SANDBOX at the later teardown; CRI-O, which did not mark the
/// pod stopped, sends STOP_POD_SANDBOX again.
#[test]
fn trace_hung_teardown_client_gone() {
    check_hung_teardown_client_gone(None);
}

#[test]
fn ctrd21_trace_hung_teardown_client_gone() {
    check_hung_teardown_client_gone(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_hung_teardown_client_gone() {
    check_hung_teardown_client_gone(Some(Runtime::CriO));
}

fn check_hung_teardown_client_gone(rt: Option<Runtime>) {
    let crio = runtime_of(rt) == Runtime::CriO;
    let Some((out, records)) = traced_on(rt, "hung-teardown-client-gone") else {
        return;
    };
    let stop = records
        .iter()
        .find_map(|r| match r {
            Record::CriSpan(s) if s.call.method.as_deref() == Some("StopPodSandbox") => Some(s),
            _ => None,
        })
        .expect("a StopPodSandbox span");
    assert!(!stop.call.outcome.is_ok(), "{stop:?}");
    let hung: Vec<_> = stop
        .hooks
        .iter()
        .filter(|h| h.call.plugin.label() == "10-hung")
        .collect();
    assert_eq!(hung.len(), 1, "{stop:?}");
    let hook = &hung[0].call;
    assert_eq!(hung[0].hook, "STOP_POD_SANDBOX");
    assert_eq!(
        hook.outcome,
        nri_trace::model::nri_call::Outcome::TimedOut,
        "{hook:?}"
    );
    // No close ended it: its duration is its own deadline (the 8 s left of
    // the CRI call's when the runtime called the plugin).
    assert_eq!(hook.end, None, "{hook:?}");
    let timeout = hook.timeout_nano.expect("a deadline") as u64;
    assert_eq!(hook.duration_ns, Some(timeout), "{hook:?}");
    assert!(
        (7_000_000_000..=8_000_000_000).contains(&timeout),
        "{hook:?}"
    );
    // The same connection carries 10-hung's later events, the ones the
    // plugin recorded after the client was killed, and no plugin-gone
    // record for it came before them.
    let later: Vec<&str> = records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) => Some(&s.hooks),
            _ => None,
        })
        .flatten()
        .filter(|h| h.call.conn == hook.conn && h.call.start > hook.start)
        .map(|h| h.hook.as_str())
        .collect();
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let killed = truth
        .iter()
        .find_map(|t| match t {
            Truth::Note { text, mono_ns } if text == "cri-driver killed during StopPodSandbox" => {
                Some(*mono_ns)
            }
            _ => None,
        })
        .expect("the note of the driver's kill");
    let recorded: Vec<&str> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Nri {
                plugin,
                event: Some(e),
                recv_mono_ns,
                ..
            } if plugin == "hung" && *recv_mono_ns > killed => Some(e.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(later, recorded);
    let again = if crio {
        "STOP_POD_SANDBOX"
    } else {
        "REMOVE_POD_SANDBOX"
    };
    assert!(later.contains(&again), "{later:?}");
    let gone_before = records.iter().any(|r| {
        matches!(r, Record::Observed(Observation::NriPluginGone { conn, ts, .. })
            if *conn == hook.conn && hook.start.is_some_and(|s| ts.mono_ns < s.mono_ns + timeout))
    });
    assert!(
        !gone_before,
        "10-hung's connection closed before the deadline"
    );
    // One plugin-timeout per StopPodSandbox the plugin recorded and never
    // answered: the first with the connection left open; on CRI-O the
    // later teardown's, which NRI's 30 s request timeout ended by closing
    // the connection (the plugin recorded the close before that
    // StopPodSandbox returned: CRI-O waited for it).
    let unanswered = truth
        .iter()
        .filter(|t| {
            matches!(t, Truth::Nri { plugin, event: Some(e), reply_mono_ns: None, .. }
                if plugin == "hung" && e == "STOP_POD_SANDBOX")
        })
        .count();
    let m = finding_details(&records, PLUGIN_TIMEOUT);
    let closed: Vec<bool> = m
        .iter()
        .filter_map(|(p, d)| match d {
            Detail::PluginTimeout {
                hook,
                connection_closed,
                ..
            } if *p == Some("10-hung") && hook == "STOP_POD_SANDBOX" => Some(*connection_closed),
            _ => None,
        })
        .collect();
    assert_eq!(closed.len(), unanswered, "{m:?}");
    if crio {
        assert_eq!(closed, vec![false, true], "{m:?}");
        let disconnected = truth.iter().find_map(|t| match t {
            Truth::Plugin {
                plugin,
                mono_ns,
                what: PluginEvent::Disconnected { .. },
                ..
            } if plugin == "hung" => Some(*mono_ns),
            _ => None,
        });
        let last_stop_end = truth.iter().rev().find_map(|t| match t {
            Truth::Cri {
                method,
                end_mono_ns,
                ..
            } if method == "StopPodSandbox" => Some(*end_mono_ns),
            _ => None,
        });
        assert!(
            disconnected.is_some_and(|d| last_stop_end.is_some_and(|e| d < e)),
            "hung not closed during the later StopPodSandbox: {disconnected:?} {last_stop_end:?}"
        );
    } else {
        assert_eq!(closed, vec![false], "{m:?}");
    }
    // And nothing but the hung hook's: its timeouts and the teardown
    // hooks it failed (plus, once CRI-O closed it, the deliveries it
    // missed, counted under plugin-timeout).
    let f = findings(&records);
    assert!(
        f.iter().all(
            |(rule, p, _)| [PLUGIN_TIMEOUT, TEARDOWN_HOOK_FAILED].contains(rule)
                && p.as_deref() == Some("10-hung")
        ),
        "{f:?}"
    );
}

/// 100 pod lifecycles, 4 at a time, through 3 plugins: every delivery is
/// under the CRI call that made it, no finding, nothing lost. The same on
/// every runtime.
#[test]
fn trace_load_finds_nothing() {
    check_load(None);
}

#[test]
fn ctrd21_trace_load_finds_nothing() {
    check_load(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_load_finds_nothing() {
    check_load(Some(Runtime::CriO));
}

fn check_load(rt: Option<Runtime>) {
    let Some((out, records)) = traced_on(rt, "load") else {
        return;
    };
    let (checked, _) = check_correlation("load", &out);
    assert!(checked >= 100 * 3 * 8, "{checked} deliveries checked");
    assert_eq!(findings(&records), vec![]);
    let lost = records
        .iter()
        .any(|r| matches!(r, Record::Observed(Observation::CaptureLoss(l)) if l.any()));
    assert!(!lost, "capture loss under load");
}

/// containerd restarts under a running pod: nri-trace follows the new
/// runtime process (its sockets, its relaunched pre-launched plugin, the
/// external plugin that connects again), every delivery after the restart
/// is still under its CRI call, and the restart rule finds exactly what
/// the plugins' own records show: a plugin that got events of the old pod
/// after the restart without a Synchronize listing it, and each pod
/// teardown event no plugin got although the CRI call succeeded.
#[test]
fn trace_runtime_restart() {
    check_runtime_restart(None);
}

#[test]
fn ctrd21_trace_runtime_restart() {
    check_runtime_restart(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_runtime_restart() {
    check_runtime_restart(Some(Runtime::CriO));
}

fn check_runtime_restart(rt: Option<Runtime>) {
    let Some((out, records)) = traced_on(rt, "runtime-restart") else {
        return;
    };
    let changes: Vec<&str> = records
        .iter()
        .filter_map(|r| match r {
            Record::Observed(Observation::RuntimeExited { .. }) => Some("runtime_exited"),
            Record::Observed(Observation::RuntimeStarted { .. }) => Some("runtime_started"),
            _ => None,
        })
        .collect();
    assert_eq!(changes, vec!["runtime_exited", "runtime_started"]);
    check_correlation("runtime-restart", &out);
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let restarted = truth
        .iter()
        .find_map(|t| match t {
            Truth::Note { text, mono_ns } if text == "containerd restarted" => Some(*mono_ns),
            _ => None,
        })
        .expect("restart note");
    let after = |p: &str, e: &str| {
        truth.iter().any(|t| {
            matches!(t, Truth::Nri { plugin, event: Some(ev), pod: Some(pod), recv_mono_ns, .. }
                if plugin == p && ev == e && pod.name == "before" && *recv_mono_ns > restarted)
        })
    };
    // The restart began (the old runtime is stopped by then): the new
    // runtime synchronizes its plugins before the scenario's "restarted"
    // note (2.1 and CRI-O relaunch the pre-launched plugin and
    // synchronize it within ms of their start).
    let restarting = truth
        .iter()
        .find_map(|t| match t {
            Truth::Note { text, mono_ns } if text == "restarting containerd" => Some(*mono_ns),
            _ => None,
        })
        .expect("restarting note");
    let synced_after = |p: &str| {
        // The plugin's first Synchronize after the restart began listed
        // the pod (containerd 1.7 synchronizes no pre-launched plugin; 2.1
        // and CRI-O synchronize both, at their first start and again).
        truth
            .iter()
            .find_map(|t| match t {
                Truth::Plugin {
                    plugin,
                    mono_ns,
                    what: PluginEvent::Synchronized { pods, .. },
                    ..
                } if plugin == p && *mono_ns > restarting => {
                    Some(pods.iter().any(|x| x.name == "before"))
                }
                _ => None,
            })
            .unwrap_or(false)
    };
    // Whether nri-trace saw plugin `label`'s Synchronize from the new
    // runtime (after it saw the runtime start).
    let started = records
        .iter()
        .find_map(|r| match r {
            Record::Observed(Observation::RuntimeStarted { ts, .. }) => Some(ts.mono_ns),
            _ => None,
        })
        .expect("runtime_started");
    let sync_seen = |label: &str| {
        records.iter().any(|r| {
            matches!(r, Record::NriUncaused(u)
                if u.span.call.method.as_deref() == Some("Synchronize")
                    && u.span.call.plugin.label() == label
                    && u.span.call.start.is_some_and(|t| t.mono_ns > started))
        })
    };
    // (rule, plugin, certain or not; None: either).
    let mut expected: Vec<(&str, Option<String>, Option<bool>)> = Vec::new();
    for (p, label) in [("pre", "05-pre"), ("alpha", "10-alpha")] {
        let told = synced_after(p);
        let got_old = [
            "STOP_CONTAINER",
            "REMOVE_CONTAINER",
            "STOP_POD_SANDBOX",
            "REMOVE_POD_SANDBOX",
        ]
        .iter()
        .any(|e| after(p, e));
        let seen = sync_seen(label);
        eprintln!(
            "runtime-restart: {label}: got events of the old pod {got_old}, told by a \
             Synchronize after the restart {told}, that Synchronize seen by nri-trace {seen}"
        );
        if got_old && !told {
            expected.push((UNEXPLAINED_AFTER_RESTART, Some(label.to_string()), None));
        } else if got_old && !seen {
            // The plugin was told, but its Synchronize went by before the
            // capture followed the new runtime's connection to it (the
            // pre-launched plugin's socketpair, made and synchronized
            // within ms of the runtime's start): nri-trace cannot know,
            // and says so: uncertain, never certain.
            expected.push((
                UNEXPLAINED_AFTER_RESTART,
                Some(label.to_string()),
                Some(false),
            ));
        }
    }
    for e in ["STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"] {
        if !after("pre", e) && !after("alpha", e) {
            expected.push((UNEXPLAINED_AFTER_RESTART, None, None));
        }
    }
    let mut got: Vec<(&str, Option<String>, Option<bool>)> = findings(&records)
        .into_iter()
        .map(|(r, p, certain)| {
            let either = expected
                .iter()
                .any(|(er, ep, c)| *er == r && *ep == p && c.is_none());
            (r, p, if either { None } else { Some(certain) })
        })
        .collect();
    got.sort();
    expected.sort();
    for r in &records {
        if let Record::Violation(v) = r {
            eprintln!("runtime-restart: {}: {}", v.rule, message(v));
        }
    }
    assert_eq!(got, expected);
}

/// nri-trace started before the runtime (a DaemonSet at node boot), on
/// the lab's sockets: it waits, says so, and traces from their bind. The
/// first pod's CRI calls and the NRI hooks they caused (to the pre-launched
/// plugin, whose socketpair the runtime made after its bind, and to the
/// external one) are all there, each delivery under its CRI call. The
/// same on every runtime (each runtime's own CRI socket waited for).
#[test]
fn trace_runtime_after_observer() {
    check_runtime_after_observer(None);
}

#[test]
fn ctrd21_trace_runtime_after_observer() {
    check_runtime_after_observer(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_runtime_after_observer() {
    check_runtime_after_observer(Some(Runtime::CriO));
}

fn check_runtime_after_observer(rt: Option<Runtime>) {
    let scenario = "runtime-after-observer";
    let Some(out) =
        lab_trace::run_traced_on(group_of(rt), scenario, rt, TraceProc::on_lab_sockets())
    else {
        return;
    };
    let (_, _, stderr) = TraceProc::paths(&out);
    let log = std::fs::read_to_string(&stderr).expect("nri-trace's stderr");
    let waiting = log
        .lines()
        .find(|l| l.contains("waiting for the runtime to serve"))
        .unwrap_or_else(|| panic!("no waiting notice:\n{log}"));
    let cri_socket = runtime_of(rt).cri_socket_name();
    assert!(
        waiting.contains(cri_socket) && waiting.contains("nri.sock"),
        "{waiting}"
    );
    assert!(waiting.contains("--no-wait"), "{waiting}");
    for what in ["CRI", "NRI"] {
        assert!(
            log.lines()
                .any(|l| l.starts_with(&format!("nri-trace: {what} "))
                    && l.contains("is served by pid")),
            "no {what} served line:\n{log}"
        );
    }
    let (checked, hooks) = check_correlation(scenario, &out);
    let records = records(scenario, &out);
    let spans: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) => Some(s),
            _ => None,
        })
        .collect();
    let methods: Vec<&str> = spans
        .iter()
        .filter_map(|s| s.call.method.as_deref())
        .collect();
    for m in [
        "RunPodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopContainer",
        "RemoveContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ] {
        assert!(methods.contains(&m), "{m} not traced: {methods:?}");
    }
    let run_hooks: std::collections::BTreeSet<String> = spans
        .iter()
        .filter(|s| s.call.method.as_deref() == Some("RunPodSandbox"))
        .flat_map(|s| s.hooks.iter().map(|h| h.call.plugin.label()))
        .collect();
    assert_eq!(
        run_hooks,
        ["05-pre", "10-alpha"].map(String::from).into(),
        "the RunPodSandbox hooks traced"
    );
    // 2 plugins x (3 pod events + 4 container events at least).
    assert!(checked >= 2 * 7, "{checked} deliveries checked");
    eprintln!("{scenario}: {checked} deliveries checked, {hooks} hooks under their CRI calls");
}

/// `container-exits`: each container's process exits on its own (exit
/// code 3) before the driver stops it. The runtime tells each plugin once
/// (StopContainer), at the exit; nri-trace labels each delivery as the
/// exit's (`container_exited`) with the exit the sandbox probes saw (the
/// wire does not say: containerd 1.7.24 sends the container as still
/// `running`), and none as "no CRI call in flight".
#[test]
fn trace_container_exit_labels_its_stop_container() {
    if let Some((out, records)) = traced("container-exits") {
        check_container_exits(&out, &records);
    }
}

/// As [`trace_container_exit_labels_its_stop_container`], on containerd
/// 2.1 and CRI-O in CI: each tells the plugins at the exit too (2.1
/// `NotifyContainerExit`; CRI-O's exit monitor), once; both send the
/// container as still `running` (no exit code on the wire: NRI 0.8).
#[test]
fn ctrd21_trace_container_exit_labels_its_stop_container() {
    let runtime = Some(Runtime::Containerd21);
    if let Some(out) = lab_trace::run_traced_on(
        "trace-lab-ctrd21",
        "container-exits",
        runtime,
        TraceProc::new(),
    ) {
        check_container_exits(&out, &records("container-exits", &out));
    }
}

#[test]
fn crio_trace_container_exit_labels_its_stop_container() {
    if let Some((out, records)) = traced_on_crio("container-exits") {
        check_container_exits(&out, &records);
    }
}

fn check_container_exits(out: &Path, records: &[Record]) {
    use nri_trace::engine::correlate::NoCause;
    let mut causes: std::collections::BTreeMap<(String, String), Vec<String>> =
        std::collections::BTreeMap::new();
    let mut add = |h: &nri_trace::engine::hook_latency::HookSpan, cause: String| {
        let container = h
            .call
            .container
            .as_ref()
            .map_or_else(String::new, |c| c.name.clone());
        causes
            .entry((
                h.call.plugin.label(),
                format!(
                    "{container}@{}",
                    h.call.pod.as_ref().map_or("", |p| p.name.as_str())
                ),
            ))
            .or_default()
            .push(cause);
    };
    for r in records {
        match r {
            Record::CriSpan(s) => {
                for h in s.hooks.iter().filter(|h| h.hook == "STOP_CONTAINER") {
                    add(
                        h,
                        format!("cri {}", s.call.method.as_deref().unwrap_or("?")),
                    );
                }
            }
            Record::NriUncaused(u) if u.span.hook == "STOP_CONTAINER" => {
                let cause = match (u.no_cri_cause, &u.exit) {
                    (NoCause::ContainerExited, exit) => {
                        if let Some(x) = exit {
                            assert_eq!(x.status, Some(3 << 8), "{x:?}");
                        }
                        let c = u.span.call.container.as_ref().unwrap();
                        format!(
                            "exit (state {:?}, code {:?}, kernel exit {})",
                            c.state,
                            c.exit_code,
                            exit.is_some()
                        )
                    }
                    (why, _) => format!("{why:?}"),
                };
                add(&u.span, cause);
            }
            _ => {}
        }
    }
    eprintln!("StopContainer deliveries: {causes:#?}");
    assert_eq!(causes.len(), 4, "2 plugins x 2 containers: {causes:?}");
    for (key, c) in &causes {
        assert_eq!(c.len(), 1, "{key:?}: one StopContainer per exit: {c:?}");
        // containerd 1.7 and 2.x both tell the plugins at the exit (1.7
        // `WithContainerExit` at the task's delete, 2.x
        // `NotifyContainerExit`), and not again at the CRI StopContainer
        // that follows (`needsStopping`); the sandbox probes saw the
        // container's program end with code 3 (checked above).
        assert!(c[0].ends_with("kernel exit true)"), "{key:?}: {c:?}");
    }
    // The conformance table: the clause held on both containers.
    let (stdout, _, _) = TraceProc::paths(out);
    let clause: Vec<serde_json::Value> = std::fs::read_to_string(&stdout)
        .expect("nri-trace's output")
        .lines()
        .filter(|l| l.contains(r#""clause":"stop-container-once-per-exit""#))
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(clause.len(), 1, "{clause:?}");
    assert_eq!(
        (clause[0]["held"].as_u64(), clause[0]["broken"].as_u64()),
        (Some(2), Some(0)),
        "{}",
        clause[0]
    );
}

// CRI-O 1.33.13 (lab/crio.sh), in CI: nri-trace finds CRI-O as on a node
// (its process `crio`, its sockets `crio.sock` and `nri.sock`) and traces
// it; its conformance differs from containerd's by design
// (docs/contract.md, docs/lab.md "Scenarios on CRI-O").

fn traced_on_crio(scenario: &str) -> Option<(std::path::PathBuf, Vec<Record>)> {
    traced_on(Some(Runtime::CriO), scenario)
}

/// Two own-netns pods sharing their PID namespace, the conformance table
/// as each runtime behaves. containerd tells the plugins StopPodSandbox
/// before it tears the network down (CNI teardown and the netns unmount
/// follow the hook: pkg/cri/server/sandbox_stop.go), so the netns clause
/// holds on both pods, the netns going after. CRI-O tears the pod's network
/// down (CNI DEL, the netns unmounted and removed) before it tells the
/// plugins StopPodSandbox (server/sandbox_stop_linux.go: networkStop, then
/// RemoveManagedNamespaces, then nri.stopPodSandbox), so the clause is
/// broken on every pod, with the netns going first.
#[test]
fn trace_netns_teardown_conformance() {
    check_netns_teardown(None);
}

#[test]
fn ctrd21_trace_netns_teardown_held() {
    check_netns_teardown(Some(Runtime::Containerd21));
}

#[test]
fn crio_trace_netns_teardown_broken() {
    check_netns_teardown(Some(Runtime::CriO));
}

fn check_netns_teardown(rt: Option<Runtime>) {
    let runtime = runtime_of(rt);
    let Some((out, _records)) = traced_on(rt, "netns-teardown") else {
        return;
    };
    let netns: Vec<_> = json_lines(&out, "conformance")
        .into_iter()
        .filter(|c| c["clause"] == "stop-pod-sandbox-before-netns-teardown")
        .collect();
    eprintln!("netns-teardown on {}: {netns:#?}", runtime.name());
    assert_eq!(netns.len(), 1, "{netns:?}");
    let c = &netns[0];
    let crio = runtime == Runtime::CriO;
    let (held, broken) = if crio { (0, 2) } else { (2, 0) };
    assert_eq!(
        (c["held"].as_u64(), c["broken"].as_u64()),
        (Some(held), Some(broken)),
        "{c}"
    );
    let case = if crio {
        &c["broken_case"]
    } else {
        &c["held_case"]
    };
    assert!(
        case["kernel"]["path"]
            .as_str()
            .is_some_and(|p| p.contains("/netns/")),
        "{c}"
    );
    let (kernel, delivered) = (
        case["kernel"]["at"]["mono_ns"].as_u64(),
        case["delivered"]["mono_ns"].as_u64(),
    );
    assert!(
        kernel.is_some() && delivered.is_some() && (kernel < delivered) == crio,
        "the netns went {} StopPodSandbox reached the plugin: {c}",
        if crio { "after" } else { "before" }
    );
    // The pods share their PID namespace, so even CRI-O runs their pause
    // (drop_infra_ctr drops it otherwise): the sandbox clause is decided
    // on both, with /pause as the sandbox's program (not runc or its
    // helpers in the conmon cgroup crio-conmon-<id>). containerd 1.7
    // breaks it on both (the plugins are told before `runc start`); 2.1
    // and CRI-O call the hook after `runc start`, which races pause's
    // execve (held 3 of 3 in a manual CRI-O run, pause 7 ms before the
    // hook): there only the decision is asserted.
    let sandbox: Vec<_> = json_lines(&out, "conformance")
        .into_iter()
        .filter(|c| c["clause"] == "sandbox-running-at-run-pod-sandbox")
        .collect();
    assert_eq!(sandbox.len(), 1, "{sandbox:?}");
    let c = &sandbox[0];
    assert_eq!(
        c["held"].as_u64().unwrap() + c["broken"].as_u64().unwrap(),
        2,
        "{c}"
    );
    if runtime == Runtime::Containerd17 {
        assert_eq!(c["broken"].as_u64(), Some(2), "{c}");
    }
    for case in [&c["held_case"], &c["broken_case"]] {
        assert!(case.is_null() || case["kernel"]["path"] == "/pause", "{c}");
    }
}
