//! HTTP/2 framing (RFC 9113) for one direction of a CRI gRPC connection.
//!
//! The client direction starts with the connection preface (§3.4), the 24
//! octets `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`; after it, and from the first
//! byte in the server direction, the stream is a sequence of frames (§4.1):
//!
//! ```text
//! 0          3      4       5                       9
//! | length   | type | flags | R | stream identifier | payload (length octets)
//!   u24 BE     u8     u8      1b  u31 BE
//! ```
//!
//! [`FrameDecoder`] reports the preface, decodes every frame type of §6,
//! validates the per-type length and stream-identifier rules (a violating
//! frame is reported as [`FrameEvent::Malformed`]; its framing is still
//! known from the header, so decoding goes on), and reassembles each field
//! block (HEADERS or PUSH_PROMISE, then CONTINUATION frames until
//! END_HEADERS, §4.3) into one raw HPACK block for the `hpack` module.
//!
//! Buffering and resynchronization reuse the NRI framer
//! ([`crate::decode::nri`]'s `Framer`): a frame longer than the maximum
//! frame size cannot be a frame (§4.2), so it sends the decoder hunting for
//! the next plausible frame boundary (see [`FrameDecoder`]).

use std::cell::Cell;
use std::collections::VecDeque;

use crate::decode::nri::{Framer, Layout, RawEvent, DEFAULT_HUNT_WINDOW};

/// Length of a frame header (§4.1).
pub const HEADER_LEN: usize = 9;
/// The client connection preface (§3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Initial SETTINGS_MAX_FRAME_SIZE, and the smallest value allowed (§6.5.2).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 1 << 14;
/// Largest SETTINGS_MAX_FRAME_SIZE allowed (§6.5.2): 2^24 - 1.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// Default bound of a reassembled header block.
pub const DEFAULT_MAX_HEADER_BLOCK: usize = 256 * 1024;

/// Flag END_STREAM (DATA, HEADERS) (§6.1, §6.2).
pub const FLAG_END_STREAM: u8 = 0x01;
/// Flag ACK (SETTINGS, PING) (§6.5, §6.7).
pub const FLAG_ACK: u8 = 0x01;
/// Flag END_HEADERS (HEADERS, PUSH_PROMISE, CONTINUATION) (§6.2).
pub const FLAG_END_HEADERS: u8 = 0x04;
/// Flag PADDED (DATA, HEADERS, PUSH_PROMISE) (§6.1).
pub const FLAG_PADDED: u8 = 0x08;
/// Flag PRIORITY (HEADERS) (§6.2).
pub const FLAG_PRIORITY: u8 = 0x20;

/// SETTINGS_HEADER_TABLE_SIZE (§6.5.2): bounds the peer's HPACK decoder.
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
/// SETTINGS_ENABLE_PUSH (§6.5.2).
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
/// SETTINGS_MAX_CONCURRENT_STREAMS (§6.5.2).
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// SETTINGS_INITIAL_WINDOW_SIZE (§6.5.2).
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
/// SETTINGS_MAX_FRAME_SIZE (§6.5.2): bounds the frames the peer may send.
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
/// SETTINGS_MAX_HEADER_LIST_SIZE (§6.5.2).
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
/// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441 §3).
pub const SETTINGS_ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
/// SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218 §2.1).
pub const SETTINGS_NO_RFC7540_PRIORITIES: u16 = 0x9;

/// Largest error code defined by RFC 9113 §7 (HTTP_1_1_REQUIRED).
pub const MAX_KNOWN_ERROR_CODE: u32 = 0xd;

/// Name of an error code of RFC 9113 §7 (RST_STREAM, GOAWAY).
pub fn error_code_name(code: u32) -> Option<&'static str> {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    NAMES.get(code as usize).copied()
}

/// Frame type (§6; §11.2 registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    Data,
    Headers,
    Priority,
    RstStream,
    Settings,
    PushPromise,
    Ping,
    GoAway,
    WindowUpdate,
    Continuation,
    /// An extension type: §4.1 / §5.5 say to ignore and discard it.
    Unknown(u8),
}

/// Which stream identifiers a frame type may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamRule {
    /// Connection-level only (SETTINGS §6.5, PING §6.7, GOAWAY §6.8).
    Zero,
    /// Stream-level only (DATA §6.1, HEADERS §6.2, PRIORITY §6.3,
    /// RST_STREAM §6.4, PUSH_PROMISE §6.6, CONTINUATION §6.10).
    NonZero,
    /// Either (WINDOW_UPDATE §6.9, unknown types).
    Any,
}

impl FrameType {
    pub fn from_u8(b: u8) -> Self {
        match b {
            0 => FrameType::Data,
            1 => FrameType::Headers,
            2 => FrameType::Priority,
            3 => FrameType::RstStream,
            4 => FrameType::Settings,
            5 => FrameType::PushPromise,
            6 => FrameType::Ping,
            7 => FrameType::GoAway,
            8 => FrameType::WindowUpdate,
            9 => FrameType::Continuation,
            b => FrameType::Unknown(b),
        }
    }

    pub fn as_u8(self) -> u8 {
        match self {
            FrameType::Data => 0,
            FrameType::Headers => 1,
            FrameType::Priority => 2,
            FrameType::RstStream => 3,
            FrameType::Settings => 4,
            FrameType::PushPromise => 5,
            FrameType::Ping => 6,
            FrameType::GoAway => 7,
            FrameType::WindowUpdate => 8,
            FrameType::Continuation => 9,
            FrameType::Unknown(b) => b,
        }
    }

    /// The flags this type defines (§6). Others must be ignored on receipt
    /// (§4.1) but are never sent, so they count against a hunting
    /// candidate.
    pub fn defined_flags(self) -> u8 {
        match self {
            FrameType::Data => FLAG_END_STREAM | FLAG_PADDED,
            FrameType::Headers => FLAG_END_STREAM | FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY,
            FrameType::Settings | FrameType::Ping => FLAG_ACK,
            FrameType::PushPromise => FLAG_END_HEADERS | FLAG_PADDED,
            FrameType::Continuation => FLAG_END_HEADERS,
            FrameType::Priority
            | FrameType::RstStream
            | FrameType::GoAway
            | FrameType::WindowUpdate
            | FrameType::Unknown(_) => 0,
        }
    }

    fn stream_rule(self) -> StreamRule {
        match self {
            FrameType::Settings | FrameType::Ping | FrameType::GoAway => StreamRule::Zero,
            FrameType::Data
            | FrameType::Headers
            | FrameType::Priority
            | FrameType::RstStream
            | FrameType::PushPromise
            | FrameType::Continuation => StreamRule::NonZero,
            FrameType::WindowUpdate | FrameType::Unknown(_) => StreamRule::Any,
        }
    }
}

/// A decoded frame header (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length (u24).
    pub length: u32,
    pub frame_type: FrameType,
    pub flags: u8,
    /// Stream identifier with the reserved bit cleared (§4.1: "MUST be
    /// ignored when receiving").
    pub stream_id: u32,
}

impl FrameHeader {
    /// Decode the first [`HEADER_LEN`] bytes, if there are that many.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let b = bytes.get(..HEADER_LEN)?;
        Some(FrameHeader {
            length: u24(b),
            frame_type: FrameType::from_u8(b[3]),
            flags: b[4],
            stream_id: u31(&b[5..9]),
        })
    }

    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Stream dependency and weight of HEADERS / PRIORITY (§5.3.2 of RFC 7540;
/// deprecated by RFC 9113 §5.3.2 but still parsed, §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrioritySpec {
    pub exclusive: bool,
    pub stream_dependency: u32,
    /// Wire value: the weight is this plus one (1..=256).
    pub weight: u8,
}

