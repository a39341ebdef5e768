//! The `lifecycle` scenario: N pods of M containers each, started, run,
//! stopped and removed as kubelet does, a few at a time.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::anyhow;
use nri_trace_lab::cri::{ContainerSpec, PodSpec};
use serde_json::{json, Value};

use crate::{
    container_spec, fail, ms,
    pods::{cleanup, remove_pod, start_pod, stop_pod},
    Ctx, LifecycleArgs, ScenarioResult,
};

// ------------------------------------------------------------------ lifecycle

async fn one_lifecycle(
    ctx: Arc<Ctx>,
    spec: PodSpec,
    containers: Vec<ContainerSpec>,
    run: Duration,
    grace: i64,
) -> Value {
    let t0 = Instant::now();
    let mut started = None;
    let mut stop_ms = None;
    let res = async {
        start_pod(&ctx, &spec, &containers, true, &mut started).await?;
        let s = started.as_ref().ok_or_else(|| anyhow!("no sandbox"))?;
        tokio::time::sleep(run).await;
        let t = Instant::now();
        stop_pod(&ctx, s, grace).await?;
        stop_ms = Some(ms(t.elapsed()));
        remove_pod(&ctx, s).await
    }
    .await;
    if res.is_err() {
        if let Some(s) = &started {
            cleanup(&ctx, s).await;
        }
    }
    json!({
        "name": spec.name,
        "uid": spec.uid,
        "sandbox_id": started.as_ref().and_then(|s| s.pod.sandbox_id.clone()),
        "containers": started.as_ref().map(|s| s.containers.iter().filter_map(|c| c.id.clone()).collect::<Vec<_>>()),
        "ok": res.is_ok(),
        "ms": ms(t0.elapsed()),
        "stop_ms": stop_ms,
        "error": res.err().map(|e| format!("{e:#}")),
    })
}

pub(crate) async fn lifecycle(ctx: Arc<Ctx>, a: LifecycleArgs) -> ScenarioResult {
    if a.pods == 0 {
        return fail(json!({}), anyhow!("--pods must be at least 1"));
    }
    let sem = Arc::new(tokio::sync::Semaphore::new(a.concurrency.max(1)));
    let run = Duration::from_secs_f64(a.run_secs.max(0.0));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..a.pods {
        let spec = ctx.pod_spec(format!("{}-{i}", a.prefix), &a.pod);
        let containers: Vec<ContainerSpec> = (0..a.containers)
            .map(|j| container_spec(format!("c{j}"), &a.container))
            .collect();
        let ctx = Arc::clone(&ctx);
        let sem = Arc::clone(&sem);
        let grace = a.grace_secs;
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            (
                i,
                Box::pin(one_lifecycle(ctx, spec, containers, run, grace)).await,
            )
        });
    }
    let mut pods = BTreeMap::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok((i, v)) => {
                pods.insert(i, v);
            }
            Err(e) => return fail(json!({}), anyhow!("pod task failed: {e}")),
        }
    }
    let pods: Vec<Value> = pods.into_values().collect();
    let failed: Vec<String> = pods
        .iter()
        .filter(|p| p["ok"] != json!(true))
        .map(|p| {
            format!(
                "{}: {}",
                p["name"].as_str().unwrap_or("?"),
                p["error"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let v = json!({ "pods": pods, "host_network": !a.pod.netns });
    if failed.is_empty() {
        Ok(v)
    } else {
        fail(
            v,
            anyhow!(
                "{} of {} pods failed: {}",
                failed.len(),
                a.pods,
                failed.join("; ")
            ),
        )
    }
}
