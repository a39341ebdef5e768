//! A kubelet-like CRI client for the lab's private containerd.
//!
//! [`Driver`] talks `runtime.v1.RuntimeService` (and, for ImageStatus,
//! ListImages and ImageFsInfo, `runtime.v1.ImageService`, on the same
//! connection) over the CRI unix socket with the `k8s-cri` crate's tonic
//! client, the way kubelet does:
//!
//! - every call has a deadline: the runtime request timeout (kubelet's
//!   `--runtime-request-timeout`, 2 min by default), twice that for
//!   RunPodSandbox, and timeout + grace period for StopContainer. The
//!   deadline travels to the runtime in the `grpc-timeout` header (as
//!   grpc-go sends it) and is enforced on the client as well;
//! - a RunPodSandbox or CreateContainer whose deadline expired is retried
//!   with the SAME request (same name, same attempt: kubelet does not bump
//!   the attempt for a timeout) with backoff, until it succeeds or the
//!   [`RetryPolicy`] budget runs out. Errors that follow a timeout (the
//!   runtime answering "failed to reserve sandbox name ...") are retried
//!   as well; an error on a first try is not;
//! - a sandbox that an earlier, timed-out try did create (the runtime
//!   then answers "name ... is reserved for <id>" forever) is adopted once
//!   ListPodSandbox shows it READY with the same name and attempt, as
//!   kubelet adopts the sandboxes its relist finds for a pod uid.
//!
//! Every call writes exactly one [`Truth::Cri`] record when it ends (one
//! per try for retried calls), with CLOCK_MONOTONIC start/end, the wall
//! clock start, the deadline, the outcome and the retry number.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    future::Future,
    io::Read,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use serde::Serialize;
use tonic::{
    transport::{Channel, Endpoint, Uri},
    Code, Status,
};

use crate::truth::{self, ContainerRef, Outcome, PodRef, Truth, TruthWriter};

pub use k8s_cri::v1 as api;

/// The lab's sandbox image (`sandbox_image` in its containerd config).
pub const PAUSE_IMAGE: &str = "localhost/nri-trace/pause:lab";
/// The lab's workload image.
pub const BUSYBOX_IMAGE: &str = "localhost/nri-trace/busybox:lab";
/// kubelet's default `--runtime-request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_mins(2);
/// The lab directory when `NRI_TRACE_LAB_DIR` is not set.
pub const DEFAULT_LAB_DIR: &str = "/var/lib/nri-trace-lab";

/// Labels kubelet puts on every sandbox and container.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

type Client = cri::runtime_service_client::RuntimeServiceClient<Channel>;
type ImageClient = cri::image_service_client::ImageServiceClient<Channel>;

/// The lab's CRI socket: `$NRI_TRACE_LAB_DIR/run/crio.sock` when the lab
/// runs CRI-O (`$LAB/runtime`, written at `up`) or is asked to
/// (`NRI_TRACE_LAB_RUNTIME=crio`) and none runs, else
/// `run/containerd.sock`.
pub fn default_socket() -> PathBuf {
    let lab = std::env::var_os("NRI_TRACE_LAB_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_LAB_DIR), PathBuf::from);
    let running = std::fs::read_to_string(lab.join("runtime")).ok();
    let wanted = std::env::var(crate::labctl::Runtime::ENV).ok();
    lab.join("run")
        .join(socket_name(running.as_deref(), wanted.as_deref()))
}

/// The CRI socket's name for the runtime that runs, else the one asked for.
fn socket_name(running: Option<&str>, wanted: Option<&str>) -> &'static str {
    let name = running.map(str::trim).filter(|r| !r.is_empty()).or(wanted);
    let runtime = name
        .and_then(|n| crate::labctl::Runtime::parse(n).ok())
        .unwrap_or(crate::labctl::Runtime::Containerd23);
    runtime.cri_socket_name()
}

/// A random RFC 4122 version 4 UUID, as the API server gives pods.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if filled.is_err() {
        // Unique enough for a lab pod: time and pid.
        let t = truth::wall_ns() ^ truth::mono_ns().rotate_left(17);
        b[..8].copy_from_slice(&t.to_le_bytes());
        b[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().fold(String::new(), |mut h, x| {
        use std::fmt::Write as _;
        let _ = write!(h, "{x:02x}");
        h
    });
    dashed_uuid(&h)
}

