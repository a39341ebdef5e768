//! The protobuf layer: what a ttrpc message of the NRI socket carries.
//!
//! A ttrpc request payload is a `ttrpc.Request` envelope (`service`,
//! `method`, `payload`, `timeout_nano`), a response payload a
//! `ttrpc.Response` (`status`, `payload`); see `proto/ttrpc/ttrpc.proto`.
//! The inner payload is an NRI message whose type the method names
//! (`proto/nri/v1alpha1/api.proto`). A response says nothing of its method:
//! its body can only be typed once it is matched to its request, so
//! [`ResponseBody::decode`] takes the request's [`Method`].
//!
//! Method names follow containerd/nri `pkg/api/api.proto` (services
//! `nri.pkg.api.v1alpha1.Plugin` and `.Runtime`, the same in every NRI
//! version 0.3 to 0.12). v0.12 runtimes first call a dedicated method per
//! event (RunPodSandbox, StopPodSandbox, ...) and fall back to StateChange
//! when the plugin answers Unimplemented; both forms decode here to the same
//! [`Event`].

use prost::Message;

use super::proto::{api, envelope};
use crate::decode::trace_context::{find_traceparent, TraceContext};

pub use api::Event;

/// The plugin-side service (runtime is the ttrpc client, mux conn_id 1).
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// The runtime-side service (plugin is the ttrpc client, mux conn_id 2).
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// Services of NRI's API, as named on the wire, start with this.
pub(crate) use super::ttrpc_header::NRI_SERVICE_PREFIX;

/// gRPC status code Unimplemented (google/rpc/code.proto), what a pre-v0.12
/// plugin answers to a per-event method it does not know.
pub(crate) const CODE_UNIMPLEMENTED: i32 = 12;

/// A payload that is not what its layer says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("ttrpc {what} envelope: {source}")]
    Envelope {
        what: &'static str,
        source: prost::DecodeError,
    },
    #[error("{method} payload: {source}")]
    Body {
        method: &'static str,
        source: prost::DecodeError,
    },
}

/// A ttrpc request, envelope decoded, body not yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireRequest {
    pub service: String,
    pub method: String,
    /// The caller's deadline in nanoseconds (0: none).
    pub timeout_nano: i64,
    pub payload: Vec<u8>,
    /// The `traceparent` among the request's metadata, when valid.
    pub traceparent: Option<TraceContext>,
}

/// A ttrpc status (google.rpc.Status without details).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: i32,
    pub message: String,
}

/// A ttrpc response, envelope decoded, body not yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireResponse {
    /// `None` or code 0: success.
    pub status: Option<Status>,
    pub payload: Vec<u8>,
}

impl WireResponse {
    /// The error status, if the call failed.
    pub fn error(&self) -> Option<&Status> {
        self.status.as_ref().filter(|s| s.code != 0)
    }
}

/// Decode the envelope of a ttrpc request payload.
pub fn decode_request(bytes: &[u8]) -> Result<WireRequest, MessageError> {
    let r = envelope::Request::decode(bytes).map_err(|source| MessageError::Envelope {
        what: "request",
        source,
    })?;
    Ok(WireRequest {
        service: r.service,
        method: r.method,
        timeout_nano: r.timeout_nano,
        payload: r.payload,
        traceparent: find_traceparent(r.metadata.iter().map(|kv| (&kv.key, &kv.value))),
    })
}

/// Decode the envelope of a ttrpc response payload.
pub fn decode_response(bytes: &[u8]) -> Result<WireResponse, MessageError> {
    let r = envelope::Response::decode(bytes).map_err(|source| MessageError::Envelope {
        what: "response",
        source,
    })?;
    Ok(WireResponse {
        status: r.status.map(|s| Status {
            code: s.code,
            message: s.message,
        }),
        payload: r.payload,
    })
}

