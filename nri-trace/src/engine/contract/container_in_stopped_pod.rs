//! `container-in-stopped-pod`: no container is created or started in a
//! pod after its StopPodSandbox.

use super::{container_made_in_pod, ContractChecker, Rule};
use crate::engine::{
    findings::{Detail, Severity, Violation},
    hook_latency::{Hook, HookSpan},
};

pub const RULE: Rule = Rule {
    id: "container-in-stopped-pod",
    severity: Severity::Error,
    statement: "no container is created or started in a pod after its StopPodSandbox",
    source: "containerd/nri PR 286, docs/pod-sandbox-lifecycle.md (the pod sandbox lifecycle contract), items 2 and 6",
};

impl ContractChecker {
    /// The start of a pod's first StopPodSandbox delivery.
    pub(super) fn note_pod_stopped(&mut self, h: &HookSpan) {
        if h.hook == "STOP_POD_SANDBOX" {
            if let Some(p) = &h.call.pod {
                let start = h.call.start.map_or(0, |t| t.mono_ns);
                self.pod_stopped.entry(p.id.clone()).or_insert(start);
            }
        }
    }

    /// A CreateContainer or StartContainer delivery begun after its pod
    /// was stopped.
    pub(super) fn check_in_stopped_pod(
        &mut self,
        h: &HookSpan,
        label: &str,
        out: &mut Vec<Violation>,
    ) {
        let Some((pod, start)) = container_made_in_pod(h) else {
            return;
        };
        if let Some(stopped) = self.pod_stopped.get(pod) {
            if start > *stopped && self.fired.insert((RULE.id, String::new(), pod.to_owned())) {
                out.push(self.hook_finding(
                    RULE.id,
                    h,
                    label,
                    Detail::ContainerInStoppedPod {
                        hook: h.hook.clone(),
                    },
                ));
            }
        }
    }
}

/// `hook` came after its pod's StopPodSandbox.
pub(super) fn sentence(hook: &Hook) -> String {
    format!("{hook} after the pod's StopPodSandbox")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::nri::message::Event,
        engine::{contract::test_records::*, test_calls::*},
    };

    #[test]
    fn a_container_after_the_pod_stopped() {
        let stopped = vec![
            plugin("a", "10", 2, &POD_AND_CREATE),
            run_pod_until(100),
            span(
                cri(Some("StopPodSandbox"), "s1", 200, 260),
                vec![to_plugin(
                    hook(Some(Event::StopPodSandbox), "a", "s1", 210, 220),
                    "a",
                    "10",
                    2,
                )],
            ),
            span(
                cri(Some("CreateContainer"), "s1", 300, 360),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 310)],
            ),
        ];
        assert_eq!(rule_ids(&check(&stopped)), vec![RULE.id]);
    }
}
