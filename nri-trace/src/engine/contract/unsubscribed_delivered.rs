//! `unsubscribed-event-delivered`: a plugin only receives the events it
//! subscribed to in Configure.

use super::{ContractChecker, Rule};
use crate::engine::{
    findings::{Detail, Severity, Violation},
    hook_latency::{Hook, HookSpan},
};

pub const RULE: Rule = Rule {
    id: "unsubscribed-event-delivered",
    severity: Severity::Warning,
    statement: "a plugin only receives events it subscribed to in Configure",
    source: "containerd/nri pkg/api/api.proto (ConfigureResponse events: the plugin's subscription mask)",
};

impl ContractChecker {
    /// Delivery `h` of an event plugin `label` did not subscribe to. Only
    /// against a mask seen in Configure: a learned one holds every event
    /// delivered, so it cannot show one.
    pub(super) fn check_unsubscribed(&self, h: &HookSpan, label: &str, out: &mut Vec<Violation>) {
        let plugin = self.plugin_by_label(label);
        if let Some(events) = plugin.and_then(|p| p.events.as_ref()) {
            if !events.iter().any(|e| h.hook == e.as_str()) && h.call.event.is_some() {
                out.push(self.hook_finding(
                    RULE.id,
                    h,
                    label,
                    Detail::Unsubscribed {
                        hook: h.hook.clone(),
                    },
                ));
            }
        }
    }
}

/// `plugin` received `hook` unasked.
pub(super) fn sentence(plugin: &str, hook: &Hook) -> String {
    format!("{plugin} received {hook} without subscribing to it")
}
