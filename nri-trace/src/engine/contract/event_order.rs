//! `pod-event-order`, `container-event-order`: each plugin sees an
//! object's events in lifecycle order. One check finds both: the pod's
//! three events and the container's four, each first delivery's start
//! against the others'.

use super::{nri_evidence, pod_of_hook, ts0, ContractChecker, Rule};
use crate::{
    engine::{
        findings::{Detail, Severity, Violation},
        hook_latency::{Hook, HookSpan},
    },
    model::nri_call::Event,
};

pub const POD: Rule = Rule {
    id: "pod-event-order",
    severity: Severity::Error,
    statement: "each plugin sees a pod's RunPodSandbox, StopPodSandbox, RemovePodSandbox in that order",
    source: "containerd/nri PR 286, docs/pod-sandbox-lifecycle.md (the pod sandbox lifecycle contract), item 4",
};

pub const CONTAINER: Rule = Rule {
    id: "container-event-order",
    severity: Severity::Error,
    statement: "each plugin sees a container's Create, Start, Stop, Remove in that order",
    source: "containerd/nri pkg/adaptation/adaptation.go (the container lifecycle events)",
};

const POD_ORDER: [Event; 3] = [
    Event::RunPodSandbox,
    Event::StopPodSandbox,
    Event::RemovePodSandbox,
];
const CONTAINER_ORDER: [Event; 4] = [
    Event::CreateContainer,
    Event::StartContainer,
    Event::StopContainer,
    Event::RemoveContainer,
];

impl ContractChecker {
    /// Delivery `h` to plugin `label`, against the plugin's earlier events
    /// of the same pod or container.
    pub(super) fn check_order(&mut self, h: &HookSpan, label: &str, out: &mut Vec<Violation>) {
        let start = h.call.start.map_or(0, |t| t.mono_ns);
        let Some(event) = h.hook.event() else {
            return;
        };
        let (object, order): (Option<String>, &[Event]) = if POD_ORDER.contains(&event) {
            (h.call.pod.as_ref().map(|p| p.id.clone()), &POD_ORDER)
        } else if CONTAINER_ORDER.contains(&event) {
            (
                h.call.container.as_ref().map(|c| c.id.clone()),
                &CONTAINER_ORDER,
            )
        } else {
            (None, &[])
        };
        if let Some(object) = object.filter(|o| !o.is_empty()) {
            let seen = self
                .seen
                .entry((label.to_owned(), object.clone()))
                .or_default();
            seen.entry(event).or_insert(start);
            let times: Vec<(usize, u64)> = order
                .iter()
                .enumerate()
                .filter_map(|(i, e)| seen.get(e).map(|t| (i, *t)))
                .collect();
            let inverted = times.windows(2).any(|w| w[0].1 > w[1].1);
            let rule = if order.len() == 3 {
                POD.id
            } else {
                CONTAINER.id
            };
            if inverted && self.fired.insert((rule, label.to_owned(), object)) {
                let got: Vec<Hook> = {
                    // Ties in time by name, as when the events were strings.
                    let mut v: Vec<(u64, &str, Event)> = seen
                        .iter()
                        .map(|(e, t)| (*t, e.as_str_name(), *e))
                        .collect();
                    v.sort_unstable();
                    v.into_iter().map(|(_, _, e)| Hook::Event(e)).collect()
                };
                out.push(Violation {
                    rule,
                    severity: Severity::Error,
                    certainty: self.certainty(self.plugin_by_label(label)),
                    ts: h.call.start.unwrap_or_else(ts0),
                    pod: pod_of_hook(h),
                    plugin: Some(label.to_owned()),
                    detail: Detail::EventOrder { seen: got },
                    evidence: vec![nri_evidence(h)],
                });
            }
        }
    }
}

/// `plugin` saw `seen`, in this order.
pub(super) fn sentence(plugin: &str, seen: &[Hook]) -> String {
    let seen: Vec<&str> = seen.iter().map(Hook::as_str).collect();
    format!("{plugin} saw {} in this order", seen.join(" -> "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        capture::Loss,
        engine::{contract::test_records::*, findings::Certainty, record::Record, test_calls::*},
        model::observation::Observation,
    };

    #[test]
    fn remove_before_stop_is_out_of_order() {
        let v = check(&lifecycle([
            ("RunPodSandbox", Event::RunPodSandbox),
            ("RemovePodSandbox", Event::RemovePodSandbox),
            ("StopPodSandbox", Event::StopPodSandbox),
        ]));
        assert_eq!(rule_ids(&v), vec![POD.id]);
        assert_eq!(v[0].certainty, Certainty::Certain);
        assert_eq!(
            v[0].detail,
            Detail::EventOrder {
                seen: vec![
                    Hook::Event(Event::RunPodSandbox),
                    Hook::Event(Event::RemovePodSandbox),
                    Hook::Event(Event::StopPodSandbox)
                ]
            }
        );
    }

    #[test]
    fn after_capture_loss_it_is_uncertain() {
        let mut records = vec![Record::Observed(Observation::CaptureLoss(Loss {
            lost_records: 3,
            ..Default::default()
        }))];
        records.extend(lifecycle([
            ("RunPodSandbox", Event::RunPodSandbox),
            ("RemovePodSandbox", Event::RemovePodSandbox),
            ("StopPodSandbox", Event::StopPodSandbox),
        ]));
        let v = check(&records);
        assert_eq!(rule_ids(&v), vec![POD.id]);
        assert!(matches!(v[0].certainty, Certainty::Uncertain { .. }));
    }

    #[test]
    fn container_events_out_of_order() {
        let records = vec![
            plugin("a", "10", 2, &[]),
            span(
                cri(Some("StartContainer"), "s1", 100, 150),
                vec![ctr_hook(Event::StartContainer, "s1", "c1", 110)],
            ),
            span(
                cri(Some("CreateContainer"), "s1", 200, 250),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 210)],
            ),
        ];
        let v = check(&records);
        // (plugin a subscribed to nothing: the deliveries are also
        // unsubscribed ones.)
        assert!(rule_ids(&v).contains(&CONTAINER.id), "{:?}", rule_ids(&v));
        // In order: nothing about the order.
        let ok = vec![
            plugin("a", "10", 2, &["CREATE_CONTAINER", "START_CONTAINER"]),
            span(
                cri(Some("CreateContainer"), "s1", 100, 150),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 110)],
            ),
            span(
                cri(Some("StartContainer"), "s1", 200, 250),
                vec![ctr_hook(Event::StartContainer, "s1", "c1", 210)],
            ),
        ];
        assert_eq!(rule_ids(&check(&ok)), Vec::<&str>::new());
    }
}
