//! The `mix` scenario: a kubelet-like call mix in two phases on one
//! connection, node-level calls then pods one after the other, optionally
//! paused in between until a file appears.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Result};
use nri_trace_lab::{
    cri::{self, api, ContainerSpec, PodSpec},
    truth,
};
use serde_json::{json, Value};

use crate::{
    fail, ms,
    pods::{cleanup, Started},
    print_json, Ctx, MixArgs, ScenarioResult,
};

// ------------------------------------------------------------------ mix

/// The phases of `mix`, in order.
const MIX_PHASES: [&str; 2] = ["warm", "main"];
/// Node-level calls at the start of each phase.
const MIX_NODE_CALLS: usize = 7;
/// Calls per pod.
const MIX_POD_CALLS: usize = 14;
/// How often `mix` looks for the pause file, and for how long.
const PAUSE_POLL: Duration = Duration::from_millis(20);
const PAUSE_GIVE_UP: Duration = Duration::from_mins(10);

fn mix_pod_name(prefix: &str, phase: &str, i: usize) -> String {
    format!("{prefix}-{phase}-{i}")
}

/// CRI calls one phase of `mix` makes with `pods` pods (when all succeed).
fn mix_calls_per_phase(pods: usize) -> usize {
    MIX_NODE_CALLS + MIX_POD_CALLS * pods
}

fn container_state(s: i32) -> &'static str {
    api::ContainerState::try_from(s).map_or("?", |x| x.as_str_name())
}

fn sandbox_state(s: i32) -> &'static str {
    api::PodSandboxState::try_from(s).map_or("?", |x| x.as_str_name())
}

/// Node-level calls, as kubelet's runtime health check, image manager and
/// relist make them: Version, Status, ImageFsInfo, ListImages,
/// ImageStatus(busybox), ListPodSandbox, ListContainers.
async fn mix_node_calls(ctx: &Ctx) -> Result<Value> {
    let d = &ctx.driver;
    d.version().await?;
    let st = d.status().await?;
    d.image_fs_info().await?;
    let images = d.list_images(None).await?;
    let busybox = d.image_status(cri::BUSYBOX_IMAGE).await?;
    let sandboxes = d.list_pod_sandbox(None).await?;
    let containers = d.list_containers(None, None).await?;
    let conditions: BTreeMap<String, bool> = st
        .status
        .map(|s| {
            s.conditions
                .into_iter()
                .map(|c| (c.r#type, c.status))
                .collect()
        })
        .unwrap_or_default();
    Ok(json!({
        "conditions": conditions,
        "images": images.len(),
        "busybox_present": busybox.is_some(),
        "sandboxes": sandboxes.len(),
        "containers": containers.len(),
    }))
}

/// One pod of `mix`: RunPodSandbox, PodSandboxStatus, CreateContainer,
/// StartContainer, ContainerStatus, ListPodSandbox, ListContainers(pod),
/// StopContainer, ContainerStatus, RemoveContainer, StopPodSandbox,
/// PodSandboxStatus, RemovePodSandbox, ListPodSandbox.
async fn mix_pod(ctx: &Ctx, spec: &PodSpec) -> Value {
    let d = &ctx.driver;
    let c = ContainerSpec::new("c0");
    let t0 = Instant::now();
    let mut started: Option<Started> = None;
    let mut removed = false;
    let mut v = json!({"name": spec.name, "uid": spec.uid});
    let res: Result<()> = Box::pin(async {
        let sid = d.run_pod_sandbox(spec, &ctx.policy).await?;
        let pod = spec.pod_ref(Some(&sid));
        v["sandbox_id"] = json!(sid);
        started = Some(Started {
            pod: pod.clone(),
            containers: vec![],
        });
        let ps = d.pod_sandbox_status(&pod).await?;
        v["sandbox_state"] = json!(sandbox_state(ps.state));
        let cref = d.create_container(spec, &sid, &c, &ctx.policy).await?;
        v["container_id"] = json!(cref.id);
        if let Some(s) = started.as_mut() {
            s.containers.push(cref.clone());
        }
        d.start_container(Some(&pod), &cref).await?;
        let cs = d.container_status(Some(&pod), &cref).await?;
        v["state_after_start"] = json!(container_state(cs.state));
        d.list_pod_sandbox(None).await?;
        let filter = api::ContainerFilter {
            pod_sandbox_id: sid.clone(),
            ..Default::default()
        };
        let listed = d.list_containers(Some(&pod), Some(filter)).await?;
        v["containers_listed"] = json!(listed.len());
        let t = Instant::now();
        d.stop_container(Some(&pod), &cref, 2).await?;
        v["stop_ms"] = json!(ms(t.elapsed()));
        let cs = d.container_status(Some(&pod), &cref).await?;
        v["state_after_stop"] = json!(container_state(cs.state));
        v["exit_code"] = json!(cs.exit_code);
        d.remove_container(Some(&pod), &cref).await?;
        d.stop_pod_sandbox(&pod).await?;
        let ps = d.pod_sandbox_status(&pod).await?;
        v["sandbox_state_after_stop"] = json!(sandbox_state(ps.state));
        d.remove_pod_sandbox(&pod).await?;
        removed = true;
        d.list_pod_sandbox(None).await?;
        Ok(())
    })
    .await;
    if res.is_err() && !removed {
        if let Some(s) = &started {
            cleanup(ctx, s).await;
        }
    }
    v["ok"] = json!(res.is_ok());
    v["ms"] = json!(ms(t0.elapsed()));
    if let Err(e) = res {
        v["error"] = json!(format!("{e:#}"));
    }
    v
}

/// One phase of `mix`: the node-level calls, then each pod in turn
/// (stopping at the first pod that fails). Returns what the phase did,
/// also when it failed.
async fn mix_phase(ctx: &Ctx, a: &MixArgs, phase: &str) -> (Value, Result<()>) {
    let d = &ctx.driver;
    let calls_before = d.records().len();
    d.note(format!(
        "mix: phase {phase} begins ({} pods, {} CRI calls expected)",
        a.pods,
        mix_calls_per_phase(a.pods)
    ));
    let mut v = json!({"phase": phase, "start_mono_ns": truth::mono_ns()});
    let mut pods = vec![];
    let res: Result<()> = Box::pin(async {
        v["node"] = mix_node_calls(ctx).await?;
        for i in 0..a.pods {
            let spec = ctx.pod_spec(mix_pod_name(&a.prefix, phase, i), &a.pod);
            let p = mix_pod(ctx, &spec).await;
            let err =
                (p["ok"] != json!(true)).then(|| p["error"].as_str().unwrap_or("?").to_owned());
            pods.push(p);
            if let Some(e) = err {
                bail!("pod {}: {e}", spec.name);
            }
        }
        Ok(())
    })
    .await;
    v["end_mono_ns"] = json!(truth::mono_ns());
    let calls = d.records().len() - calls_before;
    d.note(format!("mix: phase {phase} ends ({calls} CRI calls)"));
    v["pods"] = json!(pods);
    v["calls"] = json!(calls);
    v["expected_calls"] = json!(mix_calls_per_phase(a.pods));
    (v, res.map_err(|e| e.context(format!("phase {phase}"))))
}

/// Wait until `file` exists (polling every [`PAUSE_POLL`]).
async fn wait_for_file(file: &Path, give_up: Duration) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if file.exists() {
            return Ok(());
        }
        if t0.elapsed() >= give_up {
            bail!(
                "pause file {} did not appear within {} s",
                file.display(),
                give_up.as_secs()
            );
        }
        tokio::time::sleep(PAUSE_POLL).await;
    }
}

