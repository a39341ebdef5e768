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

use std::{collections::HashMap, path::PathBuf};

use nri_trace_common::{RecordKind, Syscall};

use super::{
    record::RawRecord, CaptureEvent, Chunk, CloseReason, ConnClose, ConnId, ConnOpen, Direction,
    Origin, Peer, ProcessEvent, Timestamp,
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
    /// Existing connections registered from /proc, with the scan time: an
    /// Open record for the same fd from before the scan is the same
    /// connection, not a new one.
    existing_since: HashMap<(u32, i32), u64>,
    /// Connections opened in the current batch whose peer is not looked up
    /// yet (see `resolve_peers`).
    unresolved: Vec<(ConnId, u32, i32)>,
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
            existing_since: HashMap::new(),
            unresolved: Vec::new(),
        }
    }

    pub fn ts(&self, mono_ns: u64) -> Timestamp {
        let wall = (mono_ns as i128 + self.wall_offset_ns).clamp(0, u64::MAX as i128) as u64;
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
        }))
    }

    /// Handle one record. New connections get their peer from
    /// `resolve_peers`, called once the batch is drained.
    pub fn on_record(&mut self, r: &RawRecord<'_>, out: &mut Vec<CaptureEvent>) {
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
        }
    }

    fn on_open(&mut self, r: &RawRecord<'_>, out: &mut Vec<CaptureEvent>) {
        let key = (r.tgid, r.fd);
        if let Some(scan) = self.existing_since.get(&key) {
            if r.ts_ns <= *scan {
                return; // the /proc scan already registered this connection
            }
        }
        if let Some(old) = self.by_fd.get(&key).copied() {
            // Its close was lost: the fd number was reused.
            self.release_fd(key, old, r.ts_ns, CloseReason::Closed, out);
        }
        self.existing_since.remove(&key);
        let (origin, socket_path) = match r.syscall {
            Syscall::Dup | Syscall::Dup2 | Syscall::Dup3 => {
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
        self.unresolved.push((conn, r.tgid, r.fd));
        out.push(CaptureEvent::Open(ConnOpen {
            conn,
            ts: self.ts(r.ts_ns),
            tgid: r.tgid,
            fd: r.fd,
            origin,
            socket_path,
            peer: None,
        }));
    }

    /// Fill in the peer (`peer_of(tgid, fd)`, i.e. SO_PEERCRED on the fd
    /// now) of the connections opened in this batch of events. The lookup is
    /// only trustworthy while the fd still is that connection: one closed
    /// within the batch may have had its fd number reused by a newer
    /// connection, whose peer it would get. Those keep `peer: None`.
    pub fn resolve_peers(
        &mut self,
        out: &mut [CaptureEvent],
        peer_of: &mut dyn FnMut(u32, i32) -> Option<Peer>,
    ) {
        for (conn, tgid, fd) in std::mem::take(&mut self.unresolved) {
            if self.conn_of(tgid, fd) != Some(conn) {
                continue;
            }
            let Some(peer) = peer_of(tgid, fd) else {
                continue;
            };
            for ev in out.iter_mut() {
                if let CaptureEvent::Open(o) = ev {
                    if o.conn == conn {
                        o.peer = Some(peer);
                        break;
                    }
                }
            }
        }
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
        if let Some(id) = self.by_fd.get(&(tgid, fd)).copied() {
            self.release_fd((tgid, fd), id, ts_ns, CloseReason::Closed, out);
        }
    }

    fn on_exit(&mut self, tgid: u32, ts_ns: u64, out: &mut Vec<CaptureEvent>) {
        let mut keys: Vec<_> = self.by_fd.keys().filter(|k| k.0 == tgid).copied().collect();
        keys.sort();
        for k in keys {
            if let Some(id) = self.by_fd.get(&k).copied() {
                self.release_fd(k, id, ts_ns, CloseReason::ProcessExit, out);
            }
        }
        self.existing_since.retain(|k, _| k.0 != tgid);
        out.push(CaptureEvent::Process(ProcessEvent::Exit {
            ts: self.ts(ts_ns),
            tgid,
        }));
    }

    fn on_data(&mut self, r: &RawRecord<'_>, out: &mut Vec<CaptureEvent>) {
        let key = (r.tgid, r.fd);
        let conn = match self.by_fd.get(&key) {
            Some(c) => *c,
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
        tids.sort();
        for t in tids {
            if let Some(p) = self.pending.remove(&t) {
                out.push(CaptureEvent::Chunk(finish(p, true)));
            }
        }
    }

    /// Emit syscalls whose last record has not come within `max_age_ns`
    /// (their remaining records were lost).
    pub fn flush_stale(&mut self, now_mono_ns: u64, max_age_ns: u64, out: &mut Vec<CaptureEvent>) {
        let mut stale: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| now_mono_ns.saturating_sub(p.ts.mono_ns) > max_age_ns)
            .map(|(t, _)| *t)
            .collect();
        stale.sort();
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
        let raw = RawRecord {
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
        assert!(t.register_existing(1, 7, None, None, 500).is_some());
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
        t.resolve_peers(&mut out, &mut |_, _| Some(peer(42)));
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
