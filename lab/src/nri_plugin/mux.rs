//! The NRI connection multiplexer, plugin side.
//!
//! NRI runs two ttrpc connections over one unix stream (containerd/nri
//! `pkg/net/multiplex/mux.go`, v0.6.1): every frame is an 8-byte header,
//! `conn_id: u32 BE | payload_len: u32 BE`, then the payload. Connection 1
//! carries the Plugin service (the runtime is the ttrpc client, the plugin
//! the server), connection 2 the Runtime service (the plugin is the client).
//! Opening a connection sends nothing; frames for a connection nobody opened
//! are dropped. A frame is just a piece of that connection's byte stream: a
//! ttrpc message may span frames and a frame may hold parts of two messages,
//! so both directions are reassembled as byte streams here.
//!
//! [`Mux::start`] splits the trunk into two in-process byte streams (tokio
//! duplex pipes) that the `ttrpc` crate serves and dials, and merges what
//! ttrpc writes back into frames.
//!
//! Two things the bridge does beyond moving bytes, both on connection 1:
//!
//! - **Frames it writes are at most 4096 bytes.** The runtime's reader
//!   (v0.6.1 `conn.Read`) fails with ENOMEM when a frame is larger than the
//!   buffer ttrpc-go reads into, which is its 4096-byte `bufio.Reader` at
//!   every message boundary. ttrpc-go's own 4096-byte `bufio.Writer` never
//!   produces such frames at a boundary; we get the same guarantee by never
//!   writing frames above 4096 bytes.
//! - **It strips `timeout_nano` from requests before ttrpc-rust sees them**
//!   (the original value is reported through [`MuxEvent::Request`]).
//!   ttrpc-rust enforces that timeout itself: it drops the handler and
//!   answers DEADLINE_EXCEEDED. ttrpc-go, which real NRI plugins use
//!   (`pkg/stub`), only puts the deadline into the handler's context and
//!   answers whenever the handler returns. A test plugin that delays past
//!   the timeout or hangs must behave like such a plugin: answer late, or
//!   never.
//!
//! It also reports when each request arrived and when each response was
//! written to the trunk, so that the ground truth carries wire times.

use std::{io, sync::Arc};

use prost::Message as _;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf},
    net::{
        unix::{OwnedReadHalf, OwnedWriteHalf},
        UnixStream,
    },
    sync::{oneshot, Mutex},
};

use crate::truth::mono_ns;

/// Mux header: conn_id u32 BE, payload length u32 BE.
pub const HEADER_LEN: usize = 8;
/// Connection of the Plugin service (runtime -> plugin requests).
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// Connection of the Runtime service (plugin -> runtime requests).
pub const RUNTIME_SERVICE_CONN: u32 = 2;
/// Largest payload the v0.3-v0.6 mux writes (`maxPayloadSize = 1 << 24`).
/// Larger incoming frames are refused as corrupt.
pub const MAX_PAYLOAD: usize = 1 << 24;
/// Largest frame payload we write (see the module docs).
pub const WRITE_CHUNK: usize = 4096;

/// ttrpc message header: length u32 BE, stream id u32 BE, type u8, flags u8.
pub const TTRPC_HEADER_LEN: usize = 10;
/// ttrpc's maximum message length (4 MiB).
pub const TTRPC_MAX_MESSAGE: usize = 4 << 20;
pub const TTRPC_REQUEST: u8 = 1;
pub const TTRPC_RESPONSE: u8 = 2;
pub const TTRPC_DATA: u8 = 3;

/// Encode one frame.
pub fn encode_frame(conn: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&conn.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Split `data` into frames of at most `chunk` payload bytes (one empty
/// frame for empty data).
pub fn encode_frames(conn: u32, data: &[u8], chunk: usize) -> Vec<u8> {
    assert!(chunk > 0);
    if data.is_empty() {
        return encode_frame(conn, data);
    }
    let mut out = Vec::with_capacity(data.len() + HEADER_LEN * data.len().div_ceil(chunk));
    for piece in data.chunks(chunk) {
        out.extend_from_slice(&encode_frame(conn, piece));
    }
    out
}

/// Reassembles frames from a byte stream read in arbitrary pieces.
#[derive(Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes held that do not form a complete frame yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame, if any.
    pub fn next_frame(&mut self) -> io::Result<Option<(u32, Vec<u8>)>> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let conn = u32::from_be_bytes(self.buf[0..4].try_into().unwrap());
        let len = u32::from_be_bytes(self.buf[4..8].try_into().unwrap()) as usize;
        if len > MAX_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("mux frame of {len} bytes for conn {conn} exceeds {MAX_PAYLOAD}"),
            ));
        }
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.buf.drain(..HEADER_LEN + len);
        Ok(Some((conn, payload)))
    }
}

