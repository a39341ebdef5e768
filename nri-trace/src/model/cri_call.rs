//! CRI calls: each gRPC stream on the runtime's CRI socket (kubelet ->
//! containerd / CRI-O) as one [`CriCall`]: method, pod and container
//! identity, timing, deadline and outcome; and what the CRI assembler yields
//! ([`CriObservation`]). The assembler that makes them from captured bytes,
//! and how it recovers the method of a call whose `:path` it never saw, is
//! `assemble::cri`.

use serde::{Deserialize, Serialize};

use super::cri_client::CriClient;
use crate::basic_types::{ConnId, Timestamp};
pub use crate::decode::trace_context::TraceContext;
// The CRI's vocabulary, decoded from its protobuf messages (decode/cri/
// message.rs) and named here, where the calls that carry it are.
pub use crate::decode::cri::message::{
    ContainerMeta, CriMethod, CriService, Effect, ObjectKind, PodMeta,
};

/// The CRI calls of a pod's teardown, kubelet's order (StopContainer per
/// container, StopPodSandbox, RemovePodSandbox; RemoveContainer where a
/// client removes containers itself). The assembler reports each as
/// [`CriObservation::Pending`] once its request is seen: a terminating pod
/// waits on the one not answered yet.
pub(crate) const TEARDOWN_METHODS: [CriMethod; 4] = [
    CriMethod::StopContainer,
    CriMethod::RemoveContainer,
    CriMethod::StopPodSandbox,
    CriMethod::RemovePodSandbox,
];

/// The method of a call: a CRI method, or another gRPC method seen on the
/// CRI socket (the last part of its `:path`, or the whole path when it has
/// no service part). Written and read as its name (`"RunPodSandbox"`), so
/// the JSON of a call is the same as when it was a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallMethod {
    Cri(CriMethod),
    Other(String),
}

impl CallMethod {
    /// The method from its name: a CRI method's, or another.
    pub fn from_name(name: &str) -> Self {
        CriMethod::from_name(name)
            .map_or_else(|| CallMethod::Other(name.to_owned()), CallMethod::Cri)
    }

    pub fn name(&self) -> &str {
        match self {
            CallMethod::Cri(m) => m.name(),
            CallMethod::Other(s) => s,
        }
    }

    /// The CRI method, if it is one.
    pub fn cri(&self) -> Option<CriMethod> {
        match self {
            CallMethod::Cri(m) => Some(*m),
            CallMethod::Other(_) => None,
        }
    }
}

impl From<CriMethod> for CallMethod {
    fn from(m: CriMethod) -> Self {
        CallMethod::Cri(m)
    }
}

impl From<&str> for CallMethod {
    fn from(name: &str) -> Self {
        CallMethod::from_name(name)
    }
}

/// By name, as the JSON and the people reading it do.
impl PartialEq<str> for CallMethod {
    fn eq(&self, name: &str) -> bool {
        self.name() == name
    }
}

impl std::fmt::Display for CallMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for CallMethod {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for CallMethod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(CallMethod::from_name(&name))
    }
}

/// How the method of a call is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Identified {
    /// `:path` seen on the wire.
    Known,
    /// Recovered from other evidence (see the module doc).
    Inferred { evidence: String },
    /// Could not be told apart from these.
    Unknown { candidates: Vec<CriMethod> },
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CriOutcome {
    Ok,
    /// A gRPC status other than OK (from the server's trailers).
    Error {
        code: u32,
        status: String,
        message: String,
    },
    /// The client's deadline expired: it reset the stream (RST_STREAM
    /// CANCEL) once its grpc-timeout had run out. What a kubelet timeout
    /// looks like.
    DeadlineExceeded,
    /// The client reset the stream (CANCEL) before its deadline.
    Cancelled,
    /// Another reset (by the server, or another error code).
    Reset {
        by: String,
        error_code: u32,
        error: String,
    },
    /// The connection closed before the call ended.
    ConnectionClosed,
    /// The capture ended before the call did.
    NoResponse,
    /// The call ended but its status is hidden in pre-attach HPACK slots
    /// and no response message tells it.
    Unknown,
    /// The call ended with its status hidden in pre-attach HPACK slots
    /// and without a response message: it failed. A CRI call is unary,
    /// and a unary call that succeeds carries its one response message
    /// before the trailers; a response without one is gRPC's
    /// Trailers-Only form, which the protocol keeps for a call that fails
    /// (grpc PROTOCOL-HTTP2.md, "Responses"). Its code and message are
    /// what HPACK hid (after a late attach, an error the runtime had
    /// already sent is indexed whole).
    Failed,
}

/// gRPC's DEADLINE_EXCEEDED status code (grpc `codes.DeadlineExceeded`).
pub(crate) const GRPC_DEADLINE_EXCEEDED: u32 = 4;

