//! deploy/README.md's `kubectl debug node/NAME` recipe, run as written
//! (issue 32 item 2) but without a terminal: the node debug pod
//! (`--profile=sysadmin`: privileged, the host's PID and network
//! namespaces, the node's / at /host) from the nri-trace image, with
//! deploy/debug-node.yaml's mounts, running `nri-trace watch -o json` for
//! a while as the TUI would run, then `nri-trace explain` of a pod the
//! DaemonSet's flight recorder saw, read through the recipe's mount of
//! /var/lib/nri-trace. Its output is read with `kubectl logs`.
//!
//! What it must show: the capture attached to the node's containerd from
//! inside the debug pod (the session names it), kubelet's calls decoded
//! and attributed to kubelet, and explain answering from the recorder.

use std::{
    path::Path,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};

use super::{cluster::Cluster, json_lines_among, pods::TestPod};

/// How long the debug pod's `watch` runs: kubelet polls its runtime every
/// second (PLEG), so a few seconds hold many calls.
const WATCH_SECS: &str = "8";

pub(crate) fn debug_node_recipe(c: &Cluster, tag: &str, out: &Path) -> Result<()> {
    // A pod the DaemonSet's recorder sees made and removed: deleted, left
    // by the API once kubelet has torn it down, its stopped sandbox then
    // removed by hand (kubelet's garbage collection comes each minute).
    let pod = TestPod::new("debugged", "sleep 3600").grace(1);
    c.create(&pod)?;
    c.delete(&pod)?;
    c.kubectl_pod("wait", &pod, &["--for=delete", "--timeout=90s"])?;
    c.remove(&pod)?;
    let node = c.node()?;
    let custom = c.repo().join("deploy/debug-node.yaml");
    let image = Cluster::image(tag);
    let mut lines = Vec::new();
    for args in [
        vec!["watch", "-o", "json", "--duration", WATCH_SECS],
        vec![
            "explain",
            &format!("{}/{}", pod.namespace, pod.name),
            "-o",
            "json",
        ],
    ] {
        let before = debug_pods(c)?;
        let mut cmd = vec![
            "debug".to_string(),
            format!("node/{node}"),
            "--profile=sysadmin".into(),
            format!("--image={image}"),
            "--image-pull-policy=Never".into(),
            format!("--custom={}", custom.display()),
            "--".into(),
            "/usr/local/bin/nri-trace".into(),
        ];
        cmd.extend(args.iter().map(ToString::to_string));
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        c.kubectl(&cmd)?;
        let name = debug_pods(c)?
            .into_iter()
            .find(|p| !before.contains(p))
            .context("kubectl debug made no node-debugger pod")?;
        let phase = wait_finished(c, &name)?;
        let logs = c.kubectl(&["logs", &name])?;
        std::fs::write(out.join(format!("{name}.log")), &logs)?;
        c.kubectl(&["delete", "pod", &name, "--wait=true", "--timeout=60s"])?;
        ensure!(
            phase == "Succeeded",
            "the debug pod {name} ended {phase}: {logs}"
        );
        lines.push(json_lines_among(&logs).with_context(|| format!("{name}'s output: {logs}"))?);
    }
    let watch = &lines[0];
    let session = watch
        .iter()
        .find(|v| v["type"] == "session")
        .context("watch in the debug pod: no session line")?;
    ensure!(session["runtime"] == "containerd", "{session}");
    let kubelets = watch
        .iter()
        .filter(|v| {
            v["type"] == "cri_span"
                && v["client"]["comm"] == "kubelet"
                && v["method"].is_string()
                && v["identified"]["how"] != "unknown"
        })
        .count();
    ensure!(
        kubelets > 0,
        "watch in the debug pod: no call of kubelet's named ({} lines)",
        watch.len()
    );
    let e = lines[1]
        .iter()
        .find(|v| v["type"] == "explanation")
        .context("explain in the debug pod: no explanation")?;
    ensure!(e["verdict"] == "gone", "{e}");
    eprintln!(
        "debug node: watch named {kubelets} calls of kubelet's in {WATCH_SECS} s; explain: {}",
        e["sentence"]
    );
    Ok(())
}

/// The node debug pods of the default namespace.
fn debug_pods(c: &Cluster) -> Result<Vec<String>> {
    Ok(c.kubectl(&["get", "pods", "-o", "name"])?
        .lines()
        .filter_map(|l| l.strip_prefix("pod/"))
        .filter(|p| p.starts_with("node-debugger-"))
        .map(String::from)
        .collect())
}

/// The pod's phase once it ended (Succeeded or Failed), within 2 min.
fn wait_finished(c: &Cluster, name: &str) -> Result<String> {
    let t0 = Instant::now();
    loop {
        let phase = c.kubectl(&["get", "pod", name, "-o", "jsonpath={.status.phase}"])?;
        if phase == "Succeeded" || phase == "Failed" {
            return Ok(phase);
        }
        if t0.elapsed() > Duration::from_mins(2) {
            bail!("the debug pod {name} still {phase:?} after 2 min");
        }
        sleep(Duration::from_millis(500));
    }
}