pub(crate) async fn mix(ctx: Arc<Ctx>, a: MixArgs) -> ScenarioResult {
    let d = &ctx.driver;
    let mut phases = vec![];
    let mut paused_ms = None;
    let mut res: Result<()> = Ok(());
    for (n, phase) in MIX_PHASES.into_iter().enumerate() {
        if n > 0 {
            if let Some(f) = &a.pause_file {
                print_json(&json!({"phase": "paused"}));
                if let Err(e) = std::io::Write::flush(&mut std::io::stdout()) {
                    res = Err(anyhow!("flushing stdout: {e}"));
                    break;
                }
                d.note(format!("mix: paused until {} exists", f.display()));
                let t = Instant::now();
                let waited = wait_for_file(f, PAUSE_GIVE_UP).await;
                paused_ms = Some(ms(t.elapsed()));
                if let Err(e) = waited {
                    res = Err(e);
                    break;
                }
                d.note(format!(
                    "mix: {} appeared after {:.0} ms",
                    f.display(),
                    t.elapsed().as_secs_f64() * 1e3
                ));
            }
        }
        let (v, r) = Box::pin(mix_phase(&ctx, &a, phase)).await;
        phases.push(v);
        if let Err(e) = r {
            res = Err(e);
            break;
        }
    }
    let connections = d.connections();
    let v = json!({
        "pods_per_phase": a.pods,
        "prefix": a.prefix,
        "host_network": !a.pod.netns,
        "paused_ms": paused_ms,
        "connections": connections,
        "phases": phases,
    });
    if let Err(e) = res {
        return fail(v, e);
    }
    if connections != 1 {
        // The point of mix is one connection throughout.
        return fail(
            v,
            anyhow!("the channel opened {connections} connections (tonic reconnected)"),
        );
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_names_and_counts() {
        assert_eq!(mix_pod_name("mix", "warm", 0), "mix-warm-0");
        assert_eq!(mix_pod_name("la", "main", 12), "la-main-12");
        assert_eq!(mix_calls_per_phase(0), 7);
        assert_eq!(mix_calls_per_phase(2), 35);
    }

    #[tokio::test]
    async fn pause_file_wait() {
        let f = std::env::temp_dir().join(format!("cri-driver-pause-{}", std::process::id()));
        let _ = std::fs::remove_file(&f);
        assert!(wait_for_file(&f, Duration::from_millis(50)).await.is_err());
        std::fs::write(&f, b"").unwrap();
        wait_for_file(&f, Duration::from_millis(50)).await.unwrap();
        let _ = std::fs::remove_file(&f);
    }
}
