//! The adjustment-rejected rule: a container's adjustments pass every
//! validator, or CRI CreateContainer fails. Its detection, in one place.
//!
//! NRI v0.10 added validation (containerd/nri `docs/validation-plugins.md`):
//! after every plugin's CreateContainer the runtime sends
//! ValidateContainerAdjustment, with the combined adjustment and which
//! plugin owns each adjusted field, to every validator at once
//! (`pkg/adaptation/adaptation.go` `validateContainerAdjustment`). A
//! rejection fails the container's creation. Validators are of two kinds:
//!
//! - a plugin serving ValidateContainerAdjustment over its socket: its
//!   reply says `reject` and `reason` on the wire, and the runtime's error
//!   reads `validator "NAME" rejected container adjustment, reason: R`
//!   (`pkg/api/validate.go` `ValidationResult`);
//! - the runtime's built-in default validator (containerd 2.2+
//!   `[plugins.'io.containerd.nri.v1.nri'.default_validator]`, CRI-O 1.34+
//!   `[crio.nri.default_validator]`), which runs inside the runtime: nothing
//!   of it is on any socket, only the CRI error. containerd 2.3.7 (the
//!   lab's `adjustment-rejected`): `failed to create containerd container:
//!   failed to get NRI adjustment for container: validator
//!   "00-default-validator" rejected container adjustment, reason:
//!   validation error: plugin "10-hooks" attempted restricted OCI hook
//!   injection` (`plugins/default-validator/default-validator.go`).
//!
//! A validator that fails instead of answering (a plugin's ttrpc error)
//! reads `validator plugin NAME failed: ...` (`pkg/adaptation/plugin.go`).
//!
//! So the finding is made at the CRI CreateContainer call that failed: the
//! validator and its reason from a rejecting reply under it, else from the
//! call's error message; the plugins whose adjustment was rejected are
//! those of its CreateContainer deliveries whose replies adjusted the
//! container, narrowed to the ones the reason names when it names any.

use super::{cri_evidence, nri_evidence, Rule};
use crate::model::cri_call::CriMethod;
use crate::{
    decode::nri::message::Event,
    engine::{
        correlate::CriSpan,
        findings::{AdjustedBy, Certainty, Detail, Severity, Violation},
        hook_latency::Hook,
    },
    model::{cri_call::CriOutcome, nri_call::Adjustment},
};

pub const RULE: Rule = Rule {
    id: "adjustment-rejected",
    severity: Severity::Error,
    statement: "the adjustments plugins make to a container pass every validator: the runtime's built-in default validator (containerd 2.2+, CRI-O 1.34+; off unless configured) and plugins serving ValidateContainerAdjustment (NRI v0.10+). A rejection fails CRI CreateContainer: kubelet retries it and the pod stays in ContainerCreating. Found at that CreateContainer: the validator and its reason from a rejecting ValidateContainerAdjustment reply under it (`adjustment` `validated`, rejected), else from the runtime's error (`validator \"NAME\" rejected container adjustment, reason: ...` or `validator plugin NAME failed: ...`; a validator no delivery went to is `builtin`); the plugins whose adjustments it rejected are those of the call's CreateContainer deliveries whose replies adjusted the container (`adjustment` `made`), narrowed to the ones the reason names",
    source: "containerd/nri docs/validation-plugins.md, pkg/adaptation/adaptation.go validateContainerAdjustment, pkg/api/validate.go ValidationResult, plugins/default-validator/default-validator.go",
};

/// containerd/nri `ValidationResult`: a validator's rejection, a plugin's
/// or the built-in default validator's (containerd 2.2.9 and 2.3.7).
const REJECTED: (&str, &str) = ("validator \"", "\" rejected container adjustment, reason: ");
/// containerd/nri `plugin.ValidateContainerAdjustment`: a validator that
/// failed to answer (a plugin's ttrpc error or timeout).
const FAILED: (&str, &str) = ("validator plugin ", " failed: ");

