//! Writes the seed corpora, fuzz/corpus/<target>/, from the lab recordings
//! (tests/fixtures): real NRI and CRI bytes, cut to what each target reads
//! with nri-trace's own decoders, into the directory given (default
//! fuzz/corpus/). `cargo xtask fuzz --seed` runs it and minimizes its
//! output into fuzz/corpus/ (docs/fuzzing.md).

use std::{
    collections::BTreeMap,
    fs,
    io::Write,
    path::{Path, PathBuf},
};

use nri_trace::{
    assemble::TraceDecoder,
    capture::{CaptureEvent, Direction},
    store::record_file::{RecordWriter, SessionInfo},
    testing::{
        capture::ring_entry,
        cri::{
            connection::{H2Connection, H2Event, Side},
            frame::{Frame, FrameDecoder, FrameEvent},
        },
        nri::ttrpc::{MuxTtrpc, TtrpcEvent},
    },
};
use nri_trace_common::{EntryHeader, EntryKind, Syscall, FLAG_LAST, MAX_CHUNK};
use nri_trace_fuzz::{recordings, CRI_SOCKET, NRI_SOCKET, SEP};

/// Largest seed of a stream target: seeds stay small so the corpus does
/// (docs/fuzzing.md) and libFuzzer's -max_len stays near its default.
const MAX_SEED: usize = 4096;
/// Seeds per target and recording.
const PER_RECORDING: usize = 3;

fn main() {
    // Where to write (default: fuzz/corpus; `cargo xtask fuzz --seed`
    // writes to a scratch directory and merges from there).
    let out = std::env::args_os().nth(1).map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"),
        PathBuf::from,
    );
    let mut seeds: BTreeMap<&str, Vec<Vec<u8>>> = BTreeMap::new();
    for (i, (path, events)) in recordings().iter().enumerate() {
        let name = path.parent().and_then(Path::file_name);
        eprintln!(
            "{}: {} events",
            name.unwrap_or_default().to_string_lossy(),
            events.len()
        );
        let streams = streams(events);
        let late = name.is_some_and(|n| n.to_string_lossy().contains("late-attach"));
        let mut nri = 0;
        let mut cri = 0;
        for ((socket, _conn, _), bytes) in &streams {
            let seed = stream_seed(bytes);
            if socket == NRI_SOCKET && nri < PER_RECORDING {
                nri += 1;
                seeds.entry("nri_mux_ttrpc").or_default().push(seed);
                seeds
                    .entry("nri_message")
                    .or_default()
                    .extend(ttrpc_payloads(bytes));
            } else if socket == CRI_SOCKET && cri < PER_RECORDING {
                cri += 1;
                seeds.entry("h2_frames").or_default().push(seed);
                let (blocks, data) = h2_parts(bytes);
                // A late attach's tables hold entries from before it.
                let hpack = if late {
                    "hpack_attached"
                } else {
                    "hpack_fresh"
                };
                seeds
                    .entry(hpack)
                    .or_default()
                    .push(capped(blocks.join(&SEP[..])));
                seeds
                    .entry("grpc_messages")
                    .or_default()
                    .extend(data.into_iter().map(|d| stream_seed(&d)));
            }
        }
        for (client, server) in cri_pairs(&streams).into_iter().take(PER_RECORDING) {
            let mut seed = stream_seed(&client[..client.len().min(MAX_SEED / 2)]);
            seed.extend_from_slice(SEP);
            seed.extend(stream_seed(&server[..server.len().min(MAX_SEED / 2)]));
            seeds.entry("h2_connection").or_default().push(seed);
            let (requests, responses) = (
                grpc_messages(&client, Side::Client),
                grpc_messages(&server, Side::Server),
            );
            for (id, q) in requests.iter().take(PER_RECORDING * 2) {
                seeds.entry("cri_message").or_default().push(q.clone());
                if let Some(r) = responses.get(id) {
                    seeds.entry("cri_message").or_default().push(r.clone());
                    let mut pair = q.clone();
                    pair.extend_from_slice(SEP);
                    pair.extend_from_slice(r);
                    seeds.entry("cri_shape").or_default().push(pair);
                }
            }
        }
        // The file and ring targets' seeds are whole files: from every
        // other recording only, to keep the committed corpus small.
        if i % 2 == 0 {
            seeds
                .entry("capture_records")
                .or_default()
                .push(ring_entries(events));
            seeds
                .entry("raw_capture_file")
                .or_default()
                .push(raw_file(events));
            seeds
                .entry("record_file")
                .or_default()
                .push(record_file(events));
        }
        // The recording as it is; its first 256 events; attached half-way
        // for 128 events, with one of each damage.
        let pick = i as u8;
        let pipeline = seeds.entry("recording_pipeline").or_default();
        pipeline.push(vec![pick, 0, 0, 0]);
        pipeline.push(vec![pick, 0, 0, 32]);
        let mut damaged = vec![pick, 0x80, 0, 16];
        for op in 0..8u8 {
            damaged.extend([op, 0, 3 * op + 1, 17 * op + 5]);
        }
        pipeline.push(damaged);
    }
    seeds.entry("btf").or_default().push(btf_blob());
    for (target, list) in &seeds {
        let dir = out.join(target);
        fs::create_dir_all(&dir).expect("creating the corpus directory");
        for seed in list.iter().filter(|s| !s.is_empty()) {
            let h = fnv(seed);
            fs::write(dir.join(format!("seed-{h:016x}")), seed).expect("writing a seed");
        }
        eprintln!("{target}: {} seeds", list.len());
    }
}

