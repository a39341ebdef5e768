//! The drain loop: records read from the backend's ring into events,
//! their connections completed (peers, followed ends, a restarted runtime,
//! sandbox context), loss reports placed, and the batch sent on.

use std::{
    collections::HashSet,
    os::fd::{AsRawFd, RawFd},
    path::PathBuf,
    time::Duration,
};

use tokio::{io::unix::AsyncFd, sync::mpsc};

use super::{
    clock::{monotonic_ns, TickClock, FAST_TICKS_FOR_NS, IDLE_TICK_NS},
    cri_query::Ask,
    follower::Follower,
    peers::{peer_of, RecentPeers},
    queue::Queue,
    reattach::{PeerRules, Reattach},
    DRAIN_BUDGET,
};
use crate::capture::{
    backend::{BackendError, CaptureBackend},
    discovery, ring_entry,
    tracker::{ConnFacts, ConnTracker},
    CaptureEvent, ConnId, ConnOpen, Loss, Origin, ProcessEvent,
};

/// Empty drains in a row after which the reader sleeps: 60 ms at the
/// default 2 ms interval, past the capture's first tick after the sockets'
/// last event (clock.rs `TICK_LAG_NS`, 50 ms), so that tick is not held
/// back by the sleep.
const IDLE_AFTER: u32 = 30;

/// How long a sleeping reader waits for a wakeup before it drains anyway:
/// what runs on the drain's clock goes on while nothing happens (the
/// capture's ticks, every 100 ms at the fastest: clock.rs `FAST_TICK_NS`;
/// the loss counters; stale syscalls).
const ASLEEP_INTERVAL: Duration = Duration::from_millis(100);

/// After this long asleep the capture's ticks come every second
/// (clock.rs `FAST_TICKS_FOR_NS`, `IDLE_TICK_NS`), and so does the drain.
const DEEP_ASLEEP_AFTER_NS: u64 = FAST_TICKS_FOR_NS;
const DEEP_ASLEEP_INTERVAL: Duration = Duration::from_nanos(IDLE_TICK_NS);

/// The reader's two clocks (issue 34, an idle that costs nothing). While
/// records come, the ring is drained every `interval` (2 ms): the programs
/// write them with BPF_RB_NO_WAKEUP, because a wakeup per record costs the
/// traced process (nri-trace-ebpf emit.rs `wake_flags`). After
/// [`IDLE_AFTER`] empty drains the reader tells the kernel it sleeps, and
/// waits for the ring's wakeup, which the programs then force for the
/// first record, or [`ASLEEP_INTERVAL`]: 10 wakeups a second instead of
/// 500 on a quiet node.
#[derive(Debug, Default)]
struct Idle {
    empty_drains: u32,
    /// Since when (monotonic ns) the reader sleeps.
    asleep_since: Option<u64>,
}

impl Idle {
    /// How long to wait for the ring at `now` before draining it anyway.
    fn wait(&self, interval: Duration, now: u64) -> Duration {
        match self.asleep_since {
            None => interval,
            Some(t) if now.saturating_sub(t) < DEEP_ASLEEP_AFTER_NS => ASLEEP_INTERVAL,
            Some(_) => DEEP_ASLEEP_INTERVAL,
        }
    }

    /// After a drain at `now` that read `records` records: wakes (records
    /// came) or falls asleep (the quiet spell is long enough, and nothing
    /// needs the fast clock: `keep_awake`, a session stopping or a runtime
    /// coming back), and `tell`s the backend
    /// ([`CaptureBackend::set_reader_asleep`]). True when it just fell
    /// asleep.
    fn after_drain(
        &mut self,
        records: usize,
        now: u64,
        keep_awake: bool,
        tell: &mut dyn FnMut(bool) -> Result<bool, BackendError>,
    ) -> bool {
        if records > 0 || (keep_awake && self.asleep_since.is_some()) {
            self.empty_drains = 0;
            if self.asleep_since.take().is_some() {
                if let Err(e) = tell(false) {
                    log::debug!("telling the probes the reader is awake: {e}");
                }
            }
            return false;
        }
        if self.asleep_since.is_some() || keep_awake {
            return false;
        }
        self.empty_drains += 1;
        if self.empty_drains < IDLE_AFTER {
            return false;
        }
        self.empty_drains = 0;
        match tell(true) {
            Ok(_) => {
                self.asleep_since = Some(now);
                true
            }
            Err(e) => {
                log::debug!("telling the probes the reader sleeps: {e}");
                false
            }
        }
    }
}

