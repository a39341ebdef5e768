//! One HTTP/2 connection carrying gRPC, both directions: frames
//! ([`super::frame`]) -> header blocks decoded with one HPACK table per
//! direction ([`super::hpack`]) and DATA payloads reassembled into gRPC
//! messages per stream ([`super::grpc`]).
//!
//! What one direction announces about the other is applied here (RFC 9113
//! §6.5.2): SETTINGS_MAX_FRAME_SIZE sent by an endpoint bounds the frames
//! it *receives*, SETTINGS_HEADER_TABLE_SIZE bounds the HPACK table of the
//! blocks it receives; so each side's SETTINGS configure the decoders of
//! the other side's bytes.
//!
//! A connection joined mid-stream starts with HPACK decoders in attached
//! mode (pre-attach table slots are unknown); one whose client preface is
//! seen is known from its first byte and its tables start empty (RFC 7541
//! §2.3.2). After lost bytes a direction's table is forgotten (a lost
//! HEADERS block may have inserted entries) and re-attached.

use std::collections::{BTreeMap, VecDeque};

use super::{
    frame::{Frame, FrameDecoder, FrameEvent, SETTINGS_HEADER_TABLE_SIZE, SETTINGS_MAX_FRAME_SIZE},
    grpc::{GrpcMessage, MessageError, MessageEvent, MessageReassembler},
    hpack::{self, HpackError},
};

/// Which endpoint sent the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The endpoint that sent the connection preface and opens streams
    /// (kubelet, crictl).
    Client,
    /// The runtime's gRPC server.
    Server,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Side::Client => 0,
            Side::Server => 1,
        }
    }

    #[must_use]
    pub fn other(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

/// Most streams with a partial message held per direction; past it the
/// oldest stream's reassembler is dropped (gRPC clients keep at most
/// SETTINGS_MAX_CONCURRENT_STREAMS open; containerd does not limit it, so
/// bound it here).
pub(crate) const MAX_OPEN_STREAMS: usize = 4096;

/// What one direction of the connection yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum H2Event {
    /// The client connection preface: the connection is seen from its start.
    Preface,
    /// A decoded HEADERS field block (request headers, response headers or
    /// trailers).
    Headers {
        stream_id: u32,
        block: hpack::HeaderBlock,
        end_stream: bool,
    },
    /// A header block that HPACK could not decode; the direction's table is
    /// forgotten (re-attached).
    HeaderError { stream_id: u32, error: HpackError },
    /// A complete gRPC Length-Prefixed-Message.
    Message {
        stream_id: u32,
        message: GrpcMessage,
    },
    /// A problem in a stream's gRPC message framing.
    MessageError { stream_id: u32, error: MessageError },
    /// END_STREAM on a DATA frame (a HEADERS frame's END_STREAM is carried
    /// by [`H2Event::Headers`]).
    EndStream { stream_id: u32 },
    /// RST_STREAM (§6.4).
    Reset { stream_id: u32, error_code: u32 },
    /// GOAWAY (§6.8).
    GoAway {
        last_stream_id: u32,
        error_code: u32,
    },
    /// Bytes were skipped to find a frame boundary (mid-stream attach, loss
    /// or garbage), or a field block was lost.
    Resync { skipped: usize },
}

/// Counters of what was met and not reported as an event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// DATA for a stream whose HEADERS this direction never showed (a
    /// stream that began before the attach): not reassembled.
    pub orphan_data_frames: u64,
    /// Malformed frames and field blocks that could not be reassembled.
    pub bad_frames: u64,
    /// Stream reassemblers dropped at [`MAX_OPEN_STREAMS`].
    pub streams_evicted: u64,
}

struct Direction {
    frames: FrameDecoder,
    hpack: hpack::Decoder,
    /// Has decoded at least one header block since the connection start.
    decoded_headers: bool,
    /// Open streams of this direction (HEADERS seen, no END_STREAM yet).
    streams: BTreeMap<u32, MessageReassembler>,
    out: VecDeque<(H2Event, Option<u64>)>,
}

