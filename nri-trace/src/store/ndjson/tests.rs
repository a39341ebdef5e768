use std::{collections::BTreeMap, sync::Arc};

use proptest::{prelude::*, sample::Index, test_runner::TestRunner};

use super::*;
use crate::{
    capture::{
        hex, unhex, Chunk, CloseReason, ConnClose, ConnId, ConnOpen, Direction, HexError, Loss,
        Origin, Peer, ProcessEvent, Syscall, Timestamp,
    },
    store::raw_capture::{read_events, read_file, write_event},
};

fn ts(n: u64) -> Timestamp {
    Timestamp {
        mono_ns: n,
        wall_ns: 1_700_000_000_000_000_000u64.wrapping_add(n),
    }
}

fn chunk(conn: u64, syscall: Syscall, bytes: Vec<u8>) -> Chunk {
    Chunk {
        conn: ConnId(conn),
        direction: if syscall.is_inbound() {
            Direction::In
        } else {
            Direction::Out
        },
        ts: ts(conn.wrapping_mul(10)),
        tid: 4242,
        syscall,
        syscall_len: bytes.len() as u64,
        bytes,
        truncated: false,
        gap_before: false,
    }
}

/// Every variant, and the corners of each: all origins, peers with and
/// without env, all byte values, extreme numbers, every syscall name.
fn samples() -> Vec<CaptureEvent> {
    let origins = [
        Origin::Existing,
        Origin::Accept { listen_fd: 3 },
        Origin::Connect,
        Origin::Socketpair { other_fd: -1 },
        Origin::Dup { old_fd: i32::MAX },
    ];
    let mut env = BTreeMap::new();
    env.insert("NRI_PLUGIN_NAME".to_string(), "logger \"x\"\n".to_string());
    env.insert("NRI_PLUGIN_IDX".to_string(), "10".to_string());
    let peers = [
        None,
        Some(Peer {
            pid: 1,
            uid: 0,
            comm: None,
            cmdline: vec![],
            env: BTreeMap::new(),
            cgroup: None,
        }),
        Some(Peer {
            pid: u32::MAX,
            uid: 65534,
            comm: Some("plugin\u{1b}[31m é".into()),
            cmdline: vec!["/bin/plugin".into(), String::new(), "--idx=10".into()],
            env,
            cgroup: Some("/system.slice/a:b \u{1b}.service".into()),
        }),
    ];
    let mut v = Vec::new();
    for (i, origin) in origins.iter().enumerate() {
        v.push(CaptureEvent::Open(ConnOpen {
            conn: ConnId(i as u64),
            ts: ts(i as u64),
            tgid: 100,
            fd: i as i32 - 2,
            origin: origin.clone(),
            socket_path: (i % 2 == 0).then(|| PathBuf::from("/run/nri/nri.sock")),
            peer: peers[i % peers.len()].clone(),
            inode: (i % 2 == 1).then_some(1000 + i as u64),
            other_end: (i == 3).then_some(ConnId(0)),
        }));
    }
    for s in (1..).map_while(Syscall::from_u16) {
        v.push(CaptureEvent::Chunk(chunk(7, s, b"\x00\x01ttrpc".to_vec())));
    }
    v.push(CaptureEvent::Chunk(chunk(8, Syscall::Read, vec![])));
    let mut all = chunk(u64::MAX, Syscall::Writev, (0..=255).collect());
    all.truncated = true;
    all.gap_before = true;
    all.syscall_len = u64::MAX;
    all.ts = Timestamp {
        mono_ns: u64::MAX,
        wall_ns: 0,
    };
    v.push(CaptureEvent::Chunk(all));
    for (i, reason) in [
        CloseReason::Closed,
        CloseReason::ProcessExit,
        CloseReason::Untracked,
    ]
    .into_iter()
    .enumerate()
    {
        v.push(CaptureEvent::Close(ConnClose {
            conn: ConnId(i as u64),
            ts: ts(99),
            reason,
        }));
    }
    v.push(CaptureEvent::Process(ProcessEvent::Fork {
        ts: ts(5),
        parent: 100,
        child: 101,
    }));
    v.push(CaptureEvent::Process(ProcessEvent::Exit {
        ts: ts(6),
        tgid: 101,
    }));
    v.push(CaptureEvent::Loss(Loss::default()));
    v.push(CaptureEvent::Loss(Loss {
        lost_records: 1,
        lost_bytes: u64::MAX,
        read_faults: 2,
        fd_map_full: 3,
        malformed: 4,
        sandbox_suppressed: 5,
        pod_map_full: 6,
        lost_from: Some(ts(6)),
        lost_to: Some(ts(7)),
    }));
    v.push(CaptureEvent::Sandbox(
        crate::capture::sandbox::SandboxEvent {
            ts: ts(7),
            tgid: 101,
            tid: 102,
            comm: "containerd-shim".into(),
            cgroup_id: 1,
            cgroup: Some("/system.slice/containerd.service".into()),
            op: crate::capture::sandbox::SandboxOp::Signal {
                sig: 9,
                target: 4242,
                target_comm: Some("cat".into()),
                target_cgroup: None,
                result: 0,
            },
            truncated: false,
        },
    ));
    v
}

