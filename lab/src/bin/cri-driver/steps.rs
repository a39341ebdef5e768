//! The single steps: `up` (a pod's volumes mounted, its sandbox and one
//! container started), `stop`, `remove` and `down` of a sandbox (with the
//! pod's volumes unmounted as kubelet does), and `list`.

use std::{path::PathBuf, sync::Arc};

use anyhow::{anyhow, Result};
use nri_trace_lab::{
    cri::{api, MountSpec},
    truth::PodRef,
    volume,
};
use serde_json::{json, Value};

use crate::{
    container_spec, fail,
    pods::{cleanup, remove_pod, start_pod, stop_pod, Started},
    Ctx, SandboxArgs, ScenarioResult, UpArgs,
};

// ------------------------------------------------------------------ steps

pub(crate) async fn up(ctx: Arc<Ctx>, a: UpArgs) -> ScenarioResult {
    let mut spec = ctx.pod_spec(a.name.clone(), &a.pod);
    if let Some(uid) = &a.uid {
        spec.uid = uid.clone();
        spec = spec.with_log_root(ctx.log_dir.as_deref());
    }
    let mut c = container_spec(a.container_name.clone(), &a.container);
    // kubelet mounts the pod's volumes before it makes the sandbox.
    let pref = spec.pod_ref(None);
    let mut volumes = vec![];
    for name in &a.volumes {
        let path = volume::empty_dir(&ctx.kubelet_dir, &spec.uid, name);
        if let Err(e) = ctx.driver.volume_step("mount", &path, Some(&pref), 0, || {
            volume::mount_tmpfs(&path)
        }) {
            if let Err((p, e)) = unmount_volumes(&ctx, &pref, 0) {
                log::warn!("unmounting volume {}: {e}", p.display());
            }
            return fail(
                json!({"volume": path}),
                anyhow!("mounting volume {name} at {}: {e}", path.display()),
            );
        }
        c.mounts.push(MountSpec {
            host_path: path.to_string_lossy().into_owned(),
            container_path: volume::container_path(name),
        });
        volumes.push(path);
    }
    let mut started = None;
    let res = start_pod(
        &ctx,
        &spec,
        std::slice::from_ref(&c),
        !a.no_wait,
        &mut started,
    )
    .await;
    let v = json!({
        "pod": {"name": spec.name, "namespace": spec.namespace, "uid": spec.uid, "attempt": spec.attempt},
        "sandbox_id": started.as_ref().and_then(|s| s.pod.sandbox_id.clone()),
        "container_id": started.as_ref().and_then(|s| s.containers.first().and_then(|c| c.id.clone())),
        "volumes": volumes,
    });
    match res {
        Ok(()) => Ok(v),
        Err(e) => {
            if let Some(s) = &started {
                cleanup(&ctx, s).await;
            }
            if let Err((p, e)) = unmount_volumes(&ctx, &pref, 0) {
                log::warn!("unmounting volume {}: {e}", p.display());
            }
            fail(v, e)
        }
    }
}

/// kubelet's volume teardown for a pod whose containers are stopped:
/// umount2 each mounted volume directory of the pod, then remove the pod's
/// directory. Each step is a `Truth::Volume` record (`retry`: the try
/// number). Returns the first failure: (path, error).
pub(crate) fn unmount_volumes(
    ctx: &Ctx,
    pod: &PodRef,
    retry: u32,
) -> std::result::Result<(), (PathBuf, std::io::Error)> {
    let dir = volume::pod_dir(&ctx.kubelet_dir, &pod.uid);
    if !dir.exists() {
        return Ok(());
    }
    for v in volume::pod_volumes(&ctx.kubelet_dir, &pod.uid) {
        if !volume::is_mounted(&v) {
            continue;
        }
        ctx.driver
            .volume_step("unmount", &v, Some(pod), retry, || volume::unmount(&v))
            .map_err(|e| (v.clone(), e))?;
    }
    ctx.driver
        .volume_step("remove", &dir, Some(pod), retry, || {
            volume::remove_pod_dir(&ctx.kubelet_dir, &pod.uid)
        })
        .map_err(|e| (dir.clone(), e))
}

pub(crate) async fn sandbox_steps(
    ctx: Arc<Ctx>,
    a: SandboxArgs,
    stop: bool,
    remove: bool,
) -> ScenarioResult {
    let res: Result<Value> = async {
        let pod = ctx.driver.pod_of(&a.sandbox_id).await?;
        let containers = ctx.driver.containers_of(&pod).await?;
        let s = Started { pod, containers };
        if stop {
            stop_pod(&ctx, &s, a.grace_secs).await?;
            // kubelet unmounts the pod's volumes once no container runs.
            unmount_volumes(&ctx, &s.pod, 0).map_err(|(p, e)| {
                anyhow!("unmounting volume {}: {e}", p.display())
            })?;
        }
        if remove {
            remove_pod(&ctx, &s).await?;
        }
        Ok(json!({
            "pod": {"name": s.pod.name, "namespace": s.pod.namespace, "uid": s.pod.uid, "attempt": s.pod.attempt},
            "sandbox_id": s.pod.sandbox_id,
            "containers": s.containers.iter().filter_map(|c| c.id.clone()).collect::<Vec<_>>(),
        }))
    }
    .await;
    res.map_err(|e| (json!({"sandbox_id": a.sandbox_id}), e))
}

pub(crate) async fn list(ctx: Arc<Ctx>) -> ScenarioResult {
    match ctx.driver.list_pod_sandbox(None).await {
        Ok(items) => Ok(json!({"sandboxes": items.iter().map(|s| {
            let m = s.metadata.clone().unwrap_or_default();
            json!({"id": s.id, "name": m.name, "namespace": m.namespace, "uid": m.uid, "attempt": m.attempt,
                   "state": api::PodSandboxState::try_from(s.state).map_or("?", |x| x.as_str_name())})
        }).collect::<Vec<_>>()})),
        Err(e) => fail(json!({}), e),
    }
}
