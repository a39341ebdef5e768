//! Sinks: where analysed records go.
//!
//! - [`nri_lines`]: `nri-trace nri` output, text or NDJSON, and the hook
//!   latency table.
//!
//! (`crate::output` prints the raw capture stream of `nri-trace capture`.)

pub mod nri_lines;
