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
        if let (Some(p), Some(_)) = (plugin, h.call.event) {
            if p.events.is_some() && !p.subscribed_to(&h.hook) {
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
