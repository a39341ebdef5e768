//! The engine: pure, deterministic analysis of the model's calls and events
//! (the same input gives the same findings, live or replayed).
//!
//! - [`hook_latency`]: per-delivery [`hook_latency::HookSpan`]s (own time
//!   and time queued behind earlier plugins) and per (plugin, hook)
//!   latency histograms.
//! - [`correlate`]: NRI deliveries attached to the CRI calls that caused
//!   them ([`correlate::CriSpan`]), or labeled with why none did.
//! - [`contract`]: the contract rules, one file each, checked over the
//!   correlated stream and the kernel's side of a teardown
//!   (docs/contract.md); [`conformance`]: the clauses a runtime keeps or
//!   breaks by design, tallied over every pod instead of found per pod.
//! - [`findings`]: what the rules give: [`findings::Violation`]s with
//!   evidence.
//! - [`record`]: what the engine gives its sinks ([`record::Record`]).
//! - [`pods`]: the pod model (identity, phase, timeline, findings) the
//!   views render.
//! - [`teardown`]: each pod's teardown and what blocks it (`explain`).
//! - [`window`]: latency over the last minute of capture time;
//!   [`histogram`]: how latencies are recorded and bucketed.
//! - [`trace_engine`]: [`trace_engine::TraceEngine`], all of the above
//!   over the observations of one runtime.
//! - [`cri_latency`]: per-method counts (known / inferred / unknown) and
//!   latency of CRI calls.
//! - [`pod_index`]: which pod a record is about, from the ids it names.

pub mod conformance;
pub mod contract;
pub mod correlate;
pub mod cri_latency;
pub mod findings;
pub mod histogram;
pub mod hook_latency;
pub(crate) mod pod_index;
pub mod pods;
pub mod record;
pub mod sync_clause;
pub mod teardown;
pub mod trace_engine;
pub mod window;

#[cfg(test)]
pub(crate) mod test_calls;