/// A parsed ttrpc message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtrpcHeader {
    pub length: u32,
    pub stream_id: u32,
    pub msg_type: u8,
    pub flags: u8,
}

impl TtrpcHeader {
    pub fn parse(b: &[u8]) -> Self {
        Self {
            length: u32::from_be_bytes(b[0..4].try_into().unwrap()),
            stream_id: u32::from_be_bytes(b[4..8].try_into().unwrap()),
            msg_type: b[8],
            flags: b[9],
        }
    }

    pub fn encode(&self) -> [u8; TTRPC_HEADER_LEN] {
        let mut h = [0u8; TTRPC_HEADER_LEN];
        h[0..4].copy_from_slice(&self.length.to_be_bytes());
        h[4..8].copy_from_slice(&self.stream_id.to_be_bytes());
        h[8] = self.msg_type;
        h[9] = self.flags;
        h
    }
}

/// Reassembles ttrpc messages from one connection's byte stream.
#[derive(Default)]
pub struct TtrpcSplitter {
    buf: Vec<u8>,
}

impl TtrpcSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete message: its header and payload.
    pub fn next_message(&mut self) -> io::Result<Option<(TtrpcHeader, Vec<u8>)>> {
        if self.buf.len() < TTRPC_HEADER_LEN {
            return Ok(None);
        }
        let h = TtrpcHeader::parse(&self.buf[..TTRPC_HEADER_LEN]);
        let len = h.length as usize;
        if len > TTRPC_MAX_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("ttrpc message of {len} bytes exceeds {TTRPC_MAX_MESSAGE}"),
            ));
        }
        if self.buf.len() < TTRPC_HEADER_LEN + len {
            return Ok(None);
        }
        let payload = self.buf[TTRPC_HEADER_LEN..TTRPC_HEADER_LEN + len].to_vec();
        self.buf.drain(..TTRPC_HEADER_LEN + len);
        Ok(Some((h, payload)))
    }
}

/// ttrpc `Request` (containerd/ttrpc request.proto), decoded here only to
/// read and strip `timeout_nano`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct WireRequest {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<WireKeyValue>,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct WireKeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// ttrpc `Response{status = 1 (google.rpc.Status), payload = 2}`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct WireResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<WireStatus>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// `google.rpc.Status` without its details.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct WireStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// What the mux reports about connection 1 (the Plugin service).
#[derive(Clone, Debug)]
pub enum MuxEvent {
    /// A complete request arrived (its last byte was read from the trunk).
    Request {
        stream_id: u32,
        service: String,
        method: String,
        /// As sent by the runtime (stripped before ttrpc-rust sees it).
        timeout_nano: i64,
        at_mono_ns: u64,
    },
    /// A response left for the trunk: `written` tells whether the write
    /// succeeded; `at_mono_ns` is taken after the last frame was written.
    Response {
        stream_id: u32,
        code: i32,
        message: String,
        written: bool,
        at_mono_ns: u64,
    },
}

pub type MuxObserver = Arc<dyn Fn(MuxEvent) + Send + Sync>;

/// The two local ends of a running mux and how to learn that it ended.
pub struct MuxHandles {
    /// Connection 1: serve the Plugin service on it.
    pub plugin_conn: DuplexStream,
    /// Connection 2: call the Runtime service on it.
    pub runtime_conn: DuplexStream,
    /// Resolves with the reason once the trunk is closed or broken.
    pub closed: oneshot::Receiver<String>,
}

/// Size of the in-process pipes between the mux and ttrpc.
const PIPE_SIZE: usize = 256 * 1024;

pub struct Mux;

