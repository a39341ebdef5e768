//! The rule table: every rule this build checks, each defined in its own
//! file of this directory beside its detection and its sentence (the
//! shape of tokio-console's `warnings.rs`, one struct per lint that both
//! checks and words it). docs/contract.md's table is this one, held to it
//! by a test.

use serde::Serialize;

use super::{
    adjustment_rejected, container_before_pod_ready, container_in_stopped_pod, event_order,
    hook_over_budget, name_reservation_retry, plugin_timeout, pod_unknown_to_plugin,
    process_survives_sigkill, split_synchronize_reply, subscribed_not_delivered,
    teardown_hook_failed, teardown_path_failed, unexplained_after_restart, unsubscribed_delivered,
};
use crate::{
    engine::findings::{Detail, Severity},
    model::cri_call::CallMethod,
};

/// One rule of the contract: what must hold, how sure a break is, and the
/// upstream document it follows.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rule {
    /// The id findings carry (`rule` in JSON).
    pub id: &'static str,
    pub severity: Severity,
    /// What must hold, and how nri-trace sees it broken: the TUI's
    /// explanation of a finding and docs/contract.md's table.
    pub statement: &'static str,
    /// The upstream document (repository and path, issue or pull request)
    /// the rule follows.
    pub source: &'static str,
}

/// Every rule this build checks, in docs/contract.md's order.
pub const RULES: &[&Rule] = &[
    &event_order::POD,
    &event_order::CONTAINER,
    &container_before_pod_ready::RULE,
    &container_in_stopped_pod::RULE,
    &unsubscribed_delivered::RULE,
    &subscribed_not_delivered::RULE,
    &pod_unknown_to_plugin::RULE,
    &unexplained_after_restart::RULE,
    &teardown_hook_failed::RULE,
    &plugin_timeout::RULE,
    &hook_over_budget::RULE,
    &name_reservation_retry::RULE,
    &split_synchronize_reply::RULE,
    &adjustment_rejected::RULE,
    &process_survives_sigkill::RULE,
    &teardown_path_failed::UNMOUNT,
    &teardown_path_failed::REMOVE,
];

/// The rule with this id.
pub fn rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().copied().find(|r| r.id == id)
}

/// The severity of rule `id` (error for an id this build does not know).
pub(super) fn severity(id: &str) -> Severity {
    rule(id).map_or(Severity::Error, |r| r.severity)
}

/// A finding's sentence: what it saw (`detail`) about `plugin` and `pod`,
/// in the words of the rule that found it. Plugin and pod names come from
/// the capture: sinks sanitize the sentence before showing it.
pub(crate) fn sentence(detail: &Detail, plugin: Option<&str>, pod: Option<&str>) -> String {
    let plugin = plugin.unwrap_or("?");
    let pod = pod.unwrap_or("?");
    match detail {
        Detail::EventOrder { seen } => event_order::sentence(plugin, seen),
        Detail::Unsubscribed { hook } => unsubscribed_delivered::sentence(plugin, hook),
        Detail::NotDelivered { hook, received_by } => {
            subscribed_not_delivered::sentence(plugin, hook, received_by)
        }
        Detail::PodUnknown { hook } => pod_unknown_to_plugin::sentence(plugin, hook),
        Detail::UnannouncedAfterRestart {
            hook,
            runtime_pid,
            synchronized,
        } => unexplained_after_restart::sentence(plugin, hook, *runtime_pid, *synchronized),
        Detail::UndeliveredAfterRestart {
            method,
            event,
            runtime_pid,
            subscribed,
        } => unexplained_after_restart::sentence_undelivered(
            method.as_ref().map(CallMethod::name),
            event.as_str_name(),
            *runtime_pid,
            subscribed,
        ),
        Detail::TeardownHookFailed {
            hook,
            outcome,
            cri_method,
            cri_ok,
            not_called,
        } => teardown_hook_failed::sentence(
            plugin,
            hook,
            outcome,
            cri_method.as_ref().map(CallMethod::name),
            *cri_ok,
            not_called,
        ),
        Detail::PluginTimeout {
            hook,
            timeout_ns,
            connection_closed,
        } => plugin_timeout::sentence(plugin, hook, *timeout_ns, *connection_closed),
        Detail::MissedAfterDisconnect { missed } => {
            plugin_timeout::sentence_missed(plugin, *missed)
        }
        Detail::HookOverBudget {
            hook,
            own_ns,
            budget_ns,
        } => hook_over_budget::sentence(plugin, hook, *own_ns, *budget_ns),
        Detail::ContainerBeforePodReady { hook, container } => {
            container_before_pod_ready::sentence(hook, container.as_deref())
        }
        Detail::ContainerInStoppedPod { hook } => container_in_stopped_pod::sentence(hook),
        Detail::NameReservationRetry {
            method,
            attempt,
            requests,
            reserved,
            held_ns,
        } => {
            name_reservation_retry::sentence(pod, *method, *attempt, *requests, *reserved, *held_ns)
        }
        Detail::SplitSynchronizeReply {
            pods,
            reply_more,
            reply_updates,
        } => split_synchronize_reply::sentence(plugin, *pods, *reply_more, *reply_updates),
        Detail::AdjustmentRejected {
            validator,
            builtin,
            reason,
            container,
            adjusted_by,
        } => adjustment_rejected::sentence(
            pod,
            validator,
            *builtin,
            reason,
            container.as_deref(),
            adjusted_by,
        ),
        Detail::ProcessSurvivesSigkill {
            pid,
            comm,
            sender_comm,
            sender_pid,
            after_ns,
        } => process_survives_sigkill::sentence(
            *pid,
            comm.as_deref(),
            sender_comm,
            *sender_pid,
            *after_ns,
        ),
        Detail::TeardownPathFailed {
            op,
            path,
            errno,
            comm,
            pid,
            within_ns,
        } => teardown_path_failed::sentence(*op, path, *errno, comm, *pid, *within_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_has_its_own_id_a_statement_and_a_source() {
        let mut ids: Vec<_> = RULES.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len(), "two rules share an id");
        for r in RULES {
            assert!(!r.statement.is_empty() && !r.source.is_empty(), "{}", r.id);
            // Sources cite upstream documents, not notes outside the
            // repository (issue 35).
            assert!(!r.source.contains(".txt"), "{}: {}", r.id, r.source);
            assert!(
                !r.source.contains("PROTOCOL-NOTES"),
                "{}: {}",
                r.id,
                r.source
            );
        }
        assert!(rule("no-such-rule").is_none());
    }
}