pub(super) struct Fd(pub(super) RawFd);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

pub(super) async fn drain_loop(
    backend: Box<dyn CaptureBackend>,
    tracker: ConnTracker,
    poll: AsyncFd<Fd>,
    tx: Queue,
    stop: tokio::sync::oneshot::Receiver<()>,
    interval: Duration,
    resolver: Resolver,
) {
    let mut backend = backend;
    drain_until_stopped(&mut *backend, tracker, &poll, tx, stop, interval, resolver).await;
    // Deregister the fd from epoll before the backend closes it.
    drop(poll);
    drop(backend);
}

async fn drain_until_stopped(
    backend: &mut dyn CaptureBackend,
    mut tracker: ConnTracker,
    poll: &AsyncFd<Fd>,
    mut tx: Queue,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    interval: Duration,
    mut resolver: Resolver,
) {
    // The fast clock is an interval: it keeps its 2 ms period whatever a
    // drain took (a sleep started after each drain stretched it to 3 ms
    // and more: tokio's timer rounds up to the next millisecond, and CI
    // then read `crictl ps`'s second connection after crictl had gone).
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle = Idle::default();
    let mut loss = Loss::default();
    let mut malformed = 0u64;
    let mut last_loss_check = 0u64;
    let mut ticks = TickClock::default();
    let mut out = Vec::new();
    let mut stopping = false;
    // The last drain stopped at its budget: drain again at once.
    let mut more = false;
    loop {
        let asleep = idle.asleep_since.is_some();
        tokio::select! {
            biased;
            _ = &mut stop, if !stopping => stopping = true,
            () = std::future::ready(()), if more => {}
            r = poll.readable() => {
                if let Ok(mut g) = r {
                    g.clear_ready();
                }
            }
            _ = tick.tick(), if !asleep => {}
            // select! builds a disabled branch's future too: an async block,
            // so the awake loop reads no clock and makes no timer for it.
            () = async { tokio::time::sleep(idle.wait(interval, monotonic_ns())).await },
                if asleep => {}
        }
        let drain_start = monotonic_ns();
        let mut records = 0usize;
        more = backend.drain(DRAIN_BUDGET, &mut |bytes| {
            records += 1;
            match ring_entry::parse(bytes) {
                Ok(r) => tracker.on_record(&r, &mut out),
                Err(e) => {
                    malformed += 1;
                    log::debug!("malformed record: {e}");
                }
            }
        });
        let keep_awake = stopping || resolver.reattach.keeps_reader_awake(drain_start);
        if idle.after_drain(records, drain_start, keep_awake, &mut |a| {
            backend.set_reader_asleep(a)
        }) {
            // Asleep from now: drain once more, for a record committed
            // before the kernel saw the flag.
            more = true;
        }
        let peer_env = &resolver.peer_env;
        let recent = &mut resolver.recent;
        let read_at = monotonic_ns();
        let new_conns = tracker.resolve_peers(&mut out, &mut |tgid, fd| ConnFacts {
            peer: recent.complete(peer_of(tgid, fd, peer_env), read_at),
            inode: u32::try_from(fd)
                .ok()
                .and_then(|fd| discovery::fd_socket_inode(tgid, fd)),
        });
        // Fds of peer processes that are no peer end: off before anything
        // below untracks a process (which drops its fds anyway).
        for (tgid, fd) in tracker.take_ignored_fds() {
            if let Ok(fd) = u32::try_from(fd) {
                if let Err(e) = backend.track_fd(tgid, fd, 0) {
                    log::debug!("switching off fd {fd} of peer process {tgid}: {e}");
                }
            }
        }
        // A runtime that restarted: its sockets are served by a new process,
        // which the kernel may track already from its bind(); before the
        // follower looks at the batch's connections (the new listener's
        // accepts are its to follow). Listeners bound in this batch are
        // noted before its exits are looked at: a listener that binds and
        // exits within one drain (a busy machine delays the drain) is
        // reported gone like any other (CI saw its exit go unreported).
        let bound_pids = resolver.reattach.on_bound(
            tracker.take_bound(),
            &mut *backend,
            &mut resolver.no_follow,
        );
        // An exited process leaves the kernel maps at once: a new process
        // reusing its pid must not be captured through stale entries.
        for ev in &out {
            if let CaptureEvent::Process(ProcessEvent::Exit { tgid, .. }) = ev {
                if let Err(e) = backend.untrack_process(*tgid) {
                    log::warn!("untracking exited process {tgid}: {e}");
                }
            }
        }
        resolver.reattach.on_exits(&mut out);
        if let Some(f) = resolver.follower.as_mut() {
            f.targets.extend(bound_pids.iter().copied());
            let mut new_conns = new_conns;
            new_conns.retain(|n| match n.origin {
                Origin::Accept { listen_fd } => !resolver.no_follow.contains(&(n.tgid, listen_fd)),
                _ => true,
            });
            f.after_batch(
                &mut *backend,
                &mut tracker,
                &mut out,
                new_conns,
                monotonic_ns(),
            );
        }
        let now = monotonic_ns();
        if !stopping {
            resolver.reattach.scan(
                now,
                bound_pids,
                &mut *backend,
                &mut tracker,
                PeerRules {
                    peer_env: &resolver.peer_env,
                    follower: resolver.follower.as_mut(),
                    no_follow: &mut resolver.no_follow,
                },
                &mut out,
            );
        }
        if let Some(ctx) = resolver.sandbox.as_mut() {
            out.retain_mut(|ev| match ev {
                CaptureEvent::Sandbox(s) => ctx.enrich(s, now),
                // A restarted runtime: watch its tree too.
                CaptureEvent::Process(ProcessEvent::Listening { tgid, .. }) => {
                    let tree = crate::capture::sandbox::runtime_tree(&[*tgid]);
                    if let Err(e) = backend.watch_tasks(&tree) {
                        log::warn!("watching the restarted runtime's processes: {e}");
                    }
                    true
                }
                // A client that makes and unmakes pods connected (kubelet):
                // one restarted since the start descends from nothing
                // watched (systemd started it), so its tree (its unmounts
                // of pod volumes, ...) is watched from its first connection.
                // Found on the lab's cluster: after a kubelet restart,
                // explain saw no failed unmount of a busy emptyDir.
                CaptureEvent::Open(ConnOpen {
                    peer: Some(peer), ..
                }) if peer
                    .comm
                    .as_deref()
                    .is_some_and(crate::capture::sandbox::makes_pods) =>
                {
                    let tree = crate::capture::sandbox::runtime_tree(&[peer.pid]);
                    if let Err(e) = backend.watch_tasks(&tree) {
                        log::warn!(
                            "watching the processes of {}[{}]: {e}",
                            peer.comm.as_deref().unwrap_or("?"),
                            peer.pid
                        );
                    }
                    true
                }
                _ => true,
            });
        }
        // Syscalls whose last record never came (lost) are flushed 1 s
        // after they began, in capture time: by this drain's clock only if
        // it read the ring empty (a budget may have cut a syscall whose
        // rest is still in the ring, seconds after it when behind).
        tracker.flush_stale((!more).then_some(drain_start), 1_000_000_000, &mut out);
        drop_ignored_peers(
            &mut out,
            &mut tracker,
            &mut *backend,
            &resolver.ignore_peer_pids,
        );
        if let Some((path, ask)) = &resolver.cri_state {
            // A runtime (re)started on the CRI socket: its state anew.
            let restarted = out.iter().any(|ev| {
                matches!(ev, CaptureEvent::Process(ProcessEvent::Listening { path: p, .. }) if p == path)
            });
            if restarted {
                let _ = ask.send(Ask::Restart);
            }
        }
        // A drop stamps the kernel's `LOST_FIRST_NS`: looked at after every
        // batch with records in it (a full ring drops only while records
        // wait; one map read), the counters themselves then and every
        // 250 ms. The loss is reported in the batch that holds the first
        // records after it, and placed before them (`place_loss`).
        let due = stopping || now.saturating_sub(last_loss_check) > 250_000_000;
        let times = if due || !out.is_empty() {
            backend.take_loss_times().unwrap_or((None, 0))
        } else {
            (None, 0)
        };
        if due || times.0.is_some() {
            let read_at = last_loss_check;
            last_loss_check = now;
            if let Ok(mut l) = backend.loss() {
                l.malformed = malformed;
                if l.counts() != loss.counts() {
                    if l.lost_records > loss.lost_records {
                        // Without a first stamp (cleared unread: a race
                        // with the clear), the drops came after the last
                        // reading and before this one.
                        let (from, to) = match times {
                            (Some(f), t) => (f, t.max(f)),
                            (None, _) => (read_at, now),
                        };
                        l.lost_from = Some(tracker.ts(from));
                        l.lost_to = Some(tracker.ts(to));
                    }
                    loss = l;
                    place_loss(&mut out, l);
                }
            }
        }
        if stopping && !more {
            tracker.close_all(now, &mut out);
        } else if stopping {
            // The rest of the ring first.
        } else if let Some(at) = ticks.after_drain(
            now,
            // The sockets' own events: kernel events of the tree (execs,
            // unlinks: containerd's housekeeping goes on while its sockets
            // are quiet) do not move the decoders' clock, so they must not
            // hold the tick back.
            out.iter().any(|e| {
                matches!(
                    e,
                    CaptureEvent::Open(_) | CaptureEvent::Chunk(_) | CaptureEvent::Close(_)
                )
            }),
        ) {
            // Stamped as the capture's own events are (the wall-clock
            // offset taken at start: docs/capture.md).
            out.push(CaptureEvent::Tick { ts: tracker.ts(at) });
        }
        for ev in out.drain(..) {
            if !tx.send(ev).await {
                return;
            }
        }
        if stopping && !more {
            return;
        }
    }
}

