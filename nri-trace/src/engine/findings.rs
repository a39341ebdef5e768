//! Findings: [`Violation`] (a rule, its evidence, whether the evidence is
//! complete). The rules that make them, each in its own file with its
//! sentence, are in `contract` (`contract::RULES`, docs/contract.md).
//!
//! A finding carries what was seen as data ([`Detail`], one variant per
//! kind of finding); its rule's sentence and `sinks::finding_message` put
//! it into words.

use serde::Serialize;

use super::hook_latency::Hook;
use crate::{
    basic_types::{ConnId, Timestamp},
    capture::sandbox::SandboxEvent,
    model::{
        cri_call::{CallMethod, CriMethod, CriOutcome},
        nri_call::{Event, NriOutcome},
    },
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
    Critical,
}

/// Whether the evidence is complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "certainty", rename_all = "snake_case")]
pub enum Certainty {
    Certain,
    Uncertain { why: String },
}

/// One call or kernel event that shows a finding, as data (sinks word
/// it: `sinks::finding_message::evidence_words`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Evidence {
    /// A CRI call (the same output holds it: `conn`, `stream_id`).
    Cri {
        conn: ConnId,
        stream_id: u32,
        method: Option<String>,
        start: Option<Timestamp>,
        outcome: CriOutcome,
    },
    /// An NRI delivery to `plugin`.
    Nri {
        conn: ConnId,
        stream_id: u32,
        hook: Hook,
        plugin: String,
        start: Option<Timestamp>,
        outcome: NriOutcome,
    },
    /// A kernel event of the sandbox probes (a SIGKILL no exit followed,
    /// an unmount or removal that failed).
    Kernel { event: SandboxEvent },
}

/// A rule broken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: &'static str,
    pub severity: Severity,
    #[serde(flatten)]
    pub certainty: Certainty,
    /// When it was seen (the last evidence).
    pub ts: Timestamp,
    /// "namespace/name" or a sandbox id.
    pub pod: Option<String>,
    pub plugin: Option<String>,
    /// What was seen, as data.
    pub detail: Detail,
    pub evidence: Vec<Evidence>,
}

/// What a finding saw, one variant per kind of finding (`"kind"` in
/// JSON). The plugin and pod are the [`Violation`]'s own fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Detail {
    /// pod-event-order, container-event-order: the plugin's events of one
    /// object, in the order it received them.
    EventOrder { seen: Vec<Hook> },
    /// unsubscribed-event-delivered.
    Unsubscribed { hook: Hook },
    /// subscribed-event-not-delivered: who did receive it.
    NotDelivered {
        hook: Hook,
        received_by: Vec<String>,
    },
    /// pod-unknown-to-plugin: a plugin received an event of a pod neither
    /// its Synchronize nor a RunPodSandbox announced (the Synchronize race).
    PodUnknown { hook: Hook },
    /// event-unexplained-after-restart, at a plugin: an event of a pod from
    /// before the restart it was never told of since; `synchronized`:
    /// whether it got a Synchronize (that did not list the pod).
    UnannouncedAfterRestart {
        hook: Hook,
        runtime_pid: u32,
        synchronized: bool,
    },
    /// event-unexplained-after-restart, at the runtime: a teardown call of
    /// a pod from before the restart succeeded without delivering `event`
    /// to these subscribed plugins.
    UndeliveredAfterRestart {
        method: Option<CallMethod>,
        #[serde(serialize_with = "event_name")]
        event: Event,
        runtime_pid: u32,
        subscribed: Vec<String>,
    },
    /// teardown-hook-failed: the hook's outcome; the CRI call it was part
    /// of (method, whether it succeeded) when known; subscribed plugins
    /// after it that were not called.
    TeardownHookFailed {
        hook: Hook,
        outcome: NriOutcome,
        cri_method: Option<CallMethod>,
        cri_ok: Option<bool>,
        not_called: Vec<String>,
    },
    /// plugin-timeout: no answer within `timeout_ns`; whether the runtime
    /// then closed the connection (containerd does when its own timer
    /// fired) or left it open (a cancelled request).
    PluginTimeout {
        hook: Hook,
        timeout_ns: Option<u64>,
        connection_closed: bool,
    },
    /// plugin-timeout, at the end: deliveries a disconnected plugin would
    /// have had.
    MissedAfterDisconnect { missed: u64 },
    /// hook-over-budget.
    HookOverBudget {
        hook: Hook,
        own_ns: u64,
        budget_ns: u64,
    },
    /// container-before-pod-ready.
    ContainerBeforePodReady {
        hook: Hook,
        container: Option<String>,
    },
    /// container-in-stopped-pod.
    ContainerInStoppedPod { hook: Hook },
    /// cri-name-reservation-retry: `requests` calls after the client's
    /// deadline, `reserved` of them answered "name reserved"; the pod was
    /// held up `held_ns`.
    NameReservationRetry {
        method: CriMethod,
        attempt: u32,
        requests: usize,
        reserved: usize,
        held_ns: u64,
    },
    /// split-synchronize-reply: the plugin's answer to a Synchronize part
    /// listing `pods` pods with more to come.
    SplitSynchronizeReply {
        pods: usize,
        reply_more: bool,
        reply_updates: usize,
    },
    /// adjustment-rejected: `validator` (a plugin's label, or the
    /// runtime's built-in one, `builtin`: not on any socket) rejected the
    /// adjustments of `container` for `reason`; `adjusted_by`: the plugins
    /// whose adjustments it rejected (those the reason names, else every
    /// plugin that adjusted the container), with what each adjusted.
    AdjustmentRejected {
        validator: String,
        builtin: bool,
        reason: String,
        container: Option<String>,
        adjusted_by: Vec<AdjustedBy>,
    },
    /// process-survives-sigkill: `pid` alive `after_ns` after SIGKILL from
    /// `sender`.
    ProcessSurvivesSigkill {
        pid: u32,
        comm: Option<String>,
        sender_comm: String,
        sender_pid: u32,
        after_ns: u64,
    },
    /// teardown-unmount-failed, teardown-remove-failed: the syscall's
    /// failure, not redone within `within_ns`.
    TeardownPathFailed {
        op: PathOp,
        path: String,
        errno: i32,
        comm: String,
        pid: u32,
        within_ns: u64,
    },
}

/// A plugin's adjustment of a container: what it adjusted ("hooks",
/// "env", ...: `assemble::nri::adjusted_parts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdjustedBy {
    pub plugin: String,
    pub parts: Vec<String>,
}

/// What was done to a pod's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathOp {
    Unmount,
    Remove,
}

/// An event by its protobuf name (`REMOVE_POD_SANDBOX`), as NriCall's
/// `event` is written.
#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde passes a reference"
)]
fn event_name<S: serde::Serializer>(e: &Event, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(e.as_str_name())
}
