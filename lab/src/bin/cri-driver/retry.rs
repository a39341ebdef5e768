//! The `retry` scenario: RunPodSandbox (or CreateContainer) with a short
//! deadline, retried with the same name and attempt until it succeeds;
//! its tries, the runtime's answers and what it holds for the pod after,
//! then every sandbox of the pod torn down.

use std::{sync::Arc, time::Duration};

use anyhow::Result;
use nri_trace_lab::{
    cri::{self, api},
    truth::Outcome,
};
use serde_json::{json, Value};

use crate::{
    container_spec, fail,
    pods::{cleanup, remove_pod, stop_pod, Started},
    Ctx, RetryArgs, ScenarioResult, Stage,
};

// ------------------------------------------------------------------ retry

/// The tries of `method` for `pod` recorded so far.
fn tries(ctx: &Ctx, method: &str, pod: &str) -> Vec<Value> {
    ctx.driver
        .records()
        .into_iter()
        .filter(|r| r.method == method && r.pod.as_deref() == Some(pod))
        .map(|r| {
            json!({"attempt": r.attempt, "retry": r.retry, "deadline_ms": r.deadline_ms,
                   "ms": r.ms, "outcome": r.outcome})
        })
        .collect()
}

pub(crate) async fn retry(ctx: Arc<Ctx>, a: RetryArgs) -> ScenarioResult {
    let mut policy = ctx.policy.clone();
    policy.retry_deadline = a.retry_deadline_ms.map(Duration::from_millis);
    let short = Duration::from_millis(a.deadline_ms);
    let spec = ctx.pod_spec(a.name.clone(), &a.pod);
    let c = container_spec("main".into(), &a.container);
    let method = match a.stage {
        Stage::Sandbox => "RunPodSandbox",
        Stage::Container => "CreateContainer",
    };
    ctx.driver.note(format!(
        "retry scenario: {method} of pod {}/{} with a {} ms deadline",
        spec.namespace, spec.name, a.deadline_ms
    ));
    let mut started: Option<Started> = None;
    let res: Result<()> = async {
        let sid = match a.stage {
            Stage::Sandbox => {
                ctx.driver
                    .run_pod_sandbox_with_deadline(&spec, short, &policy)
                    .await?
            }
            Stage::Container => ctx.driver.run_pod_sandbox(&spec, &ctx.policy).await?,
        };
        let pod = spec.pod_ref(Some(&sid));
        started = Some(Started {
            pod: pod.clone(),
            containers: vec![],
        });
        if a.stage == Stage::Container {
            let cref = ctx
                .driver
                .create_container_with_deadline(&spec, &sid, &c, short, &policy)
                .await?;
            if let Some(s) = started.as_mut() {
                s.containers.push(cref);
            }
        }
        Ok(())
    }
    .await;
    let mut tries_v = tries(&ctx, method, &spec.name);
    let n_tries = tries_v.len();
    if n_tries > 100 {
        // Keep the output short: the truth file has every try.
        tries_v.drain(50..n_tries - 50);
    }
    // What the runtime holds for this pod now: an earlier try may have left
    // a sandbox (or container) behind.
    let mut leftovers = json!(null);
    let pref = spec.pod_ref(None);
    let filter = api::PodSandboxFilter {
        label_selector: [(cri::LABEL_POD_UID.to_owned(), spec.uid.clone())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let mut sandboxes = vec![];
    match ctx
        .driver
        .list_pod_sandbox_for(Some(&pref), Some(filter))
        .await
    {
        Ok(items) => {
            leftovers = json!(items
                .iter()
                .map(|s| json!({"id": s.id, "state": api::PodSandboxState::try_from(s.state).map_or("?", |x| x.as_str_name()), "attempt": s.metadata.as_ref().map(|m| m.attempt)}))
                .collect::<Vec<_>>());
            sandboxes = items.into_iter().map(|s| s.id).collect();
        }
        Err(e) => log::warn!("{e}"),
    }
    let mut containers_after = json!(null);
    if let Some(s) = &started {
        let filter = api::ContainerFilter {
            pod_sandbox_id: s.pod.sandbox_id.clone().unwrap_or_default(),
            ..Default::default()
        };
        match ctx.driver.list_containers(Some(&s.pod), Some(filter)).await {
            Ok(items) => {
                containers_after = json!(items
                    .iter()
                    .map(|c| json!({"id": c.id,
                        "name": c.metadata.as_ref().map(|m| m.name.clone()),
                        "attempt": c.metadata.as_ref().map(|m| m.attempt),
                        "state": api::ContainerState::try_from(c.state).map_or("?", |x| x.as_str_name())}))
                    .collect::<Vec<_>>())
            }
            Err(e) => log::warn!("{e}"),
        }
    }
    // Tear down every sandbox of this pod uid, ours first.
    let mut teardown_err = None;
    if let Some(s) = &started {
        let r = async {
            stop_pod(&ctx, s, a.grace_secs).await?;
            remove_pod(&ctx, s).await
        }
        .await;
        if let Err(e) = r {
            teardown_err = Some(e);
        }
    }
    for id in sandboxes {
        if started.as_ref().and_then(|s| s.pod.sandbox_id.as_deref()) == Some(id.as_str()) {
            continue;
        }
        log::warn!(
            "removing sandbox {} left by an earlier try",
            cri::short(&id)
        );
        let s = Started {
            pod: spec.pod_ref(Some(&id)),
            containers: vec![],
        };
        cleanup(&ctx, &s).await;
    }
    let answers: Vec<String> = ctx
        .driver
        .records()
        .into_iter()
        .filter(|r| r.method == method && r.pod.as_deref() == Some(spec.name.as_str()))
        .filter_map(|r| match r.outcome {
            Outcome::Error { message, .. } => Some(message),
            _ => None,
        })
        .fold(vec![], |mut v, m| {
            if !v.contains(&m) {
                v.push(m);
            }
            v
        });
    let v = json!({
        "method": method,
        "pod": {"name": spec.name, "namespace": spec.namespace, "uid": spec.uid, "attempt": spec.attempt},
        "sandbox_id": started.as_ref().and_then(|s| s.pod.sandbox_id.clone()),
        "tries_total": n_tries,
        "tries": tries_v,
        "runtime_answers": answers,
        "sandboxes_of_pod_after": leftovers,
        "containers_of_sandbox_after": containers_after,
    });
    if let Err(e) = res {
        return fail(v, e);
    }
    if let Some(e) = teardown_err {
        return fail(v, e.context("teardown"));
    }
    Ok(v)
}
