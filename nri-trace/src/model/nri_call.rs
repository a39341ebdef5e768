//! NRI calls: each ttrpc request on an NRI connection matched with its
//! response, typed, with the plugin it went to and how it ended.
//!
//! [`NriCallAssembler`] takes the capture stream ([`CaptureEvent`]s of the
//! runtime's NRI connections), runs the decoders of [`crate::decode::nri`]
//! on each direction of each connection, and yields [`NriObservation`]s:
//! finished [`NriCall`]s, plugins appearing and going, and resyncs.
//!
//! Matching: ttrpc stream ids are allocated per ttrpc client, and NRI runs
//! one client per mux conn_id and side (runtime on conn_id 1, plugin on
//! conn_id 2), so a call is keyed by (connection, mux conn_id, stream id,
//! direction of the request) (containerd/ttrpc `client.go`, nri
//! `pkg/net/multiplex`).
//!
//! Timing: a call starts at the syscall that wrote (or read) the last byte
//! of its request and ends at the one that carried the last byte of its
//! response, both on the runtime's side (kernel CLOCK_MONOTONIC).
//!
//! Outcome without a response: NRI has no cancel message; on a timeout the
//! runtime closes the plugin's connection (nri `pkg/adaptation/plugin.go`,
//! "closing plugin"). A request still unanswered when its connection closes
//! is [`Outcome::TimedOut`] if its `timeout_nano` had (nearly) run out, else
//! [`Outcome::ConnectionClosed`]. The runtime closes only when its own timer
//! fired (`isFatalError`: `context.DeadlineExceeded`); when the CRI caller
//! cancelled first (`context.Canceled`) its call returns and the connection
//! stays open. So a request whose deadline has passed by
//! [`DEADLINE_GRACE_NS`] of capture time is [`Outcome::TimedOut`] too, with
//! no end (nothing on the wire marks it) and its `timeout_nano` as duration.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::chunk_stamps::ChunkStamps;
use crate::{
    capture::{CaptureEvent, Chunk, CloseReason, ConnId, ConnOpen, Direction, Peer, Timestamp},
    decode::nri::{
        message::{
            self, Event, Method, RequestBody, ResponseBody, Status, Subject, WireResponse,
            NRI_SERVICE_PREFIX,
        },
        proto::api,
        ttrpc::{MessageType, MuxTtrpc, TtrpcEvent, TtrpcMessage, MUX_LEVEL},
    },
};

use super::plugin_identity::{self, InferredIdentity};
pub use super::plugin_identity::{ENV_PLUGIN_IDX, ENV_PLUGIN_NAME};

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

    fn from_peer(peer: Option<&Peer>) -> Self {
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
pub enum Outcome {
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

impl Outcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok)
    }

    /// In words, for evidence and explanations ("error 2: refused").
    pub fn describe(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::Error { code, message } => format!("error {code}: {message}"),
            Outcome::TimedOut => "timed out".into(),
            Outcome::ConnectionClosed => "connection closed".into(),
            Outcome::NoResponse => "no response".into(),
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
    /// Method name on the wire; `None` for a partial call (response only).
    pub method: Option<String>,
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
    pub outcome: Outcome,
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
    /// A Configure call's runtime, "NAME VERSION" as the runtime sent it
    /// (its summary starts "runtime NAME VERSION": `describe_request`).
    pub fn configured_runtime(&self) -> Option<&str> {
        if self.method.as_deref() != Some("Configure") {
            return None;
        }
        let rest = self.summary.strip_prefix("runtime ")?;
        let v = rest.split([',', ';']).next().unwrap_or(rest).trim();
        (!v.is_empty()).then_some(v)
    }
}

impl NriCall {
    /// An `Unimplemented` answer to a per-event method from a plugin built
    /// on an older stub: the runtime calls its StateChange with the same
    /// event next ([`Method::falls_back_to_state_change`]). The plugin did
    /// not fail the event; rules and error counts leave it out.
    pub fn is_fallback_refusal(&self) -> bool {
        matches!(&self.outcome, Outcome::Error { code, .. } if *code == message::CODE_UNIMPLEMENTED)
            && self
                .method
                .as_deref()
                .and_then(|m| Method::from_wire(message::PLUGIN_SERVICE, m))
                .is_some_and(Method::falls_back_to_state_change)
    }
}

#[allow(clippy::ref_option, reason = "serde passes a reference")]
#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde passes a reference"
)]
fn ser_event<S: serde::Serializer>(e: &Option<Event>, s: S) -> Result<S::Ok, S::Error> {
    match e {
        Some(e) => s.serialize_str(e.as_str_name()),
        None => s.serialize_none(),
    }
}

/// The event by its protobuf name, as [`ser_event`] writes it.
fn de_event<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Event>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(n) => Event::from_str_name(&n)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown NRI event {n:?}"))),
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
        #[serde(default, skip_serializing_if = "Option::is_none")]
        events: Option<Vec<String>>,
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

impl PendingCall {
    /// What a `Pending` observation shows of it (no Synchronize list).
    fn started(&self) -> PendingCall {
        PendingCall {
            method: self.method,
            event: self.event,
            pod: self.pod.clone(),
            container: self.container.clone(),
            start: self.start,
            timeout_nano: self.timeout_nano,
            summary: self.summary.clone(),
            synchronized_pods: Vec::new(),
            synchronized_containers: Vec::new(),
            split_part: None,
            adjustment: None,
        }
    }
}

#[derive(Debug)]
struct PendingCall {
    method: Method,
    event: Option<Event>,
    pod: Option<PodRef>,
    container: Option<ContainerRef>,
    start: Timestamp,
    timeout_nano: i64,
    summary: String,
    synchronized_pods: Vec<String>,
    synchronized_containers: Vec<String>,
    split_part: Option<SplitPart>,
    adjustment: Option<Adjustment>,
}

/// What the plugin's end of a connection showed of one runtime call.
#[derive(Debug, Default, Clone, Copy)]
struct PluginSide {
    recv: Option<Timestamp>,
    reply: Option<Timestamp>,
}

/// Most plugin-side entries kept per connection (a runtime side that was
/// never seen leaves them unclaimed).
const MAX_PLUGIN_SIDE: usize = 1024;

/// How far past an answered call's end the capture stream may move before
/// the call is released without its plugin-side reply.
const PLUGIN_REPLY_WAIT_NS: u64 = 5_000_000;

/// Most calls awaiting a response per connection.
const MAX_PENDING_PER_CONN: usize = 1024;

/// How far past a request's deadline the capture stream moves before the
/// call is taken as given up by its caller without a close. containerd
/// closes right when its timer fires; this leaves that close time to be
/// seen first (it tells [`Outcome::TimedOut`] from a plain close).
pub const DEADLINE_GRACE_NS: u64 = 100_000_000;

/// Deliveries open longer than this are not waited for by
/// [`NriCallAssembler::oldest_open_delivery`] (a garbled `timeout_nano`
/// must not hold the correlation of every later call).
const MAX_AWAITED_TIMEOUT_NS: u64 = 120_000_000_000;

/// Keys remembered per connection of calls given up at their deadline, so
/// a late answer is counted, not taken for a call of its own.
const MAX_GIVEN_UP_PER_CONN: usize = 64;

/// How far past a held response (see [`EarlyReply`]) the capture stream
/// may move before the response is reported as one without a request.
/// The request's stamp is late by how long its writer was kept from the
/// end of its syscall after the bytes were in the socket: scheduler
/// latency, milliseconds on a loaded machine.
const EARLY_REPLY_WAIT_NS: u64 = 1_000_000_000;

/// Most responses held per connection waiting for their request.
const MAX_EARLY_REPLIES_PER_CONN: usize = 64;

/// A response read before the request it answers was seen. The probes
/// stamp a syscall at its exit (nri-trace-ebpf), and the kernel hands a
/// write's bytes to the reader before the writer reaches its exit: a
/// runtime thread descheduled there exits after the plugin has answered
/// and the runtime's reader has read the answer (a 1 ms inversion under
/// load in trace_lab, CI 2026-11-28: a REMOVE_POD_SANDBOX reported timed
/// out within a 26 ms RemovePodSandbox). So a response with no request is
/// held until its request shows (the call then starts no later than its
/// answer) or [`EARLY_REPLY_WAIT_NS`] pass (it is reported partial: its
/// request went before the capture started, or was lost).
#[derive(Debug)]
struct EarlyReply {
    ts: Timestamp,
    resp: WireResponse,
}

/// Key of a call within one connection: mux conn_id, stream id, and the
/// direction of the request ([`dir_index`]).
type CallKey = (u32, u32, usize);

