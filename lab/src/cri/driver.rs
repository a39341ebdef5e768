//! [`Driver`], the kubelet-like CRI client: its connection to the socket
//! (RuntimeService and ImageService on one channel), how it makes one
//! call (the deadline in the `grpc-timeout` header and on the client, one
//! truth record, one [`CallRecord`]), its summary, and the volume steps it
//! records. Its calls are under driver/: the node-level ones (node.rs),
//! those on a pod's sandbox (sandbox.rs) and on its containers
//! (container.rs).

use std::{
    future::Future,
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use tonic::{
    transport::{Channel, Endpoint, Uri},
    Status,
};

use super::{classify, describe, CallRecord, DriverError, Result, Summary};
use crate::truth::{self, ContainerRef, Outcome, PodRef, Truth, TruthWriter};

mod container;
mod node;
mod sandbox;

type Client = cri::runtime_service_client::RuntimeServiceClient<Channel>;
type ImageClient = cri::image_service_client::ImageServiceClient<Channel>;

// ------------------------------------------------------------------ driver

/// A kubelet-like CRI client. Cheap to clone (one HTTP/2 connection, shared).
/// RuntimeService and ImageService calls share that connection, as
/// kubelet's do when both endpoints are the same socket.
#[derive(Clone)]
pub struct Driver {
    client: Client,
    images: ImageClient,
    /// Connections the channel opened to the socket so far.
    connects: Arc<AtomicU64>,
    truth: TruthWriter,
    timeout: Duration,
    /// How long after the deadline it sends the client's own timer fires
    /// ([`Driver::with_client_grace`]).
    client_grace: Duration,
    records: Arc<Mutex<Vec<CallRecord>>>,
    truth_errors: Arc<AtomicU64>,
}

fn target(pod: Option<&PodRef>, container: Option<&ContainerRef>) -> String {
    let mut s = String::new();
    if let Some(p) = pod {
        s.push_str(&format!(
            "pod {}/{} (attempt {})",
            p.namespace, p.name, p.attempt
        ));
    }
    if let Some(c) = container {
        if !s.is_empty() {
            s.push_str(", ");
        }
        s.push_str(&format!("container {} (attempt {})", c.name, c.attempt));
        if let Some(id) = &c.id {
            s.push_str(&format!(" {}", short(id)));
        }
    }
    s
}

/// The first 13 characters of an id, as crictl prints them.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(13)]
}

/// A volume step's outcome in words (`EBUSY: Device or resource busy`).
fn describe_volume(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Error { message, .. } => message.clone(),
        o => describe(o),
    }
}