impl Direction {
    fn new() -> Self {
        Direction {
            frames: FrameDecoder::new(),
            hpack: hpack::Decoder::attached(hpack::Limits::default()),
            decoded_headers: false,
            streams: BTreeMap::new(),
            out: VecDeque::new(),
        }
    }
}

/// Both directions of one HTTP/2 connection.
pub struct H2Connection {
    dirs: [Direction; 2],
    stats: ConnectionStats,
}

impl Default for H2Connection {
    fn default() -> Self {
        Self::new()
    }
}

impl H2Connection {
    /// A connection of unknown history: HPACK tables start attached; they
    /// become empty, known tables when the client preface shows up.
    pub fn new() -> Self {
        H2Connection {
            dirs: [Direction::new(), Direction::new()],
            stats: ConnectionStats::default(),
        }
    }

    pub fn stats(&self) -> ConnectionStats {
        self.stats
    }

    /// Bytes held as partial state by `side`'s frame decoder.
    pub fn buffered(&self, side: Side) -> usize {
        self.dirs[side.index()].frames.buffered()
    }

    /// Append bytes `side` sent; events become available from
    /// [`H2Connection::next_with_end`].
    pub fn push(&mut self, side: Side, bytes: &[u8]) {
        self.dirs[side.index()].frames.push(bytes);
        self.drain(side);
    }

    /// Bytes `side` sent were lost here.
    pub fn gap(&mut self, side: Side) {
        let d = &mut self.dirs[side.index()];
        d.frames.gap();
        for r in d.streams.values_mut() {
            r.gap();
        }
        self.drain(side);
        self.forget_table(side);
        let d = &mut self.dirs[side.index()];
        // Partial messages were reported lost; their streams' later DATA
        // would start mid-message.
        let ids: Vec<u32> = d.streams.keys().copied().collect();
        for id in ids {
            if let Some(mut r) = d.streams.remove(&id) {
                Self::flush_stream(&mut d.out, id, &mut r, None);
            }
        }
    }

    /// The next event of `side`, with the stream offset just past its last
    /// byte (as [`FrameDecoder::next_with_end`]).
    pub fn next_with_end(&mut self, side: Side) -> Option<(H2Event, Option<u64>)> {
        self.dirs[side.index()].out.pop_front()
    }

    fn forget_table(&mut self, side: Side) {
        self.dirs[side.index()].hpack.reattach();
    }

    fn drain(&mut self, side: Side) {
        let i = side.index();
        while let Some((ev, end)) = self.dirs[i].frames.next_with_end() {
            match ev {
                FrameEvent::Preface => {
                    // Seen from the start: both tables are empty and known,
                    // unless headers were already decoded (then the preface
                    // is bogus and changes nothing).
                    if !self.dirs.iter().any(|d| d.decoded_headers) {
                        for d in &mut self.dirs {
                            let limits = d.hpack.limits();
                            d.hpack = hpack::Decoder::new(limits);
                        }
                    }
                    self.dirs[i].out.push_back((H2Event::Preface, end));
                }
                FrameEvent::HeaderBlock(b) => {
                    let d = &mut self.dirs[i];
                    d.decoded_headers = true;
                    match d.hpack.decode(&b.fragment) {
                        Ok(block) => {
                            if !b.end_stream {
                                Self::open_stream(d, &mut self.stats, b.stream_id);
                            } else if let Some(mut r) = d.streams.remove(&b.stream_id) {
                                // Trailers end the stream's DATA.
                                Self::flush_stream(&mut d.out, b.stream_id, &mut r, end);
                            }
                            d.out.push_back((
                                H2Event::Headers {
                                    stream_id: b.stream_id,
                                    block,
                                    end_stream: b.end_stream,
                                },
                                end,
                            ));
                        }
                        Err(error) => {
                            if !b.end_stream {
                                Self::open_stream(d, &mut self.stats, b.stream_id);
                            }
                            d.out.push_back((
                                H2Event::HeaderError {
                                    stream_id: b.stream_id,
                                    error,
                                },
                                end,
                            ));
                        }
                    }
                }
                FrameEvent::Frame(f) => self.on_frame(side, f, end),
                FrameEvent::PushPromise { .. } => {
                    // gRPC never pushes; a PUSH_PROMISE still inserts into
                    // the table, which is now unknown.
                    self.stats.bad_frames += 1;
                    self.forget_table(side);
                }
                FrameEvent::Malformed { .. } => self.stats.bad_frames += 1,
                FrameEvent::BlockError { .. } => {
                    // A lost field block may have changed the table.
                    self.stats.bad_frames += 1;
                    self.forget_table(side);
                }
                FrameEvent::Resync { skipped } => {
                    // Skipped bytes may have held a header block.
                    if self.dirs[i].decoded_headers {
                        self.forget_table(side);
                    }
                    self.dirs[i]
                        .out
                        .push_back((H2Event::Resync { skipped }, end));
                }
            }
        }
    }

