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

use nri_trace_common::{EntryKind, Syscall};

use super::{
    ring_entry::RingEntry, CaptureEvent, Chunk, CloseReason, ConnClose, ConnId, ConnOpen,
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
    /// name a `EntryKind::Bound` record carries.
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
    pub fn on_record(&mut self, r: &RingEntry<'_>, out: &mut Vec<CaptureEvent>) {
        self.latest_ns = self.latest_ns.max(r.ts_ns);
        match r.kind {
            EntryKind::Data => self.on_data(r, out),
            EntryKind::Open => self.on_open(r, out),
            EntryKind::Close => self.on_close(r.tgid, r.fd, r.ts_ns, out),
            EntryKind::Fork => out.push(CaptureEvent::Process(ProcessEvent::Fork {
                ts: self.ts(r.ts_ns),
                parent: r.tgid,
                child: r.aux as u32,
            })),
            EntryKind::ProcessExit => self.on_exit(r.tgid, r.ts_ns, out),
            EntryKind::Sandbox => {
                if let Some(ev) = super::sandbox::from_record(r, self.ts(r.ts_ns)) {
                    out.push(CaptureEvent::Sandbox(ev));
                }
            }
            EntryKind::Bound => self.on_bound(r, out),
        }
    }

    fn on_bound(&mut self, r: &RingEntry<'_>, out: &mut Vec<CaptureEvent>) {
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

    fn on_open(&mut self, r: &RingEntry<'_>, out: &mut Vec<CaptureEvent>) {
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

    fn on_data(&mut self, r: &RingEntry<'_>, out: &mut Vec<CaptureEvent>) {
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
mod tests;