struct ConnState {
    /// This is the plugin's end of that (runtime-side) connection: its
    /// messages time the plugin's own work, they are not calls.
    mirror_of: Option<ConnId>,
    /// For a runtime-side connection: when the plugin read each request
    /// and wrote each response, by (mux conn_id, stream id).
    plugin_side: BTreeMap<(u32, u32), PluginSide>,
    /// The plugin's end of this connection is captured too.
    has_plugin_end: bool,
    decoders: [MuxTtrpc; 2],
    /// Per direction: chunk ends, so a message is stamped with the chunk
    /// that carried its last byte.
    stamps: [ChunkStamps; 2],
    plugin: PluginId,
    /// The connection is known to carry NRI (NRI socket, plugin env, or an
    /// NRI request seen): only then are partial calls and resyncs reported.
    nri: bool,
    announced: bool,
    events: Option<Vec<String>>,
    nri_version: NriVersions,
    pending: BTreeMap<CallKey, PendingCall>,
    /// Responses whose request has not shown yet ([`EarlyReply`]).
    early_replies: BTreeMap<CallKey, EarlyReply>,
    /// Calls completed at their deadline, oldest first (bounded).
    given_up: std::collections::VecDeque<CallKey>,
}

impl ConnState {
    fn new(open: Option<&ConnOpen>, nri_paths: &[std::path::PathBuf]) -> Self {
        let plugin = PluginId::from_peer(open.and_then(|o| o.peer.as_ref()));
        let by_path = open
            .and_then(|o| o.socket_path.as_ref())
            .is_some_and(|p| nri_paths.iter().any(|n| n == p));
        ConnState {
            mirror_of: open.and_then(|o| o.other_end),
            plugin_side: BTreeMap::new(),
            has_plugin_end: false,
            decoders: [MuxTtrpc::new(), MuxTtrpc::new()],
            stamps: Default::default(),
            // The runtime sets NRI_PLUGIN_NAME only for the plugins it
            // launches: such a peer is an NRI plugin whatever the socket.
            nri: by_path
                || open
                    .and_then(|o| o.peer.as_ref())
                    .is_some_and(|p| p.env.contains_key(ENV_PLUGIN_NAME)),
            plugin,
            announced: false,
            events: None,
            nri_version: NriVersions::default(),
            pending: BTreeMap::new(),
            early_replies: BTreeMap::new(),
            given_up: std::collections::VecDeque::new(),
        }
    }
}

impl ConnState {
    /// Report this connection's plugin, unless already reported since its
    /// identity or subscription last changed (which reset `announced`).
    fn announce(&mut self, conn: ConnId, ts: Timestamp, out: &mut Vec<NriObservation>) {
        if self.announced {
            return;
        }
        self.announced = true;
        out.push(NriObservation::Plugin {
            conn,
            ts,
            plugin: self.plugin.clone(),
            events: self.events.clone(),
            nri_version: self.nri_version.clone(),
        });
    }
}

fn dir_index(d: Direction) -> usize {
    match d {
        Direction::In => 0,
        Direction::Out => 1,
    }
}

fn dir_of_index(i: usize) -> Direction {
    if i == 0 {
        Direction::In
    } else {
        Direction::Out
    }
}

fn opposite(d: Direction) -> Direction {
    match d {
        Direction::In => Direction::Out,
        Direction::Out => Direction::In,
    }
}

/// Counters of what the assembler met that is not a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AssemblerStats {
    /// ttrpc messages whose envelope or body did not decode.
    pub undecodable: u64,
    /// ttrpc requests for a service that is not NRI's.
    pub not_nri: u64,
    /// Responses with no matching request on a connection not known as NRI.
    pub unmatched_ignored: u64,
    /// ttrpc data / unknown-type messages (NRI uses unary calls only).
    pub other_messages: u64,
    /// Responses to calls already reported timed out (their deadline had
    /// passed): the caller no longer waited for them.
    pub answered_after_deadline: u64,
    /// Calls whose response was read before their request's write was
    /// stamped (see [`EarlyReply`]): their start is the response's stamp.
    pub replies_before_request: u64,
}

/// Turns capture events of NRI connections into [`NriObservation`]s.
/// Pure and deterministic: the same events give the same observations.
pub struct NriCallAssembler {
    nri_paths: Vec<std::path::PathBuf>,
    conns: HashMap<ConnId, ConnState>,
    /// Answered calls whose plugin-side reply is not in yet: the plugin's
    /// write can exit its syscall (and reach the ring buffer) after the
    /// runtime's read of the same bytes has. Held until the reply shows or
    /// the stream moves [`PLUGIN_REPLY_WAIT_NS`] past the call's end.
    awaiting_reply: Vec<NriCall>,
    /// No pending call's deadline (plus grace) comes before this: the
    /// pending calls need no scan until capture time passes it.
    next_deadline: u64,
    /// The event delivery the runtime is making (see
    /// [`NriCallAssembler::check_delivery_order`]).
    round: Option<DeliveryRound>,
    /// Responses held over all connections ([`EarlyReply`]).
    early_held: usize,
    /// No held response's wait ends before this (capture time): the held
    /// responses need no scan until it passes (a flood of answers without
    /// requests would otherwise scan every connection at every event).
    early_next: u64,
    stats: AssemblerStats,
}

/// One event of one object, delivered by the runtime to its plugins one
/// after another: the connections it went to so far, in order.
struct DeliveryRound {
    event: Event,
    object: String,
    conns: Vec<ConnId>,
}

impl NriCallAssembler {
    /// `nri_paths`: the NRI socket paths; their connections are NRI from
    /// the first byte (others must show an NRI request or a pre-launched
    /// plugin's environment first).
    pub fn new(nri_paths: Vec<std::path::PathBuf>) -> Self {
        NriCallAssembler {
            nri_paths,
            conns: HashMap::new(),
            awaiting_reply: Vec::new(),
            next_deadline: u64::MAX,
            round: None,
            early_held: 0,
            early_next: u64::MAX,
            stats: AssemblerStats::default(),
        }
    }

    pub fn stats(&self) -> AssemblerStats {
        self.stats
    }

    /// Calls waiting for a response, per connection (for live views).
    pub fn in_flight(&self) -> usize {
        self.conns.values().map(|c| c.pending.len()).sum()
    }

    /// Start of the oldest event delivery (runtime to plugin) still waiting
    /// for its response, among those bound to end: by their deadline
    /// (see [`DEADLINE_GRACE_NS`]), their connection's close, or the
    /// capture's end. A later stage that pairs deliveries with what caused
    /// them waits for these.
    pub fn oldest_open_delivery(&self) -> Option<u64> {
        self.conns
            .values()
            .filter(|st| st.mirror_of.is_none())
            .flat_map(|st| st.pending.iter())
            .filter(|((_, _, dir), p)| {
                caller_of(dir_of_index(*dir)) == Caller::Runtime
                    && p.event.is_some()
                    && p.timeout_nano > 0
                    && p.timeout_nano as u64 <= MAX_AWAITED_TIMEOUT_NS
            })
            .map(|(_, p)| p.start.mono_ns)
            .min()
    }

