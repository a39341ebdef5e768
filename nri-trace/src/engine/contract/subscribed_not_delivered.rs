//! `subscribed-event-not-delivered`: every connected plugin subscribed to
//! an event receives it. A plugin that registers while an operation is in
//! flight can miss it (containerd/nri issue 63, the Synchronize race).

use std::collections::BTreeMap;

use super::{cri_evidence, nri_evidence, pod_of_hook, ts0, ContractChecker, Rule};
use crate::engine::{
    correlate::CriSpan,
    findings::{Detail, Severity, Violation},
    hook_latency::{Hook, HookSpan},
};

pub const RULE: Rule = Rule {
    id: "subscribed-event-not-delivered",
    severity: Severity::Error,
    statement: "every connected plugin subscribed to an event receives it; one registering during an operation may miss it (the Synchronize race)",
    source: "containerd/nri issue 63 (Synchronize() can miss pod sandboxes that are in the process of being created)",
};

impl ContractChecker {
    /// Plugins connected and subscribed to an event of this span that did
    /// not receive it.
    pub(super) fn check_missed(&mut self, s: &CriSpan, out: &mut Vec<Violation>) {
        // Operations: (hook, object) -> plugins that got it.
        let mut ops: BTreeMap<(&Hook, String), Vec<String>> = BTreeMap::new();
        let mut first: BTreeMap<(&Hook, String), &HookSpan> = BTreeMap::new();
        for h in &s.hooks {
            let object = h
                .call
                .container
                .as_ref()
                .map(|c| c.id.clone())
                .or_else(|| h.call.pod.as_ref().map(|p| p.id.clone()))
                .unwrap_or_default();
            ops.entry((&h.hook, object.clone()))
                .or_default()
                .push(h.call.plugin.label());
            first.entry((&h.hook, object)).or_insert(h);
        }
        let failed_before = |idx: &Option<String>| {
            s.hooks
                .iter()
                .any(|x| !x.call.outcome.is_ok() && x.call.plugin.index < *idx)
        };
        for ((hook, object), got) in ops {
            let op = first[&(hook, object.clone())];
            let op_start = op.call.start.map_or(0, |t| t.mono_ns);
            let op_end = s.call.end.map_or(u64::MAX, |t| t.mono_ns);
            for (conn, p) in &self.plugins {
                if self.by_label.get(&p.label) != Some(conn) {
                    continue;
                }
                if got.contains(&p.label)
                    || p.since > op_start
                    || p.gone.is_some_and(|g| g <= op_end)
                {
                    continue;
                }
                // A failure earlier in the chain is the teardown rule's.
                if failed_before(&p.index) {
                    continue;
                }
                // Without Configure, what it was delivered before (uncertain).
                let subscribed = op.hook.event().is_some_and(|e| match &p.events {
                    Some(events) => events.contains(&e),
                    None => p.learned.contains(&e),
                });
                if !subscribed
                    || !self
                        .fired
                        .insert((RULE.id, p.label.clone(), format!("{hook}{object}")))
                {
                    continue;
                }
                out.push(Violation {
                    rule: RULE.id,
                    severity: Severity::Error,
                    certainty: self.mask_certainty(p, hook),
                    ts: op.call.start.unwrap_or_else(ts0),
                    pod: pod_of_hook(op),
                    plugin: Some(p.label.clone()),
                    detail: Detail::NotDelivered {
                        hook: hook.clone(),
                        received_by: got.clone(),
                    },
                    evidence: vec![cri_evidence(&s.call), nri_evidence(op)],
                });
            }
        }
    }
}

/// `plugin` is subscribed to `hook` but only `received_by` got it.
pub(super) fn sentence(plugin: &str, hook: &Hook, received_by: &[String]) -> String {
    format!(
        "{plugin} is subscribed to {hook} and connected since before it, but only {} received it",
        received_by.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        engine::{
            contract::{test_records::*, unsubscribed_delivered},
            findings::Certainty,
            record::Record,
            test_calls::*,
        },
        model::{nri_call::Event, observation::Observation},
    };

    #[test]
    fn unsubscribed_delivery_and_missed_delivery() {
        let records = vec![
            plugin("a", "10", 2, &["RUN_POD_SANDBOX"]),
            plugin("b", "20", 3, &["STOP_POD_SANDBOX"]),
            span(
                cri(Some("StopPodSandbox"), "s1", 100, 150),
                vec![to_plugin(
                    hook(Some(Event::StopPodSandbox), "a", "s1", 110, 120),
                    "a",
                    "10",
                    2,
                )],
            ),
        ];
        let v = check(&records);
        let mut r = rule_ids(&v);
        r.sort_unstable();
        assert_eq!(r, vec![RULE.id, unsubscribed_delivered::RULE.id]);
        let missed = v.iter().find(|v| v.rule == RULE.id).unwrap();
        assert_eq!(missed.plugin.as_deref(), Some("20-b"));
    }

    #[test]
    fn unknown_subscription_is_not_judged() {
        let mut p = plugin("b", "20", 3, &[]);
        if let Record::Observed(Observation::NriPlugin { events, .. }) = &mut p {
            *events = None;
        }
        let records = vec![
            plugin("a", "10", 2, &ALL),
            p,
            span(
                cri(Some("StopPodSandbox"), "s1", 100, 150),
                vec![to_plugin(
                    hook(Some(Event::StopPodSandbox), "a", "s1", 110, 120),
                    "a",
                    "10",
                    2,
                )],
            ),
        ];
        assert_eq!(rule_ids(&check(&records)), Vec::<&str>::new());
    }

    /// b registered before the capture (no Configure seen): it was
    /// delivered STOP_POD_SANDBOX of s1, so it is subscribed to it; when s2's
    /// goes to a only, the miss is reported, uncertain, saying why. An
    /// event it was never delivered is not judged, and no delivery can
    /// show as unsubscribed.
    #[test]
    fn learned_subscription_findings_are_uncertain() {
        let mut p = plugin("b", "20", 3, &[]);
        if let Record::Observed(Observation::NriPlugin { events, .. }) = &mut p {
            *events = None;
        }
        let stop = |pod: &str, t: u64, to: &[(&str, &str, u64)]| {
            span(
                cri(Some("StopPodSandbox"), pod, t, t + 50),
                to.iter()
                    .map(|(n, i, c)| {
                        to_plugin(
                            hook(Some(Event::StopPodSandbox), n, pod, t + 10, t + 20),
                            n,
                            i,
                            *c,
                        )
                    })
                    .collect(),
            )
        };
        let records = vec![
            plugin("a", "10", 2, &ALL),
            p,
            stop("s1", 100, &[("a", "10", 2), ("b", "20", 3)]),
            span(
                cri(Some("RemovePodSandbox"), "s1", 200, 250),
                vec![to_plugin(
                    hook(Some(Event::RemovePodSandbox), "a", "s1", 210, 220),
                    "a",
                    "10",
                    2,
                )],
            ),
            stop("s2", 300, &[("a", "10", 2)]),
        ];
        let v = check(&records);
        assert_eq!(rule_ids(&v), vec![RULE.id], "{v:?}");
        assert_eq!(v[0].plugin.as_deref(), Some("20-b"));
        assert_eq!(v[0].pod.as_deref(), Some("ns/p"));
        let Certainty::Uncertain { why } = &v[0].certainty else {
            panic!("certain: {:?}", v[0]);
        };
        assert!(
            why.contains("Configure was not seen") && why.contains("STOP_POD_SANDBOX"),
            "{why}"
        );
    }
}
