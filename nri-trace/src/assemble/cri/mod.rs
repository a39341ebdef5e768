//! The CRI call assembler: each gRPC stream on the runtime's CRI socket
//! (kubelet -> containerd / CRI-O) as one [`CriCall`] (`model::cri_call`):
//! method, pod and container identity, timing, deadline and outcome.
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

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::chunk_stamps::ChunkStamps;
use crate::{
    basic_types::{ConnId, Direction, Timestamp},
    capture::{CaptureEvent, Chunk, CloseReason},
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
    model::{
        cri_call::{
            CallMethod, CriCall, CriObservation, CriOutcome, CriStats, Identified, TraceContext,
            LOST_END_EVIDENCE, TEARDOWN_METHODS,
        },
        cri_client::CriClient,
    },
};

mod deadline_race;
mod inference;
#[cfg(test)]
mod tests;

/// How long (capture time) an ambiguous call waits for evidence.
pub(crate) const HOLD_NS: u64 = 3_000_000_000;

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
    /// The client's `traceparent`, when its headers carried one.
    traceparent: Option<TraceContext>,
    request: Option<Vec<u8>>,
    response: Option<Vec<u8>>,
    responses: u32,
    /// Bytes of its connection were lost (capture loss, a truncated
    /// chunk) while it was open: its end may be among them.
    bytes_lost: bool,
}

impl StreamState {
    /// `at` is at or past the call's deadline, within
    /// [`DEADLINE_SLACK_NS`] (start and deadline known).
    fn at_deadline(&self, at: Timestamp) -> bool {
        matches!(
            (self.deadline_ns, self.start),
            (Some(d), Some(start)) if at.mono_ns.saturating_sub(start.mono_ns) + DEADLINE_SLACK_NS >= d
        )
    }

    fn new(start: Option<Timestamp>) -> Self {
        StreamState {
            start,
            path: PathSeen::None,
            deadline_ns: None,
            traceparent: None,
            request: None,
            response: None,
            responses: 0,
            bytes_lost: false,
        }
    }
}

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
    /// The streams the client reset last (ids are never reused on a
    /// connection, RFC 9113 §5.1.1): the runtime's answer to one of them,
    /// written as the client gave up, is no call of its own.
    reset_by_client: VecDeque<u32>,
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            h2: H2Connection::new(),
            stamps: Default::default(),
            streams: BTreeMap::new(),
            reset_by_client: VecDeque::new(),
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
pub(crate) struct CriCallAssembler {
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
    /// Streams the runtime ended at the client's deadline, in the order
    /// they ended, until the client's reset tells they were never read
    /// (`deadline_race`).
    at_deadline: Vec<(ConnId, Ended)>,
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

/// A `traceparent` whose name HPACK hid: after a late attach, kubelet's
/// encoder (grpc-go, golang.org/x/net/http2/hpack) names each call's
/// traceparent by the dynamic-table entry the previous call's added, a
/// chain that began before the attach, so the name stays unknown while
/// every value is on the wire as a literal. A value of the W3C form
/// (version-traceid-parentid-flags, 55 characters of lower-case hex and
/// dashes: W3C Trace Context 3.2) is taken for one.
fn hidden_traceparent(b: &HeaderBlock) -> Option<TraceContext> {
    b.fields.iter().find_map(|f| match f {
        Field::Unknown { value: Some(v), .. } => TraceContext::parse(v),
        _ => None,
    })
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
    pub(crate) fn new() -> Self {
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
            at_deadline: Vec::new(),
            stats: CriStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> CriStats {
        self.stats
    }

    /// The earliest start of a call not reported yet (in flight, or held
    /// for evidence): a later stage waiting for the calls that may span a
    /// moment knows how long it must wait.
    pub(crate) fn oldest_unreported_start(&self) -> Option<u64> {
        let open = self
            .conns
            .values()
            .flat_map(|c| c.streams.values())
            .filter_map(|s| s.start.map(|t| t.mono_ns));
        let held = self
            .held
            .iter()
            .filter_map(|h| h.call.start.map(|t| t.mono_ns));
        let at_deadline = self
            .at_deadline
            .iter()
            .filter_map(|(_, e)| e.st.start.map(|t| t.mono_ns));
        open.chain(held).chain(at_deadline).min()
    }

    /// Feed one capture event (of the CRI socket's connections).
    pub(crate) fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<CriObservation>) {
        match ev {
            CaptureEvent::Open(o) => {
                self.release(o.ts.mono_ns, out);
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
                self.release(c.ts.mono_ns, out);
                self.on_chunk(c, out);
            }
            CaptureEvent::Close(c) => {
                self.release(c.ts.mono_ns, out);
                self.release_answers_of(Some(c.conn), out);
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
                    if c.reason != CloseReason::Untracked {
                        out.push(CriObservation::ConnectionGone {
                            conn: c.conn,
                            ts: c.ts,
                            client: self.clients.get(&c.conn).map(CriClient::label),
                        });
                    }
                }
                self.clients.remove(&c.conn);
            }
            // Quiet sockets: calls held for evidence still time out.
            CaptureEvent::Tick { ts } => self.release(ts.mono_ns, out),
            CaptureEvent::Process(_)
            | CaptureEvent::Loss(_)
            | CaptureEvent::Sandbox(_)
            | CaptureEvent::CriState(_) => {}
        }
    }