/// One decoded frame.
///
/// [`FrameDecoder`] never yields `Headers`, `PushPromise` or
/// `Continuation` as [`FrameEvent::Frame`]: it folds them into
/// [`FrameEvent::HeaderBlock`] / [`FrameEvent::PushPromise`]. They are
/// variants here so that [`parse_frame`] decodes every frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// §6.1. `padding` counts the padding octets (not the Pad Length one).
    Data {
        stream_id: u32,
        end_stream: bool,
        data: Vec<u8>,
        padding: usize,
    },
    /// §6.2.
    Headers {
        stream_id: u32,
        end_stream: bool,
        end_headers: bool,
        priority: Option<PrioritySpec>,
        fragment: Vec<u8>,
    },
    /// §6.3.
    Priority {
        stream_id: u32,
        priority: PrioritySpec,
    },
    /// §6.4.
    RstStream { stream_id: u32, error_code: u32 },
    /// §6.5: `(identifier, value)` pairs in wire order (later ones win,
    /// §6.5.3); unknown identifiers are kept (§6.5.2 says ignore them).
    Settings {
        ack: bool,
        settings: Vec<(u16, u32)>,
    },
    /// §6.6.
    PushPromise {
        stream_id: u32,
        promised_stream_id: u32,
        end_headers: bool,
        fragment: Vec<u8>,
    },
    /// §6.7.
    Ping { ack: bool, data: [u8; 8] },
    /// §6.8.
    GoAway {
        last_stream_id: u32,
        error_code: u32,
        debug_data: Vec<u8>,
    },
    /// §6.9. An increment of 0 is a protocol error for the receiver, but
    /// well framed: it is reported as is.
    WindowUpdate { stream_id: u32, increment: u32 },
    /// §6.10.
    Continuation {
        stream_id: u32,
        end_headers: bool,
        fragment: Vec<u8>,
    },
    /// An extension frame type (§4.1, §5.5): reported and skipped.
    Unknown {
        frame_type: u8,
        flags: u8,
        stream_id: u32,
        payload: Vec<u8>,
    },
}

/// Why a frame whose header framed it correctly is still invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Payload length not allowed for the type (FRAME_SIZE_ERROR: §6.3,
    /// §6.4, §6.5, §6.7, §6.9; too short for its fixed fields: §4.2).
    #[error("payload length {length} is invalid for {frame_type:?}")]
    Length { frame_type: FrameType, length: u32 },
    /// Padding longer than the room left (PROTOCOL_ERROR: §6.1, §6.2, §6.6).
    #[error("pad length {pad_length} exceeds the payload")]
    Padding { pad_length: u8 },
    /// Stream identifier 0 on a stream frame, or non-zero on a connection
    /// frame (PROTOCOL_ERROR: §6.1-§6.10).
    #[error("stream identifier {stream_id} is invalid for {frame_type:?}")]
    StreamId {
        frame_type: FrameType,
        stream_id: u32,
    },
}

/// A field block that could not be reassembled (§4.3, §6.10).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// A frame other than a CONTINUATION of the same stream arrived before
    /// END_HEADERS (§4.3: a field block is a contiguous sequence of frames;
    /// connection error PROTOCOL_ERROR). The partial block is dropped; the
    /// interrupting frame is decoded as usual (unless it is a CONTINUATION
    /// of another stream, which is dropped with the block).
    #[error("field block interrupted by {frame_type:?} on stream {by_stream_id}")]
    Interrupted {
        frame_type: FrameType,
        by_stream_id: u32,
    },
    /// The block grew past the configured bound; it is dropped and its
    /// remaining CONTINUATION frames are skipped.
    #[error("field block of {size} bytes exceeds the bound of {limit}")]
    TooLarge { size: usize, limit: usize },
    /// A CONTINUATION with no open block (§6.10: PROTOCOL_ERROR).
    #[error("CONTINUATION without a preceding HEADERS or PUSH_PROMISE")]
    UnexpectedContinuation,
    /// Bytes were lost (a gap or a resynchronization) while a block was
    /// open; the partial block is dropped.
    #[error("field block lost to a gap")]
    Lost,
}

/// A reassembled HEADERS field block (§4.3): the HPACK bytes of the
/// HEADERS frame and its CONTINUATION frames, padding removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderBlock {
    pub stream_id: u32,
    /// Raw HPACK (RFC 7541) field block.
    pub fragment: Vec<u8>,
    /// END_STREAM of the HEADERS frame (§6.2: CONTINUATION has none).
    pub end_stream: bool,
    pub priority: Option<PrioritySpec>,
}

/// What [`FrameDecoder`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameEvent {
    /// The client connection preface (§3.4) at the start of the stream.
    Preface,
    /// A frame other than HEADERS / PUSH_PROMISE / CONTINUATION.
    Frame(Frame),
    /// A complete HEADERS (+ CONTINUATION*) field block.
    HeaderBlock(HeaderBlock),
    /// A complete PUSH_PROMISE (+ CONTINUATION*) field block (§6.6; gRPC
    /// never pushes, so this is only reported).
    PushPromise {
        stream_id: u32,
        promised_stream_id: u32,
        fragment: Vec<u8>,
    },
    /// A well-framed but invalid frame; decoding continues after it.
    Malformed {
        header: FrameHeader,
        error: FrameError,
    },
    /// A field block could not be reassembled.
    BlockError { stream_id: u32, error: BlockError },
    /// `skipped` bytes were dropped (garbage, a mid-stream start, or partial
    /// state dropped by a gap) before the next frame.
    Resync { skipped: usize },
}

/// A bad [`FrameDecoder::with_config`] / [`FrameDecoder::set_max_frame_size`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameConfigError {
    #[error("max frame size {0} is outside {DEFAULT_MAX_FRAME_SIZE}..={MAX_MAX_FRAME_SIZE}")]
    MaxFrameSize(u32),
    #[error("max header block size must be positive")]
    MaxHeaderBlock,
}

fn u24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

