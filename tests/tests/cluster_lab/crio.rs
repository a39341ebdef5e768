//! The cluster on CRI-O (issue 32 item 3): an NRI plugin whose
//! StopPodSandbox hook fails. Unlike containerd, which logs the error and
//! goes on ([`super::failing_stop_hook`]), CRI-O returns it as the CRI
//! call's error and leaves the sandbox unstopped (cri-o v1.36.3
//! server/sandbox_stop_linux.go: `s.nri.stopPodSandbox` fails, so no
//! `SetStopped`), and kubelet's pod worker tries the teardown again after
//! its backoff: the pod stays Terminating while the plugin refuses.
//!
//! nri-trace arrives then, as on a real node: no DaemonSet and no flight
//! recorder; `nri-trace explain --live` from the node's shell attaches to
//! CRI-O, to kubelet's CRI connection (open since kubelet started: its
//! HPACK table unknown) and to the plugin's, and watches kubelet's next
//! attempt.

use std::{path::Path, process::Command};

use anyhow::{ensure, Context, Result};

use super::{
    cluster::Cluster, explanation, json_output, output, pods::TestPod, refused_stop, with_plugin,
};

/// How long the live explain watches for kubelet's next attempt: its pod
/// worker backs off 10 s after a failed sync (k8s.io/kubernetes v1.37.2
/// pkg/kubelet/pod_workers.go, `backOffPeriod`), with jitter.
const WAIT_SECS: &str = "40";

pub(crate) fn failing_stop_hook(c: &Cluster, bin: &Path, out: &Path) -> Result<()> {
    let pod = TestPod::new("refused", "sleep 3600").grace(1);
    c.create(&pod)?;
    let args = ["--on", "STOP_POD_SANDBOX=error:teardown refused"];
    with_plugin(c, "refuse", &args, out, || {
        c.delete(&pod)?;
        let text = output(Command::new(bin).args([
            "explain",
            &format!("{}/{}", pod.namespace, pod.name),
            "--live",
            "--wait",
            WAIT_SECS,
            "-o",
            "json",
        ]))?;
        std::fs::write(out.join("explain-refused.ndjson"), &text)?;
        let lines = json_output(&text).with_context(|| format!("explain's output: {text}"))?;
        let e = explanation(&lines)?;
        eprintln!(
            "explain {}/{} on CRI-O: {}",
            pod.namespace, pod.name, e["sentence"]
        );
        ensure!(e["verdict"] == "blocked", "{e}");
        let step = refused_stop(e)?;
        // CRI-O returns the plugin's error as StopPodSandbox's. Its text
        // when HPACK shows it; after the attach kubelet's retries get the
        // same error, which CRI-O's encoder indexed whole before: then the
        // call failed with its status hidden (no response message).
        let o = &step["outcome"];
        ensure!(
            o["kind"] == "failed"
                || (o["kind"] == "error"
                    && o["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("teardown refused"))),
            "StopPodSandbox must have failed: {e}"
        );
        // Still Terminating in the API.
        let ts = c.kubectl_pod(
            "get",
            &pod,
            &["-o", "jsonpath={.metadata.deletionTimestamp}"],
        )?;
        ensure!(!ts.trim().is_empty(), "{} left the API: {e}", pod.name);
        Ok(())
    })?;
    // The plugin gone, kubelet's own next attempt goes through: it retried
    // all along, and the pod leaves the API without the test's help.
    c.kubectl_pod("wait", &pod, &["--for=delete", "--timeout=120s"])?;
    c.remove(&pod)
}
