//! Sinks: where analysed records go.
//!
//! - [`nri_lines`]: `nri-trace nri` output, text or NDJSON, and the hook
//!   latency table.
//! - [`cri_lines`]: `nri-trace cri` output, text or NDJSON, and the
//!   per-method table.
//!
//! - [`trace_lines`]: `nri-trace trace` output: CRI calls with their NRI
//!   hooks.
//!
//! - [`metrics`]: Prometheus exposition of a trace (`--metrics-addr`).
//! - [`report`]: `nri-trace report`: pods, slowest hooks, tables, findings.
//!
//! (`crate::output` prints the raw capture stream of `nri-trace capture`.)

pub mod cri_lines;
pub mod explain_text;
pub mod metrics;
pub mod nri_lines;
pub mod report;
pub mod trace_lines;
pub mod tui;