/// A 31-bit identifier with its reserved / exclusive top bit cleared.
fn u31(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Length rule of a type given its flags (§6), before looking at padding.
fn length_ok(ty: FrameType, flags: u8, len: u32) -> bool {
    let padded = u32::from(flags & FLAG_PADDED != 0);
    match ty {
        FrameType::Data => len >= padded,
        FrameType::Headers => len >= padded + if flags & FLAG_PRIORITY != 0 { 5 } else { 0 },
        FrameType::Priority => len == 5,
        FrameType::RstStream | FrameType::WindowUpdate => len == 4,
        // §6.5: an ACK carries nothing; otherwise a multiple of 6 octets.
        FrameType::Settings => {
            if flags & FLAG_ACK != 0 {
                len == 0
            } else {
                len.is_multiple_of(6)
            }
        }
        FrameType::PushPromise => len >= padded + 4,
        FrameType::Ping => len == 8,
        FrameType::GoAway => len >= 8,
        FrameType::Continuation | FrameType::Unknown(_) => true,
    }
}

fn stream_ok(ty: FrameType, stream_id: u32) -> bool {
    match ty.stream_rule() {
        StreamRule::Zero => stream_id == 0,
        StreamRule::NonZero => stream_id != 0,
        StreamRule::Any => true,
    }
}

/// Validate a frame against its header without allocating; returns the
/// byte range of the content (data / field block fragment) after
/// stripping the Pad Length and fixed fields, and the padding.
fn check(h: &FrameHeader, payload: &[u8]) -> Result<(usize, usize, usize), FrameError> {
    let len = payload.len();
    if len as u64 != u64::from(h.length) || !length_ok(h.frame_type, h.flags, h.length) {
        return Err(FrameError::Length {
            frame_type: h.frame_type,
            length: len as u32,
        });
    }
    if !stream_ok(h.frame_type, h.stream_id) {
        return Err(FrameError::StreamId {
            frame_type: h.frame_type,
            stream_id: h.stream_id,
        });
    }
    let fixed = match h.frame_type {
        FrameType::Headers if h.has(FLAG_PRIORITY) => 5,
        FrameType::PushPromise => 4,
        _ => 0,
    };
    let paddable = matches!(
        h.frame_type,
        FrameType::Data | FrameType::Headers | FrameType::PushPromise
    );
    if paddable && h.has(FLAG_PADDED) {
        // length_ok guaranteed the Pad Length octet and fixed fields.
        let pad = payload[0];
        // §6.1/§6.2/§6.6: padding that reaches into (or past) the fixed
        // fields is a PROTOCOL_ERROR; an empty content is allowed.
        let start = 1 + fixed;
        if start + pad as usize > len {
            return Err(FrameError::Padding { pad_length: pad });
        }
        Ok((start, len - pad as usize, pad as usize))
    } else {
        Ok((fixed, len, 0))
    }
}

fn priority_at(b: &[u8]) -> PrioritySpec {
    PrioritySpec {
        exclusive: b[0] & 0x80 != 0,
        stream_dependency: u31(&b[..4]),
        weight: b[4],
    }
}

/// Decode one frame from its header and exactly `header.length` payload
/// bytes. Undefined flags are ignored (§4.1).
pub fn parse_frame(h: &FrameHeader, payload: &[u8]) -> Result<Frame, FrameError> {
    let (start, end, padding) = check(h, payload)?;
    let content = payload[start..end].to_vec();
    let pad_off = usize::from(h.has(FLAG_PADDED));
    Ok(match h.frame_type {
        FrameType::Data => Frame::Data {
            stream_id: h.stream_id,
            end_stream: h.has(FLAG_END_STREAM),
            data: content,
            padding,
        },
        FrameType::Headers => Frame::Headers {
            stream_id: h.stream_id,
            end_stream: h.has(FLAG_END_STREAM),
            end_headers: h.has(FLAG_END_HEADERS),
            priority: h
                .has(FLAG_PRIORITY)
                .then(|| priority_at(&payload[pad_off..])),
            fragment: content,
        },
        FrameType::Priority => Frame::Priority {
            stream_id: h.stream_id,
            priority: priority_at(payload),
        },
        FrameType::RstStream => Frame::RstStream {
            stream_id: h.stream_id,
            error_code: be32(payload),
        },
        FrameType::Settings => Frame::Settings {
            ack: h.has(FLAG_ACK),
            settings: payload
                .chunks_exact(6)
                .map(|c| (u16::from_be_bytes([c[0], c[1]]), be32(&c[2..])))
                .collect(),
        },
        FrameType::PushPromise => Frame::PushPromise {
            stream_id: h.stream_id,
            promised_stream_id: u31(&payload[pad_off..]),
            end_headers: h.has(FLAG_END_HEADERS),
            fragment: content,
        },
        FrameType::Ping => {
            let mut data = [0u8; 8];
            data.copy_from_slice(payload);
            Frame::Ping {
                ack: h.has(FLAG_ACK),
                data,
            }
        }
        FrameType::GoAway => Frame::GoAway {
            last_stream_id: u31(payload),
            error_code: be32(&payload[4..]),
            debug_data: payload[8..].to_vec(),
        },
        FrameType::WindowUpdate => Frame::WindowUpdate {
            stream_id: h.stream_id,
            increment: u31(payload),
        },
        FrameType::Continuation => Frame::Continuation {
            stream_id: h.stream_id,
            end_headers: h.has(FLAG_END_HEADERS),
            fragment: content,
        },
        FrameType::Unknown(t) => Frame::Unknown {
            frame_type: t,
            flags: h.flags,
            stream_id: h.stream_id,
            payload: content,
        },
    })
}

/// The framer layout of HTTP/2 frames.
///
/// In sync, only the length is checked (§4.2: longer than the maximum frame
/// size is not a frame we can follow); type, flags and stream rules are
/// validated per frame and reported, as §4.1 requires unknown types and
/// flags to be ignored. Hunting is far stricter (see [`FrameDecoder`]).
#[derive(Debug)]
pub(crate) struct H2Layout {
    /// Current maximum payload; a `Cell` because the framer owns the layout
    /// and only lends it out shared, and the peer's SETTINGS can change it.
    max_frame: Cell<usize>,
}

impl Layout for H2Layout {
    fn header_len(&self) -> usize {
        HEADER_LEN
    }

    fn max_payload(&self) -> usize {
        self.max_frame.get()
    }

    fn payload_len(&self, header: &[u8]) -> usize {
        if header.len() < 3 {
            return usize::MAX;
        }
        u24(header) as usize
    }

    fn acceptable(&self, header: &[u8]) -> bool {
        header.len() >= HEADER_LEN && u24(header) as usize <= self.max_frame.get()
    }

    fn plausible_prefix(&self, p: &[u8]) -> bool {
        // Length: its smallest completion (missing bytes zero) must fit.
        if !p.is_empty() {
            let mut b = [0u8; 3];
            let k = p.len().min(3);
            b[..k].copy_from_slice(&p[..k]);
            if u24(&b) as usize > self.max_frame.get() {
                return false;
            }
        }
        let Some(&t) = p.get(3) else {
            return true;
        };
        // Type: a defined one (an extension type is legal but gRPC peers
        // send none, and accepting 246 more values would multiply false
        // positives).
        let ty = FrameType::from_u8(t);
        if matches!(ty, FrameType::Unknown(_)) {
            return false;
        }
        let len = u24(p);
        let Some(&flags) = p.get(4) else {
            return true;
        };
        if flags & !ty.defined_flags() != 0 || !length_ok(ty, flags, len) {
            return false;
        }
        // Empty frames that peers never send: zero runs and payload bytes
        // must not read as them. An empty DATA with END_STREAM (half-close)
        // and an empty SETTINGS (no changes, or an ACK) are real.
        if len == 0 {
            let real = match ty {
                FrameType::Data => flags & FLAG_END_STREAM != 0,
                FrameType::Settings => true,
                _ => false,
            };
            if !real {
                return false;
            }
        }
        // A field block is only continued when its frame is full: encoders
        // (grpc-go, Go x/net/http2, h2, nghttp2) split a block at the max
        // frame size, never below the 16384 minimum (§4.2). A short frame
        // without END_HEADERS is legal (§6.2) but never seen, and zero-rich
        // payloads (SETTINGS values, protobuf) read as one all too easily.
        if matches!(
            ty,
            FrameType::Headers | FrameType::PushPromise | FrameType::Continuation
        ) && flags & FLAG_END_HEADERS == 0
            && len < DEFAULT_MAX_FRAME_SIZE
        {
            return false;
        }
        // Stream identifier: the reserved bit is never sent set (§4.1).
        let sid = &p[5.min(p.len())..p.len().min(HEADER_LEN)];
        if sid.first().is_some_and(|b| b & 0x80 != 0) {
            return false;
        }
        // gRPC streams are all client-initiated, hence odd (§5.1.1: servers
        // initiate even ones only by PUSH_PROMISE, which gRPC never uses).
        // This halves the chance that payload bytes pass for a header.
        let odd = sid.len() < 4 || sid[3] & 1 == 1;
        match ty.stream_rule() {
            StreamRule::Zero => sid.iter().all(|&b| b == 0),
            StreamRule::NonZero => odd,
            StreamRule::Any => odd || sid.iter().all(|&b| b == 0),
        }
    }

    fn payload_evidence(&self, header: &[u8], payload: &[u8]) -> bool {
        // Only a complete, valid payload supports a candidate whose next
        // header is not buffered yet (the framer has already checked the
        // partial next header, if any).
        let Some(h) = FrameHeader::parse(header) else {
            return false;
        };
        if payload.len() as u64 != u64::from(h.length) {
            return false;
        }
        let Ok((_, end, _)) = check(&h, payload) else {
            return false;
        };
        match h.frame_type {
            // §6.1/§6.2/§6.6: padding octets are sent as zero.
            FrameType::Data | FrameType::Headers | FrameType::PushPromise => {
                payload[end..].iter().all(|&b| b == 0)
            }
            FrameType::Priority => u31(payload) != h.stream_id,
            FrameType::RstStream => be32(payload) <= MAX_KNOWN_ERROR_CODE,
            FrameType::GoAway => {
                payload[0] & 0x80 == 0 && be32(&payload[4..]) <= MAX_KNOWN_ERROR_CODE
            }
            FrameType::WindowUpdate => payload[0] & 0x80 == 0 && u31(payload) != 0,
            FrameType::Settings => payload.chunks_exact(6).all(|c| {
                let v = be32(&c[2..]);
                match u16::from_be_bytes([c[0], c[1]]) {
                    SETTINGS_ENABLE_PUSH
                    | SETTINGS_ENABLE_CONNECT_PROTOCOL
                    | SETTINGS_NO_RFC7540_PRIORITIES => v <= 1,
                    SETTINGS_INITIAL_WINDOW_SIZE => v <= 0x7fff_ffff,
                    SETTINGS_MAX_FRAME_SIZE => {
                        (DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&v)
                    }
                    SETTINGS_HEADER_TABLE_SIZE
                    | SETTINGS_MAX_CONCURRENT_STREAMS
                    | SETTINGS_MAX_HEADER_LIST_SIZE => true,
                    _ => false,
                }
            }),
            FrameType::Ping | FrameType::Continuation => true,
            FrameType::Unknown(_) => false,
        }
    }
}

/// Where the client preface stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrefaceState {
    /// At the stream start, this many preface bytes matched so far (held
    /// here, not in the framer).
    Matching(usize),
    Done,
}

