//! `pod-unknown-to-plugin`: every pod a plugin receives events for was
//! announced to it, in its Synchronize or by RunPodSandbox. A plugin that
//! registers while a pod's RunPodSandbox is in flight is told of it by
//! neither (containerd/nri issue 63, the Synchronize race), and then gets
//! its container and teardown events.

use super::{ContractChecker, Rule, MAX_TRACKED};
use crate::engine::{
    findings::{Detail, Severity, Violation},
    hook_latency::{Hook, HookSpan},
};
use crate::model::nri_call::Event;

pub const RULE: Rule = Rule {
    id: "pod-unknown-to-plugin",
    severity: Severity::Error,
    statement: "every pod a plugin receives events for was announced to it, in Synchronize or by RunPodSandbox (checked for plugins whose Synchronize nri-trace saw and that subscribe to RunPodSandbox: one that does not, such as the NRI project's device-injector, ulimit-adjuster and hook-injector, hears of a newer pod first in its container events, by design). Reported 30 s of capture time after the event (or at the end): a RunPodSandbox delivery that began before it but answered after it settles later and shows the plugin was told",
    source: "containerd/nri issue 63 (Synchronize() can miss pod sandboxes that are in the process of being created)",
};

/// How long (capture time) a finding is held before it is reported: a
/// RunPodSandbox delivery that started before the event but answered
/// after it (containerd gives up on a hook at the CRI deadline and goes
/// on, the plugin still busy) settles later, and would show the plugin
/// was told after all.
pub(crate) const UNKNOWN_POD_HOLD_NS: u64 = 30_000_000_000;

impl ContractChecker {
    /// Delivery `h` to plugin `label` of a pod it was never told about:
    /// held (see [`UNKNOWN_POD_HOLD_NS`]), told by `release_unknown`.
    /// `after_restart`: the restart rule already spoke for it.
    pub(super) fn check_pod_unknown(&mut self, h: &HookSpan, label: &str, after_restart: bool) {
        let start = h.call.start.map_or(0, |t| t.mono_ns);
        // Only for a plugin subscribed to RunPodSandbox: the runtime tells
        // the others of a pod only in Synchronize, so one made after that
        // reaches them first in, say, CreateContainer (the NRI project's
        // device-injector, ulimit-adjuster and hook-injector subscribe to
        // container events alone; seen on containerd 1.7, 2.1 and 2.3,
        // 2026-11-28).
        let told_of_new_pods = self
            .plugin_by_label(label)
            .and_then(|p| p.events.as_ref())
            .is_none_or(|e| e.contains(&Event::RunPodSandbox));
        if let Some(pod) = h
            .call
            .pod
            .as_ref()
            .filter(|p| !p.id.is_empty() && told_of_new_pods)
        {
            // `None`: the plugin's Synchronize was not seen, nothing to judge.
            let known = self.announced.get(label).map(|k| k.contains(&pod.id));
            // After a restart, the restart rule speaks for such pods.
            if let (Some(known), false) = (known, after_restart) {
                if h.hook == "RUN_POD_SANDBOX" {
                    self.announce(label, [pod.id.clone()]);
                    // Told before the held event after all: no finding.
                    self.unknown_pending
                        .retain(|p| !(p.1 == label && p.2 == pod.id && start <= p.0));
                } else if !known
                    && self.unknown_pending.len() < MAX_TRACKED
                    && self
                        .fired
                        .insert((RULE.id, label.to_owned(), pod.id.clone()))
                {
                    let v = self.hook_finding(
                        RULE.id,
                        h,
                        label,
                        Detail::PodUnknown {
                            hook: h.hook.clone(),
                        },
                    );
                    self.unknown_pending
                        .push((start, label.to_owned(), pod.id.clone(), v));
                }
            }
        }
    }

    /// Report the held pod-unknown findings of events before `before`.
    pub(super) fn release_unknown(&mut self, before: u64, out: &mut Vec<Violation>) {
        if self.unknown_pending.iter().all(|p| p.0 >= before) {
            return;
        }
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unknown_pending)
            .into_iter()
            .partition(|p| p.0 < before);
        self.unknown_pending = keep;
        out.extend(due.into_iter().map(|p| p.3));
    }
}

/// `plugin` received `hook` of a pod it was never told about.
pub(super) fn sentence(plugin: &str, hook: &Hook) -> String {
    format!(
        "{plugin} received {hook} for a pod it was never told about: not in its Synchronize, \
         no RunPodSandbox (it registered while the pod was being created: the Synchronize \
         race)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        contract::{test_records::*, ContractConfig},
        correlate::NoCause,
        record::{Record, Uncaused},
        test_calls::*,
    };

    #[test]
    fn pod_never_announced_to_a_plugin() {
        let stop = |pod: &str, t: u64| {
            span(
                cri(Some("StopPodSandbox"), pod, t, t + 50),
                vec![to_plugin(
                    hook(Some(Event::StopPodSandbox), "late", pod, t + 10, t + 20),
                    "late",
                    "20",
                    3,
                )],
            )
        };
        let records = vec![
            plugin("late", "20", 3, &ALL),
            // s0 was in its Synchronize; s1 was never announced.
            synchronize("late", "20", 3, &["s0"]),
            stop("s0", 100),
            stop("s1", 200),
        ];
        let v = check(&records);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert_eq!(v[0].plugin.as_deref(), Some("20-late"));
        // Not subscribed to RunPodSandbox: Synchronize is the only news of
        // pods it gets, so a newer pod is news in any other event.
        let v = check(&[
            plugin("late", "20", 3, &["STOP_POD_SANDBOX"]),
            synchronize("late", "20", 3, &["s0"]),
            stop("s0", 100),
            stop("s1", 200),
        ]);
        assert_eq!(rule_ids(&v), Vec::<&str>::new());
        // Without its Synchronize seen (registered before the trace):
        // nothing to judge.
        let v = check(&[plugin("late", "20", 3, &ALL), stop("s1", 200)]);
        assert_eq!(rule_ids(&v), Vec::<&str>::new());
        // A RunPodSandbox delivery that began before the stop but answered
        // after it (its record settles later): the plugin was told.
        let late_run = Record::NriUncaused(Uncaused {
            span: to_plugin(
                hook(Some(Event::RunPodSandbox), "late", "s1", 150, 3150),
                "late",
                "20",
                3,
            ),
            no_cri_cause: NoCause::NoCriCallInFlight,
            exit: None,
            rolls_back: None,
        });
        let v = check(&[
            plugin("late", "20", 3, &ALL),
            synchronize("late", "20", 3, &["s0"]),
            stop("s1", 200),
            late_run,
        ]);
        assert_eq!(rule_ids(&v), Vec::<&str>::new());
        // Held no longer than UNKNOWN_POD_HOLD_NS of capture time: a record
        // 31 s later releases it, before the end.
        let mut c = ContractChecker::new(ContractConfig::default());
        let mut out = Vec::new();
        for r in [
            plugin("late", "20", 3, &ALL),
            synchronize("late", "20", 3, &["s0"]),
            stop("s1", 200),
        ] {
            c.on_record(&r, &mut out);
        }
        assert!(out.is_empty());
        c.on_record(&stop("s0", 31_300), &mut out);
        assert_eq!(rule_ids(&out), vec![RULE.id]);
    }
}
