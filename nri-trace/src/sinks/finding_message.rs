//! A finding in words: the one sentence every sink shows for a
//! [`Violation`] (text, report, TUI, explain, and `message` next to
//! `detail` in JSON lines). The engine gives the data ([`Detail`]); the
//! wording lives here only. Plugin and pod names come from the capture:
//! sinks sanitize the sentence before showing it.

use serde::Serialize;

use crate::{
    capture::{
        sandbox::{errno_text, SandboxOp},
        ConnId, Timestamp,
    },
    engine::findings::{Detail, Evidence, PathOp, Violation},
    human::duration,
};

/// The finding's sentence.
pub fn message(v: &Violation) -> String {
    sentence(&v.detail, v.plugin.as_deref(), v.pod.as_deref())
}

/// The sentence for what a finding saw, about `plugin` and `pod`.
pub fn sentence(detail: &Detail, plugin: Option<&str>, pod: Option<&str>) -> String {
    let plugin = plugin.unwrap_or("?");
    let method = |m: &Option<String>| m.clone().unwrap_or_else(|| "?".into());
    match detail {
        Detail::EventOrder { seen } => format!("{plugin} saw {} in this order", seen.join(" -> ")),
        Detail::Unsubscribed { hook } => {
            format!("{plugin} received {hook} without subscribing to it")
        }
        Detail::NotDelivered { hook, received_by } => format!(
            "{plugin} is subscribed to {hook} and connected since before it, but only {} received it",
            received_by.join(", ")
        ),
        Detail::PodUnknown { hook } => format!(
            "{plugin} received {hook} for a pod it was never told about: not in its Synchronize, \
             no RunPodSandbox (it registered while the pod was being created: the Synchronize \
             race)"
        ),
        Detail::UnannouncedAfterRestart {
            hook,
            runtime_pid,
            synchronized,
        } => format!(
            "{plugin} received {hook} for a pod from before the runtime restarted (new pid \
             {runtime_pid}) that it was never told about since: {}, no RunPodSandbox",
            if *synchronized {
                "its Synchronize did not list it"
            } else {
                "it got no Synchronize"
            }
        ),
        Detail::UndeliveredAfterRestart {
            method: m,
            event,
            runtime_pid,
            subscribed,
        } => format!(
            "{} of a pod from before the runtime restarted (new pid {runtime_pid}) succeeded but \
             delivered no {event}; subscribed: {}",
            method(m),
            subscribed.join(", ")
        ),
        Detail::TeardownHookFailed {
            hook,
            outcome,
            cri_method,
            cri_ok,
            not_called,
        } => {
            let mut s = format!("{plugin} failed {hook} ({})", outcome.describe());
            match cri_ok {
                Some(true) => s.push_str(&format!(
                    "; the runtime went on: CRI {} succeeded",
                    method(cri_method)
                )),
                Some(false) => s.push_str(&format!("; CRI {} failed with it", method(cri_method))),
                None => {}
            }
            if !not_called.is_empty() {
                s.push_str(&format!("; later plugins not called: {}", not_called.join(", ")));
            }
            s
        }
        Detail::PluginTimeout {
            hook,
            timeout_ns,
            connection_closed,
        } => format!(
            "{plugin} did not answer {hook} within its timeout{}; {}",
            timeout_ns
                .map(|t| format!(" ({})", duration(t)))
                .unwrap_or_default(),
            if *connection_closed {
                "the runtime closed its connection"
            } else {
                "the runtime gave up on it with the connection left open"
            }
        ),
        Detail::MissedAfterDisconnect { missed } => {
            format!("{plugin} missed {missed} subscribed event deliveries after it was disconnected")
        }
        Detail::HookOverBudget {
            hook,
            own_ns,
            budget_ns,
        } => format!(
            "{plugin} took {} on {hook}, over its budget of {}",
            duration(*own_ns),
            duration(*budget_ns)
        ),
        Detail::ContainerBeforePodReady { hook, container } => format!(
            "{hook} of {} began before the pod's RunPodSandbox hooks finished",
            container.as_deref().unwrap_or("?")
        ),
        Detail::ContainerInStoppedPod { hook } => {
            format!("{hook} after the pod's StopPodSandbox")
        }
        Detail::NameReservationRetry {
            method: m,
            attempt,
            requests,
            reserved,
            held_ns,
        } => format!(
            "{m} of {} (attempt {attempt}) was requested {requests} times after the client's \
             deadline ({reserved} answered 'name reserved'); the pod was held up {}",
            pod.unwrap_or("?"),
            duration(*held_ns)
        ),
        Detail::SplitSynchronizeReply {
            pods,
            reply_more,
            reply_updates,
        } => format!(
            "{plugin} answered a split Synchronize part ({pods} pods, more to come) with \
             more={reply_more} and {reply_updates} updates: a runtime on NRI >= 0.7 closes such a \
             plugin (built on an NRI stub older than v0.7?)"
        ),
        Detail::AdjustmentRejected {
            validator,
            builtin,
            reason,
            container,
            adjusted_by,
        } => {
            let whose = if adjusted_by.is_empty() {
                "the plugins' adjustments (none seen adjusting it)".to_string()
            } else {
                let who: Vec<_> = adjusted_by
                    .iter()
                    .map(|a| format!("{}'s ({})", a.plugin, a.parts.join(", ")))
                    .collect();
                let noun = if who.len() == 1 { "adjustment" } else { "adjustments" };
                format!("{} {noun}", who.join(" and "))
            };
            format!(
                "validator {validator}{} rejected {whose} of container {} in {}: {reason}; CreateContainer failed",
                if *builtin { " (built into the runtime)" } else { "" },
                container.as_deref().unwrap_or("?"),
                pod.unwrap_or("?"),
            )
        }
        Detail::ProcessSurvivesSigkill {
            pid,
            comm,
            sender_comm,
            sender_pid,
            after_ns,
        } => format!(
            "pid {pid}{} was still alive {} after SIGKILL from {sender_comm}[{sender_pid}]: stuck \
             in the kernel (see its state and wchan: nri-trace explain)",
            comm.as_ref().map(|c| format!(" ({c})")).unwrap_or_default(),
            duration(*after_ns)
        ),
        Detail::TeardownPathFailed {
            op,
            path,
            errno,
            comm,
            pid,
            within_ns,
        } => format!(
            "{} {path} failed with {} ({comm}[{pid}]) and was not redone within {}",
            match op {
                PathOp::Unmount => "unmounting",
                PathOp::Remove => "removing",
            },
            errno_text(*errno),
            duration(*within_ns)
        ),
    }
}

