//! CRI messages (`runtime.v1` RuntimeService and ImageService, k8s.io
//! cri-api `pkg/apis/runtime/v1/api.proto`) with the prost types of the
//! `k8s-cri` crate: the method table, what a request or response says
//! about pods and containers, and a shape test used to recover the method
//! of a call whose `:path` is hidden in an unknown HPACK slot.

use super::cri_api as cri;
use prost_cri::Message;
use serde::{Deserialize, Serialize};

/// The two CRI gRPC services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum CriService {
    #[serde(rename = "runtime.v1.RuntimeService")]
    Runtime,
    #[serde(rename = "runtime.v1.ImageService")]
    Image,
}

impl CriService {
    pub fn name(self) -> &'static str {
        match self {
            CriService::Runtime => "runtime.v1.RuntimeService",
            CriService::Image => "runtime.v1.ImageService",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "runtime.v1.RuntimeService" => Some(CriService::Runtime),
            "runtime.v1.ImageService" => Some(CriService::Image),
            _ => None,
        }
    }
}

/// Why a message did not decode as the type of its method.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{method} {what}: {reason}")]
pub struct MessageDecodeError {
    pub method: &'static str,
    pub what: &'static str,
    pub reason: String,
}

/// How well `bytes` fits message `T`: `None` unless it decodes as `T`, `T`
/// re-encodes to nearly the same length, and no string field holds control
/// characters (what a nested message read as a string looks like).
///
/// Length: prost drops unknown fields and fails on a wire-type mismatch, so
/// a message of another type with fields `T` lacks re-encodes shorter or
/// does not decode (length, not bytes: map entries are serialized in no
/// fixed order). But a newer runtime's message has fields this build's CRI
/// (k8s-cri 0.11, CRI v1 of about Kubernetes 1.32) lacks: containerd
/// 2.3.7's ContainerStatus carries one more (a late-attach grpc-go run read
/// every ContainerStatus as ExecSync, whose two bytes fields swallow
/// anything). So up to an eighth of the bytes may be fields `T` does not
/// know, and an exact fit ranks above such a fit with as many leaves.
///
/// `Some(score)`: twice the non-default leaf fields, plus one for an exact
/// fit, so a reading that sees a nested message's fields scores above one
/// that swallows it as bytes ([`leaf_count`](super::leaf_count)).
fn fit_score<T: Message + Default + Serialize>(bytes: &[u8]) -> Option<usize> {
    let m = T::decode(bytes).ok()?;
    let unknown = bytes.len().checked_sub(m.encoded_len())?;
    if unknown.saturating_mul(UNKNOWN_SHARE_MAX) > bytes.len() {
        return None;
    }
    let leaves = super::leaf_count::leaves(&m)?;
    Some(leaves * 2 + usize::from(unknown == 0))
}

/// At most 1/this of a message may be fields its type lacks ([`fit_score`]).
const UNKNOWN_SHARE_MAX: usize = 8;

macro_rules! cri_methods {
    ($( $variant:ident : $service:ident, $req:ident => $resp:ident ; )*) => {
        /// A CRI method (api.proto `service RuntimeService` / `ImageService`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum CriMethod { $( $variant, )* }

        impl CriMethod {
            /// Every method, in api.proto order.
            pub const ALL: &'static [CriMethod] = &[ $( CriMethod::$variant, )* ];

            /// The method name, as in `:path`.
            pub fn name(self) -> &'static str {
                match self { $( CriMethod::$variant => stringify!($variant), )* }
            }

            pub fn service(self) -> CriService {
                match self { $( CriMethod::$variant => CriService::$service, )* }
            }

            /// How well `bytes` fits this method's request (see
            /// `fit_score`); `None`: it does not.
            pub fn request_fit(self, bytes: &[u8]) -> Option<usize> {
                match self { $( CriMethod::$variant => fit_score::<cri::$req>(bytes), )* }
            }

            /// How well `bytes` fits this method's response.
            pub fn response_fit(self, bytes: &[u8]) -> Option<usize> {
                match self { $( CriMethod::$variant => fit_score::<cri::$resp>(bytes), )* }
            }
        }
    };
}