/// An open field block.
#[derive(Debug)]
enum Block {
    None,
    Headers {
        stream_id: u32,
        end_stream: bool,
        priority: Option<PrioritySpec>,
        fragment: Vec<u8>,
    },
    Push {
        stream_id: u32,
        promised_stream_id: u32,
        fragment: Vec<u8>,
    },
    /// Too large: skip its CONTINUATION frames until END_HEADERS.
    Discarding {
        stream_id: u32,
    },
}

impl Block {
    fn stream_id(&self) -> Option<u32> {
        match self {
            Block::None => None,
            Block::Headers { stream_id, .. }
            | Block::Push { stream_id, .. }
            | Block::Discarding { stream_id } => Some(*stream_id),
        }
    }

    fn held(&self) -> usize {
        match self {
            Block::Headers { fragment, .. } | Block::Push { fragment, .. } => fragment.len(),
            Block::None | Block::Discarding { .. } => 0,
        }
    }
}

/// Decodes one direction of an HTTP/2 connection into frames and field
/// blocks.
///
/// Feed the bytes of each chunk with [`FrameDecoder::push`], call
/// [`FrameDecoder::gap`] where bytes were lost, and drain events with
/// [`Iterator::next`] (or [`FrameDecoder::next_with_end`]) after each push.
/// Partial state is bounded by [`FrameDecoder::max_buffered`]: one frame
/// (header + max frame size) or the hunt window, plus one field block
/// (default 256 KiB), plus the 24-byte preface.
///
/// The maximum frame size is the receiver's SETTINGS_MAX_FRAME_SIZE
/// (§4.2, §6.5.2), i.e. what the *other* direction announced; a later stage
/// that sees it calls [`FrameDecoder::set_max_frame_size`]. Until then the
/// protocol default, 16384, applies.
///
/// A new decoder accepts the client preface at offset 0, then hunts for a
/// frame boundary, so it works from the first byte of either direction
/// (the first frame is accepted at offset 0 without a `Resync`) and when
/// attached mid-stream.
///
/// Resynchronization heuristic (the NRI framer's, with this header check):
/// a candidate header must have a length within the maximum frame size, a
/// defined type (0..=9), only flags defined for that type, a length allowed
/// for the type (PRIORITY 5, RST_STREAM / WINDOW_UPDATE 4, PING 8, SETTINGS a
/// multiple of 6 or 0 with ACK, GOAWAY >= 8, room for Pad Length and
/// priority fields), no empty frame but an END_STREAM DATA or a SETTINGS,
/// no HEADERS / PUSH_PROMISE / CONTINUATION without END_HEADERS shorter than
/// 16384 (encoders only continue full frames), the reserved bit clear, and
/// stream identifier 0 exactly for SETTINGS / PING / GOAWAY, odd for the
/// others (gRPC streams are client-initiated, §5.1.1), 0 or odd for
/// WINDOW_UPDATE. It is accepted
/// when the next header (at offset + 9 + length) is buffered and equally
/// plausible or, before the next header arrives, when the whole payload is
/// buffered and valid for the type (zero padding, known error codes and
/// settings, non-zero window increment). Otherwise it waits, within a 64 KiB
/// window. A field block cut by the resynchronization is reported as
/// [`BlockError::Lost`]; CONTINUATION frames of a block whose start was
/// skipped are reported as [`BlockError::UnexpectedContinuation`].
pub struct FrameDecoder {
    framer: Framer<H2Layout>,
    preface: PrefaceState,
    /// Stream offset of the framer's first byte (24 after a preface).
    framer_base: u64,
    block: Block,
    max_header_block: usize,
    out: VecDeque<(FrameEvent, Option<u64>)>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FrameDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("max_frame_size", &self.max_frame_size())
            .field("max_header_block", &self.max_header_block)
            .field("buffered", &self.buffered())
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

impl FrameDecoder {
    /// A decoder with the default maximum frame size (16384) and header
    /// block bound (256 KiB).
    pub fn new() -> Self {
        Self::build(DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_HEADER_BLOCK)
    }

    /// A decoder with another maximum frame size (16384..=2^24-1, §6.5.2)
    /// or header block bound.
    pub fn with_config(
        max_frame_size: u32,
        max_header_block: usize,
    ) -> Result<Self, FrameConfigError> {
        check_max_frame_size(max_frame_size)?;
        if max_header_block == 0 {
            return Err(FrameConfigError::MaxHeaderBlock);
        }
        Ok(Self::build(max_frame_size, max_header_block))
    }

    fn build(max_frame_size: u32, max_header_block: usize) -> Self {
        FrameDecoder {
            framer: Framer::new(
                H2Layout {
                    max_frame: Cell::new(max_frame_size as usize),
                },
                DEFAULT_HUNT_WINDOW,
            ),
            preface: PrefaceState::Matching(0),
            framer_base: 0,
            block: Block::None,
            max_header_block,
            out: VecDeque::new(),
        }
    }

    /// The current maximum frame payload.
    pub fn max_frame_size(&self) -> u32 {
        self.framer.layout().max_frame.get() as u32
    }

    /// Apply the SETTINGS_MAX_FRAME_SIZE the other direction announced
    /// (§6.5.2; takes effect for frames not yet decoded). Values outside
    /// 16384..=2^24-1 are a PROTOCOL_ERROR of the peer and are refused.
    /// Lowering it below a partial frame already held drops that frame (as a
    /// gap would).
    pub fn set_max_frame_size(&mut self, size: u32) -> Result<(), FrameConfigError> {
        check_max_frame_size(size)?;
        self.framer.layout().max_frame.set(size as usize);
        if self.framer.buffered() > self.framer.max_buffered() {
            self.gap();
        }
        Ok(())
    }

