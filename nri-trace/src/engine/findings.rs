//! Findings and the rules they break: [`Violation`] (a rule, its evidence,
//! whether the evidence is complete) and [`RULES`], every rule this build
//! checks with its statement and source (docs/contract.md).
//!
//! Both rule checkers produce these: the NRI contract over calls
//! (`contract`) and the kernel's side of a teardown (`sandbox_rules`).
//! A finding carries what was seen as data ([`Detail`], one variant per
//! kind of finding); sinks turn it into words
//! (`sinks::finding_message`).

use serde::Serialize;

use super::hook_latency::Hook;
use crate::{
    capture::{sandbox::SandboxEvent, ConnId, Timestamp},
    model::{cri_call::CriOutcome, nri_call::Outcome},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
    Critical,
}

/// One rule of the contract.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rule {
    pub id: &'static str,
    pub statement: &'static str,
    pub source: &'static str,
    pub severity: Severity,
}

pub const POD_EVENT_ORDER: &str = "pod-event-order";
pub const CONTAINER_EVENT_ORDER: &str = "container-event-order";
pub const CONTAINER_BEFORE_POD_READY: &str = "container-before-pod-ready";
pub const CONTAINER_IN_STOPPED_POD: &str = "container-in-stopped-pod";
pub const UNSUBSCRIBED_DELIVERED: &str = "unsubscribed-event-delivered";
pub const SUBSCRIBED_NOT_DELIVERED: &str = "subscribed-event-not-delivered";
pub const TEARDOWN_HOOK_FAILED: &str = "teardown-hook-failed";
pub const PLUGIN_TIMEOUT: &str = "plugin-timeout";
pub const HOOK_OVER_BUDGET: &str = "hook-over-budget";
pub const NAME_RESERVATION_RETRY: &str = "cri-name-reservation-retry";
pub const POD_UNKNOWN_TO_PLUGIN: &str = "pod-unknown-to-plugin";
pub const UNEXPLAINED_AFTER_RESTART: &str = "event-unexplained-after-restart";
pub const PROCESS_SURVIVES_SIGKILL: &str = "process-survives-sigkill";
pub const TEARDOWN_UNMOUNT_FAILED: &str = "teardown-unmount-failed";
pub const TEARDOWN_REMOVE_FAILED: &str = "teardown-remove-failed";
pub const SPLIT_SYNCHRONIZE_REPLY: &str = "split-synchronize-reply";
pub const ADJUSTMENT_REJECTED: &str = "adjustment-rejected";