    /// Feed one capture event.
    pub fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<NriObservation>) {
        let now = match ev {
            CaptureEvent::Open(o) => Some(o.ts.mono_ns),
            CaptureEvent::Chunk(c) => Some(c.ts.mono_ns),
            CaptureEvent::Close(c) => Some(c.ts.mono_ns),
            // Quiet sockets: a hung hook still reaches its deadline.
            CaptureEvent::Tick { ts } => Some(ts.mono_ns),
            _ => None,
        };
        if let Some(now) = now {
            self.release_early(Some(now), out);
            self.release_awaiting(Some(now), out);
            self.give_up_overdue(now, out);
        }
        match ev {
            CaptureEvent::Open(o) => {
                if let Some(rt) = o.other_end.and_then(|c| self.conns.get_mut(&c)) {
                    rt.has_plugin_end = true;
                }
                let st = ConnState::new(Some(o), &self.nri_paths);
                let st = self.conns.entry(o.conn).or_insert(st);
                if st.nri && st.mirror_of.is_none() {
                    st.announce(o.conn, o.ts, out);
                }
                // An existing connection is joined mid-stream; its decoders
                // hunt for a boundary (as every new decoder does).
            }
            CaptureEvent::Chunk(c) => self.on_chunk(c, out),
            CaptureEvent::Close(c) => {
                if let Some(mut st) = self.conns.remove(&c.conn) {
                    for (key, e) in std::mem::take(&mut st.early_replies) {
                        self.early_held -= 1;
                        out.push(NriObservation::Call(partial_reply(c.conn, &st, key, e)));
                    }
                    for (key, p) in std::mem::take(&mut st.pending) {
                        let waited = c.ts.mono_ns.saturating_sub(p.start.mono_ns);
                        let outcome = if c.reason == CloseReason::Untracked {
                            // The capture stopped, not the connection.
                            Outcome::NoResponse
                        } else if timed_out(waited, p.timeout_nano) {
                            Outcome::TimedOut
                        } else {
                            Outcome::ConnectionClosed
                        };
                        // How long the runtime waited before it closed.
                        out.push(NriObservation::Call(unanswered(
                            c.conn,
                            &st,
                            key,
                            p,
                            outcome,
                            Some(waited),
                        )));
                    }
                    if st.nri && c.reason != CloseReason::Untracked {
                        out.push(NriObservation::PluginGone {
                            conn: c.conn,
                            ts: c.ts,
                            plugin: st.plugin.clone(),
                        });
                    }
                }
            }
            CaptureEvent::Process(_)
            | CaptureEvent::Loss(_)
            | CaptureEvent::Sandbox(_)
            | CaptureEvent::CriState(_)
            | CaptureEvent::Tick { .. } => {}
        }
    }

    /// The capture ended: calls still waiting are reported as
    /// [`Outcome::NoResponse`], in connection order.
    pub fn finish(&mut self, out: &mut Vec<NriObservation>) {
        self.release_early(None, out);
        self.release_awaiting(None, out);
        let mut conns: Vec<ConnId> = self.conns.keys().copied().collect();
        conns.sort();
        for id in conns {
            let Some(st) = self.conns.get_mut(&id) else {
                continue;
            };
            let pending = std::mem::take(&mut st.pending);
            let st = &self.conns[&id];
            for (key, p) in pending {
                out.push(NriObservation::Call(unanswered(
                    id,
                    st,
                    key,
                    p,
                    Outcome::NoResponse,
                    None,
                )));
            }
        }
    }

    /// The runtime delivers `event` of `object` (a container or pod id) to
    /// the plugin of `conn`: check inferred plugin indexes against the
    /// order of the deliveries. The runtime holds one lock per NRI entry
    /// point and calls its plugins one after another sorted by index (nri
    /// `pkg/adaptation/adaptation.go` `sortPlugins`: `plugins[i].idx <
    /// plugins[j].idx`), so within one event of one object a plugin called
    /// later has an index no lower than one called before. An inferred
    /// index that breaks this is wrong (or the other plugin's is): the
    /// inference gets the conflict and low confidence, and its plugin is
    /// announced again. Registered identities are what the runtime uses:
    /// they are left alone.
    fn check_delivery_order(
        &mut self,
        conn: ConnId,
        event: Event,
        object: String,
        ts: Timestamp,
        out: &mut Vec<NriObservation>,
    ) {
        if object.is_empty() {
            return;
        }
        let earlier = match self.round.as_mut() {
            Some(r) if r.event == event && r.object == object => {
                if r.conns.last() == Some(&conn) {
                    // The same plugin again: the v0.12 per-event method,
                    // then its StateChange fallback.
                    return;
                }
                if r.conns.contains(&conn) {
                    // The same event of the same object again: a new round.
                    r.conns.clear();
                }
                let earlier = r.conns.clone();
                r.conns.push(conn);
                earlier
            }
            _ => {
                self.round = Some(DeliveryRound {
                    event,
                    object,
                    conns: vec![conn],
                });
                return;
            }
        };
        let Some(this) = self.conns.get(&conn).map(|s| s.plugin.clone()) else {
            return;
        };
        let Some(idx) = this.index.as_deref() else {
            return;
        };
        for prev in earlier {
            let Some(before) = self.conns.get(&prev).map(|s| s.plugin.clone()) else {
                continue;
            };
            if before.index.as_deref().is_none_or(|b| b <= idx) {
                continue;
            }
            let what = format!(
                "the runtime called {} before {} with {} of {object}, but it calls plugins \
                 in index order",
                before.label(),
                this.label(),
                event.as_str_name()
            );
            for c in [prev, conn] {
                let Some(st) = self.conns.get_mut(&c) else {
                    continue;
                };
                if st
                    .plugin
                    .inferred
                    .as_mut()
                    .is_some_and(|i| i.add_conflict(what.clone()))
                {
                    st.announced = false;
                    st.announce(c, ts, out);
                }
            }
        }
    }

    fn on_chunk(&mut self, c: &Chunk, out: &mut Vec<NriObservation>) {
        let nri_paths = &self.nri_paths;
        let st = self
            .conns
            .entry(c.conn)
            .or_insert_with(|| ConnState::new(None, nri_paths));
        let di = dir_index(c.direction);
        let marks = &mut st.stamps[di];
        marks.push(c.bytes.len(), c.ts);
        let d = &mut st.decoders[di];
        if c.gap_before {
            d.gap();
        }
        d.push(&c.bytes);
        // Each message stamped with the chunk that carried its last byte.
        let stamp = |end: Option<u64>| marks.stamp(end, c.ts);
        let mut decoded = Vec::new();
        while let Some((m, e, end)) = d.next_with_end() {
            decoded.push((m, e, stamp(end)));
        }
        if c.truncated {
            d.gap();
            while let Some((m, e, end)) = d.next_with_end() {
                decoded.push((m, e, stamp(end)));
            }
        }
        st.stamps[di].trim(st.decoders[di].buffered());
        for (mux_conn, ev, ts) in decoded {
            match ev {
                TtrpcEvent::Resync { skipped } => {
                    let st = &self.conns[&c.conn];
                    if st.nri {
                        out.push(NriObservation::Resync {
                            conn: c.conn,
                            ts: c.ts,
                            mux_conn,
                            skipped,
                        });
                    }
                }
                TtrpcEvent::Message(m) => self.on_message(c, ts, mux_conn, m, out),
            }
        }
    }

    /// `ts`: when the message's last byte went through (the chunk that
    /// carried it; `c` may be a later chunk that let the decoder release it).
    fn on_message(
        &mut self,
        c: &Chunk,
        ts: Timestamp,
        mux_conn: u32,
        m: TtrpcMessage,
        out: &mut Vec<NriObservation>,
    ) {
        debug_assert_ne!(mux_conn, MUX_LEVEL);
        let Some(st) = self.conns.get_mut(&c.conn) else {
            return;
        };
        if let Some(runtime_conn) = st.mirror_of {
            self.on_plugin_end(runtime_conn, c.direction, ts, mux_conn, &m, out);
            return;
        }
        match m.kind {
            MessageType::Request => {
                let Ok(req) = message::decode_request(&m.payload) else {
                    self.stats.undecodable += 1;
                    return;
                };
                let Some(method) = Method::from_wire(&req.service, &req.method) else {
                    if req.service.starts_with(NRI_SERVICE_PREFIX) {
                        // An NRI method this build does not know (a newer
                        // API): still a call, reported by name.
                        self.stats.undecodable += 1;
                    } else {
                        self.stats.not_nri += 1;
                    }
                    return;
                };
                st.nri = true;
                let body = RequestBody::decode(method, &req.payload);
                if body.is_err() {
                    self.stats.undecodable += 1;
                }
                if let Ok(RequestBody::Configure(r)) = &body {
                    if !r.nri_version.is_empty() {
                        st.nri_version.runtime = Some(r.nri_version.clone());
                        st.announced = false;
                    }
                }
                if let Ok(RequestBody::RegisterPlugin(r)) = &body {
                    if !r.nri_version.is_empty() {
                        st.nri_version.plugin = Some(r.nri_version.clone());
                    }
                    st.plugin.name = Some(r.plugin_name.clone());
                    st.plugin.index = Some(r.plugin_idx.clone());
                    st.plugin.source = IdentitySource::RegisterPlugin;
                    st.plugin.inferred = None;
                    st.announced = false;
                }
                let (synchronized_pods, synchronized_containers, split_part) = match &body {
                    Ok(RequestBody::Synchronize(r)) => (
                        r.pods.iter().map(|p| p.id.clone()).collect(),
                        r.containers.iter().map(|c| c.id.clone()).collect(),
                        r.more.then(SplitPart::default),
                    ),
                    _ => (Vec::new(), Vec::new(), None),
                };
                let (event, subject, summary) = match body {
                    Ok(b) => describe_request(b),
                    Err(e) => (None, Subject::default(), format!("undecodable: {e}")),
                };
                if let (Caller::Runtime, Some(e)) = (caller_of(c.direction), event) {
                    let object = subject
                        .container
                        .as_ref()
                        .map(|k| k.id.as_str())
                        .or_else(|| subject.pod.as_ref().map(|p| p.id.as_str()))
                        .unwrap_or_default()
                        .to_owned();
                    self.check_delivery_order(c.conn, e, object, ts, out);
                }
                let Some(st) = self.conns.get_mut(&c.conn) else {
                    return;
                };
                st.announce(c.conn, ts, out);
                let key = (mux_conn, m.stream_id, dir_index(c.direction));
                let early = st.early_replies.remove(&key);
                let p = PendingCall {
                    method,
                    event,
                    pod: subject.pod.map(pod_ref),
                    container: subject.container.map(container_ref),
                    // Answered before its write was stamped: it started no
                    // later than its answer ([`EarlyReply`]).
                    start: match &early {
                        Some(e) if e.ts.mono_ns < ts.mono_ns => e.ts,
                        _ => ts,
                    },
                    timeout_nano: req.timeout_nano,
                    summary,
                    synchronized_pods,
                    synchronized_containers,
                    split_part,
                    adjustment: None,
                };
                // Bounded: NRI has one call in flight per plugin, so a
                // connection with this many is garbage or lost responses;
                // the oldest (lowest stream id) goes as unanswered.
                if st.pending.len() >= MAX_PENDING_PER_CONN && !st.pending.contains_key(&key) {
                    if let Some((old_key, old)) = st.pending.pop_first() {
                        let st = &self.conns[&c.conn];
                        out.push(NriObservation::Call(unanswered(
                            c.conn,
                            st,
                            old_key,
                            old,
                            Outcome::NoResponse,
                            None,
                        )));
                    }
                }
                let teardown = matches!(
                    p.event,
                    Some(
                        Event::StopContainer
                            | Event::RemoveContainer
                            | Event::StopPodSandbox
                            | Event::RemovePodSandbox
                    )
                );
                if teardown && early.is_none() {
                    let st = &self.conns[&c.conn];
                    let mut started = complete_call(
                        c.conn,
                        st,
                        mux_conn,
                        m.stream_id,
                        c.direction,
                        p.started(),
                        None,
                        Outcome::NoResponse,
                    );
                    started.duration_ns = None;
                    out.push(NriObservation::Pending(started));
                }
                if let Some(d) = deadline(&p) {
                    self.next_deadline = self.next_deadline.min(d);
                }
                let Some(st) = self.conns.get_mut(&c.conn) else {
                    return;
                };
                if let Some(old) = st.pending.insert(key, p) {
                    // A stream id reused while its call is open: the old
                    // response was lost (a gap).
                    let st = &self.conns[&c.conn];
                    out.push(NriObservation::Call(complete_call(
                        c.conn,
                        st,
                        mux_conn,
                        m.stream_id,
                        c.direction,
                        old,
                        None,
                        Outcome::NoResponse,
                    )));
                }
                if let Some(e) = early {
                    self.early_held -= 1;
                    self.stats.replies_before_request += 1;
                    self.on_response(
                        c.conn,
                        opposite(c.direction),
                        e.ts,
                        mux_conn,
                        m.stream_id,
                        e.resp,
                        out,
                    );
                }
            }
            MessageType::Response => {
                let Ok(resp) = message::decode_response(&m.payload) else {
                    self.stats.undecodable += 1;
                    return;
                };
                self.on_response(c.conn, c.direction, ts, mux_conn, m.stream_id, resp, out);
            }
            MessageType::Data | MessageType::Unknown(_) => self.stats.other_messages += 1,
        }
    }
}