fn record(events: &[CaptureEvent]) -> Vec<u8> {
    let mut w = LineWriter::new(Vec::new());
    for ev in events {
        w.write(ev).unwrap();
    }
    w.finish().unwrap()
}

fn read_all(bytes: &[u8]) -> Vec<Result<CaptureEvent, LineError>> {
    read_events(bytes).collect()
}

fn only_error(text: &str) -> LineError {
    let mut r = read_all(text.as_bytes());
    assert_eq!(r.len(), 1, "{r:?}");
    r.pop().unwrap().unwrap_err()
}

#[test]
fn round_trip_every_variant() {
    let events = samples();
    let bytes = record(&events);
    let back: Vec<_> = read_events(&bytes[..]).map(Result::unwrap).collect();
    assert_eq!(back, events);
    // One line per event, each led by the version and its type.
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.lines().count(), events.len());
    for l in text.lines() {
        assert!(l.starts_with("{\"v\":1,\"type\":\""), "{l}");
    }
}

#[test]
fn format_matches_the_documented_one() {
    let c = chunk(3, Syscall::Recvmsg, vec![0xde, 0xad, 0x0f]);
    let mut out = Vec::new();
    write_event(&mut out, &CaptureEvent::Chunk(c)).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["v"], 1);
    assert_eq!(v["type"], "chunk");
    assert_eq!(v["conn"], 3);
    assert_eq!(v["direction"], "in");
    assert_eq!(v["syscall"], "recvmsg");
    assert_eq!(v["bytes"], "dead0f");
    assert_eq!(hex(&[0xde, 0xad, 0x0f]), "dead0f");
}

#[test]
fn capture_ndjson_output_is_a_recording() {
    let events = samples();
    let mut out = Vec::new();
    for ev in &events {
        crate::output::ndjson(&mut out, ev).unwrap();
    }
    assert_eq!(out, record(&events));
    assert_eq!(read_file_bytes(&out), events);
}

fn read_file_bytes(b: &[u8]) -> Vec<CaptureEvent> {
    read_events(b).collect::<Result<_, _>>().unwrap()
}

#[test]
fn hand_written_lines_are_accepted() {
    // No "v", fields in any order, upper-case hex, unknown fields
    // (from a newer writer of the same version) ignored, CRLF and blank
    // lines, last line without newline.
    let text = "\n  \r\n{\"bytes\":\"00FF\",\"type\":\"chunk\",\"conn\":1,\"direction\":\"out\",\
                    \"ts\":{\"mono_ns\":1,\"wall_ns\":2},\"tid\":3,\"syscall\":\"write\",\
                    \"truncated\":false,\"gap_before\":true,\"syscall_len\":9,\"extra\":[1,{}]}\r\n\
                    \t\n{\"type\":\"process\",\"kind\":\"exit\",\"ts\":{\"mono_ns\":1,\"wall_ns\":2},\"tgid\":7}";
    let evs = read_file_bytes(text.as_bytes());
    assert_eq!(evs.len(), 2);
    let CaptureEvent::Chunk(c) = &evs[0] else {
        panic!("{evs:?}")
    };
    assert_eq!(
        (c.bytes.as_slice(), c.gap_before, c.syscall),
        (&[0u8, 255][..], true, Syscall::Write)
    );
    assert!(matches!(
        evs[1],
        CaptureEvent::Process(ProcessEvent::Exit { tgid: 7, .. })
    ));
}

