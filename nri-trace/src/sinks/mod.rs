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
//!
//! [`finding_message`] words a finding, the same for every sink.
//!
//! (`crate::output` prints the raw capture stream of `debug capture`;
//! `crate::human` is the one duration format and the one sanitizer.)

pub(crate) mod cri_lines;
pub mod explain;
pub mod finding_message;
pub mod json;
pub mod lines;
pub mod metrics;
pub mod metrics_server;
pub(crate) mod nri_lines;
pub mod report;
pub mod text;
pub mod tui;