/// 32 hex digits in the 8-4-4-4-12 form of a pod uid (RFC 4122's text
/// form, as kubelet's pod uids are written).
pub fn dashed_uuid(h: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

// ------------------------------------------------------------------ specs

/// A pod as kubelet describes it to RunPodSandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// Sandbox attempt (kubelet bumps it only when it recreates a sandbox,
    /// never for a retry after a timeout).
    pub attempt: u32,
    /// Network namespace NODE (host network) instead of POD (own netns on
    /// the lab's bridge CNI network).
    pub host_network: bool,
    /// PID namespace POD (the pause process is PID 1 and workloads are not)
    /// instead of kubelet's default CONTAINER.
    pub share_pid: bool,
    /// PID namespace NODE (`hostPID: true`): the pod sees the host's
    /// processes, as nri-trace's DaemonSet does (deploy/daemonset.yaml).
    pub host_pid: bool,
    /// A privileged sandbox (`privileged: true` on a container of the pod,
    /// which kubelet passes to RunPodSandbox too).
    pub privileged: bool,
    /// None: kubelet's choice, the pod name for own-netns pods. Must be None
    /// for host-network pods: they share the host's UTS namespace and the
    /// runtime cannot set a hostname there.
    pub hostname: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Pod log directory (kubelet: /var/log/pods/<ns>_<name>_<uid>). None:
    /// no container logs (containerd discards the output).
    pub log_directory: Option<PathBuf>,
}

impl PodSpec {
    pub fn new(name: impl Into<String>, namespace: impl Into<String>, host_network: bool) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            uid: new_uid(),
            attempt: 0,
            host_network,
            share_pid: false,
            host_pid: false,
            privileged: false,
            hostname: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            log_directory: None,
        }
    }

    /// Sets the log directory to `<root>/<namespace>_<name>_<uid>`, as
    /// kubelet lays out /var/log/pods.
    #[must_use]
    pub fn with_log_root(mut self, root: Option<&Path>) -> Self {
        self.log_directory =
            root.map(|r| r.join(format!("{}_{}_{}", self.namespace, self.name, self.uid)));
        self
    }

    pub fn pod_ref(&self, sandbox_id: Option<&str>) -> PodRef {
        PodRef {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            attempt: self.attempt,
            sandbox_id: sandbox_id.map(str::to_owned),
        }
    }

    /// Errors a runtime would otherwise report late (or not at all).
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() || self.namespace.is_empty() || self.uid.is_empty() {
            return Err("pod name, namespace and uid must not be empty".into());
        }
        if self.host_network && self.hostname.as_deref().is_some_and(|h| !h.is_empty()) {
            return Err(format!(
                "pod {}: a host-network pod must leave hostname unset (it shares the host's UTS namespace)",
                self.name
            ));
        }
        Ok(())
    }

    /// The hostname sent to the runtime.
    pub fn effective_hostname(&self) -> String {
        if self.host_network {
            return String::new();
        }
        match &self.hostname {
            Some(h) => h.clone(),
            // kubelet: the pod name, truncated to 63 characters.
            None => self
                .name
                .chars()
                .take(63)
                .collect::<String>()
                .trim_end_matches(['-', '.'])
                .to_owned(),
        }
    }

    pub fn namespace_options(&self) -> cri::NamespaceOption {
        cri::NamespaceOption {
            network: if self.host_network {
                cri::NamespaceMode::Node
            } else {
                cri::NamespaceMode::Pod
            } as i32,
            pid: if self.host_pid {
                cri::NamespaceMode::Node
            } else if self.share_pid {
                cri::NamespaceMode::Pod
            } else {
                cri::NamespaceMode::Container
            } as i32,
            ipc: cri::NamespaceMode::Pod as i32,
            ..Default::default()
        }
    }

    fn kube_labels(&self) -> HashMap<String, String> {
        let mut l: HashMap<String, String> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        l.insert(LABEL_POD_NAME.into(), self.name.clone());
        l.insert(LABEL_POD_NAMESPACE.into(), self.namespace.clone());
        l.insert(LABEL_POD_UID.into(), self.uid.clone());
        l
    }

    /// The PodSandboxConfig kubelet would send (and repeat in CreateContainer).
    pub fn to_config(&self) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: self.attempt,
            }),
            hostname: self.effective_hostname(),
            log_directory: self
                .log_directory
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            dns_config: None,
            port_mappings: vec![],
            labels: self.kube_labels(),
            annotations: self
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            linux: Some(cri::LinuxPodSandboxConfig {
                // Empty: containerd 1.7 with cgroupfs uses /k8s.io/<id>.
                cgroup_parent: String::new(),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(self.namespace_options()),
                    privileged: self.privileged,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            windows: None,
        }
    }
}