/// A valid chunk line with `bytes` and `syscall` replaced.
fn chunk_line(bytes: &str, syscall: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_slice(&record(&[CaptureEvent::Chunk(chunk(
        1,
        Syscall::Read,
        vec![1],
    ))]))
    .unwrap();
    v["bytes"] = bytes.into();
    v["syscall"] = syscall.into();
    v.to_string()
}

#[test]
fn hex_errors_name_the_line() {
    let good = chunk_line("00", "read");
    let text = format!(
        "{good}\n\n{}\n{}\n{}\n{good}\n",
        chunk_line("abc", "read"),
        chunk_line("0g", "read"),
        chunk_line("0é", "read"),
    );
    let r = read_all(text.as_bytes());
    assert_eq!(r.len(), 5);
    assert!(r[0].is_ok() && r[4].is_ok());
    let msgs: Vec<String> = r[1..4]
        .iter()
        .map(|e| e.as_ref().unwrap_err().to_string())
        .collect();
    assert!(msgs[0].starts_with("line 3: "), "{}", msgs[0]);
    assert!(
        msgs[0].contains("odd number of hex digits (3)"),
        "{}",
        msgs[0]
    );
    assert!(msgs[1].starts_with("line 4: "), "{}", msgs[1]);
    assert!(
        msgs[1].contains("invalid hex digit 'g' at offset 1"),
        "{}",
        msgs[1]
    );
    assert!(msgs[2].starts_with("line 5: "), "{}", msgs[2]);
    assert!(
        msgs[2].contains("invalid hex digit 'é' at offset 1"),
        "{}",
        msgs[2]
    );
    for m in &msgs {
        assert!(!m.contains("at line 1"), "serde_json's line leaked: {m}");
    }
}

#[test]
fn unhex_cases() {
    assert_eq!(unhex(""), Ok(vec![]));
    assert_eq!(unhex("00ff7F"), Ok(vec![0, 255, 127]));
    assert_eq!(unhex("0"), Err(HexError::OddLength(1)));
    assert_eq!(unhex("000"), Err(HexError::OddLength(3)));
    assert_eq!(
        unhex("00x"),
        Err(HexError::BadDigit {
            offset: 2,
            found: 'x'
        })
    );
    assert_eq!(
        unhex(" 0"),
        Err(HexError::BadDigit {
            offset: 0,
            found: ' '
        })
    );
    let all: Vec<u8> = (0..=255).collect();
    assert_eq!(unhex(&hex(&all)), Ok(all));
}

#[test]
fn unknown_syscall_is_an_error() {
    let text = format!("{}\n", chunk_line("00", "recv"));
    let e = only_error(&text);
    assert_eq!(e.line(), Some(1));
    let m = e.to_string();
    assert!(m.contains("unknown syscall \"recv\""), "{m}");
    assert!(m.contains("read, readv, "), "{m}");
    // Names are case-sensitive, as written.
    assert!(only_error(&chunk_line("00", "READ"))
        .to_string()
        .contains("unknown syscall"));
}

#[test]
fn other_bad_lines() {
    // (line, expected message start, part of the message). Syntax
    // errors have a column; where serde puts data errors is its business.
    let cases = [
        (
            "[\"loss\",0,0,0,0,0]",
            "line 1, column 1: ",
            "not a JSON object",
        ),
        ("  42", "line 1, column 3: ", "not a JSON object"),
        (
            "{\"type\":\"loss\" 1}",
            "line 1, column 16: ",
            "expected `,` or `}`",
        ),
        (
            "{\"type\":\"loss\"} trailing",
            "line 1, column 17: ",
            "trailing characters",
        ),
        (
            "{\"v\":\"1\",\"type\":\"loss\"}",
            "line 1, column 8: ",
            "invalid type",
        ),
        ("{\"type\":\"nope\"}", "line 1", "unknown variant `nope`"),
        ("{\"v\":1}", "line 1", "missing field `type`"),
        (
            "{\"type\":\"close\",\"conn\":1}",
            "line 1",
            "missing field `ts`",
        ),
        (
            "{\"type\":\"loss\",\"lost_records\":-1}",
            "line 1",
            "invalid value",
        ),
        (
            "{\"type\":\"loss\",\"lost_records\":1.5}",
            "line 1",
            "invalid type",
        ),
    ];
    for (line, start, want) in cases {
        let e = only_error(&format!("{line}\n"));
        let m = e.to_string();
        assert!(m.starts_with(start), "{line}: {m}");
        assert!(m.contains(want), "{line}: {m}");
    }
    let e = only_error("{\"v\":2,\"type\":\"loss\"}\n");
    assert!(
        matches!(
            e,
            LineError::UnsupportedVersion {
                line: 1,
                version: 2
            }
        ),
        "{e}"
    );
    let e = only_error("{\"v\":0}\n");
    assert!(
        matches!(e, LineError::UnsupportedVersion { version: 0, .. }),
        "{e}"
    );
}