    fn open_stream(d: &mut Direction, stats: &mut ConnectionStats, stream_id: u32) {
        if d.streams.contains_key(&stream_id) {
            return;
        }
        if d.streams.len() >= MAX_OPEN_STREAMS {
            d.streams.pop_first();
            stats.streams_evicted += 1;
        }
        d.streams.insert(stream_id, MessageReassembler::new());
    }

    /// Move `r`'s events to `out`.
    fn flush_stream(
        out: &mut VecDeque<(H2Event, Option<u64>)>,
        stream_id: u32,
        r: &mut MessageReassembler,
        end: Option<u64>,
    ) {
        while let Some(ev) = r.next_event() {
            let ev = match ev {
                MessageEvent::Message(message) => H2Event::Message { stream_id, message },
                MessageEvent::Error(error) => H2Event::MessageError { stream_id, error },
            };
            out.push_back((ev, end));
        }
    }

    fn on_frame(&mut self, side: Side, f: Frame, end: Option<u64>) {
        let i = side.index();
        match f {
            Frame::Data {
                stream_id,
                end_stream,
                data,
                ..
            } => {
                let d = &mut self.dirs[i];
                let Some(r) = d.streams.get_mut(&stream_id) else {
                    self.stats.orphan_data_frames += 1;
                    return;
                };
                r.push(&data);
                if end_stream {
                    r.end_stream();
                }
                Self::flush_stream(&mut d.out, stream_id, r, end);
                if end_stream {
                    d.streams.remove(&stream_id);
                    d.out.push_back((H2Event::EndStream { stream_id }, end));
                }
            }
            Frame::RstStream {
                stream_id,
                error_code,
            } => {
                // The stream is over in both directions (§6.4).
                for d in &mut self.dirs {
                    d.streams.remove(&stream_id);
                }
                self.dirs[i].out.push_back((
                    H2Event::Reset {
                        stream_id,
                        error_code,
                    },
                    end,
                ));
            }
            Frame::Settings {
                ack: false,
                settings,
            } => {
                // §6.5.2: these bound what this side receives, i.e. the
                // other side's frames and header blocks.
                let other = &mut self.dirs[side.other().index()];
                for (id, value) in settings {
                    match id {
                        SETTINGS_MAX_FRAME_SIZE => {
                            // An out-of-range value is the peer's protocol
                            // error; keep the current bound.
                            let _ = other.frames.set_max_frame_size(value);
                        }
                        SETTINGS_HEADER_TABLE_SIZE => {
                            other.hpack.set_max_table_size(value as usize);
                        }
                        _ => {}
                    }
                }
            }
            Frame::GoAway {
                last_stream_id,
                error_code,
                ..
            } => self.dirs[i].out.push_back((
                H2Event::GoAway {
                    last_stream_id,
                    error_code,
                },
                end,
            )),
            // Flow control, liveness and priorities do not change what a
            // call is.
            Frame::Settings { ack: true, .. }
            | Frame::Ping { .. }
            | Frame::WindowUpdate { .. }
            | Frame::Priority { .. }
            | Frame::Unknown { .. } => {}
            Frame::Headers { .. } | Frame::PushPromise { .. } | Frame::Continuation { .. } => {
                // Folded into HeaderBlock / PushPromise by FrameDecoder.
            }
        }
    }
}