/// A piece of evidence in words (unsanitized: sinks sanitize).
pub struct EvidenceWords {
    /// "cri", "nri" or "kernel".
    pub kind: &'static str,
    pub start: Option<Timestamp>,
    /// The call (method; hook -> plugin) or the kernel event.
    pub what: String,
    pub outcome: String,
    pub ok: bool,
    /// Where the call is in the same output (connection, stream).
    pub at: Option<(ConnId, u32)>,
}

/// The evidence in words, the same for every sink.
pub fn evidence_words(e: &Evidence) -> EvidenceWords {
    match e {
        Evidence::Cri {
            conn,
            stream_id,
            method,
            start,
            outcome,
        } => EvidenceWords {
            kind: "cri",
            start: *start,
            what: method.clone().unwrap_or_else(|| "(unknown)".into()),
            outcome: outcome.describe(),
            ok: outcome.is_ok(),
            at: Some((*conn, *stream_id)),
        },
        Evidence::Nri {
            conn,
            stream_id,
            hook,
            plugin,
            start,
            outcome,
        } => EvidenceWords {
            kind: "nri",
            start: *start,
            what: format!("{hook} -> {plugin}"),
            outcome: outcome.describe(),
            ok: outcome.is_ok(),
            at: Some((*conn, *stream_id)),
        },
        Evidence::Kernel { event } => EvidenceWords {
            kind: "kernel",
            start: Some(event.ts),
            what: event.describe(),
            // The kernel rules' evidence: a SIGKILL no exit followed, or a
            // path operation's failure.
            outcome: match &event.op {
                SandboxOp::Signal { .. } => "no exit".into(),
                op => op
                    .path_result()
                    .map_or_else(String::new, |(_, errno)| errno_text(errno)),
            },
            ok: false,
            at: None,
        },
    }
}