#[test]
fn cut_short_recording() {
    let mut bytes = record(&samples()[..3]);
    bytes.truncate(bytes.len() - 10);
    let r = read_all(&bytes);
    assert_eq!(r.len(), 3);
    assert!(r[0].is_ok() && r[1].is_ok());
    assert!(
        matches!(r[2], Err(LineError::Truncated { line: 3 })),
        "{r:?}"
    );
    // The same line with its newline is plainly invalid, not "cut short".
    bytes.push(b'\n');
    assert!(matches!(
        read_all(&bytes)[2],
        Err(LineError::Invalid { line: 3, .. })
    ));
}

#[test]
fn long_lines_are_skipped_not_buffered() {
    let ok = String::from_utf8(record(&[CaptureEvent::Loss(Loss::default())])).unwrap();
    let max = ok.len(); // includes the newline: the line itself fits
    let long = format!("{{\"x\":\"{}\"}}\n", "a".repeat(3 * max));
    let text = format!("{ok}{long}{ok}{}", "b".repeat(5 * max));
    let mut r = read_events(text.as_bytes()).with_max_line_bytes(max);
    assert!(r.next().unwrap().is_ok());
    assert!(matches!(
        r.next().unwrap(),
        Err(LineError::LineTooLong { line: 2, max: m }) if m == max
    ));
    assert!(r.next().unwrap().is_ok());
    assert_eq!(r.line_number(), 3);
    // An over-long unterminated tail is reported as too long too.
    assert!(matches!(
        r.next().unwrap(),
        Err(LineError::LineTooLong { line: 4, .. })
    ));
    assert!(r.next().is_none());
    assert!(r.next().is_none());
}

/// Hands out its data in tiny pieces, then fails.
struct Flaky<'a> {
    data: &'a [u8],
    step: usize,
    interrupted: bool,
}

impl Read for Flaky<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.interrupted {
            self.interrupted = true;
            return Err(io::ErrorKind::Interrupted.into());
        }
        self.interrupted = false;
        if self.data.is_empty() {
            return Err(io::Error::other("disk on fire"));
        }
        let n = self.step.min(self.data.len()).min(buf.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

#[test]
fn read_errors_end_the_stream() {
    let events = samples();
    let bytes = record(&events);
    let flaky = Flaky {
        data: &bytes,
        step: 7,
        interrupted: false,
    };
    let r: Vec<_> = read_events(BufReader::with_capacity(16, flaky)).collect();
    assert_eq!(r.len(), events.len() + 1);
    for (got, want) in r.iter().zip(&events) {
        assert_eq!(got.as_ref().unwrap(), want);
    }
    let e = r.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(e, LineError::Io { .. }), "{e}");
    assert_eq!(e.line(), Some(events.len() as u64 + 1));
}

#[test]
fn writer_flushes_at_non_chunks() {
    let mut w = LineWriter::new(Vec::new());
    let c = CaptureEvent::Chunk(chunk(1, Syscall::Read, vec![1, 2]));
    w.write(&c).unwrap();
    assert!(w.get_ref().is_empty(), "chunks stay buffered");
    w.flush().unwrap();
    let after_chunk = w.get_ref().len();
    assert!(after_chunk > 0);
    w.write(&c).unwrap();
    w.write(&CaptureEvent::Loss(Loss::default())).unwrap();
    assert!(w.get_ref().len() > 2 * after_chunk);
    assert_eq!(read_file_bytes(&w.finish().unwrap()).len(), 3);
}

#[test]
fn unserializable_event_leaves_no_partial_line() {
    use std::os::unix::ffi::OsStrExt;
    let mut w = LineWriter::new(Vec::new());
    let CaptureEvent::Open(mut o) = samples().remove(0) else {
        unreachable!()
    };
    o.socket_path = Some(PathBuf::from(std::ffi::OsStr::from_bytes(
        b"/run/\xff.sock",
    )));
    assert!(w.write(&CaptureEvent::Open(o)).is_err());
    w.write(&CaptureEvent::Loss(Loss::default())).unwrap();
    assert_eq!(
        read_file_bytes(&w.finish().unwrap()),
        vec![CaptureEvent::Loss(Loss::default())]
    );
}

