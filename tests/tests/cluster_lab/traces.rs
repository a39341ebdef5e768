//! One trace from kubelet to the plugin (issue 33): kubelet with its
//! tracing on (every span sampled) and the node's containerd with its own
//! send their spans to the lab's OpenTelemetry Collector, and so does
//! `nri-trace watch --otlp-endpoint`, started on the node after kubelet's
//! CRI connection (a late attach, as on a real node). A pod made and
//! deleted through the API; read back from the collector's file:
//!
//! - each of nri-trace's CRI spans of the pod continues kubelet's trace,
//!   under kubelet's client span of that call, beside containerd's CRI
//!   server span of it (same parent, same method);
//! - each of nri-trace's delivery spans of the pod is the child of
//!   containerd's otelttrpc client span of the same NRI call, and lies
//!   within it (the duration difference recorded: within 1 ms for most
//!   calls, not all).
//!
//! Then the same with kubelet's tracing off ([`untraced_kubelet`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use super::{
    cluster::Cluster,
    otel_collector::{by_id, wait_spans, OtlpSpan, OTLP_GRPC},
    pods::TestPod,
};

/// How far containerd's wall clock and nri-trace's (its monotonic clock
/// mapped to the wall at its start) may differ (trace_lab's otlp test).
const CLOCKS_NS: i64 = 200_000;

pub(crate) fn traces_join_kubelet(c: &Cluster, bin: &Path, out: &Path, file: &Path) -> Result<()> {
    let (spans, exported) = traced_pod(c, bin, out, file, "traced")?;
    let kubelet = by_id(&spans, "kubelet");
    let containerd = by_id(&spans, "containerd");
    // kubelet's calls (the test's crictl and nri-trace's own state query
    // send no trace context).
    let cri: Vec<&OtlpSpan> = cri_spans(&spans, "traced")
        .filter(|s| s.attr("nri_trace.client.comm") == Some("kubelet"))
        .collect();
    ensure_methods(
        &cri,
        &[
            "RunPodSandbox",
            "CreateContainer",
            "StartContainer",
            "StopPodSandbox",
        ],
    )?;
    for s in &cri {
        let k = kubelet
            .get(s.parent.as_str())
            .with_context(|| format!("{}: parent {:?} is not a kubelet span", s.name, s.parent))?;
        ensure!(
            k.trace_id == s.trace_id,
            "{}: another trace than kubelet's",
            s.name
        );
        ensure!(
            containerd
                .values()
                .any(|x| x.parent == s.parent && x.name == s.name),
            "{}: no containerd server span beside it",
            s.name
        );
    }
    let nri = under_containerd(&spans, "traced", &containerd)?;
    let mut worst = 0i64;
    for (s, x) in &nri {
        // nri-trace's span lies within containerd's client span, up to
        // the two clocks' difference: containerd's holds more than the
        // wire shows (encoding, the hand-over to the waiting goroutine).
        // The 1 ms agreement of issue 33 holds for most calls, not all:
        // the difference is recorded (docs/benchmarks.md, "OTLP export"),
        // as trace_lab's otlp test records it; a run on 2026-11-30 saw
        // 1.05 ms on a StopContainer.
        ensure!(
            s.start as i64 >= x.start as i64 - CLOCKS_NS
                && s.end as i64 <= x.end as i64 + CLOCKS_NS,
            "{}: nri-trace's span {}..{} not within containerd's {}..{}",
            s.name,
            s.start,
            s.end,
            x.start,
            x.end
        );
        worst = worst.max((x.duration() - s.duration()).abs());
    }
    // How kubelet groups a lifecycle: said, not asserted (its spans are
    // per pod sync, issue 33's note).
    let traces: BTreeSet<&str> = cri.iter().map(|s| s.trace_id.as_str()).collect();
    let facts = format!(
        "{} CRI spans of the pod under kubelet's ({} traces), {} delivery spans under containerd's (worst duration difference {:.3} ms); {} kubelet spans, {} containerd spans, {exported} of nri-trace",
        cri.len(),
        traces.len(),
        nri.len(),
        worst as f64 / 1e6,
        kubelet.len(),
        containerd.len()
    );
    eprintln!("cluster test: traces: {facts}");
    std::fs::write(out.join("traces-facts.txt"), facts)?;
    Ok(())
}