cri_methods! {
    Version: Runtime, VersionRequest => VersionResponse;
    RunPodSandbox: Runtime, RunPodSandboxRequest => RunPodSandboxResponse;
    StopPodSandbox: Runtime, StopPodSandboxRequest => StopPodSandboxResponse;
    RemovePodSandbox: Runtime, RemovePodSandboxRequest => RemovePodSandboxResponse;
    PodSandboxStatus: Runtime, PodSandboxStatusRequest => PodSandboxStatusResponse;
    ListPodSandbox: Runtime, ListPodSandboxRequest => ListPodSandboxResponse;
    CreateContainer: Runtime, CreateContainerRequest => CreateContainerResponse;
    StartContainer: Runtime, StartContainerRequest => StartContainerResponse;
    StopContainer: Runtime, StopContainerRequest => StopContainerResponse;
    RemoveContainer: Runtime, RemoveContainerRequest => RemoveContainerResponse;
    ListContainers: Runtime, ListContainersRequest => ListContainersResponse;
    ContainerStatus: Runtime, ContainerStatusRequest => ContainerStatusResponse;
    UpdateContainerResources: Runtime, UpdateContainerResourcesRequest => UpdateContainerResourcesResponse;
    ReopenContainerLog: Runtime, ReopenContainerLogRequest => ReopenContainerLogResponse;
    ExecSync: Runtime, ExecSyncRequest => ExecSyncResponse;
    Exec: Runtime, ExecRequest => ExecResponse;
    Attach: Runtime, AttachRequest => AttachResponse;
    PortForward: Runtime, PortForwardRequest => PortForwardResponse;
    ContainerStats: Runtime, ContainerStatsRequest => ContainerStatsResponse;
    ListContainerStats: Runtime, ListContainerStatsRequest => ListContainerStatsResponse;
    PodSandboxStats: Runtime, PodSandboxStatsRequest => PodSandboxStatsResponse;
    ListPodSandboxStats: Runtime, ListPodSandboxStatsRequest => ListPodSandboxStatsResponse;
    UpdateRuntimeConfig: Runtime, UpdateRuntimeConfigRequest => UpdateRuntimeConfigResponse;
    Status: Runtime, StatusRequest => StatusResponse;
    CheckpointContainer: Runtime, CheckpointContainerRequest => CheckpointContainerResponse;
    GetContainerEvents: Runtime, GetEventsRequest => ContainerEventResponse;
    ListMetricDescriptors: Runtime, ListMetricDescriptorsRequest => ListMetricDescriptorsResponse;
    ListPodSandboxMetrics: Runtime, ListPodSandboxMetricsRequest => ListPodSandboxMetricsResponse;
    RuntimeConfig: Runtime, RuntimeConfigRequest => RuntimeConfigResponse;
    UpdatePodSandboxResources: Runtime, UpdatePodSandboxResourcesRequest => UpdatePodSandboxResourcesResponse;
    ListImages: Image, ListImagesRequest => ListImagesResponse;
    ImageStatus: Image, ImageStatusRequest => ImageStatusResponse;
    PullImage: Image, PullImageRequest => PullImageResponse;
    RemoveImage: Image, RemoveImageRequest => RemoveImageResponse;
    ImageFsInfo: Image, ImageFsInfoRequest => ImageFsInfoResponse;
}

impl CriMethod {
    /// The method of a `:path` service and method name.
    pub fn from_path_parts(service: &str, method: &str) -> Option<Self> {
        let service = CriService::from_name(service)?;
        CriMethod::ALL
            .iter()
            .copied()
            .find(|m| m.service() == service && m.name() == method)
    }

    /// `/runtime.v1.RuntimeService/RunPodSandbox`.
    pub fn path(self) -> String {
        format!("/{}/{}", self.service().name(), self.name())
    }

    /// What the method does to the object its request names, if anything:
    /// used to tell methods whose messages look alike apart by what the
    /// runtime reports about the object afterwards.
    pub fn effect(self) -> Option<Effect> {
        Some(match self {
            CriMethod::StopPodSandbox => Effect::SandboxStopped,
            CriMethod::RemovePodSandbox => Effect::SandboxRemoved,
            CriMethod::StartContainer => Effect::ContainerStarted,
            CriMethod::StopContainer => Effect::ContainerStopped,
            CriMethod::RemoveContainer => Effect::ContainerRemoved,
            _ => return None,
        })
    }

    /// Methods whose successful response always carries something (a
    /// status, a version, a URL, stats): an empty response is not theirs.
    pub fn ok_response_never_empty(self) -> bool {
        matches!(
            self,
            CriMethod::Version
                | CriMethod::RunPodSandbox
                | CriMethod::PodSandboxStatus
                | CriMethod::CreateContainer
                | CriMethod::ContainerStatus
                | CriMethod::Exec
                | CriMethod::Attach
                | CriMethod::PortForward
                | CriMethod::ContainerStats
                | CriMethod::PodSandboxStats
                | CriMethod::Status
        )
    }

