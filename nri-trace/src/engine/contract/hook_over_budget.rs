//! `hook-over-budget`: a hook's own time (not its wait behind earlier
//! plugins) stays under its budget, by default half the plugin request
//! timeout the runtime sent with it.

use super::{ContractChecker, Rule};
use crate::{
    engine::{
        findings::{Detail, Severity, Violation},
        hook_latency::{Hook, HookSpan},
    },
    human::duration,
    model::nri_call::NriOutcome,
};

pub const RULE: Rule = Rule {
    id: "hook-over-budget",
    severity: Severity::Warning,
    statement: "a hook's own time stays under its budget: by default half the plugin request timeout the runtime sent with it (`--hook-budget-ms MS` sets another)",
    source: "nri-trace's own: kubelet's --runtime-request-timeout (kubernetes/kubernetes pkg/kubelet/apis/config) bounds the whole CRI call, and the hooks get a share of it",
};

impl ContractChecker {
    pub(super) fn check_budget(&self, h: &HookSpan, label: &str, out: &mut Vec<Violation>) {
        let budget = self
            .cfg
            .hook_budget_ns
            .or_else(|| h.call.timeout_nano.filter(|t| *t > 0).map(|t| t as u64 / 2));
        // A timed-out hook is the timeout rule's.
        let own = h.own_ns.filter(|_| h.call.outcome != NriOutcome::TimedOut);
        if let (Some(b), Some(own)) = (budget, own) {
            if own > b {
                out.push(self.hook_finding(
                    RULE.id,
                    h,
                    label,
                    Detail::HookOverBudget {
                        hook: h.hook.clone(),
                        own_ns: own,
                        budget_ns: b,
                    },
                ));
            }
        }
    }
}

/// `plugin` took `own_ns` on `hook`, over `budget_ns`.
pub(super) fn sentence(plugin: &str, hook: &Hook, own_ns: u64, budget_ns: u64) -> String {
    format!(
        "{plugin} took {} on {hook}, over its budget of {}",
        duration(own_ns),
        duration(budget_ns)
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
    fn hook_over_half_its_timeout() {
        let mut slow = to_plugin(
            hook(Some(Event::RunPodSandbox), "a", "s1", 100, 1700),
            "a",
            "10",
            2,
        );
        slow.call.timeout_nano = Some(2_000_000_000);
        let mut ok = to_plugin(
            hook(Some(Event::RunPodSandbox), "a", "s2", 2000, 2900),
            "a",
            "10",
            2,
        );
        ok.call.timeout_nano = Some(2_000_000_000);
        let records = vec![
            plugin("a", "10", 2, &ALL),
            span(cri(Some("RunPodSandbox"), "s1", 90, 1800), vec![slow]),
            span(cri(Some("RunPodSandbox"), "s2", 1990, 3000), vec![ok]),
        ];
        let v = check(&records);
        assert_eq!(rule_ids(&v), vec![RULE.id]);
        assert!(
            matches!(
                v[0].detail,
                Detail::HookOverBudget {
                    own_ns: 1_600_000_000,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
    }
}