/// Without kubelet's tracing (issue 33: "without tracing on kubelet: one
/// trace per lifecycle"): kubelet restarted with no `tracing:` section
/// (containerd keeps its own), then a pod made, deleted and removed as
/// above. kubelet sends no trace context now, so nri-trace's CRI spans of
/// the pod (kubelet's calls and the test's crictl removal alike) are one
/// trace rooted at its RunPodSandbox; each delivery span is still the
/// child of containerd's client span of that NRI call. kubelet is
/// restarted with its tracing again after.
pub(crate) fn untraced_kubelet(c: &Cluster, bin: &Path, out: &Path, file: &Path) -> Result<()> {
    c.stop_kubelet()?;
    c.start_kubelet(false)?;
    let run = traced_pod(c, bin, out, file, "untraced");
    c.stop_kubelet()?;
    c.start_kubelet(true)?;
    let (spans, _) = run?;
    let cri: Vec<&OtlpSpan> = cri_spans(&spans, "untraced").collect();
    let traces: BTreeSet<&str> = cri.iter().map(|s| s.trace_id.as_str()).collect();
    ensure!(
        traces.len() == 1,
        "{} traces of the pod's CRI spans",
        traces.len()
    );
    let roots: Vec<&str> = cri
        .iter()
        .filter(|s| s.parent.is_empty())
        .map(|s| s.name.as_str())
        .collect();
    ensure!(
        roots == ["runtime.v1.RuntimeService/RunPodSandbox"],
        "roots of the pod's trace: {roots:?}"
    );
    let by_span: BTreeSet<&str> = cri.iter().map(|s| s.span_id.as_str()).collect();
    for s in cri.iter().filter(|s| !s.parent.is_empty()) {
        ensure!(
            by_span.contains(s.parent.as_str()),
            "{}: its parent {} is not in the pod's trace",
            s.name,
            s.parent
        );
    }
    ensure_methods(
        &cri,
        &[
            "CreateContainer",
            "StartContainer",
            "StopPodSandbox",
            "RemovePodSandbox",
        ],
    )?;
    let nri = under_containerd(&spans, "untraced", &by_id(&spans, "containerd"))?;
    eprintln!(
        "cluster test: traces without kubelet's tracing: {} CRI spans of the pod in one trace rooted at RunPodSandbox, {} delivery spans under containerd's",
        cri.len(),
        nri.len()
    );
    Ok(())
}

/// nri-trace's spans of the pod named `pod`.
fn spans_of<'a>(spans: &'a [OtlpSpan], pod: &'a str) -> impl Iterator<Item = &'a OtlpSpan> {
    spans
        .iter()
        .filter(move |s| s.service == "nri-trace" && s.attr("k8s.pod.name") == Some(pod))
}

/// nri-trace's CRI spans of the pod.
fn cri_spans<'a>(spans: &'a [OtlpSpan], pod: &'a str) -> impl Iterator<Item = &'a OtlpSpan> {
    spans_of(spans, pod).filter(|s| s.attr("rpc.system.name") == Some("grpc"))
}

/// Each of the CRI `methods` has a span among `cri`.
fn ensure_methods(cri: &[&OtlpSpan], methods: &[&str]) -> Result<()> {
    let names: BTreeSet<&str> = cri.iter().map(|s| s.name.as_str()).collect();
    for m in methods {
        ensure!(
            names.contains(format!("runtime.v1.RuntimeService/{m}").as_str()),
            "no span of {m} for the pod: {names:?}"
        );
    }
    Ok(())
}

