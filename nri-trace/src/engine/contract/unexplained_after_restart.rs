//! `event-unexplained-after-restart`: after a runtime restart, plugins
//! still know the pods that existed before it. containerd keeps its NRI
//! state in memory: a plugin that connects to the new runtime learns of
//! the old pods only from its Synchronize, and a teardown of an old pod
//! was seen to deliver no event at all (docs/contract.md). Two findings:
//! at a plugin, an event of an old pod it was never told of since; at the
//! runtime, an old pod's teardown call that delivered its event to no
//! subscribed plugin.

use super::{cri_evidence, ContractChecker, Rule};
use crate::engine::{
    correlate::CriSpan,
    findings::{Certainty, Detail, Severity, Violation},
    hook_latency::{Hook, HookSpan},
};
use crate::model::{cri_call::CriMethod, nri_call::Event};

pub const RULE: Rule = Rule {
    id: "event-unexplained-after-restart",
    severity: Severity::Error,
    statement: "after a runtime restart, plugins still know the pods that existed before it: an event of such a pod reaches only a plugin told of it since (its Synchronize listed it, or it got the pod's RunPodSandbox), and the pod's StopPodSandbox / RemovePodSandbox still deliver their events to the plugins subscribed to them",
    source: "containerd/nri pkg/adaptation/adaptation.go (plugins and their state live in the runtime's memory; a plugin connecting later is told the existing pods in Synchronize)",
};

impl ContractChecker {
    /// A delivery, after a runtime restart, to a plugin connected since,
    /// of an event of a pod from before the restart that was never
    /// announced to it on this connection: reported (true) or not.
    pub(super) fn check_after_restart(
        &mut self,
        h: &HookSpan,
        label: &str,
        out: &mut Vec<Violation>,
    ) -> bool {
        let (Some((restart, pid)), Some(pod)) = (self.restart, h.call.pod.as_ref()) else {
            return false;
        };
        let Some(p) = self.plugins.get(&h.call.conn) else {
            return false;
        };
        if p.since < restart
            || h.call.event.is_none()
            || h.hook == "RUN_POD_SANDBOX"
            || !self.pods_before_restart.contains(&pod.id)
            || p.run_pods.contains(&pod.id)
            || p.synced.as_ref().is_some_and(|s| s.contains(&pod.id))
        {
            return false;
        }
        if !self
            .fired
            .insert((RULE.id, label.to_owned(), pod.id.clone()))
        {
            return true;
        }
        let mut v = self.hook_finding(
            RULE.id,
            h,
            label,
            Detail::UnannouncedAfterRestart {
                hook: h.hook.clone(),
                runtime_pid: pid,
                synchronized: p.synced.is_some(),
            },
        );
        if !p.registered {
            v.certainty = Certainty::Uncertain {
                why: "the plugin's registration was not seen: its Synchronize may have gone \
                      before the capture followed it"
                    .into(),
            };
        }
        out.push(v);
        true
    }

    /// A teardown CRI call, after a runtime restart, of a pod from before
    /// it, that succeeded without delivering its event to any plugin
    /// subscribed to it (containerd's NRI state is in memory).
    pub(super) fn check_missed_after_restart(&mut self, s: &CriSpan, out: &mut Vec<Violation>) {
        let Some((restart, pid)) = self.restart else {
            return;
        };
        let c = &s.call;
        let event = match c.cri_method() {
            Some(CriMethod::StopPodSandbox) => Event::StopPodSandbox,
            Some(CriMethod::RemovePodSandbox) => Event::RemovePodSandbox,
            _ => return,
        };
        let (Some(id), Some(start)) = (c.sandbox_id.as_ref(), c.start) else {
            return;
        };
        if start.mono_ns < restart
            || !c.outcome.is_ok()
            || !self.pods_before_restart.contains(id)
            || s.hooks.iter().any(|h| h.hook.event() == Some(event))
        {
            return;
        }
        let missed: Vec<String> = self
            .by_label
            .iter()
            .filter_map(|(label, conn)| self.plugins.get(conn).map(|p| (label, p)))
            .filter(|(_, p)| p.gone.is_none() && p.since <= start.mono_ns)
            .filter(|(_, p)| p.events.as_ref().is_some_and(|e| e.contains(&event)))
            .filter(|(label, _)| {
                !self
                    .seen
                    .get(&((*label).clone(), id.clone()))
                    .is_some_and(|e| e.contains_key(&event))
            })
            .map(|(label, _)| label.clone())
            .collect();
        if missed.is_empty()
            || !self.fired.insert((
                RULE.id,
                String::new(),
                format!("{}{id}", event.as_str_name()),
            ))
        {
            return;
        }
        let mut missed = missed;
        missed.sort();
        out.push(Violation {
            rule: RULE.id,
            severity: Severity::Error,
            certainty: self.certainty(None),
            ts: c.end.unwrap_or(start),
            pod: c
                .pod
                .as_ref()
                .map(ToString::to_string)
                .or_else(|| Some(id.clone())),
            plugin: None,
            detail: Detail::UndeliveredAfterRestart {
                method: c.method.clone(),
                event,
                runtime_pid: pid,
                subscribed: missed,
            },
            evidence: vec![cri_evidence(c)],
        });
    }
}