    /// Append the bytes of one chunk and decode what can be decoded.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if let PrefaceState::Matching(n) = self.preface {
            let want = &PREFACE[n..];
            let k = want.len().min(bytes.len());
            if bytes[..k] == want[..k] {
                if n + k < PREFACE.len() {
                    self.preface = PrefaceState::Matching(n + k);
                    return;
                }
                self.preface = PrefaceState::Done;
                self.framer_base = PREFACE.len() as u64;
                self.out
                    .push_back((FrameEvent::Preface, Some(PREFACE.len() as u64)));
                bytes = &bytes[k..];
            } else {
                // Not a preface (server direction): the held bytes are
                // the start of the frame stream.
                self.preface = PrefaceState::Done;
                self.framer.push(&PREFACE[..n]);
            }
        }
        self.framer.push(bytes);
        self.drain();
    }

    /// Bytes were lost here: drop partial state and resynchronize. The
    /// dropped bytes are counted in the next [`FrameEvent::Resync`]; an open
    /// field block is reported as [`BlockError::Lost`].
    pub fn gap(&mut self) {
        if let PrefaceState::Matching(n) = self.preface {
            // A preface can only start the stream; the held bytes become
            // dropped stream bytes.
            self.preface = PrefaceState::Done;
            self.framer.push(&PREFACE[..n]);
            self.drain();
        }
        self.framer.gap();
        self.lose_block();
    }

    /// Bytes held as partial state (not counting queued events).
    pub fn buffered(&self) -> usize {
        let preface = match self.preface {
            PrefaceState::Matching(n) => n,
            PrefaceState::Done => 0,
        };
        self.framer.buffered() + self.block.held() + preface
    }

    /// Upper bound of [`FrameDecoder::buffered`].
    pub fn max_buffered(&self) -> usize {
        self.framer.max_buffered() + self.max_header_block + PREFACE.len()
    }

    /// `false` while hunting for a frame boundary.
    pub fn is_synced(&self) -> bool {
        self.framer.is_synced()
    }

    /// The next decoded event with the stream offset just past its last byte
    /// (bytes pushed so far count from 0): for a field block, its last
    /// frame; for a block error, the frame that caused it. `None` for
    /// `Resync` and [`BlockError::Lost`].
    pub fn next_with_end(&mut self) -> Option<(FrameEvent, Option<u64>)> {
        self.out.pop_front()
    }

    fn lose_block(&mut self) {
        if let Some(stream_id) = self.block.stream_id() {
            self.block = Block::None;
            self.out.push_back((
                FrameEvent::BlockError {
                    stream_id,
                    error: BlockError::Lost,
                },
                None,
            ));
        }
    }

    fn drain(&mut self) {
        while let Some(raw) = self.framer.next() {
            match raw {
                RawEvent::Resync { skipped } => {
                    self.lose_block();
                    self.out.push_back((FrameEvent::Resync { skipped }, None));
                }
                RawEvent::Frame {
                    header,
                    payload,
                    end,
                } => {
                    let end = self.framer_base + end;
                    // The framer hands out MAX_HEADER (10) bytes.
                    if let Some(h) = FrameHeader::parse(&header) {
                        self.frame(h, &payload, end);
                    }
                }
            }
        }
    }

    fn emit(&mut self, ev: FrameEvent, end: u64) {
        self.out.push_back((ev, Some(end)));
    }

    /// A frame that is not a CONTINUATION arrived: an open block is cut.
    fn interrupt(&mut self, h: &FrameHeader, end: u64) {
        if let Some(stream_id) = self.block.stream_id() {
            self.block = Block::None;
            self.emit(
                FrameEvent::BlockError {
                    stream_id,
                    error: BlockError::Interrupted {
                        frame_type: h.frame_type,
                        by_stream_id: h.stream_id,
                    },
                },
                end,
            );
        }
    }

    fn frame(&mut self, h: FrameHeader, payload: &[u8], end: u64) {
        let frame = match parse_frame(&h, payload) {
            Ok(f) => f,
            Err(error) => {
                self.interrupt(&h, end);
                self.emit(FrameEvent::Malformed { header: h, error }, end);
                return;
            }
        };
        match frame {
            Frame::Headers {
                stream_id,
                end_stream,
                end_headers,
                priority,
                fragment,
            } => {
                self.interrupt(&h, end);
                self.block = Block::Headers {
                    stream_id,
                    end_stream,
                    priority,
                    fragment: Vec::new(),
                };
                self.extend_block(stream_id, &fragment, end_headers, end);
            }
            Frame::PushPromise {
                stream_id,
                promised_stream_id,
                end_headers,
                fragment,
            } => {
                self.interrupt(&h, end);
                self.block = Block::Push {
                    stream_id,
                    promised_stream_id,
                    fragment: Vec::new(),
                };
                self.extend_block(stream_id, &fragment, end_headers, end);
            }
            Frame::Continuation {
                stream_id,
                end_headers,
                fragment,
            } => match self.block.stream_id() {
                Some(open) if open == stream_id => {
                    self.extend_block(stream_id, &fragment, end_headers, end);
                }
                // §6.10: a CONTINUATION of another stream is as much an
                // interruption as any other frame; it cannot start a block,
                // so it goes with the cut one.
                Some(_) => self.interrupt(&h, end),
                None => self.emit(
                    FrameEvent::BlockError {
                        stream_id,
                        error: BlockError::UnexpectedContinuation,
                    },
                    end,
                ),
            },
            other => {
                self.interrupt(&h, end);
                self.emit(FrameEvent::Frame(other), end);
            }
        }
    }

    /// Append a fragment to the open block (whose stream is `stream_id`)
    /// and finish it on END_HEADERS.
    fn extend_block(&mut self, stream_id: u32, fragment: &[u8], end_headers: bool, end: u64) {
        let limit = self.max_header_block;
        let too_large = match &mut self.block {
            Block::Headers { fragment: f, .. } | Block::Push { fragment: f, .. } => {
                let size = f.len().saturating_add(fragment.len());
                if size > limit {
                    Some(size)
                } else {
                    f.extend_from_slice(fragment);
                    None
                }
            }
            Block::Discarding { .. } | Block::None => None,
        };
        if let Some(size) = too_large {
            self.block = Block::Discarding { stream_id };
            self.emit(
                FrameEvent::BlockError {
                    stream_id,
                    error: BlockError::TooLarge { size, limit },
                },
                end,
            );
        }
        if !end_headers {
            return;
        }
        match std::mem::replace(&mut self.block, Block::None) {
            Block::Headers {
                stream_id,
                end_stream,
                priority,
                fragment,
            } => self.emit(
                FrameEvent::HeaderBlock(HeaderBlock {
                    stream_id,
                    fragment,
                    end_stream,
                    priority,
                }),
                end,
            ),
            Block::Push {
                stream_id,
                promised_stream_id,
                fragment,
            } => self.emit(
                FrameEvent::PushPromise {
                    stream_id,
                    promised_stream_id,
                    fragment,
                },
                end,
            ),
            Block::Discarding { .. } | Block::None => {}
        }
    }
}

fn check_max_frame_size(size: u32) -> Result<(), FrameConfigError> {
    if (DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(FrameConfigError::MaxFrameSize(size))
    }
}

impl Iterator for FrameDecoder {
    type Item = FrameEvent;

