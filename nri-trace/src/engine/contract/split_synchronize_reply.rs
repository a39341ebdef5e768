//! `split-synchronize-reply`: how a plugin answers the parts of a split
//! Synchronize.
//!
//! NRI >= 0.7 splits a Synchronize whose pods and containers do not fit in
//! one ttrpc message: every part but the last has `more` set, and the
//! runtime wants each such part answered with `more` echoed and no
//! updates (the updates go with the last part). Any other answer makes it
//! close the plugin, "plugin does not handle split sync requests"
//! (containerd/nri v0.7+ `pkg/adaptation/plugin.go` `synchronize`). A
//! plugin built on a stub older than v0.7 answers `more` false: its
//! `SynchronizeResponse` has no such field. On a small node it works; on a
//! node whose pods outgrow 4 MiB of state it is closed at registration.
//! The model records the answer ([`SplitPart`]); this judges it.

use super::{nri_evidence, ts0, ContractChecker, Rule};
use crate::{
    engine::{
        findings::{Detail, Severity, Violation},
        hook_latency::HookSpan,
    },
    model::nri_call::{NriCall, SplitPart},
};

pub const RULE: Rule = Rule {
    id: "split-synchronize-reply",
    severity: Severity::Error,
    statement: "a plugin answers each part of a split Synchronize that has more to come (`more` set) with `more` echoed and no updates; its updates go with the last part. Any other answer makes a runtime on NRI >= 0.7 close the plugin, whose registration then fails: a plugin built on an NRI stub older than v0.7 answers `more` false (its `SynchronizeResponse` has no such field), which only shows on a node whose pods outgrow one 4 MiB ttrpc message. From the call's `split_part` (docs/nri.md); a registration that fails so decides nothing in `synchronize-tells-existing-pods`",
    source: "containerd/nri v0.7+ pkg/adaptation/plugin.go synchronize (\"plugin does not handle split sync requests\"); pkg/stub/stub.go answers More: req.More",
};

impl ContractChecker {
    /// Synchronize call `h`'s answer, if it was a split part.
    pub(super) fn check_split_reply(&self, h: &HookSpan, out: &mut Vec<Violation>) {
        if let Some(detail) = split_reply_detail(&h.call) {
            out.push(Violation {
                rule: RULE.id,
                severity: RULE.severity,
                certainty: self.certainty(self.plugins.get(&h.call.conn)),
                ts: h.call.end.or(h.call.start).unwrap_or_else(ts0),
                pod: None,
                plugin: Some(h.call.plugin.label()),
                detail,
                evidence: vec![nri_evidence(h)],
            });
        }
    }
}

/// What is wrong with `call`'s answer as a split Synchronize part with
/// more to come; `None` when it follows the protocol, is not such a part,
/// or has no decoded answer.
pub(crate) fn split_reply_detail(call: &NriCall) -> Option<Detail> {
    let SplitPart {
        reply_more,
        reply_updates,
    } = call.split_part?;
    let reply_more = reply_more?;
    if reply_more && reply_updates == 0 {
        return None;
    }
    Some(Detail::SplitSynchronizeReply {
        pods: call.synchronized_pods.len(),
        reply_more,
        reply_updates,
    })
}

/// `plugin`'s answer to a Synchronize part of `pods` pods, more to come.
pub(super) fn sentence(
    plugin: &str,
    pods: usize,
    reply_more: bool,
    reply_updates: usize,
) -> String {
    format!(
        "{plugin} answered a split Synchronize part ({pods} pods, more to come) with \
         more={reply_more} and {reply_updates} updates: a runtime on NRI >= 0.7 closes such a \
         plugin (built on an NRI stub older than v0.7?)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_calls::hook;
    use crate::model::nri_call::NriMethod;

    fn part(reply_more: Option<bool>, reply_updates: usize) -> NriCall {
        let mut h = hook(None, "a", "p", 1, 2);
        h.call.method = Some(NriMethod::Synchronize);
        h.call.synchronized_pods = vec!["p1".into(), "p2".into()];
        h.call.split_part = Some(SplitPart {
            reply_more,
            reply_updates,
        });
        h.call
    }

    #[test]
    fn echoed_more_without_updates_follows_the_protocol() {
        assert_eq!(split_reply_detail(&part(Some(true), 0)), None);
    }

    /// A pre-v0.7 stub's answer: no `more`.
    #[test]
    fn more_not_echoed_is_found() {
        assert_eq!(
            split_reply_detail(&part(Some(false), 0)),
            Some(Detail::SplitSynchronizeReply {
                pods: 2,
                reply_more: false,
                reply_updates: 0
            })
        );
    }

    #[test]
    fn updates_before_the_last_part_are_found() {
        assert!(split_reply_detail(&part(Some(true), 1)).is_some());
    }

    /// Not judged: an error answer or none (the plugin's timeout rules
    /// see those), a call that is no split part.
    #[test]
    fn no_answer_or_no_split_part_is_not_judged() {
        assert_eq!(split_reply_detail(&part(None, 0)), None);
        let mut whole = part(Some(false), 3);
        whole.split_part = None;
        assert_eq!(split_reply_detail(&whole), None);
    }
}
