//! Prometheus metrics of a trace (`watch --metrics-addr`): the text
//! exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>) of the
//! hook latency histograms, the CRI call duration histograms, the finding
//! counters and the capture loss counters.

use std::{
    fmt::Write as _,
    io,
    sync::{Arc, Mutex},
};

use crate::{
    engine::{findings::Severity, histogram::Buckets, record::Record, trace_engine::TraceEngine},
    pipeline::{Ending, Progress, Sink},
};

/// `--metrics-addr`: keeps the exposition [`metrics_server`] serves up to
/// date, re-rendered when the loop is idle and inputs came since the last
/// rendering. The metrics are of everything the engine saw, not only of
/// the records the filters keep, so it goes by the inputs, not by records.
///
/// [`metrics_server`]: super::metrics_server
pub struct MetricsSink {
    text: Arc<Mutex<String>>,
    /// [`Progress::inputs`] when last rendered (`None`: never).
    rendered_at: Option<u64>,
}

impl MetricsSink {
    /// A sink writing the exposition into `text` (the server reads it).
    pub fn new(text: Arc<Mutex<String>>) -> Self {
        MetricsSink {
            text,
            rendered_at: None,
        }
    }

    fn publish(&mut self, engine: &TraceEngine) {
        let rendered = render(engine);
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
        if self.rendered_at != Some(p.inputs) {
            self.publish(p.engine);
            self.rendered_at = Some(p.inputs);
        }
        Ok(())
    }

    fn finish(&mut self, end: &Ending<'_>) -> io::Result<()> {
        self.publish(end.engine);
        Ok(())
    }
}

/// Histogram bounds, seconds: from 100 µs (a plain hook) to 2 min
/// (kubelet's default runtime-request-timeout).
pub const BOUNDS_S: [f64; 14] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0, 120.0,
];

/// Escape a label value (backslash, double quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn histogram(out: &mut String, name: &str, labels: &str, b: &Buckets) {
    for (bound, n) in BOUNDS_S.iter().zip(&b.cumulative) {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", b.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", b.sum_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", b.count);
}

/// The exposition of `a`'s state now.
pub fn render(a: &TraceEngine) -> String {
    let bounds_ns: Vec<u64> = BOUNDS_S.iter().map(|s| (s * 1e9) as u64).collect();
    let (hooks, methods) = a.buckets(&bounds_ns);
    let mut out = String::new();
    out.push_str(
        "# HELP nri_trace_hook_duration_seconds Own time of each NRI hook, per plugin and hook.\n\
         # TYPE nri_trace_hook_duration_seconds histogram\n",
    );
    for (plugin, hook, b) in &hooks {
        let l = format!(
            "plugin=\"{}\",hook=\"{}\"",
            label(plugin),
            label(hook.as_str())
        );
        histogram(&mut out, "nri_trace_hook_duration_seconds", &l, b);
    }
    out.push_str(
        "# HELP nri_trace_cri_call_duration_seconds Duration of each CRI call, per method.\n\
         # TYPE nri_trace_cri_call_duration_seconds histogram\n",
    );
    for (method, b) in &methods {
        let l = format!("method=\"{}\"", label(method));
        histogram(&mut out, "nri_trace_cri_call_duration_seconds", &l, b);
    }
    out.push_str(
        "# HELP nri_trace_findings_total Contract findings (docs/contract.md).\n\
         # TYPE nri_trace_findings_total counter\n",
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
    for (name, help, v) in [
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
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(lines.len(), BOUNDS_S.len() + 3);
        assert_eq!(lines[0], "x_bucket{plugin=\"a\",le=\"0.0001\"} 0");
        assert_eq!(
            lines[BOUNDS_S.len()],
            "x_bucket{plugin=\"a\",le=\"+Inf\"} 4"
        );
        assert_eq!(lines[BOUNDS_S.len() + 1], "x_sum{plugin=\"a\"} 1.5");
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn empty_analysis_renders_the_families() {
        let text = render(&TraceEngine::default());
        for family in [
            "nri_trace_hook_duration_seconds histogram",
            "nri_trace_cri_call_duration_seconds histogram",
            "nri_trace_findings_total counter",
            "nri_trace_capture_lost_records_total counter",
        ] {
            assert!(text.contains(&format!("# TYPE {family}")), "{text}");
        }
        assert!(text.contains("nri_trace_capture_lost_records_total 0"));
    }
}
