//! NRI calls: each ttrpc request on an NRI connection matched with its
//! response, typed, with the plugin it went to and how it ended
//! ([`NriCall`]), and what the NRI assembler yields ([`NriObservation`]).
//! The assembler that makes them from captured bytes is
//! `assemble::nri` (how calls are matched, timed and ended is told there).

use serde::{Deserialize, Serialize};

/// An NRI event, the protobuf enum (`pkg/api/api.proto` `Event`).
pub use crate::decode::nri::message::Event;
/// An NRI method: the Runtime service's, the Plugin service's, or an
/// event's own (decode/nri/message.rs).
pub use crate::decode::nri::message::Method as NriMethod;
use crate::decode::trace_context::TraceContext;

use crate::{
    basic_types::{ConnId, Timestamp},
    capture::Peer,
    decode::nri::message,
};

use super::plugin_identity::{self, InferredIdentity};
pub(crate) use super::plugin_identity::{ENV_PLUGIN_IDX, ENV_PLUGIN_NAME};

/// Where a plugin's identity came from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentitySource {
    /// The plugin's RegisterPlugin request, seen on the wire.
    RegisterPlugin,
    /// Worked out from the plugin's process (argv flags, argv\[0\],
    /// NRI_PLUGIN_NAME / NRI_PLUGIN_IDX): it registered before the capture
    /// started. `PluginId::inferred` says how ([`plugin_identity`]).
    #[serde(alias = "prelaunch_env")]
    Inferred,
    /// The peer process of the connection (comm, pid), nothing in it
    /// naming the plugin: an external plugin that registered before the
    /// capture started.
    PeerProcess,
    /// Nothing tells: no registration seen and no peer process found.
    Unknown,
}

/// Who is at the other end of an NRI connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginId {
    /// Plugin name (RegisterPlugin, or inferred).
    pub name: Option<String>,
    /// Plugin index ("NN"), which orders deliveries.
    pub index: Option<String>,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub source: IdentitySource,
    /// With [`IdentitySource::Inferred`]: which source decided the name
    /// and index, what was read, and what disagrees with it. A
    /// RegisterPlugin seen later replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inferred: Option<InferredIdentity>,
}

impl PluginId {
    fn unknown() -> Self {
        PluginId {
            name: None,
            index: None,
            pid: None,
            comm: None,
            source: IdentitySource::Unknown,
            inferred: None,
        }
    }

    pub(crate) fn from_peer(peer: Option<&Peer>) -> Self {
        let Some(p) = peer else {
            return Self::unknown();
        };
        let guess = plugin_identity::infer(&p.cmdline, p.comm.as_deref(), &p.env);
        let source = if guess.is_some() {
            IdentitySource::Inferred
        } else {
            IdentitySource::PeerProcess
        };
        let (name, index, inferred) = match guess {
            Some(g) => (g.name, g.index, Some(g.how)),
            None => (None, None, None),
        };
        PluginId {
            name,
            index,
            pid: Some(p.pid),
            comm: p.comm.clone(),
            source,
            inferred,
        }
    }

    /// "NN-name" as NRI names plugins, else `comm[pid]`, else "?".
    pub fn label(&self) -> String {
        match (&self.index, &self.name, &self.comm, self.pid) {
            (Some(i), Some(n), _, _) => format!("{i}-{n}"),
            (None, Some(n), _, _) => n.clone(),
            (_, None, Some(c), Some(pid)) => format!("{c}[{pid}]"),
            (_, None, None, Some(pid)) => format!("pid {pid}"),
            _ => "?".into(),
        }
    }
}

/// Which side called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Caller {
    /// The runtime called the plugin (Plugin service: events, Configure...).
    Runtime,
    /// The plugin called the runtime (RegisterPlugin, UpdateContainers).
    Plugin,
}

