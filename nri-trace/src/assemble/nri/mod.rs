//! The NRI call assembler: each ttrpc request on an NRI connection matched
//! with its response into a typed [`NriCall`] (`model::nri_call`), with the
//! plugin it went to and how it ended.
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
//! is [`NriOutcome::TimedOut`] if its `timeout_nano` had (nearly) run out, else
//! [`NriOutcome::ConnectionClosed`]. The runtime closes only when its own timer
//! fired (`isFatalError`: `context.DeadlineExceeded`); when the CRI caller
//! cancelled first (`context.Canceled`) its call returns and the connection
//! stays open. So a request whose deadline has passed by
//! [`DEADLINE_GRACE_NS`] of capture time is [`NriOutcome::TimedOut`] too, with
//! no end (nothing on the wire marks it) and its `timeout_nano` as duration.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::chunk_stamps::ChunkStamps;
use crate::{
    basic_types::{ConnId, Direction, Timestamp},
    capture::{CaptureEvent, Chunk, CloseReason, ConnOpen},
    decode::nri::{
        message::{
            self, Event, Method, RequestBody, ResponseBody, Status, Subject, WireResponse,
            NRI_SERVICE_PREFIX,
        },
        proto::api,
        ttrpc::{MessageType, MuxTtrpc, TtrpcEvent, TtrpcMessage, MUX_LEVEL},
    },
    decode::trace_context::TraceContext,
    model::nri_call::{
        Adjustment, Caller, ConfiguredRuntime, ContainerRef, IdentitySource, NriCall,
        NriObservation, NriOutcome, NriVersions, PluginId, PodRef, SplitPart, ENV_PLUGIN_NAME,
    },
};

mod calls;
mod summary;
#[cfg(test)]
mod tests;

use calls::{
    caller_of, complete_call, container_ref, deadline, partial_reply, pod_ref, timed_out,
    unanswered,
};
pub(crate) use summary::subscribed_events;
use summary::{adjustment_of, configured_runtime, describe_request, describe_response};

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
            configured_runtime: None,
            traceparent: self.traceparent,
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
    configured_runtime: Option<ConfiguredRuntime>,
    traceparent: Option<TraceContext>,
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
/// seen first (it tells [`NriOutcome::TimedOut`] from a plain close).
pub(crate) const DEADLINE_GRACE_NS: u64 = 100_000_000;

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
    events: Option<Vec<Event>>,
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
                            NriOutcome::NoResponse
                        } else if timed_out(waited, p.timeout_nano) {
                            NriOutcome::TimedOut
                        } else {
                            NriOutcome::ConnectionClosed
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
    /// [`NriOutcome::NoResponse`], in connection order.
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
                    NriOutcome::NoResponse,
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
                let configured_runtime = match &body {
                    Ok(RequestBody::Configure(r)) => Some(configured_runtime(r)),
                    _ => None,
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
                    configured_runtime,
                    traceparent: req.traceparent,
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
                            NriOutcome::NoResponse,
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
                        NriOutcome::NoResponse,
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
                        NriOutcome::NoResponse,
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
