//! The pods the scenarios start and tear down as kubelet does: RunPodSandbox,
//! then each container created, started and seen running ([`start_pod`]);
//! StopContainer of each, StopPodSandbox ([`stop_pod`]); RemoveContainer
//! of each, RemovePodSandbox ([`remove_pod`]); after an error, the sandbox
//! stopped and removed ([`cleanup`]).

use std::time::Duration;

use anyhow::{anyhow, Result};
use nri_trace_lab::{
    cri::{ContainerSpec, PodSpec},
    truth::{ContainerRef, PodRef},
};

use crate::Ctx;

// ------------------------------------------------------------------ pods

/// How long a container may take to reach RUNNING after StartContainer.
const RUNNING_WITHIN: Duration = Duration::from_secs(30);

/// A pod the driver started, for teardown.
pub(crate) struct Started {
    pub(crate) pod: PodRef,
    pub(crate) containers: Vec<ContainerRef>,
}

/// RunPodSandbox, then CreateContainer + StartContainer per container (as
/// kubelet's SyncPod), then ContainerStatus until each runs. On an error
/// after the sandbox exists, `started` still has what to tear down.
pub(crate) async fn start_pod(
    ctx: &Ctx,
    spec: &PodSpec,
    containers: &[ContainerSpec],
    wait_running: bool,
    started: &mut Option<Started>,
) -> Result<()> {
    let sid = ctx.driver.run_pod_sandbox(spec, &ctx.policy).await?;
    let pod = spec.pod_ref(Some(&sid));
    *started = Some(Started {
        pod: pod.clone(),
        containers: vec![],
    });
    for c in containers {
        let cref = ctx
            .driver
            .create_container(spec, &sid, c, &ctx.policy)
            .await?;
        if let Some(s) = started.as_mut() {
            s.containers.push(cref.clone());
        }
        ctx.driver.start_container(Some(&pod), &cref).await?;
    }
    if wait_running {
        let crefs = started
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default();
        for c in &crefs {
            ctx.driver
                .wait_container_running(Some(&pod), c, RUNNING_WITHIN)
                .await?;
        }
    }
    Ok(())
}

/// StopContainer for every container (in parallel, as kubelet's
/// killContainersWithSyncResult), then StopPodSandbox.
pub(crate) async fn stop_pod(ctx: &Ctx, s: &Started, grace_secs: i64) -> Result<()> {
    let mut set = tokio::task::JoinSet::new();
    for c in s.containers.clone() {
        let d = ctx.driver.clone();
        let pod = s.pod.clone();
        set.spawn(async move { d.stop_container(Some(&pod), &c, grace_secs).await });
    }
    let mut first_err = None;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => first_err = first_err.or(Some(anyhow::Error::from(e))),
            Err(e) => first_err = first_err.or(Some(anyhow!("stop task failed: {e}"))),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    ctx.driver.stop_pod_sandbox(&s.pod).await?;
    Ok(())
}

/// RemoveContainer for every container, then RemovePodSandbox.
pub(crate) async fn remove_pod(ctx: &Ctx, s: &Started) -> Result<()> {
    for c in &s.containers {
        ctx.driver.remove_container(Some(&s.pod), c).await?;
    }
    ctx.driver.remove_pod_sandbox(&s.pod).await?;
    Ok(())
}

/// After an error: stop and remove the sandbox (the runtime removes its
/// containers with it), ignoring further errors.
pub(crate) async fn cleanup(ctx: &Ctx, s: &Started) {
    ctx.driver
        .note(format!("cleanup of pod {} after an error", s.pod.name));
    if let Err(e) = ctx.driver.stop_pod_sandbox(&s.pod).await {
        log::warn!("cleanup: {e}");
    }
    if let Err(e) = ctx.driver.remove_pod_sandbox(&s.pod).await {
        log::warn!("cleanup: {e}");
    }
}