    /// The capture ended: calls in flight end with
    /// [`CriOutcome::NoResponse`]; held calls are released unresolved.
    pub(crate) fn finish(&mut self, out: &mut Vec<CriObservation>) {
        self.release_answers_of(None, out);
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
                    s.traceparent = head.traceparent.or_else(|| hidden_traceparent(&block));
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
                        if st.reset_by_client.contains(&stream_id) {
                            return;
                        }
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
                            // Seen from its request on, no bytes lost, and
                            // no response message: Trailers-Only, a failure
                            // (CriOutcome::Failed).
                            None if s.start.is_some() && !s.bytes_lost => (
                                CriOutcome::Failed,
                                Some(
                                    "grpc-status and grpc-message hidden in pre-attach HPACK \
                                     slots; the server ended the call without a response \
                                     message, which a gRPC server does only for an error"
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
                    if e.st.at_deadline(e.end) {
                        self.at_deadline.push((conn, e));
                    } else {
                        self.settle(conn, e, out);
                    }
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
                            if let Some(call) = self.pending(conn, stream_id) {
                                out.push(CriObservation::Pending(call));
                            }
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
                if side == Side::Client {
                    deadline_race::remember_reset(&mut st.reset_by_client, stream_id);
                }
                let Some(s) = st.streams.remove(&stream_id) else {
                    if side == Side::Client {
                        self.client_gave_up(conn, stream_id, ts, out);
                    }
                    return;
                };
                let past_deadline = s.at_deadline(ts);
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
        let mut call = self.new_call(conn, e.stream_id, &e.st);
        call.end = (!lost_end).then_some(e.end);
        call.duration_ns =
            e.st.start
                .filter(|_| !lost_end)
                .map(|s| e.end.mono_ns.saturating_sub(s.mono_ns));
        call.outcome = e.outcome;
        call.outcome_evidence = e.outcome_evidence;
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
                    call.method = Some(CallMethod::from_name(m));
                } else {
                    call.method = Some(CallMethod::from_name(&path));
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
        call.method = Some(m.into());
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
        call.stop_timeout_s = req.stop_timeout_s;
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

    /// A call of stream `stream_id` as far as its request goes: no end,
    /// outcome `NoResponse`, its method and ids not yet filled in.
    fn new_call(&self, conn: ConnId, stream_id: u32, st: &StreamState) -> CriCall {
        CriCall {
            conn,
            stream_id,
            method: None,
            service: None,
            identified: Identified::Unknown { candidates: vec![] },
            pod: None,
            sandbox_id: None,
            container: None,
            container_id: None,
            request_id: None,
            start: st.start,
            end: None,
            duration_ns: None,
            deadline_ns: st.deadline_ns,
            stop_timeout_s: None,
            traceparent: st.traceparent,
            outcome: CriOutcome::NoResponse,
            outcome_evidence: None,
            partial: st.start.is_none(),
            summary: String::new(),
            client: self.clients.get(&conn).cloned(),
        }
    }

    /// A teardown call whose request just came ([`TEARDOWN_METHODS`]):
    /// reported pending, so that a pod waiting on it (a grace period, a
    /// runtime that does not answer) shows what it waits on. Nothing is
    /// learnt from it: its `Call` does that when it ends.
    fn pending(&self, conn: ConnId, stream_id: u32) -> Option<CriCall> {
        let s = self.conns.get(&conn)?.streams.get(&stream_id)?;
        let PathSeen::Cri(m) = s.path else {
            return None;
        };
        if !TEARDOWN_METHODS.contains(&m) || s.start.is_none() {
            return None;
        }
        let req = message::decode_request(m, s.request.as_deref()?).ok()?;
        let mut call = self.new_call(conn, stream_id, s);
        call.method = Some(m.into());
        call.service = Some(m.service().name().to_owned());
        call.identified = Identified::Known;
        call.pod = req.pod;
        call.sandbox_id = req.sandbox_id;
        call.container = req.container;
        call.container_id = req.container_id;
        call.stop_timeout_s = req.stop_timeout_s;
        call.summary = req.summary;
        self.fill_identity(&mut call);
        Some(call)
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
}