/// A container as kubelet describes it to CreateContainer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSpec {
    pub name: String,
    /// The restart count; unchanged when a timed-out create is retried.
    pub attempt: u32,
    pub image: String,
    /// Entrypoint override (pod spec `command`); empty: the image's.
    pub command: Vec<String>,
    /// Pod spec `args`; empty: the image's Cmd (unless command is set).
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Host directories bind-mounted into the container (CRI `Mount`s,
    /// propagation private, read-write), in order.
    pub mounts: Vec<MountSpec>,
    /// `securityContext.privileged` (needs a privileged pod).
    pub privileged: bool,
}

/// A host path mounted into a container, as kubelet passes a hostPath
/// volume: containerd bind-mounts it recursively (`rbind`), so a mount
/// that exists on the host path at StartContainer comes along.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSpec {
    pub host_path: String,
    pub container_path: String,
}

impl MountSpec {
    /// `HOST:CONTAINER` (both absolute).
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let (h, c) = s
            .split_once(':')
            .ok_or_else(|| format!("expected HOST:CONTAINER, got {s:?}"))?;
        if !h.starts_with('/') || !c.starts_with('/') {
            return Err(format!("both paths must be absolute in {s:?}"));
        }
        Ok(Self {
            host_path: h.into(),
            container_path: c.into(),
        })
    }

    pub fn to_cri(&self) -> cri::Mount {
        cri::Mount {
            container_path: self.container_path.clone(),
            host_path: self.host_path.clone(),
            readonly: false,
            propagation: cri::MountPropagation::PropagationPrivate as i32,
            ..Default::default()
        }
    }
}

impl ContainerSpec {
    /// busybox `sleep 3600`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            attempt: 0,
            image: BUSYBOX_IMAGE.into(),
            command: vec!["sleep".into(), "3600".into()],
            args: vec![],
            env: vec![],
            working_dir: String::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            mounts: vec![],
            privileged: false,
        }
    }

    /// A container whose PID 1 ignores SIGTERM: StopContainer has to wait
    /// for the grace period and SIGKILL it.
    pub fn ignoring_sigterm(name: impl Into<String>) -> Self {
        Self {
            command: vec![
                "sh".into(),
                "-c".into(),
                "trap \"\" TERM; while true; do sleep 1; done".into(),
            ],
            ..Self::new(name)
        }
    }

    pub fn container_ref(&self, id: Option<&str>) -> ContainerRef {
        ContainerRef {
            name: self.name.clone(),
            attempt: self.attempt,
            id: id.map(str::to_owned),
        }
    }

    /// kubelet's log path relative to the pod log directory; empty when the
    /// pod has none.
    pub fn log_path(&self, pod: &PodSpec) -> String {
        if pod.log_directory.is_some() {
            format!("{}/{}.log", self.name, self.attempt)
        } else {
            String::new()
        }
    }

    pub fn to_config(&self, pod: &PodSpec) -> cri::ContainerConfig {
        let mut labels = pod.kube_labels();
        labels.extend(self.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        labels.insert(LABEL_CONTAINER_NAME.into(), self.name.clone());
        let mut annotations: HashMap<String, String> = self
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        annotations.insert(
            "io.kubernetes.container.restartCount".into(),
            self.attempt.to_string(),
        );
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: self.name.clone(),
                attempt: self.attempt,
            }),
            image: Some(cri::ImageSpec {
                image: self.image.clone(),
                ..Default::default()
            }),
            command: self.command.clone(),
            args: self.args.clone(),
            working_dir: self.working_dir.clone(),
            envs: self
                .env
                .iter()
                .map(|(k, v)| cri::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            labels,
            annotations,
            mounts: self.mounts.iter().map(MountSpec::to_cri).collect(),
            log_path: self.log_path(pod),
            linux: Some(cri::LinuxContainerConfig {
                resources: None,
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: Some(pod.namespace_options()),
                    privileged: self.privileged,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }
}

// ------------------------------------------------------------------ retries

/// When and how a timed-out RunPodSandbox / CreateContainer is retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Wait before the first retry; doubles per retry up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// No retry starts later than this after the first try started.
    pub budget: Duration,
    /// Deadline of the retries; None: the same as the first try (kubelet).
    pub retry_deadline: Option<Duration>,
    /// CreateContainer only: when the runtime keeps the name reserved for a
    /// container that a timed-out try did create (containerd leaves it
    /// CREATED), create the container again with attempt + 1, as kubelet
    /// does once its relist shows that container (restart count + 1). The
    /// orphan stays until RemovePodSandbox (kubelet's GC). false: retry the
    /// same request until the budget runs out.
    pub bump_attempt_on_orphan: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(10),
            budget: Duration::from_mins(5),
            retry_deadline: None,
            bump_attempt_on_orphan: true,
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> Self {
        Self {
            budget: Duration::ZERO,
            ..Self::default()
        }
    }

    /// The wait before retry number `retry` (1 for the first retry).
    pub fn backoff(&self, retry: u32) -> Duration {
        let shift = retry.saturating_sub(1).min(30);
        self.initial_backoff
            .saturating_mul(1u32 << shift)
            .min(self.max_backoff)
    }
}

