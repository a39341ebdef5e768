//! Connection tracking and syscall reassembly: raw records in, ordered
//! [`CaptureEvent`]s out. Pure (no I/O): peer lookup is injected, so every
//! path is unit-tested without root.
//!
//! Rules:
//! - A connection is keyed by (tgid, fd) while open; dup'd fds alias the same
//!   [`ConnId`]; it closes when its last fd closes or its process exits.
//! - A syscall larger than one record arrives as several records from the
//!   same thread; a thread runs one syscall at a time, so records are
//!   assembled per tid and a record for a new syscall flushes the previous
//!   one (marked truncated if its last record never came).
//! - Per-direction sequence numbers (`FdState::seq_in/seq_out`) reveal
//!   syscalls lost to ring-buffer overflow: the next chunk gets `gap_before`.
//! - Peer processes (tracked only to capture the peer's end of traced
//!   connections, see [`ConnTracker::register_peer_end`]) contribute only
//!   those connections: anything else the kernel starts tracking for them
//!   (their own socketpairs, connects, dups of other fds) is dropped and
//!   handed back by [`ConnTracker::take_ignored_fds`], so that peers of peers
//!   are never captured.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
};

use nri_trace_common::{RecordKind, Syscall};

use super::{
    ring_record::RingRecord, CaptureEvent, Chunk, CloseReason, ConnClose, ConnId, ConnOpen,
    Direction, Origin, Peer, ProcessEvent, Timestamp,
};

/// Upper bound on bytes held for one in-flight syscall (the kernel never
/// sends more than the snap length, itself <= MAX_SNAP).
const MAX_PENDING: usize = nri_trace_common::MAX_SNAP as usize;

struct ConnState {
    fds: u32,
    next_seq: [Option<u32>; 2],
}

struct Pending {
    conn: ConnId,
    fd: i32,
    direction: Direction,
    ts: Timestamp,
    tid: u32,
    syscall: Syscall,
    bytes: Vec<u8>,
    truncated: bool,
    gap_before: bool,
    syscall_len: u64,
}

/// Turns raw records into capture events.
pub struct ConnTracker {
    /// REALTIME - MONOTONIC, to derive wall-clock time.
    wall_offset_ns: i128,
    next_id: u64,
    by_fd: HashMap<(u32, i32), ConnId>,
    conns: HashMap<ConnId, ConnState>,
    pending: HashMap<u32, Pending>,
    /// Listening fds and the socket path they serve.
    listen_paths: HashMap<(u32, i32), PathBuf>,
    /// Paths whose connect() is tracked (one path: attribute it).
    connect_paths: Vec<PathBuf>,
    /// Listening paths whose bind() the kernel watches, indexed by the
    /// name a `RecordKind::Bound` record carries.
    bind_paths: Vec<PathBuf>,
    /// Listeners the kernel started tracking at their bind, not yet taken
    /// by `take_bound`.
    bound: Vec<BoundListener>,
    /// Existing connections registered from /proc, with the scan time: an
    /// Open record for the same fd from before the scan is the same
    /// connection, not a new one.
    existing_since: HashMap<(u32, i32), u64>,
    /// Connections opened in the current batch whose peer is not looked up
    /// yet (see `resolve_peers`).
    unresolved: Vec<(ConnId, u32, i32, Origin)>,
    /// Processes tracked only for the peer ends registered with
    /// `register_peer_end`.
    peer_procs: HashSet<u32>,
    /// (tgid, fd) of peer processes the kernel tracks but that are no peer
    /// end: to be switched off (see `take_ignored_fds`).
    ignored_fds: Vec<(u32, i32)>,
    /// (tgid, fd) of connections dropped with [`ConnTracker::forget`]:
    /// their records still in flight are ignored until the fd is opened
    /// anew, closed, or its process exits.
    forgotten: HashSet<(u32, i32)>,
    /// The newest kernel stamp of the records read: capture time, for
    /// [`ConnTracker::flush_stale`].
    latest_ns: u64,
}

/// What /proc tells about a connection's fd, for [`ConnTracker::resolve_peers`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnFacts {
    /// The process at the other end (SO_PEERCRED).
    pub peer: Option<Peer>,
    /// The socket inode behind the fd.
    pub inode: Option<u64>,
}

/// A listening socket the kernel started tracking when its process bound
/// a watched path ([`ConnTracker::take_bound`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundListener {
    pub tgid: u32,
    pub fd: i32,
    pub path: PathBuf,
}

/// A connection the kernel reported opening in the batch just resolved, and
/// still open (its fd not reused) when it was resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewConn {
    pub conn: ConnId,
    pub tgid: u32,
    pub fd: i32,
    pub origin: Origin,
    /// `ConnFacts::peer`'s pid.
    pub peer_pid: Option<u32>,
    /// `ConnFacts::inode`.
    pub inode: Option<u64>,
}

impl ConnTracker {
    pub fn new(wall_offset_ns: i128) -> Self {
        Self {
            wall_offset_ns,
            next_id: 1,
            by_fd: HashMap::new(),
            conns: HashMap::new(),
            pending: HashMap::new(),
            listen_paths: HashMap::new(),
            connect_paths: Vec::new(),
            bind_paths: Vec::new(),
            bound: Vec::new(),
            existing_since: HashMap::new(),
            unresolved: Vec::new(),
            peer_procs: HashSet::new(),
            ignored_fds: Vec::new(),
            forgotten: HashSet::new(),
            latest_ns: 0,
        }
    }

    /// Drop `conn` from the capture as if it had never been seen (no Close
    /// follows): nri-trace's own connection to a traced socket
    /// (`SessionConfig::ignore_peer_pids`). Returns its fds, to be switched
    /// off in the kernel; their records already on the way are ignored.
    pub fn forget(&mut self, conn: ConnId) -> Vec<(u32, i32)> {
        let mut fds: Vec<(u32, i32)> = self
            .by_fd
            .iter()
            .filter(|(_, c)| **c == conn)
            .map(|(k, _)| *k)
            .collect();
        fds.sort_unstable();
        for k in &fds {
            self.by_fd.remove(k);
            self.existing_since.remove(k);
            self.forgotten.insert(*k);
        }
        self.conns.remove(&conn);
        self.pending.retain(|_, p| p.conn != conn);
        self.unresolved.retain(|u| u.0 != conn);
        fds
    }