/// Put a loss report into the batch before its first event stamped at or
/// after the loss began, so that every stage reads of the hole before the
/// records that follow it (a record kept in the ring from before the hole
/// may still come after the report: early is harmless, late is not).
fn place_loss(out: &mut Vec<CaptureEvent>, l: Loss) {
    let at = l.lost_from.map(|t| t.mono_ns);
    let pos = at
        .and_then(|from| {
            out.iter()
                .position(|e| event_ns(e).is_some_and(|t| t >= from))
        })
        .unwrap_or(out.len());
    out.insert(pos, CaptureEvent::Loss(l));
}

/// When a capture event happened, for those that say.
fn event_ns(e: &CaptureEvent) -> Option<u64> {
    match e {
        CaptureEvent::Chunk(c) => Some(c.ts.mono_ns),
        CaptureEvent::Open(o) => Some(o.ts.mono_ns),
        CaptureEvent::Close(c) => Some(c.ts.mono_ns),
        CaptureEvent::Tick { ts } => Some(ts.mono_ns),
        CaptureEvent::Process(p) => Some(p.ts().mono_ns),
        _ => None,
    }
}

/// What the drain loop needs to complete new connections.
pub(super) struct Resolver {
    pub(super) peer_env: Vec<String>,
    /// Present when `SessionConfig::follow_peer_ends` is set.
    pub(super) follower: Option<Follower>,
    /// (tgid, listening fd) whose accepted connections are not followed.
    pub(super) no_follow: HashSet<(u32, i32)>,
    pub(super) reattach: Reattach,
    /// Present when `SessionConfig::sandbox` is set.
    pub(super) sandbox: Option<crate::capture::sandbox::SandboxContext>,
    /// `SessionConfig::ignore_peer_pids`.
    pub(super) ignore_peer_pids: Vec<u32>,
    /// `SessionConfig::cri_state`'s socket, and how to ask the task that
    /// queries it.
    pub(super) cri_state: Option<(PathBuf, mpsc::UnboundedSender<Ask>)>,
    /// Peers read lately, for those gone before they were read.
    pub(super) recent: RecentPeers,
}