/// The state of one retried request: which deadline the next try gets,
/// whether (and after how long) to try again.
#[derive(Debug)]
pub struct RetryLoop<'a> {
    policy: &'a RetryPolicy,
    first_deadline: Duration,
    started: Instant,
    /// The retry number of the next try (0: the first try of a request).
    pub retry: u32,
    /// Tries made, over all requests of this loop.
    pub tries: u32,
    timed_out: bool,
    /// Outcomes of the failed tries so far.
    pub failures: Vec<Outcome>,
}

impl<'a> RetryLoop<'a> {
    pub fn new(policy: &'a RetryPolicy, first_deadline: Duration) -> Self {
        Self {
            policy,
            first_deadline,
            started: Instant::now(),
            retry: 0,
            tries: 0,
            timed_out: false,
            failures: vec![],
        }
    }

    /// The deadline of the next try: the first deadline for the very first
    /// try, the retry deadline for every later one.
    pub fn deadline(&self) -> Duration {
        if self.tries == 0 {
            self.first_deadline
        } else {
            self.policy.retry_deadline.unwrap_or(self.first_deadline)
        }
    }

    /// Whether any try so far hit its deadline.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Record a failed try; Some(wait) if the request is to be tried again.
    pub fn failed(&mut self, outcome: &Outcome) -> Option<Duration> {
        self.failed_at(outcome, self.started.elapsed())
    }

    /// The next try sends a new request (a bumped attempt): its retry
    /// number starts again at 0; the budget and the timeout history go on.
    pub fn new_request(&mut self) {
        self.retry = 0;
    }

    fn failed_at(&mut self, outcome: &Outcome, elapsed: Duration) -> Option<Duration> {
        self.tries += 1;
        self.failures.push(outcome.clone());
        let retryable = match outcome {
            Outcome::Ok => false,
            Outcome::DeadlineExceeded => {
                self.timed_out = true;
                true
            }
            // After a timeout the runtime may still be working on (or
            // cleaning up) the first request: "failed to reserve sandbox
            // name", "already exists", or anything else kubelet would see
            // on its next sync. A first-try error is final.
            Outcome::Error { .. } => self.timed_out,
        };
        if !retryable {
            return None;
        }
        let wait = self.policy.backoff(self.failures.len() as u32);
        if elapsed + wait > self.policy.budget {
            return None;
        }
        self.retry += 1;
        Some(wait)
    }
}

/// The sandbox id in containerd's `failed to reserve sandbox name "...":
/// name "..." is reserved for "<id>"` (also for container names).
pub fn reserved_for(message: &str) -> Option<&str> {
    let rest = &message[message.find("is reserved for \"")? + "is reserved for \"".len()..];
    let id = &rest[..rest.find('"')?];
    (!id.is_empty()).then_some(id)
}

