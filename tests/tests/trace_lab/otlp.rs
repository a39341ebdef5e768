//! OTLP spans that join the runtime's own traces (issue 33): a real
//! OpenTelemetry Collector (lab/otelcol.sh, built with the collector's
//! builder) receives containerd 2.3's spans (its tracing on: otelgrpc on
//! the CRI server, otelttrpc on every NRI call, lab.sh
//! NRI_TRACE_LAB_OTLP_ENDPOINT) and nri-trace's (`watch --otlp-endpoint`)
//! while the `happy` scenario runs (3 pods x 2 containers, 3 plugins), and
//! writes them to a file. Read back from that file:
//!
//! - every NRI delivery containerd made carried a `traceparent`, and
//!   nri-trace's span of it is the child of containerd's otelttrpc client
//!   span for the same call: same trace, same name, durations within 1 ms;
//! - containerd's client span of a delivery a CRI call caused is in the
//!   trace of containerd's CRI server span of that call, so the chain reads
//!   CRI server span -> NRI client span -> nri-trace's delivery span;
//! - nri-trace's CRI spans (the lab's driver sends no trace context): one
//!   trace per pod lifecycle, rooted at its RunPodSandbox;
//! - nri-trace exported every span it made (`session_end`'s `otlp`), none
//!   dropped, and the collector holds exactly those.
//!
//! A second test stops the collector mid-run and starts it again
//! (`ctrd23_otlp_collector_stopped_mid_run_loses_nothing`).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::Command,
    time::Duration,
};

use nri_trace_lab::{
    labctl::{self, Lab, Runtime},
    scenario::Observer,
};

use super::{
    lab_trace::{driver, json_lines, metrics_addr, run_observed_on, LabUp, TraceProc},
    otel_collector::{by_id, ports, wait_spans, Collector, OtlpSpan, OTLP_GRPC, OTLP_HTTP},
};

const SCENARIO: &str = "happy";