impl NriCallAssembler {
    /// A response to the call under (`mux_conn`, `stream_id`) travelled in
    /// `resp_dir` on `conn`, its last byte at `ts`.
    #[allow(clippy::too_many_arguments)]
    fn on_response(
        &mut self,
        conn: ConnId,
        resp_dir: Direction,
        ts: Timestamp,
        mux_conn: u32,
        stream_id: u32,
        resp: WireResponse,
        out: &mut Vec<NriObservation>,
    ) {
        let Some(st) = self.conns.get_mut(&conn) else {
            return;
        };
        let outcome = outcome_of(&resp);
        let key = (mux_conn, stream_id, dir_index(opposite(resp_dir)));
        let Some(mut p) = st.pending.remove(&key) else {
            if let Some(i) = st.given_up.iter().position(|k| *k == key) {
                st.given_up.remove(i);
                self.stats.answered_after_deadline += 1;
                return;
            }
            if !st.nri {
                self.stats.unmatched_ignored += 1;
                return;
            }
            // Held, not reported yet: the request's write may still come
            // (see `EarlyReply`).
            if st.early_replies.len() >= MAX_EARLY_REPLIES_PER_CONN {
                if let Some(oldest) = st
                    .early_replies
                    .iter()
                    .min_by_key(|(k, e)| (e.ts.mono_ns, **k))
                    .map(|(k, _)| *k)
                {
                    if let Some(e) = st.early_replies.remove(&oldest) {
                        self.early_held -= 1;
                        out.push(NriObservation::Call(partial_reply(conn, st, oldest, e)));
                    }
                }
            }
            if st
                .early_replies
                .insert(key, EarlyReply { ts, resp })
                .is_none()
            {
                self.early_held += 1;
            }
            self.early_next = self
                .early_next
                .min(ts.mono_ns.saturating_add(EARLY_REPLY_WAIT_NS));
            return;
        };
        if outcome.is_ok() {
            match ResponseBody::decode(p.method, &resp.payload) {
                Ok(b) => {
                    let s = describe_response(&b);
                    if let (ResponseBody::Synchronize(r), Some(part)) = (&b, p.split_part.as_mut())
                    {
                        part.reply_more = Some(r.more);
                        part.reply_updates = r.update.len();
                    }
                    p.adjustment = adjustment_of(&b);
                    if let ResponseBody::Configure(r) = &b {
                        st.events = Some(
                            event_names(r.events)
                                .into_iter()
                                .map(String::from)
                                .collect(),
                        );
                        st.announced = false;
                    }
                    if !s.is_empty() {
                        if !p.summary.is_empty() {
                            p.summary.push_str("; ");
                        }
                        p.summary.push_str(&s);
                    }
                }
                Err(e) => {
                    self.stats.undecodable += 1;
                    p.summary = format!("{}; response undecodable: {e}", p.summary);
                }
            }
        } else if let Outcome::Error { code, .. } = &outcome {
            if *code == message::CODE_UNIMPLEMENTED && p.method.falls_back_to_state_change() {
                if !p.summary.is_empty() {
                    p.summary.push_str("; ");
                }
                p.summary.push_str(
                    "plugin predates per-event methods: runtime falls back to StateChange",
                );
            }
        }
        st.announce(conn, ts, out);
        let st = &self.conns[&conn];
        let side = st.plugin_side.get(&(mux_conn, stream_id)).copied();
        let call = complete_call(
            conn,
            st,
            mux_conn,
            stream_id,
            opposite(resp_dir),
            p,
            Some(ts),
            outcome,
        );
        let wait_for_reply = st.has_plugin_end
            && call.caller == Caller::Runtime
            && side.is_some_and(|s| s.recv.is_some() && s.reply.is_none());
        if wait_for_reply {
            self.awaiting_reply.push(call);
        } else {
            if let Some(st) = self.conns.get_mut(&conn) {
                st.plugin_side.remove(&(mux_conn, stream_id));
            }
            out.push(NriObservation::Call(call));
        }
    }

    /// Calls whose deadline passed [`DEADLINE_GRACE_NS`] before `now` with
    /// no response and no close: their caller gave up on them (see the
    /// module docs). Reported [`Outcome::TimedOut`], in connection order.
    fn give_up_overdue(&mut self, now: u64, out: &mut Vec<NriObservation>) {
        if now <= self.next_deadline {
            return;
        }
        let mut conns: Vec<ConnId> = self.conns.keys().copied().collect();
        conns.sort();
        let mut next = u64::MAX;
        for id in conns {
            let Some(st) = self.conns.get_mut(&id) else {
                continue;
            };
            let overdue: Vec<CallKey> = st
                .pending
                .iter()
                .filter(|(_, p)| deadline(p).is_some_and(|d| now > d))
                .map(|(k, _)| *k)
                .collect();
            for key in overdue {
                let Some(p) = st.pending.remove(&key) else {
                    continue;
                };
                if st.given_up.len() >= MAX_GIVEN_UP_PER_CONN {
                    st.given_up.pop_front();
                }
                st.given_up.push_back(key);
                let waited = Some(p.timeout_nano as u64);
                out.push(NriObservation::Call(unanswered(
                    id,
                    st,
                    key,
                    p,
                    Outcome::TimedOut,
                    waited,
                )));
            }
            next = st
                .pending
                .values()
                .filter_map(deadline)
                .fold(next, u64::min);
        }
        self.next_deadline = next;
    }