impl CriOutcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, CriOutcome::Ok)
    }

    /// The call's deadline ran out: the client's expiry, or the server's
    /// DEADLINE_EXCEEDED status when it reached the socket first (CRI-O
    /// answers a retry it held for the name reservation when the request's
    /// context ends: `server/utils.go` getResourceOrWait). Both are what
    /// the client reports as DeadlineExceeded.
    pub fn deadline_expired(&self) -> bool {
        matches!(
            self,
            CriOutcome::DeadlineExceeded
                | CriOutcome::Error {
                    code: GRPC_DEADLINE_EXCEEDED,
                    ..
                }
        )
    }

    /// In words, for evidence and explanations.
    pub fn describe(&self) -> String {
        match self {
            CriOutcome::Ok => "ok".into(),
            CriOutcome::Error {
                code,
                status,
                message,
            } => format!("error {code} {status}: {message}"),
            CriOutcome::DeadlineExceeded => "the client's deadline expired".into(),
            CriOutcome::Cancelled => "cancelled by the client".into(),
            CriOutcome::Reset { by, error, .. } => format!("reset by the {by} ({error})"),
            CriOutcome::ConnectionClosed => "the connection closed before an answer".into(),
            CriOutcome::NoResponse => "no answer yet".into(),
            CriOutcome::Unknown => "ended, outcome unknown".into(),
            CriOutcome::Failed => "failed (no response; its status hidden by HPACK)".into(),
        }
    }
}

/// One CRI call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriCall {
    pub conn: ConnId,
    pub stream_id: u32,
    /// e.g. RunPodSandbox; `None` when unknown.
    pub method: Option<CallMethod>,
    /// e.g. "runtime.v1.RuntimeService".
    pub service: Option<String>,
    pub identified: Identified,
    pub pod: Option<PodMeta>,
    pub sandbox_id: Option<String>,
    pub container: Option<ContainerMeta>,
    pub container_id: Option<String>,
    /// The id field 1 of the request holds, when the method is unknown and
    /// no earlier call said whether it is a pod sandbox or a container
    /// (`message::request_id`): a later stage that sees the object named
    /// elsewhere (an NRI delivery during the call) can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// When the request headers went through (`None`: partial call).
    pub start: Option<Timestamp>,
    pub end: Option<Timestamp>,
    pub duration_ns: Option<u64>,
    /// The client's deadline (grpc-timeout) when seen.
    pub deadline_ns: Option<u64>,
    /// StopContainer's `timeout` (seconds): how long the runtime waits
    /// after SIGTERM before SIGKILL; kubelet passes what is left of the
    /// pod's grace period (k8s.io/cri-api api.proto `StopContainerRequest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_timeout_s: Option<u64>,
    /// The `traceparent` the client sent in the call's gRPC metadata
    /// (kubelet with its tracing on): the client's span of this call.
    /// `None` without one, or when HPACK hid it (a late attach).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<TraceContext>,
    pub outcome: CriOutcome,
    /// Set when the outcome itself is inferred (trailers hidden).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome_evidence: Option<String>,
    /// The request headers went before the attach (or were lost).
    pub partial: bool,
    pub summary: String,
    /// Who made it: its connection's client, when the capture could tell
    /// (model/cri_client.rs). Absent in record files written before it
    /// was, which replay as unknown.
    #[serde(default)]
    pub client: Option<CriClient>,
}

impl CriCall {
    /// Whether it is a call of CRI method `m`.
    pub fn is(&self, m: CriMethod) -> bool {
        self.cri_method() == Some(m)
    }

    /// Its CRI method, when known and one.
    pub fn cri_method(&self) -> Option<CriMethod> {
        self.method.as_ref().and_then(CallMethod::cri)
    }

    /// Its method's name, when known.
    pub fn method_name(&self) -> Option<&str> {
        self.method.as_ref().map(CallMethod::name)
    }
}

/// What the assembler yields.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CriObservation {
    Call(CriCall),
    /// A teardown call's request was seen, its response not yet
    /// ([`TEARDOWN_METHODS`]): the call as far as it goes (outcome
    /// `NoResponse`, no end). Its `Call` follows when it ends.
    Pending(CriCall),
    /// A CRI connection was seen for the first time.
    Connection {
        conn: ConnId,
        ts: Timestamp,
        /// The client's `comm[pid]` ([`CriClient::label`]), when known.
        client: Option<String>,
        /// The client itself, when known (`client` stays the label it
        /// has been in version 1 of the schema).
        #[serde(default)]
        client_process: Option<CriClient>,
    },
    /// A CRI connection closed (its client went, or the runtime closed
    /// it): calls still open on it ended with it.
    ConnectionGone {
        conn: ConnId,
        ts: Timestamp,
        /// The client's `comm[pid]` ([`CriClient::label`]), when known.
        client: Option<String>,
    },
    /// The decoder skipped bytes to find a frame boundary.
    Resync {
        conn: ConnId,
        ts: Timestamp,
        skipped: usize,
    },
}

/// Counters of what the assembler met that is not a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CriStats {
    /// Messages that did not decode as their (known) method's type.
    pub undecodable: u64,
    /// Header blocks HPACK could not decode.
    pub header_errors: u64,
    /// Streams dropped at the per-connection bound.
    pub streams_evicted: u64,
    /// Ambiguous calls released unresolved because too many were held.
    pub held_overflow: u64,
}

/// `outcome_evidence` of a call whose connection closed after bytes of it
/// were lost while the call was open: its answer may have been in them.
pub(crate) const LOST_END_EVIDENCE: &str =
    "bytes of its connection were lost while it was open (capture loss): its end was not seen";
