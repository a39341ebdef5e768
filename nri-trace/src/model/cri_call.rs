//! CRI calls: each gRPC stream on the runtime's CRI socket (kubelet ->
//! containerd / CRI-O) as one [`CriCall`]: method, pod and container
//! identity, timing, deadline and outcome.
//!
//! **Late attach.** kubelet's connection usually predates the trace, and
//! grpc-go's HPACK encoder indexes every header, so the `:path` of a hot
//! method is often a reference to a table slot filled before the attach
//! (PROTOCOL-NOTES.md, "CRI over gRPC / HTTP/2"). Such a call's method is
//! recovered, and marked [`Identified::Inferred`] with the evidence, from:
//!
//! 1. the shapes of its request and response messages
//!    ([`message::candidates`]);
//! 2. which kind of object the id it names is (a sandbox id seen in a
//!    RunPodSandbox response is not a container id);
//! 3. the HPACK slots of its header block: calls whose headers reference
//!    the same pre-attach slots have the same `:path`, so what resolves one
//!    resolves all;
//! 4. what the runtime reports about the object afterwards: a sandbox
//!    that goes from ready to not ready was stopped, one that disappears
//!    was removed (StopPodSandbox and RemovePodSandbox look the same on the
//!    wire); a container that goes from created to running was started.
//!
//! A call still ambiguous [`HOLD_NS`] after it ended (in capture time) is
//! reported [`Identified::Unknown`] with its candidates: never a guess.
//!
//! Pure and deterministic: the same capture events give the same calls.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::{chunk_stamps::ChunkStamps, cri_client::CriClient};
use crate::{
    capture::{CaptureEvent, Chunk, CloseReason, ConnId, Direction, Timestamp},
    decode::cri::{
        connection::{H2Connection, H2Event, Side},
        frame::error_code_name,
        grpc::{grpc_status_name, split_path, RequestHead, Trailers},
        hpack::{Field, HeaderBlock, Slot},
        message::{
            self, ContainerMeta, ContainerState, CriMethod, Effect, PodMeta, RequestInfo,
            ResponseInfo, SandboxState,
        },
    },
};

/// How long (capture time) an ambiguous call waits for evidence.
pub const HOLD_NS: u64 = 3_000_000_000;

/// Most streams in flight per connection.
const MAX_STREAMS: usize = 4096;
/// Most ambiguous calls held at once.
const MAX_HELD: usize = 4096;
/// Most sandbox / container ids remembered; past it, those known to be
/// gone go first, then the oldest half.
const MAX_IDS: usize = 16384;
/// Most hidden-slot sets remembered (resolved or narrowing); past it they
/// are forgotten (later calls are inferred afresh, never wrongly).
const MAX_SLOT_SETS: usize = 4096;
/// HTTP/2 CANCEL (RFC 9113 §7): what gRPC clients reset a stream with on
/// cancellation and deadline expiry.
const H2_CANCEL: u32 = 0x8;
/// gRPC NOT_FOUND.
const GRPC_NOT_FOUND: u32 = 5;
/// Slack when comparing a reset's time with the call's deadline: the
/// client computes grpc-timeout before it writes the headers, and the
/// call's start is stamped when the write of its request returns, late by
/// as long as the thread was descheduled inside it (a CRI-O retry's reset
/// came 994 ms after the stamp of a 1 s deadline under load, 2026-11-28;
/// 5 ms called it Cancelled).
const DEADLINE_SLACK_NS: u64 = 20_000_000;

/// How the method of a call is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Identified {
    /// `:path` seen on the wire.
    Known,
    /// Recovered from other evidence (see the module doc).
    Inferred { evidence: String },
    /// Could not be told apart from these.
    Unknown { candidates: Vec<String> },
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
}

/// gRPC's DEADLINE_EXCEEDED status code (grpc `codes.DeadlineExceeded`).
pub const GRPC_DEADLINE_EXCEEDED: u32 = 4;

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
        }
    }
}

/// One CRI call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriCall {
    pub conn: ConnId,
    pub stream_id: u32,
    /// e.g. "RunPodSandbox"; `None` when unknown.
    pub method: Option<String>,
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

/// What the assembler yields.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CriObservation {
    Call(CriCall),
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

#[derive(Debug, Clone, PartialEq, Eq)]
enum PathSeen {
    None,
    Cri(CriMethod),
    /// A `:path` that is not a runtime.v1 CRI method.
    Other(String),
    /// `:path` not readable: the pre-attach slots of the header block.
    Hidden(Vec<Slot>),
}

#[derive(Debug)]
struct StreamState {
    start: Option<Timestamp>,
    path: PathSeen,
    deadline_ns: Option<u64>,
    request: Option<Vec<u8>>,
    response: Option<Vec<u8>>,
    responses: u32,
    /// Bytes of its connection were lost (capture loss, a truncated
    /// chunk) while it was open: its end may be among them.
    bytes_lost: bool,
}

impl StreamState {
    fn new(start: Option<Timestamp>) -> Self {
        StreamState {
            start,
            path: PathSeen::None,
            deadline_ns: None,
            request: None,
            response: None,
            responses: 0,
            bytes_lost: false,
        }
    }
}

/// `outcome_evidence` of a call whose connection closed after bytes of it
/// were lost while the call was open: its answer may have been in them.
pub const LOST_END_EVIDENCE: &str =
    "bytes of its connection were lost while it was open (capture loss): its end was not seen";

/// How a stream ended, before its method is settled.
struct Ended {
    stream_id: u32,
    st: StreamState,
    end: Timestamp,
    outcome: CriOutcome,
    outcome_evidence: Option<String>,
}

struct ConnState {
    h2: H2Connection,
    stamps: [ChunkStamps; 2],
    streams: BTreeMap<u32, StreamState>,
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            h2: H2Connection::new(),
            stamps: Default::default(),
            streams: BTreeMap::new(),
        }
    }
}

/// What the runtime last reported about an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjState {
    Sandbox(SandboxState),
    Container(ContainerState),
    Gone,
}