    /// Report held responses ([`EarlyReply`]) whose request did not come
    /// within [`EARLY_REPLY_WAIT_NS`] before `now` (all of them for
    /// `None`) as partial calls, in connection and key order.
    fn release_early(&mut self, now: Option<u64>, out: &mut Vec<NriObservation>) {
        if self.early_held == 0 || now.is_some_and(|n| n <= self.early_next) {
            return;
        }
        let mut conns: Vec<ConnId> = self.conns.keys().copied().collect();
        conns.sort();
        let mut next = u64::MAX;
        for id in conns {
            let Some(st) = self.conns.get_mut(&id) else {
                continue;
            };
            let done: Vec<CallKey> = st
                .early_replies
                .iter()
                .filter(|(_, e)| {
                    now.is_none_or(|n| n > e.ts.mono_ns.saturating_add(EARLY_REPLY_WAIT_NS))
                })
                .map(|(k, _)| *k)
                .collect();
            for key in done {
                if let Some(e) = st.early_replies.remove(&key) {
                    self.early_held -= 1;
                    out.push(NriObservation::Call(partial_reply(id, st, key, e)));
                }
            }
            next = st
                .early_replies
                .values()
                .map(|e| e.ts.mono_ns.saturating_add(EARLY_REPLY_WAIT_NS))
                .fold(next, u64::min);
        }
        self.early_next = next;
    }

    /// Release held calls whose wait is over (all of them for `None`), in
    /// the order they were answered.
    fn release_awaiting(&mut self, now: Option<u64>, out: &mut Vec<NriObservation>) {
        if self.awaiting_reply.is_empty() {
            return;
        }
        let (done, keep): (Vec<NriCall>, Vec<NriCall>) =
            self.awaiting_reply.drain(..).partition(|c| match now {
                None => true,
                Some(now) => c
                    .end
                    .is_none_or(|e| now > e.mono_ns.saturating_add(PLUGIN_REPLY_WAIT_NS)),
            });
        self.awaiting_reply = keep;
        for c in done {
            if let Some(st) = self.conns.get_mut(&c.conn) {
                st.plugin_side.remove(&(c.mux_conn, c.stream_id));
            }
            out.push(NriObservation::Call(c));
        }
    }

    /// A message on the plugin's end of `runtime_conn`: the plugin read a
    /// request from the runtime (In, relative to the plugin) or wrote its
    /// response (Out). Only runtime-initiated calls are timed this way.
    fn on_plugin_end(
        &mut self,
        runtime_conn: ConnId,
        dir: Direction,
        ts: Timestamp,
        mux_conn: u32,
        m: &TtrpcMessage,
        out: &mut Vec<NriObservation>,
    ) {
        let Some(rt) = self.conns.get_mut(&runtime_conn) else {
            return;
        };
        if let (MessageType::Response, Direction::Out) = (m.kind, dir) {
            // The runtime may have read this reply already (see
            // `awaiting_reply`).
            let held = self.awaiting_reply.iter().position(|c| {
                (c.conn, c.mux_conn, c.stream_id) == (runtime_conn, mux_conn, m.stream_id)
            });
            if let Some(i) = held {
                let mut call = self.awaiting_reply.remove(i);
                let recv = rt
                    .plugin_side
                    .remove(&(mux_conn, m.stream_id))
                    .and_then(|s| s.recv);
                call.plugin_ns = recv.map(|r| ts.mono_ns.saturating_sub(r.mono_ns));
                out.push(NriObservation::Call(call));
                return;
            }
        }
        let e = match (m.kind, dir) {
            (MessageType::Request, Direction::In) | (MessageType::Response, Direction::Out) => {
                if rt.plugin_side.len() >= MAX_PLUGIN_SIDE {
                    rt.plugin_side.pop_first();
                }
                rt.plugin_side.entry((mux_conn, m.stream_id)).or_default()
            }
            _ => return,
        };
        match m.kind {
            MessageType::Request => e.recv = Some(ts),
            _ => e.reply = Some(ts),
        }
    }
}

/// Who sent a request that travelled in direction `d` (relative to the
/// traced runtime).
fn caller_of(d: Direction) -> Caller {
    match d {
        Direction::Out => Caller::Runtime,
        Direction::In => Caller::Plugin,
    }
}

/// When capture time past which `p` counts as given up by its caller
/// (deadline plus [`DEADLINE_GRACE_NS`]); `None` without a timeout.
fn deadline(p: &PendingCall) -> Option<u64> {
    (p.timeout_nano > 0).then(|| {
        p.start
            .mono_ns
            .saturating_add(p.timeout_nano as u64)
            .saturating_add(DEADLINE_GRACE_NS)
    })
}

/// Tolerance of the timeout test: the runtime starts its timer before the
/// write the capture timestamps, and closes right when it fires.
fn timed_out(waited_ns: u64, timeout_nano: i64) -> bool {
    if timeout_nano <= 0 {
        return false;
    }
    let t = timeout_nano as u64;
    let slack = (t / 20).min(50_000_000);
    waited_ns + slack >= t
}

/// How a call ended, by its response's status.
fn outcome_of(resp: &WireResponse) -> Outcome {
    match resp.error() {
        Some(Status { code, message }) => Outcome::Error {
            code: *code,
            message: message.clone(),
        },
        None => Outcome::Ok,
    }
}

/// A response under `key` on `conn` whose request was never seen.
fn partial_reply(conn: ConnId, st: &ConnState, key: CallKey, e: EarlyReply) -> NriCall {
    let (mux_conn, stream_id, req_dir) = key;
    NriCall {
        conn,
        mux_conn,
        stream_id,
        plugin: st.plugin.clone(),
        caller: caller_of(dir_of_index(req_dir)),
        method: None,
        event: None,
        pod: None,
        container: None,
        start: None,
        end: Some(e.ts),
        duration_ns: None,
        plugin_ns: None,
        outcome: outcome_of(&e.resp),
        timeout_nano: None,
        partial: true,
        summary: String::new(),
        synchronized_pods: Vec::new(),
        synchronized_containers: Vec::new(),
        split_part: None,
        adjustment: None,
    }
}

/// `p`, under `key` on connection `conn`, ended without a response:
/// `waited` is how long its caller is known to have waited, if at all.
fn unanswered(
    conn: ConnId,
    st: &ConnState,
    key: CallKey,
    p: PendingCall,
    outcome: Outcome,
    waited: Option<u64>,
) -> NriCall {
    let (mux_conn, stream_id, dir) = key;
    let mut call = complete_call(
        conn,
        st,
        mux_conn,
        stream_id,
        dir_of_index(dir),
        p,
        None,
        outcome,
    );
    // No end: the duration is only what the caller is known to have waited.
    call.duration_ns = waited;
    call
}

#[allow(clippy::too_many_arguments)]
fn complete_call(
    conn: ConnId,
    st: &ConnState,
    mux_conn: u32,
    stream_id: u32,
    req_dir: Direction,
    p: PendingCall,
    end: Option<Timestamp>,
    outcome: Outcome,
) -> NriCall {
    NriCall {
        conn,
        mux_conn,
        stream_id,
        plugin: st.plugin.clone(),
        caller: caller_of(req_dir),
        method: Some(p.method.name().to_string()),
        event: p.event,
        pod: p.pod,
        container: p.container,
        start: Some(p.start),
        end,
        duration_ns: end.map(|e| e.mono_ns.saturating_sub(p.start.mono_ns)),
        plugin_ns: st
            .plugin_side
            .get(&(mux_conn, stream_id))
            .filter(|_| req_dir == Direction::Out)
            .and_then(|s| Some(s.reply?.mono_ns.saturating_sub(s.recv?.mono_ns))),
        outcome,
        timeout_nano: (p.timeout_nano > 0).then_some(p.timeout_nano),
        partial: false,
        summary: p.summary,
        synchronized_pods: p.synchronized_pods,
        synchronized_containers: p.synchronized_containers,
        split_part: p.split_part,
        adjustment: p.adjustment,
    }
}

