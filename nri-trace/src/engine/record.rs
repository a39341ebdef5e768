//! What the engine gives its sinks: [`Record`]s.
//!
//! Three kinds are the engine's own work: a CRI call with the NRI hooks it
//! caused ([`CriSpan`]), an NRI call no CRI call caused ([`Uncaused`]), and
//! a contract finding ([`Violation`]). Everything else the engine passes on
//! is an [`Observation`] as the decoders made it (a plugin connecting, a
//! resync, capture loss, a runtime restart, a kernel event), wrapped, not
//! copied field by field: its JSON is the same line a record file holds
//! (docs/schema.md), so one schema describes both.

use serde::Serialize;

use super::{
    correlate::{ContainerExit, CriSpan, FailedRun, NoCause},
    findings::Violation,
    hook_latency::HookSpan,
};
use crate::{basic_types::Timestamp, model::observation::Observation};

/// One engine output.
// Records are handed to the sinks one by one; spans dominate the stream.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// `{"type":"cri_span", ...}`: a CRI call and its NRI hooks.
    CriSpan(CriSpan),
    /// `{"type":"nri_uncaused", ...}`: an NRI call with no CRI cause.
    NriUncaused(Uncaused),
    /// `{"type":"violation", ...}`: a contract rule broken
    /// (docs/contract.md).
    Violation(Violation),
    /// An observation passed on as it came (its own `type`).
    #[serde(untagged)]
    Observed(Observation),
}

/// An NRI call and why it has no CRI call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Uncaused {
    #[serde(flatten)]
    pub span: HookSpan,
    pub no_cri_cause: NoCause,
    /// The container's exit, for [`NoCause::ContainerExited`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<ContainerExit>,
    /// The RunPodSandbox it undoes, for [`NoCause::Rollback`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolls_back: Option<FailedRun>,
}

impl Record {
    /// The NRI hooks the record holds: a span's, or the uncaused call.
    pub fn hooks(&self) -> &[HookSpan] {
        match self {
            Record::CriSpan(s) => &s.hooks,
            Record::NriUncaused(u) => std::slice::from_ref(&u.span),
            _ => &[],
        }
    }

    /// When it happened: a call's end (or start), a finding's last
    /// evidence, an observation's own time.
    pub fn ts(&self) -> Option<Timestamp> {
        match self {
            Record::CriSpan(s) => s.call.end.or(s.call.start),
            Record::NriUncaused(u) => u.span.call.end.or(u.span.call.start),
            Record::Violation(v) => Some(v.ts),
            Record::Observed(o) => o.ts(),
        }
    }
}
