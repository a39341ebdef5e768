//! Prometheus metrics of a trace (`watch --metrics-addr`): the text
//! exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>) of the
//! hook latency histograms and outcome counters, the CRI call duration
//! histograms, the finding counters and the capture loss counters
//! (docs/metrics.md lists them, with the queries, rules and alerts of
//! deploy/prometheus-rules.yaml).

use std::{
    fmt::Write as _,
    io,
    sync::{Arc, Mutex},
};

use crate::{
    decode::cri::grpc::grpc_status_name,
    engine::{
        findings::Severity,
        histogram::{Buckets, BUCKET_BOUNDS_NS},
        hook_latency::{Hook, HookBuckets},
        record::Record,
        trace_engine::TraceEngine,
    },
    pipeline::{Ending, Progress, Sink},
    sinks::otlp::ExportCounters,
    store::record_file::ExportTotals,
};

/// `--metrics-addr`: keeps the exposition [`metrics_server`] serves up to
/// date, re-rendered when the loop is idle and inputs came since the last
/// rendering. The metrics are of everything the engine saw, not only of
/// the records the filters keep, so it goes by the inputs, not by records.
///
/// [`metrics_server`]: super::metrics_server
pub struct MetricsSink {
    text: Arc<Mutex<String>>,
    /// [`Progress::inputs`] (and the export's totals) when last rendered
    /// (`None`: never).
    rendered_at: Option<(u64, ExportTotals)>,
    /// OTLP export's counters, when it runs (`--otlp-endpoint`).
    export: Option<Arc<ExportCounters>>,
}

impl MetricsSink {
    /// A sink writing the exposition into `text` (the server reads it).
    pub fn new(text: Arc<Mutex<String>>) -> Self {
        MetricsSink {
            text,
            rendered_at: None,
            export: None,
        }
    }

    /// Also expose what OTLP export did.
    #[must_use]
    pub fn with_export(mut self, counters: Arc<ExportCounters>) -> Self {
        self.export = Some(counters);
        self
    }

    fn export_totals(&self) -> ExportTotals {
        self.export.as_ref().map(|c| c.totals()).unwrap_or_default()
    }

    fn publish(&mut self, engine: &TraceEngine) {
        let mut rendered = render(engine);
        if self.export.is_some() {
            render_export(&mut rendered, self.export_totals());
        }
        *self
            .text
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = rendered;
    }
}

impl Sink for MetricsSink {
    fn record(&mut self, _: &Record) -> io::Result<()> {
        Ok(())
    }

    fn idle(&mut self, p: &Progress<'_>) -> io::Result<()> {
        let now = (p.inputs, self.export_totals());
        if self.rendered_at != Some(now) {
            self.publish(p.engine);
            self.rendered_at = Some(now);
        }
        Ok(())
    }

    fn finish(&mut self, end: &Ending<'_>) -> io::Result<()> {
        self.publish(end.engine);
        Ok(())
    }
}

/// Escape a label value (backslash, double quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The operation label of a hook: the name containerd's NRI metrics give
/// it (`containerd_nri_plugin_latency_seconds{operation}`: nri
/// `pkg/adaptation/plugin.go` records `event.PrettyName()`, the event in
/// CamelCase, `pkg/api/event.go` EventPrettyNames, and "Synchronize"), so
/// the two can be joined on (plugin, operation). Methods keep their wire
/// name.
fn operation(hook: &Hook) -> String {
    match hook.event() {
        Some(e) => {
            let mut name = String::new();
            for word in e.as_str_name().split('_') {
                let mut c = word.chars();
                if let Some(first) = c.next() {
                    name.push(first);
                    name.push_str(&c.as_str().to_ascii_lowercase());
                }
            }
            name
        }
        None => hook.as_str().to_string(),
    }
}

/// The error label of an NRI call's outcome, as containerd's
/// `containerd_nri_plugin_invocations_total{error}` has it (containerd
/// `internal/nri/metrics.go`: "deadline_exceeded", "canceled", else the
/// gRPC code's name in snake case); "connection_closed" is nri-trace's
/// own: a call cut by its connection's close (containerd's ttrpc client
/// reports it as a generic error).
fn error_label(code: i32) -> String {
    u32::try_from(code).map_or_else(
        |_| "unknown_code".to_string(),
        |c| grpc_status_name(c).to_ascii_lowercase(),
    )
}

/// The labels of one (plugin, operation).
fn hook_labels(h: &HookBuckets) -> String {
    format!(
        "plugin=\"{}\",operation=\"{}\"",
        label(&h.plugin),
        label(&operation(&h.hook))
    )
}