    /// Methods that only read state (a poll), never change it.
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            CriMethod::Version
                | CriMethod::PodSandboxStatus
                | CriMethod::ListPodSandbox
                | CriMethod::ListContainers
                | CriMethod::ContainerStatus
                | CriMethod::ContainerStats
                | CriMethod::ListContainerStats
                | CriMethod::PodSandboxStats
                | CriMethod::ListPodSandboxStats
                | CriMethod::Status
                | CriMethod::ListMetricDescriptors
                | CriMethod::ListPodSandboxMetrics
                | CriMethod::RuntimeConfig
                | CriMethod::ListImages
                | CriMethod::ImageStatus
                | CriMethod::ImageFsInfo
        )
    }
}

impl CriMethod {
    /// The names of `methods` joined by `sep` ("StopPodSandbox or
    /// RemovePodSandbox"): an unknown call's candidates in words.
    pub fn join(methods: &[CriMethod], sep: &str) -> String {
        methods
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(sep)
    }

    /// The method named `name` (as in `:path`).
    pub fn from_name(name: &str) -> Option<Self> {
        CriMethod::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// What field 1 of its request holds, when an object id: the pod
    /// sandbox id (`pod_sandbox_id`) or the container id (`container_id`)
    /// of api.proto, the id [`decode_request`] reads. List filters (field
    /// 1 is a message) are not ids.
    pub fn request_names(self) -> Option<ObjectKind> {
        use CriMethod as M;
        match self {
            M::StopPodSandbox
            | M::RemovePodSandbox
            | M::PodSandboxStatus
            | M::PodSandboxStats
            | M::PortForward
            | M::UpdatePodSandboxResources
            | M::CreateContainer => Some(ObjectKind::Sandbox),
            M::StartContainer
            | M::StopContainer
            | M::RemoveContainer
            | M::ContainerStatus
            | M::ContainerStats
            | M::UpdateContainerResources
            | M::ReopenContainerLog
            | M::ExecSync
            | M::Exec
            | M::Attach
            | M::CheckpointContainer => Some(ObjectKind::Container),
            _ => None,
        }
    }
}

/// The kind of object a CRI id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Sandbox,
    Container,
}

/// Field 1 of a request read as raw protobuf, whatever the message type:
/// the id it names when it is a non-empty string of printable characters
/// (every CRI request that names one object has its id in field 1,
/// [`CriMethod::request_names`]). A method hidden by HPACK still shows
/// which object its request is about.
pub fn request_id(bytes: &[u8]) -> Option<String> {
    let mut rest = bytes;
    let mut found = None;
    while !rest.is_empty() {
        let (key, n) = varint(rest)?;
        rest = &rest[n..];
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => rest = &rest[varint(rest)?.1..],
            1 => rest = rest.get(8..)?,
            5 => rest = rest.get(4..)?,
            2 => {
                let (len, n) = varint(rest)?;
                let len = usize::try_from(len).ok()?;
                let body = rest.get(n..n.checked_add(len)?)?;
                rest = &rest[n + len..];
                if field == 1 {
                    // Protobuf keeps the last of a repeated scalar field.
                    found = Some(body);
                }
            }
            _ => return None,
        }
    }
    let text = std::str::from_utf8(found?).ok()?;
    (!text.is_empty() && !text.chars().any(char::is_control)).then(|| text.to_owned())
}

/// A protobuf varint at the start of `b`: (value, length).
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().take(10).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The state change a successful call makes (see [`CriMethod::effect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    SandboxStopped,
    SandboxRemoved,
    ContainerStarted,
    ContainerStopped,
    ContainerRemoved,
}

/// Pod identity from `PodSandboxMetadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PodMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
}

impl std::fmt::Display for PodMeta {
    /// `namespace/name`, as kubectl writes it (the name alone without a
    /// namespace).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// Container identity from `ContainerMetadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ContainerMeta {
    pub name: String,
    pub attempt: u32,
}

impl std::fmt::Display for ContainerMeta {
    /// Its name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// A sandbox state as a status or list response reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// A container state as a status or list response reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

fn sandbox_state(v: i32) -> Option<SandboxState> {
    match v {
        0 => Some(SandboxState::Ready),
        1 => Some(SandboxState::NotReady),
        _ => None,
    }
}

fn container_state(v: i32) -> Option<ContainerState> {
    match v {
        0 => Some(ContainerState::Created),
        1 => Some(ContainerState::Running),
        2 => Some(ContainerState::Exited),
        3 => Some(ContainerState::Unknown),
        _ => None,
    }
}

/// What a request names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub pod: Option<PodMeta>,
    pub sandbox_id: Option<String>,
    pub container: Option<ContainerMeta>,
    pub container_id: Option<String>,
    /// A list request's filter: it may leave objects out of the response.
    pub filtered: bool,
    /// StopContainer's timeout, seconds (negative ones left out).
    pub stop_timeout_s: Option<u64>,
    /// A short human summary (image, timeout, command...).
    pub summary: String,
}

/// A sandbox a response reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSeen {
    pub id: String,
    pub pod: Option<PodMeta>,
    pub state: Option<SandboxState>,
}