/// The finding for CRI call `s`, if it is a CreateContainer a validator
/// made fail.
pub(super) fn check(s: &CriSpan, certainty: Certainty) -> Option<Violation> {
    if !s.call.is(CriMethod::CreateContainer) {
        return None;
    }
    let CriOutcome::Error { message, .. } = &s.call.outcome else {
        return None;
    };
    // A validating plugin's rejection, and its reason, from its reply.
    let on_wire = s.hooks.iter().find_map(|h| match &h.call.adjustment {
        Some(Adjustment::Validated {
            rejected: true,
            reason,
        }) if h.hook.event() == Some(Event::ValidateContainerAdjustment) => Some((h, reason)),
        _ => None,
    });
    let (validator, reason, builtin) = if let Some((h, reason)) = on_wire {
        (h.call.plugin.label(), reason.clone(), false)
    } else {
        let (name, reason) = from_message(message)?;
        // A validator the runtime delivered to is a plugin; one it did not
        // is built in.
        let builtin = !s.hooks.iter().any(|h| {
            h.hook.event() == Some(Event::ValidateContainerAdjustment)
                && h.call.plugin.label() == name
        });
        (name, reason, builtin)
    };
    let adjusters: Vec<_> = s
        .hooks
        .iter()
        .filter(|h| h.hook == Hook::Event(Event::CreateContainer))
        .filter_map(|h| match &h.call.adjustment {
            Some(Adjustment::Made { parts }) => Some((h, parts)),
            _ => None,
        })
        .collect();
    let named: Vec<_> = adjusters
        .iter()
        .filter(|(h, _)| names_plugin(&reason, &h.call.plugin.label()))
        .collect();
    let offenders: Vec<_> = if named.is_empty() {
        adjusters.iter().collect()
    } else {
        named
    };
    let mut evidence = vec![cri_evidence(&s.call)];
    evidence.extend(offenders.iter().map(|(h, _)| nri_evidence(h)));
    evidence.extend(on_wire.map(|(h, _)| nri_evidence(h)));
    Some(Violation {
        rule: RULE.id,
        severity: RULE.severity,
        certainty,
        ts: s.call.end.or(s.call.start)?,
        pod: s.call.pod.as_ref().map(ToString::to_string),
        plugin: match offenders.as_slice() {
            [(h, _)] => Some(h.call.plugin.label()),
            _ => None,
        },
        detail: Detail::AdjustmentRejected {
            validator,
            builtin,
            reason,
            container: s.call.container.as_ref().map(|c| c.name.clone()),
            adjusted_by: offenders
                .iter()
                .map(|(h, parts)| AdjustedBy {
                    plugin: h.call.plugin.label(),
                    parts: (*parts).clone(),
                })
                .collect(),
        },
        evidence,
    })
}

/// The validator and its reason in a runtime's CreateContainer error
/// (wrapped by the runtime: containerd's "failed to get NRI adjustment for
/// container: ...", CRI-O's own words before it).
fn from_message(message: &str) -> Option<(String, String)> {
    for (before, after) in [REJECTED, FAILED] {
        let Some(at) = message.find(before) else {
            continue;
        };
        let rest = &message[at + before.len()..];
        let Some((name, reason)) = rest.split_once(after) else {
            continue;
        };
        if !name.is_empty() && !name.contains(char::is_whitespace) {
            return Some((name.to_string(), reason.to_string()));
        }
    }
    None
}

/// Whether a validator's reason names plugin `label` ("10-hooks") as a
/// word of its own: NRI names a field's owner by its index and name
/// (`pkg/adaptation/result.go`, the plugin's `name()`), quoted or not
/// (`plugin "10-hooks"`, `plugin(s) 10-hooks, 20-env`). The name alone is
/// not enough: a plugin called "hook" is not in "OCI hook injection".
fn names_plugin(reason: &str, label: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
    reason.match_indices(label).any(|(at, _)| {
        !word(reason[..at].chars().next_back()) && !word(reason[at + label.len()..].chars().next())
    })
}