impl Mux {
    /// Start the mux tasks on `trunk` (must run inside a tokio runtime).
    pub fn start(trunk: UnixStream, observer: MuxObserver) -> MuxHandles {
        let (plugin_local, plugin_conn) = tokio::io::duplex(PIPE_SIZE);
        let (runtime_local, runtime_conn) = tokio::io::duplex(PIPE_SIZE);
        let (trunk_r, trunk_w) = trunk.into_split();
        let trunk_w = Arc::new(Mutex::new(trunk_w));
        let (closed_tx, closed) = oneshot::channel();

        let (p_read, p_write) = tokio::io::split(plugin_local);
        let (r_read, r_write) = tokio::io::split(runtime_local);

        tokio::spawn(reader(
            trunk_r,
            p_write,
            r_write,
            Arc::clone(&observer),
            closed_tx,
        ));
        tokio::spawn(plugin_writer(p_read, Arc::clone(&trunk_w), observer));
        tokio::spawn(runtime_writer(r_read, trunk_w));

        MuxHandles {
            plugin_conn,
            runtime_conn,
            closed,
        }
    }
}

/// Trunk -> local ends. Ends (and reports why) when the trunk does.
async fn reader(
    mut trunk: OwnedReadHalf,
    mut plugin: WriteHalf<DuplexStream>,
    mut runtime: WriteHalf<DuplexStream>,
    observer: MuxObserver,
    closed: oneshot::Sender<String>,
) {
    let mut frames = FrameDecoder::new();
    let mut requests = TtrpcSplitter::new();
    let mut buf = vec![0u8; 64 * 1024];
    let reason = 'outer: loop {
        let n = match trunk.read(&mut buf).await {
            Ok(0) if frames.pending() == 0 => {
                break "runtime closed the connection (EOF)".to_string()
            }
            Ok(0) => break format!("EOF inside a frame ({} bytes pending)", frames.pending()),
            Ok(n) => n,
            Err(e) => break format!("read error: {e}"),
        };
        // When the bytes arrived: a request completed by this read arrived
        // now, not once the frames are reassembled (copying a message of
        // megabytes takes milliseconds in a debug build).
        let read_at = mono_ns();
        frames.push(&buf[..n]);
        loop {
            let (conn, payload) = match frames.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => break 'outer format!("bad frame: {e}"),
            };
            match conn {
                PLUGIN_SERVICE_CONN => {
                    requests.push(&payload);
                    loop {
                        let (h, body) = match requests.next_message() {
                            Ok(Some(m)) => m,
                            Ok(None) => break,
                            Err(e) => break 'outer format!("bad ttrpc message on conn 1: {e}"),
                        };
                        let msg = inbound_plugin_message(h, body, &observer, read_at);
                        if let Err(e) = plugin.write_all(&msg).await {
                            break 'outer format!("local plugin connection closed: {e}");
                        }
                    }
                }
                RUNTIME_SERVICE_CONN => {
                    if let Err(e) = runtime.write_all(&payload).await {
                        break 'outer format!("local runtime connection closed: {e}");
                    }
                }
                other => log::warn!(
                    "mux: dropping {} bytes for unopened conn {other}",
                    payload.len()
                ),
            }
        }
    };
    log::info!("mux: trunk closed: {reason}");
    let _ = closed.send(reason);
    // Dropping the write halves ends both local connections (EOF).
}

/// Report a request (`at`: when the read that completed it returned),
/// strip its timeout, and re-encode it for ttrpc-rust.
fn inbound_plugin_message(
    h: TtrpcHeader,
    body: Vec<u8>,
    observer: &MuxObserver,
    at: u64,
) -> Vec<u8> {
    let mut body = body;
    let mut h = h;
    if h.msg_type == TTRPC_REQUEST {
        match WireRequest::decode(body.as_slice()) {
            Ok(mut req) => {
                observer(MuxEvent::Request {
                    stream_id: h.stream_id,
                    service: req.service.clone(),
                    method: req.method.clone(),
                    timeout_nano: req.timeout_nano,
                    at_mono_ns: at,
                });
                if req.timeout_nano != 0 {
                    req.timeout_nano = 0;
                    body = req.encode_to_vec();
                    h.length = body.len() as u32;
                }
            }
            Err(e) => log::warn!(
                "mux: undecodable ttrpc request on stream {}: {e}",
                h.stream_id
            ),
        }
    }
    let mut out = Vec::with_capacity(TTRPC_HEADER_LEN + body.len());
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(&body);
    out
}