/// A container a response reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSeen {
    pub id: String,
    pub sandbox_id: Option<String>,
    pub container: Option<ContainerMeta>,
    pub state: Option<ContainerState>,
}

/// What a response says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseInfo {
    /// RunPodSandbox's new sandbox id.
    pub sandbox_id: Option<String>,
    /// CreateContainer's new container id.
    pub container_id: Option<String>,
    /// Sandboxes reported (status, list).
    pub sandboxes: Vec<SandboxSeen>,
    /// Containers reported (status, list).
    pub containers: Vec<ContainerSeen>,
    /// The response lists objects (so one missing from an unfiltered list
    /// is gone).
    pub is_list: bool,
    pub summary: String,
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn pod_meta(m: Option<&cri::PodSandboxMetadata>) -> Option<PodMeta> {
    m.map(|m| PodMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        attempt: m.attempt,
    })
}

fn container_meta(m: Option<&cri::ContainerMetadata>) -> Option<ContainerMeta> {
    m.map(|m| ContainerMeta {
        name: m.name.clone(),
        attempt: m.attempt,
    })
}

fn decode<T: Message + Default>(
    method: CriMethod,
    what: &'static str,
    bytes: &[u8],
) -> Result<T, MessageDecodeError> {
    T::decode(bytes).map_err(|e| MessageDecodeError {
        method: method.name(),
        what,
        reason: e.to_string(),
    })
}

fn image_name(i: Option<&cri::ImageSpec>) -> String {
    i.map(|i| i.image.clone()).unwrap_or_default()
}

