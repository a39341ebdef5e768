//! The second half of the NRI assembler: responses matched to their
//! requests, calls given up on (deadline, close), replies seen before their
//! request, and the plugin end of a connection; and the calls they make.

use super::{
    adjustment_of, api, describe_response, dir_index, dir_of_index, message, opposite,
    subscribed_events, CallKey, Caller, ConnId, ConnState, ContainerRef, Direction, EarlyReply,
    MessageType, NriCall, NriCallAssembler, NriObservation, NriOutcome, PendingCall, PodRef,
    ResponseBody, Status, Timestamp, TtrpcMessage, WireResponse, DEADLINE_GRACE_NS,
    EARLY_REPLY_WAIT_NS, MAX_EARLY_REPLIES_PER_CONN, MAX_GIVEN_UP_PER_CONN, MAX_PLUGIN_SIDE,
    PLUGIN_REPLY_WAIT_NS,
};

impl NriCallAssembler {
    /// A response to the call under (`mux_conn`, `stream_id`) travelled in
    /// `resp_dir` on `conn`, its last byte at `ts`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_response(
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
                        st.events = Some(subscribed_events(r.events));
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
        } else if let NriOutcome::Error { code, .. } = &outcome {
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
    /// module docs). Reported [`NriOutcome::TimedOut`], in connection order.
    pub(super) fn give_up_overdue(&mut self, now: u64, out: &mut Vec<NriObservation>) {
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
                    NriOutcome::TimedOut,
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
    pub(super) fn release_early(&mut self, now: Option<u64>, out: &mut Vec<NriObservation>) {
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
    pub(super) fn release_awaiting(&mut self, now: Option<u64>, out: &mut Vec<NriObservation>) {
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
    pub(super) fn on_plugin_end(
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
pub(super) fn caller_of(d: Direction) -> Caller {
    match d {
        Direction::Out => Caller::Runtime,
        Direction::In => Caller::Plugin,
    }
}

/// When capture time past which `p` counts as given up by its caller
/// (deadline plus [`DEADLINE_GRACE_NS`]); `None` without a timeout.
pub(super) fn deadline(p: &PendingCall) -> Option<u64> {
    (p.timeout_nano > 0).then(|| {
        p.start
            .mono_ns
            .saturating_add(p.timeout_nano as u64)
            .saturating_add(DEADLINE_GRACE_NS)
    })
}

/// Tolerance of the timeout test: the runtime starts its timer before the
/// write the capture timestamps, and closes right when it fires.
pub(super) fn timed_out(waited_ns: u64, timeout_nano: i64) -> bool {
    if timeout_nano <= 0 {
        return false;
    }
    let t = timeout_nano as u64;
    let slack = (t / 20).min(50_000_000);
    waited_ns + slack >= t
}

/// How a call ended, by its response's status.
pub(super) fn outcome_of(resp: &WireResponse) -> NriOutcome {
    match resp.error() {
        Some(Status { code, message }) => NriOutcome::Error {
            code: *code,
            message: message.clone(),
        },
        None => NriOutcome::Ok,
    }
}

/// A response under `key` on `conn` whose request was never seen.
pub(super) fn partial_reply(conn: ConnId, st: &ConnState, key: CallKey, e: EarlyReply) -> NriCall {
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
        configured_runtime: None,
        traceparent: None,
    }
}

/// `p`, under `key` on connection `conn`, ended without a response:
/// `waited` is how long its caller is known to have waited, if at all.
pub(super) fn unanswered(
    conn: ConnId,
    st: &ConnState,
    key: CallKey,
    p: PendingCall,
    outcome: NriOutcome,
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
pub(super) fn complete_call(
    conn: ConnId,
    st: &ConnState,
    mux_conn: u32,
    stream_id: u32,
    req_dir: Direction,
    p: PendingCall,
    end: Option<Timestamp>,
    outcome: NriOutcome,
) -> NriCall {
    NriCall {
        conn,
        mux_conn,
        stream_id,
        plugin: st.plugin.clone(),
        caller: caller_of(req_dir),
        method: Some(p.method),
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
        configured_runtime: p.configured_runtime,
        traceparent: p.traceparent,
    }
}

pub(super) fn pod_ref(p: api::PodSandbox) -> PodRef {
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

pub(super) fn container_ref(c: api::Container) -> ContainerRef {
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
