//! The `adjustment-rejected` scenario: NRI validation (v0.10+) failing a
//! container's creation, both ways a node can have it (containerd 2.2 and
//! 2.3, CRI-O 1.34+):
//!
//! 1. the runtime's built-in default validator, set to reject OCI hook
//!    injection (`reject_oci_hook_adjustment`, lab.sh's
//!    NRI_TRACE_LAB_DEFAULT_VALIDATOR), and plugin 10-hooks adding a
//!    prestart hook to every container: pod `rejected-0`'s
//!    CreateContainer fails, and nothing of the validator is on a socket;
//! 2. then 10-hooks gone, plugin 20-env adding an environment variable
//!    (which the default validator lets through) and plugin 90-judge, a
//!    validating plugin rejecting every adjustment: pod `rejected-1`'s
//!    CreateContainer fails on 90-judge's ValidateContainerAdjustment
//!    reply.
//!
//! containerd 2.3.7 in the lab: both fail CreateContainer with NRI's
//! `validator "NAME" rejected container adjustment, reason: ...` (the
//! built-in validator answers through the same response as a plugin), and
//! before answering it tells the plugins StopContainer and RemoveContainer
//! of the container it never made, inside the failed call. Every plugin
//! on the v0.12 stub subscribes to ValidateContainerAdjustment and
//! accepts, but 90-judge.
//!
//! Each phase has one rejecting validator: validators run at once and the
//! runtime fails the call with the first error to come back
//! (containerd/nri `pkg/adaptation/adaptation.go`
//! `validateContainerAdjustment`), so two would race. The plugins are
//! go-nri-plugin on the NRI project's v0.12.2 stub (its `adjust:` and
//! `error:` actions). The driver tears each pod down after the error.

use anyhow::{bail, ensure, Context, Result};

use super::{go_nri_plugin, go_plugins::start_go_plugin, truth_checks::deliveries, Run, Scenario};
use crate::truth::{Outcome, Truth};

/// The pods, one per phase.
pub const PODS: [&str; 2] = ["rejected-0", "rejected-1"];
/// What 90-judge answers every ValidateContainerAdjustment with.
pub const JUDGE_REASON: &str = "no adjustments from strangers";

pub(super) const ADJUSTMENT_REJECTED: Scenario = Scenario {
    name: "adjustment-rejected",
    about: "NRI validation failing CreateContainer (containerd 2.2, 2.3, CRI-O): the built-in default validator rejecting plugin 10-hooks' OCI hook (pod rejected-0), then validating plugin 90-judge rejecting 20-env's adjustment (pod rejected-1); go-nri-plugin on the v0.12.2 stub",
    drive,
    check: |t, facts| {
        facts.extend(verify(t)?);
        Ok(())
    },
};

pub(super) fn drive(r: &mut Run) -> Result<()> {
    let bin = go_nri_plugin(&r.lab, &["v0.12.2"])?
        .pop()
        .context("go-nri-plugin v0.12.2")?;
    r.lab.up_validating("2s", "reject_oci_hook_adjustment")?;
    r.attach_observer()?;
    start_go_plugin(
        r,
        &bin,
        "hooks",
        "10",
        &["-on", "CREATE_CONTAINER=adjust:hooks"],
    )?;
    failed_up(r, PODS[0])?;
    // 10-hooks goes before phase 2 (it would be rejected there too).
    let mut hooks = r.plugins.pop().context("plugin 10-hooks")?;
    hooks.kill().ok();
    hooks.wait().ok();
    start_go_plugin(
        r,
        &bin,
        "env",
        "20",
        &["-on", "CREATE_CONTAINER=adjust:env"],
    )?;
    let judge = format!("VALIDATE_CONTAINER_ADJUSTMENT=error:{JUDGE_REASON}");
    // Subscribed by name: CRI-O 1.36.3 (NRI v0.11.0) sends no NRI_version
    // in Configure, and the stub's `-events auto` then keeps to the events
    // of v0.6-v0.9, without validation.
    start_go_plugin(
        r,
        &bin,
        "judge",
        "90",
        &["-events", "VALIDATE_CONTAINER_ADJUSTMENT", "-on", &judge],
    )?;
    failed_up(r, PODS[1])
}

/// `cri-driver up` of pod `name`, whose CreateContainer must fail; the
/// driver then stops and removes the sandbox itself, as kubelet's pod
/// worker would (its note "cleanup of pod ... after an error").
fn failed_up(r: &Run, name: &str) -> Result<()> {
    let out = r
        .driver_cmd(&["up", "--name", name])
        .output()
        .context("running cri-driver up")?;
    ensure!(
        !out.status.success(),
        "pod {name}: cri-driver up succeeded, but a validator should have failed its CreateContainer"
    );
    Ok(())
}

/// Each pod's CreateContainer failed with its validator's words, and the
/// plugins got what the phase gave them: 10-hooks and 20-env each one
/// CreateContainer they answered, 90-judge one ValidateContainerAdjustment
/// it answered (the stub turns its error into a rejection).
pub(super) fn verify(t: &[Truth]) -> Result<Vec<String>> {
    let mut facts = Vec::new();
    for (pod, want) in PODS.iter().zip([
        "validator \"00-default-validator\" rejected container adjustment",
        "validator \"90-judge\" rejected container adjustment",
    ]) {
        let message = t
            .iter()
            .find_map(|x| match x {
                Truth::Cri {
                    method,
                    pod: Some(p),
                    outcome: Outcome::Error { message, .. },
                    ..
                } if method == "CreateContainer" && p.name == *pod => Some(message.as_str()),
                _ => None,
            })
            .with_context(|| format!("pod {pod}: no failed CreateContainer in the truth"))?;
        ensure!(
            message.contains(want),
            "pod {pod}: CreateContainer failed with {message:?}, not {want:?}"
        );
        facts.push(format!("pod {pod}: CreateContainer failed: {message}"));
    }
    for (plugin, event, pod) in [
        ("hooks", "CREATE_CONTAINER", PODS[0]),
        ("env", "CREATE_CONTAINER", PODS[1]),
        ("judge", "VALIDATE_CONTAINER_ADJUSTMENT", PODS[1]),
    ] {
        let got: Vec<_> = deliveries(t, plugin)
            .into_iter()
            .filter(|d| d.event == Some(event))
            .collect();
        match got.as_slice() {
            [d] if d.pod == Some(pod) && d.reply.is_some() => {}
            _ => bail!(
                "plugin {plugin}: {} {event} deliveries, expected one of pod {pod}, answered",
                got.len()
            ),
        }
    }
    Ok(facts)
}