/// Decode `bytes` as `method`'s request and say what it names.
pub fn decode_request(method: CriMethod, bytes: &[u8]) -> Result<RequestInfo, MessageDecodeError> {
    use CriMethod as M;
    let mut info = RequestInfo::default();
    macro_rules! req {
        ($t:ident) => {
            decode::<cri::$t>(method, "request", bytes)?
        };
    }
    match method {
        M::RunPodSandbox => {
            let r = req!(RunPodSandboxRequest);
            info.pod = pod_meta(r.config.as_ref().and_then(|c| c.metadata.as_ref()));
            if !r.runtime_handler.is_empty() {
                info.summary = format!("handler {}", r.runtime_handler);
            }
        }
        M::StopPodSandbox => {
            info.sandbox_id = non_empty(&req!(StopPodSandboxRequest).pod_sandbox_id)
        }
        M::RemovePodSandbox => {
            info.sandbox_id = non_empty(&req!(RemovePodSandboxRequest).pod_sandbox_id)
        }
        M::PodSandboxStatus => {
            info.sandbox_id = non_empty(&req!(PodSandboxStatusRequest).pod_sandbox_id)
        }
        M::PodSandboxStats => {
            info.sandbox_id = non_empty(&req!(PodSandboxStatsRequest).pod_sandbox_id)
        }
        M::PortForward => info.sandbox_id = non_empty(&req!(PortForwardRequest).pod_sandbox_id),
        M::UpdatePodSandboxResources => {
            info.sandbox_id = non_empty(&req!(UpdatePodSandboxResourcesRequest).pod_sandbox_id)
        }
        M::ListPodSandbox => {
            let r = req!(ListPodSandboxRequest);
            info.filtered = r.filter.as_ref().is_some_and(|f| {
                !f.id.is_empty() || f.state.is_some() || !f.label_selector.is_empty()
            });
            if let Some(f) = r.filter.filter(|f| !f.id.is_empty()) {
                info.sandbox_id = Some(f.id);
            }
        }
        M::CreateContainer => {
            let r = req!(CreateContainerRequest);
            info.sandbox_id = non_empty(&r.pod_sandbox_id);
            info.container = container_meta(r.config.as_ref().and_then(|c| c.metadata.as_ref()));
            info.pod = pod_meta(r.sandbox_config.as_ref().and_then(|c| c.metadata.as_ref()));
            info.summary = image_name(r.config.as_ref().and_then(|c| c.image.as_ref()));
        }
        M::StartContainer => {
            info.container_id = non_empty(&req!(StartContainerRequest).container_id)
        }
        M::StopContainer => {
            let r = req!(StopContainerRequest);
            info.container_id = non_empty(&r.container_id);
            info.stop_timeout_s = u64::try_from(r.timeout).ok();
            info.summary = format!("timeout {} s", r.timeout);
        }
        M::RemoveContainer => {
            info.container_id = non_empty(&req!(RemoveContainerRequest).container_id)
        }
        M::ContainerStatus => {
            info.container_id = non_empty(&req!(ContainerStatusRequest).container_id)
        }
        M::ContainerStats => {
            info.container_id = non_empty(&req!(ContainerStatsRequest).container_id)
        }
        M::UpdateContainerResources => {
            info.container_id = non_empty(&req!(UpdateContainerResourcesRequest).container_id)
        }
        M::ReopenContainerLog => {
            info.container_id = non_empty(&req!(ReopenContainerLogRequest).container_id)
        }
        M::ExecSync => {
            let r = req!(ExecSyncRequest);
            info.container_id = non_empty(&r.container_id);
            info.summary = format!("cmd {:?}", r.cmd);
        }
        M::Exec => info.container_id = non_empty(&req!(ExecRequest).container_id),
        M::Attach => info.container_id = non_empty(&req!(AttachRequest).container_id),
        M::CheckpointContainer => {
            info.container_id = non_empty(&req!(CheckpointContainerRequest).container_id)
        }
        M::ListContainers => {
            let r = req!(ListContainersRequest);
            if let Some(f) = r.filter {
                info.filtered = !f.id.is_empty()
                    || f.state.is_some()
                    || !f.pod_sandbox_id.is_empty()
                    || !f.label_selector.is_empty();
                info.container_id = non_empty(&f.id);
                info.sandbox_id = non_empty(&f.pod_sandbox_id);
            }
        }
        M::PullImage => {
            let r = req!(PullImageRequest);
            info.pod = pod_meta(r.sandbox_config.as_ref().and_then(|c| c.metadata.as_ref()));
            info.summary = image_name(r.image.as_ref());
        }
        M::ImageStatus => info.summary = image_name(req!(ImageStatusRequest).image.as_ref()),
        M::RemoveImage => info.summary = image_name(req!(RemoveImageRequest).image.as_ref()),
        // Requests that name no pod or container: still checked.
        M::Version => drop(req!(VersionRequest)),
        M::ListContainerStats => drop(req!(ListContainerStatsRequest)),
        M::ListPodSandboxStats => drop(req!(ListPodSandboxStatsRequest)),
        M::UpdateRuntimeConfig => drop(req!(UpdateRuntimeConfigRequest)),
        M::Status => drop(req!(StatusRequest)),
        M::GetContainerEvents => drop(req!(GetEventsRequest)),
        M::ListMetricDescriptors => drop(req!(ListMetricDescriptorsRequest)),
        M::ListPodSandboxMetrics => drop(req!(ListPodSandboxMetricsRequest)),
        M::RuntimeConfig => drop(req!(RuntimeConfigRequest)),
        M::ListImages => drop(req!(ListImagesRequest)),
        M::ImageFsInfo => drop(req!(ImageFsInfoRequest)),
    }
    Ok(info)
}

fn sandbox_seen(id: &str, meta: Option<&cri::PodSandboxMetadata>, state: i32) -> SandboxSeen {
    SandboxSeen {
        id: id.to_owned(),
        pod: pod_meta(meta),
        state: sandbox_state(state),
    }
}