fn help(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, b: &Buckets) {
    for (bound, n) in BUCKET_BOUNDS_NS.iter().zip(&b.cumulative) {
        let le = *bound as f64 / 1e9;
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", b.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", b.sum_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", b.count);
}

/// The exposition of `a`'s state now. Names and labels follow
/// Prometheus' conventions (<https://prometheus.io/docs/practices/naming/>:
/// base units, `_total` on counters only) and are checked with
/// `promtool check metrics` (tests/tests/prometheus_lab.rs). Labels are
/// bounded: plugins, hooks, CRI methods, rules; never a pod or container.
pub(crate) fn render(a: &TraceEngine) -> String {
    let (hooks, methods) = a.buckets();
    let mut out = String::new();
    help(
        &mut out,
        "nri_trace_build_info",
        "gauge",
        "The nri-trace binary serving these metrics: its version and commit.",
    );
    let _ = writeln!(
        out,
        "nri_trace_build_info{{version=\"{}\",commit=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        env!("NRI_TRACE_GIT_COMMIT")
    );
    help(
        &mut out,
        "nri_trace_hook_duration_seconds",
        "histogram",
        "Own time of each NRI hook, per plugin (IDX-NAME) and operation, from the wire.",
    );
    for h in &hooks {
        let l = hook_labels(h);
        histogram(&mut out, "nri_trace_hook_duration_seconds", &l, &h.own);
    }
    help(
        &mut out,
        "nri_trace_hook_invocations_total",
        "counter",
        "NRI hook calls that ended, per plugin, operation and outcome (status, error).",
    );
    for h in &hooks {
        let l = hook_labels(h);
        let mut outcomes = vec![("success", String::new(), h.ok)];
        outcomes.extend(
            h.error_codes
                .iter()
                .map(|(code, n)| ("error", error_label(*code), *n)),
        );
        outcomes.push(("error", "deadline_exceeded".into(), h.timeouts));
        outcomes.push(("error", "connection_closed".into(), h.closed));
        for (status, error, n) in outcomes {
            if n > 0 || status == "success" {
                let _ = writeln!(
                    out,
                    "nri_trace_hook_invocations_total{{{l},status=\"{status}\",error=\"{error}\"}} {n}"
                );
            }
        }
    }
    help(
        &mut out,
        "nri_trace_cri_call_duration_seconds",
        "histogram",
        "Duration of each CRI call, per gRPC method, from the wire.",
    );
    for m in &methods {
        let l = format!("grpc_method=\"{}\"", label(&m.method));
        histogram(
            &mut out,
            "nri_trace_cri_call_duration_seconds",
            &l,
            &m.durations,
        );
    }
    help(
        &mut out,
        "nri_trace_findings_total",
        "counter",
        "Contract findings, per rule, severity and certainty (docs/contract.md).",
    );
    for ((rule, severity, certain), n) in a.finding_counts() {
        let sev = match severity {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
            Severity::Critical => "critical",
        };
        let _ = writeln!(
            out,
            "nri_trace_findings_total{{rule=\"{rule}\",severity=\"{sev}\",certainty=\"{}\"}} {n}",
            if *certain { "certain" } else { "uncertain" }
        );
    }
    let l = a.loss();
    counters(
        &mut out,
        &[
            (
                "nri_trace_capture_lost_records_total",
                "Records lost by the capture (ring buffer full).",
                l.lost_records,
            ),
            (
                "nri_trace_capture_lost_bytes_total",
                "Payload bytes in lost records.",
                l.lost_bytes,
            ),
            (
                "nri_trace_capture_read_faults_total",
                "Payloads the probe could not read.",
                l.read_faults,
            ),
            (
                "nri_trace_capture_untracked_fds_total",
                "Connections not tracked (fd map full).",
                l.fd_map_full,
            ),
        ],
    );
    out
}

/// Unlabelled counters: (name, help, value) each.
fn counters(out: &mut String, list: &[(&str, &str, u64)]) {
    for &(name, text, v) in list {
        help(out, name, "counter", text);
        let _ = writeln!(out, "{name} {v}");
    }
}

/// OTLP export's counters (sinks/otlp/export.rs).
fn render_export(out: &mut String, t: ExportTotals) {
    counters(
        out,
        &[
            (
                "nri_trace_otlp_exported_spans_total",
                "Spans the OTLP collector accepted.",
                t.exported_spans,
            ),
            (
                "nri_trace_otlp_dropped_spans_total",
                "Spans given up: the export queue was full, or the run ended first.",
                t.dropped_spans,
            ),
            (
                "nri_trace_otlp_failed_exports_total",
                "OTLP export requests that failed (retried with backoff).",
                t.failed_exports,
            ),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::nri_call::NriMethod;

    #[test]
    fn histogram_lines_are_cumulative_and_end_at_count() {
        let mut out = String::new();
        let b = Buckets {
            cumulative: vec![0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3],
            count: 4,
            sum_ns: 1_500_000_000,
        };
        histogram(&mut out, "x", "plugin=\"a\"", &b);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), BUCKET_BOUNDS_NS.len() + 3);
        assert_eq!(lines[0], "x_bucket{plugin=\"a\",le=\"0.0001\"} 0");
        assert_eq!(
            lines[BUCKET_BOUNDS_NS.len()],
            "x_bucket{plugin=\"a\",le=\"+Inf\"} 4"
        );
        assert_eq!(lines[BUCKET_BOUNDS_NS.len() + 1], "x_sum{plugin=\"a\"} 1.5");
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn operations_are_named_as_containerd_names_them() {
        use crate::decode::nri::message::Event;
        for (event, name) in [
            (Event::RunPodSandbox, "RunPodSandbox"),
            (Event::PostUpdatePodSandbox, "PostUpdatePodSandbox"),
            (
                Event::ValidateContainerAdjustment,
                "ValidateContainerAdjustment",
            ),
        ] {
            assert_eq!(operation(&Hook::Event(event)), name);
        }
        assert_eq!(
            operation(&Hook::Method(NriMethod::Synchronize)),
            "Synchronize"
        );
        assert_eq!(error_label(4), "deadline_exceeded");
        assert_eq!(error_label(3), "invalid_argument");
        assert_eq!(error_label(-1), "unknown_code");
    }

    #[test]
    fn empty_analysis_renders_the_families() {
        let text = render(&TraceEngine::default());
        for family in [
            "nri_trace_hook_duration_seconds histogram",
            "nri_trace_cri_call_duration_seconds histogram",
            "nri_trace_hook_invocations_total counter",
            "nri_trace_findings_total counter",
            "nri_trace_build_info gauge",
            "nri_trace_capture_lost_records_total counter",
        ] {
            assert!(text.contains(&format!("# TYPE {family}")), "{text}");
        }
        assert!(text.contains("nri_trace_capture_lost_records_total 0"));
    }
}