impl Driver {
    /// Connect to the CRI socket (eagerly: fails if nothing listens).
    /// `request_timeout` is kubelet's runtime request timeout.
    pub async fn connect(
        socket: &Path,
        truth: TruthWriter,
        request_timeout: Duration,
    ) -> Result<Self> {
        let path = socket.to_path_buf();
        let connects = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&connects);
        let channel = Endpoint::try_from("http://cri.invalid")
            .map_err(|e| DriverError::Connect(e.to_string()))?
            .connect_timeout(Duration::from_secs(10))
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                counter.fetch_add(1, Ordering::Relaxed);
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .map_err(|e| {
                let mut m = format!("{}: {e}", socket.display());
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    let s_text = s.to_string();
                    if !m.contains(&s_text) {
                        m.push_str(&format!(": {s_text}"));
                    }
                    src = s.source();
                }
                DriverError::Connect(m)
            })?;
        // kubelet allows 16 MiB messages.
        let client = Client::new(channel.clone())
            .max_decoding_message_size(16 << 20)
            .max_encoding_message_size(16 << 20);
        let images = ImageClient::new(channel)
            .max_decoding_message_size(16 << 20)
            .max_encoding_message_size(16 << 20);
        Ok(Self {
            client,
            images,
            connects,
            truth,
            timeout: request_timeout,
            client_grace: Duration::ZERO,
            records: Arc::default(),
            truth_errors: Arc::default(),
        })
    }

    /// Let the client's own timer fire `grace` after the deadline it sends
    /// in `grpc-timeout`, so that the runtime's timer fires first and its
    /// request context ends DeadlineExceeded rather than Canceled by the
    /// client's RST_STREAM. tonic sends the timeout set on the request
    /// while this timer started before the headers left, so with no grace
    /// (the default) the client's cancel can come first; grpc-go, kubelet's
    /// client, sends the time left when it writes the headers. What NRI
    /// makes of a plugin still busy with the hook hangs on it: on
    /// DeadlineExceeded it closes the plugin as timed out, on Canceled it
    /// keeps it (nri pkg/adaptation/plugin.go `isFatalError`), and a retry
    /// meets the same slow plugin again (docs/lab.md, "who ends the slow
    /// hook").
    #[must_use]
    pub fn with_client_grace(mut self, grace: Duration) -> Self {
        self.client_grace = grace;
        self
    }

    pub fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// How many connections the channel has opened to the socket: 1 unless
    /// tonic reconnected after the connection failed.
    pub fn connections(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    /// kubelet gives RunPodSandbox twice the runtime request timeout.
    pub fn run_pod_sandbox_timeout(&self) -> Duration {
        self.timeout * 2
    }

    /// Write a Truth::Note.
    pub fn note(&self, text: impl Into<String>) {
        self.write_truth(&Truth::Note {
            mono_ns: truth::mono_ns(),
            text: text.into(),
        });
    }

    fn write_truth(&self, t: &Truth) {
        if let Err(e) = self.truth.write(t) {
            self.truth_errors.fetch_add(1, Ordering::Relaxed);
            log::error!("cannot write truth record: {e}");
        }
    }

    /// Run one volume step of the driver's own (`op`: mount, unmount,
    /// remove) and write its [`Truth::Volume`] record: the errno of a
    /// failure as the outcome's code.
    pub fn volume_step(
        &self,
        op: &str,
        path: &Path,
        pod: Option<&PodRef>,
        retry: u32,
        step: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let start_mono_ns = truth::mono_ns();
        let res = step();
        let end_mono_ns = truth::mono_ns();
        let outcome = match &res {
            Ok(()) => Outcome::Ok,
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                Outcome::Error {
                    code: errno,
                    message: format!("{}: {e}", crate::volume::errno_name(errno)),
                }
            }
        };
        match &outcome {
            Outcome::Ok => log::debug!("{op} {} ok", path.display()),
            o => log::info!(
                "{op} {} (retry {retry}) failed: {}",
                path.display(),
                describe_volume(o)
            ),
        }
        self.write_truth(&Truth::Volume {
            op: op.to_owned(),
            path: path.to_string_lossy().into_owned(),
            pod: pod.cloned(),
            start_mono_ns,
            end_mono_ns,
            outcome,
            retry,
        });
        res
    }

    /// Every call made so far.
    pub fn records(&self) -> Vec<CallRecord> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub fn summary(&self) -> Summary {
        let mut s = Summary {
            truth_write_errors: self.truth_errors.load(Ordering::Relaxed),
            ..Default::default()
        };
        for r in self.records() {
            s.calls += 1;
            let failed = r.outcome != Outcome::Ok;
            s.failures += u64::from(failed);
            s.deadline_exceeded += u64::from(r.outcome == Outcome::DeadlineExceeded);
            s.retries += u64::from(r.retry > 0);
            let m = s.methods.entry(r.method.clone()).or_default();
            m.calls += 1;
            m.failures += u64::from(failed);
            m.total_ms += r.ms;
            m.max_ms = m.max_ms.max(r.ms);
        }
        s
    }

    /// One RuntimeService call: see [`Driver::call_on`].
    #[allow(clippy::too_many_arguments)]
    async fn call<Req, Resp, F, Fut>(
        &self,
        method: &'static str,
        pod: Option<PodRef>,
        container: Option<ContainerRef>,
        deadline: Duration,
        retry: u32,
        req: Req,
        f: F,
        ids: impl FnOnce(&Resp, &mut Option<PodRef>, &mut Option<ContainerRef>),
    ) -> std::result::Result<Resp, Outcome>
    where
        F: FnOnce(Client, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
    {
        let client = self.client.clone();
        self.call_on(client, method, pod, container, deadline, retry, req, f, ids)
            .await
    }

    /// One CRI call on `client` (RuntimeService or ImageService): deadline
    /// (header + client side), one truth record. `ids` fills the sandbox /
    /// container id from the response.
    #[allow(clippy::too_many_arguments)]
    async fn call_on<C, Req, Resp, F, Fut>(
        &self,
        client: C,
        method: &'static str,
        mut pod: Option<PodRef>,
        mut container: Option<ContainerRef>,
        deadline: Duration,
        retry: u32,
        req: Req,
        f: F,
        ids: impl FnOnce(&Resp, &mut Option<PodRef>, &mut Option<ContainerRef>),
    ) -> std::result::Result<Resp, Outcome>
    where
        F: FnOnce(C, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
    {
        let mut request = tonic::Request::new(req);
        request.set_timeout(deadline);
        let start_wall_ns = truth::wall_ns();
        let start_mono_ns = truth::mono_ns();
        let t0 = Instant::now();
        let res = tokio::time::timeout(deadline + self.client_grace, f(client, request)).await;
        let end_mono_ns = truth::mono_ns();
        let elapsed = t0.elapsed();
        let res = match res {
            Err(_elapsed) => Err(Outcome::DeadlineExceeded),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(classify(&status, elapsed, deadline)),
        };
        let outcome = match &res {
            Ok(resp) => {
                ids(resp, &mut pod, &mut container);
                Outcome::Ok
            }
            Err(o) => o.clone(),
        };
        let deadline_ms = deadline.as_millis() as u64;
        match &outcome {
            Outcome::Ok => log::debug!(
                "{method} {} ok in {:.1} ms",
                target(pod.as_ref(), container.as_ref()),
                elapsed.as_secs_f64() * 1e3
            ),
            o => log::info!(
                "{method} {} (retry {retry}) failed after {:.1} ms: {}",
                target(pod.as_ref(), container.as_ref()),
                elapsed.as_secs_f64() * 1e3,
                describe(o)
            ),
        }
        if let Ok(mut r) = self.records.lock() {
            r.push(CallRecord {
                method: method.into(),
                pod: pod.as_ref().map(|p| p.name.clone()),
                container: container.as_ref().map(|c| c.name.clone()),
                attempt: container
                    .as_ref()
                    .map(|c| c.attempt)
                    .or_else(|| pod.as_ref().map(|p| p.attempt))
                    .unwrap_or(0),
                retry,
                outcome: outcome.clone(),
                ms: elapsed.as_secs_f64() * 1e3,
                deadline_ms,
            });
        }
        self.write_truth(&Truth::Cri {
            method: method.into(),
            pod,
            container,
            start_mono_ns,
            end_mono_ns,
            start_wall_ns,
            deadline_ms: Some(deadline_ms),
            outcome,
            retry,
        });
        res
    }

    fn fail(
        method: &'static str,
        pod: Option<&PodRef>,
        c: Option<&ContainerRef>,
        deadline: Duration,
        outcome: Outcome,
    ) -> DriverError {
        DriverError::Call {
            method,
            target: target(pod, c),
            deadline_ms: deadline.as_millis() as u64,
            outcome,
        }
    }

    fn container_id(c: &ContainerRef) -> Result<String> {
        c.id.clone()
            .ok_or_else(|| DriverError::Invalid(format!("container {} has no id", c.name)))
    }

    fn sandbox_id(p: &PodRef) -> Result<String> {
        p.sandbox_id
            .clone()
            .ok_or_else(|| DriverError::Invalid(format!("pod {} has no sandbox id", p.name)))
    }
}