/// A pod as NRI describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The pod's network namespace file, when it has its own (NRI
    /// `LinuxPodSandbox.namespaces`, type "network"): the path the runtime
    /// unmounts and removes at teardown (the conformance table's netns
    /// clause, engine/conformance.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
}

impl std::fmt::Display for PodRef {
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

/// A container as NRI describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRef {
    pub id: String,
    pub name: String,
    /// Its state as the runtime told the plugin (`created`, `running`,
    /// `stopped`, `paused`; nri api.proto `ContainerState`), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Its exit code, when the runtime says it finished (NRI >= 0.9 sends
    /// `finished_at` and `exit_code`; older runtimes neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

impl std::fmt::Display for ContainerRef {
    /// Its name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NriOutcome {
    Ok,
    /// The callee answered with an error status (gRPC code and message).
    Error {
        code: i32,
        message: String,
    },
    /// No response by the request's deadline (`timeout_nano`): the caller
    /// gave up on it. Either the connection was closed once the timeout had
    /// run out, or the deadline passed with the connection left open.
    TimedOut,
    /// No response, and the connection was closed before the timeout.
    ConnectionClosed,
    /// No response before the capture ended.
    NoResponse,
}

impl NriOutcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, NriOutcome::Ok)
    }

    /// In words, for evidence and explanations ("error 2: refused").
    pub fn describe(&self) -> String {
        match self {
            NriOutcome::Ok => "ok".into(),
            NriOutcome::Error { code, message } => format!("error {code}: {message}"),
            NriOutcome::TimedOut => "timed out".into(),
            NriOutcome::ConnectionClosed => "connection closed".into(),
            NriOutcome::NoResponse => "no response".into(),
        }
    }
}

/// One NRI call: a request and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NriCall {
    pub conn: ConnId,
    /// Multiplexer conn_id (1: Plugin service, 2: Runtime service).
    pub mux_conn: u32,
    pub stream_id: u32,
    pub plugin: PluginId,
    pub caller: Caller,
    /// The method (written as its name on the wire); `None` for a partial
    /// call (response only).
    #[serde(serialize_with = "ser_method", deserialize_with = "de_method")]
    pub method: Option<NriMethod>,
    #[serde(serialize_with = "ser_event", deserialize_with = "de_event")]
    pub event: Option<Event>,
    pub pod: Option<PodRef>,
    pub container: Option<ContainerRef>,
    /// When the request was sent (`None` for a partial call).
    pub start: Option<Timestamp>,
    /// When the response came (`None` without one).
    pub end: Option<Timestamp>,
    /// end - start, or how long the runtime waited before closing.
    pub duration_ns: Option<u64>,
    /// The plugin's own time: from its read of the request's last byte to
    /// its write of the response's last byte, when the plugin's end of the
    /// connection is captured too (`ConnOpen::other_end`). Unlike
    /// `duration_ns` it leaves out the runtime's delay in picking up the
    /// response.
    pub plugin_ns: Option<u64>,
    pub outcome: NriOutcome,
    /// The request's ttrpc timeout (the runtime's plugin request timeout).
    pub timeout_nano: Option<i64>,
    /// Only the response was seen: the request went before the capture
    /// started (or was lost).
    pub partial: bool,
    /// What the request carried and the response returned, in short
    /// (adjustments and updates, subscribed events, pods synchronized...).
    pub summary: String,
    /// Synchronize: the ids of the pods the runtime told the plugin about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synchronized_pods: Vec<String>,
    /// Synchronize: the ids of the containers the runtime told the plugin
    /// about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synchronized_containers: Vec<String>,
    /// A Synchronize part with more to come (NRI >= 0.7 splits a state too
    /// big for one ttrpc message): how the plugin answered it. `None` for
    /// every other call, the last part of a split one included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_part: Option<SplitPart>,
    /// What the plugin's reply did to the container, typed (the
    /// adjustment-rejected rule reads it): a CreateContainer reply's
    /// adjustment, a ValidateContainerAdjustment reply's verdict. `None`
    /// for every other call, a CreateContainer that adjusted nothing, and
    /// without a decoded response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjustment: Option<Adjustment>,
    /// Configure: the runtime as its request named it, typed (the TUI's
    /// header and the conformance tables read it; `summary` only words
    /// it). `None` for every other call, and without a decoded request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configured_runtime: Option<ConfiguredRuntime>,
    /// The `traceparent` the runtime put in the request's ttrpc metadata:
    /// the span of its own client call (containerd 2.2+ through
    /// otelttrpc, when its tracing is on). `None` without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<TraceContext>,
}