/// Every rule this build checks (docs/contract.md).
pub const RULES: &[Rule] = &[
    Rule {
        id: POD_EVENT_ORDER,
        statement: "each plugin sees a pod's RunPodSandbox, StopPodSandbox, RemovePodSandbox in that order",
        source: "nri PR 286 contract item 4 (nri-pod-sandbox-contract-review.txt)",
        severity: Severity::Error,
    },
    Rule {
        id: CONTAINER_EVENT_ORDER,
        statement: "each plugin sees a container's Create, Start, Stop, Remove in that order",
        source: "nri pkg/adaptation container lifecycle; PROTOCOL-NOTES.md",
        severity: Severity::Error,
    },
    Rule {
        id: CONTAINER_BEFORE_POD_READY,
        statement: "no workload container is created or started before the RunPodSandbox hook completes",
        source: "nri PR 286 contract item 5",
        severity: Severity::Error,
    },
    Rule {
        id: CONTAINER_IN_STOPPED_POD,
        statement: "no container is created or started in a pod after its StopPodSandbox",
        source: "nri PR 286 contract items 2 and 6",
        severity: Severity::Error,
    },
    Rule {
        id: UNSUBSCRIBED_DELIVERED,
        statement: "a plugin only receives events it subscribed to in Configure",
        source: "nri pkg/api Configure (events mask)",
        severity: Severity::Warning,
    },
    Rule {
        id: SUBSCRIBED_NOT_DELIVERED,
        statement: "every connected plugin subscribed to an event receives it (a plugin that registers during an operation may miss it: the Synchronize race)",
        source: "nri issue 63 (nri-63-synchronize-race.txt); PROTOCOL-NOTES.md",
        severity: Severity::Error,
    },
    Rule {
        id: POD_UNKNOWN_TO_PLUGIN,
        statement: "every pod a plugin receives events for was announced to it, in Synchronize or by RunPodSandbox",
        source: "nri issue 63, the Synchronize race (nri-63-synchronize-race.txt)",
        severity: Severity::Error,
    },
    Rule {
        id: UNEXPLAINED_AFTER_RESTART,
        statement: "after a runtime restart, plugins still know the pods that existed before it: an event for such a pod reaches only plugins told of it since (Synchronize, RunPodSandbox), and its teardown events are still delivered",
        source: "PROTOCOL-NOTES.md (containerd keeps NRI state in memory: after a restart RemovePodSandbox can be missed); nri pkg/adaptation Synchronize",
        severity: Severity::Error,
    },
    Rule {
        id: TEARDOWN_HOOK_FAILED,
        statement: "a plugin error or timeout on the teardown path must not block or fail the CRI operation nor stop delivery to later plugins",
        source: "nri PR 286 teardown clause; CRI-O issue 4221 (crio-4221-context-timeouts.txt)",
        severity: Severity::Error,
    },
    Rule {
        id: PLUGIN_TIMEOUT,
        statement: "a plugin that does not answer within the request timeout is disconnected and misses what follows",
        source: "nri pkg/adaptation plugin request timeout; PROTOCOL-NOTES.md",
        severity: Severity::Error,
    },
    Rule {
        id: HOOK_OVER_BUDGET,
        statement: "a hook takes less than its budget (default: half the plugin request timeout)",
        source: "nri-trace; kubelet's runtime-request-timeout leaves the hooks a share of it",
        severity: Severity::Warning,
    },
    Rule {
        id: NAME_RESERVATION_RETRY,
        statement: "a pod or container is not requested again with the same name and attempt after a client deadline (it runs into the runtime's name reservation until the first request ends)",
        source: "CRI-O issue 4221; containerd name reservation (PROTOCOL-NOTES.md)",
        severity: Severity::Warning,
    },
    Rule {
        id: ADJUSTMENT_REJECTED,
        statement: "the adjustments plugins make to a container pass every validator (the runtime's built-in default validator, plugins serving ValidateContainerAdjustment); a rejection fails CRI CreateContainer",
        source: "containerd/nri docs/validation-plugins.md; plugins/default-validator/default-validator.go (NRI v0.10+)",
        severity: Severity::Error,
    },
    Rule {
        id: SPLIT_SYNCHRONIZE_REPLY,
        statement: "a plugin answers each part of a split Synchronize that has more to come with `more` echoed and no updates (its updates go with the last part); otherwise the runtime closes it and its registration fails",
        source: "containerd/nri v0.7+ pkg/adaptation/plugin.go synchronize (\"plugin does not handle split sync requests\"); pkg/stub; issue 21",
        severity: Severity::Error,
    },
    Rule {
        id: PROCESS_SURVIVES_SIGKILL,
        statement: "a pod process sent SIGKILL exits within 5 s: one still alive is stuck in the kernel (state D: I/O, NFS, FUSE) and keeps its pod in Terminating",
        source: "pod-stuck-terminating-zh.txt (kubelet waits for every container to stop); sandbox probes (docs/explain.md)",
        severity: Severity::Critical,
    },
    Rule {
        id: TEARDOWN_UNMOUNT_FAILED,
        statement: "an unmount of a pod's path (container rootfs, volume, netns) succeeds, or is redone successfully within 5 s",
        source: "pod-stuck-terminating-zh.txt (device or resource busy); sandbox probes (docs/explain.md)",
        severity: Severity::Error,
    },
    Rule {
        id: TEARDOWN_REMOVE_FAILED,
        statement: "a pod's directories, netns file and cgroups can be removed (the rmdir or unlink succeeds, or is redone successfully within 5 s)",
        source: "pod-stuck-terminating-zh.txt (kubelet waits for the pod cgroup to go); sandbox probes (docs/explain.md)",
        severity: Severity::Error,
    },
];

pub fn rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
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
        outcome: Outcome,
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
    EventOrder { seen: Vec<String> },
    /// unsubscribed-event-delivered.
    Unsubscribed { hook: Hook },
    /// subscribed-event-not-delivered: who did receive it.
    NotDelivered {
        hook: String,
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
        method: Option<String>,
        event: String,
        runtime_pid: u32,
        subscribed: Vec<String>,
    },
    /// teardown-hook-failed: the hook's outcome; the CRI call it was part
    /// of (method, whether it succeeded) when known; subscribed plugins
    /// after it that were not called.
    TeardownHookFailed {
        hook: Hook,
        outcome: Outcome,
        cri_method: Option<String>,
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
        method: String,
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
/// "env", ...: `model::nri_call::adjusted_parts`).
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
