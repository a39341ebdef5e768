//! `plugin-timeout`: a plugin that does not answer within the request
//! timeout is disconnected and misses what follows. Told twice: at the
//! timed-out delivery, and at the end with the count of subscribed
//! deliveries the plugin missed after it was gone.

use std::collections::BTreeSet;

use super::{ContractChecker, PluginState, Rule};
use crate::{
    basic_types::Timestamp,
    engine::{
        correlate::CriSpan,
        findings::{Detail, Severity, Violation},
        hook_latency::{Hook, HookSpan},
    },
    human::duration,
    model::nri_call::NriOutcome,
};

pub const RULE: Rule = Rule {
    id: "plugin-timeout",
    severity: Severity::Error,
    statement: "a plugin that does not answer within the request timeout is disconnected and misses what follows (a second finding at the end counts what it missed)",
    source: "containerd/nri pkg/adaptation/plugin.go (DefaultPluginRequestTimeout; a plugin that times out is closed)",
};

impl ContractChecker {
    /// A delivery or lifecycle call that timed out.
    pub(super) fn check_timeout(&mut self, h: &HookSpan, out: &mut Vec<Violation>) {
        if h.call.outcome == NriOutcome::TimedOut {
            self.report_timeout(h, out);
        }
    }

    fn report_timeout(&mut self, h: &HookSpan, out: &mut Vec<Violation>) {
        let label = h.call.plugin.label();
        let conn = h.call.conn;
        let mut closed = false;
        if let Some(p) = self.plugins.get_mut(&conn) {
            p.timed_out = true;
            closed = p.gone.is_some();
        }
        let key = (RULE.id, label.clone(), format!("{:?}", h.call.start));
        if !self.fired.insert(key) {
            return;
        }
        // containerd closes the connection only when its own timer fired;
        // on a cancelled CRI call it keeps it (model::nri_call module docs).
        out.push(self.hook_finding(
            RULE.id,
            h,
            &label,
            Detail::PluginTimeout {
                hook: h.hook.clone(),
                timeout_ns: h.call.timeout_nano.and_then(|t| u64::try_from(t).ok()),
                connection_closed: closed,
            },
        ));
    }

    /// Deliveries a timed-out, disconnected plugin would have had in span
    /// `s`: each event once (the hook, its pod and container), however
    /// many other plugins got it.
    pub(super) fn count_missed_after_timeout(&mut self, s: &CriSpan) {
        for p in self.plugins.values_mut() {
            let missed: BTreeSet<(&str, Option<&str>, Option<&str>)> = s
                .hooks
                .iter()
                .filter(|h| {
                    p.timed_out
                        && p.gone
                            .is_some_and(|g| g <= h.call.start.map_or(0, |t| t.mono_ns))
                        && p.subscribed_to(&h.hook)
                        && h.call.plugin.index.as_ref() != p.index.as_ref()
                })
                .map(|h| {
                    (
                        h.hook.as_str(),
                        h.call.pod.as_ref().map(|x| x.id.as_str()),
                        h.call.container.as_ref().map(|x| x.id.as_str()),
                    )
                })
                .collect();
            p.missed_after_gone += missed.len() as u64;
        }
    }

    /// At the end: what each timed-out plugin missed after it was gone.
    pub(super) fn finish_timeouts(&self, out: &mut Vec<Violation>) {
        let gone: Vec<&PluginState> = self
            .plugins
            .values()
            .filter(|p| p.timed_out && p.missed_after_gone > 0)
            .collect();
        for p in gone {
            out.push(Violation {
                rule: RULE.id,
                severity: Severity::Error,
                certainty: self.certainty(Some(p)),
                ts: Timestamp {
                    mono_ns: p.gone.unwrap_or(0),
                    wall_ns: 0,
                },
                pod: None,
                plugin: Some(p.label.clone()),
                detail: Detail::MissedAfterDisconnect {
                    missed: p.missed_after_gone,
                },
                evidence: vec![],
            });
        }
    }
}

/// `plugin` did not answer `hook`; what the runtime did then.
pub(super) fn sentence(
    plugin: &str,
    hook: &Hook,
    timeout_ns: Option<u64>,
    connection_closed: bool,
) -> String {
    format!(
        "{plugin} did not answer {hook} within its timeout{}; {}",
        timeout_ns
            .map(|t| format!(" ({})", duration(t)))
            .unwrap_or_default(),
        if connection_closed {
            "the runtime closed its connection"
        } else {
            "the runtime gave up on it with the connection left open"
        }
    )
}

/// `plugin` missed `missed` deliveries after it was disconnected.
pub(super) fn sentence_missed(plugin: &str, missed: u64) -> String {
    format!("{plugin} missed {missed} subscribed event deliveries after it was disconnected")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        basic_types::ConnId,
        decode::nri::message::Event,
        engine::{
            contract::{subscribed_not_delivered, test_records::*},
            record::Record,
            test_calls::*,
        },
        model::{
            nri_call::{IdentitySource, PluginId},
            observation::Observation,
        },
    };

    #[test]
    fn plugin_timeout_and_what_it_missed() {
        let mut hung = to_plugin(
            hook(Some(Event::RunPodSandbox), "hang", "s1", 10, 1010),
            "hang",
            "10",
            2,
        );
        // As the NRI stage reports one: no end, no own time.
        hung.call.outcome = NriOutcome::TimedOut;
        hung.call.timeout_nano = Some(1_000_000_000);
        hung.call.end = None;
        hung.own_ns = None;
        // The event it missed went to two other plugins: one missed event.
        let later = |t: u64| {
            span(
                cri(Some("StopPodSandbox"), "s1", t, t + 50),
                vec![
                    to_plugin(
                        hook(Some(Event::StopPodSandbox), "b", "s1", t + 10, t + 20),
                        "b",
                        "20",
                        3,
                    ),
                    to_plugin(
                        hook(Some(Event::StopPodSandbox), "c", "s1", t + 20, t + 30),
                        "c",
                        "30",
                        4,
                    ),
                ],
            )
        };
        let records = vec![
            plugin("hang", "10", 2, &ALL),
            plugin("b", "20", 3, &ALL),
            plugin("c", "30", 4, &ALL),
            span(cri(Some("RunPodSandbox"), "s1", 0, 1100), vec![hung]),
            Record::Observed(Observation::NriPluginGone {
                conn: ConnId(2),
                ts: ts(1010).unwrap(),
                plugin: PluginId {
                    name: Some("hang".into()),
                    index: Some("10".into()),
                    pid: None,
                    comm: None,
                    source: IdentitySource::RegisterPlugin,
                    inferred: None,
                },
            }),
            later(2000),
        ];
        let v = check(&records);
        assert_eq!(rule_ids(&v), vec![RULE.id, RULE.id]);
        assert!(
            matches!(
                v[0].detail,
                Detail::PluginTimeout {
                    timeout_ns: Some(1_000_000_000),
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
        assert_eq!(v[1].detail, Detail::MissedAfterDisconnect { missed: 1 });
        // Gone plugins are not "subscribed but not delivered".
        assert!(!rule_ids(&v).contains(&subscribed_not_delivered::RULE.id));
    }
}