/// How a failed call ended, from the client's side: `DeadlineExceeded` when
/// our deadline expired (tonic reports its own timeout as CANCELLED
/// "Timeout expired"; a runtime that saw the propagated deadline answers
/// DEADLINE_EXCEEDED), the gRPC status otherwise.
pub fn classify(status: &Status, elapsed: Duration, deadline: Duration) -> Outcome {
    let expired = elapsed >= deadline;
    match status.code() {
        Code::DeadlineExceeded if expired => Outcome::DeadlineExceeded,
        Code::Cancelled if expired || status.message() == "Timeout expired" => {
            Outcome::DeadlineExceeded
        }
        code => Outcome::Error {
            code: code as i32,
            message: status.message().to_owned(),
        },
    }
}

/// `Unknown (2): message` for an Error outcome.
pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ok => "ok".into(),
        Outcome::DeadlineExceeded => "client deadline exceeded".into(),
        Outcome::Error { code, message } => format!("{:?} ({code}): {message}", Code::from(*code)),
    }
}

/// A volume step's outcome in words (`EBUSY: Device or resource busy`).
fn describe_volume(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Error { message, .. } => message.clone(),
        o => describe(o),
    }
}

// ------------------------------------------------------------------ errors

#[derive(Debug)]
pub enum DriverError {
    /// Could not reach the socket.
    Connect(String),
    /// A call failed and was not retried.
    Call {
        method: &'static str,
        target: String,
        deadline_ms: u64,
        outcome: Outcome,
    },
    /// A retried call still failed when the budget ran out.
    GaveUp {
        method: &'static str,
        target: String,
        tries: Vec<Outcome>,
        budget: Duration,
    },
    /// The request itself is wrong (caught before sending it).
    Invalid(String),
    /// The runtime or the workload did something a kubelet would not accept.
    Unexpected(String),
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Connect(m) => write!(f, "cannot connect: {m}"),
            DriverError::Call {
                method,
                target,
                deadline_ms,
                outcome,
            } => match outcome {
                Outcome::DeadlineExceeded => {
                    write!(
                        f,
                        "{method} {target}: deadline of {deadline_ms} ms exceeded"
                    )
                }
                o => write!(f, "{method} {target}: {}", describe(o)),
            },
            DriverError::GaveUp {
                method,
                target,
                tries,
                budget,
            } => write!(
                f,
                "{method} {target}: still failing after {} tries (retry budget {:.1} s); last: {}",
                tries.len(),
                budget.as_secs_f64(),
                tries.last().map(describe).unwrap_or_default()
            ),
            DriverError::Invalid(m) => write!(f, "invalid request: {m}"),
            DriverError::Unexpected(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for DriverError {}

impl DriverError {
    /// The outcome of the (last) failed call, if this is a call failure.
    pub fn outcome(&self) -> Option<&Outcome> {
        match self {
            DriverError::Call { outcome, .. } => Some(outcome),
            DriverError::GaveUp { tries, .. } => tries.last(),
            _ => None,
        }
    }
}

pub type Result<T, E = DriverError> = std::result::Result<T, E>;

// ------------------------------------------------------------------ stats

/// What the driver keeps of each call for its summary.
#[derive(Clone, Debug, Serialize)]
pub struct CallRecord {
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The container's attempt for container calls, else the pod's.
    pub attempt: u32,
    pub retry: u32,
    pub outcome: Outcome,
    pub ms: f64,
    pub deadline_ms: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct MethodStats {
    pub calls: u64,
    pub failures: u64,
    pub total_ms: f64,
    pub max_ms: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub calls: u64,
    /// Calls that did not end Ok (expected ones on a retry path included).
    pub failures: u64,
    pub deadline_exceeded: u64,
    pub retries: u64,
    pub truth_write_errors: u64,
    pub methods: BTreeMap<String, MethodStats>,
}

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
            records: Arc::default(),
            truth_errors: Arc::default(),
        })
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
        let res = tokio::time::timeout(deadline, f(client, request)).await;
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

    pub async fn version(&self) -> Result<cri::VersionResponse> {
        let d = self.timeout;
        self.call(
            "Version",
            None,
            None,
            d,
            0,
            cri::VersionRequest {
                version: "v1".into(),
            },
            |mut c, r| async move { c.version(r).await },
            |_, _, _| {},
        )
        .await
        .map_err(|o| Self::fail("Version", None, None, d, o))
    }

    /// Status (runtime conditions), as kubelet's runtime health check.
    pub async fn status(&self) -> Result<cri::StatusResponse> {
        let d = self.timeout;
        self.call(
            "Status",
            None,
            None,
            d,
            0,
            cri::StatusRequest { verbose: false },
            |mut c, r| async move { c.status(r).await },
            |_, _, _| {},
        )
        .await
        .map_err(|o| Self::fail("Status", None, None, d, o))
    }