/// The runtime a Configure request names: `ConfigureRequest`'s
/// `runtime_name` and `runtime_version`, and `NRI_version` (sent since
/// NRI v0.10; containerd/nri `pkg/api/api.proto`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfiguredRuntime {
    pub name: String,
    pub version: String,
    /// Empty from runtimes before NRI v0.10.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nri_version: String,
}

impl std::fmt::Display for ConfiguredRuntime {
    /// "NAME VERSION", and " (NRI V)" when the runtime said.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.version)?;
        if !self.nri_version.is_empty() {
            write!(f, " (NRI {})", self.nri_version)?;
        }
        Ok(())
    }
}

/// A plugin's reply about a container's adjustment (NRI v0.10+
/// `ValidateContainerAdjustmentResponse`; `ContainerAdjustment`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Adjustment {
    /// CreateContainer: the parts of the container the plugin adjusted
    /// ("hooks", "env", "seccomp", ...: [`adjusted_parts`]).
    Made { parts: Vec<String> },
    /// ValidateContainerAdjustment: the validator's verdict on every
    /// plugin's adjustments, and its reason when it rejected them.
    Validated { rejected: bool, reason: String },
}

/// The plugin's answer to a Synchronize part sent with `more` set. The
/// runtime wants `more` echoed and no updates before the last part, else
/// it closes the plugin ("plugin does not handle split sync requests":
/// containerd/nri v0.7+ `pkg/adaptation/plugin.go` `synchronize`; the
/// v0.7+ `pkg/stub` answers `SynchronizeResponse{More: req.More}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitPart {
    /// The response's `more`; `None` without a decoded response.
    pub reply_more: Option<bool>,
    /// Container updates the response carried.
    pub reply_updates: usize,
}

impl SplitPart {
    /// Answered as the split protocol asks (`more` echoed, no updates);
    /// `None` while no response was decoded.
    pub fn follows_protocol(&self) -> Option<bool> {
        Some(self.reply_more? && self.reply_updates == 0)
    }
}

impl NriCall {
    /// Its method's name on the wire, when known.
    pub fn method_name(&self) -> Option<&'static str> {
        self.method.map(NriMethod::name)
    }

    /// An `Unimplemented` answer to a per-event method from a plugin built
    /// on an older stub: the runtime calls its StateChange with the same
    /// event next ([`Method::falls_back_to_state_change`]). The plugin did
    /// not fail the event; rules and error counts leave it out.
    pub fn is_fallback_refusal(&self) -> bool {
        matches!(&self.outcome, NriOutcome::Error { code, .. } if *code == message::CODE_UNIMPLEMENTED)
            && self
                .method
                .is_some_and(NriMethod::falls_back_to_state_change)
    }
}

/// An optional value written as its name (`name`), or null.
fn ser_named<T: Copy, S: serde::Serializer>(
    v: Option<T>,
    name: fn(T) -> &'static str,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(name(v)),
        None => s.serialize_none(),
    }
}

/// An optional value read back from its name by `parse` (`what` names
/// the kind in the error), as [`ser_named`] writes it.
fn de_named<'de, T, D: serde::Deserializer<'de>>(
    d: D,
    parse: fn(&str) -> Option<T>,
    what: &str,
) -> Result<Option<T>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(n) => parse(&n)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown NRI {what} {n:?}"))),
    }
}