/// (socket path, connection, inbound to the runtime).
type StreamKey = (String, u64, bool);

/// Each connection direction's bytes, keyed by the socket its open names
/// (the runtime's end only: the plugins' ends carry the same bytes).
fn streams(events: &[CaptureEvent]) -> BTreeMap<StreamKey, Vec<u8>> {
    let mut socket = BTreeMap::new();
    let mut out: BTreeMap<StreamKey, Vec<u8>> = BTreeMap::new();
    for e in events {
        match e {
            CaptureEvent::Open(o) => {
                if let Some(p) = &o.socket_path {
                    socket.insert(o.conn, p.to_string_lossy().into_owned());
                }
            }
            CaptureEvent::Chunk(c) => {
                if let Some(s) = socket.get(&c.conn) {
                    out.entry((s.clone(), c.conn.0, c.direction == Direction::In))
                        .or_default()
                        .extend_from_slice(&c.bytes);
                }
            }
            _ => {}
        }
    }
    out
}

fn capped(mut v: Vec<u8>) -> Vec<u8> {
    v.truncate(MAX_SEED);
    v
}

/// `nri_trace_fuzz::pieces`'s header (pushes of up to 4 KiB, no loss) and
/// the stream's first bytes.
fn stream_seed(bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![3, 0];
    v.extend_from_slice(&bytes[..bytes.len().min(MAX_SEED)]);
    v
}

fn ttrpc_payloads(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut d = MuxTtrpc::new();
    d.push(bytes);
    let mut out = Vec::new();
    while let Some((_, ev, _)) = d.next_with_end() {
        if let TtrpcEvent::Message(m) = ev {
            if m.payload.len() <= MAX_SEED && out.len() < PER_RECORDING * 2 {
                out.push(m.payload);
            }
        }
    }
    out
}

/// The HPACK blocks and the DATA payloads (per stream) of one direction.
fn h2_parts(bytes: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut d = FrameDecoder::new();
    d.push(bytes);
    let mut blocks = Vec::new();
    let mut data: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    while let Some((ev, _)) = d.next_with_end() {
        match ev {
            FrameEvent::HeaderBlock(b) => blocks.push(b.fragment),
            FrameEvent::Frame(Frame::Data {
                stream_id,
                data: payload,
                ..
            }) => {
                data.entry(stream_id).or_default().extend(payload);
            }
            _ => {}
        }
    }
    (blocks, data.into_values().take(PER_RECORDING).collect())
}

/// The two directions of each CRI connection: (client's, server's).
fn cri_pairs(streams: &BTreeMap<StreamKey, Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for ((socket, conn, inbound), client) in streams {
        // The runtime's end: what it reads comes from the client.
        if socket == CRI_SOCKET && *inbound {
            if let Some(server) = streams.get(&(socket.clone(), *conn, false)) {
                out.push((client.clone(), server.clone()));
            }
        }
    }
    out
}

/// The gRPC messages `side` sent on a connection, by stream.
fn grpc_messages(bytes: &[u8], side: Side) -> BTreeMap<u32, Vec<u8>> {
    let mut c = H2Connection::new();
    c.push(side, bytes);
    let mut out = BTreeMap::new();
    while let Some((ev, _)) = c.next_with_end(side) {
        if let H2Event::Message { stream_id, message } = ev {
            if message.payload.len() <= MAX_SEED {
                out.entry(stream_id).or_insert(message.payload);
            }
        }
    }
    out
}