/// Decode `bytes` as `method`'s response and say what it reports.
pub fn decode_response(
    method: CriMethod,
    bytes: &[u8],
) -> Result<ResponseInfo, MessageDecodeError> {
    use CriMethod as M;
    let mut info = ResponseInfo::default();
    macro_rules! resp {
        ($t:ident) => {
            decode::<cri::$t>(method, "response", bytes)?
        };
    }
    match method {
        M::Version => {
            let r = resp!(VersionResponse);
            info.summary = format!(
                "{} {} (CRI {})",
                r.runtime_name, r.runtime_version, r.runtime_api_version
            );
        }
        M::RunPodSandbox => {
            info.sandbox_id = non_empty(&resp!(RunPodSandboxResponse).pod_sandbox_id)
        }
        M::CreateContainer => {
            info.container_id = non_empty(&resp!(CreateContainerResponse).container_id)
        }
        M::PodSandboxStatus => {
            if let Some(s) = resp!(PodSandboxStatusResponse).status {
                info.sandboxes
                    .push(sandbox_seen(&s.id, s.metadata.as_ref(), s.state));
            }
        }
        M::ListPodSandbox => {
            let r = resp!(ListPodSandboxResponse);
            info.is_list = true;
            info.summary = format!("{} sandboxes", r.items.len());
            info.sandboxes = r
                .items
                .iter()
                .map(|s| sandbox_seen(&s.id, s.metadata.as_ref(), s.state))
                .collect();
        }
        M::ContainerStatus => {
            if let Some(s) = resp!(ContainerStatusResponse).status {
                if s.state == 2 {
                    info.summary = format!("exit code {}", s.exit_code);
                }
                info.containers.push(ContainerSeen {
                    id: s.id.clone(),
                    sandbox_id: None,
                    container: container_meta(s.metadata.as_ref()),
                    state: container_state(s.state),
                });
            }
        }
        M::ListContainers => {
            let r = resp!(ListContainersResponse);
            info.is_list = true;
            info.summary = format!("{} containers", r.containers.len());
            info.containers = r
                .containers
                .iter()
                .map(|c| ContainerSeen {
                    id: c.id.clone(),
                    sandbox_id: non_empty(&c.pod_sandbox_id),
                    container: container_meta(c.metadata.as_ref()),
                    state: container_state(c.state),
                })
                .collect();
        }
        M::ExecSync => info.summary = format!("exit code {}", resp!(ExecSyncResponse).exit_code),
        M::PullImage => info.summary = resp!(PullImageResponse).image_ref,
        M::ListImages => {
            info.summary = format!("{} images", resp!(ListImagesResponse).images.len())
        }
        M::GetContainerEvents => {
            let r = resp!(ContainerEventResponse);
            info.summary = format!("event {} on {}", r.container_event_type, r.container_id);
        }
        // The rest is checked for shape only.
        m => {
            if m.response_fit(bytes).is_none() && !bytes.is_empty() {
                // Decodes (wire types agree) but carries fields the type
                // lacks: a newer API. Still the method's response.
                info.summary = "fields unknown to this build".into();
            }
            decode_any_response(m, bytes)?;
        }
    }
    Ok(info)
}

/// Check that `bytes` decodes as `method`'s response type.
fn decode_any_response(method: CriMethod, bytes: &[u8]) -> Result<(), MessageDecodeError> {
    macro_rules! check {
        ($($m:ident => $t:ident),* $(,)?) => {
            match method {
                $( CriMethod::$m => { decode::<cri::$t>(method, "response", bytes)?; } )*
                _ => {}
            }
        };
    }
    check!(
        StopPodSandbox => StopPodSandboxResponse,
        RemovePodSandbox => RemovePodSandboxResponse,
        StartContainer => StartContainerResponse,
        StopContainer => StopContainerResponse,
        RemoveContainer => RemoveContainerResponse,
        UpdateContainerResources => UpdateContainerResourcesResponse,
        UpdatePodSandboxResources => UpdatePodSandboxResourcesResponse,
        ReopenContainerLog => ReopenContainerLogResponse,
        Exec => ExecResponse,
        Attach => AttachResponse,
        PortForward => PortForwardResponse,
        ContainerStats => ContainerStatsResponse,
        ListContainerStats => ListContainerStatsResponse,
        PodSandboxStats => PodSandboxStatsResponse,
        ListPodSandboxStats => ListPodSandboxStatsResponse,
        UpdateRuntimeConfig => UpdateRuntimeConfigResponse,
        Status => StatusResponse,
        CheckpointContainer => CheckpointContainerResponse,
        ListMetricDescriptors => ListMetricDescriptorsResponse,
        ListPodSandboxMetrics => ListPodSandboxMetricsResponse,
        RuntimeConfig => RuntimeConfigResponse,
        ImageStatus => ImageStatusResponse,
        RemoveImage => RemoveImageResponse,
        ImageFsInfo => ImageFsInfoResponse,
    );
    Ok(())
}

