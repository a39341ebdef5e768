//! Bounds and garbage. Real-peer behaviour (containerd, the ttrpc crate,
//! the NRI logger) is tested on recordings in tests/tests/offline/nri_replay.rs;
//! these synthetic streams exercise what no well-behaved peer sends.
use proptest::{prelude::*, test_runner::TestRunner};
use prost::Message as _;

use super::*;
use crate::{
    capture::{Origin, Peer, Syscall},
    decode::{nri::proto::envelope, test_strategies},
};

fn ts(ns: u64) -> Timestamp {
    Timestamp {
        mono_ns: ns,
        wall_ns: ns,
    }
}

fn open(conn: u64) -> CaptureEvent {
    CaptureEvent::Open(ConnOpen {
        conn: ConnId(conn),
        ts: ts(0),
        tgid: 1,
        fd: 3,
        origin: Origin::Existing,
        socket_path: Some("/nri.sock".into()),
        peer: None,
        inode: None,
        other_end: None,
    })
}

fn chunk(conn: u64, dir: Direction, at: u64, bytes: Vec<u8>) -> CaptureEvent {
    CaptureEvent::Chunk(Chunk {
        conn: ConnId(conn),
        direction: dir,
        ts: ts(at),
        tid: 1,
        syscall: Syscall::Write,
        syscall_len: bytes.len() as u64,
        bytes,
        truncated: false,
        gap_before: false,
    })
}