/// An NRI method, from the (service, method) pair on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    // Runtime service (plugin -> runtime).
    RegisterPlugin,
    UpdateContainers,
    // Plugin service (runtime -> plugin).
    Configure,
    Synchronize,
    Shutdown,
    StateChange,
    /// A method dedicated to one event: CreateContainer, UpdateContainer and
    /// StopContainer in every version; the others since v0.10 / v0.12.
    Event(Event),
}

impl Method {
    /// The method for a (service, method) pair; `None` for anything that is
    /// not NRI's API.
    pub fn from_wire(service: &str, method: &str) -> Option<Method> {
        use Method::{
            Configure, Event, RegisterPlugin, Shutdown, StateChange, Synchronize, UpdateContainers,
        };
        Some(match (service, method) {
            (RUNTIME_SERVICE, "RegisterPlugin") => RegisterPlugin,
            (RUNTIME_SERVICE, "UpdateContainers") => UpdateContainers,
            (PLUGIN_SERVICE, "Configure") => Configure,
            (PLUGIN_SERVICE, "Synchronize") => Synchronize,
            (PLUGIN_SERVICE, "Shutdown") => Shutdown,
            (PLUGIN_SERVICE, "StateChange") => StateChange,
            (PLUGIN_SERVICE, m) => Event(event_of_method(m)?),
            _ => return None,
        })
    }

    /// The method named `name` on the wire, of either service.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::from_wire(RUNTIME_SERVICE, name).or_else(|| Method::from_wire(PLUGIN_SERVICE, name))
    }

    /// The method's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Method::RegisterPlugin => "RegisterPlugin",
            Method::UpdateContainers => "UpdateContainers",
            Method::Configure => "Configure",
            Method::Synchronize => "Synchronize",
            Method::Shutdown => "Shutdown",
            Method::StateChange => "StateChange",
            Method::Event(e) => method_of_event(e).unwrap_or("?"),
        }
    }
}

/// Per-event methods of the Plugin service and their events.
const EVENT_METHODS: [(&str, Event); 14] = [
    ("RunPodSandbox", Event::RunPodSandbox),
    ("StopPodSandbox", Event::StopPodSandbox),
    ("RemovePodSandbox", Event::RemovePodSandbox),
    ("CreateContainer", Event::CreateContainer),
    ("PostCreateContainer", Event::PostCreateContainer),
    ("StartContainer", Event::StartContainer),
    ("PostStartContainer", Event::PostStartContainer),
    ("UpdateContainer", Event::UpdateContainer),
    ("PostUpdateContainer", Event::PostUpdateContainer),
    ("StopContainer", Event::StopContainer),
    ("RemoveContainer", Event::RemoveContainer),
    ("UpdatePodSandbox", Event::UpdatePodSandbox),
    ("PostUpdatePodSandbox", Event::PostUpdatePodSandbox),
    (
        "ValidateContainerAdjustment",
        Event::ValidateContainerAdjustment,
    ),
];

impl Method {
    /// Whether a v0.12 runtime answered Unimplemented to this method calls
    /// the plugin's StateChange with the same event instead. Only the
    /// methods v0.12 added for events that StateChange carried before do
    /// (containerd/nri v0.12.0 `pkg/adaptation/plugin_type.go`: the
    /// `codes.Unimplemented` checks before `wrapOrigImpl`). CreateContainer,
    /// UpdateContainer and StopContainer (in every version) and v0.10's
    /// UpdatePodSandbox and ValidateContainerAdjustment have no fallback:
    /// there the error is the call's outcome.
    pub fn falls_back_to_state_change(self) -> bool {
        matches!(
            self,
            Method::Event(
                Event::RunPodSandbox
                    | Event::PostUpdatePodSandbox
                    | Event::StopPodSandbox
                    | Event::RemovePodSandbox
                    | Event::PostCreateContainer
                    | Event::StartContainer
                    | Event::PostStartContainer
                    | Event::PostUpdateContainer
                    | Event::RemoveContainer
            )
        )
    }
}