/// nri-trace's delivery spans of the pod (at least 4), each with its
/// parent: containerd's otelttrpc client span of the same NRI call, in the
/// same trace.
fn under_containerd<'a>(
    spans: &'a [OtlpSpan],
    pod: &'a str,
    containerd: &BTreeMap<&str, &'a OtlpSpan>,
) -> Result<Vec<(&'a OtlpSpan, &'a OtlpSpan)>> {
    let mut out = Vec::new();
    for s in spans_of(spans, pod).filter(|s| s.attr("rpc.system.name") == Some("ttrpc")) {
        let x = containerd.get(s.parent.as_str()).with_context(|| {
            format!("{}: parent {:?} is not a containerd span", s.name, s.parent)
        })?;
        ensure!(x.name == s.name && x.trace_id == s.trace_id, "{s:?} {x:?}");
        out.push((s, *x));
    }
    ensure!(out.len() >= 4, "{} delivery spans of the pod", out.len());
    Ok(out)
}

/// `watch --otlp-endpoint` while a pod named `name` is made through the
/// API, deleted, and removed (an NRI plugin on the node); the collector's
/// spans once nri-trace's and every parent of the pod's have come, and how
/// many spans nri-trace exported.
fn traced_pod(
    c: &Cluster,
    bin: &Path,
    out: &Path,
    file: &Path,
    name: &str,
) -> Result<(Vec<OtlpSpan>, u64)> {
    // The file holds an earlier run's spans too.
    let before = super::otel_collector::read_spans(file)
        .iter()
        .filter(|s| s.service == "nri-trace")
        .count() as u64;
    let stdout = out.join(format!("{name}-watch.ndjson"));
    let stderr = out.join(format!("{name}-watch.stderr"));
    let mut watch = super::start_ready(
        bin,
        &["watch", "-o", "json", "--otlp-endpoint", OTLP_GRPC],
        &stdout,
        &stderr,
    )?;
    let pod = TestPod::new(name, "sleep 3600").grace(1);
    let mut plugin = c.plugin(name, "15", &[], out)?;
    let t_start = Instant::now();
    let run = (|| {
        c.create(&pod)?;
        c.delete(&pod)?;
        // kubelet stops the pod (StopContainer, StopPodSandbox) at once;
        // it removes the sandbox only at its next GC: the test does.
        let t0 = Instant::now();
        while !std::fs::read_to_string(&stdout)?.contains("\"StopPodSandbox\"") {
            ensure!(
                t0.elapsed() < Duration::from_mins(1),
                "no StopPodSandbox of {}",
                pod.name
            );
            sleep(Duration::from_millis(300));
        }
        c.remove(&pod)
    })();
    let t_pod = t_start.elapsed();
    let st = nri_trace_tests::stop_child(
        &mut watch,
        libc::SIGTERM,
        Duration::from_mins(1),
        "nri-trace",
    )?;
    let _ = plugin.kill();
    let _ = plugin.wait();
    run?;
    ensure!(st.success(), "nri-trace watch: {st}");
    let out_text = std::fs::read_to_string(&stdout)?;
    let end: Value = out_text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "session_end")
        .context("no session_end")?;
    let exported = end["otlp"]["exported_spans"]
        .as_u64()
        .context("session_end otlp")?;
    ensure!(end["otlp"]["dropped_spans"] == 0, "{end}");
    // kubelet's and containerd's batch processors export every 5 s.
    let t0 = Instant::now();
    let spans = wait_spans(file, Duration::from_secs(30), |spans| {
        let ours = spans.iter().filter(|s| s.service == "nri-trace").count() as u64;
        let parents_came = spans_of(spans, name)
            // Not the test's crictl calls: they carry no trace context.
            .filter(|s| !s.parent.is_empty())
            .all(|s| spans.iter().any(|k| k.span_id == s.parent));
        ours >= before + exported && parents_came
    });
    eprintln!(
        "cluster test: traces of {name}: the pod's life {:.1} s, nri-trace's stop {:.1} s, the spans' arrival {:.1} s",
        t_pod.as_secs_f64(),
        t0.duration_since(t_start).saturating_sub(t_pod).as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    Ok((spans, exported))
}
