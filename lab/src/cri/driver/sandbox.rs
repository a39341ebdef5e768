//! The driver's calls on a pod's sandbox: RunPodSandbox (a timed-out try
//! retried with the same request; a sandbox made by such a try adopted),
//! PodSandboxStatus, StopPodSandbox, RemovePodSandbox, ListPodSandbox,
//! and the pod of a sandbox id.

use std::time::Duration;

use k8s_cri::v1 as cri;

use super::{target, Driver};
use crate::{
    cri::{
        reserved_for, short, DriverError, PodSpec, Result, RetryLoop, RetryPolicy, LABEL_POD_UID,
    },
    truth::{Outcome, PodRef},
};

impl Driver {
    /// RunPodSandbox with kubelet's deadline (2x the request timeout).
    pub async fn run_pod_sandbox(&self, pod: &PodSpec, policy: &RetryPolicy) -> Result<String> {
        self.run_pod_sandbox_with_deadline(pod, self.run_pod_sandbox_timeout(), policy)
            .await
    }

    /// RunPodSandbox; a timed-out try is retried with the same request.
    pub async fn run_pod_sandbox_with_deadline(
        &self,
        pod: &PodSpec,
        deadline: Duration,
        policy: &RetryPolicy,
    ) -> Result<String> {
        pod.validate().map_err(DriverError::Invalid)?;
        let req = cri::RunPodSandboxRequest {
            config: Some(pod.to_config()),
            runtime_handler: String::new(),
        };
        let pref = pod.pod_ref(None);
        let mut lp = RetryLoop::new(policy, deadline);
        loop {
            let d = lp.deadline();
            let res = self
                .call(
                    "RunPodSandbox",
                    Some(pref.clone()),
                    None,
                    d,
                    lp.retry,
                    req.clone(),
                    |mut c, r| async move { c.run_pod_sandbox(r).await },
                    |resp: &cri::RunPodSandboxResponse, p, _| {
                        if let Some(p) = p {
                            p.sandbox_id = Some(resp.pod_sandbox_id.clone());
                        }
                    },
                )
                .await;
            let outcome = match res {
                Ok(resp) => return Ok(resp.pod_sandbox_id),
                Err(o) => o,
            };
            // An earlier try may have created the sandbox after all.
            if lp.timed_out()
                && matches!(&outcome, Outcome::Error { message, .. } if reserved_for(message).is_some())
            {
                if let Some(id) = self.find_ready_sandbox(pod).await {
                    self.note(format!(
                        "adopted sandbox {id} of pod {}/{} attempt {}: created by an earlier RunPodSandbox try that timed out on the client",
                        pod.namespace, pod.name, pod.attempt
                    ));
                    log::warn!(
                        "pod {}: adopted sandbox {} created by a timed-out try",
                        pod.name,
                        short(&id)
                    );
                    return Ok(id);
                }
            }
            match lp.failed(&outcome) {
                Some(wait) => {
                    log::info!(
                        "RunPodSandbox pod {}: retry {} in {} ms",
                        pod.name,
                        lp.retry,
                        wait.as_millis()
                    );
                    tokio::time::sleep(wait).await;
                }
                None if lp.failures.len() > 1 => {
                    return Err(DriverError::GaveUp {
                        method: "RunPodSandbox",
                        target: target(Some(&pref), None),
                        tries: lp.failures,
                        budget: policy.budget,
                    })
                }
                None => return Err(Self::fail("RunPodSandbox", Some(&pref), None, d, outcome)),
            }
        }
    }