fn event_of_method(m: &str) -> Option<Event> {
    EVENT_METHODS.iter().find(|(n, _)| *n == m).map(|(_, e)| *e)
}

fn method_of_event(e: Event) -> Option<&'static str> {
    EVENT_METHODS.iter().find(|(_, x)| *x == e).map(|(n, _)| *n)
}

/// The pod and container a request is about.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subject {
    pub pod: Option<api::PodSandbox>,
    pub container: Option<api::Container>,
}

/// A request body, typed by its method.
// Short-lived (decoded, summarised, dropped): boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum RequestBody {
    RegisterPlugin(api::RegisterPluginRequest),
    UpdateContainers(api::UpdateContainersRequest),
    Configure(api::ConfigureRequest),
    Synchronize(api::SynchronizeRequest),
    Shutdown,
    /// StateChange or a per-event method: the event and what it is about.
    /// `validate` holds the extra of ValidateContainerAdjustment.
    Event {
        event: Event,
        subject: Subject,
        validate: Option<Box<api::ValidateContainerAdjustmentRequest>>,
    },
}

/// Keep only the pod and container of a decoded per-event request.
macro_rules! subject {
    ($bytes:expr, $ty:ty, $method:expr, pod) => {{
        let r = <$ty>::decode($bytes).map_err(|source| MessageError::Body {
            method: $method,
            source,
        })?;
        Subject {
            pod: r.pod,
            container: None,
        }
    }};
    ($bytes:expr, $ty:ty, $method:expr, pod, container) => {{
        let r = <$ty>::decode($bytes).map_err(|source| MessageError::Body {
            method: $method,
            source,
        })?;
        Subject {
            pod: r.pod,
            container: r.container,
        }
    }};
}

fn body<M: Message + Default>(bytes: &[u8], method: &'static str) -> Result<M, MessageError> {
    M::decode(bytes).map_err(|source| MessageError::Body { method, source })
}

impl RequestBody {
    /// Decode a request payload with the message type of `method`.
    pub fn decode(method: Method, bytes: &[u8]) -> Result<RequestBody, MessageError> {
        let name = method.name();
        Ok(match method {
            Method::RegisterPlugin => RequestBody::RegisterPlugin(body(bytes, name)?),
            Method::UpdateContainers => RequestBody::UpdateContainers(body(bytes, name)?),
            Method::Configure => RequestBody::Configure(body(bytes, name)?),
            Method::Synchronize => RequestBody::Synchronize(body(bytes, name)?),
            Method::Shutdown => {
                body::<api::Empty>(bytes, name)?;
                RequestBody::Shutdown
            }
            Method::StateChange => {
                let r: api::StateChangeEvent = body(bytes, name)?;
                RequestBody::Event {
                    event: Event::try_from(r.event).unwrap_or(Event::Unknown),
                    subject: Subject {
                        pod: r.pod,
                        container: r.container,
                    },
                    validate: None,
                }
            }
            Method::Event(event) => {
                use api::{
                    CreateContainerRequest, PostCreateContainerRequest, PostStartContainerRequest,
                    PostUpdateContainerRequest, PostUpdatePodSandboxRequest,
                    RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest,
                    StartContainerRequest, StopContainerRequest, StopPodSandboxRequest,
                    UpdateContainerRequest, UpdatePodSandboxRequest,
                    ValidateContainerAdjustmentRequest,
                };
                let mut validate = None;
                let subject = match event {
                    Event::RunPodSandbox => subject!(bytes, RunPodSandboxRequest, name, pod),
                    Event::StopPodSandbox => subject!(bytes, StopPodSandboxRequest, name, pod),
                    Event::RemovePodSandbox => {
                        subject!(bytes, RemovePodSandboxRequest, name, pod)
                    }
                    Event::UpdatePodSandbox => {
                        subject!(bytes, UpdatePodSandboxRequest, name, pod)
                    }
                    Event::PostUpdatePodSandbox => {
                        subject!(bytes, PostUpdatePodSandboxRequest, name, pod)
                    }
                    Event::CreateContainer => {
                        subject!(bytes, CreateContainerRequest, name, pod, container)
                    }
                    Event::PostCreateContainer => {
                        subject!(bytes, PostCreateContainerRequest, name, pod, container)
                    }
                    Event::StartContainer => {
                        subject!(bytes, StartContainerRequest, name, pod, container)
                    }
                    Event::PostStartContainer => {
                        subject!(bytes, PostStartContainerRequest, name, pod, container)
                    }
                    Event::UpdateContainer => {
                        subject!(bytes, UpdateContainerRequest, name, pod, container)
                    }
                    Event::PostUpdateContainer => {
                        subject!(bytes, PostUpdateContainerRequest, name, pod, container)
                    }
                    Event::StopContainer => {
                        subject!(bytes, StopContainerRequest, name, pod, container)
                    }
                    Event::RemoveContainer => {
                        subject!(bytes, RemoveContainerRequest, name, pod, container)
                    }
                    Event::ValidateContainerAdjustment => {
                        let mut r: ValidateContainerAdjustmentRequest = body(bytes, name)?;
                        let s = Subject {
                            pod: r.pod.take(),
                            container: r.container.take(),
                        };
                        validate = Some(Box::new(r));
                        s
                    }
                    // from_wire never maps a method to these.
                    Event::Unknown | Event::Last => Subject::default(),
                };
                RequestBody::Event {
                    event,
                    subject,
                    validate,
                }
            }
        })
    }
}

