//! Findings and the rules they break: [`Violation`] (a rule, its evidence,
//! whether the evidence is complete) and [`RULES`], every rule this build
//! checks with its statement and source (docs/contract.md).
//!
//! Both rule checkers produce these: the NRI contract over calls
//! (`contract`) and the kernel's side of a teardown (`sandbox_rules`).
//! Sinks turn them into words.

use serde::Serialize;

use crate::capture::{ConnId, Timestamp};

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

/// One call that shows a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// "cri" or "nri".
    pub kind: &'static str,
    pub conn: ConnId,
    pub stream_id: u32,
    /// Method or hook, and plugin for NRI calls.
    pub what: String,
    pub start: Option<Timestamp>,
    pub outcome: String,
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
    pub message: String,
    pub evidence: Vec<Evidence>,
}