async fn write_frames(trunk: &Mutex<OwnedWriteHalf>, conn: u32, data: &[u8]) -> io::Result<()> {
    let frames = encode_frames(conn, data, WRITE_CHUNK);
    let mut w = trunk.lock().await;
    w.write_all(&frames).await?;
    w.flush().await
}

/// ttrpc server (conn 1) -> trunk, one message at a time.
async fn plugin_writer(
    mut local: ReadHalf<DuplexStream>,
    trunk: Arc<Mutex<OwnedWriteHalf>>,
    observer: MuxObserver,
) {
    let mut split = TtrpcSplitter::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match local.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        split.push(&buf[..n]);
        loop {
            let (h, body) = match split.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    log::error!("mux: ttrpc server wrote garbage: {e}");
                    return;
                }
            };
            let mut msg = Vec::with_capacity(TTRPC_HEADER_LEN + body.len());
            msg.extend_from_slice(&h.encode());
            msg.extend_from_slice(&body);
            let res = write_frames(&trunk, PLUGIN_SERVICE_CONN, &msg).await;
            if h.msg_type == TTRPC_RESPONSE {
                let at = mono_ns();
                let (code, message) = match WireResponse::decode(body.as_slice()) {
                    Ok(r) => r.status.map_or((0, String::new()), |s| (s.code, s.message)),
                    Err(e) => (-1, format!("undecodable response: {e}")),
                };
                observer(MuxEvent::Response {
                    stream_id: h.stream_id,
                    code,
                    message,
                    written: res.is_ok(),
                    at_mono_ns: at,
                });
            }
            if let Err(e) = res {
                log::warn!("mux: writing to the trunk failed: {e}");
            }
        }
    }
}