/// The methods whose request and response shapes fit the bytes seen best
/// (`None`: that message was not seen, e.g. an error response). Several
/// when they fit equally well: the messages alone cannot tell them apart.
pub fn candidates(request: Option<&[u8]>, response: Option<&[u8]>) -> Vec<CriMethod> {
    let scored: Vec<(CriMethod, usize)> = CriMethod::ALL
        .iter()
        .filter(|m| !(response.is_some_and(<[u8]>::is_empty) && m.ok_response_never_empty()))
        .filter_map(|&m| {
            let q = request.map_or(Some(0), |b| m.request_fit(b))?;
            let r = response.map_or(Some(0), |b| m.response_fit(b))?;
            Some((m, q + r))
        })
        .collect();
    let best = scored.iter().map(|&(_, s)| s).max().unwrap_or(0);
    scored
        .into_iter()
        .filter(|&(_, s)| s == best)
        .map(|(m, _)| m)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc<T: Message>(m: &T) -> Vec<u8> {
        m.encode_to_vec()
    }

    /// The table of [`CriMethod::request_names`] is what
    /// [`decode_request`] reads: a request whose field 1 is the string
    /// "abc" names sandbox or container "abc" exactly for those methods;
    /// [`request_id`] reads it back whatever the method.
    #[test]
    fn request_names_is_what_decode_reads() {
        let raw = [0x0a, 3, b'a', b'b', b'c'];
        assert_eq!(request_id(&raw).as_deref(), Some("abc"));
        for &m in CriMethod::ALL {
            let info = decode_request(m, &raw).unwrap_or_default();
            let got = match (info.sandbox_id.as_deref(), info.container_id.as_deref()) {
                (Some("abc"), _) => Some(ObjectKind::Sandbox),
                (_, Some("abc")) => Some(ObjectKind::Container),
                _ => None,
            };
            assert_eq!(got, m.request_names(), "{m:?}");
            assert_eq!(CriMethod::from_name(m.name()), Some(m));
        }
        // A message in field 1 (a list filter), a truncated field, an
        // empty string: no id.
        assert_eq!(request_id(&[0x0a, 2, 0x0a, 0]), None);
        assert_eq!(request_id(&[0x0a, 5, b'a']), None);
        assert_eq!(request_id(&[0x0a, 0]), None);
        assert_eq!(request_id(&[0x10, 1]), None);
        // Other fields around it are skipped.
        let with_timeout = cri::StopContainerRequest {
            container_id: "c1".into(),
            timeout: 30,
        };
        assert_eq!(request_id(&enc(&with_timeout)).as_deref(), Some("c1"));
    }

    #[test]
    fn paths_round_trip() {
        for &m in CriMethod::ALL {
            let p = m.path();
            let (s, n) = crate::decode::cri::grpc::split_path(&p).unwrap();
            assert_eq!(CriMethod::from_path_parts(s, n), Some(m));
        }
        // k8s-cri 0.11's 34, and UpdatePodSandboxResources (cri_api.rs).
        assert_eq!(CriMethod::ALL.len(), 35);
        assert_eq!(
            CriMethod::from_path_parts("runtime.v1alpha2.RuntimeService", "Version"),
            None
        );
    }

    #[test]
    fn run_pod_sandbox_identity() {
        let req = cri::RunPodSandboxRequest {
            config: Some(cri::PodSandboxConfig {
                metadata: Some(cri::PodSandboxMetadata {
                    name: "web".into(),
                    uid: "u1".into(),
                    namespace: "prod".into(),
                    attempt: 2,
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        };
        let info = decode_request(CriMethod::RunPodSandbox, &enc(&req)).unwrap();
        assert_eq!(
            info.pod,
            Some(PodMeta {
                name: "web".into(),
                namespace: "prod".into(),
                uid: "u1".into(),
                attempt: 2
            })
        );
        let resp = cri::RunPodSandboxResponse {
            pod_sandbox_id: "abc".into(),
        };
        let r = decode_response(CriMethod::RunPodSandbox, &enc(&resp)).unwrap();
        assert_eq!(r.sandbox_id.as_deref(), Some("abc"));
    }

    #[test]
    fn shapes_tell_distinct_messages_apart() {
        let req = enc(&cri::RunPodSandboxRequest {
            config: Some(cri::PodSandboxConfig {
                metadata: Some(cri::PodSandboxMetadata {
                    name: "web".into(),
                    ..Default::default()
                }),
                hostname: "web".into(),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        });
        let resp = enc(&cri::RunPodSandboxResponse {
            pod_sandbox_id: "a".repeat(64),
        });
        assert_eq!(
            candidates(Some(&req), Some(&resp)),
            vec![CriMethod::RunPodSandbox]
        );
    }

    #[test]
    fn look_alikes_stay_ambiguous() {
        // StopPodSandbox and RemovePodSandbox: {1: id} -> {}.
        let req = enc(&cri::StopPodSandboxRequest {
            pod_sandbox_id: "a".repeat(64),
        });
        let c = candidates(Some(&req), Some(&[]));
        assert!(c.contains(&CriMethod::StopPodSandbox));
        assert!(c.contains(&CriMethod::RemovePodSandbox));
        assert!(c.contains(&CriMethod::StartContainer));
        // A status response tells the status methods apart from the rest,
        // not from each other (PodSandboxStatus and ContainerStatus
        // both begin {1: id, 2: metadata, 3: state}): which kind of id it is
        // must tell (assemble/cri/).
        let status = enc(&cri::PodSandboxStatusResponse {
            status: Some(cri::PodSandboxStatus {
                id: "a".repeat(64),
                state: 1,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            candidates(Some(&req), Some(&status)),
            vec![CriMethod::PodSandboxStatus, CriMethod::ContainerStatus]
        );
    }

    #[test]
    fn extra_fields_do_not_fit() {
        // StopContainer with a timeout is not a StartContainer request.
        let req = enc(&cri::StopContainerRequest {
            container_id: "c".into(),
            timeout: 30,
        });
        assert!(CriMethod::StopContainer.request_fit(&req).is_some());
        assert!(CriMethod::StartContainer.request_fit(&req).is_none());
    }

    /// containerd 2.3.7's ContainerStatus carries a field k8s-cri 0.11
    /// lacks (here field 19 of the status, a nested message, as CRI's
    /// newer `stop_signal`): still ContainerStatus (or PodSandboxStatus,
    /// its look-alike), not ExecSync, whose bytes fields swallow anything.
    #[test]
    fn a_newer_runtimes_extra_field_still_fits_its_method() {
        let req = enc(&cri::ContainerStatusRequest {
            container_id: "c".repeat(64),
            verbose: false,
        });
        let mut status = enc(&cri::ContainerStatus {
            id: "c".repeat(64),
            metadata: Some(cri::ContainerMetadata {
                name: "main".into(),
                attempt: 0,
            }),
            state: 1,
            created_at: 1_795_000_000_000_000_000,
            image: Some(cri::ImageSpec {
                image: "localhost/nri-trace/busybox:lab".into(),
                ..Default::default()
            }),
            image_ref: format!("sha256:{}", "a".repeat(64)),
            log_path: "/var/log/pods/x/main/0.log".into(),
            ..Default::default()
        });
        // Field 19, wire type 2: {1: 15}.
        status.extend_from_slice(&[0x9a, 0x01, 0x02, 0x08, 0x0f]);
        let mut resp = vec![0x0a];
        prost_cri::encoding::encode_varint(status.len() as u64, &mut resp);
        resp.extend_from_slice(&status);
        let c = candidates(Some(&req), Some(&resp));
        assert!(c.contains(&CriMethod::ContainerStatus), "{c:?}");
        assert!(!c.contains(&CriMethod::ExecSync), "{c:?}");
        // Exactly as before, without the extra field.
        let exact = enc(&cri::ContainerStatusResponse {
            status: Some(cri::ContainerStatus::decode(&status[..status.len() - 5]).unwrap()),
            ..Default::default()
        });
        assert!(
            CriMethod::ContainerStatus.response_fit(&exact)
                > CriMethod::ContainerStatus.response_fit(&resp)
        );
    }

    proptest::proptest! {
        #![proptest_config(crate::decode::test_strategies::config(8))]

        /// Random bytes of every length below 200 (the prefixes of 199
        /// random bytes) never make a method's request or response
        /// decoding, or the method candidates, panic.
        #[test]
        fn garbage_never_panics(
            random in crate::decode::test_strategies::bytes(proptest::strategy::Just(199usize)),
        ) {
            for len in 0..=random.len() {
                let bytes = &random[..len];
                for &m in CriMethod::ALL {
                    let _ = decode_request(m, bytes);
                    let _ = decode_response(m, bytes);
                }
                let _ = candidates(Some(bytes), Some(bytes));
            }
        }
    }
}
