//! The runtime's answer and the client's deadline crossing on the wire.
//!
//! A runtime that gives up on a slow plugin just inside the client's
//! deadline (containerd 2.x passes the CRI deadline left to the NRI hook)
//! answers a few milliseconds before the client's timer fires. The client
//! may then give up before it read the answer: it resets the stream
//! (RST_STREAM CANCEL; grpc-go `http2Client.closeStream`, h2 when a request
//! is dropped while its stream is open) after the runtime's trailers are on
//! the wire, and reports DEADLINE_EXCEEDED, as kubelet would, and retries.
//! Seen on containerd 2.1.9 in the lab (2026-11-28): the driver's first
//! RunPodSandbox timed out, nri-trace had it OK, and the retry's "name is
//! reserved" came with no deadline before it.
//!
//! So a stream the runtime ends within [`DEADLINE_SLACK_NS`] of its
//! deadline is held until the client resets it (the client never read the
//! answer: [`CriOutcome::DeadlineExceeded`], the answer named in the
//! evidence) or until [`DEADLINE_SLACK_NS`] of capture time past its end:
//! the answer stands if it came before the deadline, and is the client's
//! expiry if it came after (`answered_past_deadline`). The other order, the client's reset first and the
//! runtime's answer after it, is the ordinary expiry; that answer is
//! dropped (`ConnState::reset_by_client`) instead of making a call with no
//! request.

use std::collections::VecDeque;

use super::{CriCallAssembler, Ended, DEADLINE_SLACK_NS};
use crate::{
    basic_types::{ConnId, Timestamp},
    model::cri_call::{CriObservation, CriOutcome},
};

/// Most client resets remembered per connection: the answers written as
/// the client gave up come within microseconds of the reset.
const MAX_RESETS_REMEMBERED: usize = 64;

pub(super) fn remember_reset(resets: &mut VecDeque<u32>, stream_id: u32) {
    if resets.len() >= MAX_RESETS_REMEMBERED {
        resets.pop_front();
    }
    resets.push_back(stream_id);
}

/// The answer of `e` written after the client's deadline had passed, with
/// no reset after it: the client had given up before the runtime wrote it
/// (the client's timer starts before the request reaches the runtime, so
/// the time from the request to the answer here is less than the client's
/// own). It reports DEADLINE_EXCEEDED, and drops the answer if it reads it
/// at all: a tonic client with its h2 stream closed by the trailers sends
/// no reset (containerd 2.1.9 in CI, 2026-11-30: OK 1,003.1 ms after a
/// 1,000 ms deadline, the driver's DEADLINE_EXCEEDED 2 ms later).
fn answered_past_deadline(e: &mut Ended) {
    let (Some(d), Some(start)) = (e.st.deadline_ns, e.st.start) else {
        return;
    };
    // An error answer keeps its status and message: the runtime's words
    // (CRI-O's DEADLINE_EXCEEDED carries "name is reserved") are evidence,
    // and the call failed either way.
    let took = e.end.mono_ns.saturating_sub(start.mono_ns);
    if took <= d || e.outcome != CriOutcome::Ok {
        return;
    }
    e.outcome_evidence = Some(format!(
        "the runtime answered OK {:.1} ms after the client's {:.0} ms deadline had passed: \
         the client had given up",
        (took - d) as f64 / 1e6,
        d as f64 / 1e6
    ));
    e.outcome = CriOutcome::DeadlineExceeded;
}

impl CriCallAssembler {
    /// The client reset `stream_id` of `conn` at `ts`, after the runtime
    /// had ended it: if the runtime's answer came at the deadline, the
    /// client gave up before reading it.
    pub(super) fn client_gave_up(
        &mut self,
        conn: ConnId,
        stream_id: u32,
        ts: Timestamp,
        out: &mut Vec<CriObservation>,
    ) {
        let Some(i) = self
            .at_deadline
            .iter()
            .position(|(c, e)| *c == conn && e.stream_id == stream_id)
        else {
            return;
        };
        let (_, mut e) = self.at_deadline.remove(i);
        let answer = match &e.outcome {
            CriOutcome::Ok => "OK".to_owned(),
            CriOutcome::Error { status, .. } => status.clone(),
            other => format!("{other:?}"),
        };
        e.outcome_evidence = Some(format!(
            "the runtime answered {answer} {:.1} ms before the client reset the stream at its \
             deadline: the client gave up without reading the answer",
            ts.mono_ns.saturating_sub(e.end.mono_ns) as f64 / 1e6
        ));
        e.outcome = CriOutcome::DeadlineExceeded;
        e.end = ts;
        self.settle(conn, e, out);
    }

    /// The answers at the deadline no reset followed within
    /// [`DEADLINE_SLACK_NS`] of capture time (`now`) stand.
    pub(super) fn release_answers(&mut self, now: u64, out: &mut Vec<CriObservation>) {
        self.settle_answers_where(
            |_, e| e.end.mono_ns.saturating_add(DEADLINE_SLACK_NS) < now,
            out,
        );
    }

    /// The answers at the deadline of `conn` (closing; None: all, the
    /// capture ended) stand: no reset can follow.
    pub(super) fn release_answers_of(
        &mut self,
        conn: Option<ConnId>,
        out: &mut Vec<CriObservation>,
    ) {
        self.settle_answers_where(|c, _| conn.is_none_or(|x| x == c), out);
    }

    /// Settle the held answers `due` picks, in the order they ended.
    fn settle_answers_where(
        &mut self,
        due: impl Fn(ConnId, &Ended) -> bool,
        out: &mut Vec<CriObservation>,
    ) {
        let (due, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.at_deadline)
            .into_iter()
            .partition(|(c, e)| due(*c, e));
        self.at_deadline = kept;
        for (c, mut e) in due {
            answered_past_deadline(&mut e);
            self.settle(c, e, out);
        }
    }

    /// Time passed to `now` (capture time): what waited for it is out.
    pub(super) fn release(&mut self, now: u64, out: &mut Vec<CriObservation>) {
        self.release_answers(now, out);
        self.release_expired(now, out);
    }
}