#[derive(Debug, Default)]
struct ObjFacts {
    pod: Option<PodMeta>,
    container: Option<ContainerMeta>,
    /// For a container: its sandbox.
    sandbox_id: Option<String>,
    state: Option<ObjState>,
    /// Bumped by every call that may change the object.
    mutations: u64,
    /// Order of first sight (for eviction).
    seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sandbox = 0,
    Container = 1,
}

/// An ambiguous call waiting for evidence.
struct Held {
    call: CriCall,
    candidates: Vec<CriMethod>,
    key: Option<Vec<Slot>>,
    request: Option<Vec<u8>>,
    response: Option<Vec<u8>>,
    /// The object the request names (field 1 of every candidate), its kind
    /// and state when the call ended, and its mutation count after it.
    object: Option<(Kind, String, Option<ObjState>, u64)>,
}

/// Turns capture events of CRI connections into [`CriObservation`]s.
pub struct CriCallAssembler {
    conns: HashMap<ConnId, ConnState>,
    /// The client of each open connection whose peer the capture read,
    /// put on each of its calls; forgotten after its close's calls.
    clients: HashMap<ConnId, CriClient>,
    sandboxes: HashMap<String, ObjFacts>,
    containers: HashMap<String, ObjFacts>,
    /// Counter for `ObjFacts::seq`.
    next_seq: u64,
    /// Per kind (`Kind as usize`): ids last known to exist (not gone).
    live: [BTreeSet<String>; 2],
    /// Methods resolved per (connection, hidden `:path` slot set).
    slot_methods: HashMap<(ConnId, Vec<Slot>), (CriMethod, String)>,
    /// Methods still possible per slot set (intersection over its calls).
    slot_candidates: HashMap<(ConnId, Vec<Slot>), Vec<CriMethod>>,
    held: Vec<Held>,
    /// Held calls resolved, waiting to be emitted.
    resolved: Vec<CriObservation>,
    stats: CriStats,
}

impl Default for CriCallAssembler {
    fn default() -> Self {
        Self::new()
    }
}

fn side_of(d: Direction) -> Side {
    // The traced process is the runtime (the gRPC server): what it reads
    // the client sent.
    match d {
        Direction::In => Side::Client,
        Direction::Out => Side::Server,
    }
}

fn known_fields(b: &HeaderBlock) -> Vec<(&[u8], &[u8])> {
    b.fields
        .iter()
        .filter_map(|f| match f {
            Field::Known { name, value } | Field::Learned { name, value, .. } => {
                Some((name.as_slice(), value.as_slice()))
            }
            Field::Unknown { .. } => None,
        })
        .collect()
}

