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

/// An HTTP/2 frame (RFC 9113 4.1).
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A request header block: :method POST, :scheme http, :path as a
/// literal without indexing (RFC 7541 6.2.2).
fn headers(path: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86, 0x04, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    b
}

/// A client's chunk of connection 1.
fn client_chunk(i: u64, bytes: Vec<u8>) -> CaptureEvent {
    CaptureEvent::Chunk(Chunk {
        conn: ConnId(1),
        direction: Direction::In,
        ts: ts(i),
        tid: 1,
        syscall: Syscall::Read,
        syscall_len: bytes.len() as u64,
        bytes,
        truncated: false,
        gap_before: false,
    })
}

/// kubelet's StopContainer with a 30 s timeout: reported pending with
/// its container and timeout once its request message is in, before any
/// answer; a status call is not.
#[test]
fn a_teardown_call_is_pending_once_its_request_is_in() {
    use prost_cri::Message;
    let req = crate::decode::cri::cri_api::StopContainerRequest {
        container_id: "c1".into(),
        timeout: 30,
    }
    .encode_to_vec();
    let mut msg = vec![0, 0, 0, 0, req.len() as u8];
    msg.extend(req);
    let mut a = CriCallAssembler::new();
    let mut out = Vec::new();
    let mut first = crate::decode::cri::frame::PREFACE.to_vec();
    first.extend(frame(0x4, 0, 0, &[]));
    first.extend(frame(
        0x1,
        0x4,
        1,
        &headers("/runtime.v1.RuntimeService/StopContainer"),
    ));
    first.extend(frame(0x0, 0x1, 1, &msg));
    first.extend(frame(
        0x1,
        0x4,
        3,
        &headers("/runtime.v1.RuntimeService/ContainerStatus"),
    ));
    first.extend(frame(0x0, 0x1, 3, &[0, 0, 0, 0, 4, 0x0a, 2, b'c', b'1']));
    a.on_capture(&client_chunk(10, first), &mut out);
    let pending: Vec<&CriCall> = out
        .iter()
        .filter_map(|o| match o {
            CriObservation::Pending(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(pending.len(), 1, "{out:?}");
    let c = pending[0];
    assert_eq!(c.method_name(), Some("StopContainer"));
    assert_eq!(c.container_id.as_deref(), Some("c1"));
    assert_eq!(c.stop_timeout_s, Some(30));
    assert_eq!((c.outcome.clone(), c.end), (CriOutcome::NoResponse, None));
    assert!(!out.iter().any(|o| matches!(o, CriObservation::Call(_))));
}

/// A call open when bytes of its connection were lost, whose
/// connection then closed: its end is unknown (the answer may have been
/// lost), not "the connection closed before an answer"; a call that
/// started after the loss and closed with its connection still says
/// so.
#[test]
fn a_call_open_across_lost_bytes_has_an_unknown_end() {
    let path = "/runtime.v1.RuntimeService/StopContainer";
    let chunk = |i: u64, bytes: Vec<u8>, gap_before: bool| {
        let mut c = client_chunk(i, bytes);
        if let CaptureEvent::Chunk(c) = &mut c {
            c.gap_before = gap_before;
        }
        c
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

/// Frames of one RunPodSandbox with a 1 s grpc-timeout on stream 1 of
/// connection 1, and its answer and reset, as capture chunks (In: read by
/// the runtime, from the client; Out: written by the runtime).
mod deadline_race {
    use super::*;

    const MS: u64 = 1_000_000;

    pub(super) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// An HPACK literal field without indexing, new name (RFC 7541 §6.2.2).
    fn literal(name: &str, value: &str) -> Vec<u8> {
        let mut b = vec![0x00, name.len() as u8];
        b.extend_from_slice(name.as_bytes());
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
        b
    }

    pub(super) fn chunk(at_ms: u64, direction: Direction, bytes: Vec<u8>) -> CaptureEvent {
        CaptureEvent::Chunk(Chunk {
            conn: ConnId(1),
            direction,
            ts: ts(at_ms * MS),
            tid: 1,
            syscall: if direction == Direction::In {
                Syscall::Read
            } else {
                Syscall::Write
            },
            syscall_len: bytes.len() as u64,
            bytes,
            truncated: false,
            gap_before: false,
        })
    }

    pub(super) fn request(at_ms: u64, stream: u32) -> CaptureEvent {
        let path = "/runtime.v1.RuntimeService/RunPodSandbox";
        let mut block = vec![0x83, 0x86, 0x04, path.len() as u8];
        block.extend_from_slice(path.as_bytes());
        block.extend(literal("grpc-timeout", "1000m"));
        let mut bytes = if stream == 1 {
            let mut b = crate::decode::cri::frame::PREFACE.to_vec();
            b.extend(frame(0x4, 0, 0, &[]));
            b
        } else {
            Vec::new()
        };
        bytes.extend(frame(0x1, 0x4, stream, &block));
        // An empty request message, END_STREAM.
        bytes.extend(frame(0x0, 0x1, stream, &[0, 0, 0, 0, 0]));
        chunk(at_ms, Direction::In, bytes)
    }

    /// `:status 200` then trailers `grpc-status: 0`.
    fn answer_ok(at_ms: u64, stream: u32) -> CaptureEvent {
        let mut bytes = frame(0x1, 0x4, stream, &[0x88]);
        bytes.extend(frame(0x1, 0x5, stream, &literal("grpc-status", "0")));
        chunk(at_ms, Direction::Out, bytes)
    }

    /// RST_STREAM CANCEL from the client.
    fn client_reset(at_ms: u64, stream: u32) -> CaptureEvent {
        chunk(
            at_ms,
            Direction::In,
            frame(0x3, 0, stream, &8u32.to_be_bytes()),
        )
    }

    pub(super) fn calls(events: &[CaptureEvent]) -> Vec<CriCall> {
        let mut a = CriCallAssembler::new();
        let mut out = Vec::new();
        for e in events {
            a.on_capture(e, &mut out);
        }
        a.finish(&mut out);
        out.into_iter()
            .filter_map(|o| match o {
                CriObservation::Call(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// The runtime's OK 5 ms inside the deadline, the client's reset 1 ms
    /// after it: the client never read the answer.
    #[test]
    fn an_answer_the_client_reset_after_is_its_deadline() {
        let got = calls(&[request(0, 1), answer_ok(995, 1), client_reset(996, 1)]);
        assert_eq!(got.len(), 1, "{got:?}");
        let c = &got[0];
        assert_eq!(c.method_name(), Some("RunPodSandbox"));
        assert_eq!(c.outcome, CriOutcome::DeadlineExceeded);
        assert_eq!(c.end, Some(ts(996 * MS)));
        let evidence = c.outcome_evidence.as_deref().unwrap_or_default();
        assert!(evidence.contains("answered OK 1.0 ms before"), "{evidence}");
    }

    /// The same answer with no reset after it stands, released by the
    /// next event past the slack; so does one well inside the deadline a
    /// reset follows (a client closing a finished stream is no expiry).
    #[test]
    fn an_answer_no_reset_follows_stands() {
        let got = calls(&[request(0, 1), answer_ok(995, 1), request(1100, 3)]);
        let first = got.iter().find(|c| c.stream_id == 1).expect("stream 1");
        assert_eq!(first.outcome, CriOutcome::Ok, "{got:?}");
        assert_eq!(first.end, Some(ts(995 * MS)));
        let got = calls(&[request(0, 1), answer_ok(500, 1), client_reset(501, 1)]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].outcome, CriOutcome::Ok);
    }

    /// The runtime's OK 3 ms past the deadline, no reset after it (the
    /// client's h2 stream was closed by the trailers): the client had given
    /// up, its timer started before the request reached the runtime.
    #[test]
    fn an_answer_past_the_deadline_is_its_expiry() {
        let got = calls(&[request(0, 1), answer_ok(1003, 1), request(1100, 3)]);
        let first = got.iter().find(|c| c.stream_id == 1).expect("stream 1");
        assert_eq!(first.outcome, CriOutcome::DeadlineExceeded, "{got:?}");
        assert_eq!(first.end, Some(ts(1003 * MS)));
        let evidence = first.outcome_evidence.as_deref().unwrap_or_default();
        assert!(
            evidence.contains("answered OK 3.0 ms after the client's 1000 ms deadline"),
            "{evidence}"
        );
    }

    /// The client's reset at its deadline, then the runtime's answer: one
    /// call, the expiry; the answer is no call of its own.
    #[test]
    fn an_answer_after_the_clients_reset_is_no_call() {
        let got = calls(&[request(0, 1), client_reset(1001, 1), answer_ok(1002, 1)]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].outcome, CriOutcome::DeadlineExceeded);
        assert_eq!(got[0].end, Some(ts(1001 * MS)));
    }
}

/// After a late attach, kubelet's traceparent names a dynamic-table entry
/// from before the attach: the value is on the wire, the name is not, and
/// the value's W3C form says what it is. Any other hidden literal is not
/// taken for one.
#[test]
fn a_traceparent_whose_name_hpack_hid_is_recognized() {
    use crate::decode::cri::hpack::{Decoder, Limits};
    // W3C Trace Context Level 1, 3.2.2.3's example.
    const TP: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut d = Decoder::attached(Limits::default());
    // RFC 7541 6.2.1: literal with incremental indexing, name index 62 (a
    // pre-attach entry: 0x40 | 62), value not Huffman-coded.
    let mut block = vec![0x7e, TP.len() as u8];
    block.extend_from_slice(TP);
    let b = d.decode(&block).unwrap();
    assert!(known_fields(&b).is_empty(), "the name is hidden");
    let tp = hidden_traceparent(&b).expect("recognized");
    assert_eq!(tp.to_string().as_bytes(), TP);
    // The next call names the entry the first one added: hidden again.
    let b = d.decode(&block).unwrap();
    assert_eq!(hidden_traceparent(&b), Some(tp));
    let b = d
        .decode(&[0x7e, 0x05, b'h', b'e', b'l', b'l', b'o'])
        .unwrap();
    assert_eq!(hidden_traceparent(&b), None);
}

/// After a late attach, an error the runtime sent before is indexed whole:
/// the trailers of a Trailers-Only answer (no response message) name only
/// pre-attach slots. The call failed (a unary call that succeeds carries
/// its response message), its status unknown; with a response message it
/// is an OK whose status was hidden, and without its request seen nothing
/// is claimed.
mod hidden_status {
    use super::deadline_race::{calls, chunk, frame, request};
    use super::*;

    /// `:status 200` and two pre-attach slots (RFC 7541 6.1: indexed
    /// fields 62 and 63), END_STREAM: Trailers-Only.
    fn hidden_trailers_only(at_ms: u64, stream: u32) -> CaptureEvent {
        chunk(
            at_ms,
            Direction::Out,
            frame(0x1, 0x5, stream, &[0x88, 0xbe, 0xbf]),
        )
    }

    #[test]
    fn no_response_message_and_hidden_trailers_is_a_failure() {
        // Stream 3: no preface before it, the capture attached mid-connection.
        let c = calls(&[request(0, 3), hidden_trailers_only(5, 3)]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].outcome, CriOutcome::Failed);
        assert!(c[0]
            .outcome_evidence
            .as_deref()
            .is_some_and(|e| e.contains("without a response message")));
    }

    #[test]
    fn hidden_trailers_of_a_stream_whose_request_went_unseen_make_no_call() {
        let c = calls(&[hidden_trailers_only(5, 3)]);
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn a_response_message_and_hidden_trailers_is_ok() {
        let mut answer = frame(0x1, 0x4, 3, &[0x88]);
        answer.extend(frame(0x0, 0, 3, &[0, 0, 0, 0, 0]));
        answer.extend(frame(0x1, 0x5, 3, &[0xbe]));
        let c = calls(&[request(0, 3), chunk(5, Direction::Out, answer)]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].outcome, CriOutcome::Ok);
    }
}