#[allow(
    clippy::ref_option,
    clippy::trivially_copy_pass_by_ref,
    reason = "serde passes a reference"
)]
fn ser_event<S: serde::Serializer>(e: &Option<Event>, s: S) -> Result<S::Ok, S::Error> {
    ser_named(*e, |e| e.as_str_name(), s)
}

/// The event by its protobuf name, as [`ser_event`] writes it.
fn de_event<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Event>, D::Error> {
    de_named(d, Event::from_str_name, "event")
}

#[allow(
    clippy::ref_option,
    clippy::trivially_copy_pass_by_ref,
    reason = "serde passes a reference"
)]
fn ser_method<S: serde::Serializer>(m: &Option<NriMethod>, s: S) -> Result<S::Ok, S::Error> {
    ser_named(*m, NriMethod::name, s)
}

/// The method by its name on the wire, as [`ser_method`] writes it.
fn de_method<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<NriMethod>, D::Error> {
    de_named(d, NriMethod::from_name, "method")
}

/// `events` by their protobuf names, joined by `sep`
/// ("RUN_POD_SANDBOX|STOP_POD_SANDBOX"): a subscription in words.
pub(crate) fn join_events(events: &[Event], sep: &str) -> String {
    events
        .iter()
        .map(Event::as_str_name)
        .collect::<Vec<_>>()
        .join(sep)
}

/// A plugin's subscribed events, `Option<Vec<Event>>`, as their protobuf
/// names (`RUN_POD_SANDBOX`, ...), as NriCall's `event` is written.
pub(crate) mod subscribed_events {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Event;

    #[allow(clippy::ref_option, reason = "serde passes a reference")]
    pub(crate) fn serialize<S: Serializer>(
        v: &Option<Vec<Event>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(events) => s.collect_seq(events.iter().map(Event::as_str_name)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<Event>>, D::Error> {
        let Some(names) = Option::<Vec<String>>::deserialize(d)? else {
            return Ok(None);
        };
        names
            .iter()
            .map(|n| {
                Event::from_str_name(n)
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown NRI event {n:?}")))
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }
}

/// The NRI (module) versions a connection's ends announced: the plugin's
/// stub in RegisterPlugin, the runtime's in Configure (`NRI_version`, sent
/// since NRI v0.10; containerd 2.3.7 sends "v0.12.0"). Empty from older
/// ends, and for a connection joined after its handshake.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NriVersions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
}

impl NriVersions {
    pub fn is_empty(&self) -> bool {
        self.plugin.is_none() && self.runtime.is_none()
    }
}

/// What the assembler yields.
// Observations are consumed at once; calls dominate the stream.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NriObservation {
    /// A finished call.
    Call(NriCall),
    /// A teardown hook was called (StopContainer, RemoveContainer,
    /// StopPodSandbox, RemovePodSandbox): its `Call` follows when it ends.
    /// Until then, a stuck pod may be waiting on it (`explain`).
    Pending(NriCall),
    /// An NRI connection was seen for the first time (or its plugin
    /// identity improved, e.g. on RegisterPlugin).
    Plugin {
        conn: ConnId,
        ts: Timestamp,
        plugin: PluginId,
        /// Subscribed events (Configure response), when seen.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            with = "subscribed_events"
        )]
        events: Option<Vec<Event>>,
        /// The NRI versions the two ends said, when seen.
        #[serde(default, skip_serializing_if = "NriVersions::is_empty")]
        nri_version: NriVersions,
    },
    /// An NRI connection closed.
    PluginGone {
        conn: ConnId,
        ts: Timestamp,
        plugin: PluginId,
    },
    /// The decoder skipped bytes to find the next frame (mid-stream attach,
    /// lost bytes, or garbage); `mux_conn` 0 means the multiplexer layer.
    Resync {
        conn: ConnId,
        ts: Timestamp,
        mux_conn: u32,
        skipped: usize,
    },
}
