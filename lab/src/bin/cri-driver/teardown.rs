//! The `teardown` scenario: a pod torn down as kubelet's pod worker does,
//! step by step (StopContainer of each container, StopPodSandbox, the
//! volumes unmounted, RemovePodSandbox), a failed step tried again until
//! it passes.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context, Result};
use nri_trace_lab::{
    cri::{self, api},
    truth::{ContainerRef, PodRef},
};
use serde_json::json;

use crate::{fail, ms, print_json, steps::unmount_volumes, Ctx, ScenarioResult, TeardownArgs};

// ------------------------------------------------------------------ teardown

/// The steps of a kubelet-like teardown, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TeardownStep {
    StopContainers,
    StopPodSandbox,
    UnmountVolumes,
    RemovePodSandbox,
}

impl TeardownStep {
    fn name(self) -> &'static str {
        match self {
            TeardownStep::StopContainers => "StopContainer",
            TeardownStep::StopPodSandbox => "StopPodSandbox",
            TeardownStep::UnmountVolumes => "unmount",
            TeardownStep::RemovePodSandbox => "RemovePodSandbox",
        }
    }

    fn next(self) -> Option<Self> {
        match self {
            TeardownStep::StopContainers => Some(TeardownStep::StopPodSandbox),
            TeardownStep::StopPodSandbox => Some(TeardownStep::UnmountVolumes),
            TeardownStep::UnmountVolumes => Some(TeardownStep::RemovePodSandbox),
            TeardownStep::RemovePodSandbox => None,
        }
    }
}

/// The pod to tear down: by sandbox id, or the newest sandbox of a name.
async fn teardown_target(ctx: &Ctx, a: &TeardownArgs) -> Result<PodRef> {
    if let Some(id) = &a.sandbox_id {
        return Ok(ctx.driver.pod_of(id).await?);
    }
    let name = a.name.clone().context("--name or --sandbox-id")?;
    let filter = api::PodSandboxFilter {
        label_selector: [
            (cri::LABEL_POD_NAME.to_owned(), name.clone()),
            (cri::LABEL_POD_NAMESPACE.to_owned(), a.namespace.clone()),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let items = ctx.driver.list_pod_sandbox(Some(filter)).await?;
    let s = items
        .into_iter()
        .max_by_key(|s| s.created_at)
        .with_context(|| format!("no pod sandbox named {}/{name}", a.namespace))?;
    let m = s.metadata.unwrap_or_default();
    Ok(PodRef {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        attempt: m.attempt,
        sandbox_id: Some(s.id),
    })
}

/// One try of `step`; Err(what failed) on failure.
async fn teardown_try(
    ctx: &Ctx,
    step: TeardownStep,
    pod: &PodRef,
    to_stop: &mut Vec<ContainerRef>,
    grace_secs: i64,
    retry: u32,
) -> std::result::Result<(), String> {
    match step {
        TeardownStep::StopContainers => {
            // In parallel, as kubelet's killContainersWithSyncResult; a
            // container stopped once is not stopped again.
            let mut set = tokio::task::JoinSet::new();
            for c in to_stop.clone() {
                let d = ctx.driver.clone();
                let pod = pod.clone();
                set.spawn(async move {
                    let r = d
                        .stop_container_try(Some(&pod), &c, grace_secs, retry)
                        .await;
                    (c, r)
                });
            }
            let mut failed = vec![];
            while let Some(r) = set.join_next().await {
                match r {
                    Ok((c, Ok(()))) => to_stop.retain(|x| x.id != c.id),
                    Ok((_, Err(e))) => failed.push(e.to_string()),
                    Err(e) => failed.push(format!("stop task failed: {e}")),
                }
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(failed.join("; "))
            }
        }
        TeardownStep::StopPodSandbox => ctx
            .driver
            .stop_pod_sandbox_try(pod, retry)
            .await
            .map_err(|e| e.to_string()),
        TeardownStep::UnmountVolumes => unmount_volumes(ctx, pod, retry)
            .map_err(|(p, e)| format!("unmounting volume {}: {e}", p.display())),
        TeardownStep::RemovePodSandbox => ctx
            .driver
            .remove_pod_sandbox_try(pod, retry)
            .await
            .map_err(|e| e.to_string()),
    }
}

/// kubelet's pod worker on a terminating pod: each step in turn; a failed
/// step is tried again after `retry_ms` (its `retry` number counting up),
/// and the teardown goes on from there. Prints
/// `{"teardown":"started",...}` once the pod is found, so that a caller
/// knows the driver's pid and pod.
pub(crate) async fn teardown(ctx: Arc<Ctx>, a: TeardownArgs) -> ScenarioResult {
    let t0 = Instant::now();
    let pod = match teardown_target(&ctx, &a).await {
        Ok(p) => p,
        Err(e) => return fail(json!({}), e),
    };
    let mut to_stop = match ctx.driver.containers_of(&pod).await {
        Ok(c) => c,
        Err(e) => return fail(json!({}), e),
    };
    let pod_json = json!({"name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
                          "attempt": pod.attempt, "sandbox_id": pod.sandbox_id});
    let containers: Vec<String> = to_stop.iter().filter_map(|c| c.id.clone()).collect();
    ctx.driver.note(format!(
        "teardown of pod {}/{} uid {} sandbox {} by cri-driver pid {}: retry every {} ms",
        pod.namespace,
        pod.name,
        pod.uid,
        pod.sandbox_id.as_deref().unwrap_or("?"),
        std::process::id(),
        a.retry_ms
    ));
    print_json(
        &json!({"teardown": "started", "pid": std::process::id(), "pod": pod_json,
                       "containers": containers}),
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let give_up = (a.for_ms > 0).then(|| Duration::from_millis(a.for_ms));
    let mut step = TeardownStep::StopContainers;
    let mut retry = 0u32;
    let mut failures = vec![];
    loop {
        match teardown_try(&ctx, step, &pod, &mut to_stop, a.grace_secs, retry).await {
            Ok(()) => match step.next() {
                Some(n) => {
                    step = n;
                    retry = 0;
                }
                None => break,
            },
            Err(e) => {
                log::info!(
                    "teardown of {}: {} failed (try {retry}): {e}",
                    pod.name,
                    step.name()
                );
                failures.push(json!({"step": step.name(), "retry": retry, "error": e,
                                     "at_ms": ms(t0.elapsed())}));
                let v = json!({"pod": pod_json, "failed_tries": failures, "stuck_at": step.name()});
                if give_up.is_some_and(|g| t0.elapsed() + Duration::from_millis(a.retry_ms) > g) {
                    return fail(
                        v,
                        anyhow!(
                            "pod {}/{} not torn down after {:.1} s: {} still fails: {e}",
                            pod.namespace,
                            pod.name,
                            t0.elapsed().as_secs_f64(),
                            step.name()
                        ),
                    );
                }
                tokio::time::sleep(Duration::from_millis(a.retry_ms)).await;
                retry += 1;
            }
        }
    }
    ctx.driver.note(format!(
        "teardown of pod {}/{} done after {} failed tries",
        pod.namespace,
        pod.name,
        failures.len()
    ));
    Ok(
        json!({"pod": pod_json, "containers": containers, "failed_tries": failures,
              "teardown_ms": ms(t0.elapsed())}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teardown_steps_in_order() {
        assert_eq!(
            TeardownStep::StopContainers.next(),
            Some(TeardownStep::StopPodSandbox)
        );
        assert_eq!(
            TeardownStep::StopPodSandbox.next(),
            Some(TeardownStep::UnmountVolumes)
        );
        assert_eq!(TeardownStep::RemovePodSandbox.next(), None);
    }
}