#[test]
fn files() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("nri-trace-recording-{}.ndjson", std::process::id()));
    let events = samples();
    let mut w = LineWriter::new(create_private(&path).unwrap());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    for ev in &events {
        w.write(ev).unwrap();
    }
    w.finish().unwrap();
    let back = read_file(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(back.unwrap(), events);
    let e = read_file(dir.join("nri-trace-no-such-recording.ndjson")).unwrap_err();
    assert!(matches!(e, LineError::Open { .. }) && e.line().is_none());
    assert!(
        e.to_string().contains("nri-trace-no-such-recording.ndjson"),
        "{e}"
    );
}

/// Bytes that matter to JSON and to our fields, to get past the syntax
/// checks more often than uniform noise would.
const ALPHABET: &[u8] = b"{}[]:,\"\\ 0123456789abcdefgv-e.+\n\rtruefalsnl\xff\xc3\xa9";

/// One line of garbage: uniform noise, or one of `lines` mutated
/// (point mutations, cut and spliced with a piece of another, or a run
/// of JSON-ish bytes inserted).
fn garbage_line(lines: &Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Vec<u8>> {
    let l = Arc::clone(lines);
    let line = any::<Index>().prop_map(move |i| l[i.index(l.len())].clone());
    let json_byte = || prop::sample::select(ALPHABET);
    prop_oneof![
        crate::decode::test_strategies::bytes_below(200),
        (
            line.clone(),
            prop::collection::vec((any::<Index>(), json_byte()), 1..=4)
        )
            .prop_map(|(mut l, muts)| {
                for (i, b) in muts {
                    let at = i.index(l.len());
                    l[at] = b;
                }
                l
            }),
        (line.clone(), any::<Index>(), line.clone(), any::<Index>()).prop_map(
            |(mut l, i, other, j)| {
                l.truncate(i.index(l.len()));
                l.extend_from_slice(&other[j.index(other.len())..]);
                l
            }
        ),
        (
            line,
            any::<Index>(),
            prop::collection::vec(json_byte(), 0..8)
        )
            .prop_map(|(mut l, i, ins)| {
                let at = i.index(l.len());
                l.splice(at..at, ins);
                l
            }),
    ]
}

/// Garbage never panics, every item names a line that exists, and
/// whatever does parse writes back and re-reads to the same event.
#[test]
fn garbage_never_panics() {
    let valid = record(&samples());
    let lines: Arc<Vec<Vec<u8>>> = Arc::new(
        valid
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
    );
    // 1-5 lines, most ended by a newline; a quarter of the cases with
    // a 64-byte line limit.
    let input = prop::collection::vec((garbage_line(&lines), prop::bool::weighted(0.8)), 1..=5)
        .prop_map(|ls| {
            let mut input = Vec::new();
            for (l, newline) in ls {
                input.extend_from_slice(&l);
                if newline {
                    input.push(b'\n');
                }
            }
            input
        });
    let max = prop_oneof![1 => Just(64), 3 => Just(DEFAULT_MAX_LINE_BYTES)];
    let parsed = std::cell::Cell::new(0u32);
    let mut runner = TestRunner::new(crate::decode::test_strategies::config(3000));
    runner
        .run(&(input, max), |(input, max)| {
            let physical = input.split(|&b| b == b'\n').count() as u64;
            for item in read_events(&input[..]).with_max_line_bytes(max) {
                match item {
                    Ok(ev) => {
                        parsed.set(parsed.get() + 1);
                        let again = read_file_bytes(&record(std::slice::from_ref(&ev)));
                        prop_assert_eq!(again, vec![ev]);
                    }
                    Err(e) => {
                        let line = e.line().unwrap();
                        prop_assert!(
                            (1..=physical).contains(&line),
                            "{} in {} lines",
                            e,
                            physical
                        );
                        prop_assert!(!e.to_string().is_empty());
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    let parsed = parsed.get();
    // The mutations must not all be rejected, or the round trip above
    // tests nothing.
    assert!(parsed > 100, "only {parsed} mutated lines parsed");
}
