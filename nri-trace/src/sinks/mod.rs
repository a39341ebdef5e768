//! Sinks: where the engine's records go, each behind
//! [`crate::pipeline::Sink`]; they render and decide nothing.
//!
//! - [`text`]: `-o text`, each pod's story for a person ([`lines`],
//!   [`nri_lines`] and [`cri_lines`] format the lines the text sinks
//!   share).
//! - [`json`]: `-o json`, NDJSON in the record files' schema.
//! - [`report`]: `report` / `-o report`: pods, slowest hooks, tables,
//!   findings.
//! - [`tui`]: the on-node TUI.
//! - [`metrics`]: Prometheus exposition (`--metrics-addr`), served by
//!   [`metrics_server`].
//! - [`explain`]: `explain POD`: a pod's teardown and what holds it.
//! - [`otlp`]: `--otlp-endpoint`, the records as OpenTelemetry spans.
//!
//! [`finding_message`] words a finding, the same for every sink.
//!
//! (`crate::output` prints the raw capture stream of `debug capture`;
//! `crate::human` is the one duration format and the one sanitizer.)

pub(crate) mod cri_lines;
pub mod explain;
pub(crate) mod finding_message;
pub(crate) mod json;
pub(crate) mod lines;
pub(crate) mod metrics;
pub(crate) mod metrics_server;
pub(crate) mod nri_lines;
pub(crate) mod otlp;
pub(crate) mod polls;
pub(crate) mod report;
pub(crate) mod text;
pub mod tui;

// Each sink by its type; `explain` and `tui` stay namespaces of what their
// commands call (issue 35).
pub use finding_message::finding_message;
pub use json::JsonSink;
pub use lines::observation_text;
pub use metrics::MetricsSink;
pub use metrics_server::serve_metrics;
pub use otlp::{ExportCounters, ExportError, OtlpSink};
pub use report::ReportSink;
pub use text::TextSink;
