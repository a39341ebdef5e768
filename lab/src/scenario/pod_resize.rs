//! The `pod-resize` scenario: a pod resized in place, as kubelet resizes
//! one for pod-level resources (KEP-1287): the CRI call
//! UpdatePodSandboxResources, made by k8s.io/cri-api's own Go client
//! (lab/go-cri-resize: the Rust driver's k8s-cri and the lab's Debian
//! cri-api both predate the method). containerd 2.3 tells the plugins
//! UpdatePodSandbox before it applies the change and PostUpdatePodSandbox
//! after (internal/cri/server/sandbox_update_resources.go), both inside
//! the CRI call.

use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use super::{
    go_lab_binary, sandbox_id_of,
    truth_checks::{all_cri_ok, deliveries, ms},
    Run, Scenario,
};
use crate::truth::{Outcome, Truth};

/// The pod and the plugin of the scenario.
const POD: &str = "resize-0";
const PLUGIN: &str = "resize";

pub(super) const POD_RESIZE: Scenario = Scenario {
    name: "pod-resize",
    about: "a pod resized in place: CRI UpdatePodSandboxResources by k8s.io/cri-api's own Go client (lab/go-cri-resize, built by lab/go-cri-resize.sh through the Go module proxy); containerd 2.3 tells the plugins UpdatePodSandbox and PostUpdatePodSandbox inside the call; one plugin",
    drive,
    check: |t, facts| {
        facts.extend(verify(t)?);
        Ok(())
    },
};

pub(super) fn drive(r: &mut Run) -> Result<()> {
    r.up("2s")?;
    // `all` is NRI 0.6's eleven events; the pod's update events came later.
    r.plugin(
        PLUGIN,
        "10",
        &["--events", "all,UPDATE_POD_SANDBOX,POST_UPDATE_POD_SANDBOX"],
    )?;
    let id = sandbox_id_of(&r.driver(&["up", "--name", POD])?)?;
    let t = crate::truth::read(&r.truth)?;
    let Some(uid) = t.iter().find_map(|x| match x {
        Truth::Cri {
            method,
            pod: Some(p),
            ..
        } if method == "RunPodSandbox" && p.sandbox_id.as_deref() == Some(id.as_str()) => {
            Some(p.uid.clone())
        }
        _ => None,
    }) else {
        bail!("no RunPodSandbox of sandbox {id} in the truth");
    };
    let out = Command::new(go_lab_binary("go-cri-resize.sh", &["build"])?)
        .arg("-socket")
        .arg(r.lab.cri_socket())
        .arg("-truth")
        .arg(&r.truth)
        .args(["-sandbox-id", &id, "-name", POD, "-namespace", "nri-trace"])
        .args(["-uid", &uid])
        .output()
        .context("running go-cri-resize")?;
    ensure!(
        out.status.success(),
        "go-cri-resize failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    r.driver(&["down", "--sandbox-id", &id])?;
    Ok(())
}

/// The resize succeeded, and the plugin got UpdatePodSandbox then
/// PostUpdatePodSandbox of the pod, each while the call was in flight.
pub(super) fn verify(t: &[Truth]) -> Result<Vec<String>> {
    let n = all_cri_ok(t)?;
    let Some((start, end)) = t.iter().find_map(|x| match x {
        Truth::Cri {
            method,
            start_mono_ns,
            end_mono_ns,
            outcome: Outcome::Ok,
            ..
        } if method == "UpdatePodSandboxResources" => Some((*start_mono_ns, *end_mono_ns)),
        _ => None,
    }) else {
        bail!("no UpdatePodSandboxResources that succeeded in the truth");
    };
    let got: Vec<(&str, u64)> = deliveries(t, PLUGIN)
        .into_iter()
        .filter(|d| d.pod == Some(POD))
        .filter_map(|d| match d.event {
            Some(e @ ("UPDATE_POD_SANDBOX" | "POST_UPDATE_POD_SANDBOX")) => Some((e, d.recv)),
            _ => None,
        })
        .collect();
    let events: Vec<&str> = got.iter().map(|g| g.0).collect();
    ensure!(
        events == ["UPDATE_POD_SANDBOX", "POST_UPDATE_POD_SANDBOX"],
        "plugin {PLUGIN} got {events:?} for {POD}, not UpdatePodSandbox then PostUpdatePodSandbox"
    );
    ensure!(
        got.iter().all(|g| start <= g.1 && g.1 <= end),
        "a delivery outside the call ({start}..{end} ns): {got:?}"
    );
    Ok(vec![format!(
        "{n} CRI calls ok; UpdatePodSandboxResources took {:.1} ms, with {PLUGIN}'s \
         UpdatePodSandbox and PostUpdatePodSandbox inside it",
        ms(end - start)
    )])
}