#[test]
fn ctrd23_otlp_spans_join_containerds_traces() {
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("otlp-lab");
    std::fs::create_dir_all(&out_dir).unwrap();
    let file = out_dir.join("spans.json");
    let _ = std::fs::remove_file(&file);
    let mut lab = Lab::from_env();
    lab.runtime = Runtime::Containerd23;
    lab.otlp_endpoint = Some(OTLP_HTTP.into());
    // The collector before the guard's lab lock: nothing else uses its
    // ports. Built on first use (cargo xtask lab peers builds it beside
    // the suite).
    if !super::lab_trace::guard("otlp") {
        return;
    }
    let _ports = ports();
    let collector = Collector::start(&out_dir, &file);
    let trace = TraceProc::with_args(&["--otlp-endpoint", OTLP_GRPC]);
    let Some(out) = run_observed_on("trace-lab-otlp", SCENARIO, lab, Box::new(trace)) else {
        return;
    };
    // What nri-trace says it exported.
    let end = json_lines(&out, "session_end");
    let otlp = &end[0]["otlp"];
    let exported = otlp["exported_spans"].as_u64().expect("session_end otlp");
    assert_eq!(otlp["dropped_spans"], 0, "{otlp}");
    assert!(exported > 0, "{otlp}");
    // The collector flushes every 100 ms; containerd's batch processor at
    // its shutdown (the scenario's `down`) at the latest.
    let spans = wait_spans(&file, Duration::from_secs(30), |spans| {
        let ours = spans.iter().filter(|s| s.service == "nri-trace").count() as u64;
        ours >= exported && spans.iter().any(|s| s.service == "containerd")
    });
    drop(collector);
    let ours: Vec<&OtlpSpan> = spans.iter().filter(|s| s.service == "nri-trace").collect();
    let theirs = by_id(&spans, "containerd");
    assert_eq!(
        ours.len() as u64,
        exported,
        "the collector holds every span nri-trace exported"
    );

    // Every runtime-to-plugin delivery carried containerd's trace context.
    let records = super::records(SCENARIO, &out);
    let hooks: Vec<_> = records
        .iter()
        .flat_map(nri_trace::engine::Record::hooks)
        .collect();
    let runtime_calls: Vec<_> = hooks
        .iter()
        .filter(|h| h.call.caller == nri_trace::model::Caller::Runtime && !h.call.partial)
        .collect();
    assert!(
        runtime_calls.len() > 50,
        "{} deliveries",
        runtime_calls.len()
    );
    let untraced: Vec<_> = runtime_calls
        .iter()
        .filter(|h| h.call.traceparent.is_none())
        .map(|h| format!("{} {:?}", h.call.plugin.label(), h.hook))
        .collect();
    assert!(
        untraced.is_empty(),
        "deliveries without a traceparent: {untraced:?}"
    );

    // Each of nri-trace's delivery spans under containerd's client span.
    let deliveries: Vec<&&OtlpSpan> = ours
        .iter()
        .filter(|s| s.attr("rpc.system.name") == Some("ttrpc"))
        .collect();
    // containerd's client span holds more than the wire shows (the
    // request's encoding and the trace context's injection before the
    // write, the response's decoding and the hand-over to the waiting
    // goroutine after the read): nri-trace's span lies within it, up to
    // the clocks' difference (containerd's wall clock, nri-trace's
    // monotonic clock mapped to the wall at its start).
    const CLOCKS_NS: i64 = 200_000;
    let mut diffs: Vec<i64> = Vec::new();
    let mut under_cri = BTreeSet::new();
    for d in &deliveries {
        if d.parent.is_empty() {
            continue;
        }
        let Some(c) = theirs.get(d.parent.as_str()) else {
            // containerd's spans are all flushed at its stop: none may be
            // missing.
            panic!("no containerd span {} for {}", d.parent, d.name);
        };
        assert_eq!(c.trace_id, d.trace_id, "{d:?} {c:?}");
        assert_eq!(c.name, d.name, "the same NRI call");
        assert!(
            d.start as i64 >= c.start as i64 - CLOCKS_NS
                && d.end as i64 <= c.end as i64 + CLOCKS_NS,
            "{}: nri-trace's span {}..{} not within containerd's {}..{}",
            d.name,
            d.start,
            d.end,
            c.start,
            c.end
        );
        diffs.push(c.duration() - d.duration());
        // The CRI server span above containerd's client span, through
        // containerd's own spans (cri.sandbox.run, ...).
        let mut up = theirs.get(c.parent.as_str());
        for _ in 0..8 {
            let Some(a) = up else { break };
            if a.name.starts_with("runtime.v1.RuntimeService/") {
                under_cri.insert(a.name.clone());
                break;
            }
            up = theirs.get(a.parent.as_str());
        }
    }
    diffs.sort_unstable();
    let pct = |p: usize| diffs[(diffs.len() - 1) * p / 100] as f64 / 1e6;
    let within_1ms = diffs.iter().filter(|d| d.abs() <= 1_000_000).count();
    let joined = deliveries.iter().filter(|d| !d.parent.is_empty()).count();
    assert_eq!(
        joined,
        runtime_calls.len(),
        "one joined span per delivery the runtime made"
    );
    // Not StopContainer: containerd 2.3.7 tells the plugins of a stopped
    // container from its task-exit handler, in a context of its own (the
    // CRI call's own notification then finds it done), so that client
    // span starts a trace of its own (docs/trace.md).
    for m in [
        "RunPodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ] {
        assert!(
            under_cri.contains(&format!("runtime.v1.RuntimeService/{m}")),
            "no delivery under containerd's {m} server span: {under_cri:?}"
        );
    }

    // nri-trace's CRI spans: one trace per pod, rooted at RunPodSandbox.
    let cri: Vec<&&OtlpSpan> = ours
        .iter()
        .filter(|s| s.attr("rpc.system.name") == Some("grpc"))
        .collect();
    let mut traces: BTreeMap<String, Vec<&&OtlpSpan>> = BTreeMap::new();
    for s in &cri {
        let pod = s.attr("k8s.pod.name").unwrap_or("").to_string();
        if pod.starts_with("happy") {
            traces.entry(pod).or_default().push(s);
        }
    }
    assert_eq!(traces.len(), 3, "{:?}", traces.keys());
    for (pod, spans) in &traces {
        let ids: BTreeSet<_> = spans.iter().map(|s| &s.trace_id).collect();
        assert_eq!(ids.len(), 1, "{pod}: one trace");
        let roots: Vec<_> = spans.iter().filter(|s| s.parent.is_empty()).collect();
        assert_eq!(roots.len(), 1, "{pod}: one root");
        assert_eq!(roots[0].name, "runtime.v1.RuntimeService/RunPodSandbox");
    }
    // The same spans again from the saved record file.
    let replay_file = out_dir.join("spans-replay.json");
    let _ = std::fs::remove_file(&replay_file);
    let collector = Collector::start(&out_dir, &replay_file);
    let saved = TraceProc::observations(&out);
    let o = Command::new(super::lab_trace::bin("nri-trace"))
        .arg("replay")
        .arg(&saved)
        .args(["-o", "json", "--otlp-endpoint", OTLP_GRPC])
        .output()
        .expect("nri-trace replay");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let replayed = wait_spans(&replay_file, Duration::from_secs(30), |spans| {
        spans.len() >= ours.len()
    });
    drop(collector);
    let tree = |spans: &[&OtlpSpan]| -> BTreeSet<(String, String, String, String, u64, u64)> {
        spans
            .iter()
            .map(|s| {
                (
                    s.trace_id.clone(),
                    s.span_id.clone(),
                    s.parent.clone(),
                    s.name.clone(),
                    s.start,
                    s.end,
                )
            })
            .collect()
    };
    let replayed: Vec<&OtlpSpan> = replayed.iter().collect();
    assert_eq!(
        tree(&replayed),
        tree(&ours),
        "replay exports the span tree the live run exported"
    );
    let facts = format!(
        "{} spans of nri-trace, {} of containerd; {joined} deliveries joined; containerd's span minus nri-trace's: p50 {:.3} ms, p90 {:.3} ms, max {:.3} ms, {within_1ms} of {} within 1 ms; {} pod traces",
        ours.len(),
        theirs.len(),
        pct(50),
        pct(90),
        pct(100),
        diffs.len(),
        traces.len()
    );
    eprintln!("otlp: {facts}");
    std::fs::write(out.join("otlp-facts.txt"), facts).unwrap();
}