    /// ImageFsInfo (ImageService), as kubelet's image GC and stats.
    pub async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse> {
        let d = self.timeout;
        self.call_on(
            self.images.clone(),
            "ImageFsInfo",
            None,
            None,
            d,
            0,
            cri::ImageFsInfoRequest {},
            |mut c, r| async move { c.image_fs_info(r).await },
            |_, _, _| {},
        )
        .await
        .map_err(|o| Self::fail("ImageFsInfo", None, None, d, o))
    }

    /// ListImages (ImageService).
    pub async fn list_images(&self, filter: Option<cri::ImageFilter>) -> Result<Vec<cri::Image>> {
        let d = self.timeout;
        self.call_on(
            self.images.clone(),
            "ListImages",
            None,
            None,
            d,
            0,
            cri::ListImagesRequest { filter },
            |mut c, r| async move { c.list_images(r).await },
            |_, _, _| {},
        )
        .await
        .map(|r| r.images)
        .map_err(|o| Self::fail("ListImages", None, None, d, o))
    }

    /// ImageStatus (ImageService) of `image`; None if the runtime does not
    /// have it.
    pub async fn image_status(&self, image: &str) -> Result<Option<cri::Image>> {
        let d = self.timeout;
        let req = cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            verbose: false,
        };
        self.call_on(
            self.images.clone(),
            "ImageStatus",
            None,
            None,
            d,
            0,
            req,
            |mut c, r| async move { c.image_status(r).await },
            |_, _, _| {},
        )
        .await
        .map(|r| r.image)
        .map_err(|o| Self::fail("ImageStatus", None, None, d, o))
    }

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

    fn container_id(c: &ContainerRef) -> Result<String> {
        c.id.clone()
            .ok_or_else(|| DriverError::Invalid(format!("container {} has no id", c.name)))
    }

    fn sandbox_id(p: &PodRef) -> Result<String> {
        p.sandbox_id
            .clone()
            .ok_or_else(|| DriverError::Invalid(format!("pod {} has no sandbox id", p.name)))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ns_mode(m: i32) -> cri::NamespaceMode {
        cri::NamespaceMode::try_from(m).unwrap()
    }

    #[test]
    fn host_network_pod_config() {
        let mut p = PodSpec::new("web-0", "lab", true);
        p.labels.insert("app".into(), "web".into());
        p.annotations.insert("a".into(), "b".into());
        let c = p.to_config();
        let m = c.metadata.as_ref().unwrap();
        assert_eq!(
            (
                m.name.as_str(),
                m.namespace.as_str(),
                m.uid.as_str(),
                m.attempt
            ),
            ("web-0", "lab", p.uid.as_str(), 0)
        );
        assert_eq!(c.hostname, "", "host-network pods leave hostname unset");
        assert_eq!(c.log_directory, "");
        let no = c
            .linux
            .as_ref()
            .unwrap()
            .security_context
            .as_ref()
            .unwrap()
            .namespace_options
            .as_ref()
            .unwrap();
        assert_eq!(ns_mode(no.network), cri::NamespaceMode::Node);
        assert_eq!(ns_mode(no.pid), cri::NamespaceMode::Container);
        assert_eq!(ns_mode(no.ipc), cri::NamespaceMode::Pod);
        assert_eq!(c.labels[LABEL_POD_UID], p.uid);
        assert_eq!(c.labels[LABEL_POD_NAME], "web-0");
        assert_eq!(c.labels[LABEL_POD_NAMESPACE], "lab");
        assert_eq!(c.labels["app"], "web");
        assert_eq!(c.annotations["a"], "b");
        assert!(p.validate().is_ok());
        p.hostname = Some("x".into());
        assert!(p.validate().unwrap_err().contains("hostname"));
        assert_eq!(p.to_config().hostname, "", "never sent for host network");
    }

    #[test]
    fn own_netns_pod_config() {
        let mut p = PodSpec::new("db-1", "lab", false).with_log_root(Some(Path::new("/tmp/logs")));
        p.share_pid = true;
        p.attempt = 3;
        let c = p.to_config();
        assert_eq!(c.hostname, "db-1");
        assert_eq!(c.log_directory, format!("/tmp/logs/lab_db-1_{}", p.uid));
        let no = c
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns_mode(no.network), cri::NamespaceMode::Pod);
        assert_eq!(ns_mode(no.pid), cri::NamespaceMode::Pod);
        assert_eq!(c.metadata.unwrap().attempt, 3);
        assert_eq!(p.pod_ref(Some("abc")).sandbox_id.as_deref(), Some("abc"));
        let long = PodSpec::new("a".repeat(70), "lab", false);
        assert_eq!(long.effective_hostname().len(), 63);
    }

    #[test]
    fn container_config() {
        let p = PodSpec::new("p", "lab", true);
        let mut c = ContainerSpec::new("main");
        c.env.push(("K".into(), "V".into()));
        c.attempt = 2;
        let cfg = c.to_config(&p);
        assert_eq!(cfg.metadata.as_ref().unwrap().name, "main");
        assert_eq!(cfg.metadata.as_ref().unwrap().attempt, 2);
        assert_eq!(cfg.image.as_ref().unwrap().image, BUSYBOX_IMAGE);
        assert_eq!(cfg.command, ["sleep", "3600"]);
        assert!(cfg.args.is_empty());
        assert_eq!(
            cfg.envs,
            [cri::KeyValue {
                key: "K".into(),
                value: "V".into()
            }]
        );
        assert_eq!(cfg.log_path, "", "no pod log directory: no log path");
        assert_eq!(cfg.labels[LABEL_CONTAINER_NAME], "main");
        assert_eq!(cfg.labels[LABEL_POD_UID], p.uid);
        let no = cfg
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns_mode(no.network), cri::NamespaceMode::Node);
        let p2 = PodSpec::new("p", "lab", false).with_log_root(Some(Path::new("/l")));
        assert_eq!(c.to_config(&p2).log_path, "main/2.log");
        assert!(cfg.mounts.is_empty());
        let mut m = ContainerSpec::new("m");
        m.mounts
            .push(MountSpec::parse("/var/lib/x/fuse:/hang").unwrap());
        let mounts = m.to_config(&p).mounts;
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].host_path, "/var/lib/x/fuse");
        assert_eq!(mounts[0].container_path, "/hang");
        assert_eq!(
            mounts[0].propagation,
            cri::MountPropagation::PropagationPrivate as i32
        );
        assert!(!mounts[0].readonly);
        assert!(MountSpec::parse("/a").is_err());
        assert!(MountSpec::parse("a:/b").is_err());
        let ig = ContainerSpec::ignoring_sigterm("x");
        assert_eq!(ig.command[0], "sh");
        assert!(ig.command[2].contains("trap \"\" TERM"));
    }

    #[test]
    fn uids_are_v4_and_distinct() {
        let a = new_uid();
        let b = new_uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            ..Default::default()
        };
        let b: Vec<u128> = (1..=5).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(b, [100, 200, 350, 350, 350]);
        assert_eq!(p.backoff(1000), Duration::from_millis(350));
    }

    #[test]
    fn retry_loop_retries_timeouts_and_what_follows() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            budget: Duration::from_secs(2),
            retry_deadline: Some(Duration::from_secs(9)),
            ..Default::default()
        };
        let mut lp = RetryLoop::new(&p, Duration::from_millis(5));
        assert_eq!(lp.deadline(), Duration::from_millis(5));
        assert_eq!(
            lp.failed_at(&Outcome::DeadlineExceeded, Duration::ZERO),
            Some(Duration::from_millis(100))
        );
        assert_eq!(lp.retry, 1);
        assert_eq!(
            lp.deadline(),
            Duration::from_secs(9),
            "retries get the retry deadline"
        );
        let reserved = Outcome::Error {
            code: 2,
            message: "failed to reserve sandbox name".into(),
        };
        assert_eq!(
            lp.failed_at(&reserved, Duration::from_millis(200)),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            lp.failed_at(&reserved, Duration::from_millis(500)),
            Some(Duration::from_millis(400))
        );
        // 1.7 s + 0.8 s > 2 s budget
        assert_eq!(lp.failed_at(&reserved, Duration::from_millis(1700)), None);
        assert_eq!(lp.failures.len(), 4);
        assert_eq!(lp.retry, 3);
        assert_eq!(lp.tries, 4);
    }

    #[test]
    fn retry_loop_new_request_keeps_budget_and_deadline() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            budget: Duration::from_secs(10),
            retry_deadline: Some(Duration::from_secs(9)),
            ..Default::default()
        };
        let mut lp = RetryLoop::new(&p, Duration::from_millis(1));
        lp.failed_at(&Outcome::DeadlineExceeded, Duration::ZERO);
        let reserved = Outcome::Error {
            code: 2,
            message: "failed to reserve container name".into(),
        };
        assert_eq!(
            lp.failed_at(&reserved, Duration::ZERO),
            Some(Duration::from_millis(200))
        );
        lp.new_request();
        assert_eq!(lp.retry, 0, "a bumped attempt is a new request");
        assert_eq!(
            lp.deadline(),
            Duration::from_secs(9),
            "not the short first deadline again"
        );
        assert!(lp.timed_out());
        // An error on the new request's first try is still retried: the
        // chain began with a timeout.
        assert_eq!(
            lp.failed_at(&reserved, Duration::ZERO),
            Some(Duration::from_millis(400))
        );
        assert_eq!(lp.retry, 1);
    }

    #[test]
    fn retry_loop_first_error_is_final() {
        let p = RetryPolicy::default();
        let mut lp = RetryLoop::new(&p, Duration::from_secs(1));
        assert_eq!(
            lp.failed_at(
                &Outcome::Error {
                    code: 5,
                    message: "not found".into()
                },
                Duration::ZERO
            ),
            None
        );
        assert_eq!(lp.retry, 0);
        let none = RetryPolicy::none();
        let mut lp = RetryLoop::new(&none, Duration::from_secs(1));
        assert_eq!(
            lp.failed_at(&Outcome::DeadlineExceeded, Duration::ZERO),
            None,
            "no budget, no retry"
        );
        let same = RetryPolicy::default();
        let mut lp = RetryLoop::new(&same, Duration::from_secs(3));
        lp.failed_at(&Outcome::DeadlineExceeded, Duration::ZERO);
        assert_eq!(
            lp.deadline(),
            Duration::from_secs(3),
            "kubelet: same deadline on retries"
        );
    }

    #[test]
    fn classify_outcomes() {
        let d = Duration::from_millis(10);
        let late = Duration::from_millis(11);
        let early = Duration::from_millis(1);
        assert_eq!(
            classify(&Status::cancelled("Timeout expired"), early, d),
            Outcome::DeadlineExceeded
        );
        assert_eq!(
            classify(
                &Status::deadline_exceeded("context deadline exceeded"),
                late,
                d
            ),
            Outcome::DeadlineExceeded
        );
        assert_eq!(
            classify(&Status::deadline_exceeded("plugin timed out"), early, d),
            Outcome::Error {
                code: Code::DeadlineExceeded as i32,
                message: "plugin timed out".into()
            }
        );
        assert_eq!(
            classify(&Status::unknown("boom"), late, d),
            Outcome::Error {
                code: 2,
                message: "boom".into()
            }
        );
        assert_eq!(
            describe(&Outcome::Error {
                code: 2,
                message: "boom".into()
            }),
            "Unknown (2): boom"
        );
    }

    #[test]
    fn reserved_name_id() {
        let m = r#"failed to reserve sandbox name "p_ns_uid_0": name "p_ns_uid_0" is reserved for "0123abcd""#;
        assert_eq!(reserved_for(m), Some("0123abcd"));
        assert_eq!(reserved_for("failed to reserve sandbox name"), None);
        assert_eq!(reserved_for(r#"is reserved for """#), None);
    }

    #[test]
    fn socket_name_follows_the_runtime() {
        assert_eq!(socket_name(None, None), "containerd.sock");
        assert_eq!(socket_name(None, Some("crio")), "crio.sock");
        assert_eq!(socket_name(Some("crio\n"), None), "crio.sock");
        // The one that runs wins over the one asked for.
        assert_eq!(
            socket_name(Some("containerd-2.1"), Some("crio")),
            "containerd.sock"
        );
        assert_eq!(
            socket_name(Some("crio"), Some("containerd-1.7")),
            "crio.sock"
        );
    }

    #[test]
    fn default_socket_follows_lab_dir() {
        // Only reads the variable; other tests do not set it.
        let s = default_socket();
        assert!(s.ends_with("run/containerd.sock") || s.ends_with("run/crio.sock"));
    }
}
