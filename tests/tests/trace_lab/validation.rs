//! NRI validation failing a container (`adjustment-rejected`,
//! lab/src/scenario/adjustment_rejected.rs): containerd's built-in default
//! validator rejecting a plugin's OCI hook, then a validating plugin
//! rejecting another's environment variable, each failing CRI
//! CreateContainer. nri-trace finds `adjustment-rejected` for each: the
//! built-in validator from the runtime's error alone (nothing of it is on
//! a socket), the validating plugin from its ValidateContainerAdjustment
//! reply; each with the plugin whose adjustment was rejected, what it
//! adjusted, and the validator's reason. containerd 2.2 (NRI v0.11), 2.3
//! (v0.12) and CRI-O 1.36 (v0.11): the runtimes with validation.

use nri_trace::engine::{AdjustedBy, Certainty};
use nri_trace_lab::scenario::adjustment_rejected::{JUDGE_REASON, PODS};
use trace_check::rule_ids::ADJUSTMENT_REJECTED;

use super::*;

#[test]
fn trace_adjustment_rejected() {
    check_adjustment_rejected(None);
}

#[test]
fn ctrd22_trace_adjustment_rejected() {
    check_adjustment_rejected(Some(Runtime::Containerd22));
}

/// CRI-O 1.36 (NRI v0.11.0) with its built-in default validator
/// (`[crio.nri.default_validator]`, lab/crio.sh).
#[test]
fn crio_trace_adjustment_rejected() {
    check_adjustment_rejected(Some(Runtime::CriO));
}

fn check_adjustment_rejected(rt: Option<Runtime>) {
    let scenario = "adjustment-rejected";
    let Some((out, records)) = traced_on(rt, scenario) else {
        return;
    };
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    cri_check::assert_every_call(scenario, &truth, &records, cri_check::Allow::default());
    let rejected: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Violation(v) if v.rule == ADJUSTMENT_REJECTED => Some(v),
            _ => None,
        })
        .collect();
    for v in &rejected {
        eprintln!("{scenario}: {}", finding_message(v));
    }
    assert_eq!(rejected.len(), 2, "{rejected:#?}");
    let hooks = AdjustedBy {
        plugin: "10-hooks".into(),
        parts: vec!["hooks".into()],
    };
    let env = AdjustedBy {
        plugin: "20-env".into(),
        parts: vec!["env".into()],
    };
    for (v, (pod, validator, builtin, by)) in rejected.iter().zip([
        (PODS[0], "00-default-validator", true, hooks),
        (PODS[1], "90-judge", false, env),
    ]) {
        assert!(v.pod.as_deref().is_some_and(|p| p.ends_with(pod)), "{v:#?}");
        assert_eq!(v.certainty, Certainty::Certain, "{v:#?}");
        assert_eq!(v.plugin.as_deref(), Some(by.plugin.as_str()), "{v:#?}");
        let Detail::AdjustmentRejected {
            validator: got,
            builtin: got_builtin,
            reason,
            adjusted_by,
            ..
        } = &v.detail
        else {
            panic!("{v:#?}")
        };
        assert_eq!((got.as_str(), got_builtin), (validator, &builtin), "{v:#?}");
        assert_eq!(adjusted_by, &[by], "{v:#?}");
        if builtin {
            assert!(reason.contains("OCI hook injection"), "{v:#?}");
        } else {
            assert_eq!(reason, JUDGE_REASON, "{v:#?}");
        }
    }
    // containerd's undoing of each container it did not make
    // (StopContainer, RemoveContainer inside the failed CreateContainer)
    // is under that call.
    let mislabeled = trace_check::no_call_since(&records, 0);
    assert!(mislabeled.is_empty(), "{mislabeled:?}");
    // Nothing else is wrong with these pods.
    assert_eq!(
        findings(&records)
            .into_iter()
            .filter(|f| f.0 != ADJUSTMENT_REJECTED)
            .collect::<Vec<_>>(),
        vec![]
    );
}