    /// The next decoded event, or `None` until more bytes are pushed.
    fn next(&mut self) -> Option<FrameEvent> {
        self.next_with_end().map(|(e, _)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::test_strategies::{bytes, bytes_below, config, cuts, garbage_before};
    use proptest::prelude::*;
    use proptest::sample::Index;

    // ---- Test encodings (tests only). Frames are laid out by hand from
    // RFC 9113 §4.1 and §6; header blocks are the published HPACK blocks of
    // RFC 7541 Appendix C. They are not captures of a real peer: CRI
    // fixtures from containerd / kubelet captures come later. ----

    /// RFC 7541 C.3.1 (no Huffman): GET http / www.example.com.
    const C31: &[u8] = &[
        0x82, 0x86, 0x84, 0x41, 0x0f, 0x77, 0x77, 0x77, 0x2e, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c,
        0x65, 0x2e, 0x63, 0x6f, 0x6d,
    ];
    /// RFC 7541 C.4.1 (Huffman): the same request.
    const C41: &[u8] = &[
        0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90,
        0xf4, 0xff,
    ];
    /// RFC 7541 C.4.2 (Huffman): adds cache-control: no-cache.
    const C42: &[u8] = &[
        0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf,
    ];

    /// Test encoder: one frame (§4.1).
    fn tf(ty: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
        v.push(ty);
        v.push(flags);
        v.extend_from_slice(&stream_id.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    fn settings_payload(s: &[(u16, u32)]) -> Vec<u8> {
        s.iter()
            .flat_map(|(i, v)| i.to_be_bytes().into_iter().chain(v.to_be_bytes()))
            .collect()
    }

    /// A client-direction stream, as (wire unit, events it completes).
    /// The first unit is the preface.
    fn sample_units() -> Vec<(Vec<u8>, Vec<FrameEvent>)> {
        let settings = [(1u16, 4096u32), (4, 65535), (5, 16384)];
        // gRPC length-prefixed message: uncompressed, 5 bytes of protobuf.
        let grpc_msg = [0x00, 0, 0, 0, 5, 0x0a, 0x03, b'f', b'o', b'o'];
        let mut padded_data = vec![3u8];
        padded_data.extend_from_slice(&grpc_msg);
        padded_data.extend_from_slice(&[0, 0, 0]);
        // HEADERS with PADDED | PRIORITY | END_HEADERS: pad 2, exclusive
        // dependency on stream 1, weight 15, C.4.1, 2 zero pad octets.
        let mut prio_headers = vec![2u8, 0x80, 0, 0, 1, 15];
        prio_headers.extend_from_slice(C41);
        prio_headers.extend_from_slice(&[0, 0]);
        // C.3.1, then a literal field without indexing, new name (RFC 7541
        // §6.2.2) `x: aaa…` whose value length (an HPACK integer, §5.1)
        // makes the block 16400 bytes.
        let value_len = 16400 - C31.len() - 3 - 3;
        let mut big_block = C31.to_vec();
        big_block.extend_from_slice(&[0x00, 0x01, b'x']);
        let rest = value_len - 127;
        big_block.extend_from_slice(&[0x7f, 0x80 | (rest & 0x7f) as u8, (rest >> 7) as u8]);
        big_block.extend(std::iter::repeat_n(b'a', value_len));
        assert_eq!(big_block.len(), 16400);
        let mut goaway = vec![0, 0, 0, 3, 0, 0, 0, 0];
        goaway.extend_from_slice(b"bye");
        vec![
            (PREFACE.to_vec(), vec![FrameEvent::Preface]),
            (
                tf(4, 0, 0, &settings_payload(&settings)),
                vec![FrameEvent::Frame(Frame::Settings {
                    ack: false,
                    settings: settings.to_vec(),
                })],
            ),
            (
                tf(8, 0, 0, &983_041u32.to_be_bytes()),
                vec![FrameEvent::Frame(Frame::WindowUpdate {
                    stream_id: 0,
                    increment: 983_041,
                })],
            ),
            // A block larger than a frame: a full HEADERS (split at the max
            // frame size, as encoders do) + CONTINUATION.
            (tf(1, 0, 1, &big_block[..16384]), vec![]),
            (
                tf(9, FLAG_END_HEADERS, 1, &big_block[16384..]),
                vec![FrameEvent::HeaderBlock(HeaderBlock {
                    stream_id: 1,
                    fragment: big_block.clone(),
                    end_stream: false,
                    priority: None,
                })],
            ),
            (
                tf(0, FLAG_PADDED, 1, &padded_data),
                vec![FrameEvent::Frame(Frame::Data {
                    stream_id: 1,
                    end_stream: false,
                    data: grpc_msg.to_vec(),
                    padding: 3,
                })],
            ),
            (
                tf(0, FLAG_END_STREAM, 1, &[]),
                vec![FrameEvent::Frame(Frame::Data {
                    stream_id: 1,
                    end_stream: true,
                    data: vec![],
                    padding: 0,
                })],
            ),
            (
                tf(
                    1,
                    FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS,
                    3,
                    &prio_headers,
                ),
                vec![FrameEvent::HeaderBlock(HeaderBlock {
                    stream_id: 3,
                    fragment: C41.to_vec(),
                    end_stream: false,
                    priority: Some(PrioritySpec {
                        exclusive: true,
                        stream_dependency: 1,
                        weight: 15,
                    }),
                })],
            ),
            (
                tf(6, 0, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08"),
                vec![FrameEvent::Frame(Frame::Ping {
                    ack: false,
                    data: *b"\x01\x02\x03\x04\x05\x06\x07\x08",
                })],
            ),
            (
                tf(4, FLAG_ACK, 0, &[]),
                vec![FrameEvent::Frame(Frame::Settings {
                    ack: true,
                    settings: vec![],
                })],
            ),
            (
                tf(3, 0, 3, &8u32.to_be_bytes()),
                vec![FrameEvent::Frame(Frame::RstStream {
                    stream_id: 3,
                    error_code: 8,
                })],
            ),
            (
                tf(2, 0, 5, &[0, 0, 0, 3, 200]),
                vec![FrameEvent::Frame(Frame::Priority {
                    stream_id: 5,
                    priority: PrioritySpec {
                        exclusive: false,
                        stream_dependency: 3,
                        weight: 200,
                    },
                })],
            ),
            (
                tf(1, FLAG_END_HEADERS | FLAG_END_STREAM, 7, C42),
                vec![FrameEvent::HeaderBlock(HeaderBlock {
                    stream_id: 7,
                    fragment: C42.to_vec(),
                    end_stream: true,
                    priority: None,
                })],
            ),
            (
                tf(7, 0, 0, &goaway),
                vec![FrameEvent::Frame(Frame::GoAway {
                    last_stream_id: 3,
                    error_code: 0,
                    debug_data: b"bye".to_vec(),
                })],
            ),
        ]
    }

    fn sample() -> (Vec<u8>, Vec<(FrameEvent, Option<u64>)>) {
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for (bytes, evs) in sample_units() {
            wire.extend(bytes);
            for e in evs {
                want.push((e, Some(wire.len() as u64)));
            }
        }
        (wire, want)
    }

    fn drain(d: &mut FrameDecoder) -> Vec<(FrameEvent, Option<u64>)> {
        std::iter::from_fn(|| d.next_with_end()).collect()
    }

    fn decode_split(wire: &[u8], cuts: &[usize]) -> Vec<(FrameEvent, Option<u64>)> {
        let mut d = FrameDecoder::new();
        let mut out = Vec::new();
        let mut last = 0;
        for &c in cuts.iter().chain(std::iter::once(&wire.len())) {
            d.push(&wire[last..c]);
            last = c;
            assert!(d.buffered() <= d.max_buffered());
            out.extend(drain(&mut d));
        }
        out
    }

    fn events(v: Vec<(FrameEvent, Option<u64>)>) -> Vec<FrameEvent> {
        v.into_iter().map(|(e, _)| e).collect()
    }

    #[test]
    fn decodes_whole_stream_with_offsets() {
        let (wire, want) = sample();
        assert_eq!(decode_split(&wire, &[]), want);
    }

    #[test]
    fn server_direction_without_preface() {
        let (wire, want) = sample();
        let got = decode_split(&wire[PREFACE.len()..], &[]);
        let want: Vec<_> = want[1..]
            .iter()
            .map(|(e, end)| (e.clone(), end.map(|o| o - PREFACE.len() as u64)))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn every_single_split_point() {
        let (wire, want) = sample();
        for i in 0..=wire.len() {
            assert_eq!(decode_split(&wire, &[i]), want, "split at {i}");
        }
    }

    /// The sample without its 16 KiB block (for quadratic tests).
    fn small_sample() -> (Vec<u8>, Vec<FrameEvent>) {
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for (i, (bytes, evs)) in sample_units().into_iter().enumerate() {
            if i != 3 && i != 4 {
                wire.extend(bytes);
                want.extend(evs);
            }
        }
        (wire, want)
    }

    #[test]
    fn every_pair_of_split_points() {
        let (wire, want) = small_sample();
        for i in 0..=wire.len() {
            for j in i..=wire.len() {
                let got = events(decode_split(&wire, &[i, j]));
                assert_eq!(got, want, "split {i},{j}");
            }
        }
    }

    #[test]
    fn byte_at_a_time() {
        let (wire, want) = sample();
        let cuts: Vec<usize> = (1..wire.len()).collect();
        assert_eq!(decode_split(&wire, &cuts), want);
    }

    /// The preface, then a random sequence of fewer than 20 self-contained
    /// units of the sample (never the HEADERS that needs its CONTINUATION
    /// alone: picking either gives both), the events they make, and cuts.
    fn valid_sequence() -> impl Strategy<Value = (Vec<u8>, Vec<FrameEvent>, Vec<usize>)> {
        let n = sample_units().len();
        prop::collection::vec(1..n, 0..20).prop_flat_map(|picks| {
            let units = sample_units();
            let mut wire = PREFACE.to_vec();
            let mut want = vec![FrameEvent::Preface];
            for k in picks {
                let k = if k == 3 { 4 } else { k };
                if k == 4 {
                    wire.extend_from_slice(&units[3].0);
                }
                wire.extend_from_slice(&units[k].0);
                want.extend(units[k].1.iter().cloned());
            }
            let len = wire.len();
            (Just(wire), Just(want), cuts(len, 16))
        })
    }

    proptest! {
        #![proptest_config(config(300))]

        /// Random valid sequences decode to their events whatever the
        /// splits.
        #[test]
        fn random_splits_of_random_valid_sequences((wire, want, cuts) in valid_sequence()) {
            prop_assert_eq!(events(decode_split(&wire, &cuts)), want);
        }
    }

    #[test]
    fn mid_frame_start_resyncs_and_decodes_later_frames() {
        let units = sample_units();
        let (wire, _) = sample();
        let mut off = 0;
        for (i, (bytes, _)) in units.iter().enumerate() {
            let (start_i, end_i) = (off, off + bytes.len());
            off = end_i;
            // A start inside unit i must resync onto unit i + 1, unless that
            // is a CONTINUATION (the block start is lost: tested elsewhere).
            if i + 1 >= units.len() || i + 1 == 4 {
                continue;
            }
            let later: Vec<FrameEvent> = units[i + 1..]
                .iter()
                .flat_map(|(_, e)| e.iter().cloned())
                .collect();
            for start in start_i + 1..end_i {
                let got = events(decode_split(&wire[start..], &[]));
                assert_eq!(
                    got[0],
                    FrameEvent::Resync {
                        skipped: end_i - start
                    },
                    "unit {i} start {start}"
                );
                assert_eq!(&got[1..], &later[..], "unit {i} start {start}");
            }
        }
    }

    #[test]
    fn start_inside_a_block_reports_orphan_continuation() {
        let units = sample_units();
        let (wire, _) = sample();
        let hdr_start: usize = units[..3].iter().map(|u| u.0.len()).sum();
        let got = events(decode_split(&wire[hdr_start + 2..], &[]));
        assert_eq!(
            got[0],
            FrameEvent::Resync {
                skipped: units[3].0.len() - 2
            }
        );
        assert_eq!(
            got[1],
            FrameEvent::BlockError {
                stream_id: 1,
                error: BlockError::UnexpectedContinuation
            }
        );
        assert_eq!(got[2], units[5].1[0]);
    }

    /// Garbage holding no header start (`test_strategies::headerless_garbage`),
    /// then the sample without its preface, cut anywhere.
    fn garbage_then_body() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
        garbage_before(
            &sample().0[PREFACE.len()..],
            &[1, 3, 9, 13, 100, 1000, 20_000],
            20_000,
        )
    }

    proptest! {
        #![proptest_config(config(64))]

        /// All of the garbage is skipped, in one `Resync`, and every frame
        /// after it decodes, whatever the splits.
        #[test]
        fn garbage_prefix_resyncs((g, cuts) in garbage_then_body()) {
            let (wire, want) = sample();
            let mut s = g.clone();
            s.extend_from_slice(&wire[PREFACE.len()..]);
            let got = events(decode_split(&s, &cuts));
            prop_assert_eq!(&got[0], &FrameEvent::Resync { skipped: g.len() });
            let want: Vec<_> = events(want[1..].to_vec());
            prop_assert_eq!(&got[1..], &want[..]);
        }
    }

    #[test]
    fn gap_mid_block_and_mid_frame() {
        let units = sample_units();
        let (wire, _) = sample();
        let hdr_end: usize = units[..4].iter().map(|u| u.0.len()).sum();
        let mut d = FrameDecoder::new();
        // Up to the HEADERS frame and 3 bytes of its CONTINUATION.
        d.push(&wire[..hdr_end + 3]);
        let mut got = events(drain(&mut d));
        d.gap();
        // The rest of the CONTINUATION is lost; resume at the next frame.
        d.push(&wire[hdr_end + units[4].0.len()..]);
        got.extend(events(drain(&mut d)));
        assert_eq!(
            got[..3],
            [
                FrameEvent::Preface,
                units[1].1[0].clone(),
                units[2].1[0].clone()
            ]
        );
        assert_eq!(
            got[3],
            FrameEvent::BlockError {
                stream_id: 1,
                error: BlockError::Lost
            }
        );
        assert_eq!(got[4], FrameEvent::Resync { skipped: 3 });
        assert_eq!(got[5], units[5].1[0]);
        assert_eq!(got.last(), units.last().unwrap().1.last());
    }

    #[test]
    fn gap_inside_preface() {
        let (wire, want) = sample();
        let mut d = FrameDecoder::new();
        d.push(&wire[..10]);
        assert_eq!(d.buffered(), 10);
        d.gap();
        d.push(&wire[PREFACE.len()..]);
        let got = drain(&mut d);
        assert_eq!(got[0], (FrameEvent::Resync { skipped: 10 }, None));
        // Offsets keep counting the 10 bytes pushed (14 lost bytes aren't).
        assert_eq!(got[1].0, want[1].0);
        assert_eq!(got[1].1, want[1].1.map(|o| o - 14));
    }

    /// Sync a decoder on a lone SETTINGS frame first, so that malformed
    /// frames after it are met in sync (while hunting they are rejected).
    fn synced() -> FrameDecoder {
        let mut d = FrameDecoder::new();
        d.push(&tf(4, 0, 0, &[]));
        assert_eq!(
            d.next(),
            Some(FrameEvent::Frame(Frame::Settings {
                ack: false,
                settings: vec![]
            }))
        );
        assert!(d.is_synced());
        d
    }

    #[test]
    fn malformed_frames_are_reported_and_decoding_continues() {
        use FrameType as T;
        let cases: Vec<(Vec<u8>, FrameError)> = vec![
            (
                tf(3, 0, 1, &[0, 0, 8]),
                FrameError::Length {
                    frame_type: T::RstStream,
                    length: 3,
                },
            ),
            (
                tf(6, 0, 0, &[0; 7]),
                FrameError::Length {
                    frame_type: T::Ping,
                    length: 7,
                },
            ),
            (
                tf(8, 0, 1, &[0, 0, 0, 1, 0]),
                FrameError::Length {
                    frame_type: T::WindowUpdate,
                    length: 5,
                },
            ),
            (
                tf(4, 0, 0, &[0; 7]),
                FrameError::Length {
                    frame_type: T::Settings,
                    length: 7,
                },
            ),
            (
                tf(4, FLAG_ACK, 0, &[0, 1, 0, 0, 0, 0]),
                FrameError::Length {
                    frame_type: T::Settings,
                    length: 6,
                },
            ),
            (
                tf(2, 0, 1, &[0; 4]),
                FrameError::Length {
                    frame_type: T::Priority,
                    length: 4,
                },
            ),
            (
                tf(7, 0, 0, &[0; 7]),
                FrameError::Length {
                    frame_type: T::GoAway,
                    length: 7,
                },
            ),
            // §6.1: padding as long as the payload.
            (
                tf(0, FLAG_PADDED, 1, &[3, 0, 0]),
                FrameError::Padding { pad_length: 3 },
            ),
            // §6.2: padding eating into the priority fields.
            (
                tf(1, FLAG_PADDED | FLAG_PRIORITY, 1, &[2, 0, 0, 0, 0, 9, 0]),
                FrameError::Padding { pad_length: 2 },
            ),
            (
                tf(0, FLAG_PADDED, 1, &[]),
                FrameError::Length {
                    frame_type: T::Data,
                    length: 0,
                },
            ),
            (
                tf(0, 0, 0, b"x"),
                FrameError::StreamId {
                    frame_type: T::Data,
                    stream_id: 0,
                },
            ),
            (
                tf(4, 0, 1, &[]),
                FrameError::StreamId {
                    frame_type: T::Settings,
                    stream_id: 1,
                },
            ),
            (
                tf(9, FLAG_END_HEADERS, 0, b"x"),
                FrameError::StreamId {
                    frame_type: T::Continuation,
                    stream_id: 0,
                },
            ),
        ];
        for (bytes, error) in cases {
            let mut d = synced();
            d.push(&bytes);
            d.push(&tf(6, FLAG_ACK, 0, &[9; 8]));
            let got = drain(&mut d);
            let header = FrameHeader::parse(&bytes).unwrap();
            let end = (HEADER_LEN + bytes.len()) as u64;
            assert_eq!(
                got,
                vec![
                    (FrameEvent::Malformed { header, error }, Some(end)),
                    (
                        FrameEvent::Frame(Frame::Ping {
                            ack: true,
                            data: [9; 8]
                        }),
                        Some(end + 17)
                    ),
                ],
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn unknown_type_and_undefined_flags_are_ignored_in_sync() {
        let mut d = synced();
        // §4.1: unknown type reported and skipped; undefined flag 0x40 on
        // PING ignored; reserved bit of the stream id ignored.
        d.push(&tf(0xb, 0xff, 3, b"ext"));
        d.push(&tf(6, 0x40, 0, &[1; 8]));
        d.push(&tf(8, 0, 0x8000_0005, &[0x80, 0, 0, 1]));
        assert_eq!(
            events(drain(&mut d)),
            vec![
                FrameEvent::Frame(Frame::Unknown {
                    frame_type: 0xb,
                    flags: 0xff,
                    stream_id: 3,
                    payload: b"ext".to_vec()
                }),
                FrameEvent::Frame(Frame::Ping {
                    ack: false,
                    data: [1; 8]
                }),
                FrameEvent::Frame(Frame::WindowUpdate {
                    stream_id: 5,
                    increment: 1
                }),
            ]
        );
    }

    #[test]
    fn interleaved_frame_cuts_the_block() {
        let mut d = synced();
        d.push(&tf(1, 0, 1, &C31[..5]));
        d.push(&tf(6, 0, 0, &[0; 8]));
        d.push(&tf(9, FLAG_END_HEADERS, 1, &C31[5..]));
        // A CONTINUATION of another stream cuts too, and is dropped.
        d.push(&tf(1, FLAG_END_STREAM, 3, &C41[..4]));
        d.push(&tf(9, FLAG_END_HEADERS, 5, &C41[4..]));
        // Then a clean block.
        d.push(&tf(1, FLAG_END_STREAM, 7, &C41[..4]));
        d.push(&tf(9, 0, 7, &C41[4..8]));
        d.push(&tf(9, FLAG_END_HEADERS, 7, &C41[8..]));
        assert_eq!(
            events(drain(&mut d)),
            vec![
                FrameEvent::BlockError {
                    stream_id: 1,
                    error: BlockError::Interrupted {
                        frame_type: FrameType::Ping,
                        by_stream_id: 0
                    }
                },
                FrameEvent::Frame(Frame::Ping {
                    ack: false,
                    data: [0; 8]
                }),
                FrameEvent::BlockError {
                    stream_id: 1,
                    error: BlockError::UnexpectedContinuation
                },
                FrameEvent::BlockError {
                    stream_id: 3,
                    error: BlockError::Interrupted {
                        frame_type: FrameType::Continuation,
                        by_stream_id: 5
                    }
                },
                FrameEvent::HeaderBlock(HeaderBlock {
                    stream_id: 7,
                    fragment: C41.to_vec(),
                    end_stream: true,
                    priority: None
                }),
            ]
        );
    }

    #[test]
    fn header_block_bound() {
        let mut d = FrameDecoder::with_config(DEFAULT_MAX_FRAME_SIZE, 16).unwrap();
        d.push(&tf(4, 0, 0, &[]));
        d.push(&tf(1, 0, 1, &C31[..10]));
        d.push(&tf(9, 0, 1, &C31[10..]));
        assert!(d.buffered() <= d.max_buffered());
        d.push(&tf(9, FLAG_END_HEADERS, 1, b"more"));
        d.push(&tf(1, FLAG_END_HEADERS, 3, C42));
        let got = events(drain(&mut d));
        assert_eq!(
            got[1],
            FrameEvent::BlockError {
                stream_id: 1,
                error: BlockError::TooLarge {
                    size: 20,
                    limit: 16
                }
            }
        );
        // The rest of the big block is skipped silently; the next is fine.
        assert_eq!(
            got[2..],
            [FrameEvent::HeaderBlock(HeaderBlock {
                stream_id: 3,
                fragment: C42.to_vec(),
                end_stream: false,
                priority: None
            })]
        );
    }

    #[test]
    fn push_promise_is_reported() {
        let mut d = synced();
        let mut p = vec![0, 0, 0, 2];
        p.extend_from_slice(&C42[..3]);
        d.push(&tf(5, 0, 1, &p));
        d.push(&tf(9, FLAG_END_HEADERS, 1, &C42[3..]));
        assert_eq!(
            events(drain(&mut d)),
            vec![FrameEvent::PushPromise {
                stream_id: 1,
                promised_stream_id: 2,
                fragment: C42.to_vec()
            }]
        );
    }

    #[test]
    fn max_frame_size_is_configurable() {
        let big = vec![7u8; 20_000];
        let frame = tf(0, FLAG_END_STREAM, 1, &big);
        // Default 16384: too long to be a frame (§4.2), so it is skipped.
        let mut d = synced();
        d.push(&frame);
        d.push(&tf(6, 0, 0, &[0; 8]));
        let got = events(drain(&mut d));
        assert_eq!(
            got[0],
            FrameEvent::Resync {
                skipped: frame.len()
            }
        );
        assert!(matches!(got[1], FrameEvent::Frame(Frame::Ping { .. })));
        // After the peer's SETTINGS_MAX_FRAME_SIZE = 2^20 it decodes.
        let mut d = synced();
        assert_eq!(
            d.set_max_frame_size(100),
            Err(FrameConfigError::MaxFrameSize(100))
        );
        assert!(d.set_max_frame_size(MAX_MAX_FRAME_SIZE + 1).is_err());
        d.set_max_frame_size(1 << 20).unwrap();
        assert_eq!(d.max_frame_size(), 1 << 20);
        d.push(&frame);
        assert_eq!(
            d.next(),
            Some(FrameEvent::Frame(Frame::Data {
                stream_id: 1,
                end_stream: true,
                data: big,
                padding: 0
            }))
        );
        // Lowering it below a partial frame held drops that frame.
        d.push(&frame[..18_000]);
        d.set_max_frame_size(DEFAULT_MAX_FRAME_SIZE).unwrap();
        assert!(d.buffered() <= d.max_buffered());
    }

    #[test]
    fn parse_frame_matches_rfc_layouts() {
        // §6.8 GOAWAY with the reserved bit set on last-stream-id (ignored)
        // and ENHANCE_YOUR_CALM.
        let b = tf(7, 0, 0, &[0x80, 0, 0, 9, 0, 0, 0, 0xb, b'x']);
        let h = FrameHeader::parse(&b).unwrap();
        assert_eq!(
            h,
            FrameHeader {
                length: 9,
                frame_type: FrameType::GoAway,
                flags: 0,
                stream_id: 0
            }
        );
        assert_eq!(
            parse_frame(&h, &b[HEADER_LEN..]),
            Ok(Frame::GoAway {
                last_stream_id: 9,
                error_code: 0xb,
                debug_data: b"x".to_vec()
            })
        );
        assert_eq!(error_code_name(0xb), Some("ENHANCE_YOUR_CALM"));
        assert_eq!(error_code_name(0xe), None);
        // A declared length that differs from the payload given.
        assert!(parse_frame(&h, &b[HEADER_LEN + 1..]).is_err());
        // §6.1: a padded DATA may carry no data at all.
        let b = tf(0, FLAG_PADDED, 1, &[2, 0, 0]);
        let h = FrameHeader::parse(&b).unwrap();
        assert_eq!(
            parse_frame(&h, &b[HEADER_LEN..]),
            Ok(Frame::Data {
                stream_id: 1,
                end_stream: false,
                data: vec![],
                padding: 2
            })
        );
        for t in 0..=255u8 {
            assert_eq!(FrameType::from_u8(t).as_u8(), t);
        }
    }

    /// Input for the never-panic property: random bytes, or the sample
    /// with 1 to 8 random bytes overwritten.
    fn damaged_input() -> impl Strategy<Value = Vec<u8>> {
        let damage = prop::collection::vec((any::<Index>(), any::<u8>()), 1..=8);
        prop_oneof![
            bytes_below(6000),
            damage.prop_map(|damage| {
                let (mut wire, _) = sample();
                for (at, b) in damage {
                    let at = at.index(wire.len());
                    wire[at] = b;
                }
                wire
            }),
        ]
    }

    /// How the never-panic property feeds its input: a push of 1 to 700
    /// bytes, then a gap one time in ten, and one time in twenty a new
    /// maximum frame size (valid or not) from the peer's SETTINGS.
    fn feed_step() -> impl Strategy<Value = (usize, bool, Option<u32>)> {
        (
            1usize..=700,
            prop::bool::weighted(0.1),
            prop::option::weighted(0.05, 0u32..1 << 20),
        )
    }

    proptest! {
        #![proptest_config(config(400))]

        /// Arbitrary or damaged input, split, with gaps and maximum frame
        /// size changes, never panics; partial state stays within its bound
        /// and no frame ends past the bytes pushed.
        #[test]
        fn arbitrary_bytes_never_panic_and_stay_bounded(
            big_max in prop::bool::weighted(1.0 / 3.0),
            input in damaged_input(),
            // Used in turn, cycling, until the input is all pushed.
            steps in prop::collection::vec(feed_step(), 1..=64),
        ) {
            let mut d = if big_max {
                FrameDecoder::with_config(MAX_MAX_FRAME_SIZE, 64).unwrap()
            } else {
                FrameDecoder::new()
            };
            let mut pos = 0;
            for &(n, gap, max_frame) in steps.iter().cycle() {
                if pos >= input.len() {
                    break;
                }
                let end = (pos + n).min(input.len());
                d.push(&input[pos..end]);
                pos = end;
                if gap {
                    d.gap();
                }
                if let Some(m) = max_frame {
                    let _ = d.set_max_frame_size(DEFAULT_MAX_FRAME_SIZE + m);
                }
                prop_assert!(d.buffered() <= d.max_buffered());
                for (e, end) in std::iter::from_fn(|| d.next_with_end()) {
                    if let Some(end) = end {
                        prop_assert!(end <= input.len() as u64, "{:?}", e);
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(config(2))]

        /// A long run of random bytes (200 pushes of 4 KiB on one decoder)
        /// never panics, and partial state stays within its bound.
        #[test]
        fn long_random_stream_is_bounded(
            chunks in prop::collection::vec(bytes(Just(4096usize)), 200),
        ) {
            let mut d = FrameDecoder::new();
            for chunk in chunks {
                d.push(&chunk);
                prop_assert!(d.buffered() <= d.max_buffered());
                d.by_ref().for_each(drop);
            }
        }
    }
}