    pub fn ts(&self, mono_ns: u64) -> Timestamp {
        let wall =
            (i128::from(mono_ns) + self.wall_offset_ns).clamp(0, i128::from(u64::MAX)) as u64;
        Timestamp {
            mono_ns,
            wall_ns: wall,
        }
    }

    pub fn add_listener(&mut self, tgid: u32, fd: i32, path: PathBuf) {
        self.listen_paths.insert((tgid, fd), path);
    }

    pub fn add_connect_path(&mut self, path: PathBuf) {
        self.connect_paths.push(path);
    }

    /// The name under which the kernel is to report a bind() of `path`
    /// (`CaptureBackend::watch_bind_path`).
    pub fn add_bind_path(&mut self, path: PathBuf) -> u32 {
        let i = if let Some(i) = self.bind_paths.iter().position(|p| *p == path) {
            i
        } else {
            self.bind_paths.push(path);
            self.bind_paths.len() - 1
        };
        i as u32
    }

    /// The listeners the kernel started tracking at their bind() since the
    /// last call (each also reported as `ProcessEvent::Listening`).
    pub fn take_bound(&mut self) -> Vec<BoundListener> {
        std::mem::take(&mut self.bound)
    }

    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }

    fn new_conn(&mut self, tgid: u32, fd: i32) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        self.by_fd.insert((tgid, fd), id);
        self.conns.insert(
            id,
            ConnState {
                fds: 1,
                next_seq: [None, None],
            },
        );
        id
    }

    /// A connection that was open before the capture started. `scan_mono_ns`
    /// is when /proc was read.
    pub fn register_existing(
        &mut self,
        tgid: u32,
        fd: i32,
        socket_path: Option<PathBuf>,
        peer: Option<Peer>,
        inode: Option<u64>,
        scan_mono_ns: u64,
    ) -> Option<CaptureEvent> {
        if self.by_fd.contains_key(&(tgid, fd)) {
            return None;
        }
        let conn = self.new_conn(tgid, fd);
        self.existing_since.insert((tgid, fd), scan_mono_ns);
        Some(CaptureEvent::Open(ConnOpen {
            conn,
            ts: self.ts(scan_mono_ns),
            tgid,
            fd,
            origin: Origin::Existing,
            socket_path,
            peer,
            inode,
            other_end: None,
        }))
    }

    /// Mark `tgid` as a peer process: tracked in the kernel only for the peer
    /// ends registered with [`Self::register_peer_end`]. Not for processes
    /// that are capture targets themselves.
    pub fn add_peer_process(&mut self, tgid: u32) {
        self.peer_procs.insert(tgid);
    }

    /// Whether `tgid` is a peer process (see [`Self::add_peer_process`]).
    pub fn is_peer_process(&self, tgid: u32) -> bool {
        self.peer_procs.contains(&tgid)
    }

    /// Forget the peer processes none of whose peer ends is open any more,
    /// and return them: the caller stops tracking them in the kernel.
    pub fn take_idle_peer_processes(&mut self) -> Vec<u32> {
        let busy: HashSet<u32> = self.by_fd.keys().map(|k| k.0).collect();
        let mut idle: Vec<u32> = self
            .peer_procs
            .iter()
            .copied()
            .filter(|t| !busy.contains(t))
            .collect();
        idle.sort_unstable();
        for t in &idle {
            self.peer_procs.remove(t);
        }
        idle
    }

    /// The (tgid, fd)s of peer processes that the kernel started tracking
    /// on its own (their socketpairs, connects to tracked paths, dups of
    /// untracked fds) and that are no peer end: their records are dropped,
    /// and the caller switches them off in the kernel (`track_fd` with no
    /// flags), so that peers of peers are never captured.
    pub fn take_ignored_fds(&mut self) -> Vec<(u32, i32)> {
        std::mem::take(&mut self.ignored_fds)
    }

    /// Register the peer's end of the traced connection `other_end`: `fds`
    /// of peer process `tgid` hold the socket (several when the peer dup'ed
    /// it, e.g. Go's `net.FileConn`; the lowest is the connection's `fd`).
    /// The caller has made the kernel track `tgid` and these fds before
    /// calling, and checked in /proc afterwards that they still hold the
    /// socket. `scan_mono_ns` is that check's time: a kernel Open record of
    /// one of these fds from before is the same connection. Fds already
    /// registered are skipped; `None` if nothing is left.
    pub fn register_peer_end(
        &mut self,
        tgid: u32,
        fds: &[i32],
        other_end: ConnId,
        inode: Option<u64>,
        peer: Option<Peer>,
        scan_mono_ns: u64,
    ) -> Option<CaptureEvent> {
        let mut fds: Vec<i32> = fds
            .iter()
            .copied()
            .filter(|fd| !self.by_fd.contains_key(&(tgid, *fd)))
            .collect();
        fds.sort_unstable();
        fds.dedup();
        let (&fd, rest) = fds.split_first()?;
        let conn = self.new_conn(tgid, fd);
        self.existing_since.insert((tgid, fd), scan_mono_ns);
        for &alias in rest {
            self.by_fd.insert((tgid, alias), conn);
            self.existing_since.insert((tgid, alias), scan_mono_ns);
            if let Some(c) = self.conns.get_mut(&conn) {
                c.fds += 1;
            }
        }
        Some(CaptureEvent::Open(ConnOpen {
            conn,
            ts: self.ts(scan_mono_ns),
            tgid,
            fd,
            origin: Origin::Existing,
            socket_path: None,
            peer,
            inode,
            other_end: Some(other_end),
        }))
    }

    /// Handle one record. New connections get their peer from
    /// `resolve_peers`, called once the batch is drained.
    pub fn on_record(&mut self, r: &RingRecord<'_>, out: &mut Vec<CaptureEvent>) {
        self.latest_ns = self.latest_ns.max(r.ts_ns);
        match r.kind {
            RecordKind::Data => self.on_data(r, out),
            RecordKind::Open => self.on_open(r, out),
            RecordKind::Close => self.on_close(r.tgid, r.fd, r.ts_ns, out),
            RecordKind::Fork => out.push(CaptureEvent::Process(ProcessEvent::Fork {
                ts: self.ts(r.ts_ns),
                parent: r.tgid,
                child: r.aux as u32,
            })),
            RecordKind::ProcessExit => self.on_exit(r.tgid, r.ts_ns, out),
            RecordKind::Sandbox => {
                if let Some(ev) = super::sandbox::from_record(r, self.ts(r.ts_ns)) {
                    out.push(CaptureEvent::Sandbox(ev));
                }
            }
            RecordKind::Bound => self.on_bound(r, out),
        }
    }

    fn on_bound(&mut self, r: &RingRecord<'_>, out: &mut Vec<CaptureEvent>) {
        let Some(path) = usize::try_from(r.aux)
            .ok()
            .and_then(|i| self.bind_paths.get(i))
            .cloned()
        else {
            return;
        };
        let key = (r.tgid, r.fd);
        if self.listen_paths.get(&key) == Some(&path) {
            return; // a /proc scan found this listener first
        }
        self.listen_paths.insert(key, path.clone());
        out.push(CaptureEvent::Process(ProcessEvent::Listening {
            ts: self.ts(r.ts_ns),
            tgid: r.tgid,
            path: path.clone(),
        }));
        self.bound.push(BoundListener {
            tgid: r.tgid,
            fd: r.fd,
            path,
        });
    }

    fn on_open(&mut self, r: &RingRecord<'_>, out: &mut Vec<CaptureEvent>) {
        let key = (r.tgid, r.fd);
        self.forgotten.remove(&key);
        if let Some(scan) = self.existing_since.get(&key) {
            if r.ts_ns <= *scan {
                return; // the /proc scan already registered this connection
            }
        }
        if self.peer_procs.contains(&r.tgid) {
            let dup_of_peer_end = matches!(
                r.syscall,
                Syscall::Dup | Syscall::Dup2 | Syscall::Dup3 | Syscall::Fcntl
            ) && self.by_fd.contains_key(&(r.tgid, r.aux));
            if !dup_of_peer_end {
                // Not a peer end (its own socketpair, connect, ...): never
                // captured. A registered fd is left alone: its Open record
                // can come after the registration (e.g. a connect to a
                // tracked path that returned after the /proc check).
                if !self.by_fd.contains_key(&key) {
                    self.ignored_fds.push(key);
                }
                return;
            }
        }
        if let Some(old) = self.by_fd.get(&key).copied() {
            // Its close was lost: the fd number was reused.
            self.release_fd(key, old, r.ts_ns, CloseReason::Closed, out);
        }
        self.existing_since.remove(&key);
        let (origin, socket_path) = match r.syscall {
            Syscall::Dup | Syscall::Dup2 | Syscall::Dup3 | Syscall::Fcntl => {
                if let Some(id) = self.by_fd.get(&(r.tgid, r.aux)).copied() {
                    // Same socket, another fd: alias, no new connection.
                    self.by_fd.insert(key, id);
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.fds += 1;
                    }
                    return;
                }
                (Origin::Dup { old_fd: r.aux }, None)
            }
            Syscall::Accept | Syscall::Accept4 => (
                Origin::Accept { listen_fd: r.aux },
                self.listen_paths.get(&(r.tgid, r.aux)).cloned(),
            ),
            Syscall::Connect => (
                Origin::Connect,
                (self.connect_paths.len() == 1).then(|| self.connect_paths[0].clone()),
            ),
            Syscall::Socketpair => (Origin::Socketpair { other_fd: r.aux }, None),
            _ => (Origin::Existing, None),
        };
        let conn = self.new_conn(r.tgid, r.fd);
        self.unresolved.push((conn, r.tgid, r.fd, origin.clone()));
        out.push(CaptureEvent::Open(ConnOpen {
            conn,
            ts: self.ts(r.ts_ns),
            tgid: r.tgid,
            fd: r.fd,
            origin,
            socket_path,
            peer: None,
            inode: None,
            other_end: None,
        }));
    }

    /// Fill in the peer and socket inode (`facts(tgid, fd)`: SO_PEERCRED and
    /// /proc on the fd now) of the connections opened in this batch of
    /// events, and return those connections. The lookup is only trustworthy
    /// while the fd still is that connection: one closed within the batch
    /// may have had its fd number reused by a newer connection, whose facts
    /// it would get. Those keep `peer: None` and are not returned.
    pub fn resolve_peers(
        &mut self,
        out: &mut [CaptureEvent],
        facts: &mut dyn FnMut(u32, i32) -> ConnFacts,
    ) -> Vec<NewConn> {
        let mut resolved = Vec::new();
        for (conn, tgid, fd, origin) in std::mem::take(&mut self.unresolved) {
            if self.conn_of(tgid, fd) != Some(conn) {
                continue;
            }
            let f = facts(tgid, fd);
            resolved.push(NewConn {
                conn,
                tgid,
                fd,
                origin,
                peer_pid: f.peer.as_ref().map(|p| p.pid),
                inode: f.inode,
            });
            if f.peer.is_none() && f.inode.is_none() {
                continue;
            }
            for ev in out.iter_mut() {
                if let CaptureEvent::Open(o) = ev {
                    if o.conn == conn {
                        o.peer = f.peer;
                        o.inode = f.inode;
                        break;
                    }
                }
            }
        }
        resolved
    }

    fn release_fd(
        &mut self,
        key: (u32, i32),
        id: ConnId,
        ts_ns: u64,
        reason: CloseReason,
        out: &mut Vec<CaptureEvent>,
    ) {
        self.by_fd.remove(&key);
        let gone = match self.conns.get_mut(&id) {
            Some(c) => {
                c.fds = c.fds.saturating_sub(1);
                c.fds == 0
            }
            None => false,
        };
        if gone {
            self.flush_conn(id, out);
            self.conns.remove(&id);
            out.push(CaptureEvent::Close(ConnClose {
                conn: id,
                ts: self.ts(ts_ns),
                reason,
            }));
        }
    }

    fn on_close(&mut self, tgid: u32, fd: i32, ts_ns: u64, out: &mut Vec<CaptureEvent>) {
        self.existing_since.remove(&(tgid, fd));
        self.forgotten.remove(&(tgid, fd));
        if self.peer_procs.contains(&tgid) {
            // Closed before it was switched off: nothing left to switch off.
            self.ignored_fds.retain(|k| *k != (tgid, fd));
        }
        if let Some(id) = self.by_fd.get(&(tgid, fd)).copied() {
            self.release_fd((tgid, fd), id, ts_ns, CloseReason::Closed, out);
        }
    }

    fn on_exit(&mut self, tgid: u32, ts_ns: u64, out: &mut Vec<CaptureEvent>) {
        let mut keys: Vec<_> = self.by_fd.keys().filter(|k| k.0 == tgid).copied().collect();
        keys.sort_unstable();
        for k in keys {
            if let Some(id) = self.by_fd.get(&k).copied() {
                self.release_fd(k, id, ts_ns, CloseReason::ProcessExit, out);
            }
        }
        self.existing_since.retain(|k, _| k.0 != tgid);
        self.ignored_fds.retain(|k| k.0 != tgid);
        self.forgotten.retain(|k| k.0 != tgid);
        self.peer_procs.remove(&tgid);
        out.push(CaptureEvent::Process(ProcessEvent::Exit {
            ts: self.ts(ts_ns),
            tgid,
        }));
    }

    fn on_data(&mut self, r: &RingRecord<'_>, out: &mut Vec<CaptureEvent>) {
        let key = (r.tgid, r.fd);
        if self.forgotten.contains(&key) {
            return;
        }
        let conn = match self.by_fd.get(&key) {
            Some(c) => *c,
            // Not a peer end (see on_open); switched off at the batch end.
            None if self.peer_procs.contains(&r.tgid) => return,
            // Tracked in the kernel but its Open record was lost.
            None => {
                let id = self.new_conn(r.tgid, r.fd);
                out.push(CaptureEvent::Open(ConnOpen {
                    conn: id,
                    ts: self.ts(r.ts_ns),
                    tgid: r.tgid,
                    fd: r.fd,
                    origin: Origin::Existing,
                    socket_path: None,
                    peer: None,
                    inode: None,
                    other_end: None,
                }));
                id
            }
        };
        let direction = if r.syscall.is_inbound() {
            Direction::In
        } else {
            Direction::Out
        };
        // A new syscall on this thread: whatever was pending is finished.
        let continues = self
            .pending
            .get(&r.tid)
            .is_some_and(|p| p.ts.mono_ns == r.ts_ns && p.fd == r.fd && r.offset != 0);
        if !continues {
            if let Some(p) = self.pending.remove(&r.tid) {
                out.push(CaptureEvent::Chunk(finish(p, true)));
            }
        }
        if r.offset == 0 {
            let gap_before = self.check_seq(conn, direction, r.aux as u32);
            let p = Pending {
                conn,
                fd: r.fd,
                direction,
                ts: self.ts(r.ts_ns),
                tid: r.tid,
                syscall: r.syscall,
                bytes: r.payload.to_vec(),
                truncated: r.truncated(),
                gap_before,
                syscall_len: r.ret.max(0) as u64,
            };
            if r.last() {
                out.push(CaptureEvent::Chunk(finish(p, false)));
            } else {
                self.pending.insert(r.tid, p);
            }
            return;
        }
        let Some(p) = self.pending.get_mut(&r.tid).filter(|_| continues) else {
            // A continuation whose start was lost: nothing to attach it to.
            return;
        };
        if !p.truncated
            && r.offset as usize == p.bytes.len()
            && p.bytes.len() + r.payload.len() <= MAX_PENDING
        {
            p.bytes.extend_from_slice(r.payload);
        } else {
            // A middle record was lost: keep the contiguous prefix only.
            p.truncated = true;
        }
        p.truncated |= r.truncated();
        if r.last() {
            if let Some(p) = self.pending.remove(&r.tid) {
                out.push(CaptureEvent::Chunk(finish(p, false)));
            }
        }
    }

    /// True when syscalls on (conn, direction) were skipped since the last one.
    fn check_seq(&mut self, conn: ConnId, d: Direction, seq: u32) -> bool {
        let Some(c) = self.conns.get_mut(&conn) else {
            return false;
        };
        let slot = &mut c.next_seq[d as usize];
        let gap = match *slot {
            // Repeats are possible (racing threads), skips are losses.
            Some(expected) => (seq.wrapping_sub(expected) as i32) > 0,
            None => false,
        };
        *slot = Some(seq.wrapping_add(1));
        gap
    }

    fn flush_conn(&mut self, id: ConnId, out: &mut Vec<CaptureEvent>) {
        let mut tids: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.conn == id)
            .map(|(t, _)| *t)
            .collect();
        tids.sort_unstable();
        for t in tids {
            if let Some(p) = self.pending.remove(&t) {
                out.push(CaptureEvent::Chunk(finish(p, true)));
            }
        }
    }

    /// Emit syscalls whose last record will not come: the kernel dropped
    /// it (and counted it). A probe writes every record of a syscall in one
    /// program run, stamped at its start and microseconds long, and the
    /// ring hands records over in the order they were written. So a
    /// syscall stamped more than `max_age_ns` before a record already read
    /// (capture time) has had all its records read that were not dropped;
    /// so has one stamped that long before `drained_empty_at`, the start
    /// of a drain that read the ring empty (`None`: the drain stopped at
    /// its budget, records wait).
    ///
    /// The reader's clock alone proves nothing: a drain's budget can cut a
    /// syscall's records, the rest waits in the ring for the next drain,
    /// and a reader seconds behind the kernel would flush the syscall cut
    /// short and then drop its rest as continuations without a start, with
    /// no loss counted anywhere (whole NRI calls of `split-synchronize`
    /// went so).
    pub fn flush_stale(
        &mut self,
        drained_empty_at: Option<u64>,
        max_age_ns: u64,
        out: &mut Vec<CaptureEvent>,
    ) {
        let now = self.latest_ns.max(drained_empty_at.unwrap_or(0));
        let mut stale: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.ts.mono_ns) > max_age_ns)
            .map(|(t, _)| *t)
            .collect();
        stale.sort_unstable();
        for t in stale {
            if let Some(p) = self.pending.remove(&t) {
                out.push(CaptureEvent::Chunk(finish(p, true)));
            }
        }
    }

    /// Close every connection (end of capture).
    pub fn close_all(&mut self, now_mono_ns: u64, out: &mut Vec<CaptureEvent>) {
        let mut keys: Vec<_> = self.by_fd.iter().map(|(k, v)| (*k, *v)).collect();
        keys.sort();
        for (k, id) in keys {
            self.release_fd(k, id, now_mono_ns, CloseReason::Untracked, out);
        }
    }

    /// Whether connection `conn` is open (has an fd).
    pub fn is_open(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// Which connection a (tgid, fd) is, if tracked.
    pub fn conn_of(&self, tgid: u32, fd: i32) -> Option<ConnId> {
        self.by_fd.get(&(tgid, fd)).copied()
    }
}

