//! A finding in words: the one sentence every sink shows for a
//! [`Violation`] (text, report, TUI, explain, and `message` next to
//! `detail` in JSON lines), and its evidence in words. The engine gives the
//! data ([`Detail`]); the sentence is its rule's, from the rule's own file
//! (`engine::contract`). Plugin and pod names come from the capture: sinks
//! sanitize the sentence before showing it.

use serde::Serialize;

use crate::{
    capture::{
        sandbox::{errno_text, SandboxOp},
        ConnId, Timestamp,
    },
    engine::{
        contract,
        findings::{Detail, Evidence, Violation},
    },
};

/// The finding's sentence.
pub fn finding_message(v: &Violation) -> String {
    sentence(&v.detail, v.plugin.as_deref(), v.pod.as_deref())
}

/// The sentence for what a finding saw, about `plugin` and `pod`: its
/// rule's words (each rule's file in `engine::contract` holds them).
pub(crate) fn sentence(detail: &Detail, plugin: Option<&str>, pod: Option<&str>) -> String {
    contract::rules::sentence(detail, plugin, pod)
}

/// A piece of evidence in words (unsanitized: sinks sanitize).
pub(crate) struct EvidenceWords {
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
pub(crate) fn evidence_words(e: &Evidence) -> EvidenceWords {
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
pub(crate) fn is_disconnect(v: &Violation) -> bool {
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
pub(crate) struct ViolationLine<'a> {
    #[serde(flatten)]
    pub violation: &'a Violation,
    pub message: String,
}

impl<'a> ViolationLine<'a> {
    pub(crate) fn new(violation: &'a Violation) -> Self {
        ViolationLine {
            violation,
            message: finding_message(violation),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        contract::plugin_timeout::RULE as PLUGIN_TIMEOUT,
        findings::{Certainty, Severity},
        hook_latency::Hook,
    };
    use crate::model::nri_call::NriMethod;

    fn finding(detail: Detail) -> Violation {
        Violation {
            rule: PLUGIN_TIMEOUT.id,
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
            hook: Hook::Method(NriMethod::Configure),
            timeout_ns: Some(2_000_000_000),
            connection_closed: true,
        });
        assert_eq!(
            finding_message(&v),
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
        assert_eq!(j["rule"], PLUGIN_TIMEOUT.id);
        assert_eq!(j["detail"]["kind"], "missed_after_disconnect");
        assert_eq!(j["detail"]["missed"], 3);
        assert_eq!(
            j["message"],
            "10-slow missed 3 subscribed event deliveries after it was disconnected"
        );
    }
}