/// The finished calls among `out`.
fn finished(out: &[NriObservation]) -> Vec<&NriCall> {
    out.iter()
        .filter_map(|o| match o {
            NriObservation::Call(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// Mux frame (conn_id 1) of a ttrpc request message (test-only framing
/// per mux.go / channel.go).
fn request_frame(stream_id: u32) -> Vec<u8> {
    call_frame(stream_id, "Shutdown", vec![], 0)
}

/// Mux frame (conn_id 1) of a ttrpc request of Plugin `method`.
fn call_frame(stream_id: u32, method: &str, payload: Vec<u8>, timeout_nano: i64) -> Vec<u8> {
    let req = envelope::Request {
        service: message::PLUGIN_SERVICE.into(),
        method: method.into(),
        payload,
        timeout_nano,
        metadata: vec![],
    }
    .encode_to_vec();
    message_frame(stream_id, 1, &req)
}

/// Mux frame (conn_id 1) of one ttrpc message of `kind` (1 request,
/// 2 response).
fn message_frame(stream_id: u32, kind: u8, body: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&(body.len() as u32).to_be_bytes());
    t.extend_from_slice(&stream_id.to_be_bytes());
    t.extend_from_slice(&[kind, 0]);
    t.extend_from_slice(body);
    let mut f = Vec::new();
    f.extend_from_slice(&1u32.to_be_bytes());
    f.extend_from_slice(&(t.len() as u32).to_be_bytes());
    f.extend_from_slice(&t);
    f
}

/// An existing connection whose peer process is `argv` (no
/// RegisterPlugin will be seen on it).
fn open_peer(conn: u64, pid: u32, argv: &[&str]) -> CaptureEvent {
    let CaptureEvent::Open(mut o) = open(conn) else {
        unreachable!()
    };
    o.peer = Some(Peer {
        pid,
        uid: 0,
        comm: argv
            .first()
            .map(|a| a.rsplit('/').next().unwrap_or(a).to_owned()),
        cmdline: argv.iter().map(ToString::to_string).collect(),
        env: BTreeMap::new(),
        cgroup: None,
    });
    CaptureEvent::Open(o)
}

/// The latest identity announced for each connection.
fn identities(out: &[NriObservation]) -> HashMap<ConnId, PluginId> {
    let mut m = HashMap::new();
    for o in out {
        if let NriObservation::Plugin { conn, plugin, .. } = o {
            m.insert(*conn, plugin.clone());
        }
    }
    m
}

/// Plugins that registered before the capture are named from their
/// argv; deliveries of one event in index order leave the inference
/// alone, an order the inferred indexes contradict lowers the
/// confidence of both with the evidence, and a RegisterPlugin seen
/// later replaces the inference.
#[test]
fn inferred_identity_is_checked_against_the_delivery_order() {
    use crate::model::plugin_identity::{Clue, Confidence};
    let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
    let mut out = Vec::new();
    a.on_capture(
        &open_peer(1, 100, &["/bin/p", "-idx", "10", "-name", "a"]),
        &mut out,
    );
    a.on_capture(&open_peer(2, 200, &["/opt/nri/plugins/20-b"]), &mut out);
    let ids = identities(&out);
    let (first, second) = (&ids[&ConnId(1)], &ids[&ConnId(2)]);
    assert_eq!(
        (first.label(), second.label()),
        ("10-a".into(), "20-b".into())
    );
    assert_eq!(first.source, IdentitySource::Inferred);
    let how = first.inferred.as_ref().unwrap();
    assert_eq!(
        (how.name_from, how.index_from),
        (Some(Clue::Flag), Some(Clue::Flag))
    );
    let how = second.inferred.as_ref().unwrap();
    assert_eq!(how.index_from, Some(Clue::Argv0));
    let run = |pod: &str| {
        api::RunPodSandboxRequest {
            pod: Some(api::PodSandbox {
                id: pod.into(),
                ..Default::default()
            }),
        }
        .encode_to_vec()
    };
    let deliver = |a: &mut NriCallAssembler, out: &mut Vec<_>, conn, at, sid, pod: &str| {
        let f = call_frame(sid, "RunPodSandbox", run(pod), 0);
        a.on_capture(&chunk(conn, Direction::Out, at, f), out);
    };
    // s1: 10-a then 20-b, as the runtime orders them.
    deliver(&mut a, &mut out, 1, 10, 1, "s1");
    deliver(&mut a, &mut out, 2, 20, 1, "s1");
    let ids = identities(&out);
    assert!(ids
        .values()
        .all(|p| p.inferred.as_ref().unwrap().confidence == Confidence::High));
    // s2: 20-b first; then 10-a (twice: a v0.12 fallback is no new round).
    deliver(&mut a, &mut out, 2, 30, 3, "s2");
    deliver(&mut a, &mut out, 1, 40, 3, "s2");
    deliver(&mut a, &mut out, 1, 41, 5, "s2");
    let ids = identities(&out);
    for c in [1, 2] {
        let how = ids[&ConnId(c)].inferred.as_ref().unwrap();
        assert_eq!(how.confidence, Confidence::Low, "{how:?}");
        assert_eq!(how.conflicts.len(), 1, "{how:?}");
        assert!(
            how.conflicts[0].contains("called 20-b before 10-a with RUN_POD_SANDBOX of s2"),
            "{how:?}"
        );
    }
    // The registration wins.
    let reg = api::RegisterPluginRequest {
        plugin_name: "b".into(),
        plugin_idx: "05".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let req = envelope::Request {
        service: message::RUNTIME_SERVICE.into(),
        method: "RegisterPlugin".into(),
        payload: reg,
        timeout_nano: 0,
        metadata: vec![],
    }
    .encode_to_vec();
    let mut f = message_frame(1, 1, &req);
    f[..4].copy_from_slice(&2u32.to_be_bytes());
    a.on_capture(&chunk(2, Direction::In, 50, f), &mut out);
    let b = &identities(&out)[&ConnId(2)];
    assert_eq!(
        (b.label().as_str(), b.source),
        ("05-b", IdentitySource::RegisterPlugin)
    );
    assert!(b.inferred.is_none());
}

/// The plugin's RegisterPlugin and the runtime's Configure carry their
/// NRI versions (since v0.10): the plugin's observation says both.
#[test]
fn the_nri_versions_of_both_ends_are_announced() {
    let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
    let mut out = Vec::new();
    a.on_capture(&open(1), &mut out);
    let reg = api::RegisterPluginRequest {
        plugin_name: "go12".into(),
        plugin_idx: "10".into(),
        nri_version: "v0.12.2".into(),
    }
    .encode_to_vec();
    let req = envelope::Request {
        service: message::RUNTIME_SERVICE.into(),
        method: "RegisterPlugin".into(),
        payload: reg,
        timeout_nano: 0,
        metadata: vec![],
    }
    .encode_to_vec();
    let mut f = message_frame(1, 1, &req);
    f[..4].copy_from_slice(&2u32.to_be_bytes());
    a.on_capture(&chunk(1, Direction::In, 10, f), &mut out);
    let cfg = api::ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "v2.3.7".into(),
        nri_version: "v0.12.0".into(),
        ..Default::default()
    }
    .encode_to_vec();
    a.on_capture(
        &chunk(1, Direction::Out, 20, call_frame(1, "Configure", cfg, 0)),
        &mut out,
    );
    let last = out
        .iter()
        .rev()
        .find_map(|o| match o {
            NriObservation::Plugin { nri_version, .. } => Some(nri_version.clone()),
            _ => None,
        })
        .expect("a plugin observation");
    assert_eq!(last.plugin.as_deref(), Some("v0.12.2"));
    assert_eq!(last.runtime.as_deref(), Some("v0.12.0"));
}

/// Regression: an Unimplemented answer claimed the StateChange fallback
/// for every per-event method; v0.12's runtime falls back for nine
/// (containerd/nri v0.12.0 `plugin_type.go`), not for CreateContainer
/// (every version) nor for v0.10's UpdatePodSandbox.
#[test]
fn unimplemented_claims_the_fallback_only_where_it_exists() {
    let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
    let mut out = Vec::new();
    a.on_capture(&open(1), &mut out);
    let unimplemented = envelope::Response {
        status: Some(envelope::Status {
            code: message::CODE_UNIMPLEMENTED,
            message: "method".into(),
        }),
        payload: vec![],
    }
    .encode_to_vec();
    for (i, m) in ["CreateContainer", "UpdatePodSandbox", "RunPodSandbox"]
        .iter()
        .enumerate()
    {
        let sid = 2 * i as u32 + 1;
        let at = 10 + 10 * i as u64;
        a.on_capture(
            &chunk(1, Direction::Out, at, call_frame(sid, m, vec![], 0)),
            &mut out,
        );
        let f = message_frame(sid, 2, &unimplemented);
        a.on_capture(&chunk(1, Direction::In, at + 1, f), &mut out);
    }
    let claims: Vec<(String, bool)> = out
        .iter()
        .filter_map(|o| match o {
            NriObservation::Call(c) => Some((
                c.method.map(|m| m.name().to_owned()).unwrap_or_default(),
                c.summary.contains("falls back to StateChange"),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        claims,
        [
            ("CreateContainer".to_string(), false),
            ("UpdatePodSandbox".to_string(), false),
            ("RunPodSandbox".to_string(), true),
        ]
    );
}

#[test]
fn unanswered_calls_are_bounded() {
    let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
    let mut out = Vec::new();
    a.on_capture(&open(1), &mut out);
    let n = MAX_PENDING_PER_CONN as u32 + 100;
    for i in 0..n {
        a.on_capture(
            &chunk(
                1,
                Direction::Out,
                10 + u64::from(i),
                request_frame(2 * i + 1),
            ),
            &mut out,
        );
    }
    assert_eq!(a.in_flight(), MAX_PENDING_PER_CONN);
    let dropped = finished(&out);
    assert_eq!(dropped.len(), 100);
    assert!(dropped.iter().all(|c| c.outcome == NriOutcome::NoResponse));
    // The oldest went first.
    assert_eq!(dropped[0].stream_id, 1);
}

/// A hung StopPodSandbox delivery whose caller gave up without closing
/// (the CRI client cancelled: nri `isFatalError` is false for
/// `context.Canceled`): timed out at its deadline, and its late answer
/// is counted, not taken for a call.
#[test]
fn deadline_passing_without_close_is_a_timeout() {
    const S: u64 = 1_000_000_000;
    let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
    let mut out = Vec::new();
    a.on_capture(&open(1), &mut out);
    let ev = api::StopPodSandboxRequest {
        pod: Some(api::PodSandbox {
            id: "s1".into(),
            ..Default::default()
        }),
    }
    .encode_to_vec();
    let req = call_frame(1, "StopPodSandbox", ev, 5 * S as i64);
    a.on_capture(&chunk(1, Direction::Out, S, req), &mut out);
    assert_eq!(a.oldest_open_delivery(), Some(S));
    // Just past the deadline: containerd's own close may still come.
    let other = |at| chunk(2, Direction::Out, at, vec![0]);
    a.on_capture(&other(6 * S + DEADLINE_GRACE_NS / 2), &mut out);
    assert!(finished(&out).is_empty(), "{out:?}");
    a.on_capture(&other(6 * S + DEADLINE_GRACE_NS + 1), &mut out);
    let done = finished(&out);
    assert_eq!(done.len(), 1, "{out:?}");
    assert_eq!(done[0].outcome, NriOutcome::TimedOut);
    assert_eq!(done[0].event, Some(Event::StopPodSandbox));
    assert_eq!(done[0].end, None);
    assert_eq!(done[0].duration_ns, Some(5 * S));
    assert_eq!(a.oldest_open_delivery(), None);
    assert_eq!(a.in_flight(), 0);
    // The plugin answers 10 s later.
    out.clear();
    let resp = envelope::Response {
        status: None,
        payload: vec![],
    }
    .encode_to_vec();
    let late = message_frame(1, 2, &resp);
    a.on_capture(&chunk(1, Direction::In, 16 * S, late), &mut out);
    assert!(finished(&out).is_empty(), "{out:?}");
    assert_eq!(a.stats().answered_after_deadline, 1);
}

/// The runtime's read of a plugin's answer stamped 1 ms before the
/// runtime's write of the request (its writer descheduled before the
/// syscall's exit, where the probe stamps): one call, answered, that
/// started no later than its answer; not a partial reply and a
/// timed-out request. A response whose request never comes is reported
/// partial once the stream is [`EARLY_REPLY_WAIT_NS`] past it.
#[test]
fn a_reply_stamped_before_its_request_still_answers_it() {
    const MS: u64 = 1_000_000;
    let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
    let mut out = Vec::new();
    a.on_capture(&open(1), &mut out);
    let ev = api::RemovePodSandboxRequest {
        pod: Some(api::PodSandbox {
            id: "s1".into(),
            ..Default::default()
        }),
    }
    .encode_to_vec();
    let ok = envelope::Response {
        status: None,
        payload: api::Empty::default().encode_to_vec(),
    }
    .encode_to_vec();
    a.on_capture(
        &chunk(1, Direction::In, 1000 * MS, message_frame(7, 2, &ok)),
        &mut out,
    );
    let req = call_frame(7, "RemovePodSandbox", ev, 2_000 * MS as i64);
    a.on_capture(&chunk(1, Direction::Out, 1001 * MS, req), &mut out);
    assert!(
        !out.iter().any(|o| matches!(o, NriObservation::Pending(_))),
        "answered, not pending: {out:?}"
    );
    let calls = finished(&out);
    assert_eq!(calls.len(), 1, "{out:?}");
    assert_eq!(calls[0].outcome, NriOutcome::Ok);
    assert!(!calls[0].partial);
    assert_eq!(calls[0].event, Some(Event::RemovePodSandbox));
    assert_eq!(calls[0].start.map(|t| t.mono_ns), Some(1000 * MS));
    assert_eq!(calls[0].duration_ns, Some(0));
    assert_eq!(a.stats().replies_before_request, 1);
    assert_eq!(a.in_flight(), 0);

    // A lone answer: held for a second of capture time, then partial.
    out.clear();
    a.on_capture(
        &chunk(1, Direction::In, 2000 * MS, message_frame(9, 2, &ok)),
        &mut out,
    );
    let tick = |at| CaptureEvent::Tick { ts: ts(at) };
    a.on_capture(&tick(2000 * MS + EARLY_REPLY_WAIT_NS), &mut out);
    assert!(finished(&out).is_empty(), "{out:?}");
    a.on_capture(&tick(2001 * MS + EARLY_REPLY_WAIT_NS), &mut out);
    let partial = finished(&out);
    assert_eq!(partial.len(), 1, "{out:?}");
    assert!(partial[0].partial && partial[0].start.is_none());
    assert_eq!(partial[0].stream_id, 9);
    assert_eq!(partial[0].caller, Caller::Runtime);
}

/// 3000 chunks of garbage, a valid request frame in every tenth, in
/// either direction: no panic, and the calls in flight stay bounded.
#[test]
fn garbage_never_panics_and_stays_bounded() {
    let chunk_of = (
        test_strategies::bytes_below(300),
        any::<u32>(),
        any::<bool>(),
    );
    let chunks = prop::collection::vec(chunk_of, 3000);
    TestRunner::new(test_strategies::config(1))
        .run(&chunks, |chunks| {
            let mut a = NriCallAssembler::new(vec!["/nri.sock".into()]);
            let mut out = Vec::new();
            a.on_capture(&open(1), &mut out);
            for (i, (mut bytes, stream, inbound)) in chunks.into_iter().enumerate() {
                if i % 10 == 0 {
                    bytes.extend(request_frame(stream | 1));
                }
                let dir = if inbound {
                    Direction::In
                } else {
                    Direction::Out
                };
                a.on_capture(&chunk(1, dir, i as u64, bytes), &mut out);
                out.clear();
            }
            prop_assert!(a.in_flight() <= MAX_PENDING_PER_CONN);
            a.finish(&mut out);
            Ok(())
        })
        .unwrap();
}