/// Whether the finding is a plugin the runtime disconnected (a timeout
/// after which it closed the connection).
pub fn is_disconnect(v: &Violation) -> bool {
    matches!(
        v.detail,
        Detail::PluginTimeout {
            connection_closed: true,
            ..
        }
    )
}

/// A finding as a JSON line: its data, and its sentence as `message`
/// (docs/schema.md).
#[derive(Serialize)]
#[serde(tag = "type", rename = "violation")]
pub struct ViolationLine<'a> {
    #[serde(flatten)]
    pub violation: &'a Violation,
    pub message: String,
}

impl<'a> ViolationLine<'a> {
    pub fn new(violation: &'a Violation) -> Self {
        ViolationLine {
            violation,
            message: message(violation),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        findings::{Certainty, Severity, PLUGIN_TIMEOUT},
        hook_latency::Hook,
    };

    fn finding(detail: Detail) -> Violation {
        Violation {
            rule: PLUGIN_TIMEOUT,
            severity: Severity::Error,
            certainty: Certainty::Certain,
            ts: Timestamp {
                mono_ns: 1,
                wall_ns: 0,
            },
            pod: Some("default/web".into()),
            plugin: Some("10-slow".into()),
            detail,
            evidence: vec![],
        }
    }

    #[test]
    fn timeout_sentence_says_what_the_runtime_did() {
        let v = finding(Detail::PluginTimeout {
            hook: Hook::Method("Configure".into()),
            timeout_ns: Some(2_000_000_000),
            connection_closed: true,
        });
        assert_eq!(
            message(&v),
            "10-slow did not answer Configure within its timeout (2.00s); the runtime closed its \
             connection"
        );
        assert!(is_disconnect(&v));
    }

    #[test]
    fn kernel_evidence_says_its_errno() {
        use crate::capture::sandbox::{SandboxEvent, SandboxOp};
        let event = SandboxEvent {
            ts: Timestamp {
                mono_ns: 1,
                wall_ns: 0,
            },
            tgid: 8,
            tid: 8,
            comm: "kubelet".into(),
            cgroup_id: 1,
            cgroup: None,
            op: SandboxOp::Umount {
                path: "/var/lib/kubelet/pods/u/volumes/v".into(),
                flags: 0,
                errno: libc::EBUSY,
            },
            truncated: false,
        };
        let w = evidence_words(&Evidence::Kernel { event });
        assert_eq!((w.kind, w.ok, w.at), ("kernel", false, None));
        assert!(w.outcome.starts_with("EBUSY"), "{}", w.outcome);
        assert!(
            w.what.contains("/var/lib/kubelet/pods/u/volumes/v"),
            "{}",
            w.what
        );
    }

    #[test]
    fn json_line_has_detail_and_message() {
        let v = finding(Detail::MissedAfterDisconnect { missed: 3 });
        let j = serde_json::to_value(ViolationLine::new(&v)).unwrap();
        assert_eq!(j["type"], "violation");
        assert_eq!(j["rule"], PLUGIN_TIMEOUT);
        assert_eq!(j["detail"]["kind"], "missed_after_disconnect");
        assert_eq!(j["detail"]["missed"], 3);
        assert_eq!(
            j["message"],
            "10-slow missed 3 subscribed event deliveries after it was disconnected"
        );
    }
}
