//! The engine: pure, deterministic analysis of the model's calls and events
//! (the same input gives the same findings, live or replayed).
//!
//! Its files (private; what the rest names is re-exported here):
//! - `hook_latency`: per-delivery [`HookSpan`]s (own time and time queued
//!   behind earlier plugins) and per (plugin, hook) latency histograms.
//! - `correlate`: NRI deliveries attached to the CRI calls that caused
//!   them ([`CriSpan`]), or labeled with why none did ([`NoCause`]).
//! - [`contract`]: the contract rules, one file each, checked over the
//!   correlated stream and the kernel's side of a teardown
//!   (docs/contract.md); `conformance`: the clauses a runtime keeps or
//!   breaks by design, tallied over every pod instead of found per pod
//!   ([`ClauseTally`]).
//! - `findings`: what the rules give: [`Violation`]s with evidence.
//! - `record`: what the engine gives its sinks ([`Record`]).
//! - `pods`: the pod model (identity, phase, timeline, findings) the
//!   views render ([`PodModel`]).
//! - `teardown`: each pod's teardown and what blocks it (`explain`:
//!   [`TeardownLog`], [`Verdict`]).
//! - `window`: latency over the last minute of capture time;
//!   `histogram`: how latencies are recorded and bucketed.
//! - `trace_engine`: [`TraceEngine`], all of the above over the
//!   observations of one runtime.
//! - `cri_latency`: per-method counts (known / inferred / unknown) and
//!   latency of CRI calls ([`MethodSummary`]).
//! - `pod_index`: which pod a record is about, from the ids it names.

pub(crate) mod conformance;
pub mod contract;
pub(crate) mod correlate;
pub(crate) mod cri_latency;
pub(crate) mod findings;
pub(crate) mod histogram;
pub(crate) mod hook_latency;
pub(crate) mod pod_index;
pub(crate) mod pods;
pub(crate) mod record;
pub(crate) mod sync_clause;
pub(crate) mod teardown;
pub(crate) mod trace_engine;
pub(crate) mod window;

// The engine's boundary: what the pipeline hands its sinks and what the
// binary, the tests and the benchmarks name. The rules stay a public
// module ([`contract`]): one file per rule, each with its `RULE`.
pub use self::{
    conformance::{ClauseCase, ClauseTally, KernelStep},
    correlate::{causes, ContainerExit, CriSpan, FailedRun, NoCause},
    cri_latency::{MethodBuckets, MethodSummary},
    findings::{AdjustedBy, Certainty, Detail, Evidence, PathOp, Severity, Violation},
    histogram::{Buckets, BUCKET_BOUNDS_NS},
    hook_latency::{Hook, HookBuckets, HookSpan, HookSummary},
    pods::{ContainerPhase, ContainerView, PodModel, PodPhase, PodView, TimelineEntry},
    record::{Record, Uncaused},
    sync_clause::{SyncCase, SyncStep, SYNCHRONIZE_TELLS_EXISTING_PODS},
    teardown::{
        Blocker, Explanation, KernelEntry, NextStep, PodFinding, Removal, StepHook, TeardownLog,
        TeardownProgress, TeardownStep, Verdict,
    },
    trace_engine::TraceEngine,
    window::WindowStats,
};

#[cfg(test)]
pub(crate) mod test_calls;