/// The CRI calls of one pod lifecycle of the driver (`up`, then `down`).
const LIFECYCLE: [&str; 5] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// The collector stopped mid-run and started again (issue 33: "the
/// collector down or stopped mid-run: capture loses nothing, the drops are
/// counted"). `watch --otlp-endpoint` on containerd 2.3 while the driver
/// makes and removes three pods, one at a time, each step waiting on what
/// it needs to see rather than on a time:
///
/// 1. `otlp-before`, collector A running: its spans reach A's file;
/// 2. A stopped (SIGTERM, waited for); `otlp-during`: nri-trace's export
///    fails (its `nri_trace_otlp_failed_exports_total` is read until it
///    counts one), and the batch waits in its backoff;
/// 3. collector B started on the same port; `otlp-after`: the waiting
///    batch and the new pod's spans reach B's file.
///
/// Then: the live output has every CRI call of the three pods (the
/// capture went on as if nothing happened; its records are those of its
/// raw capture replayed), `session_end` counts the failed exports and no
/// drop (the queue's bound was never near), and the two files hold
/// exactly the spans nri-trace says it exported, none twice.
#[test]
fn ctrd23_otlp_collector_stopped_mid_run_loses_nothing() {
    let test = "otlp_collector_stopped_mid_run";
    if !super::lab_trace::guard(test) {
        return;
    }
    let _ports = ports();
    let _lock = labctl::lock().expect("lab lock");
    let mut lab = Lab::from_env();
    lab.runtime = Runtime::Containerd23;
    lab.install().expect("lab install");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("otlp-lab")
        .join("stopped-mid-run");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let (file_a, file_b) = (out.join("spans-a.json"), out.join("spans-b.json"));
    let truth = out.join("truth.ndjson");

    let collector_a = Collector::start(&out, &file_a);
    lab.clear_plugins().expect("clearing pre-launched plugins");
    lab.up("2s").expect("lab up");
    let up = LabUp(lab.clone());
    let mut trace = TraceProc::with_args(&["--otlp-endpoint", OTLP_GRPC]);
    trace.attach(&lab, &out).expect("nri-trace watch");
    let addr = metrics_addr(&out).expect("nri-trace's metrics address");
    let lifecycle = |pod: &str| {
        let made = driver(&lab, &truth, &["up", "--name", pod]);
        let id = made["sandbox_id"].as_str().expect("sandbox id").to_string();
        driver(&lab, &truth, &["down", "--sandbox-id", &id]);
    };
    let removed = |spans: &[OtlpSpan], pod: &str| {
        spans.iter().any(|s| {
            s.service == "nri-trace"
                && s.attr("k8s.pod.name") == Some(pod)
                && s.name == "runtime.v1.RuntimeService/RemovePodSandbox"
        })
    };

    lifecycle("otlp-before");
    let spans_a = wait_spans(&file_a, Duration::from_secs(30), |s| {
        removed(s, "otlp-before")
    });
    assert!(
        removed(&spans_a, "otlp-before"),
        "collector A has no RemovePodSandbox span of otlp-before"
    );
    drop(collector_a);

    lifecycle("otlp-during");
    let failed = wait_counter(&addr, "nri_trace_otlp_failed_exports_total", |n| n >= 1);
    assert!(
        failed >= 1,
        "no failed export counted while the collector was down"
    );

    let collector_b = Collector::start(&out, &file_b);
    lifecycle("otlp-after");
    let _ = wait_spans(&file_b, Duration::from_mins(1), |s| {
        removed(s, "otlp-during") && removed(s, "otlp-after")
    });
    trace.detach().expect("nri-trace stops");
    drop(up);

    let end = json_lines(&out, "session_end");
    let otlp = &end[0]["otlp"];
    let exported = otlp["exported_spans"].as_u64().expect("session_end otlp");
    let failed_exports = otlp["failed_exports"].as_u64().unwrap_or(0);
    assert_eq!(otlp["dropped_spans"], 0, "{otlp}");
    assert!(failed_exports >= 1, "{otlp}");
    let spans_a = super::otel_collector::read_spans(&file_a);
    let spans_b = wait_spans(&file_b, Duration::from_secs(30), |s| {
        let ours = s.iter().filter(|s| s.service == "nri-trace").count() as u64;
        spans_a.iter().filter(|s| s.service == "nri-trace").count() as u64 + ours >= exported
    });
    drop(collector_b);
    let ours: Vec<&OtlpSpan> = spans_a
        .iter()
        .chain(&spans_b)
        .filter(|s| s.service == "nri-trace")
        .collect();
    assert_eq!(
        ours.len() as u64,
        exported,
        "the two collectors hold what nri-trace exported"
    );
    let ids: BTreeSet<&str> = ours.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(ids.len(), ours.len(), "a span exported twice");
    for pod in ["otlp-during", "otlp-after"] {
        assert!(removed(&spans_b, pod), "collector B: no {pod} spans");
    }

    // Capture lost nothing: every call of the three pods, in the live
    // output that equals the replay of its raw capture.
    assert_eq!(end[0]["lost_records"], 0, "{}", end[0]);
    let records = super::records(test, &out);
    assert!(!records.is_empty());
    let calls = json_lines(&out, "cri_span");
    for pod in ["otlp-before", "otlp-during", "otlp-after"] {
        let methods: BTreeSet<&str> = calls
            .iter()
            .filter(|c| c["pod"]["name"] == pod)
            .filter_map(|c| c["method"].as_str())
            .collect();
        for m in LIFECYCLE {
            assert!(methods.contains(m), "{pod}: no {m} in {methods:?}");
        }
        let spans: BTreeSet<&str> = ours
            .iter()
            .filter(|s| s.attr("k8s.pod.name") == Some(pod))
            .map(|s| s.name.trim_start_matches("runtime.v1.RuntimeService/"))
            .collect();
        for m in LIFECYCLE {
            assert!(spans.contains(m), "{pod}: no {m} span in {spans:?}");
        }
    }
    eprintln!(
        "{test}: {exported} spans exported ({} to A, {} to B), {failed_exports} failed exports, 0 dropped; {} CRI calls",
        spans_a.iter().filter(|s| s.service == "nri-trace").count(),
        spans_b.iter().filter(|s| s.service == "nri-trace").count(),
        calls.len()
    );
}

/// A counter of nri-trace's metrics once `done` holds of it, or as it is
/// after 60 s (the caller's assertion then says what is missing).
fn wait_counter(addr: &str, name: &str, done: impl Fn(u64) -> bool) -> u64 {
    let t0 = std::time::Instant::now();
    loop {
        let text = super::lab_trace::http_get(addr, "/metrics").unwrap_or_default();
        let n = text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if done(n) || t0.elapsed() > Duration::from_mins(1) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