/// `validator` rejected the adjustments of `container` in `pod`.
pub(super) fn sentence(
    pod: &str,
    validator: &str,
    builtin: bool,
    reason: &str,
    container: Option<&str>,
    adjusted_by: &[AdjustedBy],
) -> String {
    let whose = if adjusted_by.is_empty() {
        "the plugins' adjustments (none seen adjusting it)".to_string()
    } else {
        let who: Vec<_> = adjusted_by
            .iter()
            .map(|a| format!("{}'s ({})", a.plugin, a.parts.join(", ")))
            .collect();
        let noun = if who.len() == 1 {
            "adjustment"
        } else {
            "adjustments"
        };
        format!("{} {noun}", who.join(" and "))
    };
    format!(
        "validator {validator}{} rejected {whose} of container {} in {pod}: {reason}; CreateContainer failed",
        if builtin { " (built into the runtime)" } else { "" },
        container.unwrap_or("?"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        hook_latency::HookSpan,
        record::Record,
        test_calls::{cri, hook, span, to_plugin},
    };

    fn create_span(message: &str, hooks: Vec<HookSpan>) -> CriSpan {
        let mut c = cri(Some("CreateContainer"), "s1", 0, 50);
        c.outcome = CriOutcome::Error {
            code: 2,
            status: "Unknown".into(),
            message: message.into(),
        };
        match span(c, hooks) {
            Record::CriSpan(s) => s,
            _ => unreachable!(),
        }
    }

    fn adjusting(name: &str, idx: &str, conn: u64, parts: &[&str]) -> HookSpan {
        let mut h = to_plugin(
            hook(Some(Event::CreateContainer), name, "s1", 1, 2),
            name,
            idx,
            conn,
        );
        if !parts.is_empty() {
            h.call.adjustment = Some(Adjustment::Made {
                parts: parts.iter().map(ToString::to_string).collect(),
            });
        }
        h
    }

    #[test]
    fn the_built_in_validator_from_the_error_alone() {
        let s = create_span(
            "failed to get NRI adjustment for container: validator \"00-default-validator\" \
             rejected container adjustment, reason: validation error: plugin \"10-hooks\" \
             attempted restricted OCI hook injection",
            vec![
                adjusting("hooks", "10", 2, &["hooks"]),
                adjusting("env", "20", 3, &["env"]),
                adjusting("quiet", "30", 4, &[]),
            ],
        );
        let v = check(&s, Certainty::Certain).expect("a finding");
        assert_eq!(v.rule, RULE.id);
        assert_eq!(v.plugin.as_deref(), Some("10-hooks"));
        let Detail::AdjustmentRejected {
            validator,
            builtin,
            adjusted_by,
            ..
        } = &v.detail
        else {
            panic!("{:?}", v.detail)
        };
        assert_eq!(
            (validator.as_str(), *builtin),
            ("00-default-validator", true)
        );
        assert_eq!(
            adjusted_by,
            &[AdjustedBy {
                plugin: "10-hooks".into(),
                parts: vec!["hooks".into()]
            }]
        );
        // The CRI call and the offender's delivery.
        assert_eq!(v.evidence.len(), 2);
    }

    #[test]
    fn a_validating_plugin_from_its_reply() {
        let mut judge = to_plugin(
            hook(
                Some(Event::ValidateContainerAdjustment),
                "judge",
                "s1",
                3,
                4,
            ),
            "judge",
            "90",
            5,
        );
        judge.call.adjustment = Some(Adjustment::Validated {
            rejected: true,
            reason: "no env from strangers".into(),
        });
        let s = create_span(
            "validator \"90-judge\" rejected container adjustment, reason: no env from strangers",
            vec![adjusting("env", "20", 3, &["env"]), judge],
        );
        let v = check(&s, Certainty::Certain).expect("a finding");
        let Detail::AdjustmentRejected {
            validator,
            builtin,
            reason,
            adjusted_by,
            ..
        } = &v.detail
        else {
            panic!("{:?}", v.detail)
        };
        assert_eq!(validator, "90-judge");
        assert!(!builtin);
        assert_eq!(reason, "no env from strangers");
        // The reason names no plugin: every one that adjusted.
        assert_eq!(adjusted_by.len(), 1);
        assert_eq!(v.evidence.len(), 3);
    }

    #[test]
    fn other_failures_are_not_rejections() {
        let s = create_span("failed to reserve container name", vec![]);
        assert!(check(&s, Certainty::Certain).is_none());
        let mut ok = create_span("", vec![]);
        ok.call.outcome = CriOutcome::Ok;
        assert!(check(&ok, Certainty::Certain).is_none());
    }

    #[test]
    fn validator_and_reason_from_the_runtime_error() {
        // containerd's wrapping of NRI's own messages (see the module doc).
        // containerd 2.3.7's, word for word (the lab).
        let m =
            "failed to create containerd container: failed to get NRI adjustment for container: \
                 validator \"00-default-validator\" rejected container adjustment, reason: \
                 validation error: plugin \"10-hooks\" attempted restricted OCI hook injection";
        assert_eq!(
            from_message(m),
            Some((
                "00-default-validator".into(),
                "validation error: plugin \"10-hooks\" attempted restricted OCI hook injection"
                    .into()
            ))
        );
        let m = "validator plugin 30-flaky failed: ttrpc: closed";
        assert_eq!(
            from_message(m),
            Some(("30-flaky".into(), "ttrpc: closed".into()))
        );
        let m = "failed to get NRI adjustment for container: validator \"20-judge\" rejected \
                 container adjustment, reason: no hooks here";
        assert_eq!(
            from_message(m),
            Some(("20-judge".into(), "no hooks here".into()))
        );
        assert_eq!(from_message("name is reserved"), None);
        assert_eq!(from_message("validator plugin  failed: x"), None);
    }

    #[test]
    fn reasons_name_plugins_by_their_label() {
        let r = "validation error: plugin \"10-hooks\" attempted restricted OCI hook injection";
        assert!(names_plugin(r, "10-hooks"));
        assert!(!names_plugin(r, "10-hook"));
        assert!(!names_plugin(r, "0-hooks"));
        assert!(!names_plugin(r, "20-hook"));
        let r = "attempted restricted sysctl adjustment by plugin(s) 30-env, 40-net";
        assert!(names_plugin(r, "30-env") && names_plugin(r, "40-net"));
        // Multi-byte text around a label slices on char boundaries.
        assert!(!names_plugin("é10-hooksé", "10-hooks"));
        assert!(names_plugin("« 10-hooks »", "10-hooks"));
    }
}