fn unknown_slots(b: &HeaderBlock) -> Vec<Slot> {
    let mut v: Vec<Slot> = b
        .fields
        .iter()
        .filter_map(|f| match f {
            Field::Unknown { slot, .. } => Some(*slot),
            _ => None,
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn names(ms: &[CriMethod]) -> Vec<String> {
    ms.iter().map(|m| m.name().to_string()).collect()
}

fn cap_insert<'a>(
    map: &'a mut HashMap<String, ObjFacts>,
    id: &str,
    next_seq: &mut u64,
) -> &'a mut ObjFacts {
    if !map.contains_key(id) && map.len() >= MAX_IDS {
        // Forget objects known to be gone first, then the oldest half (by
        // when they were first seen: deterministic, unlike map order).
        map.retain(|_, f| f.state != Some(ObjState::Gone));
        if map.len() >= MAX_IDS {
            let mut seqs: Vec<u64> = map.values().map(|f| f.seq).collect();
            seqs.sort_unstable();
            let cut = seqs[seqs.len() / 2];
            map.retain(|_, f| f.seq > cut);
        }
        map.shrink_to_fit();
    }
    map.entry(id.to_owned()).or_insert_with(|| {
        *next_seq += 1;
        ObjFacts {
            seq: *next_seq,
            ..Default::default()
        }
    })
}

impl CriCallAssembler {
    pub fn new() -> Self {
        CriCallAssembler {
            conns: HashMap::new(),
            clients: HashMap::new(),
            sandboxes: HashMap::new(),
            containers: HashMap::new(),
            next_seq: 0,
            live: Default::default(),
            slot_methods: HashMap::new(),
            slot_candidates: HashMap::new(),
            held: Vec::new(),
            resolved: Vec::new(),
            stats: CriStats::default(),
        }
    }

    pub fn stats(&self) -> CriStats {
        self.stats
    }

    /// The earliest start of a call not reported yet (in flight, or held
    /// for evidence): a later stage waiting for the calls that may span a
    /// moment knows how long it must wait.
    pub fn oldest_unreported_start(&self) -> Option<u64> {
        let open = self
            .conns
            .values()
            .flat_map(|c| c.streams.values())
            .filter_map(|s| s.start.map(|t| t.mono_ns));
        let held = self
            .held
            .iter()
            .filter_map(|h| h.call.start.map(|t| t.mono_ns));
        open.chain(held).min()
    }

    /// Feed one capture event (of the CRI socket's connections).
    pub fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<CriObservation>) {
        match ev {
            CaptureEvent::Open(o) => {
                self.release_expired(o.ts.mono_ns, out);
                if o.other_end.is_some() {
                    return;
                }
                self.conns.entry(o.conn).or_insert_with(ConnState::new);
                let client = o.peer.as_ref().map(CriClient::of_peer);
                match &client {
                    Some(c) => self.clients.insert(o.conn, c.clone()),
                    None => self.clients.remove(&o.conn),
                };
                out.push(CriObservation::Connection {
                    conn: o.conn,
                    ts: o.ts,
                    client: client.as_ref().map(CriClient::label),
                    client_process: client,
                });
            }
            CaptureEvent::Chunk(c) => {
                self.release_expired(c.ts.mono_ns, out);
                self.on_chunk(c, out);
            }
            CaptureEvent::Close(c) => {
                self.release_expired(c.ts.mono_ns, out);
                if let Some(st) = self.conns.remove(&c.conn) {
                    let outcome = if c.reason == CloseReason::Untracked {
                        CriOutcome::NoResponse
                    } else {
                        CriOutcome::ConnectionClosed
                    };
                    for (stream_id, s) in st.streams {
                        let e = Ended {
                            stream_id,
                            st: s,
                            end: c.ts,
                            outcome: outcome.clone(),
                            outcome_evidence: None,
                        };
                        self.settle(c.conn, e, out);
                    }
                    self.slot_methods.retain(|(conn, _), _| *conn != c.conn);
                    self.slot_candidates.retain(|(conn, _), _| *conn != c.conn);
                }
                self.clients.remove(&c.conn);
            }
            // Quiet sockets: calls held for evidence still time out.
            CaptureEvent::Tick { ts } => self.release_expired(ts.mono_ns, out),
            CaptureEvent::Process(_)
            | CaptureEvent::Loss(_)
            | CaptureEvent::Sandbox(_)
            | CaptureEvent::CriState(_) => {}
        }
    }

    /// The capture ended: calls in flight end with
    /// [`CriOutcome::NoResponse`]; held calls are released unresolved.
    pub fn finish(&mut self, out: &mut Vec<CriObservation>) {
        let first = out.len();
        let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
        ids.sort();
        for conn in ids {
            let st = self.conns.remove(&conn).expect("listed");
            for (stream_id, s) in st.streams {
                let end = s.start.unwrap_or(Timestamp {
                    mono_ns: 0,
                    wall_ns: 0,
                });
                let e = Ended {
                    stream_id,
                    st: s,
                    end,
                    outcome: CriOutcome::NoResponse,
                    outcome_evidence: None,
                };
                self.settle(conn, e, out);
            }
        }
        // Calls that never ended have no end.
        for o in &mut out[first..] {
            if let CriObservation::Call(c) = o {
                if c.outcome == CriOutcome::NoResponse {
                    c.end = None;
                    c.duration_ns = None;
                }
            }
        }
        for h in std::mem::take(&mut self.held) {
            out.push(CriObservation::Call(Self::unresolved(h)));
        }
    }

    fn on_chunk(&mut self, c: &Chunk, out: &mut Vec<CriObservation>) {
        let st = self.conns.entry(c.conn).or_insert_with(ConnState::new);
        let side = side_of(c.direction);
        let si = side as usize;
        if c.gap_before || c.truncated {
            for s in st.streams.values_mut() {
                s.bytes_lost = true;
            }
        }
        if c.gap_before {
            st.h2.gap(side);
        }
        st.stamps[si].push(c.bytes.len(), c.ts);
        st.h2.push(side, &c.bytes);
        if c.truncated {
            st.h2.gap(side);
        }
        let mut events = Vec::new();
        while let Some((ev, end)) = st.h2.next_with_end(side) {
            events.push((ev, st.stamps[si].stamp(end, c.ts)));
        }
        st.stamps[si].trim(st.h2.buffered(side));
        for (ev, ts) in events {
            self.on_event(c.conn, side, ev, ts, out);
        }
    }

    fn on_event(
        &mut self,
        conn: ConnId,
        side: Side,
        ev: H2Event,
        ts: Timestamp,
        out: &mut Vec<CriObservation>,
    ) {
        let Some(st) = self.conns.get_mut(&conn) else {
            return;
        };
        match ev {
            H2Event::Headers {
                stream_id,
                block,
                end_stream,
            } => match side {
                Side::Client => {
                    if st.streams.len() >= MAX_STREAMS && !st.streams.contains_key(&stream_id) {
                        st.streams.pop_first();
                        self.stats.streams_evicted += 1;
                    }
                    let s = st
                        .streams
                        .entry(stream_id)
                        .or_insert_with(|| StreamState::new(Some(ts)));
                    s.start = Some(ts);
                    let head = RequestHead::from_fields(&known_fields(&block));
                    s.deadline_ns = head.timeout.map(|d| d.as_nanos() as u64);
                    s.path = match (&head.service, &head.rpc_method, &head.path) {
                        (Some(svc), Some(m), _) => match CriMethod::from_path_parts(svc, m) {
                            Some(m) => PathSeen::Cri(m),
                            None => PathSeen::Other(head.path.clone().unwrap_or_default()),
                        },
                        (_, _, Some(p)) => PathSeen::Other(p.clone()),
                        _ => {
                            let slots = unknown_slots(&block);
                            if slots.is_empty() {
                                PathSeen::None
                            } else {
                                PathSeen::Hidden(slots)
                            }
                        }
                    };
                    let _ = end_stream;
                }
                Side::Server => {
                    let known = known_fields(&block);
                    let trailers = Trailers::from_fields(&known);
                    if !end_stream {
                        // Response headers (:status 200).
                        st.streams
                            .entry(stream_id)
                            .or_insert_with(|| StreamState::new(None));
                        return;
                    }
                    let Some(s) = st.streams.remove(&stream_id) else {
                        return;
                    };
                    let (outcome, evidence) = match trailers.grpc_status {
                        Some(0) => (CriOutcome::Ok, None),
                        Some(code) => (
                            CriOutcome::Error {
                                code,
                                status: grpc_status_name(code).into(),
                                message: trailers.grpc_message.unwrap_or_default(),
                            },
                            None,
                        ),
                        None if s.responses > 0 => (
                            CriOutcome::Ok,
                            Some(
                                "grpc-status hidden in a pre-attach HPACK slot; the server sent \
                                 a response message, which gRPC servers do only on success"
                                    .to_owned(),
                            ),
                        ),
                        None => match trailers.grpc_message {
                            Some(message) => (
                                CriOutcome::Error {
                                    code: 2,
                                    status: "UNKNOWN".into(),
                                    message,
                                },
                                Some(
                                    "grpc-status hidden in a pre-attach HPACK slot; \
                                     grpc-message present: an error"
                                        .to_owned(),
                                ),
                            ),
                            None => (CriOutcome::Unknown, None),
                        },
                    };
                    let e = Ended {
                        stream_id,
                        st: s,
                        end: ts,
                        outcome,
                        outcome_evidence: evidence,
                    };
                    self.settle(conn, e, out);
                }
            },
            H2Event::HeaderError { .. } => self.stats.header_errors += 1,
            H2Event::Message { stream_id, message } => {
                let Some(s) = st.streams.get_mut(&stream_id) else {
                    return;
                };
                // CRI is unary but for GetContainerEvents: keep the first
                // message of each direction.
                match side {
                    Side::Client => {
                        if s.request.is_none() {
                            s.request = Some(message.payload);
                        }
                    }
                    Side::Server => {
                        s.responses += 1;
                        if s.response.is_none() {
                            s.response = Some(message.payload);
                        }
                    }
                }
            }
            H2Event::Reset {
                stream_id,
                error_code,
            } => {
                let Some(s) = st.streams.remove(&stream_id) else {
                    return;
                };
                let waited = s.start.map(|t| ts.mono_ns.saturating_sub(t.mono_ns));
                let past_deadline = matches!(
                    (s.deadline_ns, waited),
                    (Some(d), Some(w)) if w + DEADLINE_SLACK_NS >= d
                );
                let outcome = match (side, error_code) {
                    (Side::Client, H2_CANCEL) if past_deadline => CriOutcome::DeadlineExceeded,
                    (Side::Client, H2_CANCEL) => CriOutcome::Cancelled,
                    // A gRPC server resets with CANCEL when the grpc-timeout
                    // it was given runs out (gRPC PROTOCOL-HTTP2.md; grpc-go
                    // does so since 1.71, grpc/grpc-go#8071: containerd 2.1's
                    // CRI server), and the client maps a CANCEL received past
                    // its deadline to DEADLINE_EXCEEDED (grpc/grpc-go#2211):
                    // the client's deadline expired, whichever side's timer
                    // reset the stream first.
                    (Side::Server, H2_CANCEL) if past_deadline => CriOutcome::DeadlineExceeded,
                    (by, code) => CriOutcome::Reset {
                        by: match by {
                            Side::Client => "client",
                            Side::Server => "server",
                        }
                        .into(),
                        error_code: code,
                        error: error_code_name(code).unwrap_or("UNKNOWN").into(),
                    },
                };
                let e = Ended {
                    stream_id,
                    st: s,
                    end: ts,
                    outcome,
                    outcome_evidence: None,
                };
                self.settle(conn, e, out);
            }
            H2Event::Resync { skipped } => {
                if skipped > 0 {
                    out.push(CriObservation::Resync { conn, ts, skipped });
                }
            }
            H2Event::MessageError { .. }
            | H2Event::EndStream { .. }
            | H2Event::GoAway { .. }
            | H2Event::Preface => {}
        }
    }

    /// A stream ended: make its call, or hold it for evidence.
    fn settle(&mut self, conn: ConnId, mut e: Ended, out: &mut Vec<CriObservation>) {
        // A call open across lost bytes that "ended" with its connection:
        // its answer may have been lost, so neither how nor when it ended
        // is known (not "the connection closed before an answer").
        let lost_end = e.st.bytes_lost && e.outcome == CriOutcome::ConnectionClosed;
        if lost_end {
            e.outcome = CriOutcome::Unknown;
            e.outcome_evidence = Some(LOST_END_EVIDENCE.into());
        }
        let ok = e.outcome.is_ok();
        let mut call = CriCall {
            conn,
            stream_id: e.stream_id,
            method: None,
            service: None,
            identified: Identified::Unknown { candidates: vec![] },
            pod: None,
            sandbox_id: None,
            container: None,
            container_id: None,
            request_id: None,
            start: e.st.start,
            end: (!lost_end).then_some(e.end),
            duration_ns: e
                .st
                .start
                .filter(|_| !lost_end)
                .map(|s| e.end.mono_ns.saturating_sub(s.mono_ns)),
            deadline_ns: e.st.deadline_ns,
            outcome: e.outcome,
            outcome_evidence: e.outcome_evidence,
            partial: e.st.start.is_none(),
            summary: String::new(),
            client: self.clients.get(&conn).cloned(),
        };
        let request = e.st.request;
        let response = if ok { e.st.response } else { None };
        match e.st.path {
            PathSeen::Cri(m) => {
                call.identified = Identified::Known;
                self.complete(&mut call, m, request.as_deref(), response.as_deref());
                out.push(CriObservation::Call(call));
            }
            PathSeen::Other(path) => {
                if let Some((svc, m)) = split_path(&path) {
                    call.service = Some(svc.to_owned());
                    call.method = Some(m.to_owned());
                } else {
                    call.method = Some(path);
                }
                call.identified = Identified::Known;
                out.push(CriObservation::Call(call));
            }
            PathSeen::Hidden(_) | PathSeen::None => {
                let key = match e.st.path {
                    PathSeen::Hidden(k) => Some(k),
                    _ => None,
                };
                self.infer(call, key, request, response, out);
            }
        }
    }

    /// Fill `call` for method `m` from its messages and record what they
    /// say about pods and containers.
    fn complete(
        &mut self,
        call: &mut CriCall,
        m: CriMethod,
        request: Option<&[u8]>,
        response: Option<&[u8]>,
    ) {
        call.method = Some(m.name().to_owned());
        call.service = Some(m.service().name().to_owned());
        call.request_id = None;
        let req = match request.map(|b| message::decode_request(m, b)) {
            Some(Ok(r)) => r,
            Some(Err(_)) => {
                self.stats.undecodable += 1;
                RequestInfo::default()
            }
            None => RequestInfo::default(),
        };
        let resp = match response.map(|b| message::decode_response(m, b)) {
            Some(Ok(r)) => Some(r),
            Some(Err(_)) => {
                self.stats.undecodable += 1;
                None
            }
            None => None,
        };
        call.pod.clone_from(&req.pod);
        call.sandbox_id.clone_from(&req.sandbox_id);
        call.container.clone_from(&req.container);
        call.container_id.clone_from(&req.container_id);
        let mut summary = req.summary.clone();
        if let Some(r) = &resp {
            if call.sandbox_id.is_none() {
                call.sandbox_id.clone_from(&r.sandbox_id);
            }
            if call.container_id.is_none() {
                call.container_id.clone_from(&r.container_id);
            }
            if !r.summary.is_empty() {
                if !summary.is_empty() {
                    summary.push_str(" -> ");
                }
                summary.push_str(&r.summary);
            }
        }
        call.summary = summary;
        self.learn(m, call, &req, resp.as_ref());
        self.fill_identity(call);
    }

    /// Pod / container identity from ids seen earlier.
    fn fill_identity(&self, call: &mut CriCall) {
        if let Some(f) = call
            .container_id
            .as_ref()
            .and_then(|id| self.containers.get(id))
        {
            if call.container.is_none() {
                call.container = f.container.clone();
            }
            if call.sandbox_id.is_none() {
                call.sandbox_id = f.sandbox_id.clone();
            }
        }
        if call.pod.is_none() {
            if let Some(f) = call
                .sandbox_id
                .as_ref()
                .and_then(|id| self.sandboxes.get(id))
            {
                call.pod = f.pod.clone();
            }
        }
    }

    /// Record what a settled call says about objects, and re-examine held
    /// calls against it.
    fn learn(
        &mut self,
        m: CriMethod,
        call: &CriCall,
        req: &RequestInfo,
        resp: Option<&ResponseInfo>,
    ) {
        let ok = call.outcome.is_ok();
        let mut observed: Vec<(Kind, String, ObjState)> = Vec::new();
        match (m, resp) {
            (CriMethod::RunPodSandbox, Some(r)) => {
                if let Some(id) = &r.sandbox_id {
                    cap_insert(&mut self.sandboxes, id, &mut self.next_seq)
                        .pod
                        .clone_from(&req.pod);
                    observed.push((
                        Kind::Sandbox,
                        id.clone(),
                        ObjState::Sandbox(SandboxState::Ready),
                    ));
                }
            }
            (CriMethod::CreateContainer, Some(r)) => {
                if let Some(id) = &r.container_id {
                    let f = cap_insert(&mut self.containers, id, &mut self.next_seq);
                    f.container.clone_from(&req.container);
                    f.sandbox_id.clone_from(&req.sandbox_id);
                    observed.push((
                        Kind::Container,
                        id.clone(),
                        ObjState::Container(ContainerState::Created),
                    ));
                }
            }
            _ => {}
        }
        if let Some(r) = resp {
            for s in &r.sandboxes {
                let f = cap_insert(&mut self.sandboxes, &s.id, &mut self.next_seq);
                if f.pod.is_none() {
                    f.pod.clone_from(&s.pod);
                }
                if let Some(state) = s.state {
                    observed.push((Kind::Sandbox, s.id.clone(), ObjState::Sandbox(state)));
                }
            }
            for c in &r.containers {
                let f = cap_insert(&mut self.containers, &c.id, &mut self.next_seq);
                if f.container.is_none() {
                    f.container.clone_from(&c.container);
                }
                if f.sandbox_id.is_none() {
                    f.sandbox_id.clone_from(&c.sandbox_id);
                }
                if let Some(state) = c.state {
                    observed.push((Kind::Container, c.id.clone(), ObjState::Container(state)));
                }
            }
            // An unfiltered list leaves out only what is gone: of the objects
            // last known to exist, those it does not list.
            if r.is_list && !req.filtered {
                let (kind, listed): (Kind, BTreeSet<&str>) = if m == CriMethod::ListPodSandbox {
                    (
                        Kind::Sandbox,
                        r.sandboxes.iter().map(|s| s.id.as_str()).collect(),
                    )
                } else {
                    (
                        Kind::Container,
                        r.containers.iter().map(|c| c.id.as_str()).collect(),
                    )
                };
                let map = match kind {
                    Kind::Sandbox => &self.sandboxes,
                    Kind::Container => &self.containers,
                };
                let live = &mut self.live[kind as usize];
                // Ids evicted from the facts go from the live set too.
                live.retain(|id| map.contains_key(id));

                observed.extend(
                    live.iter()
                        .filter(|id| !listed.contains(id.as_str()))
                        .cloned()
                        .map(|id| (kind, id, ObjState::Gone)),
                );
            }
        }
        // A status call for an object the runtime no longer has.
        if let CriOutcome::Error {
            code: GRPC_NOT_FOUND,
            ..
        } = call.outcome
        {
            match m {
                CriMethod::PodSandboxStatus => {
                    if let Some(id) = &req.sandbox_id {
                        observed.push((Kind::Sandbox, id.clone(), ObjState::Gone));
                    }
                }
                CriMethod::ContainerStatus => {
                    if let Some(id) = &req.container_id {
                        observed.push((Kind::Container, id.clone(), ObjState::Gone));
                    }
                }
                _ => {}
            }
        }
        // The call's own effect.
        let target = req
            .sandbox_id
            .as_ref()
            .map(|id| (Kind::Sandbox, id))
            .or_else(|| req.container_id.as_ref().map(|id| (Kind::Container, id)));
        if !m.is_read_only() {
            if let Some((kind, id)) = target {
                self.bump(kind, id);
            }
        }
        if ok {
            if let (Some(effect), Some((_, id))) = (m.effect(), target) {
                let (kind, state) = match effect {
                    Effect::SandboxStopped => {
                        (Kind::Sandbox, ObjState::Sandbox(SandboxState::NotReady))
                    }
                    Effect::SandboxRemoved => (Kind::Sandbox, ObjState::Gone),
                    Effect::ContainerStarted => (
                        Kind::Container,
                        ObjState::Container(ContainerState::Running),
                    ),
                    Effect::ContainerStopped => {
                        (Kind::Container, ObjState::Container(ContainerState::Exited))
                    }
                    Effect::ContainerRemoved => (Kind::Container, ObjState::Gone),
                };
                self.set_state(kind, id, state);
            }
        }
        let since = call.start.map_or(0, |t| t.mono_ns);
        for (kind, id, state) in observed {
            self.observe(kind, &id, state, since);
            self.set_state(kind, &id, state);
        }
    }

    fn map(&mut self, kind: Kind) -> &mut HashMap<String, ObjFacts> {
        match kind {
            Kind::Sandbox => &mut self.sandboxes,
            Kind::Container => &mut self.containers,
        }
    }

    fn facts(&mut self, kind: Kind, id: &str) -> &mut ObjFacts {
        let map = match kind {
            Kind::Sandbox => &mut self.sandboxes,
            Kind::Container => &mut self.containers,
        };
        cap_insert(map, id, &mut self.next_seq)
    }

    fn bump(&mut self, kind: Kind, id: &str) {
        self.facts(kind, id).mutations += 1;
    }

    fn set_state(&mut self, kind: Kind, id: &str, state: ObjState) {
        self.facts(kind, id).state = Some(state);
        let live = &mut self.live[kind as usize];
        if state == ObjState::Gone {
            live.remove(id);
        } else if !live.contains(id) {
            live.insert(id.to_owned());
            if live.len() > MAX_IDS {
                let map = match kind {
                    Kind::Sandbox => &self.sandboxes,
                    Kind::Container => &self.containers,
                };
                live.retain(|id| map.contains_key(id));
            }
        }
    }

    fn kind_of(&self, id: &str) -> Option<Kind> {
        match (
            self.sandboxes.contains_key(id),
            self.containers.contains_key(id),
        ) {
            (true, false) => Some(Kind::Sandbox),
            (false, true) => Some(Kind::Container),
            _ => None,
        }
    }

    /// The runtime reported `state` for an object, in a call that started at
    /// `since`: a held call that was the last to touch the object before
    /// then may be told apart by the change it made.
    fn observe(&mut self, kind: Kind, id: &str, state: ObjState, since: u64) {
        let mutations = self.map(kind).get(id).map_or(0, |f| f.mutations);
        let Some(i) = self.held.iter().position(|h| {
            h.object.as_ref().is_some_and(|(k, oid, _, after)| {
                *k == kind
                    && oid == id
                    && *after == mutations
                    && h.call.end.is_some_and(|e| e.mono_ns <= since)
            })
        }) else {
            return;
        };
        let h = &self.held[i];
        let before = h.object.as_ref().and_then(|o| o.2);
        let (method, change) = match (before, state) {
            (
                Some(ObjState::Sandbox(SandboxState::Ready)),
                ObjState::Sandbox(SandboxState::NotReady),
            ) => (CriMethod::StopPodSandbox, "went from ready to not ready"),
            (Some(ObjState::Sandbox(_)), ObjState::Gone) if kind == Kind::Sandbox => {
                (CriMethod::RemovePodSandbox, "was gone afterwards")
            }
            (
                Some(ObjState::Container(ContainerState::Created)),
                ObjState::Container(ContainerState::Running),
            ) => (CriMethod::StartContainer, "went from created to running"),
            (
                Some(ObjState::Container(ContainerState::Running)),
                ObjState::Container(ContainerState::Exited),
            ) => (CriMethod::StopContainer, "went from running to exited"),
            (Some(ObjState::Container(_)), ObjState::Gone) if kind == Kind::Container => {
                (CriMethod::RemoveContainer, "was gone afterwards")
            }
            _ => return,
        };
        if !h.candidates.contains(&method) || !h.call.outcome.is_ok() {
            return;
        }
        let what = match kind {
            Kind::Sandbox => "sandbox",
            Kind::Container => "container",
        };
        let evidence = format!(
            "messages fit {}; the {what} it names {change}, and no other call changed it in between",
            names(&h.candidates).join(" or ")
        );
        let h = self.held.remove(i);
        self.resolve_held(h, method, evidence);
    }

    /// Settle a call whose `:path` was not seen.
    fn infer(
        &mut self,
        mut call: CriCall,
        key: Option<Vec<Slot>>,
        request: Option<Vec<u8>>,
        response: Option<Vec<u8>>,
        out: &mut Vec<CriObservation>,
    ) {
        // 3. A slot set already resolved.
        let conn = call.conn;
        let slot_key = key.clone().map(|k| (conn, k));
        if let Some((m, why)) = slot_key
            .as_ref()
            .and_then(|k| self.slot_methods.get(k))
            .cloned()
        {
            let fits = request
                .as_deref()
                .is_none_or(|b| m.request_fit(b).is_some())
                && response
                    .as_deref()
                    .is_none_or(|b| m.response_fit(b).is_some());
            if fits {
                call.identified = Identified::Inferred {
                    evidence: format!("its :path is in the same HPACK slot as a call {why}"),
                };
                self.complete(&mut call, m, request.as_deref(), response.as_deref());
                out.push(CriObservation::Call(call));
                self.drain_resolved(out);
                return;
            }
        }
        // 1. Message shapes.
        let mut cands = message::candidates(request.as_deref(), response.as_deref());
        let mut why = vec![match (&request, &response) {
            (Some(_), Some(_)) => "its request and response messages fit only",
            (Some(_), None) => "its request message fits only",
            (None, Some(_)) => "its response message fits only",
            (None, None) => "nothing fits only",
        }
        .to_owned()];
        // 2. The kind of object the request names.
        let mut object = None;
        if let Some(b) = request.as_deref() {
            let named: Vec<(CriMethod, Option<(Kind, String)>)> = cands
                .iter()
                .map(|&m| {
                    let info = message::decode_request(m, b).ok();
                    let target = info.and_then(|i| {
                        i.sandbox_id
                            .map(|id| (Kind::Sandbox, id))
                            .or_else(|| i.container_id.map(|id| (Kind::Container, id)))
                    });
                    (m, target)
                })
                .collect();
            let id = named
                .iter()
                .find_map(|(_, t)| t.as_ref().map(|(_, id)| id.clone()));
            if let Some(kind) = id.as_deref().and_then(|id| self.kind_of(id)) {
                let before = cands.len();
                // A request whose field 1 is a known object's id names that
                // object: methods that name none, or another kind, are out.
                cands = named
                    .iter()
                    .filter(|(_, t)| t.as_ref().is_some_and(|(k, _)| *k == kind))
                    .map(|(m, _)| *m)
                    .collect();
                if cands.len() < before {
                    why.push(match kind {
                        Kind::Sandbox => "its id is a known pod sandbox".to_owned(),
                        Kind::Container => "its id is a known container".to_owned(),
                    });
                }
                let id = id.expect("kind of an id");
                // Every remaining candidate names this object in field 1.
                if cands.iter().all(|m| {
                    named
                        .iter()
                        .any(|(n, t)| n == m && t.as_ref().is_some_and(|(_, i)| *i == id))
                }) {
                    let facts = self.map(kind).get(&id);
                    let state = facts.and_then(|f| f.state);
                    object = Some((kind, id, state));
                }
            }
        }
        // 3. The slot set narrows as its calls are seen.
        if self.slot_candidates.len() >= MAX_SLOT_SETS {
            self.slot_candidates.clear();
        }
        if self.slot_methods.len() >= MAX_SLOT_SETS {
            self.slot_methods.clear();
        }
        if let Some(k) = &slot_key {
            let entry = self
                .slot_candidates
                .entry(k.clone())
                .or_insert_with(|| cands.clone());
            entry.retain(|m| cands.contains(m));
            if entry.len() == 1 && cands.len() > 1 && cands.contains(&entry[0]) {
                cands.clone_from(entry);
                why.push("calls sharing its :path HPACK slot fit only it".to_owned());
            }
        }
        if cands.len() == 1 {
            let m = cands[0];
            let evidence = format!("{} {}", why.join("; "), m.name());
            let evidence = evidence.replacen(" only;", ";", 1);
            call.identified = Identified::Inferred {
                evidence: evidence.clone(),
            };
            if let Some(k) = slot_key {
                self.slot_methods
                    .insert(k, (m, format!("identified as {} ({evidence})", m.name())));
            }
            self.complete(&mut call, m, request.as_deref(), response.as_deref());
            out.push(CriObservation::Call(call));
            self.drain_slot_resolutions(out);
            return;
        }
        // Held until evidence comes.
        if let Some((kind, id, _)) = &object {
            let (kind, id) = (*kind, id.clone());
            let any_mutating = cands.iter().any(|m| !m.is_read_only());
            if any_mutating {
                self.bump(kind, &id);
            }
        }
        let object = object.map(|(kind, id, state)| {
            let after = self.map(kind).get(&id).map_or(0, |f| f.mutations);
            (kind, id, state, after)
        });
        if let Some((kind, id, _, _)) = &object {
            match kind {
                Kind::Sandbox => call.sandbox_id = Some(id.clone()),
                Kind::Container => call.container_id = Some(id.clone()),
            }
            self.fill_identity(&mut call);
        } else if cands.iter().any(|m| m.request_names().is_some()) {
            // An id no earlier call showed (its object predates the
            // attach): kept as is, for the NRI events that name it.
            call.request_id = request.as_deref().and_then(message::request_id);
        }
        if self.held.len() >= MAX_HELD {
            self.stats.held_overflow += 1;
            let h = self.held.remove(0);
            out.push(CriObservation::Call(Self::unresolved(h)));
        }
        self.held.push(Held {
            call,
            candidates: cands,
            key,
            request,
            response,
            object,
        });
    }

    /// Held calls of resolved slot sets.
    fn drain_slot_resolutions(&mut self, out: &mut Vec<CriObservation>) {
        let mut i = 0;
        while i < self.held.len() {
            let h = &self.held[i];
            let hit = h
                .key
                .clone()
                .and_then(|k| self.slot_methods.get(&(h.call.conn, k)))
                .filter(|(m, _)| h.candidates.contains(m))
                .cloned();
            match hit {
                Some((m, why)) => {
                    let h = self.held.remove(i);
                    let evidence = format!("its :path is in the same HPACK slot as a call {why}");
                    out.push(CriObservation::Call(self.finish_held(h, m, evidence)));
                }
                None => i += 1,
            }
        }
        self.drain_resolved(out);
    }

    /// Calls resolved by [`Self::observe`] wait in `resolved` until emitted.
    fn drain_resolved(&mut self, out: &mut Vec<CriObservation>) {
        out.append(&mut self.resolved);
    }

    /// A held call resolved by what followed it: so is its slot set, and
    /// the held calls sharing it.
    fn resolve_held(&mut self, h: Held, m: CriMethod, evidence: String) {
        let key = h.key.clone().map(|k| (h.call.conn, k));
        let call = self.finish_held(h, m, evidence.clone());
        self.resolved.push(CriObservation::Call(call));
        if let Some(k) = key {
            self.slot_methods
                .insert(k, (m, format!("identified as {} ({evidence})", m.name())));
            let mut out = Vec::new();
            self.drain_slot_resolutions(&mut out);
            self.resolved.append(&mut out);
        }
    }

    fn finish_held(&mut self, h: Held, m: CriMethod, evidence: String) -> CriCall {
        let mut call = h.call;
        call.identified = Identified::Inferred { evidence };
        let (pod, sandbox_id, container_id) = (
            call.pod.take(),
            call.sandbox_id.take(),
            call.container_id.take(),
        );
        self.complete(&mut call, m, h.request.as_deref(), h.response.as_deref());
        call.pod = call.pod.or(pod);
        call.sandbox_id = call.sandbox_id.or(sandbox_id);
        call.container_id = call.container_id.or(container_id);
        call
    }

    fn unresolved(h: Held) -> CriCall {
        let mut call = h.call;
        call.identified = Identified::Unknown {
            candidates: names(&h.candidates),
        };
        call
    }

    /// Release held calls that waited [`HOLD_NS`] (capture time) past their
    /// end, unresolved.
    fn release_expired(&mut self, now: u64, out: &mut Vec<CriObservation>) {
        self.drain_resolved(out);
        let mut i = 0;
        while i < self.held.len() {
            let end = self.held[i].call.end.map_or(0, |e| e.mono_ns);
            if end.saturating_add(HOLD_NS) < now {
                let h = self.held.remove(i);
                out.push(CriObservation::Call(Self::unresolved(h)));
            } else {
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{ConnClose, ConnOpen, Origin, Syscall};
    use crate::decode::test_strategies::{bytes_below, config};
    use proptest::prelude::*;

    fn ts(n: u64) -> Timestamp {
        Timestamp {
            mono_ns: n,
            wall_ns: n,
        }
    }

    /// One capture event of the garbage property, on connection 0, 1 or
    /// 2: an `Open` one time in 97, else a chunk in either direction of
    /// fewer than 200 random bytes (after the client preface one time in
    /// 13: a plausible HTTP/2 start), truncated one time in 31, after lost
    /// bytes one time in 37.
    #[derive(Debug, Clone)]
    enum Garbage {
        Open(u64),
        Chunk {
            conn: u64,
            out: bool,
            preface: bool,
            bytes: Vec<u8>,
            truncated: bool,
            gap_before: bool,
        },
    }

    fn garbage() -> impl Strategy<Value = Garbage> {
        let chunk = (
            0u64..3,
            any::<bool>(),
            prop::bool::weighted(1.0 / 13.0),
            bytes_below(200),
            prop::bool::weighted(1.0 / 31.0),
            prop::bool::weighted(1.0 / 37.0),
        )
            .prop_map(|(conn, out, preface, bytes, truncated, gap_before)| {
                Garbage::Chunk {
                    conn,
                    out,
                    preface,
                    bytes,
                    truncated,
                    gap_before,
                }
            });
        prop_oneof![
            1 => (0u64..3).prop_map(Garbage::Open),
            96 => chunk,
        ]
    }

    /// A call open when bytes of its connection were lost, whose
    /// connection then closed: its end is unknown (the answer may have been
    /// lost), not "the connection closed before an answer"; a call that
    /// started after the loss and closed with its connection still says
    /// so.
    #[test]
    fn a_call_open_across_lost_bytes_has_an_unknown_end() {
        fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
            let len = payload.len();
            let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(payload);
            f
        }
        // :method POST, :scheme http, :path as a literal without indexing.
        let headers = |path: &str| {
            let mut b = vec![0x83, 0x86, 0x04, path.len() as u8];
            b.extend_from_slice(path.as_bytes());
            b
        };
        let path = "/runtime.v1.RuntimeService/StopContainer";
        let chunk = |i: u64, bytes: Vec<u8>, gap_before: bool| {
            CaptureEvent::Chunk(Chunk {
                conn: ConnId(1),
                direction: Direction::In,
                ts: ts(i),
                tid: 1,
                syscall: Syscall::Read,
                syscall_len: bytes.len() as u64,
                bytes,
                truncated: false,
                gap_before,
            })
        };
        let mut a = CriCallAssembler::new();
        let mut out = Vec::new();
        let mut first = crate::decode::cri::frame::PREFACE.to_vec();
        first.extend(frame(0x4, 0, 0, &[]));
        first.extend(frame(0x1, 0x4, 1, &headers(path)));
        a.on_capture(&chunk(10, first, false), &mut out);
        // Lost records, then a call that starts after them.
        a.on_capture(
            &chunk(20, frame(0x1, 0x4, 3, &headers(path)), true),
            &mut out,
        );
        a.on_capture(
            &CaptureEvent::Close(ConnClose {
                conn: ConnId(1),
                ts: ts(30),
                reason: CloseReason::Closed,
            }),
            &mut out,
        );
        a.finish(&mut out);
        let calls: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                CriObservation::Call(c) => Some((c.stream_id, c)),
                _ => None,
            })
            .collect();
        assert_eq!(calls.len(), 2, "{out:?}");
        let (_, lost) = calls.iter().find(|(id, _)| *id == 1).unwrap();
        assert_eq!(lost.outcome, CriOutcome::Unknown);
        assert_eq!(lost.outcome_evidence.as_deref(), Some(LOST_END_EVIDENCE));
        assert_eq!((lost.end, lost.duration_ns), (None, None));
        let (_, after) = calls.iter().find(|(id, _)| *id == 3).unwrap();
        assert_eq!(after.outcome, CriOutcome::ConnectionClosed);
        assert_eq!(after.end, Some(ts(30)));
    }

    proptest! {
        #![proptest_config(config(4))]

        /// Random bytes, gaps and truncations in both directions of several
        /// connections (3000 events on one assembler) never panic, and the
        /// state held stays bounded.
        #[test]
        fn garbage_never_panics(events in prop::collection::vec(garbage(), 3000)) {
            let mut a = CriCallAssembler::new();
            let mut out = Vec::new();
            for (i, ev) in (0u64..).zip(events) {
                match ev {
                    Garbage::Open(conn) => a.on_capture(
                        &CaptureEvent::Open(ConnOpen {
                            conn: ConnId(conn),
                            ts: ts(i),
                            tgid: 1,
                            fd: 3,
                            origin: Origin::Existing,
                            socket_path: None,
                            peer: None,
                            inode: None,
                            other_end: None,
                        }),
                        &mut out,
                    ),
                    Garbage::Chunk {
                        conn,
                        out: outgoing,
                        preface,
                        bytes: random,
                        truncated,
                        gap_before,
                    } => {
                        let mut bytes = if preface {
                            crate::decode::cri::frame::PREFACE.to_vec()
                        } else {
                            Vec::new()
                        };
                        bytes.extend(random);
                        a.on_capture(
                            &CaptureEvent::Chunk(Chunk {
                                conn: ConnId(conn),
                                direction: if outgoing {
                                    Direction::Out
                                } else {
                                    Direction::In
                                },
                                ts: ts(i * 1_000_000),
                                tid: 1,
                                syscall: Syscall::Read,
                                syscall_len: bytes.len() as u64,
                                bytes,
                                truncated,
                                gap_before,
                            }),
                            &mut out,
                        );
                    }
                }
                prop_assert!(a.held.len() <= MAX_HELD);
            }
            a.finish(&mut out);
            prop_assert!(a.held.is_empty());
        }
    }
}