/// ttrpc client (conn 2) -> trunk, in frames of at most WRITE_CHUNK bytes.
async fn runtime_writer(mut local: ReadHalf<DuplexStream>, trunk: Arc<Mutex<OwnedWriteHalf>>) {
    let mut buf = vec![0u8; WRITE_CHUNK];
    loop {
        let n = match local.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Err(e) = write_frames(&trunk, RUNTIME_SERVICE_CONN, &buf[..n]).await {
            log::warn!("mux: writing to the trunk failed: {e}");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttrpc_msg(stream: u32, ty: u8, payload: &[u8]) -> Vec<u8> {
        let h = TtrpcHeader {
            length: payload.len() as u32,
            stream_id: stream,
            msg_type: ty,
            flags: 0,
        };
        let mut v = h.encode().to_vec();
        v.extend_from_slice(payload);
        v
    }

    fn drain(d: &mut FrameDecoder) -> Vec<(u32, Vec<u8>)> {
        let mut out = vec![];
        while let Some(f) = d.next_frame().unwrap() {
            out.push(f);
        }
        out
    }

    #[test]
    fn frame_header_layout() {
        let f = encode_frame(2, b"abc");
        assert_eq!(f, [0, 0, 0, 2, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(encode_frame(1, b""), [0, 0, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn frames_spanning_reads_byte_by_byte() {
        let mut wire = encode_frame(1, b"hello");
        wire.extend(encode_frame(2, b""));
        wire.extend(encode_frame(2, &[7u8; 300]));
        let mut d = FrameDecoder::new();
        let mut got = vec![];
        for b in &wire {
            d.push(std::slice::from_ref(b));
            got.extend(drain(&mut d));
        }
        assert_eq!(
            got,
            vec![(1, b"hello".to_vec()), (2, vec![]), (2, vec![7u8; 300])]
        );
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn many_frames_in_one_read_and_a_split_header() {
        let mut wire = vec![];
        for i in 0..10u8 {
            wire.extend(encode_frame(1 + (u32::from(i) % 2), &[i; 5]));
        }
        // Cut inside the 4th frame's header.
        let cut = 3 * 13 + 4;
        let mut d = FrameDecoder::new();
        d.push(&wire[..cut]);
        assert_eq!(drain(&mut d).len(), 3);
        assert_eq!(d.pending(), 4);
        d.push(&wire[cut..]);
        let rest = drain(&mut d);
        assert_eq!(rest.len(), 7);
        assert_eq!(rest[0], (2, vec![3u8; 5]));
    }

    #[test]
    fn split_and_merge_round_trip_interleaved() {
        // Two connections' byte streams, split into small frames, interleaved,
        // read back in odd-sized pieces, and merged per connection.
        let a: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let b: Vec<u8> = (0..3_333u32).map(|i| (i % 13) as u8).collect();
        let fa = encode_frames(1, &a, 700);
        let fb = encode_frames(2, &b, 4096);
        // Interleave whole frames: a-frame, b-frame, ...
        let mut wire = vec![];
        let (mut da, mut db) = (FrameDecoder::new(), FrameDecoder::new());
        da.push(&fa);
        db.push(&fb);
        let (mut fa, mut fb) = (drain(&mut da), drain(&mut db));
        assert!(fa.iter().all(|(c, p)| *c == 1 && p.len() <= 700));
        assert_eq!(fb.len(), 1);
        while !fa.is_empty() || !fb.is_empty() {
            if !fa.is_empty() {
                let (c, p) = fa.remove(0);
                wire.extend(encode_frame(c, &p));
            }
            if !fb.is_empty() {
                let (c, p) = fb.remove(0);
                wire.extend(encode_frame(c, &p));
            }
        }
        let mut d = FrameDecoder::new();
        let (mut ma, mut mb) = (vec![], vec![]);
        for piece in wire.chunks(333) {
            d.push(piece);
            for (c, p) in drain(&mut d) {
                match c {
                    1 => ma.extend(p),
                    2 => mb.extend(p),
                    _ => unreachable!(),
                }
            }
        }
        assert_eq!(ma, a);
        assert_eq!(mb, b);
    }

    #[test]
    fn writer_chunks_never_exceed_4096() {
        let data = vec![1u8; 3 * WRITE_CHUNK + 17];
        let wire = encode_frames(1, &data, WRITE_CHUNK);
        let mut d = FrameDecoder::new();
        d.push(&wire);
        let frames = drain(&mut d);
        assert_eq!(
            frames.iter().map(|(_, p)| p.len()).collect::<Vec<_>>(),
            vec![4096, 4096, 4096, 17]
        );
        assert_eq!(encode_frames(1, b"", WRITE_CHUNK), encode_frame(1, b""));
    }

    #[test]
    fn oversized_frame_is_an_error() {
        let mut d = FrameDecoder::new();
        d.push(&[0, 0, 0, 1, 0x01, 0, 0, 1]); // 16 MiB + 1
        assert!(d.next_frame().is_err());
    }

    #[test]
    fn ttrpc_messages_spanning_frames() {
        // A request split across three frames, followed by a second message
        // that starts in the last frame, as ttrpc-go's buffered writer does.
        let m1 = ttrpc_msg(1, TTRPC_REQUEST, &[9u8; 5000]);
        let m2 = ttrpc_msg(3, TTRPC_REQUEST, b"xy");
        let mut stream = m1;
        stream.extend(&m2);
        let wire = encode_frames(1, &stream, 4096);
        let mut d = FrameDecoder::new();
        let mut s = TtrpcSplitter::new();
        let mut msgs = vec![];
        for piece in wire.chunks(1000) {
            d.push(piece);
            for (c, p) in drain(&mut d) {
                assert_eq!(c, 1);
                s.push(&p);
                while let Some(m) = s.next_message().unwrap() {
                    msgs.push(m);
                }
            }
        }
        assert_eq!(msgs.len(), 2);
        assert_eq!(
            msgs[0].0,
            TtrpcHeader {
                length: 5000,
                stream_id: 1,
                msg_type: 1,
                flags: 0
            }
        );
        assert_eq!(msgs[0].1, vec![9u8; 5000]);
        assert_eq!(msgs[1].0.stream_id, 3);
        assert_eq!(msgs[1].1, b"xy");
    }

    #[test]
    fn request_timeout_is_reported_and_stripped() {
        let req = WireRequest {
            service: "nri.pkg.api.v1alpha1.Plugin".into(),
            method: "StateChange".into(),
            payload: vec![8, 1],
            timeout_nano: 2_000_000_000,
            metadata: vec![],
        };
        let body = req.encode_to_vec();
        let h = TtrpcHeader {
            length: body.len() as u32,
            stream_id: 5,
            msg_type: TTRPC_REQUEST,
            flags: 0,
        };
        let seen = Arc::new(std::sync::Mutex::new(vec![]));
        let s2 = Arc::clone(&seen);
        let obs: MuxObserver = Arc::new(move |e| s2.lock().unwrap().push(e));
        let out = inbound_plugin_message(h, body, &obs, mono_ns());
        let h2 = TtrpcHeader::parse(&out);
        assert_eq!(h2.stream_id, 5);
        assert_eq!(h2.length as usize, out.len() - TTRPC_HEADER_LEN);
        let back = WireRequest::decode(&out[TTRPC_HEADER_LEN..]).unwrap();
        assert_eq!(back.timeout_nano, 0);
        assert_eq!(back.method, "StateChange");
        assert_eq!(back.payload, vec![8, 1]);
        let first = seen.lock().unwrap()[0].clone();
        match first {
            MuxEvent::Request {
                stream_id: 5,
                timeout_nano: 2_000_000_000,
                method,
                ..
            } => {
                assert_eq!(method, "StateChange")
            }
            e => panic!("unexpected {e:?}"),
        }
    }

    #[tokio::test]
    async fn bridge_end_to_end_over_a_socketpair() {
        // The "runtime" side speaks raw frames; the plugin side sees two
        // byte streams, and what it writes comes back framed.
        let (ours, theirs) = UnixStream::pair().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(vec![]));
        let s2 = Arc::clone(&seen);
        let mut h = Mux::start(ours, Arc::new(move |e| s2.lock().unwrap().push(e)));
        let (mut tr, mut tw) = theirs.into_split();

        // Runtime -> plugin: a request on conn 1 split in two frames with a
        // conn-2 frame in between, and bytes for an unopened conn 7.
        let req = WireRequest {
            service: "S".into(),
            method: "M".into(),
            timeout_nano: 5,
            ..Default::default()
        };
        let msg = ttrpc_msg(1, TTRPC_REQUEST, &req.encode_to_vec());
        let mut wire = encode_frame(1, &msg[..4]);
        wire.extend(encode_frame(7, b"ignored"));
        wire.extend(encode_frame(2, b"to-client"));
        wire.extend(encode_frame(1, &msg[4..]));
        tw.write_all(&wire).await.unwrap();

        let mut got = vec![0u8; 9];
        h.runtime_conn.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"to-client");
        let mut hdr = [0u8; TTRPC_HEADER_LEN];
        h.plugin_conn.read_exact(&mut hdr).await.unwrap();
        let th = TtrpcHeader::parse(&hdr);
        let mut body = vec![0u8; th.length as usize];
        h.plugin_conn.read_exact(&mut body).await.unwrap();
        assert_eq!(
            WireRequest::decode(body.as_slice()).unwrap().timeout_nano,
            0
        );

        // Plugin -> runtime: a 6000-byte response on conn 1 comes out as
        // frames of <= 4096 bytes; conn 2 bytes come out on conn 2.
        let resp = WireResponse {
            status: Some(WireStatus {
                code: 2,
                message: "boom".into(),
            }),
            payload: vec![3u8; 6000],
        };
        let out = ttrpc_msg(1, TTRPC_RESPONSE, &resp.encode_to_vec());
        h.plugin_conn.write_all(&out).await.unwrap();
        h.runtime_conn.write_all(b"reg").await.unwrap();
        let mut d = FrameDecoder::new();
        let (mut c1, mut c2) = (vec![], vec![]);
        let mut buf = vec![0u8; 8192];
        while c1.len() < out.len() || c2.len() < 3 {
            let n = tr.read(&mut buf).await.unwrap();
            assert!(n > 0);
            d.push(&buf[..n]);
            for (c, p) in drain(&mut d) {
                assert!(p.len() <= WRITE_CHUNK);
                if c == 1 {
                    c1.extend(p)
                } else {
                    c2.extend(p)
                }
            }
        }
        assert_eq!(c1, out);
        assert_eq!(c2, b"reg");
        let ev = seen.lock().unwrap().clone();
        assert!(matches!(
            &ev[0],
            MuxEvent::Request {
                stream_id: 1,
                timeout_nano: 5,
                ..
            }
        ));
        assert!(matches!(
            &ev[1],
            MuxEvent::Response {
                stream_id: 1,
                code: 2,
                written: true,
                ..
            }
        ));

        // The runtime closing the trunk is reported.
        drop(tw);
        drop(tr);
        let reason = h.closed.await.unwrap();
        assert!(reason.contains("EOF"), "{reason}");
    }
}
