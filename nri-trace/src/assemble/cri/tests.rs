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
        .prop_map(
            |(conn, out, preface, bytes, truncated, gap_before)| Garbage::Chunk {
                conn,
                out,
                preface,
                bytes,
                truncated,
                gap_before,
            },
        );
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
