//! The driver's calls on a pod's containers: CreateContainer (a
//! timed-out try retried with the same request, or with attempt + 1 when
//! such a try left the name held), StartContainer, ContainerStatus (and
//! waiting until a container runs), StopContainer, RemoveContainer,
//! ListContainers, and the containers of a sandbox.

use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;

use super::{target, Driver};
use crate::{
    cri::{
        reserved_for, ContainerSpec, DriverError, PodSpec, Result, RetryLoop, RetryPolicy,
        LABEL_CONTAINER_NAME,
    },
    truth::{ContainerRef, Outcome, PodRef},
};

impl Driver {
    /// CreateContainer with the request timeout.
    /// CreateContainer with the request timeout. Returns the container as
    /// created (its attempt may be higher than `c.attempt`, see
    /// [`RetryPolicy::bump_attempt_on_orphan`]).
    pub async fn create_container(
        &self,
        pod: &PodSpec,
        sandbox_id: &str,
        c: &ContainerSpec,
        policy: &RetryPolicy,
    ) -> Result<ContainerRef> {
        Box::pin(self.create_container_with_deadline(pod, sandbox_id, c, self.timeout, policy))
            .await
    }

    /// CreateContainer; a timed-out try is retried with the same request.
    pub async fn create_container_with_deadline(
        &self,
        pod: &PodSpec,
        sandbox_id: &str,
        c: &ContainerSpec,
        deadline: Duration,
        policy: &RetryPolicy,
    ) -> Result<ContainerRef> {
        let mut spec = c.clone();
        let request = |spec: &ContainerSpec| cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            config: Some(spec.to_config(pod)),
            sandbox_config: Some(pod.to_config()),
        };
        let mut req = request(&spec);
        let pref = pod.pod_ref(Some(sandbox_id));
        let mut lp = RetryLoop::new(policy, deadline);
        loop {
            let d = lp.deadline();
            let cref = spec.container_ref(None);
            let res = Box::pin(self.call(
                "CreateContainer",
                Some(pref.clone()),
                Some(cref.clone()),
                d,
                lp.retry,
                req.clone(),
                |mut c, r| async move { c.create_container(r).await },
                |resp: &cri::CreateContainerResponse, _, c| {
                    if let Some(c) = c {
                        c.id = Some(resp.container_id.clone());
                    }
                },
            ))
            .await;
            let outcome = match res {
                Ok(resp) => return Ok(spec.container_ref(Some(&resp.container_id))),
                Err(o) => o,
            };
            let orphan = match &outcome {
                Outcome::Error { message, .. }
                    if lp.timed_out() && policy.bump_attempt_on_orphan =>
                {
                    reserved_for(message).map(str::to_owned)
                }
                _ => None,
            };
            let bumped = match orphan {
                Some(id) => self.next_attempt_after_orphan(&pref, &spec, &id).await,
                None => None,
            };
            match lp.failed(&outcome) {
                Some(wait) => {
                    if let Some(attempt) = bumped {
                        self.note(format!(
                            "container {} of pod {}/{}: attempt {} was created by a try that timed out on the client \
                             and holds the name; creating attempt {attempt} (kubelet: restart count + 1)",
                            spec.name, pod.namespace, pod.name, spec.attempt
                        ));
                        log::warn!(
                            "CreateContainer {} in pod {}: attempt {} orphaned by a timed-out try; next: attempt {attempt}",
                            spec.name,
                            pod.name,
                            spec.attempt
                        );
                        spec.attempt = attempt;
                        req = request(&spec);
                        lp.new_request();
                    }
                    log::info!(
                        "CreateContainer {} (attempt {}) in pod {}: retry {} in {} ms",
                        spec.name,
                        spec.attempt,
                        pod.name,
                        lp.retry,
                        wait.as_millis()
                    );
                    tokio::time::sleep(wait).await;
                }
                None if lp.failures.len() > 1 => {
                    return Err(DriverError::GaveUp {
                        method: "CreateContainer",
                        target: target(Some(&pref), Some(&cref)),
                        tries: lp.failures,
                        budget: policy.budget,
                    })
                }
                None => {
                    return Err(Self::fail(
                        "CreateContainer",
                        Some(&pref),
                        Some(&cref),
                        d,
                        outcome,
                    ))
                }
            }
        }
    }

    /// When ListContainers shows the container that holds the name
    /// (`holder`) created but not running: the attempt to create next
    /// (one above the highest attempt of that container name).
    async fn next_attempt_after_orphan(
        &self,
        pod: &PodRef,
        spec: &ContainerSpec,
        holder: &str,
    ) -> Option<u32> {
        let filter = cri::ContainerFilter {
            pod_sandbox_id: pod.sandbox_id.clone()?,
            label_selector: [(LABEL_CONTAINER_NAME.to_owned(), spec.name.clone())]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let items = self.list_containers(Some(pod), Some(filter)).await.ok()?;
        let h = items.iter().find(|c| c.id == holder)?;
        if h.state != cri::ContainerState::ContainerCreated as i32 {
            return None;
        }
        let max = items
            .iter()
            .filter_map(|c| c.metadata.as_ref())
            .filter(|m| m.name == spec.name)
            .map(|m| m.attempt)
            .max()?;
        Some(max.max(spec.attempt) + 1)
    }

    pub async fn start_container(&self, pod: Option<&PodRef>, c: &ContainerRef) -> Result<()> {
        let d = self.timeout;
        let req = cri::StartContainerRequest {
            container_id: Self::container_id(c)?,
        };
        self.call(
            "StartContainer",
            pod.cloned(),
            Some(c.clone()),
            d,
            0,
            req,
            |mut c, r| async move { c.start_container(r).await },
            |_, _, _| {},
        )
        .await
        .map(|_| ())
        .map_err(|o| Self::fail("StartContainer", pod, Some(c), d, o))
    }

    pub async fn container_status(
        &self,
        pod: Option<&PodRef>,
        c: &ContainerRef,
    ) -> Result<cri::ContainerStatus> {
        let d = self.timeout;
        let req = cri::ContainerStatusRequest {
            container_id: Self::container_id(c)?,
            verbose: false,
        };
        let resp = self
            .call(
                "ContainerStatus",
                pod.cloned(),
                Some(c.clone()),
                d,
                0,
                req,
                |mut c, r| async move { c.container_status(r).await },
                |_, _, _| {},
            )
            .await
            .map_err(|o| Self::fail("ContainerStatus", pod, Some(c), d, o))?;
        resp.status.ok_or_else(|| {
            DriverError::Unexpected(format!(
                "ContainerStatus {}: no status in the answer",
                target(pod, Some(c))
            ))
        })
    }

    /// Poll ContainerStatus until the container runs (error if it exits or
    /// `within` passes first).
    pub async fn wait_container_running(
        &self,
        pod: Option<&PodRef>,
        c: &ContainerRef,
        within: Duration,
    ) -> Result<cri::ContainerStatus> {
        let t0 = Instant::now();
        let mut interval = Duration::from_millis(10);
        loop {
            let st = self.container_status(pod, c).await?;
            match cri::ContainerState::try_from(st.state) {
                Ok(cri::ContainerState::ContainerRunning) => return Ok(st),
                Ok(cri::ContainerState::ContainerExited) => {
                    return Err(DriverError::Unexpected(format!(
                        "{}: exited (code {}, reason {:?}, message {:?}) instead of running",
                        target(pod, Some(c)),
                        st.exit_code,
                        st.reason,
                        st.message
                    )))
                }
                _ => {}
            }
            if t0.elapsed() >= within {
                return Err(DriverError::Unexpected(format!(
                    "{}: not running after {:.1} s (state {})",
                    target(pod, Some(c)),
                    within.as_secs_f64(),
                    cri::ContainerState::try_from(st.state).map_or("?", |s| s.as_str_name())
                )));
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(Duration::from_millis(100));
        }
    }

    /// StopContainer with `grace_secs` (kubelet's deadline: request timeout
    /// plus the grace period).
    pub async fn stop_container(
        &self,
        pod: Option<&PodRef>,
        c: &ContainerRef,
        grace_secs: i64,
    ) -> Result<()> {
        self.stop_container_try(pod, c, grace_secs, 0).await
    }

    /// [`Driver::stop_container`], recorded as retry number `retry` of the
    /// same request (kubelet's pod worker trying the teardown again).
    pub async fn stop_container_try(
        &self,
        pod: Option<&PodRef>,
        c: &ContainerRef,
        grace_secs: i64,
        retry: u32,
    ) -> Result<()> {
        let d = self.timeout + Duration::from_secs(grace_secs.max(0) as u64);
        let req = cri::StopContainerRequest {
            container_id: Self::container_id(c)?,
            timeout: grace_secs,
        };
        self.call(
            "StopContainer",
            pod.cloned(),
            Some(c.clone()),
            d,
            retry,
            req,
            |mut c, r| async move { c.stop_container(r).await },
            |_, _, _| {},
        )
        .await
        .map(|_| ())
        .map_err(|o| Self::fail("StopContainer", pod, Some(c), d, o))
    }

    pub async fn remove_container(&self, pod: Option<&PodRef>, c: &ContainerRef) -> Result<()> {
        let d = self.timeout;
        let req = cri::RemoveContainerRequest {
            container_id: Self::container_id(c)?,
        };
        self.call(
            "RemoveContainer",
            pod.cloned(),
            Some(c.clone()),
            d,
            0,
            req,
            |mut c, r| async move { c.remove_container(r).await },
            |_, _, _| {},
        )
        .await
        .map(|_| ())
        .map_err(|o| Self::fail("RemoveContainer", pod, Some(c), d, o))
    }

    /// ListContainers, recorded as done on behalf of `pod`.
    pub async fn list_containers(
        &self,
        pod: Option<&PodRef>,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>> {
        let d = self.timeout;
        self.call(
            "ListContainers",
            pod.cloned(),
            None,
            d,
            0,
            cri::ListContainersRequest { filter },
            |mut c, r| async move { c.list_containers(r).await },
            |_, _, _| {},
        )
        .await
        .map(|r| r.containers)
        .map_err(|o| Self::fail("ListContainers", pod, None, d, o))
    }

    /// The containers of a sandbox (ListContainers filtered by sandbox id).
    pub async fn containers_of(&self, pod: &PodRef) -> Result<Vec<ContainerRef>> {
        let filter = cri::ContainerFilter {
            pod_sandbox_id: Self::sandbox_id(pod)?,
            ..Default::default()
        };
        let items = self.list_containers(Some(pod), Some(filter)).await?;
        Ok(items
            .into_iter()
            .map(|c| {
                let m = c.metadata.unwrap_or_default();
                ContainerRef {
                    name: m.name,
                    attempt: m.attempt,
                    id: Some(c.id),
                }
            })
            .collect())
    }
}