fn pod_ref(p: api::PodSandbox) -> PodRef {
    let netns = p.linux.as_ref().and_then(|l| {
        l.namespaces
            .iter()
            .find(|n| n.r#type == "network" && !n.path.is_empty())
            .map(|n| n.path.clone())
    });
    PodRef {
        id: p.id,
        name: p.name,
        namespace: p.namespace,
        uid: p.uid,
        netns,
    }
}

fn container_ref(c: api::Container) -> ContainerRef {
    let state = match api::ContainerState::try_from(c.state) {
        Ok(api::ContainerState::ContainerCreated) => Some("created"),
        Ok(api::ContainerState::ContainerPaused) => Some("paused"),
        Ok(api::ContainerState::ContainerRunning) => Some("running"),
        Ok(api::ContainerState::ContainerStopped) => Some("stopped"),
        Ok(api::ContainerState::ContainerUnknown) | Err(_) => None,
    };
    ContainerRef {
        id: c.id,
        name: c.name,
        state: state.map(str::to_string),
        // exit_code 0 is also "not sent": only a finish time says it is
        // one.
        exit_code: (c.finished_at != 0).then_some(c.exit_code),
    }
}

/// Event names of a subscription mask (bit `1 << (event - 1)`; 0 means all,
/// nri `pkg/api/event.go`).
pub fn event_names(mask: i32) -> Vec<&'static str> {
    (1..Event::Last as i32)
        .filter(|e| mask == 0 || mask & (1 << (e - 1)) != 0)
        .filter_map(|e| Event::try_from(e).ok())
        .map(|e| e.as_str_name())
        .collect()
}

fn secs(ns: i64) -> String {
    format!("{}s", ns as f64 / 1e9)
}

