//! The `ignore-sigterm` scenario: a container whose PID 1 ignores SIGTERM,
//! so that StopContainer takes the grace period.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Result};
use nri_trace_lab::cri::{api, ContainerSpec};
use serde_json::json;

use crate::{
    fail, ms,
    pods::{cleanup, remove_pod, start_pod},
    Ctx, IgnoreSigtermArgs, ScenarioResult,
};

// ------------------------------------------------------------------ ignore-sigterm

pub(crate) async fn ignore_sigterm(ctx: Arc<Ctx>, a: IgnoreSigtermArgs) -> ScenarioResult {
    let spec = ctx.pod_spec(a.name.clone(), &a.pod);
    let c = ContainerSpec::ignoring_sigterm("stubborn");
    let mut started = None;
    let mut v = json!({"name": spec.name, "grace_secs": a.grace_secs});
    let mut torn_down = false;
    let res: Result<()> = Box::pin(async {
        start_pod(&ctx, &spec, std::slice::from_ref(&c), true, &mut started).await?;
        let s = started.as_ref().ok_or_else(|| anyhow!("no sandbox"))?;
        let cref = &s.containers[0];
        v["sandbox_id"] = json!(s.pod.sandbox_id);
        v["container_id"] = json!(cref.id);
        tokio::time::sleep(Duration::from_secs_f64(a.run_secs.max(0.0))).await;
        let t = Instant::now();
        ctx.driver.stop_container(Some(&s.pod), cref, a.grace_secs).await?;
        let took = t.elapsed();
        v["stop_ms"] = json!(ms(took));
        let st = ctx.driver.container_status(Some(&s.pod), cref).await?;
        v["exit_code"] = json!(st.exit_code);
        v["reason"] = json!(st.reason);
        v["state"] = json!(api::ContainerState::try_from(st.state).map_or("?", |x| x.as_str_name()));
        ctx.driver.note(format!(
            "StopContainer of {} (ignores SIGTERM) with grace {} s took {:.0} ms; exit code {}",
            cref.name,
            a.grace_secs,
            took.as_secs_f64() * 1e3,
            st.exit_code
        ));
        ctx.driver.stop_pod_sandbox(&s.pod).await?;
        remove_pod(&ctx, s).await?;
        torn_down = true;
        if took + Duration::from_millis(100) < Duration::from_secs(a.grace_secs.max(0) as u64) {
            bail!(
                "StopContainer took {:.0} ms, less than the {} s grace period: did the container not ignore SIGTERM?",
                took.as_secs_f64() * 1e3,
                a.grace_secs
            );
        }
        Ok(())
    })
    .await;
    match res {
        Ok(()) => Ok(v),
        Err(e) => {
            if let (Some(s), false) = (&started, torn_down) {
                cleanup(&ctx, s).await;
            }
            fail(v, e)
        }
    }
}