/// A response body, typed by the method of its request.
// Short-lived, as RequestBody.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseBody {
    /// Empty, or a per-event response without fields.
    Empty,
    Configure(api::ConfigureResponse),
    Synchronize(api::SynchronizeResponse),
    CreateContainer(api::CreateContainerResponse),
    UpdateContainer(api::UpdateContainerResponse),
    StopContainer(api::StopContainerResponse),
    UpdateContainers(api::UpdateContainersResponse),
    ValidateContainerAdjustment(api::ValidateContainerAdjustmentResponse),
}

impl ResponseBody {
    /// Decode a successful response's payload with the response type of
    /// `method`.
    pub fn decode(method: Method, bytes: &[u8]) -> Result<ResponseBody, MessageError> {
        let name = method.name();
        Ok(match method {
            Method::Configure => ResponseBody::Configure(body(bytes, name)?),
            Method::Synchronize => ResponseBody::Synchronize(body(bytes, name)?),
            Method::UpdateContainers => ResponseBody::UpdateContainers(body(bytes, name)?),
            Method::Event(Event::CreateContainer) => {
                ResponseBody::CreateContainer(body(bytes, name)?)
            }
            Method::Event(Event::UpdateContainer) => {
                ResponseBody::UpdateContainer(body(bytes, name)?)
            }
            Method::Event(Event::StopContainer) => ResponseBody::StopContainer(body(bytes, name)?),
            Method::Event(Event::ValidateContainerAdjustment) => {
                ResponseBody::ValidateContainerAdjustment(body(bytes, name)?)
            }
            // Empty and the field-less per-event responses: still check the
            // bytes are a protobuf message.
            _ => {
                body::<api::Empty>(bytes, name)?;
                ResponseBody::Empty
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::decode::test_strategies;

    #[test]
    fn methods_map_both_ways() {
        for (name, ev) in EVENT_METHODS {
            let m = Method::from_wire(PLUGIN_SERVICE, name).unwrap();
            assert_eq!(m, Method::Event(ev));
            assert_eq!(m.name(), name);
        }
        assert_eq!(
            Method::from_wire(RUNTIME_SERVICE, "RegisterPlugin"),
            Some(Method::RegisterPlugin)
        );
        assert_eq!(Method::from_wire(RUNTIME_SERVICE, "Configure"), None);
        assert_eq!(Method::from_wire("grpc.Health", "Check"), None);
        assert_eq!(
            Method::from_wire(PLUGIN_SERVICE, "StateChange"),
            Some(Method::StateChange)
        );
    }

    /// The fallback follows v0.12.0 plugin_type.go: nine methods, not
    /// the three of every version nor v0.10's two.
    #[test]
    fn state_change_fallback_only_where_v0_12_has_it() {
        let falls: Vec<&str> = EVENT_METHODS
            .iter()
            .filter(|(_, e)| Method::Event(*e).falls_back_to_state_change())
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(
            falls,
            [
                "RunPodSandbox",
                "StopPodSandbox",
                "RemovePodSandbox",
                "PostCreateContainer",
                "StartContainer",
                "PostStartContainer",
                "PostUpdateContainer",
                "RemoveContainer",
                "PostUpdatePodSandbox",
            ]
        );
        assert!(!Method::StateChange.falls_back_to_state_change());
    }

    #[test]
    fn state_change_and_per_event_decode_alike() {
        let pod = api::PodSandbox {
            id: "p1".into(),
            name: "web".into(),
            namespace: "default".into(),
            uid: "u1".into(),
            ..Default::default()
        };
        let sc = api::StateChangeEvent {
            event: Event::StopPodSandbox as i32,
            pod: Some(pod.clone()),
            container: None,
        }
        .encode_to_vec();
        let pe = api::StopPodSandboxRequest { pod: Some(pod) }.encode_to_vec();
        let a = RequestBody::decode(Method::StateChange, &sc).unwrap();
        let b = RequestBody::decode(Method::Event(Event::StopPodSandbox), &pe).unwrap();
        assert_eq!(a, b);
        match a {
            RequestBody::Event { event, subject, .. } => {
                assert_eq!(event, Event::StopPodSandbox);
                assert_eq!(subject.pod.unwrap().name, "web");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn envelope_round_trip_and_errors() {
        let req = envelope::Request {
            service: PLUGIN_SERVICE.into(),
            method: "Configure".into(),
            payload: vec![1, 2, 3],
            timeout_nano: 2_000_000_000,
            metadata: vec![],
        }
        .encode_to_vec();
        let w = decode_request(&req).unwrap();
        assert_eq!(w.method, "Configure");
        assert_eq!(w.timeout_nano, 2_000_000_000);
        assert_eq!(w.payload, vec![1, 2, 3]);
        // A length that runs past the end is an error, not an allocation.
        assert!(decode_request(&[0x1a, 0xff, 0xff, 0xff, 0x7f]).is_err());
        let resp = envelope::Response {
            status: Some(envelope::Status {
                code: CODE_UNIMPLEMENTED,
                message: "unknown method".into(),
            }),
            payload: vec![],
        }
        .encode_to_vec();
        let r = decode_response(&resp).unwrap();
        assert_eq!(r.error().unwrap().code, CODE_UNIMPLEMENTED);
        let ok = decode_response(&[]).unwrap();
        assert!(ok.error().is_none());
    }

    proptest! {
        #![proptest_config(test_strategies::config(20_000))]

        /// Any bytes, as any method's request or response: an answer or
        /// an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in test_strategies::bytes_below(97),
            method in any::<proptest::sample::Index>(),
        ) {
            let methods: Vec<Method> = [
                Method::RegisterPlugin,
                Method::UpdateContainers,
                Method::Configure,
                Method::Synchronize,
                Method::Shutdown,
                Method::StateChange,
            ]
            .into_iter()
            .chain(EVENT_METHODS.iter().map(|(_, e)| Method::Event(*e)))
            .collect();
            let m = methods[method.index(methods.len())];
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = RequestBody::decode(m, &bytes);
            let _ = ResponseBody::decode(m, &bytes);
        }
    }
}