/// At a plugin: `hook` of a pod from before the restart it was never told of.
pub(super) fn sentence(plugin: &str, hook: &Hook, runtime_pid: u32, synchronized: bool) -> String {
    format!(
        "{plugin} received {hook} for a pod from before the runtime restarted (new pid \
         {runtime_pid}) that it was never told about since: {}, no RunPodSandbox",
        if synchronized {
            "its Synchronize did not list it"
        } else {
            "it got no Synchronize"
        }
    )
}

/// At the runtime: `method` of an old pod delivered no `event` to `subscribed`.
pub(super) fn sentence_undelivered(
    method: Option<&str>,
    event: &str,
    runtime_pid: u32,
    subscribed: &[String],
) -> String {
    format!(
        "{} of a pod from before the runtime restarted (new pid {runtime_pid}) succeeded but \
         delivered no {event}; subscribed: {}",
        method.unwrap_or("?"),
        subscribed.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        basic_types::ConnId,
        engine::{contract::test_records::*, record::Record, test_calls::*},
        model::{
            cri_call::CriOutcome,
            nri_call::{IdentitySource, PluginId},
            observation::Observation,
        },
    };

    fn plugin_at(conn: u64, ms: u64, source: IdentitySource) -> Record {
        Record::Observed(Observation::NriPlugin {
            conn: ConnId(conn),
            ts: ts(ms).unwrap(),
            plugin: PluginId {
                name: Some("a".into()),
                index: Some("10".into()),
                pid: None,
                comm: None,
                source,
                inferred: None,
            },
            events: Some(events_named(&ALL)),
            nri_version: Default::default(),
        })
    }

    fn restart_at(ms: u64) -> Record {
        Record::Observed(Observation::RuntimeStarted {
            ts: ts(ms).unwrap(),
            pid: 4242,
        })
    }

    /// Pod s1 made before a restart at 200; plugin a connects again on
    /// connection 3 at 250.
    fn before_restart(source: IdentitySource) -> Vec<Record> {
        vec![
            plugin("a", "10", 2, &ALL),
            span(
                cri(Some("RunPodSandbox"), "s1", 100, 150),
                vec![to_plugin(
                    hook(Some(Event::RunPodSandbox), "a", "s1", 110, 120),
                    "a",
                    "10",
                    2,
                )],
            ),
            restart_at(200),
            plugin_at(3, 250, source),
        ]
    }

    fn stop_s1_on(conn: u64) -> Record {
        span(
            cri(Some("StopPodSandbox"), "s1", 300, 350),
            vec![to_plugin(
                hook(Some(Event::StopPodSandbox), "a", "s1", 310, 320),
                "a",
                "10",
                conn,
            )],
        )
    }

    #[test]
    fn old_pod_never_told_after_a_restart_is_unexplained() {
        // Like containerd 1.7's pre-launched plugins: no Synchronize.
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.push(stop_s1_on(3));
        let v = check(&r);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert_eq!(v[0].certainty, Certainty::Certain);
        assert!(
            matches!(
                v[0].detail,
                Detail::UnannouncedAfterRestart {
                    synchronized: false,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
        // Without the restart the same delivery is unremarkable.
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.remove(2);
        r.push(stop_s1_on(3));
        assert_eq!(rule_ids(&check(&r)), Vec::<&str>::new());
    }

    #[test]
    fn synchronized_or_new_pods_after_a_restart_are_explained() {
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.push(synchronize("a", "10", 3, &["s1"]));
        r.push(stop_s1_on(3));
        // A pod made after the restart.
        r.push(span(
            cri(Some("RunPodSandbox"), "s2", 400, 450),
            vec![to_plugin(
                hook(Some(Event::RunPodSandbox), "a", "s2", 410, 420),
                "a",
                "10",
                3,
            )],
        ));
        r.push(span(
            cri(Some("StopPodSandbox"), "s2", 500, 550),
            vec![to_plugin(
                hook(Some(Event::StopPodSandbox), "a", "s2", 510, 520),
                "a",
                "10",
                3,
            )],
        ));
        assert_eq!(rule_ids(&check(&r)), Vec::<&str>::new());
    }

    #[test]
    fn unseen_registration_after_a_restart_is_uncertain() {
        let mut r = before_restart(IdentitySource::PeerProcess);
        r.push(stop_s1_on(3));
        let v = check(&r);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert!(matches!(v[0].certainty, Certainty::Uncertain { .. }));
    }

    #[test]
    fn teardown_event_missing_after_a_restart() {
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.push(synchronize("a", "10", 3, &["s1"]));
        r.push(stop_s1_on(3));
        r.push(span(cri(Some("RemovePodSandbox"), "s1", 400, 450), vec![]));
        let v = check(&r);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert!(
            matches!(
                &v[0].detail,
                Detail::UndeliveredAfterRestart { event, subscribed, .. }
                    if *event == Event::RemovePodSandbox && subscribed == &["10-a"]
            ),
            "{:?}",
            v[0].detail
        );
        // A failed RemovePodSandbox, or one with the event, is not it.
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.push(synchronize("a", "10", 3, &["s1"]));
        let mut failed = cri(Some("RemovePodSandbox"), "s1", 400, 450);
        failed.outcome = CriOutcome::Error {
            code: 2,
            status: "UNKNOWN".into(),
            message: "boom".into(),
        };
        r.push(span(failed, vec![]));
        assert_eq!(rule_ids(&check(&r)), Vec::<&str>::new());
    }
}
