//! `teardown-hook-failed`: a plugin's error or timeout on the teardown
//! path (StopPodSandbox, RemovePodSandbox, StopContainer,
//! RemoveContainer) must not block or fail the CRI operation nor stop
//! delivery to later plugins. Critical when the CRI call failed with it or
//! later subscribed plugins were not called.

use super::{cri_evidence, nri_evidence, pod_of_hook, ts0, ContractChecker, Rule};
use crate::{
    engine::{
        correlate::CriSpan,
        findings::{Detail, Severity, Violation},
        hook_latency::{Hook, HookSpan},
    },
    model::nri_call::NriOutcome,
};

pub const RULE: Rule = Rule {
    id: "teardown-hook-failed",
    severity: Severity::Error,
    statement: "a plugin error or timeout on the teardown path must not block or fail the CRI operation nor stop delivery to later plugins; critical when the CRI call failed with it or later plugins were not called",
    source: "containerd/nri PR 286, docs/pod-sandbox-lifecycle.md review (teardown errors must not prevent the operation nor delivery to later plugins); cri-o/cri-o issue 4221",
};

impl ContractChecker {
    /// A teardown delivery that failed. A per-event method refused as
    /// Unimplemented is not one: the runtime falls back to StateChange.
    pub(super) fn check_teardown(
        &mut self,
        h: &HookSpan,
        span: Option<&CriSpan>,
        out: &mut Vec<Violation>,
    ) {
        let teardown = matches!(
            h.hook.as_str(),
            "STOP_POD_SANDBOX" | "REMOVE_POD_SANDBOX" | "STOP_CONTAINER" | "REMOVE_CONTAINER"
        );
        if teardown && !h.call.outcome.is_ok() && !h.call.is_fallback_refusal() {
            self.report_teardown(h, span, out);
        }
    }

    fn report_teardown(&mut self, h: &HookSpan, span: Option<&CriSpan>, out: &mut Vec<Violation>) {
        let label = h.call.plugin.label();
        let mut evidence = vec![nri_evidence(h)];
        let mut severity = Severity::Warning;
        let mut not_called = Vec::new();
        if let Some(s) = span {
            evidence.insert(0, cri_evidence(&s.call));
            if !s.call.outcome.is_ok() {
                severity = Severity::Critical;
            }
            // Later plugins (higher index) subscribed but not delivered to.
            let later: Vec<String> = self
                .plugins
                .values()
                .filter(|p| p.index > h.call.plugin.index && p.gone.is_none())
                .filter(|p| p.subscribed_to(&h.hook))
                .filter(|p| {
                    !s.hooks
                        .iter()
                        .any(|x| x.hook == h.hook && x.call.plugin.label() == p.label)
                })
                .map(|p| p.label.clone())
                .collect();
            if !later.is_empty() {
                severity = Severity::Critical;
                not_called = later;
            }
        }
        out.push(Violation {
            rule: RULE.id,
            severity,
            certainty: self.certainty(self.plugin_by_label(&label)),
            ts: h.call.end.or(h.call.start).unwrap_or_else(ts0),
            pod: pod_of_hook(h),
            plugin: Some(label),
            detail: Detail::TeardownHookFailed {
                hook: h.hook.clone(),
                outcome: h.call.outcome.clone(),
                cri_method: span.and_then(|s| s.call.method.clone()),
                cri_ok: span.map(|s| s.call.outcome.is_ok()),
                not_called,
            },
            evidence,
        });
    }
}

/// `plugin` failed `hook`; whether the CRI call went on; who was not called.
pub(super) fn sentence(
    plugin: &str,
    hook: &Hook,
    outcome: &NriOutcome,
    cri_method: Option<&str>,
    cri_ok: Option<bool>,
    not_called: &[String],
) -> String {
    let method = cri_method.unwrap_or("?");
    let mut s = format!("{plugin} failed {hook} ({})", outcome.describe());
    match cri_ok {
        Some(true) => s.push_str(&format!("; the runtime went on: CRI {method} succeeded")),
        Some(false) => s.push_str(&format!("; CRI {method} failed with it")),
        None => {}
    }
    if !not_called.is_empty() {
        s.push_str(&format!(
            "; later plugins not called: {}",
            not_called.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::nri_call::NriMethod;
    use crate::{
        decode::nri::message::Event,
        engine::{contract::test_records::*, test_calls::*},
    };

    #[test]
    fn teardown_failure_that_stops_later_plugins_is_critical() {
        let mut failed = to_plugin(
            hook(Some(Event::StopPodSandbox), "a", "s1", 110, 120),
            "a",
            "10",
            2,
        );
        failed.call.outcome = NriOutcome::Error {
            code: 2,
            message: "no".into(),
        };
        let records = vec![
            plugin("a", "10", 2, &ALL),
            plugin("b", "20", 3, &ALL),
            span(cri(Some("StopPodSandbox"), "s1", 100, 150), vec![failed]),
        ];
        let v = check(&records);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert_eq!(v[0].severity, Severity::Critical);
        assert!(
            matches!(&v[0].detail, Detail::TeardownHookFailed { not_called, .. } if not_called == &["20-b"]),
            "{:?}",
            v[0].detail
        );
    }

    /// containerd 2.3 calls a v0.8-stub plugin's StopPodSandbox method,
    /// the plugin answers Unimplemented, and the runtime delivers the
    /// event by StateChange (seen on the lab, 2026-11-28): the refusal is
    /// no teardown failure.
    #[test]
    fn a_refused_per_event_method_is_no_teardown_failure() {
        let mut refused = to_plugin(
            hook(Some(Event::StopPodSandbox), "a", "s1", 110, 111),
            "a",
            "10",
            2,
        );
        refused.call.method = Some(NriMethod::Event(Event::StopPodSandbox));
        refused.call.outcome = NriOutcome::Error {
            code: crate::decode::nri::message::CODE_UNIMPLEMENTED,
            message: "method StopPodSandbox not implemented".into(),
        };
        assert!(refused.call.is_fallback_refusal());
        let fallback = to_plugin(
            hook(Some(Event::StopPodSandbox), "a", "s1", 112, 120),
            "a",
            "10",
            2,
        );
        let records = vec![
            plugin("a", "10", 2, &ALL),
            span(
                cri(Some("StopPodSandbox"), "s1", 100, 150),
                vec![refused.clone(), fallback],
            ),
        ];
        assert_eq!(rule_ids(&check(&records)), Vec::<&str>::new());
        // The same code from a method with no fallback is a failure.
        refused.call.method = Some(NriMethod::Event(Event::StopContainer));
        assert!(!refused.call.is_fallback_refusal());
    }
}