    /// A READY sandbox of this pod uid with the same name and attempt.
    async fn find_ready_sandbox(&self, pod: &PodSpec) -> Option<String> {
        let filter = cri::PodSandboxFilter {
            label_selector: [(LABEL_POD_UID.to_owned(), pod.uid.clone())]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let items = self
            .list_pod_sandbox_for(Some(&pod.pod_ref(None)), Some(filter))
            .await
            .ok()?;
        items
            .into_iter()
            .find(|s| {
                s.state == cri::PodSandboxState::SandboxReady as i32
                    && s.metadata.as_ref().is_some_and(|m| {
                        m.name == pod.name
                            && m.namespace == pod.namespace
                            && m.attempt == pod.attempt
                    })
            })
            .map(|s| s.id)
    }

    pub async fn pod_sandbox_status(&self, pod: &PodRef) -> Result<cri::PodSandboxStatus> {
        let d = self.timeout;
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: Self::sandbox_id(pod)?,
            verbose: false,
        };
        let resp = self
            .call(
                "PodSandboxStatus",
                Some(pod.clone()),
                None,
                d,
                0,
                req,
                |mut c, r| async move { c.pod_sandbox_status(r).await },
                |_, _, _| {},
            )
            .await
            .map_err(|o| Self::fail("PodSandboxStatus", Some(pod), None, d, o))?;
        resp.status.ok_or_else(|| {
            DriverError::Unexpected(format!(
                "PodSandboxStatus {}: no status in the answer",
                target(Some(pod), None)
            ))
        })
    }

    pub async fn stop_pod_sandbox(&self, pod: &PodRef) -> Result<()> {
        self.stop_pod_sandbox_try(pod, 0).await
    }

    /// [`Driver::stop_pod_sandbox`] as retry number `retry` of the same request.
    pub async fn stop_pod_sandbox_try(&self, pod: &PodRef, retry: u32) -> Result<()> {
        let d = self.timeout;
        let req = cri::StopPodSandboxRequest {
            pod_sandbox_id: Self::sandbox_id(pod)?,
        };
        self.call(
            "StopPodSandbox",
            Some(pod.clone()),
            None,
            d,
            retry,
            req,
            |mut c, r| async move { c.stop_pod_sandbox(r).await },
            |_, _, _| {},
        )
        .await
        .map(|_| ())
        .map_err(|o| Self::fail("StopPodSandbox", Some(pod), None, d, o))
    }

    pub async fn remove_pod_sandbox(&self, pod: &PodRef) -> Result<()> {
        self.remove_pod_sandbox_try(pod, 0).await
    }

    /// [`Driver::remove_pod_sandbox`] as retry number `retry` of the same request.
    pub async fn remove_pod_sandbox_try(&self, pod: &PodRef, retry: u32) -> Result<()> {
        let d = self.timeout;
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: Self::sandbox_id(pod)?,
        };
        self.call(
            "RemovePodSandbox",
            Some(pod.clone()),
            None,
            d,
            retry,
            req,
            |mut c, r| async move { c.remove_pod_sandbox(r).await },
            |_, _, _| {},
        )
        .await
        .map(|_| ())
        .map_err(|o| Self::fail("RemovePodSandbox", Some(pod), None, d, o))
    }

    pub async fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>> {
        self.list_pod_sandbox_for(None, filter).await
    }

    /// ListPodSandbox, recorded as done on behalf of `pod`.
    pub async fn list_pod_sandbox_for(
        &self,
        pod: Option<&PodRef>,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>> {
        let d = self.timeout;
        self.call(
            "ListPodSandbox",
            pod.cloned(),
            None,
            d,
            0,
            cri::ListPodSandboxRequest { filter },
            |mut c, r| async move { c.list_pod_sandbox(r).await },
            |_, _, _| {},
        )
        .await
        .map(|r| r.items)
        .map_err(|o| Self::fail("ListPodSandbox", pod, None, d, o))
    }

    /// The pod of a sandbox id (ListPodSandbox filtered by id).
    pub async fn pod_of(&self, sandbox_id: &str) -> Result<PodRef> {
        let filter = cri::PodSandboxFilter {
            id: sandbox_id.to_owned(),
            ..Default::default()
        };
        let items = self.list_pod_sandbox(Some(filter)).await?;
        let s = items.into_iter().next().ok_or_else(|| {
            DriverError::Unexpected(format!("no pod sandbox with id {sandbox_id}"))
        })?;
        let m = s.metadata.unwrap_or_default();
        Ok(PodRef {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            attempt: m.attempt,
            sandbox_id: Some(s.id),
        })
    }
}