/// The recording's first connections as the kernel programs would have
/// sent them: an accept on the CRI or NRI listener (fd 3 / 4 of tgid 1, as
/// the capture_records target sets them up), data records, the close.
fn ring_entries(events: &[CaptureEvent]) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::new();
    let mut fds = BTreeMap::new();
    let mut seq = 0i32;
    let header =
        |kind: EntryKind, sc: Syscall, ts: u64, fd: i32, aux: i32, ret: i64, len: usize| {
            EntryHeader {
                kind: kind as u16,
                syscall: sc as u16,
                flags: FLAG_LAST,
                ts_ns: ts,
                tgid: 1,
                tid: 1,
                fd,
                aux,
                ret,
                offset: 0,
                len: len as u32,
            }
        };
    for e in events {
        let rec = match e {
            CaptureEvent::Open(o) => {
                let listen = match o.socket_path.as_deref().and_then(Path::to_str) {
                    Some(CRI_SOCKET) => 3,
                    Some(NRI_SOCKET) => 4,
                    _ => continue,
                };
                let fd = 10 + fds.len() as i32;
                fds.insert(o.conn, fd);
                ring_entry::encode(
                    &header(
                        EntryKind::Open,
                        Syscall::Accept4,
                        o.ts.mono_ns,
                        fd,
                        listen,
                        i64::from(fd),
                        0,
                    ),
                    &[],
                )
            }
            CaptureEvent::Chunk(c) => {
                let Some(&fd) = fds.get(&c.conn) else {
                    continue;
                };
                let sc = match c.direction {
                    Direction::In => Syscall::Read,
                    Direction::Out => Syscall::Write,
                };
                seq += 1;
                let b = &c.bytes[..c.bytes.len().min(MAX_CHUNK).min(1024)];
                ring_entry::encode(
                    &header(
                        EntryKind::Data,
                        sc,
                        c.ts.mono_ns,
                        fd,
                        seq,
                        b.len() as i64,
                        b.len(),
                    ),
                    b,
                )
            }
            CaptureEvent::Close(c) => {
                let Some(fd) = fds.remove(&c.conn) else {
                    continue;
                };
                ring_entry::encode(
                    &header(EntryKind::Close, Syscall::Close, c.ts.mono_ns, fd, 0, 0, 0),
                    &[],
                )
            }
            _ => continue,
        };
        if out.len() + rec.len() > MAX_SEED {
            break;
        }
        if !out.is_empty() {
            out.extend_from_slice(SEP);
        }
        out.extend(rec);
    }
    out
}

/// The recording's first lines as a raw capture file (short lines only).
fn raw_file(events: &[CaptureEvent]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        let mut line = Vec::new();
        nri_trace::store::raw_capture::write_event(&mut line, e).expect("writing to memory");
        if line.len() > 1024 {
            continue;
        }
        if out.len() + line.len() > MAX_SEED {
            break;
        }
        out.extend(line);
    }
    out
}

/// A record file of the recording's first observations.
fn record_file(events: &[CaptureEvent]) -> Vec<u8> {
    let mut decoder = TraceDecoder::new(vec![CRI_SOCKET.into()], vec![NRI_SOCKET.into()]);
    let mut observations = Vec::new();
    for e in events {
        decoder.on_capture(e, &mut observations);
    }
    decoder.finish(&mut observations);
    let info = SessionInfo {
        tool: nri_trace::TOOL.into(),
        runtime: Some("containerd".into()),
        runtime_pid: Some(1),
        cri_socket: CRI_SOCKET.into(),
        nri_socket: NRI_SOCKET.into(),
        started_unix_ns: 0,
        redacted: true,
    };
    let mut w = RecordWriter::new(Vec::new(), &info).expect("writing to memory");
    for o in observations {
        if w.bytes() > MAX_SEED as u64 {
            break;
        }
        w.write(&o).expect("writing to memory");
    }
    w.finish().expect("writing to memory")
}

/// A little-endian BTF blob (the kernel's Documentation/bpf/btf.rst):
/// `int` and `struct task_struct { int pad; int exit_code; }`.
fn btf_blob() -> Vec<u8> {
    let strings = b"\0int\0task_struct\0pad\0exit_code\0";
    let (int, task, pad, exit) = (1u32, 5u32, 17u32, 21u32);
    let mut types = Vec::new();
    let mut put = |v: u32| types.extend_from_slice(&v.to_le_bytes());
    // [1] INT "int" size 4, 32 bits signed (kind 1).
    put(int);
    put(1 << 24);
    put(4);
    put((1 << 24) | 32);
    // [2] STRUCT "task_struct" size 8, 2 members (kind 4).
    put(task);
    put((4 << 24) | 2);
    put(8);
    put(pad);
    put(1);
    put(0);
    put(exit);
    put(1);
    put(32);
    let mut blob = Vec::new();
    let mut h = |v: &[u8]| blob.extend_from_slice(v);
    h(&0xeb9f_u16.to_le_bytes());
    h(&[1, 0]);
    h(&24u32.to_le_bytes());
    h(&0u32.to_le_bytes());
    h(&(types.len() as u32).to_le_bytes());
    h(&(types.len() as u32).to_le_bytes());
    h(&(strings.len() as u32).to_le_bytes());
    blob.extend(types);
    blob.write_all(strings).expect("writing to memory");
    blob
}

/// FNV-1a: a stable name for a seed.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}
