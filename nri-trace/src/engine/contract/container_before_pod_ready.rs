//! `container-before-pod-ready`: no workload container is created or
//! started before the pod's RunPodSandbox hooks complete.

use super::{container_made_in_pod, ContractChecker, Rule};
use crate::engine::{
    correlate::CriSpan,
    findings::{Detail, Severity, Violation},
    hook_latency::{Hook, HookSpan},
};

pub const RULE: Rule = Rule {
    id: "container-before-pod-ready",
    severity: Severity::Error,
    statement: "no workload container is created or started before the RunPodSandbox hook completes",
    source: "containerd/nri PR 286, docs/pod-sandbox-lifecycle.md (the pod sandbox lifecycle contract), item 5",
};

impl ContractChecker {
    /// The end of span `s`'s last RunPodSandbox hook: when its pod is ready.
    pub(super) fn note_pod_ready(&mut self, s: &CriSpan) {
        if let Some(h) = s.hooks.iter().rfind(|h| h.hook == "RUN_POD_SANDBOX") {
            if let Some(p) = &h.call.pod {
                let end = h.call.end.map_or(u64::MAX, |t| t.mono_ns);
                let e = self.pod_ready.entry(p.id.clone()).or_insert(0);
                *e = (*e).max(end);
            }
        }
    }

    /// A CreateContainer or StartContainer delivery begun before its pod
    /// was ready.
    pub(super) fn check_before_pod_ready(
        &mut self,
        h: &HookSpan,
        label: &str,
        out: &mut Vec<Violation>,
    ) {
        let Some((pod, start)) = container_made_in_pod(h) else {
            return;
        };
        if let Some(ready) = self.pod_ready.get(pod) {
            if start < *ready && self.fired.insert((RULE.id, String::new(), pod.to_owned())) {
                out.push(self.hook_finding(
                    RULE.id,
                    h,
                    label,
                    Detail::ContainerBeforePodReady {
                        hook: h.hook.clone(),
                        container: h.call.container.as_ref().map(|c| c.name.clone()),
                    },
                ));
            }
        }
    }
}

/// `hook` of `container` began before its pod was ready.
pub(super) fn sentence(hook: &Hook, container: Option<&str>) -> String {
    format!(
        "{hook} of {} began before the pod's RunPodSandbox hooks finished",
        container.unwrap_or("?")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::nri::message::Event,
        engine::{contract::test_records::*, test_calls::*},
    };

    #[test]
    fn a_container_before_the_pod_is_ready() {
        // The RunPodSandbox hook ends at 300; a CreateContainer at 200.
        let early = vec![
            plugin("a", "10", 2, &POD_AND_CREATE),
            run_pod_until(300),
            span(
                cri(Some("CreateContainer"), "s1", 190, 260),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 200)],
            ),
        ];
        assert_eq!(rule_ids(&check(&early)), vec![RULE.id]);
        // Ready, then a container: nothing.
        let fine = vec![
            plugin("a", "10", 2, &POD_AND_CREATE),
            run_pod_until(100),
            span(
                cri(Some("CreateContainer"), "s1", 200, 260),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 210)],
            ),
        ];
        assert_eq!(rule_ids(&check(&fine)), Vec::<&str>::new());
    }
}