/// Connections in `out` whose peer is one of `pids` leave the capture:
/// their events go, the tracker forgets them, the kernel stops capturing
/// their fds. Their peer is known in the batch that opened them
/// (`ConnTracker::resolve_peers`); a connection of ours lives far longer
/// than a batch (the CRI state query keeps its connection open).
fn drop_ignored_peers(
    out: &mut Vec<CaptureEvent>,
    tracker: &mut ConnTracker,
    backend: &mut dyn CaptureBackend,
    pids: &[u32],
) {
    if pids.is_empty() {
        return;
    }
    let dropped: HashSet<ConnId> = out
        .iter()
        .filter_map(|ev| match ev {
            CaptureEvent::Open(o) if o.peer.as_ref().is_some_and(|p| pids.contains(&p.pid)) => {
                Some(o.conn)
            }
            _ => None,
        })
        .collect();
    if dropped.is_empty() {
        return;
    }
    for &conn in &dropped {
        for (tgid, fd) in tracker.forget(conn) {
            if let Ok(fd) = u32::try_from(fd) {
                if let Err(e) = backend.track_fd(tgid, fd, 0) {
                    log::debug!("switching off fd {fd} of {tgid} (our own connection): {e}");
                }
            }
        }
    }
    out.retain(|ev| {
        let conn = match ev {
            CaptureEvent::Open(o) => o.conn,
            CaptureEvent::Chunk(c) => c.conn,
            CaptureEvent::Close(c) => c.conn,
            _ => return true,
        };
        !dropped.contains(&conn)
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reader_sleeps_after_a_quiet_spell_and_wakes_for_records() {
        const MS: u64 = 1_000_000;
        let fast = Duration::from_millis(2);
        let mut told = Vec::new();
        let mut idle = Idle::default();
        let mut tell = |a: bool| -> Result<bool, BackendError> {
            told.push(a);
            Ok(true)
        };
        for _ in 1..IDLE_AFTER {
            assert!(!idle.after_drain(0, 0, false, &mut tell));
        }
        assert_eq!(idle.wait(fast, 0), fast);
        // The last empty drain of the spell: asleep, the kernel told.
        assert!(idle.after_drain(0, 60 * MS, false, &mut tell));
        assert_eq!(idle.wait(fast, 60 * MS), ASLEEP_INTERVAL);
        // Asleep, empty drains tell nothing more; after a while the
        // sleeping clock slows to the capture's idle ticks.
        assert!(!idle.after_drain(0, 160 * MS, false, &mut tell));
        assert_eq!(
            idle.wait(fast, 60 * MS + DEEP_ASLEEP_AFTER_NS),
            DEEP_ASLEEP_INTERVAL
        );
        // Records: awake, told once.
        assert!(!idle.after_drain(3, 9000 * MS, false, &mut tell));
        assert!(!idle.after_drain(1, 9002 * MS, false, &mut tell));
        assert_eq!(idle.wait(fast, 9002 * MS), fast);
        // A record within the next spell starts it again.
        for _ in 1..IDLE_AFTER {
            assert!(!idle.after_drain(0, 0, false, &mut tell));
        }
        assert!(!idle.after_drain(2, 0, false, &mut tell));
        for _ in 1..IDLE_AFTER {
            assert!(!idle.after_drain(0, 0, false, &mut tell));
        }
        // Kept awake (stopping, a runtime coming back): never asleep.
        assert!(!idle.after_drain(0, 0, true, &mut tell));
        assert!(idle.after_drain(0, 0, false, &mut tell));
        // ... and woken if asleep.
        assert!(!idle.after_drain(0, 0, true, &mut tell));
        assert_eq!(idle.wait(fast, 0), fast);
        assert_eq!(told, vec![true, false, true, false]);
    }

    #[test]
    fn a_backend_that_cannot_be_told_keeps_the_fast_clock() {
        let mut idle = Idle::default();
        let mut tell = |_: bool| -> Result<bool, BackendError> {
            Err(BackendError::MapMissing {
                map: "READER_ASLEEP",
            })
        };
        for _ in 0..3 * IDLE_AFTER {
            assert!(!idle.after_drain(0, 0, false, &mut tell));
        }
        assert_eq!(
            idle.wait(Duration::from_millis(2), 0),
            Duration::from_millis(2)
        );
    }

    use std::collections::{HashMap, VecDeque};

    use super::*;
    use crate::capture::session::test_support::RingOf;

    /// The drain loop 5 s behind the kernel (records stamped 5 s before
    /// it reads them, as in split-synchronize on a loaded 2-core machine:
    /// the runtime's ~490 KiB messages to a plugin queued in the ring), and
    /// a write of 30 records of 16 KiB that the drain budget cuts after its
    /// second or third: the write comes out whole, in one chunk. Before,
    /// the loop flushed it as stale between the two drains (its clock said
    /// it was 5 s old), cut at 32 or 48 KiB, and dropped its other records
    /// without counting a loss: the NRI call it carried was gone.
    #[tokio::test]
    async fn a_write_cut_by_the_drain_budget_comes_out_whole_when_the_reader_is_behind() {
        use nri_trace_common::{EntryHeader, EntryKind, Syscall, FLAG_LAST, MAX_CHUNK};
        let at = monotonic_ns() - 5_000_000_000;
        let record = |fd: i32, seq: i32, offset: usize, len: usize, total: usize, fill: u8| {
            let h = EntryHeader {
                kind: EntryKind::Data as u16,
                syscall: Syscall::Write as u16,
                flags: if offset + len == total { FLAG_LAST } else { 0 },
                ts_ns: at + u64::from(seq as u32),
                tgid: 7,
                tid: 8,
                fd,
                aux: seq,
                ret: total as i64,
                offset: offset as u32,
                len: len as u32,
            };
            ring_entry::encode(&h, &vec![fill; len])
        };
        // One-record writes on fd 5, then the big write on fd 6: the first
        // drain's budget ends after its second or third record (249 writes
        // before it with a budget of 4 MiB).
        let per_record =
            MAX_CHUNK + nri_trace_common::ENTRY_HEADER_LEN + crate::capture::backend::RECORD_COST;
        let fillers = DRAIN_BUDGET / per_record - 2;
        let mut ring: VecDeque<Vec<u8>> = (0..fillers)
            .map(|i| record(5, i as i32, 0, MAX_CHUNK, MAX_CHUNK, 0))
            .collect();
        let total = 30 * MAX_CHUNK;
        for i in 0..30 {
            ring.push_back(record(6, 0, i * MAX_CHUNK, MAX_CHUNK, total, i as u8));
        }
        assert!((fillers + 3) * per_record >= DRAIN_BUDGET);
        assert!((fillers + 1) * per_record < DRAIN_BUDGET);

        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(efd >= 0);
        // SAFETY: `efd` is this test's; it is closed only after `poll` is
        // dropped.
        let poll =
            unsafe { AsyncFd::register_with_interest(Fd(efd), tokio::io::Interest::READABLE) }
                .unwrap();
        let (tx, mut rx) = mpsc::channel(1 << 16);
        let (stop_tx, stop) = tokio::sync::oneshot::channel();
        let resolver = Resolver {
            peer_env: Vec::new(),
            follower: None,
            no_follow: HashSet::new(),
            reattach: Reattach {
                listener_paths: HashMap::new(),
                lost: Vec::new(),
                next_scan_ns: 0,
                fast_until_ns: 0,
                existing_socketpair_env: None,
                no_follow_sockets: Vec::new(),
            },
            sandbox: None,
            ignore_peer_pids: Vec::new(),
            cri_state: None,
            recent: RecentPeers::default(),
        };
        // Stopping: the loop drains until the ring is empty, then returns.
        stop_tx.send(()).unwrap();
        let mut backend = RingOf(ring);
        drain_until_stopped(
            &mut backend,
            ConnTracker::new(0),
            &poll,
            Queue::new(tx, 1 << 30),
            stop,
            Duration::from_millis(2),
            resolver,
        )
        .await;
        drop(poll);
        unsafe { libc::close(efd) };
        let mut big = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            if let CaptureEvent::Chunk(c) = ev {
                if c.syscall_len == total as u64 {
                    big.push(c);
                }
            }
        }
        assert_eq!(
            big.len(),
            1,
            "the big write in pieces: {:?}",
            big.iter()
                .map(|c| (c.bytes.len(), c.truncated))
                .collect::<Vec<_>>()
        );
        let c = &big[0];
        assert_eq!(
            (c.bytes.len(), c.truncated, c.gap_before),
            (total, false, false)
        );
        assert!(c
            .bytes
            .chunks(MAX_CHUNK)
            .enumerate()
            .all(|(i, b)| b.iter().all(|&x| x == i as u8)));
    }
}
