use super::*;
use nri_trace_common::{FLAG_LAST, FLAG_TRUNCATED};

struct Rec {
    kind: EntryKind,
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

fn rec(kind: EntryKind, sc: Syscall, fd: i32) -> Rec {
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
    let raw = RingEntry {
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
        ..rec(EntryKind::Data, sc, fd)
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
        ..rec(EntryKind::Open, Syscall::Accept4, 7)
    };
    let ev = feed(&mut t, &accept(100));
    let CaptureEvent::Open(o) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(t.forget(o.conn), vec![(1, 7)]);
    assert_eq!(t.conn_of(1, 7), None);
    // Records already on the way: no new connection, no bytes, no close.
    assert!(feed(&mut t, &data(Syscall::Read, 7, 0, 101, b"hello")).is_empty());
    assert!(feed(&mut t, &rec(EntryKind::Close, Syscall::Close, 7)).is_empty());
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
            ..rec(EntryKind::Open, Syscall::Accept4, 7)
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
    let ev = feed(&mut t, &rec(EntryKind::Close, Syscall::Close, 7));
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
        ..rec(EntryKind::Bound, Syscall::Bind, 3)
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
            ..rec(EntryKind::Open, Syscall::Accept4, 8)
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
            ..rec(EntryKind::Open, Syscall::Socketpair, 8)
        },
    );
    let CaptureEvent::Open(o) = &ev[0] else {
        panic!()
    };
    assert!(feed(
        &mut t,
        &Rec {
            aux: 8,
            ..rec(EntryKind::Open, Syscall::Dup, 20)
        }
    )
    .is_empty());
    assert_eq!(t.conn_of(1, 20), Some(o.conn));
    assert!(feed(&mut t, &rec(EntryKind::Close, Syscall::Close, 8)).is_empty());
    let ev = feed(&mut t, &rec(EntryKind::Close, Syscall::Close, 20));
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
            ..rec(EntryKind::Open, Syscall::Accept4, 7)
        }
    )
    .is_empty());
    // After a close, a new accept with the same fd is a new connection.
    feed(
        &mut t,
        &Rec {
            ts: 600,
            ..rec(EntryKind::Close, Syscall::Close, 7)
        },
    );
    let ev = feed(
        &mut t,
        &Rec {
            ts: 700,
            aux: 3,
            ..rec(EntryKind::Open, Syscall::Accept4, 7)
        },
    );
    assert!(matches!(&ev[0], CaptureEvent::Open(o) if o.conn == ConnId(2)));
}

#[test]
fn process_exit_closes_its_connections() {
    let mut t = ConnTracker::new(0);
    feed(&mut t, &rec(EntryKind::Open, Syscall::Connect, 5));
    feed(
        &mut t,
        &Rec {
            tgid: 2,
            ..rec(EntryKind::Open, Syscall::Connect, 5)
        },
    );
    let ev = feed(&mut t, &rec(EntryKind::ProcessExit, Syscall::Sched, -1));
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
            ..rec(EntryKind::Open, Syscall::Accept4, 7)
        },
    );
    out.extend(feed(&mut t, &rec(EntryKind::Close, Syscall::Close, 7)));
    out.extend(feed(
        &mut t,
        &Rec {
            ts: 101,
            aux: 3,
            ..rec(EntryKind::Open, Syscall::Accept4, 7)
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
    let Some(CaptureEvent::Open(rt)) = t.register_existing(1, 7, None, None, Some(50), 100) else {
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
        ..rec(EntryKind::Close, Syscall::Close, fd)
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
            ..rec(EntryKind::Open, Syscall::Socketpair, 8)
        }),
    );
    ev.extend(feed(
        &mut t,
        &p(Rec {
            ts: 301,
            ..rec(EntryKind::Open, Syscall::Connect, 10)
        }),
    ));
    ev.extend(feed(&mut t, &p(data(Syscall::Write, 8, 0, 302, b"x"))));
    // A dup of an fd that is no peer end is no peer end either.
    ev.extend(feed(
        &mut t,
        &p(Rec {
            ts: 303,
            aux: 8,
            ..rec(EntryKind::Open, Syscall::Dup, 11)
        }),
    ));
    // The Open of the registered fd coming late (a connect that returned
    // after the /proc check) changes nothing.
    ev.extend(feed(
        &mut t,
        &p(Rec {
            ts: 304,
            ..rec(EntryKind::Open, Syscall::Connect, 4)
        }),
    ));
    // Closed in the same batch: nothing to switch off any more.
    ev.extend(feed(
        &mut t,
        &p(Rec {
            ts: 304,
            ..rec(EntryKind::Close, Syscall::Close, 10)
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
            ..rec(EntryKind::Open, Syscall::Dup, 12)
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
            ..rec(EntryKind::Open, Syscall::Socketpair, 13)
        }),
    );
    let ev = feed(
        &mut t,
        &p(Rec {
            ts: 307,
            ..rec(EntryKind::ProcessExit, Syscall::Sched, -1)
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