/// Event, subject (moved out, not cloned) and summary of a request.
fn describe_request(b: RequestBody) -> (Option<Event>, Subject, String) {
    match b {
        RequestBody::RegisterPlugin(r) => {
            let mut s = format!("register {}-{}", r.plugin_idx, r.plugin_name);
            if !r.nri_version.is_empty() {
                s.push_str(&format!(" (NRI {})", r.nri_version));
            }
            (None, Subject::default(), s)
        }
        RequestBody::UpdateContainers(r) => (
            None,
            Subject::default(),
            format!(
                "unsolicited: {} updates, {} evictions",
                r.update.len(),
                r.evict.len()
            ),
        ),
        RequestBody::Configure(r) => {
            let mut s = format!("runtime {} {}", r.runtime_name, r.runtime_version);
            if !r.nri_version.is_empty() {
                s.push_str(&format!(" (NRI {})", r.nri_version));
            }
            if r.registration_timeout > 0 {
                s.push_str(&format!(
                    ", registration timeout {}",
                    secs(r.registration_timeout * 1_000_000)
                ));
            }
            if r.request_timeout > 0 {
                s.push_str(&format!(
                    ", request timeout {}",
                    secs(r.request_timeout * 1_000_000)
                ));
            }
            (None, Subject::default(), s)
        }
        RequestBody::Synchronize(r) => (
            None,
            Subject::default(),
            format!(
                "{} pods, {} containers{}",
                r.pods.len(),
                r.containers.len(),
                if r.more { ", more to come" } else { "" }
            ),
        ),
        RequestBody::Shutdown => (None, Subject::default(), String::new()),
        RequestBody::Event {
            event,
            subject,
            validate,
        } => {
            let s = validate
                .as_ref()
                .map(|v| {
                    format!(
                        "validate adjustments of {} plugins: {}",
                        v.plugins.len(),
                        v.adjust.as_ref().map(describe_adjust).unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            (Some(event), subject, s)
        }
    }
}

/// The parts of a container an adjustment touches, by name.
pub fn adjusted_parts(a: &api::ContainerAdjustment) -> Vec<String> {
    let mut parts = Vec::new();
    let mut part = |name: &str, set: bool| {
        if set {
            parts.push(name.to_string());
        }
    };
    part("annotations", !a.annotations.is_empty());
    part("mounts", !a.mounts.is_empty());
    part("env", !a.env.is_empty());
    part("rlimits", !a.rlimits.is_empty());
    part("CDI devices", !a.cdi_devices.is_empty());
    part("args", !a.args.is_empty());
    part("hooks", a.hooks.is_some());
    if let Some(l) = &a.linux {
        part("devices", !l.devices.is_empty());
        part("resources", l.resources.is_some());
        part("cgroups path", !l.cgroups_path.is_empty());
        part("oom_score_adj", l.oom_score_adj.is_some());
        part("seccomp", l.seccomp_policy.is_some());
        part("namespaces", !l.namespaces.is_empty());
        part("sysctl", !l.sysctl.is_empty());
        part("I/O priority", l.io_priority.is_some());
        part("net devices", !l.net_devices.is_empty());
        part("scheduler", l.scheduler.is_some());
        part("RDT", l.rdt.is_some());
        part("memory policy", l.memory_policy.is_some());
    }
    parts
}

/// The typed [`Adjustment`] of a decoded reply, if it is about one.
fn adjustment_of(b: &ResponseBody) -> Option<Adjustment> {
    match b {
        ResponseBody::CreateContainer(r) => {
            let parts = r.adjust.as_ref().map(adjusted_parts).unwrap_or_default();
            (!parts.is_empty()).then_some(Adjustment::Made { parts })
        }
        ResponseBody::ValidateContainerAdjustment(r) => Some(Adjustment::Validated {
            rejected: r.reject,
            reason: r.reason.clone(),
        }),
        _ => None,
    }
}

fn describe_adjust(a: &api::ContainerAdjustment) -> String {
    let mut parts = Vec::new();
    let mut n = |what: &str, k: usize| {
        if k > 0 {
            parts.push(format!("{k} {what}"));
        }
    };
    n("annotations", a.annotations.len());
    n("mounts", a.mounts.len());
    n("env", a.env.len());
    n("rlimits", a.rlimits.len());
    n("CDI devices", a.cdi_devices.len());
    n("args", a.args.len());
    if a.hooks.is_some() {
        parts.push("hooks".into());
    }
    if let Some(l) = &a.linux {
        if !l.devices.is_empty() {
            parts.push(format!("{} devices", l.devices.len()));
        }
        if l.resources.is_some() {
            parts.push("resources".into());
        }
        if !l.cgroups_path.is_empty() {
            parts.push("cgroups path".into());
        }
        if l.oom_score_adj.is_some() {
            parts.push("oom_score_adj".into());
        }
        if l.seccomp_policy.is_some() {
            parts.push("seccomp".into());
        }
        if !l.namespaces.is_empty() {
            parts.push("namespaces".into());
        }
    }
    if parts.is_empty() {
        "no adjustment".into()
    } else {
        format!("adjust {}", parts.join(", "))
    }
}

fn describe_updates(update: usize, evict: usize) -> String {
    match (update, evict) {
        (0, 0) => String::new(),
        (u, 0) => format!("{u} container updates"),
        (u, e) => format!("{u} container updates, {e} evictions"),
    }
}

fn describe_response(b: &ResponseBody) -> String {
    match b {
        ResponseBody::Empty => String::new(),
        ResponseBody::Configure(r) => {
            let names = event_names(r.events);
            let mut s = if r.events == 0 {
                "subscribes to all events".to_string()
            } else {
                format!("subscribes to {}", names.join("|"))
            };
            if r.request_timeout > 0 {
                s.push_str(&format!(
                    ", asks request timeout {}",
                    secs(r.request_timeout * 1_000_000)
                ));
            }
            s
        }
        ResponseBody::Synchronize(r) => {
            let mut s = describe_updates(r.update.len(), 0);
            if r.more {
                s.push_str(if s.is_empty() { "more" } else { ", more" });
            }
            s
        }
        ResponseBody::CreateContainer(r) => {
            let a = r
                .adjust
                .as_ref()
                .map_or_else(|| "no adjustment".into(), describe_adjust);
            let u = describe_updates(r.update.len(), r.evict.len());
            if u.is_empty() {
                a
            } else {
                format!("{a}; {u}")
            }
        }
        ResponseBody::UpdateContainer(r) => describe_updates(r.update.len(), r.evict.len()),
        ResponseBody::StopContainer(r) => describe_updates(r.update.len(), 0),
        ResponseBody::UpdateContainers(r) => match r.failed.len() {
            0 => String::new(),
            n => format!("{n} updates failed"),
        },
        ResponseBody::ValidateContainerAdjustment(r) => {
            if r.reject {
                format!("rejected: {}", r.reason)
            } else {
                "accepted".into()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Bounds and garbage. Real-peer behaviour (containerd, the ttrpc crate,
    //! the NRI logger) is tested on recordings in tests/tests/nri_replay.rs;
    //! these synthetic streams exercise what no well-behaved peer sends.
    use proptest::{prelude::*, test_runner::TestRunner};
    use prost::Message as _;

    use super::*;
    use crate::{
        capture::{Origin, Syscall},
        decode::{nri::proto::envelope, test_strategies},
    };

    fn ts(ns: u64) -> Timestamp {
        Timestamp {
            mono_ns: ns,
            wall_ns: ns,
        }
    }

    fn open(conn: u64) -> CaptureEvent {
        CaptureEvent::Open(ConnOpen {
            conn: ConnId(conn),
            ts: ts(0),
            tgid: 1,
            fd: 3,
            origin: Origin::Existing,
            socket_path: Some("/nri.sock".into()),
            peer: None,
            inode: None,
            other_end: None,
        })
    }

    fn chunk(conn: u64, dir: Direction, at: u64, bytes: Vec<u8>) -> CaptureEvent {
        CaptureEvent::Chunk(Chunk {
            conn: ConnId(conn),
            direction: dir,
            ts: ts(at),
            tid: 1,
            syscall: Syscall::Write,
            syscall_len: bytes.len() as u64,
            bytes,
            truncated: false,
            gap_before: false,
        })
    }

    /// The finished calls among `out`.
    fn finished(out: &[NriObservation]) -> Vec<&NriCall> {
        out.iter()
            .filter_map(|o| match o {
                NriObservation::Call(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Mux frame (conn_id 1) of a ttrpc request message (test-only framing
    /// per mux.go / channel.go).
    fn request_frame(stream_id: u32) -> Vec<u8> {
        call_frame(stream_id, "Shutdown", vec![], 0)
    }

    /// Mux frame (conn_id 1) of a ttrpc request of Plugin `method`.
    fn call_frame(stream_id: u32, method: &str, payload: Vec<u8>, timeout_nano: i64) -> Vec<u8> {
        let req = envelope::Request {
            service: message::PLUGIN_SERVICE.into(),
            method: method.into(),
            payload,
            timeout_nano,
            metadata: vec![],
        }
        .encode_to_vec();
        message_frame(stream_id, 1, &req)
    }

    /// Mux frame (conn_id 1) of one ttrpc message of `kind` (1 request,
    /// 2 response).
    fn message_frame(stream_id: u32, kind: u8, body: &[u8]) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend_from_slice(&(body.len() as u32).to_be_bytes());
        t.extend_from_slice(&stream_id.to_be_bytes());
        t.extend_from_slice(&[kind, 0]);
        t.extend_from_slice(body);
        let mut f = Vec::new();
        f.extend_from_slice(&1u32.to_be_bytes());
        f.extend_from_slice(&(t.len() as u32).to_be_bytes());
        f.extend_from_slice(&t);
        f
    }

    /// An existing connection whose peer process is `argv` (no
    /// RegisterPlugin will be seen on it).
    fn open_peer(conn: u64, pid: u32, argv: &[&str]) -> CaptureEvent {
        let CaptureEvent::Open(mut o) = open(conn) else {
            unreachable!()
        };
        o.peer = Some(Peer {
            pid,
            uid: 0,
            comm: argv
                .first()
                .map(|a| a.rsplit('/').next().unwrap_or(a).to_owned()),
            cmdline: argv.iter().map(ToString::to_string).collect(),
            env: BTreeMap::new(),
            cgroup: None,
        });
        CaptureEvent::Open(o)
    }

    /// The latest identity announced for each connection.
    fn identities(out: &[NriObservation]) -> HashMap<ConnId, PluginId> {
        let mut m = HashMap::new();
        for o in out {
            if let NriObservation::Plugin { conn, plugin, .. } = o {
                m.insert(*conn, plugin.clone());
            }
        }
        m
    }

    /// Plugins that registered before the capture are named from their
    /// argv; deliveries of one event in index order leave the inference
    /// alone, an order the inferred indexes contradict lowers the
    /// confidence of both with the evidence, and a RegisterPlugin seen
    /// later replaces the inference.
    #[test]
    fn inferred_identity_is_checked_against_the_delivery_order() {
        use super::plugin_identity::{Clue, Confidence};
        let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
        let mut out = Vec::new();
        a.on_capture(
            &open_peer(1, 100, &["/bin/p", "-idx", "10", "-name", "a"]),
            &mut out,
        );
        a.on_capture(&open_peer(2, 200, &["/opt/nri/plugins/20-b"]), &mut out);
        let ids = identities(&out);
        let (first, second) = (&ids[&ConnId(1)], &ids[&ConnId(2)]);
        assert_eq!(
            (first.label(), second.label()),
            ("10-a".into(), "20-b".into())
        );
        assert_eq!(first.source, IdentitySource::Inferred);
        let how = first.inferred.as_ref().unwrap();
        assert_eq!(
            (how.name_from, how.index_from),
            (Some(Clue::Flag), Some(Clue::Flag))
        );
        let how = second.inferred.as_ref().unwrap();
        assert_eq!(how.index_from, Some(Clue::Argv0));
        let run = |pod: &str| {
            api::RunPodSandboxRequest {
                pod: Some(api::PodSandbox {
                    id: pod.into(),
                    ..Default::default()
                }),
            }
            .encode_to_vec()
        };
        let deliver = |a: &mut NriCallAssembler, out: &mut Vec<_>, conn, at, sid, pod: &str| {
            let f = call_frame(sid, "RunPodSandbox", run(pod), 0);
            a.on_capture(&chunk(conn, Direction::Out, at, f), out);
        };
        // s1: 10-a then 20-b, as the runtime orders them.
        deliver(&mut a, &mut out, 1, 10, 1, "s1");
        deliver(&mut a, &mut out, 2, 20, 1, "s1");
        let ids = identities(&out);
        assert!(ids
            .values()
            .all(|p| p.inferred.as_ref().unwrap().confidence == Confidence::High));
        // s2: 20-b first; then 10-a (twice: a v0.12 fallback is no new round).
        deliver(&mut a, &mut out, 2, 30, 3, "s2");
        deliver(&mut a, &mut out, 1, 40, 3, "s2");
        deliver(&mut a, &mut out, 1, 41, 5, "s2");
        let ids = identities(&out);
        for c in [1, 2] {
            let how = ids[&ConnId(c)].inferred.as_ref().unwrap();
            assert_eq!(how.confidence, Confidence::Low, "{how:?}");
            assert_eq!(how.conflicts.len(), 1, "{how:?}");
            assert!(
                how.conflicts[0].contains("called 20-b before 10-a with RUN_POD_SANDBOX of s2"),
                "{how:?}"
            );
        }
        // The registration wins.
        let reg = api::RegisterPluginRequest {
            plugin_name: "b".into(),
            plugin_idx: "05".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let req = envelope::Request {
            service: message::RUNTIME_SERVICE.into(),
            method: "RegisterPlugin".into(),
            payload: reg,
            timeout_nano: 0,
            metadata: vec![],
        }
        .encode_to_vec();
        let mut f = message_frame(1, 1, &req);
        f[..4].copy_from_slice(&2u32.to_be_bytes());
        a.on_capture(&chunk(2, Direction::In, 50, f), &mut out);
        let b = &identities(&out)[&ConnId(2)];
        assert_eq!(
            (b.label().as_str(), b.source),
            ("05-b", IdentitySource::RegisterPlugin)
        );
        assert!(b.inferred.is_none());
    }

    /// The plugin's RegisterPlugin and the runtime's Configure carry their
    /// NRI versions (since v0.10): the plugin's observation says both.
    #[test]
    fn the_nri_versions_of_both_ends_are_announced() {
        let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
        let mut out = Vec::new();
        a.on_capture(&open(1), &mut out);
        let reg = api::RegisterPluginRequest {
            plugin_name: "go12".into(),
            plugin_idx: "10".into(),
            nri_version: "v0.12.2".into(),
        }
        .encode_to_vec();
        let req = envelope::Request {
            service: message::RUNTIME_SERVICE.into(),
            method: "RegisterPlugin".into(),
            payload: reg,
            timeout_nano: 0,
            metadata: vec![],
        }
        .encode_to_vec();
        let mut f = message_frame(1, 1, &req);
        f[..4].copy_from_slice(&2u32.to_be_bytes());
        a.on_capture(&chunk(1, Direction::In, 10, f), &mut out);
        let cfg = api::ConfigureRequest {
            runtime_name: "containerd".into(),
            runtime_version: "v2.3.7".into(),
            nri_version: "v0.12.0".into(),
            ..Default::default()
        }
        .encode_to_vec();
        a.on_capture(
            &chunk(1, Direction::Out, 20, call_frame(1, "Configure", cfg, 0)),
            &mut out,
        );
        let last = out
            .iter()
            .rev()
            .find_map(|o| match o {
                NriObservation::Plugin { nri_version, .. } => Some(nri_version.clone()),
                _ => None,
            })
            .expect("a plugin observation");
        assert_eq!(last.plugin.as_deref(), Some("v0.12.2"));
        assert_eq!(last.runtime.as_deref(), Some("v0.12.0"));
    }

    /// Regression: an Unimplemented answer claimed the StateChange fallback
    /// for every per-event method; v0.12's runtime falls back for nine
    /// (containerd/nri v0.12.0 `plugin_type.go`), not for CreateContainer
    /// (every version) nor for v0.10's UpdatePodSandbox.
    #[test]
    fn unimplemented_claims_the_fallback_only_where_it_exists() {
        let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
        let mut out = Vec::new();
        a.on_capture(&open(1), &mut out);
        let unimplemented = envelope::Response {
            status: Some(envelope::Status {
                code: message::CODE_UNIMPLEMENTED,
                message: "method".into(),
            }),
            payload: vec![],
        }
        .encode_to_vec();
        for (i, m) in ["CreateContainer", "UpdatePodSandbox", "RunPodSandbox"]
            .iter()
            .enumerate()
        {
            let sid = 2 * i as u32 + 1;
            let at = 10 + 10 * i as u64;
            a.on_capture(
                &chunk(1, Direction::Out, at, call_frame(sid, m, vec![], 0)),
                &mut out,
            );
            let f = message_frame(sid, 2, &unimplemented);
            a.on_capture(&chunk(1, Direction::In, at + 1, f), &mut out);
        }
        let claims: Vec<(String, bool)> = out
            .iter()
            .filter_map(|o| match o {
                NriObservation::Call(c) => Some((
                    c.method.clone().unwrap_or_default(),
                    c.summary.contains("falls back to StateChange"),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            claims,
            [
                ("CreateContainer".to_string(), false),
                ("UpdatePodSandbox".to_string(), false),
                ("RunPodSandbox".to_string(), true),
            ]
        );
    }

    #[test]
    fn unanswered_calls_are_bounded() {
        let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
        let mut out = Vec::new();
        a.on_capture(&open(1), &mut out);
        let n = MAX_PENDING_PER_CONN as u32 + 100;
        for i in 0..n {
            a.on_capture(
                &chunk(
                    1,
                    Direction::Out,
                    10 + u64::from(i),
                    request_frame(2 * i + 1),
                ),
                &mut out,
            );
        }
        assert_eq!(a.in_flight(), MAX_PENDING_PER_CONN);
        let dropped = finished(&out);
        assert_eq!(dropped.len(), 100);
        assert!(dropped.iter().all(|c| c.outcome == Outcome::NoResponse));
        // The oldest went first.
        assert_eq!(dropped[0].stream_id, 1);
    }

    /// A hung StopPodSandbox delivery whose caller gave up without closing
    /// (the CRI client cancelled: nri `isFatalError` is false for
    /// `context.Canceled`): timed out at its deadline, and its late answer
    /// is counted, not taken for a call.
    #[test]
    fn deadline_passing_without_close_is_a_timeout() {
        const S: u64 = 1_000_000_000;
        let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
        let mut out = Vec::new();
        a.on_capture(&open(1), &mut out);
        let ev = api::StopPodSandboxRequest {
            pod: Some(api::PodSandbox {
                id: "s1".into(),
                ..Default::default()
            }),
        }
        .encode_to_vec();
        let req = call_frame(1, "StopPodSandbox", ev, 5 * S as i64);
        a.on_capture(&chunk(1, Direction::Out, S, req), &mut out);
        assert_eq!(a.oldest_open_delivery(), Some(S));
        // Just past the deadline: containerd's own close may still come.
        let other = |at| chunk(2, Direction::Out, at, vec![0]);
        a.on_capture(&other(6 * S + DEADLINE_GRACE_NS / 2), &mut out);
        assert!(finished(&out).is_empty(), "{out:?}");
        a.on_capture(&other(6 * S + DEADLINE_GRACE_NS + 1), &mut out);
        let done = finished(&out);
        assert_eq!(done.len(), 1, "{out:?}");
        assert_eq!(done[0].outcome, Outcome::TimedOut);
        assert_eq!(done[0].event, Some(Event::StopPodSandbox));
        assert_eq!(done[0].end, None);
        assert_eq!(done[0].duration_ns, Some(5 * S));
        assert_eq!(a.oldest_open_delivery(), None);
        assert_eq!(a.in_flight(), 0);
        // The plugin answers 10 s later.
        out.clear();
        let resp = envelope::Response {
            status: None,
            payload: vec![],
        }
        .encode_to_vec();
        let late = message_frame(1, 2, &resp);
        a.on_capture(&chunk(1, Direction::In, 16 * S, late), &mut out);
        assert!(finished(&out).is_empty(), "{out:?}");
        assert_eq!(a.stats().answered_after_deadline, 1);
    }

    /// The runtime's read of a plugin's answer stamped 1 ms before the
    /// runtime's write of the request (its writer descheduled before the
    /// syscall's exit, where the probe stamps): one call, answered, that
    /// started no later than its answer; not a partial reply and a
    /// timed-out request. A response whose request never comes is reported
    /// partial once the stream is [`EARLY_REPLY_WAIT_NS`] past it.
    #[test]
    fn a_reply_stamped_before_its_request_still_answers_it() {
        const MS: u64 = 1_000_000;
        let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
        let mut out = Vec::new();
        a.on_capture(&open(1), &mut out);
        let ev = api::RemovePodSandboxRequest {
            pod: Some(api::PodSandbox {
                id: "s1".into(),
                ..Default::default()
            }),
        }
        .encode_to_vec();
        let ok = envelope::Response {
            status: None,
            payload: api::Empty::default().encode_to_vec(),
        }
        .encode_to_vec();
        a.on_capture(
            &chunk(1, Direction::In, 1000 * MS, message_frame(7, 2, &ok)),
            &mut out,
        );
        let req = call_frame(7, "RemovePodSandbox", ev, 2_000 * MS as i64);
        a.on_capture(&chunk(1, Direction::Out, 1001 * MS, req), &mut out);
        assert!(
            !out.iter().any(|o| matches!(o, NriObservation::Pending(_))),
            "answered, not pending: {out:?}"
        );
        let calls = finished(&out);
        assert_eq!(calls.len(), 1, "{out:?}");
        assert_eq!(calls[0].outcome, Outcome::Ok);
        assert!(!calls[0].partial);
        assert_eq!(calls[0].event, Some(Event::RemovePodSandbox));
        assert_eq!(calls[0].start.map(|t| t.mono_ns), Some(1000 * MS));
        assert_eq!(calls[0].duration_ns, Some(0));
        assert_eq!(a.stats().replies_before_request, 1);
        assert_eq!(a.in_flight(), 0);

        // A lone answer: held for a second of capture time, then partial.
        out.clear();
        a.on_capture(
            &chunk(1, Direction::In, 2000 * MS, message_frame(9, 2, &ok)),
            &mut out,
        );
        let tick = |at| CaptureEvent::Tick { ts: ts(at) };
        a.on_capture(&tick(2000 * MS + EARLY_REPLY_WAIT_NS), &mut out);
        assert!(finished(&out).is_empty(), "{out:?}");
        a.on_capture(&tick(2001 * MS + EARLY_REPLY_WAIT_NS), &mut out);
        let partial = finished(&out);
        assert_eq!(partial.len(), 1, "{out:?}");
        assert!(partial[0].partial && partial[0].start.is_none());
        assert_eq!(partial[0].stream_id, 9);
        assert_eq!(partial[0].caller, Caller::Runtime);
    }

    /// 3000 chunks of garbage, a valid request frame in every tenth, in
    /// either direction: no panic, and the calls in flight stay bounded.
    #[test]
    fn garbage_never_panics_and_stays_bounded() {
        let chunk_of = (
            test_strategies::bytes_below(300),
            any::<u32>(),
            any::<bool>(),
        );
        let chunks = prop::collection::vec(chunk_of, 3000);
        TestRunner::new(test_strategies::config(1))
            .run(&chunks, |chunks| {
                let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
                let mut out = Vec::new();
                a.on_capture(&open(1), &mut out);
                for (i, (mut bytes, stream, inbound)) in chunks.into_iter().enumerate() {
                    if i % 10 == 0 {
                        bytes.extend(request_frame(stream | 1));
                    }
                    let dir = if inbound {
                        Direction::In
                    } else {
                        Direction::Out
                    };
                    a.on_capture(&chunk(1, dir, i as u64, bytes), &mut out);
                    out.clear();
                }
                prop_assert!(a.in_flight() <= MAX_PENDING_PER_CONN);
                a.finish(&mut out);
                Ok(())
            })
            .unwrap();
    }
}