fn finish(p: Pending, missing_end: bool) -> Chunk {
    Chunk {
        conn: p.conn,
        direction: p.direction,
        ts: p.ts,
        tid: p.tid,
        syscall: p.syscall,
        truncated: p.truncated || missing_end || (p.bytes.len() as u64) < p.syscall_len,
        bytes: p.bytes,
        gap_before: p.gap_before,
        syscall_len: p.syscall_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nri_trace_common::{FLAG_LAST, FLAG_TRUNCATED};

    struct Rec {
        kind: RecordKind,
        sc: Syscall,
        flags: u32,
        ts: u64,
        tgid: u32,
        tid: u32,
        fd: i32,
        aux: i32,
        ret: i64,
        offset: u32,
        payload: Vec<u8>,
    }

    fn rec(kind: RecordKind, sc: Syscall, fd: i32) -> Rec {
        Rec {
            kind,
            sc,
            flags: FLAG_LAST,
            ts: 100,
            tgid: 1,
            tid: 1,
            fd,
            aux: 0,
            ret: 0,
            offset: 0,
            payload: vec![],
        }
    }

    fn feed(t: &mut ConnTracker, r: &Rec) -> Vec<CaptureEvent> {
        let raw = RingRecord {
            kind: r.kind,
            syscall: r.sc,
            flags: r.flags,
            ts_ns: r.ts,
            tgid: r.tgid,
            tid: r.tid,
            fd: r.fd,
            aux: r.aux,
            ret: r.ret,
            offset: r.offset,
            payload: &r.payload,
        };
        let mut out = vec![];
        t.on_record(&raw, &mut out);
        out
    }

    fn data(sc: Syscall, fd: i32, seq: i32, ts: u64, bytes: &[u8]) -> Rec {
        Rec {
            aux: seq,
            ts,
            ret: bytes.len() as i64,
            payload: bytes.to_vec(),
            ..rec(RecordKind::Data, sc, fd)
        }
    }

    fn chunks(ev: &[CaptureEvent]) -> Vec<&Chunk> {
        ev.iter()
            .filter_map(|e| {
                if let CaptureEvent::Chunk(c) = e {
                    Some(c)
                } else {
                    None
                }
            })
            .collect()
    }

    #[test]
    fn a_forgotten_connection_leaves_no_trace_until_its_fd_is_reused() {
        let mut t = ConnTracker::new(0);
        t.add_listener(1, 3, "/s".into());
        let accept = |ts| Rec {
            aux: 3,
            ts,
            ..rec(RecordKind::Open, Syscall::Accept4, 7)
        };
        let ev = feed(&mut t, &accept(100));
        let CaptureEvent::Open(o) = &ev[0] else {
            panic!("{ev:?}")
        };
        assert_eq!(t.forget(o.conn), vec![(1, 7)]);
        assert_eq!(t.conn_of(1, 7), None);
        // Records already on the way: no new connection, no bytes, no close.
        assert!(feed(&mut t, &data(Syscall::Read, 7, 0, 101, b"hello")).is_empty());
        assert!(feed(&mut t, &rec(RecordKind::Close, Syscall::Close, 7)).is_empty());
        // The fd accepted anew is a connection like any other.
        let ev = feed(&mut t, &accept(102));
        assert!(matches!(&ev[..], [CaptureEvent::Open(_)]), "{ev:?}");
        let ev = feed(&mut t, &data(Syscall::Read, 7, 0, 103, b"hi"));
        assert_eq!(chunks(&ev).len(), 1);
    }

    #[test]
    fn accept_data_close() {
        let mut t = ConnTracker::new(0);
        t.add_listener(1, 3, "/s".into());
        let ev = feed(
            &mut t,
            &Rec {
                aux: 3,
                ..rec(RecordKind::Open, Syscall::Accept4, 7)
            },
        );
        let CaptureEvent::Open(o) = &ev[0] else {
            panic!("{ev:?}")
        };
        assert_eq!(o.origin, Origin::Accept { listen_fd: 3 });
        assert_eq!(o.socket_path.as_deref(), Some(std::path::Path::new("/s")));
        let ev = feed(&mut t, &data(Syscall::Read, 7, 0, 101, b"hello"));
        let c = chunks(&ev);
        assert_eq!(
            (c[0].bytes.as_slice(), c[0].direction, c[0].truncated),
            (&b"hello"[..], Direction::In, false)
        );
        let ev = feed(&mut t, &data(Syscall::Sendmsg, 7, 0, 102, b"world"));
        assert_eq!(chunks(&ev)[0].direction, Direction::Out);
        let ev = feed(&mut t, &rec(RecordKind::Close, Syscall::Close, 7));
        assert!(
            matches!(&ev[0], CaptureEvent::Close(c) if c.conn == o.conn && c.reason == CloseReason::Closed)
        );
        assert_eq!(t.open_connections(), 0);
    }

    #[test]
    fn bound_listener_reported_once_and_its_accepts_get_the_path() {
        let mut t = ConnTracker::new(0);
        let name = t.add_bind_path("/run/nri.sock".into());
        assert_eq!(t.add_bind_path("/run/nri.sock".into()), name);
        let other = t.add_bind_path("/run/cri.sock".into());
        assert_ne!(other, name);
        let bound = |tgid: u32, aux: i32| Rec {
            tgid,
            tid: tgid,
            aux,
            ..rec(RecordKind::Bound, Syscall::Bind, 3)
        };
        // A name the tracker never gave out is ignored.
        assert!(feed(&mut t, &bound(9, 7)).is_empty());
        assert!(t.take_bound().is_empty());
        let ev = feed(&mut t, &bound(9, name as i32));
        assert!(
            matches!(&ev[..], [CaptureEvent::Process(ProcessEvent::Listening { tgid: 9, path, .. })]
                if path.as_path() == std::path::Path::new("/run/nri.sock")),
            "{ev:?}"
        );
        assert_eq!(
            t.take_bound(),
            vec![BoundListener {
                tgid: 9,
                fd: 3,
                path: "/run/nri.sock".into()
            }]
        );
        // Accepts on it are connections of that path.
        let ev = feed(
            &mut t,
            &Rec {
                tgid: 9,
                tid: 9,
                aux: 3,
                ..rec(RecordKind::Open, Syscall::Accept4, 8)
            },
        );
        let CaptureEvent::Open(o) = &ev[0] else {
            panic!("{ev:?}")
        };
        assert_eq!(
            o.socket_path.as_deref(),
            Some(std::path::Path::new("/run/nri.sock"))
        );
        // A listener a /proc scan registered first is not reported again.
        t.add_listener(10, 3, "/run/cri.sock".into());
        assert!(feed(&mut t, &bound(10, other as i32)).is_empty());
        assert!(t.take_bound().is_empty());
    }

    #[test]
    fn multi_record_syscall_is_reassembled() {
        let mut t = ConnTracker::new(0);
        let first = Rec {
            flags: 0,
            ret: 6,
            ..data(Syscall::Write, 4, 0, 5, b"abc")
        };
        assert!(chunks(&feed(&mut t, &first)).is_empty());
        let second = Rec {
            offset: 3,
            ret: 6,
            ..data(Syscall::Write, 4, 0, 5, b"def")
        };
        let ev = feed(&mut t, &second);
        let c = chunks(&ev);
        assert_eq!(c[0].bytes, b"abcdef");
        assert!(!c[0].truncated);
    }

    #[test]
    fn lost_middle_record_truncates() {
        let mut t = ConnTracker::new(0);
        feed(
            &mut t,
            &Rec {
                flags: 0,
                ret: 9,
                ..data(Syscall::Write, 4, 0, 5, b"abc")
            },
        );
        let ev = feed(
            &mut t,
            &Rec {
                offset: 6,
                ret: 9,
                ..data(Syscall::Write, 4, 0, 5, b"ghi")
            },
        );
        let c = chunks(&ev);
        assert_eq!(c[0].bytes, b"abc");
        assert!(c[0].truncated);
    }

    /// A drain's budget cut a syscall's records (what containerd's write(2)s
    /// of up to 219,264 bytes, 14 records, met in split-synchronize), and
    /// the reader is seconds behind the kernel: the rest is read by the
    /// next drain. The flush between the two drains, at the reader's clock
    /// 5 s after the syscall, must not cut it: the whole syscall comes out,
    /// and the next one is no gap. Before, it came out truncated at the
    /// cut and its rest was dropped, with no loss counted.
    #[test]
    fn a_syscall_cut_by_the_drain_budget_waits_for_its_rest_however_far_behind() {
        const S: u64 = 1_000_000_000;
        let mut t = ConnTracker::new(0);
        let part = |offset: u32, flags: u32, tid: u32, bytes: &[u8]| Rec {
            flags,
            offset,
            ret: 9,
            tid,
            ..data(Syscall::Write, 4, 0, 10 * S, bytes)
        };
        let mut out = feed(&mut t, &part(0, 0, 1, b"abc"));
        out.extend(feed(&mut t, &part(3, 0, 1, b"def")));
        // Another thread's record, written meanwhile on another CPU.
        out.extend(feed(
            &mut t,
            &Rec {
                tid: 2,
                ..data(Syscall::Read, 5, 0, 10 * S + 1_000, b"x")
            },
        ));
        // The drain stopped at its budget, 5 s behind: nothing is stale.
        t.flush_stale(None, S, &mut out);
        assert_eq!(chunks(&out).len(), 1, "{out:?}");
        out.extend(feed(&mut t, &part(6, FLAG_LAST, 1, b"ghi")));
        let c = chunks(&out);
        assert_eq!(c.len(), 2, "{out:?}");
        assert_eq!(c[1].bytes, b"abcdefghi");
        assert!(!c[1].truncated);
        let ev = feed(&mut t, &data(Syscall::Write, 4, 1, 15 * S, b"next"));
        assert!(!chunks(&ev)[0].gap_before);
    }

    /// A syscall whose last record the kernel dropped is flushed, cut,
    /// once it is 1 s old in capture time: a record stamped 1 s after it
    /// was read, or a drain that began 1 s after it read the ring empty.
    #[test]
    fn a_syscall_missing_its_last_record_is_flushed_a_second_later_in_capture_time() {
        const S: u64 = 1_000_000_000;
        let begun = |t: &mut ConnTracker, tid: u32| {
            feed(
                t,
                &Rec {
                    flags: 0,
                    ret: 9,
                    tid,
                    ..data(Syscall::Write, 4, 0, 10 * S, b"abc")
                },
            )
        };
        // Capture time: another thread's record 1.5 s later.
        let mut t = ConnTracker::new(0);
        begun(&mut t, 1);
        let mut out = Vec::new();
        t.flush_stale(None, S, &mut out);
        assert!(out.is_empty());
        out.extend(feed(
            &mut t,
            &Rec {
                tid: 2,
                ..data(Syscall::Read, 5, 0, 11 * S + S / 2, b"x")
            },
        ));
        t.flush_stale(None, S, &mut out);
        let c = chunks(&out);
        assert_eq!(c.len(), 2, "{out:?}");
        assert!(c[1].truncated && c[1].bytes == b"abc");
        // A drain that read the ring empty, 0.5 s then 1.5 s later.
        let mut t = ConnTracker::new(0);
        begun(&mut t, 1);
        let mut out = Vec::new();
        t.flush_stale(Some(10 * S + S / 2), S, &mut out);
        assert!(out.is_empty());
        t.flush_stale(Some(11 * S + S / 2), S, &mut out);
        let c = chunks(&out);
        assert_eq!(c.len(), 1, "{out:?}");
        assert!(c[0].truncated && c[0].bytes == b"abc");
    }

    #[test]
    fn missing_last_record_is_flushed_by_next_syscall() {
        let mut t = ConnTracker::new(0);
        feed(
            &mut t,
            &Rec {
                flags: 0,
                ret: 9,
                ..data(Syscall::Write, 4, 0, 5, b"abc")
            },
        );
        let ev = feed(&mut t, &data(Syscall::Write, 4, 1, 6, b"x"));
        let c = chunks(&ev);
        assert_eq!(c.len(), 2);
        assert!(c[0].truncated && c[0].bytes == b"abc");
        assert!(!c[1].truncated && c[1].bytes == b"x");
    }

    #[test]
    fn sequence_gap_marks_loss() {
        let mut t = ConnTracker::new(0);
        feed(&mut t, &data(Syscall::Read, 4, 0, 1, b"a"));
        let ok = feed(&mut t, &data(Syscall::Read, 4, 1, 2, b"b"));
        assert!(!chunks(&ok)[0].gap_before);
        // Writes count separately.
        let w = feed(&mut t, &data(Syscall::Write, 4, 0, 3, b"w"));
        assert!(!chunks(&w)[0].gap_before);
        let gap = feed(&mut t, &data(Syscall::Read, 4, 5, 4, b"f"));
        assert!(chunks(&gap)[0].gap_before);
        // A repeated number (racing threads) is not a loss.
        let rep = feed(&mut t, &data(Syscall::Read, 4, 5, 5, b"g"));
        assert!(!chunks(&rep)[0].gap_before);
    }

    #[test]
    fn truncated_flag_propagates() {
        let mut t = ConnTracker::new(0);
        let r = Rec {
            flags: FLAG_LAST | FLAG_TRUNCATED,
            ret: 100,
            ..data(Syscall::Read, 4, 0, 1, b"ab")
        };
        let ev = feed(&mut t, &r);
        assert!(chunks(&ev)[0].truncated);
        assert_eq!(chunks(&ev)[0].syscall_len, 100);
    }

    #[test]
    fn dup_aliases_and_closes_on_last_fd() {
        let mut t = ConnTracker::new(0);
        let ev = feed(
            &mut t,
            &Rec {
                aux: 9,
                ..rec(RecordKind::Open, Syscall::Socketpair, 8)
            },
        );
        let CaptureEvent::Open(o) = &ev[0] else {
            panic!()
        };
        assert!(feed(
            &mut t,
            &Rec {
                aux: 8,
                ..rec(RecordKind::Open, Syscall::Dup, 20)
            }
        )
        .is_empty());
        assert_eq!(t.conn_of(1, 20), Some(o.conn));
        assert!(feed(&mut t, &rec(RecordKind::Close, Syscall::Close, 8)).is_empty());
        let ev = feed(&mut t, &rec(RecordKind::Close, Syscall::Close, 20));
        assert!(matches!(&ev[0], CaptureEvent::Close(c) if c.conn == o.conn));
    }

    #[test]
    fn existing_connection_not_duplicated_by_earlier_open() {
        let mut t = ConnTracker::new(0);
        assert!(t.register_existing(1, 7, None, None, None, 500).is_some());
        // Accepted before the scan: same connection.
        assert!(feed(
            &mut t,
            &Rec {
                ts: 400,
                aux: 3,
                ..rec(RecordKind::Open, Syscall::Accept4, 7)
            }
        )
        .is_empty());
        // After a close, a new accept with the same fd is a new connection.
        feed(
            &mut t,
            &Rec {
                ts: 600,
                ..rec(RecordKind::Close, Syscall::Close, 7)
            },
        );
        let ev = feed(
            &mut t,
            &Rec {
                ts: 700,
                aux: 3,
                ..rec(RecordKind::Open, Syscall::Accept4, 7)
            },
        );
        assert!(matches!(&ev[0], CaptureEvent::Open(o) if o.conn == ConnId(2)));
    }

    #[test]
    fn process_exit_closes_its_connections() {
        let mut t = ConnTracker::new(0);
        feed(&mut t, &rec(RecordKind::Open, Syscall::Connect, 5));
        feed(
            &mut t,
            &Rec {
                tgid: 2,
                ..rec(RecordKind::Open, Syscall::Connect, 5)
            },
        );
        let ev = feed(&mut t, &rec(RecordKind::ProcessExit, Syscall::Sched, -1));
        assert!(matches!(&ev[0], CaptureEvent::Close(c) if c.reason == CloseReason::ProcessExit));
        assert!(matches!(
            &ev[1],
            CaptureEvent::Process(ProcessEvent::Exit { tgid: 1, .. })
        ));
        assert_eq!(t.open_connections(), 1);
    }

    #[test]
    fn peer_not_taken_from_a_reused_fd() {
        let mut t = ConnTracker::new(0);
        let peer = |pid| Peer {
            pid,
            uid: 0,
            comm: None,
            cmdline: vec![],
            env: Default::default(),
            cgroup: None,
        };
        // One batch: conn 1 on fd 7 opens and closes, conn 2 reuses fd 7.
        let mut out = feed(
            &mut t,
            &Rec {
                aux: 3,
                ..rec(RecordKind::Open, Syscall::Accept4, 7)
            },
        );
        out.extend(feed(&mut t, &rec(RecordKind::Close, Syscall::Close, 7)));
        out.extend(feed(
            &mut t,
            &Rec {
                ts: 101,
                aux: 3,
                ..rec(RecordKind::Open, Syscall::Accept4, 7)
            },
        ));
        // /proc now shows fd 7 = conn 2, whose peer is pid 42.
        let new = t.resolve_peers(&mut out, &mut |_, fd| ConnFacts {
            peer: Some(peer(42)),
            inode: Some(1000 + fd as u64),
        });
        assert_eq!(
            new,
            vec![NewConn {
                conn: ConnId(2),
                tgid: 1,
                fd: 7,
                origin: Origin::Accept { listen_fd: 3 },
                peer_pid: Some(42),
                inode: Some(1007),
            }],
            "only the connection still open is returned"
        );
        let opens: Vec<&ConnOpen> = out
            .iter()
            .filter_map(|e| {
                if let CaptureEvent::Open(o) = e {
                    Some(o)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(opens[0].conn, ConnId(1));
        assert_eq!(opens[0].peer, None, "conn 1 must not get conn 2's peer");
        assert_eq!(opens[1].peer, Some(peer(42)));
        assert_eq!((opens[0].inode, opens[1].inode), (None, Some(1007)));
    }

    fn open_events(ev: &[CaptureEvent]) -> Vec<&ConnOpen> {
        ev.iter()
            .filter_map(|e| match e {
                CaptureEvent::Open(o) => Some(o),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn peer_end_is_its_own_connection() {
        let mut t = ConnTracker::new(0);
        let Some(CaptureEvent::Open(rt)) = t.register_existing(1, 7, None, None, Some(50), 100)
        else {
            panic!()
        };
        t.add_peer_process(2);
        assert!(t.is_peer_process(2) && !t.is_peer_process(1));
        // The peer holds the socket on fds 5 and 3 (dup'ed): one connection.
        let Some(CaptureEvent::Open(pe)) =
            t.register_peer_end(2, &[5, 3], rt.conn, Some(51), None, 200)
        else {
            panic!()
        };
        assert_eq!(
            (pe.tgid, pe.fd, pe.other_end, pe.inode, &pe.origin),
            (2, 3, Some(rt.conn), Some(51), &Origin::Existing)
        );
        assert_ne!(pe.conn, rt.conn);
        assert_eq!(t.conn_of(2, 5), Some(pe.conn));
        // Registering again adds nothing.
        assert!(t
            .register_peer_end(2, &[3], rt.conn, None, None, 300)
            .is_none());
        // The runtime writes, the peer reads it: each on its own connection,
        // directions relative to the holder.
        let ev = feed(&mut t, &data(Syscall::Write, 7, 0, 300, b"req"));
        assert_eq!(
            (chunks(&ev)[0].conn, chunks(&ev)[0].direction),
            (rt.conn, Direction::Out)
        );
        let ev = feed(
            &mut t,
            &Rec {
                tgid: 2,
                tid: 2,
                ..data(Syscall::Read, 5, 0, 301, b"req")
            },
        );
        assert_eq!(
            (chunks(&ev)[0].conn, chunks(&ev)[0].direction),
            (pe.conn, Direction::In)
        );
        // Closing one of the two fds keeps it open; the last one closes it.
        let close = |fd| Rec {
            tgid: 2,
            ts: 400,
            ..rec(RecordKind::Close, Syscall::Close, fd)
        };
        assert!(feed(&mut t, &close(3)).is_empty());
        assert!(t.take_idle_peer_processes().is_empty());
        let ev = feed(&mut t, &close(5));
        assert!(
            matches!(&ev[0], CaptureEvent::Close(c) if c.conn == pe.conn && c.reason == CloseReason::Closed)
        );
        assert_eq!(t.take_idle_peer_processes(), vec![2]);
        assert!(!t.is_peer_process(2));
        assert_eq!(t.open_connections(), 1);
    }

    #[test]
    fn peer_process_own_connections_are_ignored() {
        let mut t = ConnTracker::new(0);
        t.add_connect_path("/s".into());
        t.register_existing(1, 7, None, None, None, 100);
        t.add_peer_process(2);
        let pe = match t.register_peer_end(2, &[4], ConnId(1), None, None, 200) {
            Some(CaptureEvent::Open(o)) => o.conn,
            e => panic!("{e:?}"),
        };
        let p = |r: Rec| Rec {
            tgid: 2,
            tid: 2,
            ..r
        };
        // Its own socketpair and connect: no connection, no data.
        let mut ev = feed(
            &mut t,
            &p(Rec {
                ts: 300,
                aux: 9,
                ..rec(RecordKind::Open, Syscall::Socketpair, 8)
            }),
        );
        ev.extend(feed(
            &mut t,
            &p(Rec {
                ts: 301,
                ..rec(RecordKind::Open, Syscall::Connect, 10)
            }),
        ));
        ev.extend(feed(&mut t, &p(data(Syscall::Write, 8, 0, 302, b"x"))));
        // A dup of an fd that is no peer end is no peer end either.
        ev.extend(feed(
            &mut t,
            &p(Rec {
                ts: 303,
                aux: 8,
                ..rec(RecordKind::Open, Syscall::Dup, 11)
            }),
        ));
        // The Open of the registered fd coming late (a connect that returned
        // after the /proc check) changes nothing.
        ev.extend(feed(
            &mut t,
            &p(Rec {
                ts: 304,
                ..rec(RecordKind::Open, Syscall::Connect, 4)
            }),
        ));
        // Closed in the same batch: nothing to switch off any more.
        ev.extend(feed(
            &mut t,
            &p(Rec {
                ts: 304,
                ..rec(RecordKind::Close, Syscall::Close, 10)
            }),
        ));
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(t.take_ignored_fds(), vec![(2, 8), (2, 11)]);
        assert!(t.take_ignored_fds().is_empty());
        // A dup of the peer end is the same connection.
        assert!(feed(
            &mut t,
            &p(Rec {
                ts: 305,
                aux: 4,
                ..rec(RecordKind::Open, Syscall::Dup, 12)
            })
        )
        .is_empty());
        assert_eq!(t.conn_of(2, 12), Some(pe));
        // Nothing of it is a new connection to look up.
        assert!(t
            .resolve_peers(&mut [], &mut |_, _| ConnFacts::default())
            .is_empty());
        // Killed: its end closes with the process, and it is no peer process
        // any more.
        feed(
            &mut t,
            &p(Rec {
                ts: 306,
                aux: 3,
                ..rec(RecordKind::Open, Syscall::Socketpair, 13)
            }),
        );
        let ev = feed(
            &mut t,
            &p(Rec {
                ts: 307,
                ..rec(RecordKind::ProcessExit, Syscall::Sched, -1)
            }),
        );
        assert!(
            matches!(&ev[0], CaptureEvent::Close(c) if c.conn == pe && c.reason == CloseReason::ProcessExit)
        );
        assert!(matches!(
            &ev[1],
            CaptureEvent::Process(ProcessEvent::Exit { tgid: 2, .. })
        ));
        assert_eq!(open_events(&ev).len(), 0);
        assert!(!t.is_peer_process(2));
        assert!(
            t.take_ignored_fds().is_empty(),
            "nothing to switch off for a dead process"
        );
        assert!(t.take_idle_peer_processes().is_empty());
        assert_eq!(t.open_connections(), 1);
    }

    #[test]
    fn wall_clock_is_derived() {
        let t = ConnTracker::new(1_000);
        assert_eq!(
            t.ts(5),
            Timestamp {
                mono_ns: 5,
                wall_ns: 1_005
            }
        );
    }
}
